//! The rollout state machine, as values. [`RolloutState`] is everything the engine remembers
//! between plans that decides what it does next (the campaign book, restarts under way, bakes,
//! pods replaced one at a time, outcomes still awaited); [`RolloutState::step`] takes it with
//! what was observed and the time, and returns the plan and the [`Effect`]s to carry out. The
//! engine performs the effects and hands their results back through the `on_*` methods, which
//! are pure too: the engine keeps no decision state of its own.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::book::{CampaignBook, Failure};
use super::eviction::{
    BLOCKED_RETRY, BlockNews, BlockedEviction, EVICTION_SPACING, LastEviction,
    carries_failed_revision, next_eviction, on_blocked,
};
use super::gates::after;
use super::health::rolled_out;
use super::history::RevisionHistory;
use super::in_place::{InPlaceUpgrade, UpgradeProgress, next_upgrade};
use super::journal::{Journal, Line};
use super::notice::{Notice, NoticeTracker};
use super::outcome::{PodlessOutcome, podless_outcomes};
use super::plan::{
    Bake, EvictionRestart, PlanInput, Restart, RolloutPlan, RolloutSettings, Served, SidecarTarget,
};
use super::planner::plan;
use super::selection::ContainerSelection;
use crate::config::{RevisionStamp, RevisionsInForce};
use crate::drift::{DriftIndex, DriftPolicy, DriftReport, PodToReplace};
use crate::workload::{RestartMethod, WorkloadKind, WorkloadRef};

/// What the engine remembers between plans.
#[derive(Debug, Default)]
pub struct RolloutState {
    /// The campaigns, pins and holds: the status ConfigMap's, once adopted.
    pub book: CampaignBook,
    /// Since when each workload has been seen finished rolling yet not current.
    pub finished_since: BTreeMap<WorkloadRef, Timestamp>,
    /// The template stamps this process wrote whose rollout is not over: one found gone with
    /// the pods still stale was reverted.
    pub stamped: BTreeMap<WorkloadRef, RevisionStamp>,
    /// Restarts by eviction or in place under way (the template is never written for them).
    pub evicting: BTreeMap<WorkloadRef, EvictionRestart>,
    /// Workloads in their health bake.
    pub baking: BTreeMap<WorkloadRef, Bake>,
    /// The pod of each workload being upgraded in place (one at a time).
    pub upgrades: BTreeMap<WorkloadRef, UpgradeUnderWay>,
    /// Pods upgraded in place, by workload and pod uid: their containers' restart counts once
    /// upgraded, which the bake counts restarts from (the upgraded container restarted on
    /// purpose). Kept while the workload rolls (its bake included).
    pub upgraded: BTreeMap<WorkloadRef, BTreeMap<String, BTreeMap<String, i32>>>,
    /// The last eviction of each OnDelete workload rolling: the pace of the next.
    pub evictions: BTreeMap<WorkloadRef, LastEviction>,
    /// Workloads whose evictions a PodDisruptionBudget refuses, since when.
    pub blocked: BTreeMap<WorkloadRef, BlockedEviction>,
    /// Workloads this process restarted whose outcome is not reported yet.
    pub awaiting_success: BTreeSet<WorkloadRef>,
    journal: Journal,
    notices: NoticeTracker,
}

/// A pod being upgraded in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeUnderWay {
    pub upgrade: InPlaceUpgrade,
    /// Found upgraded and Ready, within its workload's minReadySeconds: when it is available
    /// (nothing the watch sees happens then, so the engine wakes for it).
    pub available_at: Option<Timestamp>,
    /// What it waits for, as last read ([`InPlaceUpgrade::awaiting`]): said if it times out.
    pub awaiting: String,
}

/// What the engine observed for one plan.
pub struct Observed<'a> {
    /// Classified against the revisions of `targets`.
    pub report: &'a DriftReport,
    pub index: &'a DriftIndex,
    pub targets: &'a BTreeMap<String, SidecarTarget>,
    pub settings: &'a RolloutSettings,
    pub history: &'a RevisionHistory,
    /// The stale pods of a rolling OnDelete (or in-place) workload, sorted: from the index, or
    /// from the one-shot CLI's selection by container name.
    pub stale_pods: &'a dyn Fn(&WorkloadRef) -> Vec<PodToReplace>,
    /// The pods a restart is for, when chosen by container name rather than by config.
    pub restart_reason: Option<&'a dyn Fn(&WorkloadRef) -> super::selection::SelectedPods>,
    /// The bakes whose pods changed since they were last read, as the pod watch saw.
    pub bakes_changed: &'a BTreeSet<WorkloadRef>,
    /// What the webhook serves new pods, for the preflight.
    pub served: Option<Served<'a>>,
}

