//! The rollout executor: the thin I/O shell around the planner. On every change of the index
//! or the configs (and on a timer, from the index, never a relist) it plans, and, while this
//! replica may act, does what the plan says: merge patches of the pod-template stamps,
//! evictions for OnDelete workloads, Events, metrics, and the status ConfigMap that keeps
//! campaigns (and pauses) across restarts and leader changes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::annotations::AnnotationKeys;
use crate::cluster::drift_feed::{DriftFeed, FollowedPods, PodRead};
use crate::cluster::events::{EVENT_ACTION_LIMIT, EVENT_NOTE_LIMIT, shortened};
use crate::cluster::status::{self, STATUS_CAMPAIGNS_KEY, STATUS_CONFIGMAP};
use crate::config::SidecarSet;
use crate::drift::DriftPolicy;
use crate::metrics::{EngineCall, Metrics, RolloutResult};
use crate::rollout::change::restart_action;
use crate::rollout::history::RevisionHistory;
use crate::rollout::machine::{Conduct, Effect, OnIndex, RolloutState};
use crate::rollout::selection::ContainerSelection;
use crate::rollout::targets::{ContentHistory, in_force, plan_targets};
use crate::rollout::{self, RolloutPlan, RolloutSettings, SidecarTarget};
use crate::workload::{RestartMethod, WorkloadKind, WorkloadRef};

/// Every API call of the engine gets this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Quiet time after a change before planning, so a burst of watch events costs one plan.
pub(crate) const PLAN_DEBOUNCE: Duration = Duration::from_millis(100);
/// A failed action, or an eviction a PodDisruptionBudget refused, is tried again this long
/// after (or sooner, if something watched changes).
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Progress counts alone are written to the status ConfigMap at most this often; a change of
/// a campaign's state, failures or pause is written at once.
const STATUS_COUNTS_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineMode {
    /// Restart stale workloads.
    #[default]
    Auto,
    /// Plan and report (log, status ConfigMap), never restart.
    DryRun,
    /// No rollout engine.
    Off,
}

impl EngineMode {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineMode::Auto => "auto",
            EngineMode::DryRun => "dry-run",
            EngineMode::Off => "off",
        }
    }
}

#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub mode: EngineMode,
    pub settings: RolloutSettings,
    pub keys: AnnotationKeys,
    pub policy: DriftPolicy,
    /// Where the status ConfigMap (and the Lease) live: the injector's namespace.
    pub namespace: String,
    pub replan_every: Duration,
    /// The one-shot CLI: every sidecar is restartable (`policy: manual` included).
    pub ignore_manual_policy: bool,
    /// When set, only these workload kinds (the CLI's --include-statefulset and friends).
    pub kinds: Option<BTreeSet<WorkloadKind>>,
    /// The CLI's --rollout-reason, put before the engine's own reason.
    pub reason_prefix: Option<String>,
}

/// The one-shot CLI's `--sidecar-container-name`: what to restart comes from a selection of
/// pods by container name instead of from revisions.
pub struct ContainerRun {
    pub selection: ContainerSelection,
    /// The uids of the pods that exist now, kept by a metadata watch.
    pub live: Arc<Mutex<HashSet<String>>>,
}

/// What a one-shot run ends with.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RunSummary {
    pub restarted: BTreeSet<WorkloadRef>,
    pub succeeded: BTreeSet<WorkloadRef>,
    pub failed: Vec<rollout::Failure>,
    pub waiting: Vec<rollout::Waiting>,
    /// Failed before this run under the revision in force, so not restarted by it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_earlier: Vec<rollout::FailedEarlier>,
    /// Restarted, then gone (deleted, or a bare pod evicted): nothing left to judge.
    pub gone: BTreeSet<WorkloadRef>,
}

/// Why one of the executor's actions failed: the step, what it acted on, and the API's
/// answer. Every action is retried by a later plan, so a failure is logged and counted.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
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
    #[error("cannot read pod {namespace}/{pod}: {source}")]
    ReadPod {
        namespace: String,
        pod: String,
        source: kube::Error,
    },
}

impl ActionError {
    /// The `verb` label of `sidecar_injector_rollout_api_errors_total`.
    pub fn metric_label(&self) -> EngineCall {
        match self {
            ActionError::Patch { .. } => EngineCall::Patch,
            ActionError::Evict { .. } => EngineCall::Evict,
            ActionError::RecordEvent { .. } => EngineCall::Event,
            ActionError::WriteStatus { .. } | ActionError::WriteHistory { .. } => {
                EngineCall::Status
            }
            ActionError::ReadPod { .. } => EngineCall::ReadPod,
            ActionError::PatchPod { .. } => EngineCall::PatchPod,
        }
    }
}

