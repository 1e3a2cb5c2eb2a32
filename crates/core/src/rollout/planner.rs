//! The planner: from the drift report, the index, the targets, the campaign book, the
//! settings and `now`, in phases: survey every workload, record failures, pause campaigns,
//! schedule candidates through the gates, settle the book. No I/O, no clock.

use crate::rollout::FailureCause;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::book::{
    BookOverflow, CampaignBook, CampaignCounts, CampaignState, Failure, MaintenanceStatus,
};
use super::change::SidecarChange;
use super::gates::{Candidate, Group, Pace, admit, after};
use super::in_place::{InPlaceMode, NotInPlace};
use super::plan::{PlanInput, Restart, RolloutPlan, SidecarTarget, WaitReason, Waiting};
use super::promotion::gate_campaigns;
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
    let mut book = next_book(
        input.book,
        input.targets,
        input.settings.promotion,
        input.now,
    );
    gate_campaigns(
        &mut book,
        input.settings.promotion,
        input.history,
        input.now,
    );
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
    settle_book(&mut book, &input, &survey.counts, &out.rolling);
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
        let cause = FailureCause::InPlace { reason: problem };
        roll_or_fail(input, survey, out, still, target, true, Some(cause));
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
) -> Option<Result<(), NotInPlace>> {
    let entry = entry?;
    if input.settings.in_place == InPlaceMode::Off || entry.restart_method.is_some() {
        return None;
    }
    for row in restart_for {
        let target = &input.targets[&row.sidecar];
        if !target.in_place {
            return Some(Err(NotInPlace::TurnedOff {
                sidecar: row.sidecar.clone(),
            }));
        }
        if row.pods.uninjected + row.pods.unknown > 0 {
            return Some(Err(NotInPlace::PodsWithoutRevision {
                sidecar: row.sidecar.clone(),
            }));
        }
        let Some(from) = row.from_revision() else {
            return Some(Err(NotInPlace::NoRevisionToUpgradeFrom {
                sidecar: row.sidecar.clone(),
            }));
        };
        match super::in_place::sidecar_changes(input.history, &row.sidecar, from, &target.revision)
        {
            Err(why) => return Some(Err(why)),
            // Pod-level requests must cover the containers' (part of the webhook's rule), and
            // the API server resizes no pod that sets them.
            Ok(changes)
                if entry.template.is_some()
                    && changes.values().any(|c| !c.resources.is_empty()) =>
            {
                return Some(Err(NotInPlace::PodLevelResources));
            }
            Ok(_) => {}
        }
    }
    // What changes allows it; the workload's budget must too.
    if entry.update_strategy == UpdateStrategy::Recreate {
        return Some(Err(NotInPlace::Recreate));
    }
    if entry.max_unavailable.is_some_and(|n| n < 1) {
        return Some(Err(NotInPlace::NoPodMayBeUnavailable));
    }
    Some(Ok(()))
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
                message: String::new(),
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
                from: r.from_revision().map(str::to_owned),
                to: target.revision.clone(),
                what: what_changed(book, target, &r.sidecar, r.from_revision()),
            }
        })
        .collect();
    let missed = if candidate.heal {
        candidate
            .restart_for
            .iter()
            .map(|r| r.pods.uninjected)
            .sum()
    } else {
        0
    };
    Restart {
        pods: candidate.pods(),
        heal: candidate.heal,
        method: candidate.method,
        reverted: candidate.reverted,
        target: workload.kind.is_controller().then_some(candidate.target),
        reason: String::new(),
        missed,
        not_in_place: candidate.not_in_place.clone(),
        selected: None,
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

pub(super) mod campaigns;
mod judge;

use campaigns::{next_book, pause_campaigns, record_failures, settle_book};
use judge::{Carrier, judge_carrier, replacement_progress, roll_or_fail, timeout_failure};
