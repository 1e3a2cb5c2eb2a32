//! What a plan is: the restarts to make now, the workloads rolling, waiting (and why),
//! succeeded and failed, with the settings and observations it is computed from.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::book::{BookOverflow, CampaignBook, FAILURE_DETAILS, Failure};
use super::change::SidecarChange;
use super::instant::{from_now, to_the_second};
use crate::config::RevisionStamp;
use crate::drift::{DriftIndex, DriftReport};
use crate::workload::WorkloadRef;

/// The rollout engine's safety settings, with their defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RolloutSettings {
    pub(crate) max_parallel: usize,
    pub(crate) max_restarts_per_minute: usize,
    pub(crate) cooldown: Duration,
    pub(crate) canary: usize,
    pub(crate) max_failures: usize,
    pub(crate) rollout_timeout: Duration,
    pub(crate) settle: Duration,
    /// How long a workload that finished rolling may still show stale pods before that counts
    /// as a failure: pod deletions and workload status arrive on different watches.
    pub(crate) finish_grace: Duration,
    /// Workloads rolling at once in one namespace; 0 for no limit of its own.
    pub(crate) max_parallel_per_namespace: usize,
    /// Namespaces restarted first, so that canaries come from them.
    pub(crate) canary_namespaces: std::collections::BTreeSet<String>,
    /// Restart workloads even when that means downtime (`--allow-downtime`).
    pub(crate) allow_downtime: bool,
    /// How workloads are restarted unless their `NS/restart-method` says otherwise.
    pub(crate) restart_method: crate::workload::RestartMethod,
    /// How long a restarted workload must stay healthy after it rolled out to succeed (its
    /// pods read at the end for restarted, crash-looping or OOM-killed containers); zero: no
    /// bake.
    pub(crate) bake: Duration,
    /// How long a PodDisruptionBudget may refuse an eviction before that is reported.
    pub(crate) eviction_timeout: Duration,
    /// When restarts may start (`--maintenance-window`); none: at any time.
    pub(crate) maintenance_windows: crate::maintenance::MaintenanceWindows,
    /// What new pods get while a campaign is paused (`--on-campaign-failure`).
    pub(crate) on_campaign_failure: OnCampaignFailure,
    /// A revision served this long without a failure of its campaign is good (as is one whose
    /// campaign completed).
    pub(crate) good_after: Duration,
    /// Revisions remembered per sidecar.
    pub(crate) history_limit: usize,
    /// Whether pods may be upgraded in place when only images change (`--in-place`).
    pub(crate) in_place: super::in_place::InPlaceMode,
    /// Whether a new revision waits to be promoted (`--promotion=gated`).
    pub(crate) promotion: super::promotion::PromotionMode,
}

/// What new pods get while a sidecar's campaign is paused on failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum OnCampaignFailure {
    /// The sidecar's last good revision (from its revision history), so that the failing one
    /// does not spread through scale-ups, drains and crashes.
    #[default]
    Hold,
    /// The revision that failed, as configured.
    Continue,
}

impl Default for RolloutSettings {
    fn default() -> Self {
        Self {
            max_parallel: 5,
            max_restarts_per_minute: 30,
            cooldown: Duration::from_secs(600),
            canary: 1,
            max_failures: 1,
            rollout_timeout: Duration::from_secs(300),
            settle: Duration::from_secs(10),
            finish_grace: Duration::from_secs(5),
            max_parallel_per_namespace: 0,
            canary_namespaces: std::collections::BTreeSet::new(),
            allow_downtime: false,
            restart_method: crate::workload::RestartMethod::Template,
            eviction_timeout: Duration::from_secs(120),
            bake: Duration::ZERO,
            maintenance_windows: Default::default(),
            on_campaign_failure: OnCampaignFailure::Hold,
            good_after: Duration::from_secs(600),
            history_limit: super::history::DEFAULT_HISTORY_LIMIT,
            in_place: super::in_place::InPlaceMode::Auto,
            promotion: Default::default(),
        }
    }
}

/// A sidecar in force, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SidecarTarget {
    pub(crate) revision: String,
    /// `rollout: {policy: manual}`: reports and the CLI only.
    pub(crate) manual: bool,
    /// Its config allows in-place upgrades (not `rollout: {inPlace: false}`).
    pub(crate) in_place: bool,
    /// What changed from the previous revision, when the engine saw both.
    pub(crate) changes: Option<String>,
    /// What changed from each older revision this process saw, by that revision: a pod
    /// several revisions behind is described from the revision it runs.
    pub(crate) changes_from: BTreeMap<String, String>,
}