/// Whether this process may act on its plan: the Lease holder (or the one-shot CLI) acts;
/// every other replica only plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authority {
    Act,
    PlanOnly,
}

pub struct Engine {
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
    /// The resourceVersion of the status ConfigMap our book corresponds to.
    known_version: Option<String>,
    /// The error of the malformed book last said, so that it is said once.
    malformed_book: Option<String>,
    written: Option<BTreeMap<String, String>>,
    /// The book this process last wrote, counts aside, and when.
    written_shape: Option<(String, Timestamp)>,
    /// The next moment a plan can change by time alone (see [`RolloutPlan::wake_at`]), or an
    /// action is due again.
    wake_at: Option<Timestamp>,
    status: watch::Receiver<Option<ConfigMap>>,
    notifier: Option<notifier::Notifier>,
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
    pub fn new(
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
            known_version: None,
            malformed_book: None,
            written: None,
            written_shape: None,
            wake_at: None,
            status,
            notifier: None,
            containers: None,
            published: None,
            summary: None,
        }
    }

    /// Keeps what this run restarted and how each ended, for [`Engine::summary`].
    pub fn keep_summary(&mut self) {
        self.summary.get_or_insert_default();
    }

    /// What this run restarted and how each ended, since [`Engine::keep_summary`] (else empty).
    pub fn summary(&self) -> &RunSummary {
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
    pub fn notify_with(&mut self, notifier: notifier::Notifier) {
        self.notifier = Some(notifier);
    }

    /// Brings pods to the revisions of `publication` (what the running injector injects)
    /// instead of the revisions of the configs this process read.
    pub fn use_publication(&mut self, publication: crate::cluster::status::Publication) {
        self.published = Some(publication);
    }

    /// The targets of a plan by revision: the cluster's book adopted, pins whose config changed
    /// dropped (when this process writes the book), the history read; and the configs in force
    /// (see [`in_force`]), already noted in the history.
    async fn revision_targets(
        &mut self,
        set: &SidecarSet,
        may_write: bool,
    ) -> (BTreeMap<String, SidecarTarget>, SidecarSet) {
        self.adopt_cluster_book();
        if may_write && self.published.is_none() {
            for (sidecar, pin) in self.state.book.drop_stale_pins(set) {
                info!(
                    sidecar,
                    "the pin of {sidecar} at {} ends: its config changed since it was pinned over {}",
                    pin.revision,
                    pin.over
                );
            }
        }
        self.load_revisions().await;
        let (pinned, errors) = self.state.book.pinned(set);
        self.say_overlay_errors(&errors);
        let published = self.published.as_ref().map(|p| (&p.revisions, &p.manual));
        let targets = plan_targets(
            published,
            &self.state.book,
            &mut self.history,
            &pinned,
            !self.options.ignore_manual_policy,
        );
        // The content of each revision in force is in the history before the plan compares
        // it (an in-place upgrade needs both contents).
        let in_force = in_force(&pinned, &targets);
        self.revisions_dirty |= self.revisions.observe(
            &in_force,
            &self.state.book,
            Timestamp::now(),
            self.options.settings.good_after,
            self.options.settings.history_limit,
        );
        (targets, in_force)
    }

    /// Logs what a pin could not serve, once while it stays the same.
    fn say_overlay_errors(&mut self, errors: &[rollout::content::ContentError]) {
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if texts != self.overlay_errors {
            for text in &texts {
                warn!("a pinned revision is not served: {text}");
            }
            self.overlay_errors = texts;
        }
    }

    /// Reads the revision history ConfigMap until it has been read once; a failure is said and
    /// tried again at the next plan (the history is never written before it was read).
    async fn load_revisions(&mut self) {
        if self.revisions_version.is_some() {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.options.namespace);
        self.metrics.record_api_request(EngineCall::Status);
        match status::read_history(&api).await {
            Ok((history, version)) => {
                self.revisions = history;
                self.revisions_version = Some(version);
            }
            Err(err) => warn!(
                "{}; a paused campaign cannot hold new pods at a good revision until it is read",
                crate::cluster::error_text(&err)
            ),
        }
    }

    /// Notes the revisions served and their outcomes in the history, and writes it when that
    /// changed it (or it was never written).
    async fn record_revisions(&mut self, served: &SidecarSet, now: Timestamp) {
        let Some(version) = self.revisions_version.clone() else {
            return;
        };
        self.revisions_dirty |= self.revisions.observe(
            served,
            &self.state.book,
            now,
            self.options.settings.good_after,
            self.options.settings.history_limit,
        );
        if !self.revisions_dirty && version.is_some() {
            return;
        }
        if self.revisions.sidecars.is_empty() {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.options.namespace);
        let object = status::history_object(&self.options.namespace, version, &self.revisions);
        self.metrics.record_api_request(EngineCall::Status);
        match with_timeout(status::write(&api, &object)).await {
            Ok(written) => {
                self.revisions_version = Some(written.metadata.resource_version);
                self.revisions_dirty = false;
            }
            // Another holder wrote it since: read it again and note this plan's view on it.
            Err(e) if crate::cluster::is_conflict(&e) => {
                info!("the revision history changed under us; re-reading it");
                self.revisions_version = None;
                self.retry_later();
            }
            Err(source) => {
                self.failed(&ActionError::WriteHistory { source });
                self.retry_later();
            }
        }
    }

    /// Plans from `run` instead of from revisions. Such a run keeps its campaign to itself: it
    /// neither reads nor writes the status ConfigMap, whose revisions and campaigns are the
    /// injector's.
    pub fn select_containers(&mut self, run: ContainerRun) {
        self.containers = Some(run);
    }

    /// Workloads this process restarted that have no outcome yet (a workload scaled to zero
    /// or deleted mid-rollout has no pods in the plan, yet still awaits one).
    pub fn awaiting_outcomes(&self) -> usize {
        self.state.awaiting_success.len()
    }

    /// Resolves when the status ConfigMap changes (a pause or a resume from elsewhere), as
    /// `serve`'s loop wakes on it; `false` once its watch is gone.
    pub async fn status_changed(&mut self) -> bool {
        self.status.changed().await.is_ok()
    }

    /// Waits for the first read of the status ConfigMap (present or not).
    pub async fn load_status(&mut self) {
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, self.status.changed()).await;
        self.adopt_cluster_book();
    }

    /// Adopts the cluster's book when someone else wrote it (a previous leader, `rollout
    /// --resume`).
    fn adopt_cluster_book(&mut self) {
        let status = self.status.borrow_and_update().clone();
        let Some(configmap) = status else {
            return;
        };
        let version = configmap.metadata.resource_version.clone();
        if version.is_some() && version == self.known_version {
            return;
        }
        // Only a change of the campaigns item is someone else's book (a previous leader,
        // `rollout --resume`); a publication or heartbeat leaves ours as it is.
        let item = |data: Option<&BTreeMap<String, String>>| {
            data.and_then(|d| d.get(STATUS_CAMPAIGNS_KEY)).cloned()
        };
        let theirs = item(configmap.data.as_ref());
        if theirs != item(self.written.as_ref()) {
            // Theirs is in the ConfigMap now: whatever differs from it is written at once.
            self.written_shape = None;
            if let Some(Some(book)) =
                status::book_or_warn(Some(&configmap), &mut self.malformed_book)
            {
                for line in rollout::journal::resumptions(&self.state.book, &book) {
                    say(&line);
                }
                self.state.book = book;
            }
        }
        self.written = configmap.data.clone().map(|d| d.into_iter().collect());
        self.known_version = version;
    }

    /// Plans from the index; acts on the plan when this process has the authority to.
    pub async fn tick(
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
        let bakes_changed = self.bakes_changed(feed);
        let now = Timestamp::now();
        let step = self.step(feed, &targets, &bakes_changed, now, conduct);
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
            self.perform(effect, &feed.followed, authority, &in_force, now)
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

    /// The state machine's step on the index as it stands.
    fn step(
        &mut self,
        feed: &DriftFeed,
        targets: &BTreeMap<String, SidecarTarget>,
        bakes_changed: &BTreeSet<WorkloadRef>,
        now: Timestamp,
        conduct: Conduct,
    ) -> rollout::machine::Step {
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
                reason,
                workloads,
            } => self.announce_pause(&sidecar, &reason, workloads).await,
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
        error!(workload = %failure.workload, reason = %failure.reason, "rollout failed");
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
            &failure.reason,
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
    pub fn next_wake(&self, now: Instant) -> Option<Instant> {
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

    async fn patch(&self, restart: &rollout::Restart, now: Timestamp) -> Result<(), ActionError> {
        let keys = &self.options.keys;
        let reason = match &self.options.reason_prefix {
            Some(prefix) => format!("{prefix}: {}", restart.reason),
            None => restart.reason.clone(),
        };
        let cause = format!("sidecar-injector: {reason}");
        // A first restart clears the mark, so a target the workload comes back to may be
        // healed again.
        let heal = restart.heal.then_some(restart.target.as_ref()).flatten();
        let body = json!({
            "metadata": {"annotations": {
                keys.rolled_at.as_str(): now.to_string(),
                "kubernetes.io/change-cause": cause,
            }},
            "spec": {"template": {"metadata": {"annotations": {
                keys.rollout_revision.as_str(): restart.target,
                keys.rollout_reason.as_str(): reason,
                keys.rollout_heal.as_str(): heal,
            }}}}
        });
        let (client, namespace, name) = (
            self.client.clone(),
            &restart.workload.namespace,
            &restart.workload.name,
        );
        self.metrics.record_api_request(EngineCall::Patch);
        let result = match restart.workload.controller_kind() {
            Some(WorkloadKind::Deployment) => {
                merge_patch::<Deployment>(client, namespace, name, &body).await
            }
            Some(WorkloadKind::StatefulSet) => {
                merge_patch::<StatefulSet>(client, namespace, name, &body).await
            }
            Some(WorkloadKind::DaemonSet) => {
                merge_patch::<DaemonSet>(client, namespace, name, &body).await
            }
            Some(WorkloadKind::Pod) | None => Ok(()),
        };
        result.map_err(|source| ActionError::Patch {
            workload: restart.workload.clone(),
            source,
        })
    }

    async fn event(
        &self,
        workload: &WorkloadRef,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let reference = ObjectReference {
            api_version: Some(workload.kind.api_version().into()),
            kind: Some(workload.kind.as_str().into()),
            name: Some(workload.name.clone()),
            namespace: Some(workload.namespace.clone()),
            ..Default::default()
        };
        self.publish_event(&reference, type_, reason, action, note)
            .await;
    }

    async fn publish_event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(shortened(note, EVENT_NOTE_LIMIT)),
            // The recorder folds repeats by (reason, action, object) for minutes, keeping the
            // first note: the revisions go into the action so each campaign is its own Event.
            action: shortened(action, EVENT_ACTION_LIMIT),
            secondary: None,
        };
        self.metrics.record_api_request(EngineCall::Event);
        if let Err(source) = with_timeout(self.recorder.publish(&event, reference)).await {
            self.failed(&ActionError::RecordEvent {
                object: format!(
                    "{}/{}",
                    reference.kind.as_deref().unwrap_or_default(),
                    reference.name.as_deref().unwrap_or_default()
                ),
                source,
            });
        }
    }

    /// Writes revisions and campaigns to the status ConfigMap when they changed.
    /// The campaign book; the revisions in force are each serving replica's to publish.
    async fn write_status(&mut self) {
        self.write_status_when(false).await;
    }

    /// The size of the book the status ConfigMap holds, for the book alert.
    fn record_book_size(&self, data: &BTreeMap<String, String>) {
        let bytes = data.get(STATUS_CAMPAIGNS_KEY).map_or(0, String::len);
        self.metrics
            .rollout_book
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Writes what the progress counts alone have changed since the last write (the one-shot
    /// CLI, as it ends).
    pub async fn flush_status(&mut self) {
        if self.containers.is_none() && self.options.mode == EngineMode::Auto {
            self.write_status_when(true).await;
        }
    }

    /// Writes the book when it changed: at once when a campaign's state, failures or pause
    /// changed, at most every [`STATUS_COUNTS_EVERY`] when only its counts did (a campaign
    /// would otherwise rewrite the ConfigMap at nearly every restart); `flush` writes now.
    async fn write_status_when(&mut self, flush: bool) {
        let data = status::encode(self.written.as_ref(), &self.state.book);
        if self.written.as_ref() == Some(&data) {
            self.record_book_size(&data);
            return;
        }
        let shape = status::book_shape(&self.state.book);
        let now = Timestamp::now();
        if !flush
            && let Some((written, at)) = &self.written_shape
            && *written == shape
        {
            let due = rollout::after(*at, STATUS_COUNTS_EVERY);
            if due > now {
                self.wake_at(due);
                return;
            }
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.options.namespace);
        let configmap = status::status_object(
            &self.options.namespace,
            self.known_version.clone(),
            data.clone(),
        );
        self.metrics.record_api_request(EngineCall::Status);
        let result = with_timeout(status::write(&api, &configmap)).await;
        match result {
            Ok(written) => {
                self.known_version = written.metadata.resource_version;
                self.record_book_size(&data);
                self.written = Some(data);
                self.written_shape = Some((shape, now));
            }
            // Someone else wrote it since (or it exists already): the watch brings their copy,
            // which is adopted before the next write.
            Err(e) if crate::cluster::is_conflict(&e) => {
                info!("the status ConfigMap changed under us; re-reading it");
                if self.known_version.is_none() {
                    self.known_version = Some(String::new());
                }
            }
            Err(source) => {
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
        line.message
    );
}

async fn merge_patch<K>(
    client: Client,
    namespace: &str,
    name: &str,
    body: &Value,
) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client, namespace);
    with_timeout(api.patch(name, &PatchParams::default(), &Patch::Merge(body)))
        .await
        .map(|_| ())
}

/// When a planning loop (`serve`'s, `rollout --confirm`'s) must plan again though nothing it
/// watches changed: the soonest of `moments` (the plan's own next change, a grant's end...),
/// and never later than `safety_net` from `now`, a net should a watch miss a change, not what
/// paces a campaign. A moment already past is due at once.
pub(crate) fn soonest_wake(
    now: Instant,
    safety_net: Duration,
    moments: impl IntoIterator<Item = Option<Instant>>,
) -> Instant {
    moments
        .into_iter()
        .flatten()
        .fold(now + safety_net, Instant::min)
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
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {REQUEST_TIMEOUT:?}").into(),
        )),
    }
}

