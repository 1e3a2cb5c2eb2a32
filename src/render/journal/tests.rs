use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::rollout::journal::{Journal, resumptions};
use crate::rollout::{CampaignBook, CampaignState, Resumption, RolloutPlan, WaitReason, Waiting};
use crate::workload::{WorkloadKind, WorkloadRef};

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
        journal_line(&lines[0]),
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
        journal_line(&lines[0]).contains(
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
        .iter()
        .map(journal_line)
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
        journal_line(&lines[0]).ends_with(
            "5 workload(s) wait: the Deployment is paused (Deployment/team/w0, Deployment/team/w1, Deployment/team/w2, +2 more)"
        ),
        "{lines:?}"
    );
}

#[test]
fn the_dry_run_plan_is_said_whole_and_once_per_change() {
    let mut journal = Journal::default();
    let restart = crate::rollout::Restart {
        canary: true,
        ..crate::test_fixtures::restart(
            deployment("canary"),
            vec![crate::test_fixtures::stale_change(
                "tracer:v1",
                "aaaaaaaaaaaa",
                "bbbbbbbbbbbb",
            )],
        )
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
    let lines: Vec<String> = journal.dry_run(&plan).iter().map(journal_line).collect();
    assert_eq!(
        lines,
        [
            "dry run: the plan changed: 1 restart(s) now, 2 waiting, 0 rolling; nothing is restarted in dry-run mode",
            "dry run: would restart (canary) Deployment/team/canary: sidecar tracer:v1 aaaaaaaaaaaa -> bbbbbbbbbbbb",
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
        journal_line(&lines[0]),
        "campaign of tracer:v1 (revision aaaaaaaaaaaa) resumed by rollout-cli/laptop-42 at 2027-01-15T08:01:00Z; its earlier failures no longer count"
    );
    assert!(resumptions(&resumed, &resumed).is_empty());
}
