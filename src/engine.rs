//! The rollout executor: the thin I/O shell around the planner. On every change of the index
//! or the configs (and on a timer, from the index, never a relist) it plans, and, while this
//! replica may act, does what the plan says: merge patches of the pod-template stamps,
//! evictions for OnDelete workloads, Events, metrics, and the status ConfigMap that keeps
//! campaigns (and pauses) across restarts and leader changes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{EventType, Recorder};
use tokio::sync::watch;
use tracing::{Instrument, error, info, warn};

use crate::annotations::AnnotationKeys;
use crate::cluster::drift_feed::{DriftFeed, FollowedPods, PodRead};
use crate::cluster::status::{self, BookWrite, STATUS_CONFIGMAP};
use crate::config::SidecarSet;
use crate::drift::DriftPolicy;
use crate::metrics::{EngineCall, Metrics, RolloutResult};
use crate::rollout::change::restart_action;
use crate::rollout::history::RevisionHistory;
use crate::rollout::machine::{Conduct, Effect, OnIndex, RolloutState};
use crate::rollout::selection::ContainerSelection;
use crate::rollout::targets::ContentHistory;
use crate::rollout::{self, RolloutPlan, RolloutSettings, SidecarTarget};
use crate::workload::{RestartMethod, WorkloadKind, WorkloadRef};

/// Every API call of the engine gets this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Quiet time after a change before planning, so a burst of watch events costs one plan.
pub(crate) const PLAN_DEBOUNCE: Duration = Duration::from_millis(100);
/// After a change of the cluster, the quiet time is also this many times the last plan's: a
/// campaign's pod churn changes the cluster all the time, and at 50,000 pods a plan takes tens
/// of milliseconds, which back to back would take most of a core from the control plane.
pub(crate) const PLAN_DUTY: u32 = 4;
/// The longest the quiet time grows to, however long plans take.
pub(crate) const PLAN_DEBOUNCE_MAX: Duration = Duration::from_secs(1);
/// The longest the one-shot loop waits with nothing due.
pub(crate) const LOOP_SAFETY_NET: Duration = Duration::from_secs(60);
/// A failed action, or an eviction a PodDisruptionBudget refused, is tried again this long
/// after (or sooner, if something watched changes).
const RETRY_AFTER: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EngineMode {
    /// Restart stale workloads.
    #[default]
    Auto,
    /// Plan and report (log, status ConfigMap), never restart.
    DryRun,
    /// No rollout engine.
    Off,
}

impl EngineMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EngineMode::Auto => "auto",
            EngineMode::DryRun => "dry-run",
            EngineMode::Off => "off",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct EngineOptions {
    pub(crate) mode: EngineMode,
    pub(crate) settings: RolloutSettings,
    pub(crate) keys: AnnotationKeys,
    pub(crate) policy: DriftPolicy,
    /// Where the status ConfigMap (and the Lease) live: the injector's namespace.
    pub(crate) namespace: String,
    pub(crate) replan_every: Duration,
    /// The one-shot CLI: every sidecar is restartable (`policy: manual` included).
    pub(crate) ignore_manual_policy: bool,
    /// When set, only these workload kinds (the CLI's --include-statefulset and friends).
    pub(crate) kinds: Option<BTreeSet<WorkloadKind>>,
    /// The CLI's --rollout-reason, put before the engine's own reason.
    pub(crate) reason_prefix: Option<String>,
    /// What the bakes' metric checks are evaluated against (`--prometheus-url`).
    pub(crate) prometheus: Option<crate::prometheus::Prometheus>,
}

/// The one-shot CLI's `--sidecar-container-name`: what to restart comes from a selection of
/// pods by container name instead of from revisions.
pub(crate) struct ContainerRun {
    pub(crate) selection: ContainerSelection,
    /// The uids of the pods that exist now, kept by a metadata watch.
    pub(crate) live: Arc<Mutex<HashSet<String>>>,
}