/// A restart the executor should make now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Restart {
    pub(crate) workload: WorkloadRef,
    /// The `NS/rollout-revision` to write; `None` for a bare pod, which is evicted.
    pub(crate) target: Option<RevisionStamp>,
    /// The `NS/rollout-reason` to write.
    pub(crate) reason: String,
    pub(crate) changes: Vec<SidecarChange>,
    pub(crate) canary: bool,
    /// OnDelete: the controller will not replace pods by itself; the executor evicts them.
    pub(crate) on_delete: bool,
    pub(crate) pods: u32,
    /// The workload carries the target already; pods of its restart missed the webhook, and
    /// this restart (made once per target) replaces them. The executor marks it
    /// `NS/rollout-heal`.
    pub(crate) heal: bool,
    /// `evict`: the template is not written; the executor evicts the stale pods one at a time.
    pub(crate) method: crate::workload::RestartMethod,
    /// The template stamp this engine set for this very target is gone while the pods stayed
    /// (a GitOps controller reverted it): restarted by eviction instead.
    pub(crate) reverted: bool,
}

/// A workload in its health bake: since when, and what the last read of its pods found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bake {
    /// The target of the restart it bakes; a bake of another target is not this one.
    pub(crate) target: RevisionStamp,
    pub(crate) since: Timestamp,
    /// When its pods were last read (`bake_checks`).
    pub(crate) read_at: Option<Timestamp>,
    /// A container problem that read found: the bake fails with it.
    pub(crate) problem: Option<String>,
    /// It passed: succeeded from then on, not baked again.
    pub(crate) passed: bool,
    /// Its pods changed since they were last read, as the pod watch saw (a container state, a
    /// pod come or gone); the executor says, before each plan.
    pub(crate) pods_changed: bool,
}

/// A restart by eviction this engine began: the target its pods are brought to, and since
/// when (its --rollout-timeout runs from there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EvictionRestart {
    pub(crate) target: RevisionStamp,
    pub(crate) since: Timestamp,
    /// Its pods are upgraded in place (images patched) rather than evicted.
    pub(crate) in_place: bool,
    /// Why an in-place upgrade of one of its pods failed: the restart fails with it.
    pub(crate) problem: Option<String>,
    /// One of its pods is being upgraded in place: patched, so its revision says current,
    /// but its sidecar not yet back. The restart is not over until it is. Set by the executor
    /// from its upgrades under way before each plan.
    pub(crate) upgrading: bool,
    /// What that upgrade waits for (a pod, its containers and their states): said if the
    /// restart times out. Set with `upgrading`.
    pub(crate) awaiting: Option<String>,
}

/// A workload carrying the target, not yet rolled out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Rolling {
    pub(crate) workload: WorkloadRef,
    pub(crate) target: RevisionStamp,
    pub(crate) on_delete: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub(crate) enum WaitReason {
    Settling {
        until: Time,
    },
    Canary {
        sidecar: String,
    },
    MaxParallel {
        limit: usize,
    },
    /// `--max-parallel-per-namespace` workloads of its namespace are rolling.
    MaxParallelInNamespace {
        namespace: String,
        limit: usize,
    },
    RateLimit {
        per_minute: usize,
    },
    Cooldown {
        until: Time,
    },
    CampaignPaused {
        sidecar: String,
    },
    /// `serve --promotion=gated`: the revision is not promoted yet.
    AwaitingPromotion {
        sidecar: String,
    },
    Manual {
        sidecar: String,
    },
    DeploymentPaused,
    Partition {
        partition: i32,
    },
    NotKnownYet,
    /// Restarting it would take its service down; waits until accepted.
    Downtime {
        why: crate::drift::Downtime,
    },
    /// Its last restart is still rolling out, for at most --rollout-timeout.
    RollingOut {
        until: Time,
    },
    /// No maintenance window of the workload is open; `opens` is `None` when none opens
    /// within a week (a window inside a skipped DST hour).
    OutsideMaintenanceWindow {
        windows: String,
        opens: Option<Time>,
    },
    /// Not rolled out or not all available before any restart of ours: restarted once it is.
    Unhealthy {
        progress: String,
    },
    /// Its `NS/maintenance-window` does not parse: it waits rather than guess.
    MaintenanceWindowInvalid {
        #[serde(serialize_with = "serialize_display")]
        error: crate::maintenance::WindowError,
    },
    /// The campaign book nearly fills the status ConfigMap: nothing starts that it could not
    /// record.
    BookFull(BookOverflow),
    /// The webhook would refuse the pods a restart creates (the template's pod-level
    /// resources do not fit a sidecar whose config refuses such pods): restarting it would
    /// leave it without new pods.
    PodsWouldBeRefused {
        denial: String,
    },
}

