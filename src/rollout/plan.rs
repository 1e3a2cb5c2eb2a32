//! The plan: which workloads to restart now, which are rolling, which wait and why, which
//! failed. Computed from observations alone, so recomputing it repeats nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::book::{Campaign, CampaignBook, CampaignCounts, CampaignState, Failure};
use super::change::{SidecarChange, rollout_reason};
use super::health::{progress, rolled_out};
use crate::config::RevisionStamp;
use crate::drift::{DriftIndex, DriftReport, WorkloadDrift, WorkloadEntry};
use crate::workload::{UpdateStrategy, WorkloadKind, WorkloadRef};

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
        }
    }
}

/// A sidecar in force, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarTarget {
    pub revision: String,
    /// `rollout: {policy: manual}`: reports and the CLI only.
    pub manual: bool,
    /// What changed from the previous revision, when the engine saw both.
    pub changes: Option<String>,
}

/// A restart the executor should make now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Restart {
    pub workload: WorkloadRef,
    /// The `NS/rollout-revision` to write; `None` for a bare pod, which is evicted.
    pub target: Option<RevisionStamp>,
    /// The `NS/rollout-reason` to write.
    pub reason: String,
    pub changes: Vec<SidecarChange>,
    pub canary: bool,
    /// OnDelete: the controller will not replace pods by itself; the executor evicts them.
    pub on_delete: bool,
    pub pods: u32,
}

/// A workload carrying the target, not yet rolled out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rolling {
    pub workload: WorkloadRef,
    pub target: RevisionStamp,
    pub on_delete: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum WaitReason {
    Settling { until: Time },
    Canary { sidecar: String },
    MaxParallel { limit: usize },
    RateLimit { per_minute: usize },
    Cooldown { until: Time },
    CampaignPaused { sidecar: String },
    Manual { sidecar: String },
    DeploymentPaused,
    Partition { partition: i32 },
    NotKnownYet,
}