/// What a one-shot run ends with.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(crate) struct RunSummary {
    pub(crate) restarted: BTreeSet<WorkloadRef>,
    pub(crate) succeeded: BTreeSet<WorkloadRef>,
    pub(crate) failed: Vec<rollout::Failure>,
    pub(crate) waiting: Vec<rollout::Waiting>,
    /// Failed before this run under the revision in force, so not restarted by it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failed_earlier: Vec<rollout::FailedEarlier>,
    /// Restarted, then gone (deleted, or a bare pod evicted): nothing left to judge.
    pub(crate) gone: BTreeSet<WorkloadRef>,
}

/// Why one of the executor's actions failed: the step, what it acted on, and the API's
/// answer. Every action is retried by a later plan, so a failure is logged and counted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActionError {
    #[error("cannot patch {workload}: {source}")]
    Patch {
        workload: WorkloadRef,
        source: kube::Error,
    },
    #[error("cannot evict pod {namespace}/{pod}: {source}")]
    Evict {
        namespace: String,
        pod: String,
        source: kube::Error,
    },
    #[error("cannot record the Event on {object}: {source}")]
    RecordEvent { object: String, source: kube::Error },
    #[error("cannot write the status ConfigMap: {source}")]
    WriteStatus { source: kube::Error },
    #[error("cannot write the revision history ConfigMap: {source}")]
    WriteHistory { source: kube::Error },
    #[error("cannot upgrade pod {namespace}/{pod} in place: {source}")]
    PatchPod {
        namespace: String,
        pod: String,
        source: kube::Error,
    },
    #[error("cannot resize pod {namespace}/{pod}: {source}")]
    ResizePod {
        namespace: String,
        pod: String,
        source: kube::Error,
    },
    #[error("cannot read pod {namespace}/{pod}: {source}")]
    ReadPod {
        namespace: String,
        pod: String,
        source: kube::Error,
    },
}

impl ActionError {
    /// The `verb` label of `sidecar_injector_rollout_api_errors_total`.
    pub(crate) fn metric_label(&self) -> EngineCall {
        match self {
            ActionError::Patch { .. } => EngineCall::Patch,
            ActionError::Evict { .. } => EngineCall::Evict,
            ActionError::RecordEvent { .. } => EngineCall::Event,
            ActionError::WriteStatus { .. } | ActionError::WriteHistory { .. } => {
                EngineCall::Status
            }
            ActionError::ReadPod { .. } => EngineCall::ReadPod,
            ActionError::PatchPod { .. } => EngineCall::PatchPod,
            ActionError::ResizePod { .. } => EngineCall::ResizePod,
        }
    }
}

/// Whether this process may act on its plan: the Lease holder (or the one-shot CLI) acts;
/// every other replica only plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Authority {
    Act,
    PlanOnly,
}

pub(crate) struct Engine {
    client: Client,
    options: EngineOptions,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    /// The decision memory: the book, restarts, bakes and pods under way.
    state: RolloutState,
    /// Each sidecar's content as last seen: what a new revision is described against.
    history: ContentHistory,
    /// Each sidecar's remembered revisions, as in the history ConfigMap once read.
    revisions: RevisionHistory,
    /// The resourceVersion of the history ConfigMap `revisions` was read at (`None`: it did not
    /// exist); unknown until read, and nothing is written before.
    revisions_version: Option<Option<String>>,
    /// `revisions` changed since last written.
    revisions_dirty: bool,
    /// What the pins and holds of the book could not serve, as last said.
    overlay_errors: Vec<String>,
    /// The pods of each bake as last read, followed by the pod watch while the bake is open.
    bake_pods: BTreeMap<WorkloadRef, health_bake::BakeRead>,
    /// The pod of each upgrade in place under way as last read (or patched): it is read again
    /// once the pod watch sees it change.
    upgrade_reads: BTreeMap<WorkloadRef, PodRead>,
    /// The status ConfigMap's book as last read or written.
    book_writer: status::BookWriter,
    /// The next moment a plan can change by time alone (see [`RolloutPlan::wake_at`]), or an
    /// action is due again.
    wake_at: Option<Timestamp>,
    /// How long the last plan held the index (waiting for it included).
    last_plan: Duration,
    notifier: Option<crate::notifier::Notifier>,
    containers: Option<ContainerRun>,
    /// What a running injector published, whose revisions the one-shot CLI brings pods to
    /// rather than the ones it computes from its own reading of the configs.
    published: Option<crate::cluster::status::Publication>,
    /// What a one-shot run ends with, kept only when asked ([`Engine::keep_summary`]): `serve`'s
    /// engine runs for months, and would keep every workload it ever restarted.
    summary: Option<RunSummary>,
}

