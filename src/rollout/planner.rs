//! The planner: from the drift report, the index, the targets, the campaign book, the
//! settings and `now`, in phases: survey every workload, record failures, pause campaigns,
//! schedule candidates through the gates, settle the book. No I/O, no clock.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::book::{
    BookOverflow, Campaign, CampaignBook, CampaignCounts, CampaignState, Failure, Hold,
    MaintenanceStatus,
};
use super::change::{SidecarChange, rollout_reason};
use super::gates::{Candidate, Group, Pace, admit, after};
use super::health::{progress, rolled_out};
use super::in_place::InPlaceMode;
use super::plan::{
    FailedEarlier, OnCampaignFailure, PlanInput, Restart, Rolling, RolloutPlan, SidecarTarget,
    WaitReason, Waiting,
};
use crate::config::RevisionStamp;
use crate::drift::{DriftReport, DriftState, WorkloadDrift, WorkloadEntry};
use crate::workload::{RestartMethod, UpdateStrategy, WorkloadRef};

/// The rollout stamp for a set of (sidecar, revision): the `NS/revision` format, sorted.
pub fn target_stamp<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>) -> RevisionStamp {
    RevisionStamp::sorted(items)
}

/// What the survey of the workloads finds, and what scheduling then uses up.
struct Survey<'g, 'r> {
    /// Per sidecar, the workloads of its campaign by outcome.
    counts: BTreeMap<String, CampaignCounts>,
    candidates: Vec<Candidate<'g, 'r>>,
    /// Restarts in the last minute, for `--max-restarts-per-minute`.
    recent_restarts: usize,
    /// When the earliest of those restarts leaves the minute.
    oldest_recent_restart: Option<Timestamp>,
    /// Moments at which a carrier's outcome changes by time alone (timeout, finish grace).
    wakes: Vec<Timestamp>,
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
        oldest_recent_restart: None,
        wakes: Vec::new(),
        failures: Vec::new(),
    };
    for group in groups.values() {
        survey_workload(&input, group, &book, &mut survey, &mut out);
    }
    record_failures(&mut book, &survey.failures);
    // Pauses take effect before anything new is planned.
    pause_campaigns(&mut book, &input, &mut out);
    let overflow = book.overflow();
    schedule(&input, &book, overflow.as_ref(), &mut survey, &mut out);
    settle_book(&mut book, &input, &survey.counts);
    book.maintenance = MaintenanceStatus::of(&input.settings.maintenance_windows, input.now);
    out.wake_at = wake_at(&input, &book, &survey, &out);
    out.book = book;
    out
}

/// The earliest moment after `now` at which the plan changes by time alone.
fn wake_at(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    survey: &Survey<'_, '_>,
    out: &RolloutPlan,
) -> Option<Timestamp> {
    let waits = out.waiting.iter().filter_map(|w| match &w.reason {
        WaitReason::Settling { until }
        | WaitReason::Cooldown { until }
        | WaitReason::RollingOut { until } => Some(until.0),
        WaitReason::OutsideMaintenanceWindow { opens, .. } => opens.as_ref().map(|t| t.0),
        WaitReason::RateLimit { .. } => survey
            .oldest_recent_restart
            .map(|t| after(t, Duration::from_secs(60))),
        _ => None,
    });
    // A campaign still settling turns complete or running when its window ends.
    let settling = book
        .campaigns
        .values()
        .filter(|c| c.state == CampaignState::Settling)
        .map(|c| after(c.since.0, input.settings.settle));
    // The global window's changes, for its gauge and the status.
    let window = input
        .settings
        .maintenance_windows
        .state(input.now)
        .changes_at();
    waits
        .chain(settling)
        .chain(window)
        .chain(survey.wakes.iter().copied())
        .filter(|t| *t > input.now)
        .min()
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
    // Rows outside the policy (another namespace, an ignored one) are reported only: they are
    // another engine's to restart and to count.
    let relevant: Vec<&'r WorkloadDrift> = group
        .rows
        .iter()
        .copied()
        .filter(|r| targets.contains_key(&r.sidecar) && r.state != DriftState::Excluded)
        .collect();
    if relevant.is_empty() {
        return;
    }
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
    if let Some(t) = entry.and_then(|e| e.rolled_at).filter(|t| *t > minute_ago) {
        survey.recent_restarts += 1;
        survey.oldest_recent_restart = Some(survey.oldest_recent_restart.map_or(t, |o| o.min(t)));
    }
    let by_eviction = entry.and_then(|entry| by_eviction(input, &group.workload, entry, &target));
    let entry = by_eviction.as_ref().or(entry);
    match entry {
        Some(entry) if entry.rollout_revision.as_deref() == Some(target.as_str()) => {
            let rows = (relevant.as_slice(), restart_for);
            survey_carrier(input, (group, entry), book, rows, target, survey, out);
        }
        _ if restart_for.is_empty() => {}
        _ => candidate(input, group, entry, restart_for, target, survey),
    }
}