/// What a step is planned from, as the drift index holds it.
pub struct OnIndex<'a> {
    pub index: &'a DriftIndex,
    pub targets: &'a BTreeMap<String, SidecarTarget>,
    pub settings: &'a RolloutSettings,
    pub history: &'a RevisionHistory,
    pub policy: &'a DriftPolicy,
    /// When set, only these workload kinds (the CLI's --include-statefulset and friends).
    pub kinds: Option<&'a BTreeSet<WorkloadKind>>,
    /// The one-shot CLI's `--sidecar-container-name`: what to restart is a selection of pods
    /// by container name, of which these uids still exist, instead of revisions.
    pub selection: Option<(&'a ContainerSelection, &'a HashSet<String>)>,
    pub bakes_changed: &'a BTreeSet<WorkloadRef>,
    pub served: Option<Served<'a>>,
}

impl RolloutState {
    /// [`RolloutState::step`] on the index as it stands: the report classified against the
    /// targets (or the selection's), its stale pods, and the selection's reasons.
    pub fn step_on_index(&mut self, input: &OnIndex<'_>, now: Timestamp, conduct: Conduct) -> Step {
        let wanted: RevisionsInForce = input
            .targets
            .iter()
            .map(|(name, t)| (name.clone(), t.revision.clone()))
            .collect();
        let index = input.index;
        let mut report = match input.selection {
            Some((selection, live)) => selection.report(live),
            None => index.classify_revisions(&wanted, input.policy),
        };
        if let Some(kinds) = input.kinds {
            report
                .workloads
                .retain(|w| w.kind.workload().is_some_and(|k| kinds.contains(&k)));
        }
        let stale_pods = |workload: &WorkloadRef| match input.selection {
            Some((selection, live)) => selection.pods_needing_restart(workload, live),
            None => workload.controller_kind().map_or_else(Vec::new, |kind| {
                index.pods_needing_restart(
                    kind,
                    &workload.namespace,
                    &workload.name,
                    &wanted,
                    input.policy.restart_unknown,
                )
            }),
        };
        let reason = |workload: &WorkloadRef| {
            input
                .selection
                .map(|(selection, _)| selection.selected(workload))
                .unwrap_or_default()
        };
        let observed = Observed {
            report: &report,
            index,
            targets: input.targets,
            settings: input.settings,
            history: input.history,
            stale_pods: &stale_pods,
            restart_reason: input
                .selection
                .is_some()
                .then_some(&reason as &dyn Fn(&WorkloadRef) -> super::selection::SelectedPods),
            bakes_changed: input.bakes_changed,
            served: input.served,
        };
        self.step(&observed, now, conduct)
    }
}

/// How far a step goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduct {
    /// Plan only (a replica without the Lease, `explain`, the dry-run `rollout`): the book is
    /// not carried forward and nothing is acted on; bakes are followed when asked, so that a
    /// process watching another one act sees them end.
    Plan { follow_bakes: bool },
    /// `--rollout=dry-run` holding the Lease: the book carried forward, the plan said, nothing
    /// acted on.
    DryRun,
    /// Act on the plan; `record` writes the book (not for the selection by container name,
    /// whose campaign is its own).
    Act { record: bool },
}