impl Engine {
    /// `status` watches the status ConfigMap in `options.namespace`
    /// ([`status::watch_status`]), which `serve` shares with the webhook's warnings.
    pub(crate) fn new(
        client: Client,
        options: EngineOptions,
        metrics: Arc<Metrics>,
        recorder: Recorder,
        status: watch::Receiver<Option<ConfigMap>>,
    ) -> Self {
        Self {
            client,
            options,
            metrics,
            recorder,
            history: ContentHistory::default(),
            revisions: RevisionHistory::default(),
            revisions_version: None,
            revisions_dirty: false,
            overlay_errors: Vec::new(),
            state: RolloutState::default(),
            bake_pods: BTreeMap::new(),
            upgrade_reads: BTreeMap::new(),
            book_writer: status::BookWriter::new(status),
            wake_at: None,
            last_plan: Duration::ZERO,
            notifier: None,
            containers: None,
            published: None,
            summary: None,
        }
    }

    /// Keeps what this run restarted and how each ended, for [`Engine::summary`].
    pub(crate) fn keep_summary(&mut self) {
        self.summary.get_or_insert_default();
    }

    /// What this run restarted and how each ended, since [`Engine::keep_summary`] (else empty).
    pub(crate) fn summary(&self) -> &RunSummary {
        static NOT_KEPT: RunSummary = RunSummary {
            restarted: BTreeSet::new(),
            succeeded: BTreeSet::new(),
            failed: Vec::new(),
            waiting: Vec::new(),
            failed_earlier: Vec::new(),
            gone: BTreeSet::new(),
        };
        self.summary.as_ref().unwrap_or(&NOT_KEPT)
    }

    fn summarise(&mut self, record: impl FnOnce(&mut RunSummary)) {
        if let Some(summary) = &mut self.summary {
            record(summary);
        }
    }

    /// Sends campaign notices (started, paused, completed) through `notifier`.
    pub(crate) fn notify_with(&mut self, notifier: crate::notifier::Notifier) {
        self.notifier = Some(notifier);
    }

    /// Brings pods to the revisions of `publication` (what the running injector injects)
    /// instead of the revisions of the configs this process read.
    pub(crate) fn use_publication(&mut self, publication: crate::cluster::status::Publication) {
        self.published = Some(publication);
    }

    /// Plans from `run` instead of from revisions. Such a run keeps its campaign to itself: it
    /// neither reads nor writes the status ConfigMap, whose revisions and campaigns are the
    /// injector's.
    pub(crate) fn select_containers(&mut self, run: ContainerRun) {
        self.containers = Some(run);
    }

    /// Workloads this process restarted that have no outcome yet (a workload scaled to zero
    /// or deleted mid-rollout has no pods in the plan, yet still awaits one).
    pub(crate) fn awaiting_outcomes(&self) -> usize {
        self.state.awaiting_success.len()
    }

    /// How long the last plan took, for the control loop's pacing.
    pub(crate) fn last_plan(&self) -> Duration {
        self.last_plan
    }

    /// Resolves when the status ConfigMap changes (a pause or a resume from elsewhere), as
    /// `serve`'s loop wakes on it; `false` once its watch is gone.
    pub(crate) async fn status_changed(&mut self) -> bool {
        self.book_writer.changed().await
    }

