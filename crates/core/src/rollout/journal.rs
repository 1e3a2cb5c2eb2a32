//! What the engine says about its campaigns, once per change: the whole dry-run plan, why a
//! campaign waits (cooldown, paused, manual policy...), that a campaign was resumed, and one line
//! when a campaign completes. Pure: it remembers what it said and returns the lines to say for
//! a new plan; the executor logs them.

use std::collections::BTreeMap;

use super::book::{CampaignBook, CampaignState};
use super::plan::RolloutPlan;
use crate::workload::WorkloadRef;

/// How many workloads a line names before it says "+N more".
const NAMED: usize = 3;

/// One line to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub sidecar: Option<String>,
    pub workload: Option<WorkloadRef>,
    pub message: String,
}

impl Line {
    fn about(sidecar: &str, message: String) -> Self {
        Self {
            sidecar: Some(sidecar.to_owned()),
            workload: None,
            message,
        }
    }
}

/// What was said last, so that nothing is said twice.
#[derive(Debug, Default)]
pub struct Journal {
    dry_run: Vec<String>,
    /// Per sidecar: the revision and the waits (reason -> workloads) last said.
    waits: BTreeMap<String, (String, BTreeMap<String, Vec<WorkloadRef>>)>,
    /// Per sidecar: the revision and state last seen; a completion is said on the change
    /// to complete, not for a campaign that was complete when this process started.
    states: BTreeMap<String, (String, CampaignState)>,
}

impl Journal {
    /// `--rollout=dry-run`: the whole plan (what would restart now, what would wait and why),
    /// when it differs from the plan said last.
    pub fn dry_run(&mut self, plan: &RolloutPlan) -> Vec<Line> {
        let mut lines: Vec<Line> = plan
            .restarts
            .iter()
            .map(|r| Line {
                sidecar: None,
                workload: Some(r.workload.clone()),
                message: format!("dry run: would {} {}: {}", r.action(), r.workload, r.reason),
            })
            .chain(plan.waiting.iter().map(|w| Line {
                sidecar: None,
                workload: Some(w.workload.clone()),
                message: format!("dry run: would wait {}: {}", w.workload, w.reason),
            }))
            .collect();
        let key: Vec<String> = lines.iter().map(|l| l.message.clone()).collect();
        if key == self.dry_run {
            return Vec::new();
        }
        self.dry_run = key;
        let summary = format!(
            "dry run: the plan changed: {} restart(s) now, {} waiting, {} rolling; nothing is restarted in dry-run mode",
            plan.restarts.len(),
            plan.waiting.len(),
            plan.rolling.len()
        );
        lines.insert(
            0,
            Line {
                sidecar: None,
                workload: None,
                message: summary,
            },
        );
        lines
    }

    /// Why each campaign waits, when that changes (only waits that a person or the clock ends:
    /// cooldown, a pause, a manual policy, a paused Deployment, a partition), and one line when
    /// a campaign completes.
    pub fn campaigns(&mut self, plan: &RolloutPlan, book: &CampaignBook) -> Vec<Line> {
        let mut lines = Vec::new();
        for (sidecar, campaign) in &book.campaigns {
            let mut waits: BTreeMap<String, Vec<WorkloadRef>> = BTreeMap::new();
            for waiting in &plan.waiting {
                if waiting.sidecars.contains(sidecar) && !waiting.reason.clears_by_itself() {
                    waits
                        .entry(waiting.reason.to_string())
                        .or_default()
                        .push(waiting.workload.clone());
                }
            }
            let said = self.waits.get(sidecar);
            let unchanged =
                said.is_some_and(|(revision, w)| revision == &campaign.revision && w == &waits);
            // Nothing waiting, and nothing said to be waiting: no news.
            let quiet = waits.is_empty() && said.is_none_or(|(_, w)| w.is_empty());
            if !(unchanged || quiet) {
                lines.push(Line::about(
                    sidecar,
                    describe_waits(sidecar, &campaign.revision, &waits),
                ));
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
                lines.push(Line::about(
                    sidecar,
                    format!(
                        "campaign of {sidecar} (revision {}) complete: {} workload(s) restarted, {} failed",
                        campaign.revision, campaign.counts.succeeded, campaign.counts.failed
                    ),
                ));
            }
        }
        self.waits.retain(|s, _| book.campaigns.contains_key(s));
        self.states.retain(|s, _| book.campaigns.contains_key(s));
        lines
    }
}