/// A workload that carries the target: judged for this campaign's restart (failed, rolling,
/// succeeded), or a candidate again when the stamp is an earlier campaign's.
fn survey_carrier<'g, 'r>(
    input: &PlanInput<'_>,
    (group, entry): (&'g Group<'r>, &WorkloadEntry),
    book: &CampaignBook,
    (relevant, restart_for): (&[&'r WorkloadDrift], Vec<&'r WorkloadDrift>),
    target: RevisionStamp,
    survey: &mut Survey<'g, 'r>,
    out: &mut RolloutPlan,
) {
    let active: Vec<&str> = relevant.iter().map(|r| r.sidecar.as_str()).collect();
    // Stamped for this revision by an earlier campaign of it (the revision came back: a
    // rollback, a pin, a revert of the config): that restart was judged then, and nothing this
    // campaign did is there to judge. Its stale pods, if any, are restarted as any candidate's.
    if !restarted_in_campaign(book, entry, &active) {
        if !restart_for.is_empty() {
            candidate(input, group, Some(entry), restart_for, target, survey);
        }
        return;
    }
    // An in-place upgrade of one of its pods failed (a crash loop, an app container
    // restarted): the restart fails with it.
    let workload = &group.workload;
    let upgrade = input.evicting.get(workload).filter(|e| e.target == target);
    if let Some(problem) = upgrade.and_then(|e| e.problem.clone()) {
        let still = (workload, &active[..]);
        roll_or_fail(input, survey, out, still, target, true, Some(problem));
        return;
    }
    let said = || replacement_progress(upgrade, workload, entry, relevant);
    // One of its pods is being upgraded in place: patched, so its revision says current, but
    // its sidecar is not back yet. It rolls, within --rollout-timeout, until that upgrade is
    // judged.
    if upgrade.is_some_and(|e| e.upgrading) {
        let (failure, deadline) = timeout_failure(input, book, (entry, &active), said);
        survey.wakes.extend(deadline);
        let still = (workload, &active[..]);
        roll_or_fail(input, survey, out, still, target, true, failure);
        return;
    }
    let carrier = Carrier {
        group,
        entry,
        active: &active,
        stale: &restart_for,
        target,
        progress: &said,
    };
    judge_carrier(input, book, carrier, survey, out);
}

/// Whether a workload carrying the target was restarted to it in the campaigns now in force,
/// so that this campaign judges its rollout: not when the revision came back (the campaign
/// replaced another) and the restart is older than the campaign.
fn restarted_in_campaign(book: &CampaignBook, entry: &WorkloadEntry, active: &[&str]) -> bool {
    let Some(at) = entry.rolled_at else {
        return true;
    };
    active
        .iter()
        .filter_map(|s| book.campaigns.get(*s))
        .all(|c| c.previous.is_none() || at >= c.since.0)
}

/// A workload not carrying the target, with pods to restart: a candidate, restarted in place
/// when it can be.
fn candidate<'g, 'r>(
    input: &PlanInput<'_>,
    group: &'g Group<'r>,
    entry: Option<&WorkloadEntry>,
    restart_for: Vec<&'r WorkloadDrift>,
    target: RevisionStamp,
    survey: &mut Survey<'g, 'r>,
) {
    for row in &restart_for {
        survey
            .counts
            .entry(row.sidecar.clone())
            .or_default()
            .pending += 1;
    }
    let (method, reverted) = restart_method(input, &group.workload, entry, &target);
    let (method, not_in_place) = match (method, in_place(input, entry, &restart_for)) {
        (RestartMethod::Template, Some(Ok(()))) => (RestartMethod::InPlace, None),
        (_, Some(Err(why))) => (method, Some(why)),
        _ => (method, None),
    };
    survey.candidates.push(Candidate {
        group,
        restart_for,
        target,
        heal: false,
        method,
        reverted,
        not_in_place,
    });
}

/// A restart by eviction under way carries the target as a stamped OnDelete workload would:
/// its pods are evicted one at a time, its --rollout-timeout runs from its start.
fn by_eviction(
    input: &PlanInput<'_>,
    workload: &WorkloadRef,
    entry: &WorkloadEntry,
    target: &RevisionStamp,
) -> Option<WorkloadEntry> {
    let started = input
        .evicting
        .get(workload)
        .filter(|e| &e.target == target)?;
    Some(WorkloadEntry {
        update_strategy: UpdateStrategy::OnDelete,
        rolled_at: Some(started.since),
        rollout_revision: Some(target.as_str().into()),
        ..entry.clone()
    })
}

/// How a candidate is restarted, and whether because its stamp was reverted: the stamp this
/// engine set for this very target is gone and the pods stayed, so someone (a GitOps
/// controller's self-heal) reverts the template; writing it again would loop, evicting the
/// pods does not touch it. An explicit `template` on the workload keeps the template method.
fn restart_method(
    input: &PlanInput<'_>,
    workload: &WorkloadRef,
    entry: Option<&WorkloadEntry>,
    target: &RevisionStamp,
) -> (RestartMethod, bool) {
    let own = entry.and_then(|e| e.restart_method);
    let reverted = workload.kind.is_controller()
        && own != Some(RestartMethod::Template)
        && input.stamped.get(workload) == Some(target);
    let evict = reverted || own.unwrap_or(input.settings.restart_method) == RestartMethod::Evict;
    let method = if evict {
        RestartMethod::Evict
    } else {
        RestartMethod::Template
    };
    (method, reverted)
}

/// Whether a candidate's pods can be upgraded in place: `None` when that is not considered
/// (`--in-place=off`, a bare pod, a workload restarted by eviction on purpose), else why not.
fn in_place(
    input: &PlanInput<'_>,
    entry: Option<&WorkloadEntry>,
    restart_for: &[&WorkloadDrift],
) -> Option<Result<(), String>> {
    let entry = entry?;
    if input.settings.in_place == InPlaceMode::Off || entry.restart_method.is_some() {
        return None;
    }
    for row in restart_for {
        let target = &input.targets[&row.sidecar];
        if !target.in_place {
            return Some(Err(format!(
                "{}'s config says rollout: {{inPlace: false}}",
                row.sidecar
            )));
        }
        if row.pods.uninjected + row.pods.unknown > 0 {
            return Some(Err(format!(
                "pods without a revision of {} are recreated",
                row.sidecar
            )));
        }
        let Some(from) = row.from_revision.as_deref() else {
            return Some(Err(format!("{}: no revision to upgrade from", row.sidecar)));
        };
        if let Err(why) =
            super::in_place::sidecar_changes(input.history, &row.sidecar, from, &target.revision)
        {
            return Some(Err(why));
        }
    }
    // What changes allows it; the workload's budget must too.
    if entry.update_strategy == UpdateStrategy::Recreate {
        return Some(Err("strategy Recreate".to_owned()));
    }
    if entry.max_unavailable.is_some_and(|n| n < 1) {
        return Some(Err(
            "maxUnavailable 0 lets no pod be unavailable while its sidecar restarts".to_owned(),
        ));
    }
    Some(Ok(()))
}

/// A workload that carries the target: what the survey knows of it.
struct Carrier<'a, 'g, 'r> {
    group: &'g Group<'r>,
    entry: &'a WorkloadEntry,
    /// The sidecars in force that it requests.
    active: &'a [&'a str],
    /// Its rows still stale, uninjected (or unknown with `--restart-unknown`).
    stale: &'a [&'r WorkloadDrift],
    target: RevisionStamp,
    /// How far its restart got, as a timeout says it (made only for one).
    progress: &'a dyn Fn() -> String,
}