impl WaitReason {
    /// A wait the run itself ends (a slot frees, the canary finishes, the minute passes, the
    /// index catches up), as opposed to one only time or a person ends (cooldown, pause,
    /// manual policy, a paused Deployment, a partition).
    pub fn clears_by_itself(&self) -> bool {
        matches!(
            self,
            WaitReason::MaxParallel { .. }
                | WaitReason::RateLimit { .. }
                | WaitReason::Canary { .. }
                | WaitReason::Settling { .. }
                | WaitReason::NotKnownYet
        )
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Settling { until } => {
                write!(f, "settling: the revision is too new (until {})", until.0)
            }
            WaitReason::Canary { sidecar } => {
                write!(f, "waiting for the canary of {sidecar} to become healthy")
            }
            WaitReason::MaxParallel { limit } => {
                write!(f, "{limit} workloads already rolling (--max-parallel)")
            }
            WaitReason::RateLimit { per_minute } => write!(
                f,
                "{per_minute} restarts in the last minute (--max-restarts-per-minute)"
            ),
            WaitReason::Cooldown { until } => {
                write!(f, "restarted recently; cooldown until {}", until.0)
            }
            WaitReason::CampaignPaused { sidecar } => {
                write!(f, "the campaign of {sidecar} is paused")
            }
            WaitReason::Manual { sidecar } => write!(
                f,
                "{sidecar} has rollout policy manual (run `sidecar-injector rollout`)"
            ),
            WaitReason::DeploymentPaused => write!(f, "the Deployment is paused"),
            WaitReason::Partition { partition } => {
                write!(f, "partition {partition} holds pods back; not overridden")
            }
            WaitReason::NotKnownYet => write!(f, "the workload is not in the index yet"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Waiting {
    pub workload: WorkloadRef,
    pub sidecars: Vec<String>,
    #[serde(flatten)]
    pub reason: WaitReason,
    pub message: String,
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
    /// Sidecars whose campaign paused in this pass, with the reason.
    pub paused: Vec<(String, String)>,
    /// Finished rolling with pods still not current, inside the grace: the executor remembers
    /// since when and passes it back.
    #[serde(skip)]
    pub finished_not_current: Vec<WorkloadRef>,
    #[serde(skip)]
    pub book: CampaignBook,
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
    pub settings: &'a RolloutSettings,
    pub now: Timestamp,
}

fn after(time: Timestamp, duration: Duration) -> Timestamp {
    time.checked_add(SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

/// The rollout stamp for a set of (sidecar, revision): the `NS/revision` format, sorted.
pub fn target_stamp<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>) -> RevisionStamp {
    RevisionStamp::sorted(items)
}

/// The rows of one workload, with what the planner derives from them.
struct Group<'r> {
    workload: WorkloadRef,
    rows: Vec<&'r WorkloadDrift>,
}

/// A workload that needs a restart and does not carry the target yet.
struct Candidate<'g, 'r> {
    group: &'g Group<'r>,
    restart_for: Vec<&'r WorkloadDrift>,
    target: RevisionStamp,
}

impl Candidate<'_, '_> {
    /// Its largest pod count over the sidecars: the canary goes to the smallest workload.
    fn pods(&self) -> u32 {
        self.group
            .rows
            .iter()
            .map(|r| r.pods.total())
            .max()
            .unwrap_or(0)
    }
}

/// What the survey of the workloads finds, and what scheduling then uses up.
struct Survey<'g, 'r> {
    /// Per sidecar, the workloads of its campaign by outcome.
    counts: BTreeMap<String, CampaignCounts>,
    candidates: Vec<Candidate<'g, 'r>>,
    /// Restarts in the last minute, for `--max-restarts-per-minute`.
    recent_restarts: usize,
    /// Failures found in this pass, with the sidecars whose campaigns they count against.
    failures: Vec<(Failure, Vec<String>)>,
}

impl Survey<'_, '_> {
    fn count(&mut self, sidecars: &[&str], bump: impl Fn(&mut CampaignCounts)) {
        for sidecar in sidecars {
            bump(self.counts.entry((*sidecar).to_owned()).or_default());
        }
    }
}

pub fn plan(input: PlanInput<'_>) -> RolloutPlan {
    let mut book = next_book(input.book, input.targets, input.now);
    let mut out = RolloutPlan::default();
    let groups = group_rows(input.report);
    let mut survey = Survey {
        counts: BTreeMap::new(),
        candidates: Vec::new(),
        recent_restarts: 0,
        failures: Vec::new(),
    };
    for group in groups.values() {
        survey_workload(&input, group, &book, &mut survey, &mut out);
    }
    record_failures(&mut book, &survey.failures);
    // Pauses take effect before anything new is planned.
    pause_campaigns(&mut book, input.settings, &mut out);
    schedule(&input, &book, &mut survey, &mut out);
    settle_book(&mut book, &input, &survey.counts);
    out.book = book;
    out
}

/// Report rows by workload; rows of other owners (Jobs, ReplicaSets without a Deployment...)
/// are reported only, never planned.
fn group_rows(report: &DriftReport) -> BTreeMap<WorkloadRef, Group<'_>> {
    let mut groups: BTreeMap<WorkloadRef, Group<'_>> = BTreeMap::new();
    for row in &report.workloads {
        let Some(kind) = row.kind.workload() else {
            continue;
        };
        let workload = WorkloadRef::new(kind, &row.namespace, &row.name);
        groups
            .entry(workload.clone())
            .or_insert_with(|| Group {
                workload,
                rows: Vec::new(),
            })
            .rows
            .push(row);
    }
    groups
}

/// One workload: a candidate for a restart, or (carrying the target) rolling, succeeded or
/// failed.
fn survey_workload<'g, 'r>(
    input: &PlanInput<'_>,
    group: &'g Group<'r>,
    book: &CampaignBook,
    survey: &mut Survey<'g, 'r>,
    out: &mut RolloutPlan,
) {
    let targets = input.targets;
    let relevant: Vec<&'r WorkloadDrift> = group
        .rows
        .iter()
        .copied()
        .filter(|r| targets.contains_key(&r.sidecar))
        .collect();
    let target = target_stamp(
        relevant
            .iter()
            .map(|r| (r.sidecar.as_str(), targets[&r.sidecar].revision.as_str())),
    );
    let restart_for: Vec<&'r WorkloadDrift> = relevant
        .iter()
        .copied()
        .filter(|r| r.needs_restart)
        .collect();
    let entry = group.workload.controller_kind().and_then(|k| {
        input
            .index
            .workload(k, &group.workload.namespace, &group.workload.name)
    });
    let minute_ago = input
        .now
        .checked_sub(SignedDuration::from_secs(60))
        .unwrap_or(Timestamp::MIN);
    if entry
        .and_then(|e| e.rolled_at)
        .is_some_and(|t| t > minute_ago)
    {
        survey.recent_restarts += 1;
    }
    match entry {
        Some(entry) if entry.rollout_revision.as_deref() == Some(target.as_str()) => {
            let active: Vec<&str> = relevant.iter().map(|r| r.sidecar.as_str()).collect();
            let stale: Vec<&WorkloadDrift> = restart_for;
            let carrier = Carrier {
                workload: &group.workload,
                entry,
                active: &active,
                stale: &stale,
                target,
            };
            judge_carrier(input, book, carrier, survey, out);
        }
        _ if restart_for.is_empty() => {}
        _ => {
            for row in &restart_for {
                survey
                    .counts
                    .entry(row.sidecar.clone())
                    .or_default()
                    .pending += 1;
            }
            survey.candidates.push(Candidate {
                group,
                restart_for,
                target,
            });
        }
    }
}

/// A workload that carries the target: what the survey knows of it.
struct Carrier<'a> {
    workload: &'a WorkloadRef,
    entry: &'a WorkloadEntry,
    /// The sidecars in force that it requests.
    active: &'a [&'a str],
    /// Its rows still stale, uninjected (or unknown with `--restart-unknown`).
    stale: &'a [&'a WorkloadDrift],
    target: RevisionStamp,
}