/// Runs the engine for `serve` until the process ends: plans on every change and whenever the
/// last plan said it would change by time alone, acts only while `grant` allows, and only once
/// this replica has been ready (`not_ready` says why not, `None` when ready) for
/// `act_after_ready`: a pod the engine restarts is created through the webhook, and until the
/// Service sends the API server's calls to a ready replica, it would come back without its
/// sidecars (failurePolicy Ignore).
pub async fn run(
    mut engine: Engine,
    mut feed: DriftFeed,
    mut sidecars: watch::Receiver<Arc<SidecarSet>>,
    mut not_ready: watch::Receiver<Option<&'static str>>,
    mut grant: watch::Receiver<Option<Instant>>,
    act_after_ready: Duration,
) {
    let mut synced = feed.synced.clone();
    if synced.wait_for(|s| *s).await.is_err() {
        return;
    }
    let replan = engine.options.replan_every;
    info!(
        mode = engine.options.mode.as_str(),
        "rollout engine started"
    );
    let mut leading = false;
    let mut ready_since: Option<Instant> = None;
    loop {
        // Wake when something watched changes, or when the plan says it changes by time
        // alone, or when the warm-up ends. A grant that is not renewed only runs out: nothing
        // is sent when it does. Wake then too, so that a replica whose Lease was taken stops
        // reporting itself leader (and its book) at once, not at the next safety-net replan.
        // `leading` is never true after a pass that was not ready, so an expired grant cannot
        // wake a replica that is not ready again and again.
        let now = Instant::now();
        let wake = soonest_wake(
            now,
            replan,
            [
                engine.next_wake(now),
                ready_since
                    .map(|since| since + act_after_ready)
                    .filter(|&warm| warm > now),
                leading.then(|| *grant.borrow()).flatten(),
            ],
        );
        let changed = tokio::select! {
            result = feed.changes.changed() => if result.is_err() { return } else { true },
            result = sidecars.changed() => if result.is_err() { return } else { true },
            result = grant.changed() => if result.is_err() { return } else { true },
            result = engine.status.changed() => if result.is_err() { return } else { true },
            // Becoming ready, or no longer, is acted on at once: a leader that stops being
            // ready steps down now, not at its next planned pass.
            result = not_ready.changed() => if result.is_err() { return } else { true },
            () = tokio::time::sleep_until(wake.into()) => false,
        };
        if changed {
            tokio::time::sleep(PLAN_DEBOUNCE).await;
        }
        feed.changes.borrow_and_update();
        let was_ready = not_ready.borrow_and_update().is_none();
        if !was_ready {
            ready_since = None;
        }
        // A replica that is not ready does not act, and says so: it is not the leader.
        let warmed =
            was_ready && ready_since.get_or_insert_with(Instant::now).elapsed() >= act_after_ready;
        let may_act = warmed && crate::cluster::lease::may_act(&grant);
        if may_act != leading {
            engine.metrics.rollout_leader.set(i64::from(may_act));
            // The book is the leader's to report: an ex-leader's last figure would keep the
            // book alert firing after the new leader's book shrank.
            if !may_act {
                engine.metrics.rollout_book.set(0);
            }
            leading = may_act;
        }
        if !was_ready {
            continue;
        }
        let set = sidecars.borrow_and_update().clone();
        let authority = if may_act {
            Authority::Act
        } else {
            Authority::PlanOnly
        };
        engine.tick(&feed, &set, authority).await;
    }
}

mod health_bake;
pub mod notifier;
mod pod_replacement;

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
