//! The Prometheus metrics of the binary, in one explicit registry (prefix `sidecar_injector_`).

use std::collections::BTreeSet;
use std::sync::Mutex;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

pub(crate) mod tumblr;

use crate::admission::{AdmissionResult, SidecarResult};
use crate::workload::WorkloadKind;

/// Label values are types, so a typo cannot start a new series; each prints as its label.
macro_rules! label_value {
    ($type:ty) => {
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

/// A label value of a type of the core's, which knows nothing of Prometheus.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Label<T>(pub(crate) T);

macro_rules! core_label_value {
    ($type:ty) => {
        impl EncodeLabelValue for Label<$type> {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.0.as_str(), encoder)
            }
        }
    };
}

core_label_value!(SidecarResult);
core_label_value!(WorkloadKind);

/// How `/mutate` answered: a review's outcome, or an HTTP error before one could be read.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum RequestResult {
    Answered(AdmissionResult),
    BadRequest,
    UnsupportedMediaType,
    PayloadTooLarge,
    Timeout,
    /// The byte budget or every review slot was in use.
    Busy,
    /// The review did not finish within --review-timeout.
    ReviewTimeout,
}

impl RequestResult {
    /// Every result, for series that start at zero.
    pub(crate) const ALL: [RequestResult; 11] = [
        RequestResult::Answered(AdmissionResult::Injected),
        RequestResult::Answered(AdmissionResult::Skipped),
        RequestResult::Answered(AdmissionResult::Denied),
        RequestResult::Answered(AdmissionResult::NotAPod),
        RequestResult::Answered(AdmissionResult::InvalidPod),
        RequestResult::BadRequest,
        RequestResult::UnsupportedMediaType,
        RequestResult::PayloadTooLarge,
        RequestResult::Timeout,
        RequestResult::Busy,
        RequestResult::ReviewTimeout,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestResult::Answered(result) => result.as_str(),
            RequestResult::BadRequest => "bad_request",
            RequestResult::UnsupportedMediaType => "unsupported_media_type",
            RequestResult::PayloadTooLarge => "payload_too_large",
            RequestResult::Timeout => "timeout",
            RequestResult::Busy => "busy",
            RequestResult::ReviewTimeout => "review_timeout",
        }
    }
}
label_value!(RequestResult);

/// What happened to a workload the engine handled (`sidecar_injector_rollouts_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum RolloutResult {
    Restarted,
    /// The restart request failed; the next plan retries it.
    Error,
    Succeeded,
    Failed,
    Evicted,
    /// A PodDisruptionBudget refused the eviction (429); retried later.
    EvictionBlocked,
    /// A pod's sidecar images were patched in place.
    UpgradedInPlace,
    /// An in-place upgrade of a pod failed (its restart fails with it).
    InPlaceFailed,
}

impl RolloutResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RolloutResult::Restarted => "restarted",
            RolloutResult::Error => "error",
            RolloutResult::Succeeded => "succeeded",
            RolloutResult::Failed => "failed",
            RolloutResult::Evicted => "evicted",
            RolloutResult::EvictionBlocked => "eviction_blocked",
            RolloutResult::UpgradedInPlace => "upgraded_in_place",
            RolloutResult::InPlaceFailed => "in_place_failed",
        }
    }
}
label_value!(RolloutResult);

/// What became of a `--notify-url` notice (`sidecar_injector_notifications_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum NotificationResult {
    Sent,
    /// Every attempt failed.
    Failed,
    /// The queue was full.
    Dropped,
}

impl NotificationResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NotificationResult::Sent => "sent",
            NotificationResult::Failed => "failed",
            NotificationResult::Dropped => "dropped",
        }
    }
}
label_value!(NotificationResult);

/// A metric check's evaluation (`sidecar_injector_metric_checks_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CheckLabels {
    /// `SIDECAR/CHECK`.
    pub(crate) check: String,
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NotificationLabels {
    pub(crate) event: &'static str,
    pub(crate) result: NotificationResult,
}

/// A reload's outcome, for configs and certificates alike.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum ReloadResult {
    Success,
    Error,
}

impl ReloadResult {
    pub(crate) fn of(ok: bool) -> Self {
        if ok {
            ReloadResult::Success
        } else {
            ReloadResult::Error
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Success => "success",
            ReloadResult::Error => "error",
        }
    }
}
label_value!(ReloadResult);