/// Rolling, succeeded, or failed (finished but not current after the grace, or timed out).
fn judge_carrier(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    carrier: Carrier<'_>,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
) {
    let Carrier {
        workload,
        entry,
        active,
        stale,
        target,
    } = carrier;
    let already_failed = active
        .iter()
        .any(|s| book.campaigns.get(*s).is_some_and(|c| c.failed(workload)));
    if already_failed {
        survey.count(active, |c| c.failed += 1);
        return;
    }
    let on_delete = entry.update_strategy == UpdateStrategy::OnDelete;
    let finished = rolled_out(workload.kind, entry) && (stale.is_empty() || !on_delete);
    if finished && stale.is_empty() {
        survey.count(active, |c| c.succeeded += 1);
        out.succeeded.push(workload.clone());
        return;
    }
    let failure = if finished {
        not_current_failure(input, workload, stale, out)
    } else {
        timeout_failure(input, book, workload, entry, active)
    };
    match failure {
        Some(reason) => {
            survey.count(active, |c| c.failed += 1);
            let failure = Failure {
                workload: workload.clone(),
                reason,
                at: Time(input.now),
            };
            let sidecars = active.iter().map(|s| (*s).to_owned()).collect();
            survey.failures.push((failure.clone(), sidecars));
            out.failed.push(failure);
        }
        None => {
            survey.count(active, |c| c.rolling += 1);
            out.rolling.push(Rolling {
                workload: workload.clone(),
                target,
                on_delete,
            });
        }
    }
}

