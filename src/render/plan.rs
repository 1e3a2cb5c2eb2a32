//! The rollout plan as a table: each workload, what is done to it and why, and what a run
//! that restarts nothing says.

use std::io::Write;

use crate::rollout::RolloutPlan;
use crate::workload::WorkloadRef;

/// `plan` as `rollout` prints it without `-o`; `nothing`: what it says when nothing is
/// planned.
pub(crate) fn write_plan_table(
    out: &mut impl Write,
    plan: &RolloutPlan,
    nothing: &str,
) -> std::io::Result<()> {
    writeln!(out, "{:<56} {:<8} REASON", "WORKLOAD", "ACTION")?;
    for restart in &plan.restarts {
        plan_row(out, &restart.workload, restart.action(), &restart.reason)?;
    }
    for rolling in &plan.rolling {
        if rolling.checks.is_empty() {
            writeln!(out, "{:<56} {:<8}", rolling.workload.to_string(), "rolling")?;
        } else {
            let checks = super::checks_standing(&rolling.checks);
            plan_row(out, &rolling.workload, "rolling", &checks)?;
        }
    }
    for waiting in &plan.waiting {
        plan_row(out, &waiting.workload, "wait", &waiting.message)?;
    }
    for earlier in &plan.failed_earlier {
        plan_row(out, &earlier.workload, "failed", &earlier.message)?;
    }
    if plan.restarts.is_empty() && plan.rolling.is_empty() && plan.waiting.is_empty() {
        if plan.failed_earlier.is_empty() {
            writeln!(out, "{nothing}")?;
        } else {
            writeln!(
                out,
                "nothing to restart: the workloads above failed under the revision in force"
            )?;
        }
    } else {
        writeln!(out, "dry run: nothing restarted; pass --confirm to restart")?;
    }
    Ok(())
}

/// A row of the plan's table: the workload, what is done to it, and why.
fn plan_row(
    out: &mut impl Write,
    workload: &WorkloadRef,
    action: &str,
    reason: &str,
) -> std::io::Result<()> {
    writeln!(out, "{:<56} {action:<8} {reason}", workload.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WorkloadKind;

    fn table(plan: &RolloutPlan) -> String {
        let mut out = Vec::new();
        write_plan_table(
            &mut out,
            plan,
            "nothing to restart: no workload runs a stale sidecar",
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_plan_says_what_it_would_do_and_what_it_says_when_nothing() {
        assert_eq!(
            table(&RolloutPlan::default()),
            "WORKLOAD                                                 ACTION   REASON\n\
             nothing to restart: no workload runs a stale sidecar\n"
        );
        let canary = WorkloadRef::new(WorkloadKind::Deployment, "team", "canary");
        let mut plan = RolloutPlan {
            failed_earlier: vec![crate::rollout::FailedEarlier::new(
                canary,
                "logger:v1",
                "bbbbbbbbbbbb",
                Some(&"not rolled out within 5m".into()),
            )],
            ..RolloutPlan::default()
        };
        super::super::failure::word_failures(&mut plan);
        let failed = table(&plan);
        assert!(
            failed.contains("Deployment/team/canary")
                && failed.contains(" failed   its restart to logger:v1 bbbbbbbbbbbb failed")
                && failed.ends_with(
                    "nothing to restart: the workloads above failed under the revision in force\n"
                ),
            "{failed}"
        );
    }
}