/// Rolling, succeeded, failed (finished but not current after the grace, or timed out), or
/// restarted once more when the only pods not current were never seen by the webhook.
fn judge_carrier<'g, 'r>(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    carrier: Carrier<'_, 'g, 'r>,
    survey: &mut Survey<'g, 'r>,
    out: &mut RolloutPlan,
) {
    let Carrier {
        group,
        entry,
        active,
        stale,
        target,
        progress: said,
    } = carrier;
    let workload = &group.workload;
    if judged_by_its_campaign(input, book, (workload, active, stale), survey, out) {
        return;
    }
    let on_delete = entry.update_strategy == UpdateStrategy::OnDelete;
    let finished = rolled_out(workload.kind, entry) && (stale.is_empty() || !on_delete);
    // Current: rolled out (or was, and bakes), it succeeds once its bake passed.
    let current = stale.is_empty() && (finished || input.baking.contains_key(workload));
    let mut bake_failure = None;
    if current {
        match bake(input, (workload, &target), entry, finished, survey, out) {
            BakeVerdict::Passed => {
                survey.count(active, |c| c.succeeded += 1);
                out.succeeded.push(workload.clone());
                return;
            }
            BakeVerdict::Baking => {}
            BakeVerdict::Failed(reason) => bake_failure = Some(reason),
        }
    }
    let still = (workload, active);
    // A container problem the bake found fails the restart as it is found, whether or not
    // the workload is up again by then.
    if bake_failure.is_some() || current {
        roll_or_fail(input, survey, out, still, target, on_delete, bake_failure);
        return;
    }
    if finished && let Some(ends) = finish_grace_end(input, workload) {
        survey.wakes.push(ends);
        out.finished_not_current.push(workload.clone());
        roll_or_fail(input, survey, out, still, target, on_delete, None);
        return;
    }
    // Pods created while the webhook was down or unreachable (failurePolicy Ignore) say
    // nothing against the revision: the restart is made once more, cooldown or not. Once
    // only: a webhook that never sees this workload's pods must not restart it forever.
    let only_uninjected = !stale.is_empty()
        && stale
            .iter()
            .all(|r| r.pods.uninjected > 0 && r.pods.stale + r.pods.unknown == 0);
    if finished && only_uninjected && entry.rollout_heal.as_deref() != Some(target.as_str()) {
        survey.count(active, |c| c.pending += 1);
        survey.candidates.push(Candidate {
            group,
            restart_for: stale.to_vec(),
            target,
            heal: true,
            method: RestartMethod::Template,
            reverted: false,
            not_in_place: None,
        });
        return;
    }
    let failure = if finished {
        Some(not_current_failure(input, stale))
    } else {
        let (failure, deadline) = timeout_failure(input, book, (entry, active), said);
        survey.wakes.extend(deadline);
        failure
    };
    roll_or_fail(
        input,
        survey,
        out,
        (workload, active),
        target,
        on_delete,
        failure,
    );
}