/// Finished rolling with pods still not current: a failure once the grace is over (pod
/// deletions and workload status arrive on different watches).
fn not_current_failure(
    input: &PlanInput<'_>,
    workload: &WorkloadRef,
    stale: &[&WorkloadDrift],
    out: &mut RolloutPlan,
) -> Option<String> {
    let first = input
        .finished_since
        .get(workload)
        .copied()
        .unwrap_or(input.now);
    if after(first, input.settings.finish_grace) > input.now {
        out.finished_not_current.push(workload.clone());
        return None;
    }
    let row = stale[0];
    Some(format!(
        "finished rolling but {} of {} pods still do not run {} {}",
        row.pods.stale + row.pods.uninjected + row.pods.unknown,
        row.pods.total(),
        row.sidecar,
        input.targets[&row.sidecar].revision
    ))
}

/// Still rolling after `--rollout-timeout` from the restart (or the campaign's start).
fn timeout_failure(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    workload: &WorkloadRef,
    entry: &WorkloadEntry,
    active: &[&str],
) -> Option<String> {
    let started = entry.rolled_at.or_else(|| {
        active
            .iter()
            .filter_map(|s| book.campaigns.get(*s))
            .map(|c| c.since.0)
            .max()
    });
    let timeout = input.settings.rollout_timeout;
    started
        .is_some_and(|t| after(t, timeout) <= input.now)
        .then(|| {
            format!(
                "not rolled out within {} ({})",
                humantime::format_duration(timeout),
                progress(workload.kind, entry)
            )
        })
}

/// The failures found in this pass count against every campaign of their workload.
fn record_failures(book: &mut CampaignBook, failures: &[(Failure, Vec<String>)]) {
    for (failure, sidecars) in failures {
        for sidecar in sidecars {
            if let Some(campaign) = book.campaigns.get_mut(sidecar) {
                campaign.failures.push(failure.clone());
            }
        }
    }
}

/// Campaigns whose unacknowledged failures reached `--max-failures` pause.
fn pause_campaigns(book: &mut CampaignBook, settings: &RolloutSettings, out: &mut RolloutPlan) {
    for (sidecar, campaign) in &mut book.campaigns {
        if campaign.state == CampaignState::Paused
            || campaign.unacknowledged_failures() < settings.max_failures.max(1)
        {
            continue;
        }
        let names: Vec<String> = campaign
            .failures
            .iter()
            .skip(campaign.acknowledged_failures)
            .map(|f| format!("{}: {}", f.workload, f.reason))
            .collect();
        let reason = format!(
            "rollout of {sidecar} {} paused after {} failed workload(s) ({}); new pods still get this revision: fix or revert the config, or run `sidecar-injector rollout --resume`",
            campaign.revision,
            names.len(),
            names.join("; ")
        );
        campaign.state = CampaignState::Paused;
        campaign.pause_reason = Some(reason.clone());
        out.paused.push((sidecar.clone(), reason));
    }
}

/// Candidates in order (smallest first, so that the canary risks the fewest pods), each
/// restarted now or held by the first gate that applies.
fn schedule(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
) {
    let mut candidates = std::mem::take(&mut survey.candidates);
    candidates.sort_by(|a, b| (a.pods(), &a.group.workload).cmp(&(b.pods(), &b.group.workload)));
    let mut pace = Pace {
        in_flight: out.rolling.len(),
        recent_restarts: survey.recent_restarts,
        canaries: BTreeMap::new(),
    };
    for candidate in candidates {
        let sidecars: Vec<String> = candidate
            .restart_for
            .iter()
            .map(|r| r.sidecar.clone())
            .collect();
        match admit(input, book, &candidate, &survey.counts, &pace) {
            Err(reason) => out.waiting.push(Waiting {
                workload: candidate.group.workload.clone(),
                sidecars,
                message: reason.to_string(),
                reason,
            }),
            Ok(admitted) => {
                pace.take(&admitted);
                out.restarts
                    .push(restart(input, book, candidate, admitted.canary));
            }
        }
    }
}

/// What restarts already use of the limits in this pass.
struct Pace<'r> {
    in_flight: usize,
    recent_restarts: usize,
    /// Canaries chosen in this pass, per sidecar.
    canaries: BTreeMap<&'r str, usize>,
}

/// A candidate cleared by every gate.
struct Admitted<'r> {
    /// Part of a canary wave (these sidecars' canaries).
    canary: bool,
    auto: Vec<&'r WorkloadDrift>,
}

