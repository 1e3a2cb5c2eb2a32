//! What the engine says about its campaigns, once per change: the whole dry-run plan, why a
//! campaign waits (cooldown, paused, manual policy...), that a campaign was resumed, and one line
//! when a campaign completes. Pure: it remembers what it said and returns the lines to say for
//! a new plan, as data; the executor words them (`render::journal_line`) and logs them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::book::{CampaignBook, CampaignState};
use super::plan::RolloutPlan;
use super::wait::WaitReason;
use crate::workload::WorkloadRef;

/// One line to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub sidecar: Option<String>,
    pub workload: Option<WorkloadRef>,
    pub said: Said,
}

/// What a line says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    /// The dry-run plan changed: how many restarts, waits and rollouts it holds now.
    DryRunChanged {
        restarts: usize,
        waiting: usize,
        rolling: usize,
    },
    /// Dry run: the restart the engine would make.
    WouldRestart(Box<super::plan::Restart>),
    /// Dry run: a workload that would wait.
    WouldWait(WaitReason),
    /// Why a campaign's workloads wait now (none: nothing waits any more).
    Waits { revision: String, waits: Waits },
    Complete {
        revision: String,
        succeeded: u32,
        failed: u32,
    },
    /// Resumed (`rollout --resume`): by whom and when.
    Resumed {
        revision: String,
        by: String,
        at: Time,
    },
}

/// Each reason to wait, with the workloads it holds, in the order the plan gives them.
pub type Waits = Vec<(WaitReason, Vec<WorkloadRef>)>;

impl Line {
    fn about(sidecar: &str, said: Said) -> Self {
        Self {
            sidecar: Some(sidecar.to_owned()),
            workload: None,
            said,
        }
    }

    fn of(workload: &WorkloadRef, said: Said) -> Self {
        Self {
            sidecar: None,
            workload: Some(workload.clone()),
            said,
        }
    }
}

/// What was said last, so that nothing is said twice.
#[derive(Debug, Default)]
pub struct Journal {
    dry_run: Vec<Line>,
    /// Per sidecar: the revision and the waits last said.
    waits: BTreeMap<String, (String, Waits)>,
    /// Per sidecar: the revision and state last seen; a completion is said on the change
    /// to complete, not for a campaign that was complete when this process started.
    states: BTreeMap<String, (String, CampaignState)>,
}

impl Journal {
    /// `--rollout=dry-run`: the whole plan (what would restart now, what would wait and why),
    /// when it differs from the plan said last.
    pub fn dry_run(&mut self, plan: &RolloutPlan) -> Vec<Line> {
        let lines: Vec<Line> = plan
            .restarts
            .iter()
            .map(|r| Line::of(&r.workload, Said::WouldRestart(Box::new(r.clone()))))
            .chain(
                plan.waiting
                    .iter()
                    .map(|w| Line::of(&w.workload, Said::WouldWait(w.reason.clone()))),
            )
            .collect();
        if lines == self.dry_run {
            return Vec::new();
        }
        self.dry_run.clone_from(&lines);
        let summary = Said::DryRunChanged {
            restarts: plan.restarts.len(),
            waiting: plan.waiting.len(),
            rolling: plan.rolling.len(),
        };
        let mut said = vec![Line {
            sidecar: None,
            workload: None,
            said: summary,
        }];
        said.extend(lines);
        said
    }

    /// Why each campaign waits, when that changes (only waits that a person or the clock ends:
    /// cooldown, a pause, a manual policy, a paused Deployment, a partition), and one line when
    /// a campaign completes.
    pub fn campaigns(&mut self, plan: &RolloutPlan, book: &CampaignBook) -> Vec<Line> {
        let mut lines = Vec::new();
        for (sidecar, campaign) in &book.campaigns {
            let mut waits: Waits = Vec::new();
            for waiting in &plan.waiting {
                if waiting.sidecars.contains(sidecar) && !waiting.reason.clears_by_itself() {
                    match waits.iter_mut().find(|(r, _)| r == &waiting.reason) {
                        Some((_, workloads)) => workloads.push(waiting.workload.clone()),
                        None => {
                            waits.push((waiting.reason.clone(), vec![waiting.workload.clone()]))
                        }
                    }
                }
            }
            let said = self.waits.get(sidecar);
            let unchanged =
                said.is_some_and(|(revision, w)| revision == &campaign.revision && w == &waits);
            // Nothing waiting, and nothing said to be waiting: no news.
            let quiet = waits.is_empty() && said.is_none_or(|(_, w)| w.is_empty());
            if !(unchanged || quiet) {
                let said = Said::Waits {
                    revision: campaign.revision.clone(),
                    waits: waits.clone(),
                };
                lines.push(Line::about(sidecar, said));
            }
            self.waits
                .insert(sidecar.clone(), (campaign.revision.clone(), waits));
            let seen = self
                .states
                .insert(sidecar.clone(), (campaign.revision.clone(), campaign.state));
            let was_open = seen.is_some_and(|(revision, state)| {
                revision == campaign.revision && state != CampaignState::Complete
            });
            // A campaign with nothing to restart (its pods were current) is no news.
            let worked = campaign.counts.succeeded + campaign.counts.failed > 0;
            if was_open && worked && campaign.state == CampaignState::Complete {
                let said = Said::Complete {
                    revision: campaign.revision.clone(),
                    succeeded: campaign.counts.succeeded,
                    failed: campaign.counts.failed,
                };
                lines.push(Line::about(sidecar, said));
            }
        }
        self.waits.retain(|s, _| book.campaigns.contains_key(s));
        self.states.retain(|s, _| book.campaigns.contains_key(s));
        lines
    }
}

/// Campaigns someone resumed (`rollout --resume`) between `before` and `after`: one line each,
/// saying who and when.
pub fn resumptions(before: &CampaignBook, after: &CampaignBook) -> Vec<Line> {
    after
        .campaigns
        .iter()
        .filter_map(|(sidecar, campaign)| {
            let resumed = campaign.resumed.as_ref()?;
            let known = before
                .campaigns
                .get(sidecar)
                .and_then(|c| c.resumed.as_ref());
            (known != Some(resumed)).then(|| {
                let said = Said::Resumed {
                    revision: campaign.revision.clone(),
                    by: resumed.by.clone(),
                    at: resumed.at.clone(),
                };
                Line::about(sidecar, said)
            })
        })
        .collect()
}
