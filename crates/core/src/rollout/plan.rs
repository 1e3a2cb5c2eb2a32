//! What a plan is: the restarts to make now, the workloads rolling, waiting (and why),
//! succeeded and failed, with the settings and observations it is computed from.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::book::{CampaignBook, Failure};
use super::change::SidecarChange;
pub use super::wait::WaitReason;
pub(super) use super::wait::serialize_display;
use crate::config::RevisionStamp;
use crate::drift::{DriftIndex, DriftReport};
use crate::workload::WorkloadRef;

/// The rollout engine's safety settings, with their defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutSettings {
    pub max_parallel: usize,
    pub max_restarts_per_minute: usize,
    pub cooldown: Duration,
    pub canary: usize,
    pub max_failures: usize,
    pub rollout_timeout: Duration,
    pub settle: Duration,
    /// How long a workload that finished rolling may still show stale pods before that counts
    /// as a failure: pod deletions and workload status arrive on different watches.
    pub finish_grace: Duration,
    /// Workloads rolling at once in one namespace; 0 for no limit of its own.
    pub max_parallel_per_namespace: usize,
    /// Namespaces restarted first, so that canaries come from them.
    pub canary_namespaces: std::collections::BTreeSet<String>,
    /// Restart workloads even when that means downtime (`--allow-downtime`).
    pub allow_downtime: bool,
    /// How workloads are restarted unless their `NS/restart-method` says otherwise.
    pub restart_method: crate::workload::RestartMethod,
    /// How long a restarted workload must stay healthy after it rolled out to succeed (its
    /// pods read at the end for restarted, crash-looping or OOM-killed containers); zero: no
    /// bake.
    pub bake: Duration,
    /// How long a PodDisruptionBudget may refuse an eviction before that is reported.
    pub eviction_timeout: Duration,
    /// When restarts may start (`--maintenance-window`); none: at any time.
    pub maintenance_windows: crate::maintenance::MaintenanceWindows,
    /// What new pods get while a campaign is paused (`--on-campaign-failure`).
    pub on_campaign_failure: OnCampaignFailure,
    /// A revision served this long without a failure of its campaign is good (as is one whose
    /// campaign completed).
    pub good_after: Duration,
    /// Revisions remembered per sidecar.
    pub history_limit: usize,
    /// Whether pods may be upgraded in place when only images change (`--in-place`).
    pub in_place: super::in_place::InPlaceMode,
    /// Whether a new revision waits to be promoted (`--promotion=gated`).
    pub promotion: super::promotion::PromotionMode,
}

/// What new pods get while a sidecar's campaign is paused on failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnCampaignFailure {
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
pub struct SidecarTarget {
    pub revision: String,
    /// `rollout: {policy: manual}`: reports and the CLI only.
    pub manual: bool,
    /// Its config allows in-place upgrades (not `rollout: {inPlace: false}`).
    pub in_place: bool,
    /// What changed from the previous revision, when the engine saw both.
    pub changes: Option<String>,
    /// What changed from each older revision this process saw, by that revision: a pod
    /// several revisions behind is described from the revision it runs.
    pub changes_from: BTreeMap<String, String>,
    /// The metric checks its config's rollout policy names, for each workload's bake.
    pub checks: Vec<super::analysis::MetricCheck>,
    /// Its containers' names (a check's `{{containers}}`).
    pub containers: Vec<String>,
}