impl<'r> Pace<'r> {
    fn take(&mut self, admitted: &Admitted<'r>) {
        if admitted.canary {
            for row in &admitted.auto {
                *self.canaries.entry(row.sidecar.as_str()).or_default() += 1;
            }
        }
        self.in_flight += 1;
        self.recent_restarts += 1;
    }
}

/// The chain of gates, in order: the first that holds the candidate says why it waits.
fn admit<'r>(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    candidate: &Candidate<'_, 'r>,
    counts: &BTreeMap<String, CampaignCounts>,
    pace: &Pace<'r>,
) -> Result<Admitted<'r>, WaitReason> {
    let settings = input.settings;
    campaign_gate(book, candidate)?;
    let auto: Vec<&'r WorkloadDrift> = candidate
        .restart_for
        .iter()
        .copied()
        .filter(|r| !input.targets[&r.sidecar].manual)
        .collect();
    if auto.is_empty() {
        return Err(WaitReason::Manual {
            sidecar: candidate.restart_for[0].sidecar.clone(),
        });
    }
    settle_gate(input, book, &auto)?;
    workload_gate(input, &candidate.group.workload)?;
    let canary = canary_gate(settings, &auto, counts, pace)?;
    if pace.in_flight >= settings.max_parallel {
        return Err(WaitReason::MaxParallel {
            limit: settings.max_parallel,
        });
    }
    if pace.recent_restarts >= settings.max_restarts_per_minute {
        return Err(WaitReason::RateLimit {
            per_minute: settings.max_restarts_per_minute,
        });
    }
    Ok(Admitted { canary, auto })
}

/// A paused campaign holds every workload requesting its sidecar.
fn campaign_gate(book: &CampaignBook, candidate: &Candidate<'_, '_>) -> Result<(), WaitReason> {
    let paused = candidate.group.rows.iter().find(|r| {
        book.campaigns
            .get(&r.sidecar)
            .is_some_and(|c| c.state == CampaignState::Paused)
    });
    match paused {
        Some(row) => Err(WaitReason::CampaignPaused {
            sidecar: row.sidecar.clone(),
        }),
        None => Ok(()),
    }
}

/// A revision younger than `--settle` waits: more edits may follow.
fn settle_gate(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    auto: &[&WorkloadDrift],
) -> Result<(), WaitReason> {
    let settling = auto
        .iter()
        .filter_map(|r| book.campaigns.get(&r.sidecar))
        .map(|c| after(c.since.0, input.settings.settle))
        .filter(|until| *until > input.now)
        .max();
    match settling {
        Some(until) => Err(WaitReason::Settling { until: Time(until) }),
        None => Ok(()),
    }
}

/// What the workload itself says: not known yet, paused, a partition, a cooldown.
fn workload_gate(input: &PlanInput<'_>, workload: &WorkloadRef) -> Result<(), WaitReason> {
    let Some(kind) = workload.controller_kind() else {
        return Ok(());
    };
    let Some(entry) = input
        .index
        .workload(kind, &workload.namespace, &workload.name)
    else {
        return Err(WaitReason::NotKnownYet);
    };
    let on_delete = entry.update_strategy == UpdateStrategy::OnDelete;
    if kind == WorkloadKind::Deployment && entry.paused {
        return Err(WaitReason::DeploymentPaused);
    }
    if kind == WorkloadKind::StatefulSet
        && !on_delete
        && let Some(partition) = entry.partition.filter(|p| *p > 0)
    {
        return Err(WaitReason::Partition { partition });
    }
    // The cooldown spares healthy workloads repeated restarts; one stuck mid-rollout (a
    // broken revision) gets the fix at once.
    if !rolled_out(kind, entry) {
        return Ok(());
    }
    match entry
        .rolled_at
        .map(|t| after(t, input.settings.cooldown))
        .filter(|until| *until > input.now)
    {
        Some(until) => Err(WaitReason::Cooldown { until: Time(until) }),
        None => Ok(()),
    }
}