/// The engine's own API calls by purpose (`sidecar_injector_rollout_api_requests_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum EngineCall {
    Patch,
    Evict,
    Event,
    Status,
    /// Reading a baking workload's pods.
    ReadPod,
    /// Patching a pod's sidecar images in place.
    PatchPod,
    ResizePod,
}

impl EngineCall {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EngineCall::Patch => "patch",
            EngineCall::Evict => "evict",
            EngineCall::Event => "event",
            EngineCall::Status => "status",
            EngineCall::ReadPod => "read_pod",
            EngineCall::PatchPod => "patch_pod",
            EngineCall::ResizePod => "resize_pod",
        }
    }
}
label_value!(EngineCall);

/// An exemplar's label: the trace of the request or plan observed (`serve --otlp-endpoint`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TraceLabels {
    pub(crate) trace_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: RequestResult,
}

/// The two ports `serve` listens on.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Port {
    /// `--tls-port`: the admission webhook.
    Webhook,
    /// `--lifecycle-port`: probes and metrics.
    Lifecycle,
}

impl Port {
    pub(crate) const ALL: [Port; 2] = [Port::Webhook, Port::Lifecycle];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Port::Webhook => "webhook",
            Port::Lifecycle => "lifecycle",
        }
    }
}
label_value!(Port);

