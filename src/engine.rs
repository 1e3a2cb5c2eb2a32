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
use crate::config::{RevisionsInForce, SidecarSet};
use crate::drift::{DriftPolicy, PodToReplace};
use crate::metrics::{EngineCall, Metrics, RolloutResult};
use crate::rollout::change::restart_action;
use crate::rollout::eviction::{BlockedEviction, LastEviction};
use crate::rollout::history::RevisionHistory;
use crate::rollout::outcome::{PodlessOutcome, podless_outcomes};
use crate::rollout::selection::ContainerSelection;
use crate::rollout::targets::{ContentHistory, published_targets};
use crate::rollout::{self, CampaignBook, PlanInput, RolloutPlan, RolloutSettings, SidecarTarget};
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

/// An OnDelete workload rolling: the pods still to evict, one at a time while it is healthy.
struct Eviction {
    workload: WorkloadRef,
    pods: Vec<PodToReplace>,
    healthy: bool,
    /// Its `minReadySeconds`: a pod upgraded in place counts as available again only then.
    min_ready: Duration,
}

/// A plan, with what the executor needs from the index to carry it out.
struct Planned {
    plan: RolloutPlan,
    evictions: Vec<Eviction>,
    podless: BTreeMap<WorkloadRef, PodlessOutcome>,
    /// The pods of each workload whose bake the plan asks to check.
    bake_reads: Vec<(WorkloadRef, Vec<String>)>,
}

pub struct Engine {
    client: Client,
    options: EngineOptions,
    metrics: Arc<Metrics>,
    recorder: Recorder,
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
    finished_since: BTreeMap<WorkloadRef, Timestamp>,
    evictions: BTreeMap<WorkloadRef, LastEviction>,
    /// The template stamps this process wrote and whose rollout is not over: one found gone
    /// with the pods still stale was reverted.
    stamped: BTreeMap<WorkloadRef, crate::config::RevisionStamp>,
    /// Restarts by eviction under way (the template is never written for them).
    evicting: BTreeMap<WorkloadRef, rollout::EvictionRestart>,
    /// Workloads in their health bake.
    baking: BTreeMap<WorkloadRef, rollout::Bake>,
    /// The pods of each bake as last read, followed by the pod watch while the bake is open.
    bake_pods: BTreeMap<WorkloadRef, health_bake::BakeRead>,
    /// The pod of each workload being upgraded in place (one at a time).
    upgrades: BTreeMap<WorkloadRef, pod_replacement::UpgradeUnderWay>,
    /// Pods upgraded in place, by workload and pod uid: their containers' restart counts once
    /// upgraded, which the health bake counts restarts from (the upgraded container restarted
    /// on purpose). Kept while the workload rolls (its bake included).
    upgraded: BTreeMap<WorkloadRef, BTreeMap<String, BTreeMap<String, i32>>>,
    /// Workloads whose evictions a PodDisruptionBudget refuses, since when.
    blocked: BTreeMap<WorkloadRef, BlockedEviction>,
    book: CampaignBook,
    /// The resourceVersion of the status ConfigMap our book corresponds to.
    known_version: Option<String>,
    written: Option<BTreeMap<String, String>>,
    /// The book this process last wrote, counts aside, and when.
    written_shape: Option<(String, Timestamp)>,
    /// The next moment a plan can change by time alone (see [`RolloutPlan::wake_at`]), or an
    /// action is due again.
    wake_at: Option<Timestamp>,
    status: watch::Receiver<Option<ConfigMap>>,
    /// Workloads this process restarted whose success is not reported yet.
    awaiting_success: BTreeSet<WorkloadRef>,
    journal: rollout::journal::Journal,
    notices: rollout::notice::NoticeTracker,
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
            finished_since: BTreeMap::new(),
            evictions: BTreeMap::new(),
            blocked: BTreeMap::new(),
            baking: BTreeMap::new(),
            bake_pods: BTreeMap::new(),
            upgrades: BTreeMap::new(),
            upgraded: BTreeMap::new(),
            stamped: BTreeMap::new(),
            evicting: BTreeMap::new(),
            book: CampaignBook::default(),
            known_version: None,
            written: None,
            written_shape: None,
            wake_at: None,
            status,
            awaiting_success: BTreeSet::new(),
            journal: rollout::journal::Journal::default(),
            notices: Default::default(),
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