/// The canary wave: until `--canary` workloads of a campaign succeeded, only that many may be
/// rolling. `Ok(true)` when this candidate is one of them.
fn canary_gate(
    settings: &RolloutSettings,
    auto: &[&WorkloadDrift],
    counts: &BTreeMap<String, CampaignCounts>,
    pace: &Pace<'_>,
) -> Result<bool, WaitReason> {
    let mut canary = false;
    for row in auto {
        let c = counts.get(&row.sidecar).cloned().unwrap_or_default();
        let total = c.succeeded + c.rolling + c.failed + c.pending;
        let wanted = settings.canary.min(total as usize) as u32;
        if c.succeeded >= wanted {
            continue;
        }
        let chosen = pace
            .canaries
            .get(row.sidecar.as_str())
            .copied()
            .unwrap_or(0) as u32;
        if c.rolling + chosen + c.succeeded >= wanted {
            return Err(WaitReason::Canary {
                sidecar: row.sidecar.clone(),
            });
        }
        canary = true;
    }
    Ok(canary)
}

/// The restart of an admitted candidate, with what changes for each sidecar.
fn restart(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    candidate: Candidate<'_, '_>,
    canary: bool,
) -> Restart {
    let workload = candidate.group.workload.clone();
    let on_delete = match workload.controller_kind() {
        Some(kind) => input
            .index
            .workload(kind, &workload.namespace, &workload.name)
            .is_some_and(|e| e.update_strategy == UpdateStrategy::OnDelete),
        // A bare pod is evicted.
        None => true,
    };
    let changes: Vec<SidecarChange> = candidate
        .restart_for
        .iter()
        .map(|r| SidecarChange {
            sidecar: r.sidecar.clone(),
            from: r.from_revision.clone(),
            to: input.targets[&r.sidecar].revision.clone(),
            what: book
                .campaigns
                .get(&r.sidecar)
                .and_then(|c| c.changes.clone()),
        })
        .collect();
    Restart {
        pods: candidate.pods(),
        target: workload.kind.is_controller().then_some(candidate.target),
        reason: rollout_reason(&changes),
        changes,
        canary,
        on_delete,
        workload,
    }
}

/// Campaign states and counts, as the status ConfigMap shows them.
fn settle_book(
    book: &mut CampaignBook,
    input: &PlanInput<'_>,
    counts: &BTreeMap<String, CampaignCounts>,
) {
    for (sidecar, campaign) in &mut book.campaigns {
        let c = counts.get(sidecar).cloned().unwrap_or_default();
        campaign.state = match campaign.state {
            CampaignState::Paused => CampaignState::Paused,
            _ if input.targets.get(sidecar).is_some_and(|t| t.manual) => CampaignState::Manual,
            _ if after(campaign.since.0, input.settings.settle) > input.now => {
                CampaignState::Settling
            }
            _ if c.pending + c.rolling > 0 => CampaignState::Running,
            _ => CampaignState::Complete,
        };
        campaign.counts = c;
    }
}

/// The book for the revisions in force: a new revision starts a new campaign (settling), a
/// sidecar that is gone takes its campaign with it.
fn next_book(
    book: &CampaignBook,
    targets: &BTreeMap<String, SidecarTarget>,
    now: Timestamp,
) -> CampaignBook {
    let campaigns = targets
        .iter()
        .map(|(name, target)| {
            let campaign = match book.campaigns.get(name) {
                Some(c) if c.revision == target.revision => c.clone(),
                previous => Campaign {
                    revision: target.revision.clone(),
                    previous: previous.map(|c| c.revision.clone()),
                    since: Time(now),
                    state: CampaignState::Settling,
                    counts: CampaignCounts::default(),
                    failures: Vec::new(),
                    acknowledged_failures: 0,
                    pause_reason: None,
                    changes: target.changes.clone(),
                },
            };
            (name.clone(), campaign)
        })
        .collect();
    CampaignBook { campaigns }
}
