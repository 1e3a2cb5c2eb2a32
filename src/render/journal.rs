//! The engine's log lines about its campaigns (`rollout::journal`), in words.

use crate::rollout::journal::{Line, Said};
use crate::rollout::to_the_second;

use super::wait_reason;

/// How many workloads a line names before it says "+N more".
const NAMED: usize = 3;

/// The line as the log says it.
pub(crate) fn journal_line(line: &Line) -> String {
    let sidecar = line.sidecar.as_deref().unwrap_or_default();
    let workload = line
        .workload
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    match &line.said {
        Said::DryRunChanged {
            restarts,
            waiting,
            rolling,
        } => format!(
            "dry run: the plan changed: {restarts} restart(s) now, {waiting} waiting, {rolling} rolling; nothing is restarted in dry-run mode"
        ),
        Said::WouldRestart(restart) => format!(
            "dry run: would {} {workload}: {}",
            restart.action(),
            super::restart_reason(restart)
        ),
        Said::WouldWait(reason) => {
            format!("dry run: would wait {workload}: {}", wait_reason(reason))
        }
        Said::Waits { revision, waits } if waits.is_empty() => {
            format!("campaign of {sidecar} (revision {revision}): nothing waits any more")
        }
        Said::Waits { revision, waits } => {
            let parts: Vec<String> = waits
                .iter()
                .map(|(reason, workloads)| {
                    let mut named: Vec<String> = workloads
                        .iter()
                        .take(NAMED)
                        .map(ToString::to_string)
                        .collect();
                    if workloads.len() > NAMED {
                        named.push(format!("+{} more", workloads.len() - NAMED));
                    }
                    format!(
                        "{} workload(s) wait: {} ({})",
                        workloads.len(),
                        wait_reason(reason),
                        named.join(", ")
                    )
                })
                .collect();
            format!(
                "campaign of {sidecar} (revision {revision}): {}",
                parts.join("; ")
            )
        }
        Said::Complete {
            revision,
            succeeded,
            failed,
        } => format!(
            "campaign of {sidecar} (revision {revision}) complete: {succeeded} workload(s) restarted, {failed} failed"
        ),
        Said::Resumed { revision, by, at } => format!(
            "campaign of {sidecar} (revision {revision}) resumed by {by} at {}; its earlier failures no longer count",
            to_the_second(at.0)
        ),
    }
}

#[cfg(test)]
mod tests;