    /// Waits for the first read of the status ConfigMap (present or not).
    pub(crate) async fn load_status(&mut self) {
        self.book_writer.first_read(REQUEST_TIMEOUT).await;
        self.adopt_cluster_book();
    }

    /// Adopts the cluster's book when someone else wrote it (a previous leader, `rollout
    /// --resume`).
    fn adopt_cluster_book(&mut self) {
        if let Some(book) = self.book_writer.theirs() {
            for line in rollout::journal::resumptions(&self.state.book, &book) {
                say(&line);
            }
            self.state.book = book;
        }
    }

    /// Plans from the index; acts on the plan when this process has the authority to.
    pub(crate) async fn tick(
        &mut self,
        feed: &DriftFeed,
        set: &SidecarSet,
        authority: Authority,
    ) -> RolloutPlan {
        let conduct = self.conduct(authority);
        let may_write = matches!(conduct, Conduct::Act { .. });
        let (targets, in_force) = match &self.containers {
            Some(run) => (run.selection.targets(), SidecarSet::default()),
            None => self.revision_targets(set, may_write).await,
        };
        // What happened to the pods upgraded in place is observed before the plan, which
        // then frees their workloads for the next pod, or fails their restart.
        if may_write {
            self.follow_upgrades(&feed.followed).await;
        }
        let planning = std::time::Instant::now();
        let bakes_changed = self.bakes_changed(feed);
        let now = Timestamp::now();
        let mut step = self.step(feed, (&targets, &in_force), &bakes_changed, now, conduct);
        self.word(&mut step, now);
        self.last_plan = planning.elapsed();
        self.metrics.record_plan(
            self.last_plan.as_secs_f64(),
            crate::telemetry::sampled_trace_id(&tracing::Span::current()),
        );
        self.wake_at = step.wake_at;
        self.metrics
            .rollouts_in_flight
            .set(step.plan.rolling.len() as i64);
        let plan = &step.plan;
        self.summarise(|summary| {
            summary.waiting = plan.waiting.clone();
            summary.failed_earlier = plan
                .failed_earlier
                .iter()
                .filter(|e| !summary.failed.iter().any(|f| f.workload == e.workload))
                .cloned()
                .collect();
        });
        if may_write {
            self.metrics.record_campaigns(&self.state.book);
        }
        for effect in step.effects {
            // A restart and a pod's upgrade or eviction are spans of their own, in the plan's.
            let span = spans::of_effect(&effect);
            self.perform(effect, &feed.followed, authority, &in_force, now)
                .instrument(span)
                .await;
        }
        // A bake that passed or failed reads nothing more: its pods are no longer followed.
        let state = &self.state;
        self.bake_pods.retain(|workload, read| {
            let open = state.bake_open(workload);
            if !open {
                read.forget(&workload.namespace, &feed.followed);
            }
            open
        });
        step.plan
    }

    /// How far this process goes with its plan.
    fn conduct(&self, authority: Authority) -> Conduct {
        match (authority, self.options.mode) {
            (Authority::Act, EngineMode::Auto) => Conduct::Act {
                record: self.containers.is_none(),
            },
            (Authority::Act, EngineMode::DryRun) => Conduct::DryRun,
            (_, mode) => Conduct::Plan {
                follow_bakes: mode != EngineMode::Off,
            },
        }
    }

    /// The step's sentences written (`render`), and the words of its failures and pauses
    /// kept in the book, which it stores and every later reader shows.
    fn word(&mut self, step: &mut rollout::machine::Step, now: Timestamp) {
        crate::render::word_plan(&mut step.plan, now);
        crate::render::keep_pause_words(&step.plan, &mut self.state.book);
        crate::render::word_book(&mut self.state.book);
        for effect in &mut step.effects {
            use rollout::machine::Effect;
            match effect {
                Effect::Failed { failure, .. } => crate::render::word_failure(failure),
                Effect::PatchTemplate(restart)
                | Effect::EvictBarePod(restart)
                | Effect::PodByPodStarted(restart) => crate::render::word_restart(restart),
                _ => {}
            }
        }
    }

