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
use crate::drift::{DriftIndex, DriftReport, WorkloadDrift};
use crate::workload::{UpdateStrategy, WorkloadKind, WorkloadRef};

/// The safety settings of DESIGN.md "Rollout engine", with its defaults.
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
    /// The `NS/rollout-revision` to write (empty for a bare pod, which is evicted).
    pub target: String,
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
    pub target: String,
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
pub fn target_stamp<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut items: Vec<(&str, &str)> = items.into_iter().collect();
    items.sort();
    items
        .iter()
        .map(|(s, r)| format!("{s}={r}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The rows of one workload, with what the planner derives from them.
struct Group<'r> {
    workload: WorkloadRef,
    rows: Vec<&'r WorkloadDrift>,
}

enum Verdict<'r> {
    /// Carries the target: rolling, succeeded or failed.
    Carries,
    Candidate {
        restart_for: Vec<&'r WorkloadDrift>,
    },
    Nothing,
}

pub fn plan(input: PlanInput<'_>) -> RolloutPlan {
    let PlanInput {
        report,
        index,
        targets,
        book,
        finished_since,
        settings,
        now,
    } = input;
    let mut book = next_book(book, targets, now);
    let mut out = RolloutPlan::default();

    let mut groups: BTreeMap<WorkloadRef, Group<'_>> = BTreeMap::new();
    for row in &report.workloads {
        // Rows of other owners (Jobs, ReplicaSets without a Deployment...) are reported only.
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

    // Per sidecar: (succeeded, rolling, failed, pending) of its campaign.
    let mut counts: BTreeMap<&str, CampaignCounts> = BTreeMap::new();
    let mut candidates: Vec<(&Group<'_>, Vec<&WorkloadDrift>, String)> = Vec::new();
    let mut recent_restarts = 0usize;
    let minute_ago = now
        .checked_sub(SignedDuration::from_secs(60))
        .unwrap_or(Timestamp::MIN);

    for group in groups.values() {
        let relevant: Vec<&WorkloadDrift> = group
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
        let restart_for: Vec<&WorkloadDrift> = relevant
            .iter()
            .copied()
            .filter(|r| r.needs_restart)
            .collect();
        let kind = group.workload.controller_kind();
        let entry =
            kind.and_then(|k| index.workload(k, &group.workload.namespace, &group.workload.name));
        if let Some(rolled_at) = entry.and_then(|e| e.rolled_at)
            && rolled_at > minute_ago
        {
            recent_restarts += 1;
        }
        let verdict = match (kind, entry) {
            (Some(_), Some(entry)) if entry.rollout_revision.as_deref() == Some(&target) => {
                Verdict::Carries
            }
            _ if restart_for.is_empty() => Verdict::Nothing,
            _ => Verdict::Candidate { restart_for },
        };
        match verdict {
            Verdict::Nothing => {}
            Verdict::Candidate { restart_for } => {
                for row in &restart_for {
                    counts.entry(&row.sidecar).or_default().pending += 1;
                }
                candidates.push((group, restart_for, target));
            }
            Verdict::Carries => {
                let (kind, entry) = (kind.expect("carries"), entry.expect("carries"));
                let active: Vec<&str> = relevant.iter().map(|r| r.sidecar.as_str()).collect();
                let already_failed = active.iter().any(|s| {
                    book.campaigns
                        .get(*s)
                        .is_some_and(|c| c.failed(&group.workload))
                });
                let stale: Vec<&&WorkloadDrift> =
                    relevant.iter().filter(|r| r.needs_restart).collect();
                let on_delete = entry.update_strategy == UpdateStrategy::OnDelete;
                let finished = rolled_out(kind, entry) && (stale.is_empty() || !on_delete);
                let started = entry.rolled_at.or_else(|| {
                    active
                        .iter()
                        .filter_map(|s| book.campaigns.get(*s))
                        .map(|c| c.since.0)
                        .max()
                });
                let timed_out = started.is_some_and(|t| after(t, settings.rollout_timeout) <= now);
                let failure = if already_failed {
                    None
                } else if finished && stale.is_empty() {
                    for sidecar in &active {
                        counts.entry(sidecar).or_default().succeeded += 1;
                    }
                    out.succeeded.push(group.workload.clone());
                    continue;
                } else if finished {
                    let first = finished_since.get(&group.workload).copied().unwrap_or(now);
                    if after(first, settings.finish_grace) <= now {
                        let row = stale[0];
                        Some(format!(
                            "finished rolling but {} of {} pods still do not run {} {}",
                            row.pods.stale + row.pods.uninjected + row.pods.unknown,
                            row.pods.total(),
                            row.sidecar,
                            targets[&row.sidecar].revision
                        ))
                    } else {
                        out.finished_not_current.push(group.workload.clone());
                        None
                    }
                } else if timed_out {
                    Some(format!(
                        "not rolled out within {} ({})",
                        humantime::format_duration(settings.rollout_timeout),
                        progress(kind, entry)
                    ))
                } else {
                    None
                };
                if already_failed {
                    for sidecar in &active {
                        counts.entry(sidecar).or_default().failed += 1;
                    }
                    continue;
                }
                match failure {
                    Some(reason) => {
                        let failure = Failure {
                            workload: group.workload.clone(),
                            reason,
                            at: Time(now),
                        };
                        for sidecar in &active {
                            counts.entry(sidecar).or_default().failed += 1;
                            if let Some(campaign) = book.campaigns.get_mut(*sidecar) {
                                campaign.failures.push(failure.clone());
                            }
                        }
                        out.failed.push(failure);
                    }
                    None => {
                        for sidecar in &active {
                            counts.entry(sidecar).or_default().rolling += 1;
                        }
                        out.rolling.push(Rolling {
                            workload: group.workload.clone(),
                            target,
                            on_delete,
                        });
                    }
                }
            }
        }
    }

    // Pauses take effect before anything new is planned.
    for (sidecar, campaign) in &mut book.campaigns {
        if campaign.state != CampaignState::Paused
            && campaign.unacknowledged_failures() >= settings.max_failures.max(1)
        {
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

    // Smallest workloads first, so that the canary risks the fewest pods.
    candidates.sort_by(|a, b| {
        let pods = |c: &(&Group<'_>, Vec<&WorkloadDrift>, String)| {
            c.0.rows.iter().map(|r| r.pods.total()).max().unwrap_or(0)
        };
        (pods(a), &a.0.workload).cmp(&(pods(b), &b.0.workload))
    });
    let mut in_flight = out.rolling.len();
    let mut canaries: BTreeMap<&str, usize> = BTreeMap::new();
    for (group, restart_for, target) in candidates {
        let campaign_of = |sidecar: &str| book.campaigns.get(sidecar);
        let sidecars: Vec<String> = restart_for.iter().map(|r| r.sidecar.clone()).collect();
        let wait = |reason: WaitReason| Waiting {
            workload: group.workload.clone(),
            sidecars: sidecars.clone(),
            message: reason.to_string(),
            reason,
        };
        let paused = group
            .rows
            .iter()
            .find(|r| campaign_of(&r.sidecar).is_some_and(|c| c.state == CampaignState::Paused));
        if let Some(row) = paused {
            out.waiting.push(wait(WaitReason::CampaignPaused {
                sidecar: row.sidecar.clone(),
            }));
            continue;
        }
        let auto: Vec<&WorkloadDrift> = restart_for
            .iter()
            .copied()
            .filter(|r| !targets[&r.sidecar].manual)
            .collect();
        if auto.is_empty() {
            out.waiting.push(wait(WaitReason::Manual {
                sidecar: restart_for[0].sidecar.clone(),
            }));
            continue;
        }
        let settling = auto
            .iter()
            .filter_map(|r| campaign_of(&r.sidecar))
            .map(|c| after(c.since.0, settings.settle))
            .filter(|until| *until > now)
            .max();
        if let Some(until) = settling {
            out.waiting
                .push(wait(WaitReason::Settling { until: Time(until) }));
            continue;
        }
        let kind = group.workload.controller_kind();
        let entry =
            kind.and_then(|k| index.workload(k, &group.workload.namespace, &group.workload.name));
        let on_delete = entry.is_some_and(|e| e.update_strategy == UpdateStrategy::OnDelete);
        match (kind, entry) {
            (Some(_), None) => {
                out.waiting.push(wait(WaitReason::NotKnownYet));
                continue;
            }
            (Some(WorkloadKind::Deployment), Some(e)) if e.paused => {
                out.waiting.push(wait(WaitReason::DeploymentPaused));
                continue;
            }
            (Some(WorkloadKind::StatefulSet), Some(e))
                if !on_delete && e.partition.is_some_and(|p| p > 0) =>
            {
                out.waiting.push(wait(WaitReason::Partition {
                    partition: e.partition.unwrap_or_default(),
                }));
                continue;
            }
            _ => {}
        }
        // The cooldown spares healthy workloads repeated restarts; one stuck mid-rollout (a
        // broken revision) gets the fix at once.
        let stuck = match (kind, entry) {
            (Some(kind), Some(e)) => !rolled_out(kind, e),
            _ => false,
        };
        if let Some(until) = entry
            .filter(|_| !stuck)
            .and_then(|e| e.rolled_at)
            .map(|t| after(t, settings.cooldown))
            .filter(|until| *until > now)
        {
            out.waiting
                .push(wait(WaitReason::Cooldown { until: Time(until) }));
            continue;
        }
        // The canary wave: until `--canary` workloads of a campaign succeeded, only that many
        // may be rolling.
        let mut canary = false;
        let mut held = None;
        for row in &auto {
            let c = counts
                .get(row.sidecar.as_str())
                .cloned()
                .unwrap_or_default();
            let total = c.succeeded + c.rolling + c.failed + c.pending;
            let wanted = settings.canary.min(total as usize) as u32;
            if c.succeeded >= wanted {
                continue;
            }
            let chosen = canaries.get(row.sidecar.as_str()).copied().unwrap_or(0) as u32;
            if c.rolling + chosen + c.succeeded < wanted {
                canary = true;
            } else {
                held = Some(row.sidecar.clone());
                break;
            }
        }
        if let Some(sidecar) = held {
            out.waiting.push(wait(WaitReason::Canary { sidecar }));
            continue;
        }
        if in_flight >= settings.max_parallel {
            out.waiting.push(wait(WaitReason::MaxParallel {
                limit: settings.max_parallel,
            }));
            continue;
        }
        if recent_restarts >= settings.max_restarts_per_minute {
            out.waiting.push(wait(WaitReason::RateLimit {
                per_minute: settings.max_restarts_per_minute,
            }));
            continue;
        }
        if canary {
            for row in &auto {
                *canaries.entry(row.sidecar.as_str()).or_default() += 1;
            }
        }
        in_flight += 1;
        recent_restarts += 1;
        let changes: Vec<SidecarChange> = restart_for
            .iter()
            .map(|r| SidecarChange {
                sidecar: r.sidecar.clone(),
                from: r.from_revision.clone(),
                to: targets[&r.sidecar].revision.clone(),
                what: campaign_of(&r.sidecar).and_then(|c| c.changes.clone()),
            })
            .collect();
        out.restarts.push(Restart {
            target: if kind.is_some() {
                target
            } else {
                String::new()
            },
            reason: rollout_reason(&changes),
            changes,
            canary,
            on_delete: on_delete || kind.is_none(),
            pods: group.rows.iter().map(|r| r.pods.total()).max().unwrap_or(0),
            workload: group.workload.clone(),
        });
    }

    // Campaign states and counts, as the status ConfigMap shows them.
    for (sidecar, campaign) in &mut book.campaigns {
        let c = counts.get(sidecar.as_str()).cloned().unwrap_or_default();
        campaign.state = match campaign.state {
            CampaignState::Paused => CampaignState::Paused,
            _ if targets.get(sidecar).is_some_and(|t| t.manual) => CampaignState::Manual,
            _ if after(campaign.since.0, settings.settle) > now => CampaignState::Settling,
            _ if c.pending + c.rolling > 0 => CampaignState::Running,
            _ => CampaignState::Complete,
        };
        campaign.counts = c;
    }
    out.book = book;
    out
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