mod labels;
pub(crate) use labels::*;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) admission_requests: Family<ResultLabels, Counter>,
    pub(crate) admission_duration: Family<ResultLabels, HistogramWithExemplars<TraceLabels>>,
    pub(crate) injections: Family<InjectionLabels, Counter>,
    pub(crate) config_reloads: Family<ReloadLabels, Counter>,
    pub(crate) configs_loaded: Family<SourceLabels, Gauge>,
    /// 1 while the last load of a source failed (a level to alert on; the counter above only
    /// says that some load failed once).
    pub(crate) config_source_failing: Family<SourceLabels, Gauge>,
    pub(crate) certificate_reloads: Family<CertificateLabels, Counter>,
    /// `--injection=policy`: applies of the admission policies, by result.
    pub(crate) policy_writes: Family<CertificateLabels, Counter>,
    /// 1 while the last apply of the admission policies failed or was refused (the policies
    /// in force stay), else 0.
    pub(crate) policy_failing: Gauge,
    /// Connections closed at accept because the port's cap was reached.
    pub(crate) connections_refused: Family<PortLabels, Counter>,
    pub(crate) other_annotation_namespace: Counter,
    pub(crate) certificate_expiration: Gauge,
    pub(crate) pods: Family<DriftLabels, Gauge>,
    pub(crate) rollouts: Family<RolloutLabels, Counter>,
    pub(crate) campaigns: Family<CampaignLabels, Gauge>,
    pub(crate) rollouts_in_flight: Gauge,
    pub(crate) rollout_pending: Family<SidecarLabels, Gauge>,
    pub(crate) maintenance_window_open: Gauge,
    pub(crate) rollout_leader: Gauge,
    /// Bytes of the campaign book the status ConfigMap holds, as this replica last wrote or
    /// found it while leading (0 otherwise).
    pub(crate) rollout_book: Gauge,
    /// 1 for the rollout mode this replica runs in (off when it has no engine).
    pub(crate) rollout_mode: Family<ModeLabels, Gauge>,
    pub(crate) notifications: Family<NotificationLabels, Counter>,
    pub(crate) metric_checks: Family<CheckLabels, Counter>,
    pub(crate) rollout_api_requests: Family<CallLabels, Counter>,
    pub(crate) rollout_api_errors: Family<CallLabels, Counter>,
    pub(crate) kube_requests: Family<VerbLabels, Counter>,
    /// Each API request's wait for the client-side rate limit.
    pub(crate) kube_rate_limiter_wait: Histogram,
    /// Each plan of the rollout engine, from the index to its decisions.
    pub(crate) rollout_plan_duration: HistogramWithExemplars<TraceLabels>,
    /// Each update of the drift gauge from the index's changes.
    pub(crate) drift_gauge_update_duration: Family<GaugeUpdateLabels, Histogram>,
    /// Tumblr's series too, with `serve --tumblr-metrics`.
    pub(crate) tumblr: Option<tumblr::TumblrMetrics>,
    /// The sidecars the drift gauge has series for.
    drift_sidecars: Mutex<BTreeSet<String>>,
    /// The sidecars the campaign gauges have series for.
    campaign_sidecars: Mutex<BTreeSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The metrics, registered in exposition order.
    pub(crate) fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("sidecar_injector"),
            admission_requests: Family::<ResultLabels, Counter>::default(),
            // 50 µs to about 6.6 s: a decision takes microseconds; the tail shows trouble, up to
            // past the API server's webhook timeout (deploy/ sets 5 s), which an alert compares to.
            admission_duration:
                Family::<ResultLabels, HistogramWithExemplars<TraceLabels>>::new_with_constructor(
                    || HistogramWithExemplars::new(exponential_buckets(0.000_05, 2.0, 18)),
                ),
            injections: Family::<InjectionLabels, Counter>::default(),
            config_reloads: Family::<ReloadLabels, Counter>::default(),
            configs_loaded: Family::<SourceLabels, Gauge>::default(),
            config_source_failing: Family::<SourceLabels, Gauge>::default(),
            certificate_reloads: Family::<CertificateLabels, Counter>::default(),
            policy_writes: Family::<CertificateLabels, Counter>::default(),
            policy_failing: Gauge::default(),
            other_annotation_namespace: Counter::default(),
            connections_refused: Family::<PortLabels, Counter>::default(),
            certificate_expiration: Gauge::default(),
            pods: Family::<DriftLabels, Gauge>::default(),
            rollouts: Family::<RolloutLabels, Counter>::default(),
            campaigns: Family::<CampaignLabels, Gauge>::default(),
            rollouts_in_flight: Gauge::default(),
            rollout_pending: Family::<SidecarLabels, Gauge>::default(),
            maintenance_window_open: Gauge::default(),
            rollout_leader: Gauge::default(),
            rollout_book: Gauge::default(),
            rollout_mode: Family::<ModeLabels, Gauge>::default(),
            notifications: Family::<NotificationLabels, Counter>::default(),
            metric_checks: Family::<CheckLabels, Counter>::default(),
            rollout_api_requests: Family::<CallLabels, Counter>::default(),
            rollout_api_errors: Family::<CallLabels, Counter>::default(),
            kube_requests: Family::<VerbLabels, Counter>::default(),
            kube_rate_limiter_wait: rate_limiter_histogram(),
            rollout_plan_duration: HistogramWithExemplars::new(INDEX_HOLD_BUCKETS.into_iter()),
            drift_gauge_update_duration:
                Family::<GaugeUpdateLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(INDEX_HOLD_BUCKETS)
                }),
            tumblr: None,
            drift_sidecars: Mutex::default(),
            campaign_sidecars: Mutex::default(),
        };
        metrics.register_webhook();
        metrics.register_rollout();
        metrics.register_client();
        metrics.start_at_zero();
        metrics
    }

    /// The webhook's series, and those of the configs and the certificate it serves.
    fn register_webhook(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "admission_requests",
            "AdmissionReview requests answered, by result (injected, skipped, denied, not_a_pod, invalid_pod, or the HTTP error)",
            self.admission_requests.clone(),
        );
        registry.register_with_unit(
            "admission_duration",
            "Time from request received to reply, by result",
            Unit::Seconds,
            self.admission_duration.clone(),
        );
        registry.register(
            "injections",
            "Requested sidecars by outcome (injected, not_found, name_clash, does_not_fit); unknown names are labelled (unknown)",
            self.injections.clone(),
        );
        registry.register(
            "config_reloads",
            "Loads of a sidecar config source, by source and result (success, or error when any config in it failed)",
            self.config_reloads.clone(),
        );
        registry.register(
            "configs_loaded",
            "Sidecar configs currently served, by source",
            self.configs_loaded.clone(),
        );
        registry.register(
            "config_source_failing",
            "1 while the last load of a config source failed (a config in it is broken; its last good version, if any, is served), else 0",
            self.config_source_failing.clone(),
        );
        registry.register(
            "certificate_reloads",
            "Reloads of the serving certificate, by result; on error the previous pair keeps serving",
            self.certificate_reloads.clone(),
        );
        registry.register(
            "policy_writes",
            "With --injection=policy: applies of the admission policies, by result; on error (a config the policies cannot express, or the API server refusing) the policies in force stay",
            self.policy_writes.clone(),
        );
        registry.register(
            "policy_failing",
            "With --injection=policy: 1 while the last apply of the admission policies failed or was refused (the policies in force stay), else 0",
            self.policy_failing.clone(),
        );
        registry.register(
            "requests_other_annotation_namespace",
            "Pods let through uninjected because they request sidecars under another annotation namespace than --annotation-namespace (e.g. injector.tumblr.com)",
            self.other_annotation_namespace.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept, by port: on the webhook port because --max-connections were already open, on the lifecycle port because its fixed cap was reached",
            self.connections_refused.clone(),
        );
        registry.register_with_unit(
            "certificate_expiration_timestamp",
            "When the serving certificate in use expires (Unix time), as cert-manager exports it",
            Unit::Seconds,
            self.certificate_expiration.clone(),
        );
    }

    /// The drift gauge's and the rollout engine's series.
    fn register_rollout(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "pods",
            "Pods that request a sidecar, by sidecar and drift state (excluded, orphaned, uninjected, unknown, stale, current)",
            self.pods.clone(),
        );
        registry.register(
            "rollouts",
            "Rollout engine actions by workload kind and result (restarted, succeeded, failed, evicted, eviction_blocked, error)",
            self.rollouts.clone(),
        );
        registry.register(
            "rollout_campaign",
            "1 for the state each sidecar's rollout campaign is in (settling, running, paused, complete, manual, gated), 0 for the others",
            self.campaigns.clone(),
        );
        registry.register(
            "rollouts_in_flight",
            "Workloads restarted by the engine and not yet rolled out",
            self.rollouts_in_flight.clone(),
        );
        registry.register(
            "rollout_pending",
            "Workloads of each sidecar's campaign still to restart (waiting for a window, a slot, the canary...)",
            self.rollout_pending.clone(),
        );
        registry.register(
            "maintenance_window_open",
            "1 while a --maintenance-window is open (or none is set), 0 while restarts wait for one",
            self.maintenance_window_open.clone(),
        );
        self.maintenance_window_open.set(1);
        registry.register(
            "rollout_leader",
            "1 while this replica holds the rollout Lease and may act",
            self.rollout_leader.clone(),
        );
        registry.register_with_unit(
            "rollout_book",
            "Size of the campaign book (campaigns, failed workloads, held and pinned configs) in the status ConfigMap, as the rollout leader wrote it (0 on other replicas)",
            Unit::Bytes,
            self.rollout_book.clone(),
        );
        let rollout_book_budget = Gauge::<i64>::default();
        registry.register_with_unit(
            "rollout_book_budget",
            "Size of the campaign book at which no restart starts until it shrinks (the status ConfigMap holds at most 1 MiB)",
            Unit::Bytes,
            rollout_book_budget.clone(),
        );
        rollout_book_budget
            .set(i64::try_from(crate::rollout::BOOK_BUDGET_BYTES).expect("the budget fits an i64"));
        registry.register(
            "rollout_mode",
            "1 for the --rollout mode this replica runs (auto, dry-run, or off, also when it has no cluster)",
            self.rollout_mode.clone(),
        );
        registry.register(
            "notifications",
            "Campaign notices for --notify-url by event (started, paused, completed) and result (sent, failed after every retry, dropped from a full queue)",
            self.notifications.clone(),
        );
        registry.register(
            "metric_checks",
            "Evaluations of the bakes' metric checks by check (SIDECAR/CHECK) and outcome (pass; fail: the threshold crossed, or no value with whenUnknown: fail; unknown: no value)",
            self.metric_checks.clone(),
        );
    }

    /// The API client's series, the engine's timings and the build.
    fn register_client(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "rollout_api_requests",
            "Requests the rollout engine made to the API server, by verb (patch, evict, event, status, lease reads excluded)",
            self.rollout_api_requests.clone(),
        );
        registry.register(
            "rollout_api_errors",
            "Rollout engine requests that failed, by verb (each is retried on a later plan)",
            self.rollout_api_errors.clone(),
        );
        registry.register(
            "kube_requests",
            "Requests this process sent to the Kubernetes API server, by verb and resource as the API server names them (a watch counts once, when it starts)",
            self.kube_requests.clone(),
        );
        registry.register_with_unit(
            "kube_rate_limiter_duration",
            "Time each request to the Kubernetes API server waited for the client-side rate limit (--kube-api-qps, --kube-api-burst)",
            Unit::Seconds,
            self.kube_rate_limiter_wait.clone(),
        );
        registry.register_with_unit(
            "rollout_plan_duration",
            "Time each plan of the rollout engine took, from the index to its decisions (the index is locked meanwhile)",
            Unit::Seconds,
            self.rollout_plan_duration.clone(),
        );
        registry.register_with_unit(
            "drift_gauge_update_duration",
            "Time each update of the drift gauge took from the pod, workload and config changes since the last, once it held the index, by what it counted again: the changed pods, the pods of a changed revision, or every pod",
            Unit::Seconds,
            self.drift_gauge_update_duration.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "Build information; always 1",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: crate::COMMIT,
            })
            .set(1);
    }

    /// Counters an alert takes increase() or a ratio of exist from the start at 0, so the
    /// first error is an increase and not the appearance of a series.
    fn start_at_zero(&self) {
        for result in RequestResult::ALL {
            self.admission_requests
                .get_or_create(&ResultLabels { result })
                .inc_by(0);
        }
        for port in Port::ALL {
            self.connections_refused
                .get_or_create(&PortLabels { port })
                .inc_by(0);
        }
        for ok in [true, false] {
            self.certificate_reloads
                .get_or_create(&CertificateLabels {
                    result: ReloadResult::of(ok),
                })
                .inc_by(0);
        }
    }

    /// Replaces the drift gauge with the report's counts (sidecars that went away disappear).
    /// Series are set in place and only those of sidecars gone are removed: a scrape taken
    /// meanwhile sees each series, old value or new, never a gap (which would restart an
    /// alert's `for`).
    pub(crate) fn record_drift(&self, report: &crate::drift::DriftReport) {
        let mut recorded = self.drift_sidecars.lock().expect("metrics lock");
        // An orphaned sidecar's name is whatever a pod requested: quoted as any text a pod's
        // creator wrote, so that no label value is longer than 64 characters and an ellipsis.
        let label = |name: &str| crate::name::quoted(name);
        for sidecar in &report.sidecars {
            for state in crate::drift::DriftState::POD_STATES {
                self.pods
                    .get_or_create(&DriftLabels {
                        sidecar: label(&sidecar.name),
                        state: state.as_str(),
                    })
                    .set(i64::from(sidecar.pods.get(state)));
            }
        }
        let now: BTreeSet<String> = report.sidecars.iter().map(|s| label(&s.name)).collect();
        for gone in recorded.difference(&now) {
            for state in crate::drift::DriftState::POD_STATES {
                self.pods.remove(&DriftLabels {
                    sidecar: gone.clone(),
                    state: state.as_str(),
                });
            }
        }
        *recorded = now;
    }

    pub(crate) fn record_rollout(&self, kind: WorkloadKind, result: RolloutResult) {
        self.rollouts
            .get_or_create(&RolloutLabels {
                kind: Label(kind),
                result,
            })
            .inc();
    }

    pub(crate) fn record_check(&self, check: &str, outcome: crate::rollout::analysis::Outcome) {
        use crate::rollout::analysis::Outcome;
        let outcome = match outcome {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Unknown => "unknown",
        };
        self.metric_checks
            .get_or_create(&CheckLabels {
                check: check.to_owned(),
                outcome,
            })
            .inc();
    }

    pub(crate) fn record_notification(
        &self,
        event: crate::rollout::notice::NoticeEvent,
        result: NotificationResult,
    ) {
        self.notifications
            .get_or_create(&NotificationLabels {
                event: event.as_str(),
                result,
            })
            .inc();
    }

    pub(crate) fn record_api_error(&self, verb: EngineCall) {
        self.rollout_api_errors
            .get_or_create(&CallLabels { verb })
            .inc();
    }

    pub(crate) fn record_api_request(&self, verb: EngineCall) {
        self.rollout_api_requests
            .get_or_create(&CallLabels { verb })
            .inc();
    }

    /// Replaces the campaign gauges with the book's states, in place as
    /// [`Metrics::record_drift`] does.
    pub(crate) fn record_campaigns(&self, book: &crate::rollout::CampaignBook) {
        let mut recorded = self.campaign_sidecars.lock().expect("metrics lock");
        self.maintenance_window_open
            .set(i64::from(book.maintenance.as_ref().is_none_or(|m| m.open)));
        for (sidecar, campaign) in &book.campaigns {
            self.rollout_pending
                .get_or_create(&SidecarLabels {
                    sidecar: sidecar.clone(),
                })
                .set(i64::from(campaign.counts.pending));
            for state in crate::rollout::CampaignState::ALL {
                self.campaigns
                    .get_or_create(&CampaignLabels {
                        sidecar: sidecar.clone(),
                        state: state.as_str(),
                    })
                    .set(i64::from(campaign.state == state));
            }
        }
        let now: BTreeSet<String> = book.campaigns.keys().cloned().collect();
        for gone in recorded.difference(&now) {
            self.rollout_pending.remove(&SidecarLabels {
                sidecar: gone.clone(),
            });
            for state in crate::rollout::CampaignState::ALL {
                self.campaigns.remove(&CampaignLabels {
                    sidecar: gone.clone(),
                    state: state.as_str(),
                });
            }
        }
        *recorded = now;
    }

    /// Also exports Tumblr's series under their names (see [`tumblr::TumblrMetrics`]).
    pub(crate) fn with_tumblr_names(mut self) -> Self {
        self.tumblr = Some(tumblr::TumblrMetrics::new());
        self
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        encode_registry(&mut out, &self.registry).expect("writing to a String cannot fail");
        if let Some(tumblr) = &self.tumblr {
            encode_registry(&mut out, &tumblr.registry).expect("writing to a String cannot fail");
        }
        encode_eof(&mut out).expect("writing to a String cannot fail");
        out
    }

    /// A review answered in `seconds`; `trace_id`, when its trace is sampled, becomes the
    /// bucket's exemplar.
    pub(crate) fn record_admission(
        &self,
        result: RequestResult,
        seconds: f64,
        trace_id: Option<String>,
    ) {
        let labels = ResultLabels { result };
        self.admission_requests.get_or_create(&labels).inc();
        self.admission_duration.get_or_create(&labels).observe(
            seconds,
            trace_id.map(|trace_id| TraceLabels { trace_id }),
            None,
        );
    }

    /// A plan of the rollout engine made in `seconds`, as [`Metrics::record_admission`].
    pub(crate) fn record_plan(&self, seconds: f64, trace_id: Option<String>) {
        self.rollout_plan_duration.observe(
            seconds,
            trace_id.map(|trace_id| TraceLabels { trace_id }),
            None,
        );
    }

    pub(crate) fn record_injection(&self, sidecar: &str, result: SidecarResult) {
        self.injections
            .get_or_create(&InjectionLabels {
                sidecar: sidecar.to_owned(),
                result: Label(result),
            })
            .inc();
    }

    pub(crate) fn record_config_reload(&self, source: &'static str, ok: bool, loaded: usize) {
        let result = ReloadResult::of(ok);
        self.config_reloads
            .get_or_create(&ReloadLabels { source, result })
            .inc();
        self.configs_loaded
            .get_or_create(&SourceLabels { source })
            .set(i64::try_from(loaded).unwrap_or(i64::MAX));
        self.config_source_failing
            .get_or_create(&SourceLabels { source })
            .set(i64::from(!ok));
    }

    /// The rollout mode in force (`off` when there is no engine), for the alert on a missing
    /// Lease holder, which only an `auto` deployment should have.
    pub(crate) fn record_rollout_mode(&self, mode: &'static str) {
        self.rollout_mode.get_or_create(&ModeLabels { mode }).set(1);
    }

    pub(crate) fn record_other_annotation_namespace(&self) {
        self.other_annotation_namespace.inc();
    }

    pub(crate) fn record_connection_refused(&self, port: Port) {
        self.connections_refused
            .get_or_create(&PortLabels { port })
            .inc();
    }

    pub(crate) fn record_policy_write(&self, ok: bool) {
        let result = ReloadResult::of(ok);
        self.policy_writes
            .get_or_create(&CertificateLabels { result })
            .inc();
        self.policy_failing.set(i64::from(!ok));
    }

    pub(crate) fn record_certificate_reload(&self, ok: bool) {
        let result = ReloadResult::of(ok);
        self.certificate_reloads
            .get_or_create(&CertificateLabels { result })
            .inc();
    }
}

#[cfg(test)]
mod tests;