impl WaitReason {
    /// A wait the run itself ends (a slot frees, the canary finishes, the minute passes, the
    /// index catches up), as opposed to one only time or a person ends (cooldown, pause,
    /// manual policy, a paused Deployment, a partition).
    pub(crate) fn clears_by_itself(&self) -> bool {
        matches!(
            self,
            WaitReason::MaxParallel { .. }
                | WaitReason::MaxParallelInNamespace { .. }
                | WaitReason::RateLimit { .. }
                | WaitReason::Canary { .. }
                | WaitReason::Settling { .. }
                | WaitReason::NotKnownYet
                | WaitReason::RollingOut { .. }
        )
    }
}

/// How the command line spells what a person can do about what the rollout reports: the
/// core composes its sentences with these and spells no flag or command itself. The one
/// value is `cli::hints::HINTS`.
#[derive(Debug)]
pub(crate) struct Hints {
    /// The flag or command that ends a wait, when one does.
    pub(crate) wait: fn(&WaitReason) -> Option<String>,
    /// Resumes the paused campaigns.
    pub(crate) resume: &'static str,
    /// Rolls a sidecar back to its previous revision.
    pub(crate) roll_back: fn(&str) -> String,
    /// Ends the hold of a sidecar's paused campaign.
    pub(crate) release_hold: fn(&str) -> String,
    /// Ends the pin of a sidecar.
    pub(crate) unpin: fn(&str) -> String,
    /// Makes the restarts a manual rollout policy leaves to a person.
    pub(crate) run_rollout: &'static str,
    /// The setting a health bake lasts.
    pub(crate) bake: &'static str,
    /// The setting that holds new pods at the last good revision while a campaign is paused.
    pub(crate) hold: &'static str,
    /// The setting of how many failures pause a campaign.
    pub(crate) max_failures: &'static str,
    /// Promotes a sidecar's gated revision.
    pub(crate) promote: fn(&str) -> String,
}

impl Waiting {
    /// The message with the flag or command that ends its wait, if one does.
    pub(crate) fn hint_with(&mut self, hints: &Hints) {
        if let Some(hint) = (hints.wait)(&self.reason) {
            self.message = format!("{} ({hint})", self.message);
        }
    }
}