/// One thing for the engine to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A bake began: said; what was read of its pods for an earlier target is forgotten.
    BakeStarted(WorkloadRef),
    /// Read these pods of a bake; the result comes back by [`RolloutState::on_bake_read`].
    ReadBake {
        workload: WorkloadRef,
        pods: Vec<String>,
    },
    /// Evaluate a metric check of a bake; the reading comes back by
    /// [`RolloutState::on_check_read`].
    EvaluateCheck(super::analysis::MetricQuery),
    /// Patch the template's stamps; [`RolloutState::on_restarted`] once patched.
    PatchTemplate(Restart),
    /// Evict a bare pod (its restart); [`RolloutState::on_restarted`] once evicted.
    EvictBarePod(Restart),
    /// A restart pod by pod (by eviction or in place) began: nothing to write, it is said.
    PodByPodStarted(Restart),
    /// Upgrade this pod in place, after a dry-run eviction asks the budgets (not for a heal,
    /// which touches a pod only if it is not Ready); a pod that cannot be upgraded in place is
    /// evicted instead (see [`RolloutState::next_eviction`]).
    UpgradePod {
        workload: WorkloadRef,
        pod: PodToReplace,
        heal: bool,
        target: RevisionStamp,
        healthy: bool,
        min_ready: Duration,
    },
    /// Evict this stale pod (a heal only if it is not Ready); the result comes back by
    /// [`RolloutState::on_evicted`] or [`RolloutState::on_eviction_blocked`].
    EvictPod {
        workload: WorkloadRef,
        pod: PodToReplace,
        heal: bool,
    },
    /// A restart this process made succeeded (rolled out, or scaled to zero).
    Succeeded(WorkloadRef),
    /// A restart failed; `ours` when this process made it (a new leader still says it).
    Failed {
        failure: Failure,
        ours: bool,
    },
    /// A workload this process restarted is gone (deleted, a bare pod evicted for good).
    Gone(WorkloadRef),
    /// A campaign paused: said on the status ConfigMap and on each workload that caused it.
    Paused {
        sidecar: String,
        pause: super::pause::Pause,
        workloads: Vec<WorkloadRef>,
    },
    Say(Line),
    Notify(Notice),
    /// Write the book to the status ConfigMap, and the served revisions to the history.
    WriteStatus,
}

/// What a step decided.
#[derive(Debug)]
pub struct Step {
    pub plan: RolloutPlan,
    pub effects: Vec<Effect>,
    /// The next moment the plan can change by time alone, or an action is due again.
    pub wake_at: Option<Timestamp>,
}

/// What happened to an in-place upgrade the engine read again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeNews {
    Pending,
    /// Ready; the next pod waits until it is available.
    Ready {
        available_at: Timestamp,
    },
    Done,
    Failed(String),
}

impl RolloutState {
    /// A state that starts from `book` (the status ConfigMap's), remembering nothing else.
    pub fn with_book(book: CampaignBook) -> Self {
        Self {
            book,
            ..Self::default()
        }
    }

    /// One plan from what was observed at `now`, and what to do about it.
    pub fn step(&mut self, observed: &Observed<'_>, now: Timestamp, conduct: Conduct) -> Step {
        self.note_upgrades();
        self.note_bake_changes(observed.bakes_changed);
        let mut plan = plan(PlanInput {
            report: observed.report,
            index: observed.index,
            targets: observed.targets,
            book: &self.book,
            finished_since: &self.finished_since,
            stamped: &self.stamped,
            evicting: &self.evicting,
            baking: &self.baking,
            settings: observed.settings,
            history: observed.history,
            now,
            served: observed.served,
        });
        if let Some(reason) = observed.restart_reason {
            for restart in &mut plan.restarts {
                restart.selected = Some(reason(&restart.workload));
            }
        }
        self.carry(plan, observed, now, conduct)
    }

