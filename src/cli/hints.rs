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