    /// The state machine's step on the index as it stands.
    fn step(
        &mut self,
        feed: &DriftFeed,
        (targets, in_force): (&BTreeMap<String, SidecarTarget>, &SidecarSet),
        bakes_changed: &BTreeSet<WorkloadRef>,
        now: Timestamp,
        conduct: Conduct,
    ) -> rollout::machine::Step {
        let injection = crate::injection::InjectionSettings::preflight(&self.options.keys);
        let index = feed.index.lock().expect("drift index lock");
        let live = self
            .containers
            .as_ref()
            .map(|run| (&run.selection, run.live.lock().expect("live pods lock")));
        let input = OnIndex {
            index: &index,
            targets,
            settings: &self.options.settings,
            history: &self.revisions,
            policy: &self.options.policy,
            kinds: self.options.kinds.as_ref(),
            selection: live.as_ref().map(|(selection, live)| (*selection, &**live)),
            bakes_changed,
            served: Some(rollout::Served {
                sidecars: in_force,
                settings: &injection,
            }),
        };
        self.state.step_on_index(&input, now, conduct)
    }

    /// Carries out one effect of a step.
    async fn perform(
        &mut self,
        effect: Effect,
        followed: &FollowedPods,
        authority: Authority,
        in_force: &SidecarSet,
        now: Timestamp,
    ) {
        match effect {
            Effect::BakeStarted(workload) => self.bake_started(&workload, followed, authority),
            Effect::ReadBake { workload, pods } => self.read_bake(workload, pods, followed).await,
            Effect::EvaluateCheck(query) => self.evaluate_check(query).await,
            Effect::PatchTemplate(restart) => {
                let patched = self.patch(&restart, now).await;
                self.restarted(&restart, patched).await;
            }
            Effect::EvictBarePod(restart) => {
                if let Some(result) = self.evict_bare_pod(&restart.workload, now).await {
                    self.restarted(&restart, result).await;
                }
            }
            Effect::PodByPodStarted(restart) => {
                if restart.method == RestartMethod::InPlace {
                    info!(workload = %restart.workload, "upgrading in place, pod by pod: {}", restart.reason);
                } else {
                    info!(workload = %restart.workload, "restarting by eviction: {}", restart.reason);
                }
                self.announce_restart(&restart).await;
            }
            Effect::UpgradePod {
                workload,
                pod,
                heal,
                target,
                healthy,
                min_ready,
            } => {
                self.upgrade_pod(&workload, &pod, heal, &target, healthy, min_ready, followed)
                    .await;
            }
            Effect::EvictPod {
                workload,
                pod,
                heal,
            } => self.evict_pod(&workload, pod, heal).await,
            Effect::Succeeded(workload) => {
                self.metrics
                    .record_rollout(workload.kind, RolloutResult::Succeeded);
                self.summarise(|summary| {
                    summary.succeeded.insert(workload);
                });
            }
            Effect::Failed { failure, ours } => self.report_failure(failure, ours).await,
            Effect::Gone(workload) => {
                info!(workload = %workload, "restarted workload no longer exists");
                self.summarise(|summary| {
                    summary.gone.insert(workload);
                });
            }
            Effect::Paused {
                sidecar,
                pause,
                workloads,
            } => {
                let reason = crate::render::pause_reason(&sidecar, &pause);
                self.announce_pause(&sidecar, &reason, workloads).await;
            }
            Effect::Say(line) => say(&line),
            Effect::Notify(notice) => {
                if let Some(notifier) = &self.notifier {
                    notifier.notify(notice);
                }
            }
            Effect::WriteStatus => {
                self.write_status().await;
                self.record_revisions(in_force, now).await;
            }
        }
    }