/// A restart the executor should make now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Restart {
    pub workload: WorkloadRef,
    /// The `NS/rollout-revision` to write; `None` for a bare pod, which is evicted.
    pub target: Option<RevisionStamp>,
    /// The `NS/rollout-reason` to write: why, in words, from the fields below; written by the
    /// shell (`render::word_plan`).
    pub reason: String,
    pub changes: Vec<SidecarChange>,
    pub canary: bool,
    /// OnDelete: the controller will not replace pods by itself; the executor evicts them.
    pub on_delete: bool,
    pub pods: u32,
    /// The workload carries the target already; pods of its restart missed the webhook, and
    /// this restart (made once per target) replaces them. The executor marks it
    /// `NS/rollout-heal`.
    pub heal: bool,
    /// `evict`: the template is not written; the executor evicts the stale pods one at a time.
    pub method: crate::workload::RestartMethod,
    /// The template stamp this engine set for this very target is gone while the pods stayed
    /// (a GitOps controller reverted it): restarted by eviction instead.
    pub reverted: bool,
    /// For a heal: how many of its pods were created without the sidecar.
    #[serde(skip)]
    pub missed: u32,
    /// Why it is restarted rather than upgraded in place, when in-place upgrades are on.
    #[serde(skip)]
    pub not_in_place: Option<super::in_place::NotInPlace>,
    /// Chosen by container (`rollout --sidecar-container-name`): which pods, not a config's
    /// change, are why.
    #[serde(skip)]
    pub selected: Option<super::selection::SelectedPods>,
}

/// A workload in its health bake: since when, and what the last read of its pods found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bake {
    /// The target of the restart it bakes; a bake of another target is not this one.
    pub target: RevisionStamp,
    pub since: Timestamp,
    /// When its pods were last read (`bake_checks`).
    pub read_at: Option<Timestamp>,
    /// A container problem that read found: the bake fails with it.
    pub problem: Option<String>,
    /// It passed: succeeded from then on, not baked again.
    pub passed: bool,
    /// Its pods changed since they were last read, as the pod watch saw (a container state, a
    /// pod come or gone); the executor says, before each plan.
    pub pods_changed: bool,
    /// Its metric checks' evaluations so far.
    pub checks: super::analysis::CheckRecords,
}

/// A restart by eviction this engine began: the target its pods are brought to, and since
/// when (its --rollout-timeout runs from there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictionRestart {
    pub target: RevisionStamp,
    pub since: Timestamp,
    /// Its pods are upgraded in place (images patched) rather than evicted.
    pub in_place: bool,
    /// Why an in-place upgrade of one of its pods failed: the restart fails with it.
    pub problem: Option<String>,
    /// One of its pods is being upgraded in place: patched, so its revision says current,
    /// but its sidecar not yet back. The restart is not over until it is. Set by the executor
    /// from its upgrades under way before each plan.
    pub upgrading: bool,
    /// What that upgrade waits for (a pod, its containers and their states): said if the
    /// restart times out. Set with `upgrading`.
    pub awaiting: Option<String>,
}

/// A workload carrying the target, not yet rolled out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rolling {
    pub workload: WorkloadRef,
    pub target: RevisionStamp,
    pub on_delete: bool,
    /// Where the metric checks of its bake stand, while it bakes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<super::analysis::CheckStanding>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Waiting {
    pub workload: WorkloadRef,
    pub sidecars: Vec<String>,
    #[serde(flatten)]
    pub reason: WaitReason,
    /// The reason in words, with what ends it: written by the shell (`render::word_plan`).
    pub message: String,
}

/// A workload whose restart failed under the revision in force, in an earlier pass (or an
/// earlier run): it is not restarted again under that revision, and says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailedEarlier {
    pub workload: WorkloadRef,
    pub sidecar: String,
    pub revision: String,
    /// Its failure's reason, while the campaign still keeps it (the latest few).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<super::book::FailureReason>,
    /// In words, with what to do about it: written by the shell (`render::word_plan`).
    pub message: String,
}

