use std::time::Instant;

use super::*;

#[test]
fn the_one_shot_loop_wakes_at_the_soonest_moment_due_and_polls_nothing() {
    let now = Instant::now();
    let at = |s: u64| now + Duration::from_secs(s);
    assert_eq!(
        LoopWake::default().next(now),
        now + LOOP_SAFETY_NET,
        "nothing due: only the safety net"
    );
    let wake = LoopWake {
        plan: Some(at(7)),
        grant_ends: Some(at(15)),
        lost_for_good: None,
        outcomes_given_up: Some(at(300)),
    };
    assert_eq!(wake.next(now), at(7), "the plan's own moment");
    let wake = LoopWake { plan: None, ..wake };
    assert_eq!(wake.next(now), at(15), "the grant's end");
    let lost = LoopWake {
        lost_for_good: Some(at(3)),
        ..LoopWake::default()
    };
    assert_eq!(lost.next(now), at(3));
    let due = LoopWake {
        plan: Some(now),
        ..LoopWake::default()
    };
    assert_eq!(due.next(now), now, "due now: at once");
}

#[test]
fn a_workload_left_stale_by_an_earlier_failure_fails_the_run() {
    let mut summary = RunSummary::default();
    assert_eq!(exit_code(&summary), ExitCode::SUCCESS);
    summary
        .failed_earlier
        .push(crate::rollout::FailedEarlier::new(
            WorkloadRef::new(crate::workload::WorkloadKind::Deployment, "team", "canary"),
            "logger:v1",
            "bbbbbbbbbbbb",
            None,
        ));
    assert_eq!(exit_code(&summary), ExitCode::FAILURE);
}