    /// The transitions a plan makes, and its effects.
    pub fn carry(
        &mut self,
        plan: RolloutPlan,
        observed: &Observed<'_>,
        now: Timestamp,
        conduct: Conduct,
    ) -> Step {
        let mut step = Step {
            wake_at: plan.wake_at,
            effects: Vec::new(),
            plan,
        };
        let previous = std::mem::take(&mut self.finished_since);
        self.finished_since = step
            .plan
            .finished_not_current
            .iter()
            .map(|w| (w.clone(), previous.get(w).copied().unwrap_or(now)))
            .collect();
        let follow_bakes = !matches!(
            conduct,
            Conduct::Plan {
                follow_bakes: false
            }
        );
        if follow_bakes {
            self.follow_bakes(observed, now, &mut step);
        }
        match conduct {
            Conduct::Plan { .. } => {}
            Conduct::DryRun => {
                self.book = step.plan.book.clone();
                let lines = self.journal.dry_run(&step.plan);
                step.effects.extend(lines.into_iter().map(Effect::Say));
            }
            Conduct::Act { record } => {
                self.book = step.plan.book.clone();
                self.act(observed, now, &mut step);
                let lines = self.journal.campaigns(&step.plan, &self.book);
                step.effects.extend(lines.into_iter().map(Effect::Say));
                let notices = self.notices.notices(&step.plan, &self.book, Time(now));
                step.effects.extend(notices.into_iter().map(Effect::Notify));
                if record {
                    step.effects.push(Effect::WriteStatus);
                }
            }
        }
        step
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

    fn note_bake_changes(&mut self, changed: &BTreeSet<WorkloadRef>) {
        for (workload, bake) in &mut self.baking {
            bake.pods_changed = changed.contains(workload);
        }
    }

    /// Bakes are kept while their workload rolls, and once passed while it succeeded (so it is
    /// not baked again); the pods of those the plan asks about are read.
    fn follow_bakes(&mut self, observed: &Observed<'_>, now: Timestamp, step: &mut Step) {
        let plan = &step.plan;
        let rolling = |w: &WorkloadRef| plan.rolling.iter().any(|r| &r.workload == w);
        self.baking
            .retain(|w, _| rolling(w) || plan.succeeded.contains(w));
        self.upgraded.retain(|w, _| rolling(w));
        for passed in &plan.succeeded {
            if let Some(bake) = self.baking.get_mut(passed) {
                bake.passed = true;
            }
        }
        for (started, target) in &plan.bakes_started {
            self.baking.insert(
                started.clone(),
                Bake {
                    target: target.clone(),
                    since: now,
                    ..Default::default()
                },
            );
            step.effects.push(Effect::BakeStarted(started.clone()));
        }
        for workload in &plan.bake_checks {
            let Some(kind) = workload.controller_kind() else {
                continue;
            };
            let pods = observed
                .index
                .pod_names(kind, &workload.namespace, &workload.name);
            step.effects.push(Effect::ReadBake {
                workload: workload.clone(),
                pods,
            });
        }
        for query in &plan.metric_checks {
            step.effects.push(Effect::EvaluateCheck(query.clone()));
        }
    }

    /// Whether the bake of `workload` is still open: its pods are followed until it is not.
    pub fn bake_open(&self, workload: &WorkloadRef) -> bool {
        self.baking
            .get(workload)
            .is_some_and(|b| !b.passed && b.problem.is_none())
    }

    /// What a read of a bake's pods found at `read_at`: the container problems, if any, fail
    /// it at the next plan, which comes at once.
    pub fn on_bake_read(
        &mut self,
        workload: &WorkloadRef,
        problems: &[String],
        read_at: Timestamp,
    ) -> Option<Timestamp> {
        let bake = self.baking.get_mut(workload)?;
        bake.read_at = Some(read_at);
        if bake.problem.is_none() && !problems.is_empty() {
            bake.problem = Some(problems.join("; "));
        }
        Some(read_at)
    }

    /// What an evaluation of a bake's metric check read at `at`: counted, and judged at the
    /// next plan, which comes at once.
    pub fn on_check_read(
        &mut self,
        query: &super::analysis::MetricQuery,
        reading: super::analysis::Reading,
        at: Timestamp,
    ) -> Option<Timestamp> {
        let bake = self.baking.get_mut(&query.workload)?;
        super::analysis::record(&mut bake.checks, &query.key, &query.check, reading, at);
        Some(at)
    }

    /// The restart counts a pod's containers had once upgraded in place, which its bake counts
    /// restarts from.
    pub fn upgraded_baseline(
        &self,
        workload: &WorkloadRef,
        uid: &str,
    ) -> Option<&BTreeMap<String, i32>> {
        self.upgraded.get(workload).and_then(|pods| pods.get(uid))
    }

    fn act(&mut self, observed: &Observed<'_>, now: Timestamp, step: &mut Step) {
        let plan = &step.plan;
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
            let effect = self.restart(restart, now);
            if matches!(effect, Effect::PodByPodStarted(_)) {
                step.wake_at = Some(step.wake_at.map_or(now, |w| w.min(now)));
            }
            step.effects.push(effect);
        }
        let replacing = self.replace_pods(observed, now, step);
        self.blocked.retain(|w, _| replacing.contains(w));
        self.outcomes(observed, step);
        for (sidecar, pause) in &step.plan.pauses {
            let workloads = self
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
            step.effects.push(Effect::Paused {
                sidecar: sidecar.clone(),
                pause: pause.clone(),
                workloads,
            });
        }
    }

