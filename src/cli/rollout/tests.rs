use super::*;
use crate::workload::WorkloadRef;

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