/// A carrier whose campaign settled it already: failed under it earlier (left alone), or held
/// back while it is paused; `false` when it is to be judged.
fn judged_by_its_campaign(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    (workload, active, stale): (&WorkloadRef, &[&str], &[&WorkloadDrift]),
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
) -> bool {
    if let Some((sidecar, campaign)) = failed_under(book, active, workload) {
        survey.count(active, |c| c.failed += 1);
        // Said in the plan while it is left stale; once its controller rolled it out after
        // all, it is current and there is nothing to say.
        if !stale.is_empty() {
            out.failed_earlier.push(FailedEarlier::new(
                workload.clone(),
                sidecar,
                &campaign.revision,
                campaign.failure_reason(workload),
            ));
        }
        return true;
    }
    // Its campaign paused and holds new pods at the last good revision: pods it made are at
    // that revision, not ours, and say nothing of ours. It waits for the campaign, neither
    // failed nor rolled on (evicting its pods would only bring more of the held revision).
    if let Some(sidecar) = held_back(book, stale) {
        survey.count(active, |c| c.pending += 1);
        out.waiting
            .push(waiting_for_campaign(input, workload, active, sidecar));
        return true;
    }
    false
}

fn waiting_for_campaign(
    input: &PlanInput<'_>,
    workload: &WorkloadRef,
    active: &[&str],
    sidecar: String,
) -> Waiting {
    let reason = WaitReason::CampaignPaused { sidecar };
    Waiting {
        workload: workload.clone(),
        sidecars: active.iter().map(|s| (*s).to_owned()).collect(),
        message: reason.describe(input.now),
        reason,
    }
}

