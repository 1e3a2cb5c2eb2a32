//! The chain of wait gates a candidate passes before it is restarted: the campaign, the
//! policy, the settle window, the workload itself, the canary wave, parallelism and rate.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::book::{CampaignBook, CampaignCounts};
use super::health::{progress, rolled_out};
use super::plan::{PlanInput, RolloutSettings, WaitReason};
use crate::config::RevisionStamp;
use crate::drift::WorkloadDrift;
use crate::maintenance::WindowState;
use crate::workload::{RestartMethod, UpdateStrategy, WorkloadKind, WorkloadRef};

pub use super::instant::after;

/// The rows of one workload, with what the planner derives from them.
pub(super) struct Group<'r> {
    pub(super) workload: WorkloadRef,
    pub(super) rows: Vec<&'r WorkloadDrift>,
}

/// A workload that needs a restart: it does not carry the target yet, or it is healed.
pub(super) struct Candidate<'g, 'r> {
    pub(super) group: &'g Group<'r>,
    pub(super) restart_for: Vec<&'r WorkloadDrift>,
    pub(super) target: RevisionStamp,
    /// It carries the target already, and pods of that restart were created while the
    /// webhook was bypassed: restarted once more.
    pub(super) heal: bool,
    pub(super) method: RestartMethod,
    /// The stamp this engine set for this target was reverted (see [`super::Restart`]).
    pub(super) reverted: bool,
    /// Why its pods are not upgraded in place, when that was considered.
    pub(super) not_in_place: Option<super::in_place::NotInPlace>,
}

impl Candidate<'_, '_> {
    /// Its largest pod count over the sidecars: the canary goes to the smallest workload.
    pub(super) fn pods(&self) -> u32 {
        self.group
            .rows
            .iter()
            .map(|r| r.pods.total())
            .max()
            .unwrap_or(0)
    }
}

/// What restarts already use of the limits in this pass.
pub(super) struct Pace<'r> {
    pub(super) in_flight: usize,
    /// The same, per namespace, for `--max-parallel-per-namespace`.
    pub(super) in_flight_by_namespace: BTreeMap<String, usize>,
    pub(super) recent_restarts: usize,
    /// Canaries chosen in this pass, per sidecar.
    pub(super) canaries: BTreeMap<&'r str, usize>,
}

/// A candidate cleared by every gate.
pub(super) struct Admitted<'r> {
    /// Part of a canary wave (these sidecars' canaries).
    pub(super) canary: bool,
    pub(super) auto: Vec<&'r WorkloadDrift>,
}

