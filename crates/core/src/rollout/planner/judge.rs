//! Judging a workload that carries the target: rolling, baking, succeeded or failed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::super::analysis::{self, CheckStanding, MetricCheck, Reading};
use super::super::book::{Campaign, CampaignBook, Failure, FailureCause, FailureReason};
use super::super::gates::{Candidate, Group, after};
use super::super::health::{progress, rolled_out};
use super::super::plan::{
    FailedEarlier, PlanInput, Rolling, RolloutPlan, SidecarTarget, WaitReason, Waiting,
};
use crate::config::RevisionStamp;
use crate::drift::{WorkloadDrift, WorkloadEntry};
use crate::workload::{RestartMethod, UpdateStrategy, WorkloadRef};

use super::*;

/// A workload that carries the target: what the survey knows of it.
pub(super) struct Carrier<'a, 'g, 'r> {
    pub(super) group: &'g Group<'r>,
    pub(super) entry: &'a WorkloadEntry,
    /// The sidecars in force that it requests.
    pub(super) active: &'a [&'a str],
    /// Its rows still stale, uninjected (or unknown with `--restart-unknown`).
    pub(super) stale: &'a [&'r WorkloadDrift],
    pub(super) target: RevisionStamp,
    /// How far its restart got, as a timeout says it (made only for one).
    pub(super) progress: &'a dyn Fn() -> String,
}