    /// The effect of one restart: a template patch, the eviction of a bare pod, or a restart
    /// pod by pod, which begins here (nothing is written: the next plans replace its pods).
    fn restart(&mut self, restart: &Restart, now: Timestamp) -> Effect {
        match (&restart.target, restart.method) {
            _ if restart.workload.kind == WorkloadKind::Pod => {
                Effect::EvictBarePod(restart.clone())
            }
            (Some(target), method @ (RestartMethod::Evict | RestartMethod::InPlace)) => {
                self.evicting.insert(
                    restart.workload.clone(),
                    EvictionRestart {
                        target: target.clone(),
                        since: now,
                        in_place: method == RestartMethod::InPlace,
                        problem: None,
                        upgrading: false,
                        awaiting: None,
                    },
                );
                self.awaiting_success.insert(restart.workload.clone());
                Effect::PodByPodStarted(restart.clone())
            }
            _ => Effect::PatchTemplate(restart.clone()),
        }
    }

    /// A restart made (the template patched, the bare pod evicted): its outcome is awaited,
    /// and the stamp it wrote is remembered.
    pub fn on_restarted(&mut self, restart: &Restart) {
        if restart.workload.kind != WorkloadKind::Pod
            && let Some(target) = &restart.target
        {
            self.stamped
                .insert(restart.workload.clone(), target.clone());
        }
        self.awaiting_success.insert(restart.workload.clone());
    }

    /// For each OnDelete (or in-place) workload rolling, the next of its stale pods to replace,
    /// if one may go now. Returns the workloads with stale pods left.
    fn replace_pods(
        &mut self,
        observed: &Observed<'_>,
        now: Timestamp,
        step: &mut Step,
    ) -> BTreeSet<WorkloadRef> {
        let mut replacing = BTreeSet::new();
        for rolling in step.plan.rolling.iter().filter(|r| r.on_delete) {
            let workload = &rolling.workload;
            let Some(kind) = workload.controller_kind() else {
                continue;
            };
            let Some(entry) = observed
                .index
                .workload(kind, &workload.namespace, &workload.name)
            else {
                continue;
            };
            let pods = (observed.stale_pods)(workload);
            if !pods.is_empty() {
                replacing.insert(workload.clone());
            }
            let healthy = rolled_out(kind, entry);
            let in_place = self
                .evicting
                .get(workload)
                .filter(|e| e.in_place)
                .map(|e| (e.target.clone(), e.problem.is_some()));
            let effect = match in_place {
                Some((target, failed)) => {
                    let upgrading = self.upgrades.contains_key(workload);
                    let book = &self.book;
                    next_upgrade(&pods, healthy, upgrading, failed, |p| {
                        carries_failed_revision(p, book)
                    })
                    .map(|picked| Effect::UpgradePod {
                        workload: workload.clone(),
                        pod: picked.pod.clone(),
                        heal: picked.heal,
                        target,
                        healthy,
                        min_ready: Duration::from_secs(
                            entry
                                .min_ready_seconds
                                .and_then(|s| u64::try_from(s).ok())
                                .unwrap_or(0),
                        ),
                    })
                }
                None => match self.next_eviction(workload, &pods, healthy, now) {
                    Ok(effect) => Some(effect),
                    Err(Some(spaced)) => {
                        step.wake_at = Some(step.wake_at.map_or(spaced, |w| w.min(spaced)));
                        None
                    }
                    Err(None) => None,
                },
            };
            step.effects.extend(effect);
        }
        replacing
    }

    /// The eviction of the next of `pods` (stale, sorted) of `workload`, or why none now: the
    /// moment the spacing after the last eviction ends (health comes by the watch), if that is
    /// what it waits for.
    pub fn next_eviction(
        &self,
        workload: &WorkloadRef,
        pods: &[PodToReplace],
        healthy: bool,
        now: Timestamp,
    ) -> Result<Effect, Option<Timestamp>> {
        let last = self.evictions.get(workload);
        let book = &self.book;
        match next_eviction(pods, healthy, last, now, |p| {
            carries_failed_revision(p, book)
        }) {
            Some(picked) => Ok(Effect::EvictPod {
                workload: workload.clone(),
                pod: picked.pod.clone(),
                heal: picked.heal,
            }),
            None => Err(last
                .map(|l| after(l.at, EVICTION_SPACING))
                .filter(|&spaced| spaced > now && !pods.is_empty())),
        }
    }

    /// A stale pod evicted at `at`: the next waits for the spacing (and the workload's health).
    pub fn on_evicted(
        &mut self,
        workload: &WorkloadRef,
        pod: PodToReplace,
        at: Timestamp,
    ) -> Timestamp {
        self.blocked.remove(workload);
        self.evictions
            .insert(workload.clone(), LastEviction { pod, at });
        after(at, EVICTION_SPACING)
    }