    /// The revisions to bring pods to, with what changed when this process saw the previous
    /// content of a sidecar; `set` has the book's pins applied.
    fn targets(&mut self, set: &SidecarSet) -> BTreeMap<String, SidecarTarget> {
        let honour_manual = !self.options.ignore_manual_policy;
        match &self.published {
            Some(published) => {
                let mut targets =
                    published_targets(&published.revisions, &published.manual, set, honour_manual);
                // Replicas publish the pinned revision once they have read the pin; until then
                // they publish the config's, which the pin replaces.
                for (sidecar, pin) in &self.book.pins {
                    if let Some(target) = targets.get_mut(sidecar)
                        && target.revision == pin.over
                    {
                        target.revision.clone_from(&pin.revision);
                    }
                }
                targets
            }
            None => self.history.targets(set, honour_manual),
        }
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
            for (sidecar, pin) in self.book.drop_stale_pins(set) {
                info!(
                    sidecar,
                    "the pin of {sidecar} at {} ends: its config changed since it was pinned over {}",
                    pin.revision,
                    pin.over
                );
            }
        }
        self.load_revisions().await;
        let (pinned, errors) = self.book.pinned(set);
        self.say_overlay_errors(&errors);
        let targets = self.targets(&pinned);
        // The content of each revision in force is in the history before the plan compares
        // it (an in-place upgrade needs both contents).
        let in_force = in_force(&pinned, &targets);
        self.revisions_dirty |= self.revisions.observe(
            &in_force,
            &self.book,
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
            &self.book,
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
        self.awaiting_success.len()
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
            match status::decode_book(&configmap) {
                Ok(Some(book)) => {
                    for line in rollout::journal::resumptions(&self.book, &book) {
                        say(&line);
                    }
                    self.book = book;
                }
                Err(err) => warn!(
                    "the status ConfigMap's {STATUS_CAMPAIGNS_KEY} item is malformed; starting fresh: {err}"
                ),
                Ok(None) => {}
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
        let may_write = authority == Authority::Act && self.options.mode == EngineMode::Auto;
        let (targets, in_force) = match &self.containers {
            Some(run) => (run.selection.targets(), SidecarSet::default()),
            None => self.revision_targets(set, may_write).await,
        };
        let wanted: RevisionsInForce = targets
            .iter()
            .map(|(name, t)| (name.clone(), t.revision.clone()))
            .collect();
        let now = Timestamp::now();
        self.note_upgrades();
        self.note_bake_changes(feed);
        let Planned {
            plan,
            evictions,
            podless,
            bake_reads,
        } = self.plan_now(feed, &targets, &wanted, now);
        self.wake_at = plan.wake_at;
        let previous: BTreeMap<WorkloadRef, Timestamp> = std::mem::take(&mut self.finished_since);
        self.finished_since = plan
            .finished_not_current
            .iter()
            .map(|w| (w.clone(), previous.get(w).copied().unwrap_or(now)))
            .collect();
        self.metrics
            .rollouts_in_flight
            .set(plan.rolling.len() as i64);
        self.summarise(|summary| {
            summary.waiting = plan.waiting.clone();
            summary.failed_earlier = plan
                .failed_earlier
                .iter()
                .filter(|e| !summary.failed.iter().any(|f| f.workload == e.workload))
                .cloned()
                .collect();
        });
        if self.options.mode != EngineMode::Off {
            self.follow_bakes(&plan, bake_reads, now, &feed.followed, authority)
                .await;
        }
        if authority == Authority::PlanOnly {
            return plan;
        }
        self.book = plan.book.clone();
        match self.options.mode {
            EngineMode::Auto => {
                self.metrics.record_campaigns(&self.book);
                self.act(&plan, evictions, now, &feed.followed).await;
                self.end_podless(podless);
                for line in self.journal.campaigns(&plan, &self.book) {
                    say(&line);
                }
                if let Some(notifier) = &self.notifier {
                    for notice in self.notices.notices(
                        &plan,
                        &self.book,
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                    ) {
                        notifier.notify(notice);
                    }
                }
                if self.containers.is_none() {
                    self.write_status().await;
                    self.record_revisions(&in_force, now).await;
                }
            }
            // A dry run acts on nothing, so its campaigns never progress: it keeps them to
            // itself (no status write, no campaign gauge) and says the whole plan instead.
            EngineMode::DryRun => {
                for line in self.journal.dry_run(&plan) {
                    say(&line);
                }
            }
            EngineMode::Off => {}
        }
        plan
    }

    /// What the planner knows of the upgrades under way, taken from them each time rather than
    /// kept in step with them.
    fn note_upgrades(&mut self) {
        for (workload, restart) in &mut self.evicting {
            let under_way = self.upgrades.get(workload);
            restart.upgrading = under_way.is_some();
            restart.awaiting = under_way.map(|u| u.awaiting.clone());
        }
    }

    /// The plan from the index as it stands, and for each OnDelete workload rolling, the pods
    /// still to evict and whether it is healthy enough for the next.
    fn plan_now(
        &self,
        feed: &DriftFeed,
        targets: &BTreeMap<String, SidecarTarget>,
        wanted: &RevisionsInForce,
        now: Timestamp,
    ) -> Planned {
        let index = feed.index.lock().expect("drift index lock");
        let live = self
            .containers
            .as_ref()
            .map(|run| run.live.lock().expect("live pods lock"));
        let mut report = match (&self.containers, &live) {
            (Some(run), Some(live)) => run.selection.report(live),
            _ => index.classify_revisions(wanted, &self.options.policy),
        };
        if let Some(kinds) = &self.options.kinds {
            report
                .workloads
                .retain(|w| w.kind.workload().is_some_and(|k| kinds.contains(&k)));
        }
        let mut plan = rollout::plan(PlanInput {
            report: &report,
            index: &index,
            targets,
            book: &self.book,
            finished_since: &self.finished_since,
            stamped: &self.stamped,
            evicting: &self.evicting,
            baking: &self.baking,
            settings: &self.options.settings,
            history: &self.revisions,
            now,
        });
        let evictions = plan
            .rolling
            .iter()
            .filter(|r| r.on_delete)
            .filter_map(|r| {
                let kind = r.workload.controller_kind()?;
                let entry = index.workload(kind, &r.workload.namespace, &r.workload.name)?;
                let pods = match (&self.containers, &live) {
                    (Some(run), Some(live)) => {
                        run.selection.pods_needing_restart(&r.workload, live)
                    }
                    _ => index.pods_needing_restart(
                        kind,
                        &r.workload.namespace,
                        &r.workload.name,
                        wanted,
                        self.options.policy.restart_unknown,
                    ),
                };
                Some(Eviction {
                    workload: r.workload.clone(),
                    pods,
                    healthy: rollout::rolled_out(kind, entry),
                    min_ready: Duration::from_secs(
                        entry
                            .min_ready_seconds
                            .and_then(|s| u64::try_from(s).ok())
                            .unwrap_or(0),
                    ),
                })
            })
            .collect();
        if let Some(run) = &self.containers {
            for restart in &mut plan.restarts {
                restart.reason = run.selection.reason(&restart.workload);
            }
        }
        let podless = podless_outcomes(&self.awaiting_success, &report, &index);
        let bake_reads = plan
            .bake_checks
            .iter()
            .filter_map(|workload| {
                let kind = workload.controller_kind()?;
                let pods = index.pod_names(kind, &workload.namespace, &workload.name);
                Some((workload.clone(), pods))
            })
            .collect();
        Planned {
            plan,
            evictions,
            podless,
            bake_reads,
        }
    }

    async fn act(
        &mut self,
        plan: &RolloutPlan,
        evictions: Vec<Eviction>,
        now: Timestamp,
        followed: &FollowedPods,
    ) {
        // A restart by eviction ends when its workload no longer rolls to its target; a stamp
        // matters until its workload's outcome is known; the pace of evictions only within a
        // rollout.
        self.evicting.retain(|w, e| {
            plan.rolling
                .iter()
                .any(|r| &r.workload == w && r.target == e.target)
        });
        self.evictions
            .retain(|w, _| plan.rolling.iter().any(|r| &r.workload == w));
        for done in plan
            .succeeded
            .iter()
            .chain(plan.failed.iter().map(|f| &f.workload))
        {
            self.stamped.remove(done);
        }
        for restart in &plan.restarts {
            self.restart(restart, now).await;
        }
        self.blocked.retain(|w, _| {
            evictions
                .iter()
                .any(|e| &e.workload == w && !e.pods.is_empty())
        });
        self.follow_upgrades(followed).await;
        for eviction in evictions {
            let in_place = self
                .evicting
                .get(&eviction.workload)
                .filter(|e| e.in_place)
                .map(|e| e.target.clone());
            match in_place {
                Some(target) => self.upgrade_next(&eviction, &target, followed).await,
                None => {
                    self.evict_next(&eviction.workload, &eviction.pods, eviction.healthy)
                        .await;
                }
            }
        }
        self.report_outcomes(plan).await;
        for (sidecar, reason) in &plan.paused {
            self.announce_pause(sidecar, reason).await;
        }
    }

    /// Restarted workloads with no pods left end too: succeeded when rolled out (scaled to
    /// zero), gone when deleted or evicted for good.
    fn end_podless(&mut self, podless: BTreeMap<WorkloadRef, PodlessOutcome>) {
        for (workload, outcome) in podless {
            if !self.awaiting_success.remove(&workload) {
                continue;
            }
            match outcome {
                PodlessOutcome::Succeeded => {
                    self.metrics
                        .record_rollout(workload.kind, RolloutResult::Succeeded);
                    self.summarise(|summary| {
                        summary.succeeded.insert(workload);
                    });
                }
                PodlessOutcome::Gone => {
                    info!(workload = %workload, "restarted workload no longer exists");
                    self.stamped.remove(&workload);
                    self.summarise(|summary| {
                        summary.gone.insert(workload);
                    });
                }
            }
        }
    }

    /// One restart: a template patch, or the eviction of a bare pod; an Event either way.
    async fn restart(&mut self, restart: &rollout::Restart, now: Timestamp) {
        let result = match (&restart.target, restart.method) {
            _ if restart.workload.kind == WorkloadKind::Pod => {
                match self.evict_bare_pod(&restart.workload, now).await {
                    Some(result) => result,
                    None => return,
                }
            }
            (Some(target), method @ (RestartMethod::Evict | RestartMethod::InPlace)) => {
                // Nothing is written: the next plan rolls it by evicting its stale pods, or
                // upgrading them in place.
                let in_place = method == RestartMethod::InPlace;
                if in_place {
                    info!(workload = %restart.workload, "upgrading in place, pod by pod: {}", restart.reason);
                } else {
                    info!(workload = %restart.workload, "restarting by eviction: {}", restart.reason);
                }
                self.evicting.insert(
                    restart.workload.clone(),
                    rollout::EvictionRestart {
                        target: target.clone(),
                        since: now,
                        in_place,
                        problem: None,
                        upgrading: false,
                        awaiting: None,
                    },
                );
                self.wake_at(now);
                Ok(())
            }
            _ => {
                let patched = self.patch(restart, now).await;
                if let (Ok(()), Some(target)) = (&patched, &restart.target) {
                    self.stamped
                        .insert(restart.workload.clone(), target.clone());
                }
                patched
            }
        };
        if let Err(err) = result {
            self.failed(&err);
            self.retry_later();
            self.metrics
                .record_rollout(restart.workload.kind, RolloutResult::Error);
            return;
        }
        info!(workload = %restart.workload, canary = restart.canary, method = restart.method.as_str(), reason = %restart.reason, "restarted for a new sidecar revision");
        self.metrics
            .record_rollout(restart.workload.kind, RolloutResult::Restarted);
        self.summarise(|summary| {
            summary.restarted.insert(restart.workload.clone());
        });
        self.awaiting_success.insert(restart.workload.clone());
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
                self.wake_at(rollout::after(now, rollout::eviction::BLOCKED_RETRY));
                None
            }
            Err(err) => Some(Err(err)),
        }
    }

    async fn report_outcomes(&mut self, plan: &RolloutPlan) {
        // A success is counted once, and only for a restart this process made: another run's
        // or an earlier revision's finished workloads are not this process's to report.
        for succeeded in &plan.succeeded {
            if self.awaiting_success.remove(succeeded) {
                self.metrics
                    .record_rollout(succeeded.kind, RolloutResult::Succeeded);
                self.summarise(|summary| {
                    summary.succeeded.insert(succeeded.clone());
                });
            }
        }
        for failure in &plan.failed {
            error!(workload = %failure.workload, reason = %failure.reason, "rollout failed");
            // Counted as this process's failure only when it made the restart (a new leader
            // still says it: the Event and the log line); either way nothing awaits it now.
            if self.awaiting_success.remove(&failure.workload) {
                self.metrics
                    .record_rollout(failure.workload.kind, RolloutResult::Failed);
                self.summarise(|summary| summary.failed.push(failure.clone()));
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
    }

    /// A pause is said in a log line and a Warning Event on the status ConfigMap and on each
    /// workload whose failure caused it (not on those of a pause already resumed: each had
    /// its own).
    async fn announce_pause(&mut self, sidecar: &str, reason: &str) {
        error!(sidecar, "{reason}");
        let failed: Vec<WorkloadRef> = self
            .book
            .campaigns
            .get(sidecar)
            .map(|c| {
                c.unacknowledged_details()
                    .iter()
                    .map(|f| f.workload.clone())
                    .collect()
            })
            .unwrap_or_default();
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
        let data = status::encode(self.written.as_ref(), &self.book);
        if self.written.as_ref() == Some(&data) {
            self.record_book_size(&data);
            return;
        }
        let shape = status::book_shape(&self.book);
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

/// The configs this process read (`pinned`: pins applied) whose revision is the one pods are
/// brought to (the one-shot CLI may judge by published revisions): their content is that
/// revision's.
fn in_force(pinned: &SidecarSet, targets: &BTreeMap<String, SidecarTarget>) -> SidecarSet {
    pinned
        .iter()
        .filter(|s| {
            targets
                .get(&s.config.name.to_string())
                .is_some_and(|t| t.revision == s.revision.as_str())
        })
        .map(|s| (**s).clone())
        .collect()
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