impl<'r> Pace<'r> {
    pub(super) fn take(&mut self, admitted: &Admitted<'r>, workload: &WorkloadRef) {
        *self
            .in_flight_by_namespace
            .entry(workload.namespace.clone())
            .or_default() += 1;
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
pub(super) fn admit<'r>(
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
        // A candidate has a row to restart for; one without any never reaches a gate, but a
        // planner bug must not panic the engine while it holds the index.
        let sidecar = candidate.restart_for.first().map(|r| r.sidecar.clone());
        return Err(
            sidecar.map_or(WaitReason::NotKnownYet, |sidecar| WaitReason::Manual {
                sidecar,
            }),
        );
    }
    settle_gate(input, book, &auto)?;
    // A reverted restart was made already, and undone by someone else: its cooldown is not
    // a reason to wait.
    workload_gate(
        input,
        &candidate.group.workload,
        candidate.heal || candidate.reverted,
        || carries_failed_revision(input, book, candidate),
    )?;
    if !candidate.heal {
        window_gate(input, &candidate.group.workload)?;
    }
    let canary = canary_gate(settings, &auto, counts, pace)?;
    if pace.in_flight >= settings.max_parallel {
        return Err(WaitReason::MaxParallel {
            limit: settings.max_parallel,
        });
    }
    let namespace = &candidate.group.workload.namespace;
    let limit = settings.max_parallel_per_namespace;
    if limit > 0
        && pace
            .in_flight_by_namespace
            .get(namespace)
            .is_some_and(|n| *n >= limit)
    {
        return Err(WaitReason::MaxParallelInNamespace {
            namespace: namespace.clone(),
            limit,
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
    let held = candidate.group.rows.iter().find_map(|r| {
        book.campaigns
            .get(&r.sidecar)
            .and_then(|c| c.holds_restarts(&r.sidecar))
    });
    held.map_or(Ok(()), Err)
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

/// What the workload itself says: not known yet, paused, a partition, a cooldown (which a heal
/// does not wait for: its restart's pods missed the webhook, and it was rolled out).
fn workload_gate(
    input: &PlanInput<'_>,
    workload: &WorkloadRef,
    heal: bool,
    carries_failed: impl Fn() -> bool,
) -> Result<(), WaitReason> {
    let Some(kind) = workload.controller_kind() else {
        return Ok(());
    };
    let Some(entry) = input
        .index
        .workload(kind, &workload.namespace, &workload.name)
    else {
        return Err(WaitReason::NotKnownYet);
    };
    if let (Some(served), Some(template)) = (input.served, entry.template.as_deref())
        && let Some(denial) = served.refusal(template, &workload.namespace)
    {
        return Err(WaitReason::PodsWouldBeRefused { denial });
    }
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
    if let Some(why) = entry.downtime
        && !input.settings.allow_downtime
        && !entry.allow_downtime
    {
        return Err(WaitReason::Downtime { why });
    }
    if heal {
        return Ok(());
    }
    // The cooldown spares healthy workloads repeated restarts; one stuck mid-rollout (a
    // broken revision, not rolled out --rollout-timeout after its restart) gets the fix at
    // once. One still rolling out within that time waits for it: a config flapping faster
    // than a rollout would otherwise restart it on every flip.
    if !rolled_out(kind, entry) {
        return match entry
            .rolled_at
            .map(|t| after(t, input.settings.rollout_timeout))
            .filter(|until| *until > input.now)
        {
            Some(until) => Err(WaitReason::RollingOut { until: Time(until) }),
            // Stuck on a revision this engine rolled it to: the fix goes in at once.
            None if entry.rolled_at.is_some() || entry.rollout_revision.is_some() => Ok(()),
            // Its stale pods carry a revision whose campaign failed (created while it was
            // paused): that revision is what is wrong with it, and the restart the cure.
            None if carries_failed() => Ok(()),
            // Unhealthy before any restart of ours (its app, its own rollout): a restart would
            // not make it healthy and would fail the campaign at its canary. It waits until
            // it is healthy, never counted as a failure.
            None => Err(WaitReason::Unhealthy {
                progress: progress(kind, entry),
            }),
        };
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

/// Whether the candidate's stale pods carry a revision whose campaign failed: the revision its
/// rows name, or that of any of its pods (a workload whose pods run several revisions, one of
/// them broken, names one).
fn carries_failed_revision(
    input: &PlanInput<'_>,
    book: &CampaignBook,
    candidate: &Candidate<'_, '_>,
) -> bool {
    let named = candidate.restart_for.iter().any(|row| {
        let campaign = book.campaigns.get(&row.sidecar);
        row.from_revision()
            .is_some_and(|from| campaign.is_some_and(|c| c.failed_before.iter().any(|f| f == from)))
    });
    if named {
        return true;
    }
    let workload = &candidate.group.workload;
    let Some(kind) = workload.controller_kind() else {
        return false;
    };
    let wanted: crate::config::RevisionsInForce = input
        .targets
        .iter()
        .map(|(name, target)| (name.clone(), target.revision.clone()))
        .collect();
    input
        .index
        .pods_needing_restart(kind, &workload.namespace, &workload.name, &wanted, false)
        .iter()
        .any(|pod| super::eviction::carries_failed_revision(pod, book))
}

/// Restarts start inside a maintenance window: the workload's own `NS/maintenance-window`,
/// else `--maintenance-window`. A heal is not held: it finishes a restart already made.
fn window_gate(input: &PlanInput<'_>, workload: &WorkloadRef) -> Result<(), WaitReason> {
    let own = workload.controller_kind().and_then(|kind| {
        input
            .index
            .workload(kind, &workload.namespace, &workload.name)
            .and_then(|e| e.maintenance_window.as_ref())
    });
    let windows = match own {
        Some(Err(error)) => {
            return Err(WaitReason::MaintenanceWindowInvalid {
                error: error.clone(),
            });
        }
        Some(Ok(windows)) => windows,
        None => &input.settings.maintenance_windows,
    };
    match windows.state(input.now) {
        WindowState::Closed { opens } => Err(WaitReason::OutsideMaintenanceWindow {
            windows: windows.text(),
            opens: opens.map(Time),
        }),
        _ => Ok(()),
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