    /// An eviction a PodDisruptionBudget refused at `now`: what to say, and when to try again.
    pub fn on_eviction_blocked(
        &mut self,
        workload: &WorkloadRef,
        now: Timestamp,
        timeout: Duration,
    ) -> (BlockNews, Timestamp) {
        let (state, news, retry) = on_blocked(self.blocked.get(workload), now, timeout);
        self.blocked.insert(workload.clone(), state);
        (news, after(now, retry))
    }

    /// When a bare pod's eviction (its restart), or a dry-run eviction before an in-place
    /// upgrade, that a budget refused at `now` is asked again.
    pub fn blocked_retry(now: Timestamp) -> Timestamp {
        after(now, BLOCKED_RETRY)
    }

    /// A pod patched for an in-place upgrade: its workload's next pod waits until it is done.
    pub fn on_upgrade_started(&mut self, workload: &WorkloadRef, upgrade: InPlaceUpgrade) {
        let under_way = UpgradeUnderWay {
            awaiting: upgrade.awaiting(None),
            upgrade,
            available_at: None,
        };
        self.upgrades.insert(workload.clone(), under_way);
    }

    /// An upgrade that failed before it began (the API server refused its resize for a node
    /// that cannot fit it): its restart fails with `reason` at the next plan.
    pub fn on_upgrade_refused(&mut self, workload: &WorkloadRef, reason: String) {
        if let Some(restart) = self.evicting.get_mut(workload) {
            restart.problem = Some(reason);
        }
    }

    /// Whether the upgrade under way of `workload` is due to be judged at `now` by time alone
    /// (its minReadySeconds are up), whatever the pod watch saw.
    pub fn upgrade_available(&self, workload: &WorkloadRef, now: Timestamp) -> bool {
        self.upgrades
            .get(workload)
            .and_then(|u| u.available_at)
            .is_some_and(|at| at <= now)
    }

    /// Judges the upgrade under way of `workload` by its pod as just read (`None`: gone): done,
    /// it frees its workload for the next pod; failed, its restart fails with the reason at the
    /// next plan; still under way, it is read again at its next change.
    pub fn on_upgrade_read(
        &mut self,
        workload: &WorkloadRef,
        pod: Option<&k8s_openapi::api::core::v1::Pod>,
        now: Timestamp,
    ) -> Option<UpgradeNews> {
        let under_way = self.upgrades.get_mut(workload)?;
        under_way.awaiting = under_way.upgrade.awaiting(pod);
        let progress = under_way.upgrade.progress(pod, now);
        under_way.available_at = match progress {
            UpgradeProgress::Ready { available_at } => Some(available_at),
            _ => None,
        };
        let news = match progress {
            UpgradeProgress::Pending => return Some(UpgradeNews::Pending),
            UpgradeProgress::Ready { available_at } => {
                return Some(UpgradeNews::Ready { available_at });
            }
            UpgradeProgress::Done(restarts) => {
                let uid = under_way.upgrade.uid.clone();
                self.upgraded
                    .entry(workload.clone())
                    .or_default()
                    .insert(uid, restarts);
                UpgradeNews::Done
            }
            UpgradeProgress::Failed(reason) => {
                if let Some(restart) = self.evicting.get_mut(workload) {
                    restart.problem = Some(reason.clone());
                }
                UpgradeNews::Failed(reason)
            }
        };
        self.upgrades.remove(workload);
        Some(news)
    }

    /// Successes and failures are reported once each, as this process's own only for restarts
    /// it made; restarted workloads with no pods left end too.
    fn outcomes(&mut self, observed: &Observed<'_>, step: &mut Step) {
        let plan = &step.plan;
        for succeeded in &plan.succeeded {
            if self.awaiting_success.remove(succeeded) {
                step.effects.push(Effect::Succeeded(succeeded.clone()));
            }
        }
        for failure in &plan.failed {
            let ours = self.awaiting_success.remove(&failure.workload);
            step.effects.push(Effect::Failed {
                failure: failure.clone(),
                ours,
            });
        }
        let podless = podless_outcomes(&self.awaiting_success, observed.report, observed.index);
        for (workload, outcome) in podless {
            if !self.awaiting_success.remove(&workload) {
                continue;
            }
            match outcome {
                PodlessOutcome::Succeeded => step.effects.push(Effect::Succeeded(workload)),
                PodlessOutcome::Gone => {
                    self.stamped.remove(&workload);
                    step.effects.push(Effect::Gone(workload));
                }
            }
        }
    }
}