    /// A restart's result: made, it is remembered and said; failed, it is retried by a later
    /// plan.
    async fn restarted(&mut self, restart: &rollout::Restart, result: Result<(), ActionError>) {
        if let Err(err) = result {
            self.failed(&err);
            self.retry_later();
            self.metrics
                .record_rollout(restart.workload.kind, RolloutResult::Error);
            return;
        }
        self.state.on_restarted(restart);
        self.announce_restart(restart).await;
    }

    /// A restart made: logged, counted, and an Event on the workload.
    async fn announce_restart(&mut self, restart: &rollout::Restart) {
        info!(workload = %restart.workload, canary = restart.canary, method = restart.method.as_str(), reason = %restart.reason, "restarted for a new sidecar revision");
        self.metrics
            .record_rollout(restart.workload.kind, RolloutResult::Restarted);
        self.summarise(|summary| {
            summary.restarted.insert(restart.workload.clone());
        });
        let canary = if restart.canary { " (canary)" } else { "" };
        self.event(
            &restart.workload,
            EventType::Normal,
            "SidecarRestart",
            &format!("Restart {}", restart_action(&restart.changes)),
            &format!(
                "{} by sidecar-injector{canary}: {}",
                if restart.method == RestartMethod::InPlace {
                    "upgrading pod by pod"
                } else {
                    "restarted"
                },
                restart.reason
            ),
        )
        .await;
    }

    /// A bare pod's restart: its eviction. `None` when a PodDisruptionBudget refuses it for
    /// now: nothing was restarted, and a later plan asks again.
    async fn evict_bare_pod(
        &mut self,
        pod: &WorkloadRef,
        now: Timestamp,
    ) -> Option<Result<(), ActionError>> {
        match self.evict(&pod.namespace, &pod.name).await {
            Ok(true) => {
                self.metrics
                    .record_rollout(WorkloadKind::Pod, RolloutResult::Evicted);
                Some(Ok(()))
            }
            Ok(false) => {
                self.metrics
                    .record_rollout(WorkloadKind::Pod, RolloutResult::EvictionBlocked);
                info!(workload = %pod, "eviction blocked by a PodDisruptionBudget; retrying, never forcing");
                self.wake_at(RolloutState::blocked_retry(now));
                None
            }
            Err(err) => Some(Err(err)),
        }
    }

    /// A failed rollout is said in a log line and a Warning Event, and counted as this
    /// process's failure only when it made the restart.
    async fn report_failure(&mut self, failure: rollout::Failure, ours: bool) {
        let reason = crate::render::failure_reason(&failure.reason);
        error!(workload = %failure.workload, reason, "rollout failed");
        if ours {
            self.metrics
                .record_rollout(failure.workload.kind, RolloutResult::Failed);
            let failed = failure.clone();
            self.summarise(|summary| summary.failed.push(failed));
        }
        self.event(
            &failure.workload,
            EventType::Warning,
            "SidecarRolloutFailed",
            "RolloutFailed",
            &reason,
        )
        .await;
    }