impl FailedEarlier {
    pub fn new(
        workload: WorkloadRef,
        sidecar: &str,
        revision: &str,
        reason: Option<&super::book::FailureReason>,
    ) -> Self {
        Self {
            workload,
            sidecar: sidecar.to_owned(),
            revision: revision.to_owned(),
            reason: reason.cloned(),
            message: String::new(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RolloutPlan {
    pub restarts: Vec<Restart>,
    pub rolling: Vec<Rolling>,
    pub waiting: Vec<Waiting>,
    /// Workloads rolled to the target whose pods are all current and healthy.
    pub succeeded: Vec<WorkloadRef>,
    /// Failures found in this pass (already in `book`).
    pub failed: Vec<Failure>,
    /// Workloads that failed in an earlier pass under the revision in force, left alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_earlier: Vec<FailedEarlier>,
    /// Sidecars whose campaign paused in this pass, with why, as data.
    #[serde(skip)]
    pub pauses: Vec<(String, super::pause::Pause)>,
    /// The same in words, with what resumes or rolls back: written by the shell
    /// (`render::word_pauses`), which also keeps them in the book.
    pub paused: Vec<(String, String)>,
    /// Finished rolling with pods still not current, inside the grace: the executor remembers
    /// since when and passes it back.
    #[serde(skip)]
    pub finished_not_current: Vec<WorkloadRef>,
    #[serde(skip)]
    pub book: CampaignBook,
    /// The next moment this plan can change with nothing watched changing: a settle window,
    /// a cooldown or a rate-limit minute ending, a rollout timing out, a finish grace
    /// running out. The engine sleeps until then, or until a watched object changes.
    #[serde(skip)]
    pub wake_at: Option<Timestamp>,
    /// Rolled out and current, their bake starting now (for the target they carry): the
    /// executor remembers since when.
    #[serde(skip)]
    pub bakes_started: Vec<(WorkloadRef, RevisionStamp)>,
    /// Baking workloads whose pods the executor should read (the bake ends, or their
    /// health dropped) and pass back.
    #[serde(skip)]
    pub bake_checks: Vec<WorkloadRef>,
    /// Metric checks of bakes to evaluate now.
    #[serde(skip)]
    pub metric_checks: Vec<super::analysis::MetricQuery>,
}

impl Restart {
    /// What the restart does, as the plan prints it: a bare pod is evicted and nothing
    /// recreates it.
    pub fn action(&self) -> &'static str {
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
    pub fn is_settled(&self) -> bool {
        self.restarts.is_empty() && self.rolling.is_empty()
    }
}

pub struct PlanInput<'a> {
    /// Classified against the revisions of `targets`.
    pub report: &'a DriftReport,
    pub index: &'a DriftIndex,
    pub targets: &'a BTreeMap<String, SidecarTarget>,
    pub book: &'a CampaignBook,
    /// Since when each workload has been seen finished rolling yet not current.
    pub finished_since: &'a BTreeMap<WorkloadRef, Timestamp>,
    /// The template stamps this engine wrote, by workload: one gone while its pods stayed
    /// stale was reverted.
    pub stamped: &'a BTreeMap<WorkloadRef, RevisionStamp>,
    /// The restarts by eviction under way.
    pub evicting: &'a BTreeMap<WorkloadRef, EvictionRestart>,
    /// The workloads in their health bake.
    pub baking: &'a BTreeMap<WorkloadRef, Bake>,
    pub settings: &'a RolloutSettings,
    /// Each sidecar's remembered revisions: a paused campaign holds new pods at the last good.
    pub history: &'a super::history::RevisionHistory,
    pub now: Timestamp,
    /// What the webhook serves new pods, for the preflight; `None`: no preflight.
    pub served: Option<Served<'a>>,
}

/// What the webhook would inject into a new pod now. Before a restart, the engine injects a
/// workload's template as the webhook would, and never restarts it into pods the webhook
/// would refuse.
#[derive(Clone, Copy)]
pub struct Served<'a> {
    pub sidecars: &'a crate::config::SidecarSet,
    pub settings: &'a crate::injection::InjectionSettings,
}

impl Served<'_> {
    /// Why the webhook would refuse the pods of `template` (a pod template as JSON) in
    /// `namespace`; `None` when it would admit them.
    pub fn refusal(&self, template: &str, namespace: &str) -> Option<String> {
        let pod: crate::injection::PodView<'_> = serde_json::from_str(template).ok()?;
        match crate::injection::decide(&pod, namespace, self.sidecars, self.settings) {
            crate::injection::Decision::Deny(denial) => Some(denial.to_string()),
            _ => None,
        }
    }
}