impl WaitReason {
    /// What a person reads: times as "in 8m" (and the instant, to the second).
    pub(crate) fn describe(&self, now: Timestamp) -> String {
        match self {
            WaitReason::Settling { until } => format!(
                "settling: the revision is too new ({})",
                from_now(until.0, now)
            ),
            WaitReason::Cooldown { until } => format!(
                "restarted recently; cooldown ends {} ({})",
                from_now(until.0, now),
                to_the_second(until.0)
            ),
            WaitReason::CampaignPaused { sidecar } => format!(
                "the campaign of {sidecar} is paused: fix or revert the config, or resume it"
            ),
            WaitReason::DeploymentPaused => {
                "the Deployment is paused (`kubectl rollout resume` to let it roll)".to_owned()
            }
            WaitReason::Partition { partition } => format!(
                "partition {partition} holds pods back; not overridden (lower the partition to roll them)"
            ),
            WaitReason::RollingOut { until } => format!(
                "its last restart is still rolling out; restarted again once that is done, or {} if it is stuck",
                from_now(until.0, now)
            ),
            WaitReason::OutsideMaintenanceWindow {
                windows,
                opens: Some(opens),
            } => format!(
                "outside maintenance window (opens {}, at {}; {windows})",
                from_now(opens.0, now),
                to_the_second(opens.0)
            ),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Settling { until } => write!(
                f,
                "settling: the revision is too new (until {})",
                to_the_second(until.0)
            ),
            WaitReason::Canary { sidecar } => {
                write!(f, "waiting for the canary of {sidecar} to become healthy")
            }
            WaitReason::MaxParallel { limit } => {
                write!(f, "{limit} workloads already rolling")
            }
            WaitReason::MaxParallelInNamespace { namespace, limit } => write!(
                f,
                "{limit} workloads of namespace {namespace} already rolling"
            ),
            WaitReason::RateLimit { per_minute } => {
                write!(f, "{per_minute} restarts in the last minute")
            }
            WaitReason::Cooldown { until } => write!(
                f,
                "restarted recently; cooldown until {}",
                to_the_second(until.0)
            ),
            WaitReason::CampaignPaused { sidecar } => {
                write!(f, "the campaign of {sidecar} is paused")
            }
            WaitReason::AwaitingPromotion { sidecar } => {
                write!(f, "the revision of {sidecar} waits for promotion")
            }
            WaitReason::Manual { sidecar } => write!(f, "{sidecar} has rollout policy manual"),
            WaitReason::DeploymentPaused => write!(f, "the Deployment is paused"),
            WaitReason::Partition { partition } => {
                write!(f, "partition {partition} holds pods back; not overridden")
            }
            WaitReason::NotKnownYet => write!(f, "the workload is not in the index yet"),
            WaitReason::Downtime { why } => write!(
                f,
                "a restart would take it down: {}",
                match why {
                    crate::drift::Downtime::Recreate =>
                        "strategy Recreate stops every pod before starting new ones",
                    crate::drift::Downtime::SingleReplicaMaxUnavailable =>
                        "one replica, and maxUnavailable lets it go before its replacement is ready",
                }
            ),
            WaitReason::RollingOut { until } => write!(
                f,
                "its last restart is still rolling out (until {} at most)",
                to_the_second(until.0)
            ),
            WaitReason::OutsideMaintenanceWindow { windows, opens } => match opens {
                Some(opens) => write!(
                    f,
                    "outside maintenance window (opens at {}; {windows})",
                    to_the_second(opens.0)
                ),
                None => write!(
                    f,
                    "outside maintenance window, and none opens within a week ({windows})"
                ),
            },
            WaitReason::Unhealthy { progress } => write!(
                f,
                "not healthy before its restart ({progress}); restarted once it is, and not counted as a failure"
            ),
            WaitReason::MaintenanceWindowInvalid { error } => write!(
                f,
                "its NS/maintenance-window annotation is invalid, so it waits: {error}"
            ),
            WaitReason::BookFull(overflow) => write!(f, "{overflow}"),
            WaitReason::PodsWouldBeRefused { denial } => write!(
                f,
                "not restarted: the webhook would refuse its new pods ({denial})"
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Waiting {
    pub(crate) workload: WorkloadRef,
    pub(crate) sidecars: Vec<String>,
    #[serde(flatten)]
    pub(crate) reason: WaitReason,
    pub(crate) message: String,
}

/// A workload whose restart failed under the revision in force, in an earlier pass (or an
/// earlier run): it is not restarted again under that revision, and says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct FailedEarlier {
    pub(crate) workload: WorkloadRef,
    pub(crate) sidecar: String,
    pub(crate) revision: String,
    /// Its failure's reason, while the campaign still keeps it (the latest few).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    pub(crate) message: String,
}

impl FailedEarlier {
    pub(crate) fn new(
        workload: WorkloadRef,
        sidecar: &str,
        revision: &str,
        reason: Option<&str>,
        hints: &Hints,
    ) -> Self {
        let why = reason.map_or_else(
            || {
                format!(
                    "its reason is no longer kept: the campaign keeps the latest {FAILURE_DETAILS}"
                )
            },
            str::to_owned,
        );
        let message = format!(
            "its restart to {sidecar} {revision} failed ({why}); it is not restarted again under this revision: fix or revert the config, or roll back with {}",
            (hints.roll_back)(sidecar)
        );
        Self {
            workload,
            sidecar: sidecar.to_owned(),
            revision: revision.to_owned(),
            reason: reason.map(str::to_owned),
            message,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct RolloutPlan {
    pub(crate) restarts: Vec<Restart>,
    pub(crate) rolling: Vec<Rolling>,
    pub(crate) waiting: Vec<Waiting>,
    /// Workloads rolled to the target whose pods are all current and healthy.
    pub(crate) succeeded: Vec<WorkloadRef>,
    /// Failures found in this pass (already in `book`).
    pub(crate) failed: Vec<Failure>,
    /// Workloads that failed in an earlier pass under the revision in force, left alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failed_earlier: Vec<FailedEarlier>,
    /// Sidecars whose campaign paused in this pass, with the reason.
    pub(crate) paused: Vec<(String, String)>,
    /// Finished rolling with pods still not current, inside the grace: the executor remembers
    /// since when and passes it back.
    #[serde(skip)]
    pub(crate) finished_not_current: Vec<WorkloadRef>,
    #[serde(skip)]
    pub(crate) book: CampaignBook,
    /// The next moment this plan can change with nothing watched changing: a settle window,
    /// a cooldown or a rate-limit minute ending, a rollout timing out, a finish grace
    /// running out. The engine sleeps until then, or until a watched object changes.
    #[serde(skip)]
    pub(crate) wake_at: Option<Timestamp>,
    /// Rolled out and current, their bake starting now (for the target they carry): the
    /// executor remembers since when.
    #[serde(skip)]
    pub(crate) bakes_started: Vec<(WorkloadRef, RevisionStamp)>,
    /// Baking workloads whose pods the executor should read (the bake ends, or their
    /// health dropped) and pass back.
    #[serde(skip)]
    pub(crate) bake_checks: Vec<WorkloadRef>,
}

impl Restart {
    /// What the restart does, as the plan prints it: a bare pod is evicted and nothing
    /// recreates it.
    pub(crate) fn action(&self) -> &'static str {
        let in_place = self.method == crate::workload::RestartMethod::InPlace;
        match (self.workload.kind, self.canary, in_place) {
            (crate::workload::WorkloadKind::Pod, _, _) => "evict (not recreated)",
            (_, true, true) => "upgrade in place (canary)",
            (_, false, true) => "upgrade in place",
            (_, true, false) => "restart (canary)",
            (_, false, false) => "restart",
        }
    }
}

impl RolloutPlan {
    /// Nothing left to do or wait for (the one-shot CLI stops here).
    pub(crate) fn is_settled(&self) -> bool {
        self.restarts.is_empty() && self.rolling.is_empty()
    }
}

pub(crate) struct PlanInput<'a> {
    /// Classified against the revisions of `targets`.
    pub(crate) report: &'a DriftReport,
    pub(crate) index: &'a DriftIndex,
    pub(crate) targets: &'a BTreeMap<String, SidecarTarget>,
    pub(crate) book: &'a CampaignBook,
    /// Since when each workload has been seen finished rolling yet not current.
    pub(crate) finished_since: &'a BTreeMap<WorkloadRef, Timestamp>,
    /// The template stamps this engine wrote, by workload: one gone while its pods stayed
    /// stale was reverted.
    pub(crate) stamped: &'a BTreeMap<WorkloadRef, RevisionStamp>,
    /// The restarts by eviction under way.
    pub(crate) evicting: &'a BTreeMap<WorkloadRef, EvictionRestart>,
    /// The workloads in their health bake.
    pub(crate) baking: &'a BTreeMap<WorkloadRef, Bake>,
    pub(crate) settings: &'a RolloutSettings,
    /// Each sidecar's remembered revisions: a paused campaign holds new pods at the last good.
    pub(crate) history: &'a super::history::RevisionHistory,
    pub(crate) now: Timestamp,
    pub(crate) hints: &'static Hints,
    /// What the webhook serves new pods, for the preflight; `None`: no preflight.
    pub(crate) served: Option<Served<'a>>,
}

/// What the webhook would inject into a new pod now. Before a restart, the engine injects a
/// workload's template as the webhook would, and never restarts it into pods the webhook
/// would refuse.
#[derive(Clone, Copy)]
pub(crate) struct Served<'a> {
    pub(crate) sidecars: &'a crate::config::SidecarSet,
    pub(crate) settings: &'a crate::injection::InjectionSettings,
}

impl Served<'_> {
    /// Why the webhook would refuse the pods of `template` (a pod template as JSON) in
    /// `namespace`; `None` when it would admit them.
    pub(crate) fn refusal(&self, template: &str, namespace: &str) -> Option<String> {
        let pod: crate::injection::PodView<'_> = serde_json::from_str(template).ok()?;
        match crate::injection::decide(&pod, namespace, self.sidecars, self.settings) {
            crate::injection::Decision::Deny(denial) => Some(denial.to_string()),
            _ => None,
        }
    }
}

/// A field a person reads, in JSON as its text.
pub(super) fn serialize_display<S: serde::Serializer>(
    value: &impl fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}
