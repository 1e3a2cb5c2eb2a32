use std::time::Instant;

use super::*;
use crate::workload::WorkloadRef;

#[test]
fn the_loop_wakes_at_the_soonest_moment_due_and_polls_nothing() {
    let now = Instant::now();
    let at = |s: u64| now + Duration::from_secs(s);
    let wake =
        |moments: [Option<Instant>; 3]| crate::engine::soonest_wake(now, LOOP_SAFETY_NET, moments);
    assert_eq!(
        wake([None, None, None]),
        now + LOOP_SAFETY_NET,
        "nothing due: only the safety net"
    );
    assert_eq!(
        wake([Some(at(15)), Some(at(7)), Some(at(300))]),
        at(7),
        "the soonest"
    );
    assert_eq!(wake([Some(at(15)), None, None]), at(15));
    assert_eq!(
        wake([Some(at(3_600)), None, None]),
        now + LOOP_SAFETY_NET,
        "never past the net"
    );
    assert_eq!(wake([None, Some(now), None]), now, "due now: at once");
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