/// Rolling, succeeded, failed (finished but not current after the grace, or timed out), or
/// restarted once more when the only pods not current were never seen by the webhook.
pub(super) fn judge_carrier<'g, 'r>(
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
    if judged_by_its_campaign(book, (workload, active, stale), survey, out) {
        return;
    }
    let on_delete = entry.update_strategy == UpdateStrategy::OnDelete;
    let finished = rolled_out(workload.kind, entry) && (stale.is_empty() || !on_delete);
    // Current: rolled out (or was, and bakes), it succeeds once its bake passed.
    let current = stale.is_empty() && (finished || input.baking.contains_key(workload));
    let mut bake_failure = None;
    let mut checks = Vec::new();
    if current {
        match bake(
            input,
            (workload, &target, active),
            entry,
            finished,
            survey,
            out,
        ) {
            BakeVerdict::Passed => {
                survey.count(active, |c| c.succeeded += 1);
                out.succeeded.push(workload.clone());
                return;
            }
            BakeVerdict::Baking(standing) => checks = standing,
            BakeVerdict::Failed(reason) => bake_failure = Some(reason),
        }
    }
    let still = (workload, active);
    // A container problem the bake found fails the restart as it is found, whether or not
    // the workload is up again by then.
    if bake_failure.is_some() || current {
        roll_or_fail(input, survey, out, still, target, on_delete, bake_failure);
        if let Some(rolling) = out.rolling.last_mut().filter(|r| &r.workload == workload) {
            rolling.checks = checks;
        }
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
pub(super) fn judged_by_its_campaign(
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
    // Its campaign paused (or waits for promotion) and holds new pods at the last good
    // revision: pods it made are at that revision, not ours, and say nothing of ours. It waits
    // for the campaign, neither failed nor rolled on (evicting its pods would only bring more
    // of the held revision).
    if let Some(sidecar) = held_back(book, stale) {
        survey.count(active, |c| c.pending += 1);
        out.waiting
            .push(waiting_for_campaign(book, workload, active, sidecar));
        return true;
    }
    false
}

pub(super) fn waiting_for_campaign(
    book: &CampaignBook,
    workload: &WorkloadRef,
    active: &[&str],
    sidecar: String,
) -> Waiting {
    // `held_back` found a campaign holding new pods: it is paused or gated.
    let reason = book
        .campaigns
        .get(&sidecar)
        .and_then(|c| c.holds_restarts(&sidecar))
        .unwrap_or(WaitReason::CampaignPaused { sidecar });
    Waiting {
        workload: workload.clone(),
        sidecars: active.iter().map(|s| (*s).to_owned()).collect(),
        message: String::new(),
        reason,
    }
}

/// The sidecar whose paused campaign holds new pods at the revision that every stale row of a
/// carrier runs, if there is one.
pub(super) fn held_back(book: &CampaignBook, stale: &[&WorkloadDrift]) -> Option<String> {
    let held = |row: &&WorkloadDrift| {
        let campaign = book.campaigns.get(&row.sidecar)?;
        let hold = campaign.holding()?;
        (row.from_revision() == Some(hold.revision.as_str())
            && row.pods.uninjected + row.pods.unknown == 0)
            .then(|| row.sidecar.clone())
    };
    let first = stale.first().and_then(held)?;
    stale.iter().all(|r| held(r).is_some()).then_some(first)
}

/// A carrier still rolling, or failed with `failure`.
pub(super) fn roll_or_fail(
    input: &PlanInput<'_>,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
    (workload, active): (&WorkloadRef, &[&str]),
    target: RevisionStamp,
    on_delete: bool,
    failure: Option<FailureCause>,
) {
    match failure {
        Some(cause) => {
            survey.count(active, |c| c.failed += 1);
            let failure = Failure {
                workload: workload.clone(),
                reason: FailureReason::Found(cause),
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
                checks: Vec::new(),
            });
        }
    }
}

pub(super) enum BakeVerdict {
    Passed,
    /// Still baking, with where its metric checks stand.
    Baking(Vec<CheckStanding>),
    Failed(FailureCause),
}

/// The health bake of a workload rolled out to the target with every pod current: it
/// passes once `--bake` has gone by, a read of its pods at the end found no container
/// restarted, backing off or killed, and its metric checks (the rollout policy's of the
/// sidecars it requests) passed; it fails when a read finds one, at the end or while its
/// health is down within the bake (the executor reads the pods when the plan asks, in
/// `bake_checks`, and passes what it found back), or when a check fails more often than it
/// tolerates. A workload with checks bakes even with `--bake 0s`: its checks are evaluated
/// once.
pub(super) fn bake(
    input: &PlanInput<'_>,
    (workload, target, active): (&WorkloadRef, &RevisionStamp, &[&str]),
    entry: &WorkloadEntry,
    healthy: bool,
    survey: &mut Survey<'_, '_>,
    out: &mut RolloutPlan,
) -> BakeVerdict {
    let length = input.settings.bake;
    let checks = checks_of(input, active);
    let state = input.baking.get(workload).filter(|b| &b.target == target);
    // Restarted longer ago than a rollout and a bake can take, it baked whether or not this
    // process saw it (a process that starts does not bake every done workload again).
    let long_done = entry
        .rolled_at
        .is_none_or(|at| after(after(at, input.settings.rollout_timeout), length) <= input.now);
    let unbaked = (length.is_zero() && checks.is_empty())
        || workload.kind == crate::workload::WorkloadKind::Pod;
    if unbaked || state.is_some_and(|b| b.passed) || (state.is_none() && long_done) {
        return if healthy {
            BakeVerdict::Passed
        } else {
            BakeVerdict::Baking(Vec::new())
        };
    }
    let Some(state) = state else {
        out.bakes_started.push((workload.clone(), target.clone()));
        survey.wakes.push(after(input.now, length));
        return BakeVerdict::Baking(Vec::new());
    };
    if let Some(problem) = &state.problem {
        return BakeVerdict::Failed(FailureCause::Bake {
            bake: length,
            problem: problem.clone(),
        });
    }
    let ends = after(state.since, length);
    let metrics = metric_checks(input, workload, &checks, state, ends, out);
    if let Some(failed) = metrics.failed {
        return BakeVerdict::Failed(failed);
    }
    survey.wakes.extend(metrics.next);
    if input.now >= ends {
        if state.read_at.is_none_or(|read| read < ends) {
            out.bake_checks.push(workload.clone());
            return BakeVerdict::Baking(metrics.standing);
        }
        if !metrics.passed {
            return BakeVerdict::Baking(metrics.standing);
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
        return BakeVerdict::Baking(metrics.standing);
    }
    survey.wakes.push(ends);
    BakeVerdict::Baking(metrics.standing)
}

/// The metric checks of the sidecars in force that `active` names, by `SIDECAR/CHECK`, with
/// the sidecar's target.
fn checks_of<'i>(
    input: &'i PlanInput<'_>,
    active: &[&str],
) -> Vec<(String, &'i MetricCheck, &'i SidecarTarget)> {
    active
        .iter()
        .filter_map(|sidecar| input.targets.get_key_value(*sidecar))
        .flat_map(|(sidecar, target)| {
            target
                .checks
                .iter()
                .map(move |check| (format!("{sidecar}/{}", check.name), check, target))
        })
        .collect()
}

/// What a bake's metric checks say.
struct MetricsVerdict {
    failed: Option<FailureCause>,
    next: Option<Timestamp>,
    passed: bool,
    standing: Vec<CheckStanding>,
}

/// The checks of a bake judged; those due are asked of the executor, filled in for the
/// workload's pods now.
fn metric_checks(
    input: &PlanInput<'_>,
    workload: &WorkloadRef,
    checks: &[(String, &MetricCheck, &SidecarTarget)],
    state: &super::super::plan::Bake,
    ends: Timestamp,
    out: &mut RolloutPlan,
) -> MetricsVerdict {
    if checks.is_empty() {
        return MetricsVerdict {
            failed: None,
            next: None,
            passed: true,
            standing: Vec::new(),
        };
    }
    let pods = workload
        .controller_kind()
        .map(|kind| {
            input
                .index
                .pod_names(kind, &workload.namespace, &workload.name)
        })
        .unwrap_or_default();
    let query = |check: &MetricCheck, target: &SidecarTarget| {
        analysis::fill(
            check,
            &analysis::Subject {
                workload,
                pods: &pods,
                containers: &target.containers,
            },
        )
    };
    let verdict = analysis::judge_checks(
        checks.iter().map(|(key, check, _)| (key.clone(), *check)),
        &state.checks,
        ends,
        input.now,
    );
    let mut standing = Vec::new();
    for (key, check, target) in checks {
        let query = query(check, target);
        if verdict.due.contains(key) {
            out.metric_checks.push(analysis::MetricQuery {
                workload: workload.clone(),
                key: key.clone(),
                check: (*check).clone(),
                query: query.clone(),
            });
        }
        let record = state.checks.get(key);
        standing.push(CheckStanding {
            key: key.clone(),
            query,
            threshold: check.threshold(),
            last: record
                .and_then(|r| r.last.as_ref())
                .map(|(_, reading)| reading.clone()),
            failures: record.map_or(0, |r| r.failures),
            tolerated: check.failures_tolerated,
        });
    }
    // The failed check's query and limits as its standing says them: filled once.
    let failed = verdict.failed.and_then(|(key, record)| {
        let standing = standing.iter().find(|s| s.key == key)?;
        Some(FailureCause::Metric {
            query: standing.query.clone(),
            threshold: standing.threshold,
            reading: record
                .last
                .map_or(Reading::Unknown("never evaluated".to_owned()), |(_, r)| r),
            failures: record.failures,
            tolerated: standing.tolerated,
            check: key,
        })
    });
    MetricsVerdict {
        failed,
        next: verdict.next,
        passed: verdict.passed,
        standing,
    }
}

/// Finished rolling with pods still not current, within the grace that pod deletions get to
/// catch up with the workload's status (they arrive on different watches): when it ends.
pub(super) fn finish_grace_end(input: &PlanInput<'_>, workload: &WorkloadRef) -> Option<Timestamp> {
    let first = input
        .finished_since
        .get(workload)
        .copied()
        .unwrap_or(input.now);
    Some(after(first, input.settings.finish_grace)).filter(|end| *end > input.now)
}

/// Finished rolling, past the grace, with pods still not current.
pub(super) fn not_current_failure(input: &PlanInput<'_>, stale: &[&WorkloadDrift]) -> FailureCause {
    let row = stale[0];
    let revision = &input.targets[&row.sidecar].revision;
    // New pods with no sidecar at all say nothing against the revision: the webhook never saw
    // them. Said as such, so that whoever reads the pause looks at the webhook.
    if row.pods.uninjected > 0 && row.pods.stale + row.pods.unknown == 0 {
        return FailureCause::Bypassed {
            uninjected: row.pods.uninjected,
            total: row.pods.total(),
            sidecar: row.sidecar.clone(),
        };
    }
    FailureCause::NotCurrent {
        not_current: row.pods.stale + row.pods.uninjected + row.pods.unknown,
        total: row.pods.total(),
        sidecar: row.sidecar.clone(),
        revision: revision.clone(),
    }
}

/// Still rolling after `--rollout-timeout` from the restart (or the campaign's start); if not
/// yet, when it would be.
pub(super) fn timeout_failure(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    (entry, active): (&WorkloadEntry, &[&str]),
    progress: impl FnOnce() -> String,
) -> (Option<FailureCause>, Option<Timestamp>) {
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
    let cause = FailureCause::NotRolledOut {
        timeout,
        progress: progress(),
    };
    (Some(cause), None)
}

/// How far a restart got, as its timeout says it: the workload's status for a template
/// restart; for one that replaces pods itself (by eviction or in place), which the status does
/// not count, its pods at the target and what the next step waits for.
pub(super) fn replacement_progress(
    restart: Option<&super::super::plan::EvictionRestart>,
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
pub(super) fn failed_under<'b, 's>(
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