/// The sidecar whose paused campaign holds new pods at the revision that every stale row of a
/// carrier runs, if there is one.
fn held_back(book: &CampaignBook, stale: &[&WorkloadDrift]) -> Option<String> {
    let held = |row: &&WorkloadDrift| {
        let campaign = book.campaigns.get(&row.sidecar)?;
        let hold = campaign
            .held
            .as_ref()
            .filter(|_| campaign.state == CampaignState::Paused)?;
        (row.from_revision.as_deref() == Some(hold.revision.as_str())
            && row.pods.uninjected + row.pods.unknown == 0)
            .then(|| row.sidecar.clone())
    };
    let first = stale.first().and_then(held)?;
    stale.iter().all(|r| held(r).is_some()).then_some(first)
}

/// A carrier still rolling, or failed with `failure`.
fn roll_or_fail(
    input: &PlanInput<'_>,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
    (workload, active): (&WorkloadRef, &[&str]),
    target: RevisionStamp,
    on_delete: bool,
    failure: Option<String>,
) {
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

enum BakeVerdict {
    Passed,
    Baking,
    Failed(String),
}

/// The health bake of a workload rolled out to the target with every pod current: it
/// passes once `--bake` has gone by and a read of its pods at the end found no container
/// restarted, backing off or killed; it fails when a read finds one, at the end or while its
/// health is down within the bake (the executor reads the pods when the plan asks, in
/// `bake_checks`, and passes what it found back).
fn bake(
    input: &PlanInput<'_>,
    (workload, target): (&WorkloadRef, &RevisionStamp),
    entry: &WorkloadEntry,
    healthy: bool,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
) -> BakeVerdict {
    let length = input.settings.bake;
    let state = input.baking.get(workload).filter(|b| &b.target == target);
    // Restarted longer ago than a rollout and a bake can take, it baked whether or not this
    // process saw it (a process that starts does not bake every done workload again).
    let long_done = entry
        .rolled_at
        .is_none_or(|at| after(after(at, input.settings.rollout_timeout), length) <= input.now);
    let unbaked = length.is_zero() || workload.kind == crate::workload::WorkloadKind::Pod;
    if unbaked || state.is_some_and(|b| b.passed) || (state.is_none() && long_done) {
        return if healthy {
            BakeVerdict::Passed
        } else {
            BakeVerdict::Baking
        };
    }
    let Some(state) = state else {
        out.bakes_started.push((workload.clone(), target.clone()));
        survey.wakes.push(after(input.now, length));
        return BakeVerdict::Baking;
    };
    let bake_text = humantime::format_duration(length);
    if let Some(problem) = &state.problem {
        return BakeVerdict::Failed(format!(
            "within --bake ({bake_text}) of rolling out: {problem}"
        ));
    }
    let ends = after(state.since, length);
    if input.now >= ends {
        if state.read_at.is_none_or(|read| read < ends) {
            out.bake_checks.push(workload.clone());
            return BakeVerdict::Baking;
        }
        return BakeVerdict::Passed;
    }
    // Its health dropped: its pods are read, and read again whenever they change while it
    // lasts (the change wakes the engine; no timer). A drop they do not explain (a scale-up's
    // new pods not ready yet, a node drain) is not a failure of the restart: only a container
    // that restarted, backs off or was killed is.
    if !healthy {
        if state.read_at.is_none() || state.pods_changed {
            out.bake_checks.push(workload.clone());
        } else {
            survey.wakes.push(ends);
        }
        return BakeVerdict::Baking;
    }
    survey.wakes.push(ends);
    BakeVerdict::Baking
}

/// Finished rolling with pods still not current, within the grace that pod deletions get to
/// catch up with the workload's status (they arrive on different watches): when it ends.
fn finish_grace_end(input: &PlanInput<'_>, workload: &WorkloadRef) -> Option<Timestamp> {
    let first = input
        .finished_since
        .get(workload)
        .copied()
        .unwrap_or(input.now);
    Some(after(first, input.settings.finish_grace)).filter(|end| *end > input.now)
}

/// Finished rolling, past the grace, with pods still not current.
fn not_current_failure(input: &PlanInput<'_>, stale: &[&WorkloadDrift]) -> String {
    let row = stale[0];
    let revision = &input.targets[&row.sidecar].revision;
    // New pods with no sidecar at all say nothing against the revision: the webhook never saw
    // them. Said as such, so that whoever reads the pause looks at the webhook.
    if row.pods.uninjected > 0 && row.pods.stale + row.pods.unknown == 0 {
        return format!(
            "finished rolling, twice, but {} of {} pods were created without {} (the webhook was bypassed: down, unreachable or too slow, with failurePolicy Ignore)",
            row.pods.uninjected,
            row.pods.total(),
            row.sidecar
        );
    }
    format!(
        "finished rolling but {} of {} pods still do not run {} {revision}",
        row.pods.stale + row.pods.uninjected + row.pods.unknown,
        row.pods.total(),
        row.sidecar,
    )
}

/// Still rolling after `--rollout-timeout` from the restart (or the campaign's start); if not
/// yet, when it would be.
fn timeout_failure(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    (entry, active): (&WorkloadEntry, &[&str]),
    progress: impl FnOnce() -> String,
) -> (Option<String>, Option<Timestamp>) {
    let started = entry.rolled_at.or_else(|| {
        active
            .iter()
            .filter_map(|s| book.campaigns.get(*s))
            .map(|c| c.since.0)
            .max()
    });
    let timeout = input.settings.rollout_timeout;
    let Some(deadline) = started.map(|t| after(t, timeout)) else {
        return (None, None);
    };
    if deadline > input.now {
        return (None, Some(deadline));
    }
    let reason = format!(
        "not rolled out within {} ({})",
        humantime::format_duration(timeout),
        progress()
    );
    (Some(reason), None)
}

/// How far a restart got, as its timeout says it: the workload's status for a template
/// restart; for one that replaces pods itself (by eviction or in place), which the status does
/// not count, its pods at the target and what the next step waits for.
fn replacement_progress(
    restart: Option<&super::plan::EvictionRestart>,
    workload: &WorkloadRef,
    entry: &WorkloadEntry,
    rows: &[&WorkloadDrift],
) -> String {
    let Some(restart) = restart else {
        return progress(workload.kind, entry);
    };
    let total = rows.iter().map(|r| r.pods.total()).max().unwrap_or(0);
    let current = rows.iter().map(|r| r.pods.current).min().unwrap_or(0);
    let ready = format!(
        "{} of {} ready",
        entry.ready_replicas.unwrap_or(0),
        entry.replicas.unwrap_or(0)
    );
    match (restart.in_place, &restart.awaiting) {
        (true, Some(awaiting)) => {
            format!("{current} of {total} pods upgraded in place; waiting for {awaiting}")
        }
        (true, None) => format!(
            "{current} of {total} pods upgraded in place; the next waits for the workload to be healthy: {ready}"
        ),
        (false, _) => format!(
            "{current} of {total} pods replaced by eviction; the next waits for the workload to be healthy: {ready}"
        ),
    }
}

/// The campaign, among the `active` sidecars', under whose revision `workload` failed.
fn failed_under<'b, 's>(
    book: &'b CampaignBook,
    active: &[&'s str],
    workload: &WorkloadRef,
) -> Option<(&'s str, &'b Campaign)> {
    active.iter().find_map(|sidecar| {
        let campaign = book
            .campaigns
            .get(*sidecar)
            .filter(|c| c.failed(workload))?;
        Some((*sidecar, campaign))
    })
}

/// The failures found in this pass count against every campaign of their workload.
fn record_failures(book: &mut CampaignBook, failures: &[(Failure, Vec<String>)]) {
    for (failure, sidecars) in failures {
        for sidecar in sidecars {
            if let Some(campaign) = book.campaigns.get_mut(sidecar) {
                campaign.record_failure(failure.clone());
            }
        }
    }
}

/// How many failures a pause's reason names (it counts them all): the reason is logged, put
/// in Events and kept in the status ConfigMap.
const FAILURES_NAMED: usize = 5;

/// Campaigns whose unacknowledged failures reached `--max-failures` pause.
fn pause_campaigns(book: &mut CampaignBook, input: &PlanInput<'_>, out: &mut RolloutPlan) {
    let settings = input.settings;
    let pins = book.pins.clone();
    for (sidecar, campaign) in &mut book.campaigns {
        if campaign.state == CampaignState::Paused
            || campaign.unacknowledged_failures() < settings.max_failures.max(1)
        {
            continue;
        }
        // A rollback (a pin of `rollout --to`, or the config put back to the revision before a
        // failed one) goes back to what ran before: pausing it would leave the failed
        // revision's pods where they are. Its failures are said, and those workloads are left
        // alone; the rest converges, a canary at a time until one succeeds.
        let pinned = pins
            .get(sidecar)
            .is_some_and(|p| p.revision == campaign.revision);
        if pinned || campaign.reverted.is_some() {
            continue;
        }
        let held = (settings.on_campaign_failure == OnCampaignFailure::Hold)
            .then(|| input.history.last_good(sidecar, &campaign.revision))
            .flatten();
        let new_pods = match held {
            Some(good) => format!(
                "new pods get the last good revision {} meanwhile (--on-campaign-failure=hold)",
                good.revision
            ),
            None if settings.on_campaign_failure == OnCampaignFailure::Hold => {
                "new pods still get this revision (no good revision of it is remembered to hold them at)"
                    .to_owned()
            }
            None => "new pods still get this revision".to_owned(),
        };
        campaign.held = held.map(|good| Hold {
            revision: good.revision.clone(),
            content: good.content.clone(),
            since: Time(input.now),
        });
        let count = campaign.unacknowledged_failures();
        let details = campaign.unacknowledged_details();
        let mut names: Vec<String> = details
            .iter()
            .take(FAILURES_NAMED)
            .map(|f| format!("{}: {}", f.workload, f.reason))
            .collect();
        if names.is_empty() {
            // A book written by hand, or by an earlier version, may keep none.
            names.push("their reasons are no longer kept".to_owned());
        } else if count > names.len() {
            names.push(format!("and {} more", count - names.len()));
        }
        let reason = format!(
            "rollout of {sidecar} {} paused after {count} failed workload(s) ({}); {new_pods}: fix or revert the config, roll back with `sidecar-injector rollout --to {sidecar}=previous`, or run `sidecar-injector rollout --resume`",
            campaign.revision,
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
    overflow: Option<&BookOverflow>,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
) {
    let mut candidates = std::mem::take(&mut survey.candidates);
    // Canary namespaces first (so the canary comes from them), then `NS/rollout-priority`
    // ascending, then the smallest workload (the canary risks the fewest pods).
    let order = |c: &Candidate<'_, '_>| {
        let workload = &c.group.workload;
        let priority = workload
            .controller_kind()
            .and_then(|kind| {
                input
                    .index
                    .workload(kind, &workload.namespace, &workload.name)
            })
            .and_then(|e| e.rollout_priority)
            .unwrap_or(0);
        (
            !input
                .settings
                .canary_namespaces
                .contains(&workload.namespace),
            priority,
            c.pods(),
        )
    };
    // Each key once: it looks the workload up in the index.
    candidates.sort_by_cached_key(|c| (order(c), c.group.workload.clone()));
    let mut in_flight_by_namespace: BTreeMap<String, usize> = BTreeMap::new();
    for rolling in &out.rolling {
        *in_flight_by_namespace
            .entry(rolling.workload.namespace.clone())
            .or_default() += 1;
    }
    let mut pace = Pace {
        in_flight: out.rolling.len(),
        in_flight_by_namespace,
        recent_restarts: survey.recent_restarts,
        canaries: BTreeMap::new(),
    };
    for candidate in candidates {
        let sidecars: Vec<String> = candidate
            .restart_for
            .iter()
            .map(|r| r.sidecar.clone())
            .collect();
        // A restart whose failure or pause the status ConfigMap could not take waits.
        let admitted = match overflow {
            Some(overflow) => Err(WaitReason::BookFull(overflow.clone())),
            None => admit(input, book, &candidate, &survey.counts, &pace),
        };
        match admitted {
            Err(reason) => out.waiting.push(Waiting {
                workload: candidate.group.workload.clone(),
                sidecars,
                message: reason.describe(input.now),
                reason,
            }),
            Ok(admitted) => {
                pace.take(&admitted, &candidate.group.workload);
                out.restarts
                    .push(restart(input, book, candidate, admitted.canary));
            }
        }
    }
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
    } || matches!(
        candidate.method,
        RestartMethod::Evict | RestartMethod::InPlace
    );
    let changes: Vec<SidecarChange> = candidate
        .restart_for
        .iter()
        .map(|r| {
            let target = &input.targets[&r.sidecar];
            SidecarChange {
                sidecar: r.sidecar.clone(),
                state: r.state,
                from: r.from_revision.clone(),
                to: target.revision.clone(),
                what: what_changed(book, target, &r.sidecar, r.from_revision.as_deref()),
            }
        })
        .collect();
    let reason = if candidate.reverted {
        format!(
            "the template stamp this engine set ({}) was reverted while the pods stayed (a GitOps controller's self-heal?); restarting by eviction instead, the template untouched: {}",
            candidate.target,
            rollout_reason(&changes)
        )
    } else if candidate.heal {
        let missed: u32 = candidate
            .restart_for
            .iter()
            .map(|r| r.pods.uninjected)
            .sum();
        format!(
            "{missed} pod(s) were created while the webhook was bypassed (down, unreachable or too slow, with failurePolicy Ignore); restarted once more: {}",
            rollout_reason(&changes)
        )
    } else {
        rollout_reason(&changes)
    };
    let reason = match (&candidate.not_in_place, candidate.method) {
        (_, RestartMethod::InPlace) => format!("in place: {reason}"),
        (Some(why), _) => format!("{reason} (restarted, not upgraded in place: {why})"),
        _ => reason,
    };
    Restart {
        pods: candidate.pods(),
        heal: candidate.heal,
        method: candidate.method,
        reverted: candidate.reverted,
        target: workload.kind.is_controller().then_some(candidate.target),
        reason,
        changes,
        canary,
        on_delete,
        workload,
    }
}

/// What changed from the revision the pods run to the target: described only when this process
/// saw that revision's content, or the campaign's own change starts from it (a pod several
/// revisions behind is not described with the latest change alone).
fn what_changed(
    book: &CampaignBook,
    target: &SidecarTarget,
    sidecar: &str,
    from: Option<&str>,
) -> Option<String> {
    let from = from?;
    target.changes_from.get(from).cloned().or_else(|| {
        book.campaigns
            .get(sidecar)
            .filter(|c| c.previous.as_deref() == Some(from))
            .and_then(|c| c.changes.clone())
    })
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

/// A campaign to `revision` undoes `previous` when `previous` failed while taking pods away
/// from that very revision.
pub(super) fn reversion(previous: &Campaign, revision: &str) -> Option<crate::rollout::Reversion> {
    (previous.has_failed() && previous.previous.as_deref() == Some(revision)).then(|| {
        crate::rollout::Reversion {
            from: previous.revision.clone(),
            reason: previous
                .pause_reason
                .clone()
                .or_else(|| previous.failures.first().map(|f| f.reason.clone()))
                .unwrap_or_else(|| "its campaign failed".to_owned()),
        }
    })
}

/// How many failed revisions a campaign remembers.
const FAILED_REMEMBERED: usize = 10;

/// The failed revisions a campaign replacing `previous` remembers.
pub(super) fn failed_before(previous: &Campaign) -> Vec<String> {
    let mut failed = previous.failed_before.clone();
    if previous.has_failed() {
        failed.retain(|r| *r != previous.revision);
        failed.push(previous.revision.clone());
    }
    let excess = failed.len().saturating_sub(FAILED_REMEMBERED);
    failed.drain(..excess);
    failed
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
                    reverted: previous.and_then(|c| reversion(c, &target.revision)),
                    failed_before: previous.map(failed_before).unwrap_or_default(),
                    since: Time(now),
                    state: CampaignState::Settling,
                    counts: CampaignCounts::default(),
                    failures: Vec::new(),
                    failed_workloads: Default::default(),
                    acknowledged_failures: 0,
                    pause_reason: None,
                    changes: target.changes.clone(),
                    resumed: None,
                    held: None,
                },
            };
            (name.clone(), campaign)
        })
        .collect();
    CampaignBook {
        campaigns,
        maintenance: None,
        pins: book.pins.clone(),
    }
}
