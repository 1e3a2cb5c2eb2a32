//! The flag or command that changes what the core reports, spelled as the command line
//! spells it. The core names a wait; only here is it said which flag ends it.

use crate::rollout::WaitReason;

/// What ends `reason`, when a flag or a command of ours does.
pub(crate) fn wait(reason: &WaitReason) -> Option<&'static str> {
    Some(match reason {
        WaitReason::Settling { .. } => "--settle to change",
        WaitReason::Cooldown { .. } => "--cooldown to change",
        WaitReason::CampaignPaused { .. } => "`sidecar-injector rollout --resume`",
        WaitReason::RollingOut { .. } => "--rollout-timeout to change",
        WaitReason::MaxParallel { .. } => "--max-parallel",
        WaitReason::MaxParallelInNamespace { .. } => "--max-parallel-per-namespace",
        WaitReason::RateLimit { .. } => "--max-restarts-per-minute",
        WaitReason::Manual { .. } => "run `sidecar-injector rollout`",
        WaitReason::Downtime { .. } => {
            "--allow-downtime, or NS/allow-downtime: \"true\" on the workload, to accept"
        }
        WaitReason::Canary { .. }
        | WaitReason::DeploymentPaused
        | WaitReason::Partition { .. }
        | WaitReason::NotKnownYet
        | WaitReason::OutsideMaintenanceWindow { .. }
        | WaitReason::Unhealthy { .. }
        | WaitReason::MaintenanceWindowInvalid { .. }
        | WaitReason::BookFull(_) => return None,
    })
}

/// Why the engine leaves a workload's pods out, with the flag that would take them in.
pub(crate) fn excluded(why: &str) -> String {
    if why == crate::drift::BARE_POD {
        "a bare pod (no controller; --evict-bare-pods to restart it)".to_owned()
    } else {
        why.to_owned()
    }
}

/// Why `rollout --sidecar-container-name` leaves a pod alone, with the flag that would not.
pub(crate) fn skipped(why: &crate::rollout::selection::NotSelected) -> String {
    match why {
        crate::rollout::selection::NotSelected::BarePod => {
            format!("{why} (pass --evict-bare-pods to evict it)")
        }
        _ => why.to_string(),
    }
}