fn describe_waits(
    sidecar: &str,
    revision: &str,
    waits: &BTreeMap<String, Vec<WorkloadRef>>,
) -> String {
    if waits.is_empty() {
        return format!("campaign of {sidecar} (revision {revision}): nothing waits any more");
    }
    let parts: Vec<String> = waits
        .iter()
        .map(|(reason, workloads)| {
            let mut named: Vec<String> = workloads
                .iter()
                .take(NAMED)
                .map(|w| w.to_string())
                .collect();
            if workloads.len() > NAMED {
                named.push(format!("+{} more", workloads.len() - NAMED));
            }
            format!(
                "{} workload(s) wait: {reason} ({})",
                workloads.len(),
                named.join(", ")
            )
        })
        .collect();
    format!(
        "campaign of {sidecar} (revision {revision}): {}",
        parts.join("; ")
    )
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
                Line::about(
                    sidecar,
                    format!(
                        "campaign of {sidecar} (revision {}) resumed by {} at {}; its earlier failures no longer count",
                        campaign.revision,
                        resumed.by,
                        super::instant::to_the_second(resumed.at.0)
                    ),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::rollout::{Resumption, WaitReason, Waiting};
    use crate::workload::WorkloadKind;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + second).unwrap())
    }

    fn deployment(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::Deployment, "team", name)
    }

    fn book(state: CampaignState) -> CampaignBook {
        let campaign = crate::test_fixtures::campaign("aaaaaaaaaaaa", state, at(0));
        CampaignBook {
            campaigns: [("tracer:v1".to_owned(), campaign)].into(),
            maintenance: None,
            ..Default::default()
        }
    }

    fn waiting(name: &str, reason: WaitReason) -> Waiting {
        Waiting {
            workload: deployment(name),
            sidecars: vec!["tracer:v1".into()],
            message: String::new(),
            reason,
        }
    }

    #[test]
    fn a_campaign_wait_is_said_when_it_changes_and_a_completion_once() {
        let mut journal = Journal::default();
        let running = book(CampaignState::Running);
        let cooldown = WaitReason::Cooldown { until: at(600) };
        let mut plan = RolloutPlan {
            waiting: vec![
                waiting("web", cooldown.clone()),
                waiting("api", cooldown.clone()),
                // Waits the run ends by itself are progress, not news.
                waiting("db", WaitReason::MaxParallel { limit: 5 }),
            ],
            ..Default::default()
        };
        let lines = journal.campaigns(&plan, &running);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            lines[0].message,
            "campaign of tracer:v1 (revision aaaaaaaaaaaa): 2 workload(s) wait: restarted recently; \
             cooldown until 2027-01-15T08:10:00Z (Deployment/team/web, Deployment/team/api)"
        );
        assert!(journal.campaigns(&plan, &running).is_empty(), "said once");

        plan.waiting.push(waiting(
            "batch",
            WaitReason::CampaignPaused {
                sidecar: "tracer:v1".into(),
            },
        ));
        let lines = journal.campaigns(&plan, &running);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].message.contains(
                "1 workload(s) wait: the campaign of tracer:v1 is paused (Deployment/team/batch)"
            ),
            "{lines:?}"
        );

        plan.waiting.clear();
        let mut complete = book(CampaignState::Complete);
        complete
            .campaigns
            .get_mut("tracer:v1")
            .unwrap()
            .counts
            .succeeded = 4;
        let lines: Vec<String> = journal
            .campaigns(&plan, &complete)
            .into_iter()
            .map(|l| l.message)
            .collect();
        assert_eq!(
            lines,
            [
                "campaign of tracer:v1 (revision aaaaaaaaaaaa): nothing waits any more",
                "campaign of tracer:v1 (revision aaaaaaaaaaaa) complete: 4 workload(s) restarted, 0 failed"
            ]
        );
        assert!(
            journal.campaigns(&plan, &complete).is_empty(),
            "completion said once"
        );
    }

    #[test]
    fn many_waiting_workloads_are_named_up_to_three() {
        let mut journal = Journal::default();
        let plan = RolloutPlan {
            waiting: (0..5)
                .map(|i| waiting(&format!("w{i}"), WaitReason::DeploymentPaused))
                .collect(),
            ..Default::default()
        };
        let lines = journal.campaigns(&plan, &book(CampaignState::Running));
        assert!(
            lines[0].message.ends_with(
                "5 workload(s) wait: the Deployment is paused (Deployment/team/w0, Deployment/team/w1, Deployment/team/w2, +2 more)"
            ),
            "{lines:?}"
        );
    }

    #[test]
    fn the_dry_run_plan_is_said_whole_and_once_per_change() {
        let mut journal = Journal::default();
        let restart = crate::rollout::Restart {
            workload: deployment("canary"),
            target: None,
            reason: "sidecar tracer:v1 changed".into(),
            changes: Vec::new(),
            canary: true,
            on_delete: false,
            heal: false,
            method: crate::workload::RestartMethod::Template,
            reverted: false,
            pods: 1,
        };
        let plan = RolloutPlan {
            restarts: vec![restart],
            waiting: vec![
                waiting(
                    "web",
                    WaitReason::Canary {
                        sidecar: "tracer:v1".into(),
                    },
                ),
                waiting(
                    "api",
                    WaitReason::Canary {
                        sidecar: "tracer:v1".into(),
                    },
                ),
            ],
            ..Default::default()
        };
        let lines: Vec<String> = journal
            .dry_run(&plan)
            .into_iter()
            .map(|l| l.message)
            .collect();
        assert_eq!(
            lines,
            [
                "dry run: the plan changed: 1 restart(s) now, 2 waiting, 0 rolling; nothing is restarted in dry-run mode",
                "dry run: would restart (canary) Deployment/team/canary: sidecar tracer:v1 changed",
                "dry run: would wait Deployment/team/web: waiting for the canary of tracer:v1 to become healthy",
                "dry run: would wait Deployment/team/api: waiting for the canary of tracer:v1 to become healthy",
            ]
        );
        assert!(
            journal.dry_run(&plan).is_empty(),
            "the same plan is not said again"
        );
    }

    #[test]
    fn a_resumption_is_said_with_who_and_when() {
        let paused = book(CampaignState::Paused);
        let mut resumed = paused.clone();
        resumed.campaigns.get_mut("tracer:v1").unwrap().resumed = Some(Resumption {
            by: "rollout-cli/laptop-42".into(),
            at: at(60),
        });
        let lines = resumptions(&paused, &resumed);
        assert_eq!(
            lines[0].message,
            "campaign of tracer:v1 (revision aaaaaaaaaaaa) resumed by rollout-cli/laptop-42 at 2027-01-15T08:01:00Z; its earlier failures no longer count"
        );
        assert!(resumptions(&resumed, &resumed).is_empty());
    }
}