    /// A pause is said in a log line and a Warning Event on the status ConfigMap and on each
    /// workload whose failure caused it (not on those of a pause already resumed: each had
    /// its own).
    async fn announce_pause(&mut self, sidecar: &str, reason: &str, failed: Vec<WorkloadRef>) {
        error!(sidecar, "{reason}");
        for workload in failed {
            self.event(
                &workload,
                EventType::Warning,
                "SidecarRolloutPaused",
                &format!("Pause {sidecar}"),
                reason,
            )
            .await;
        }
        let status = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(STATUS_CONFIGMAP.into()),
            namespace: Some(self.options.namespace.clone()),
            ..Default::default()
        };
        self.publish_event(
            &status,
            EventType::Warning,
            "SidecarRolloutPaused",
            &format!("Pause {sidecar}"),
            reason,
        )
        .await;
    }

    /// When the engine next needs to plan with nothing watched changing, as an instant of the
    /// loop's clock read at `now` (at once when already past); `None`: only a change wakes it.
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        let left = Timestamp::now().duration_until(self.wake_at?);
        Some(now + Duration::try_from(left).unwrap_or(Duration::ZERO))
    }

    fn wake_at(&mut self, at: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }

    fn retry_later(&mut self) {
        self.wake_at(rollout::after(Timestamp::now(), RETRY_AFTER));
    }

    /// Logs and counts a failed action; the next plan retries it.
    fn failed(&self, err: &ActionError) {
        warn!(
            action = err.metric_label().as_str(),
            "{}; retrying on the next plan",
            crate::cluster::error_text(err)
        );
        self.metrics.record_api_error(err.metric_label());
    }

    /// Writes the campaign book to the status ConfigMap when it changed; the revisions in
    /// force are each serving replica's to publish.
    async fn write_status(&mut self) {
        self.write_status_when(false).await;
    }

    /// Writes what the progress counts alone have changed since the last write (the one-shot
    /// CLI, as it ends).
    pub(crate) async fn flush_status(&mut self) {
        if self.containers.is_none() && self.options.mode == EngineMode::Auto {
            self.write_status_when(true).await;
        }
    }

    async fn write_status_when(&mut self, flush: bool) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.options.namespace);
        let namespace = &self.options.namespace;
        let now = Timestamp::now();
        let written = self
            .book_writer
            .write(
                &api,
                namespace,
                &self.state.book,
                flush,
                now,
                REQUEST_TIMEOUT,
            )
            .await;
        if matches!(
            written,
            BookWrite::Stored { .. } | BookWrite::Conflict | BookWrite::Failed(_)
        ) {
            self.metrics.record_api_request(EngineCall::Status);
        }
        match written {
            // The size of the book the status ConfigMap holds, for the book alert.
            BookWrite::Stored { bytes } | BookWrite::Unchanged { bytes } => {
                self.metrics
                    .rollout_book
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            BookWrite::Later(due) => self.wake_at(due),
            BookWrite::Conflict => info!("the status ConfigMap changed under us; re-reading it"),
            BookWrite::Failed(source) => {
                self.failed(&ActionError::WriteStatus { source });
                self.retry_later();
            }
        }
    }
}

/// Logs one journal line, with its sidecar and workload as fields.
fn say(line: &rollout::journal::Line) {
    let workload = line.workload.as_ref().map(ToString::to_string);
    info!(
        sidecar = line.sidecar.as_deref(),
        workload = workload.as_deref(),
        "{}",
        crate::render::journal_line(line)
    );
}

impl Engine {
    /// Reads a pod the pod watch follows, with what the watch had seen of it just before, so
    /// that it is read again only once the watch sees it change ([`PodRead::changed`]).
    async fn read_followed_pod(
        &self,
        namespace: &str,
        name: &str,
        followed: &FollowedPods,
    ) -> Result<(Option<Pod>, PodRead), ActionError> {
        let seen_before = followed.seen(namespace, name);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        self.metrics.record_api_request(EngineCall::ReadPod);
        let pod = with_timeout(api.get_opt(name))
            .await
            .map_err(|source| ActionError::ReadPod {
                namespace: namespace.to_owned(),
                pod: name.to_owned(),
                source,
            })?;
        let read = PodRead::of(pod.as_ref(), seen_before);
        Ok((pod, read))
    }
}

async fn with_timeout<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    crate::cluster::with_timeout(REQUEST_TIMEOUT, request).await
}

pub(crate) mod container_run;
pub(crate) mod fleet;
mod health_bake;
mod plan_now;
mod revisions;
mod run;
mod spans;
pub(crate) mod until_done;
pub(crate) mod upstream_gate;
mod writes;

pub(crate) use plan_now::{Aim, plan_now};
pub(crate) use run::run;
#[cfg(test)]
pub(crate) use run::soonest_wake;
pub(crate) use run::{Conductor, LoopStopped, control_loop};

mod pod_replacement;

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
