//! The campaigns of a plan: failures recorded, campaigns paused, the book settled and
//! carried to the revisions in force.

use crate::rollout::{FailureCause, FailureReason};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::super::book::{
    BakeChecks, Campaign, CampaignBook, CampaignCounts, CampaignState, Failure, Hold,
};
use super::super::gates::after;
use super::super::pause::{Pause, WhilePaused};
use super::super::plan::{OnCampaignFailure, PlanInput, RolloutPlan, SidecarTarget};
use super::super::promotion::{PromotionMode, gated_from_start, rolled_out_before};

/// The failures found in this pass count against every campaign of their workload.
pub(super) fn record_failures(book: &mut CampaignBook, failures: &[(Failure, Vec<String>)]) {
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
pub(super) const FAILURES_NAMED: usize = 5;

/// Campaigns whose unacknowledged failures reached `--max-failures` pause.
pub(super) fn pause_campaigns(
    book: &mut CampaignBook,
    input: &PlanInput<'_>,
    out: &mut RolloutPlan,
) {
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
            Some(good) => WhilePaused::HeldAt(good.revision.clone()),
            None if settings.on_campaign_failure == OnCampaignFailure::Hold => {
                WhilePaused::NoGoodRevision
            }
            None => WhilePaused::NotHeld,
        };
        campaign.held = held.map(|good| Hold {
            revision: good.revision.clone(),
            content: good.content.clone(),
            since: Time(input.now),
        });
        let pause = Pause {
            revision: campaign.revision.clone(),
            failed: campaign.unacknowledged_failures(),
            named: campaign
                .unacknowledged_details()
                .iter()
                .take(FAILURES_NAMED)
                .map(|f| (f.workload.clone(), f.reason.clone()))
                .collect(),
            new_pods,
        };
        campaign.state = CampaignState::Paused;
        // Worded by the shell, which writes the words here before the book is kept.
        campaign.pause_reason = None;
        out.pauses.push((sidecar.clone(), pause));
    }
}

/// Campaign states and counts, as the status ConfigMap shows them.
pub(super) fn settle_book(
    book: &mut CampaignBook,
    input: &PlanInput<'_>,
    counts: &BTreeMap<String, CampaignCounts>,
    rolling: &[super::super::plan::Rolling],
) {
    for (sidecar, campaign) in &mut book.campaigns {
        let c = counts.get(sidecar).cloned().unwrap_or_default();
        campaign.checks = bake_checks(sidecar, rolling);
        campaign.state = match campaign.state {
            CampaignState::Paused => CampaignState::Paused,
            CampaignState::Gated => CampaignState::Gated,
            _ if input.targets.get(sidecar).is_some_and(|t| t.manual) => CampaignState::Manual,
            _ if after(campaign.since.0, input.settings.settle) > input.now => {
                CampaignState::Settling
            }
            _ if c.pending + c.rolling > 0 => CampaignState::Running,
            _ => CampaignState::Complete,
        };
        campaign.expected_end = expected_end(
            campaign.state,
            &c,
            after(campaign.since.0, input.settings.settle),
            input.now,
            input.settings.max_restarts_per_minute,
        )
        .map(Time);
        campaign.counts = c;
        if campaign.state != CampaignState::Complete {
            campaign.completed = None;
        } else if campaign.completed.is_none() {
            campaign.completed = Some(Time(input.now));
        }
    }
}

/// The metric checks of `sidecar` in the bakes of `rolling`, as the book keeps them.
fn bake_checks(sidecar: &str, rolling: &[super::super::plan::Rolling]) -> Vec<BakeChecks> {
    let prefix = format!("{sidecar}/");
    rolling
        .iter()
        .filter_map(|r| {
            let checks: Vec<_> = r
                .checks
                .iter()
                .filter(|c| c.key.starts_with(&prefix))
                .map(|c| crate::rollout::analysis::CheckStanding {
                    query: String::new(),
                    ..c.clone()
                })
                .collect();
            (!checks.is_empty()).then(|| BakeChecks {
                workload: r.workload.clone(),
                checks,
            })
        })
        .collect()
}

/// The earliest a campaign in `state` with `counts` left can end by the restart budget: its
/// pending workloads started `per_minute` a minute, from `now` (from `settled`, the end of
/// the settle window, while it settles). Rollouts take time of their own and
/// `--max-parallel` may hold restarts back longer, so it ends at this time or later.
pub(in crate::rollout) fn expected_end(
    state: CampaignState,
    counts: &CampaignCounts,
    settled: Timestamp,
    now: Timestamp,
    per_minute: usize,
) -> Option<Timestamp> {
    let start = match state {
        CampaignState::Running => now,
        CampaignState::Settling => settled.max(now),
        _ => return None,
    };
    let per_minute = u64::try_from(per_minute.max(1)).unwrap_or(u64::MAX);
    let pending = u64::from(counts.pending);
    // The first `per_minute` go at once, the next ones a minute later, and so on.
    let minutes = pending.saturating_sub(1) / per_minute;
    let minutes = i64::try_from(minutes).unwrap_or(i64::MAX / 120);
    start
        .checked_add(k8s_openapi::jiff::SignedDuration::from_mins(
            minutes.min(1 << 40),
        ))
        .ok()
}

/// A campaign to `revision` undoes `previous` when `previous` failed while taking pods away
/// from that very revision.
pub(in crate::rollout) fn reversion(
    previous: &Campaign,
    revision: &str,
) -> Option<crate::rollout::Reversion> {
    (previous.has_failed() && previous.previous.as_deref() == Some(revision)).then(|| {
        crate::rollout::Reversion {
            from: previous.revision.clone(),
            reason: previous
                .pause_reason
                .clone()
                .map(FailureReason::Said)
                .or_else(|| previous.failures.first().map(|f| f.reason.clone()))
                .unwrap_or(FailureReason::Found(FailureCause::CampaignFailed)),
        }
    })
}

/// How many failed revisions a campaign remembers.
pub(super) const FAILED_REMEMBERED: usize = 10;

/// The failed revisions a campaign replacing `previous` remembers.
pub(in crate::rollout) fn failed_before(previous: &Campaign) -> Vec<String> {
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
pub(super) fn next_book(
    book: &CampaignBook,
    targets: &BTreeMap<String, SidecarTarget>,
    promotion: PromotionMode,
    now: Timestamp,
) -> CampaignBook {
    let campaigns = targets
        .iter()
        .map(|(name, target)| {
            let campaign = match book.campaigns.get(name) {
                Some(c) if c.revision == target.revision => c.clone(),
                previous => Campaign {
                    revision: target.revision.clone(),
                    previous: previous.and_then(rolled_out_before),
                    reverted: previous.and_then(|c| reversion(c, &target.revision)),
                    failed_before: previous.map(failed_before).unwrap_or_default(),
                    checks: Vec::new(),
                    since: Time(now),
                    state: if gated_from_start(promotion, previous, &target.revision) {
                        CampaignState::Gated
                    } else {
                        CampaignState::Settling
                    },
                    counts: CampaignCounts::default(),
                    failures: Vec::new(),
                    failed_workloads: Default::default(),
                    acknowledged_failures: 0,
                    pause_reason: None,
                    changes: target.changes.clone(),
                    resumed: None,
                    held: None,
                    expected_end: None,
                    completed: None,
                },
            };
            (name.clone(), campaign)
        })
        .collect();
    CampaignBook {
        campaigns,
        maintenance: None,
        pins: book.pins.clone(),
        promotions: book.promotions.clone(),
        upstream: book.upstream.clone(),
    }
}
