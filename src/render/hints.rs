//! The flags and commands that change what the core reports, spelled as the command line
//! spells them. The core names a wait, a pause or an exclusion; only here is it said which
//! flag or command a person uses about it.

use crate::drift::Exclusion;
use crate::rollout::WaitReason;
use crate::rollout::selection::NotSelected;

/// Resumes the paused campaigns.
pub(crate) const RESUME: &str = "`sidecar-injector rollout --resume`";

/// Rolls a sidecar back to its previous revision.
pub(crate) fn roll_back(sidecar: &str) -> String {
    format!("`sidecar-injector rollout --to {sidecar}=previous`")
}

/// Ends the hold of a sidecar's paused campaign.
pub(crate) fn release_hold(sidecar: &str) -> String {
    format!("`sidecar-injector rollout --release-hold {sidecar}`")
}

/// Promotes a sidecar's gated revision.
pub(crate) fn promote(sidecar: &str) -> String {
    format!("`sidecar-injector rollout --promote {sidecar}`")
}

/// Ends the pin of a sidecar.
pub(crate) fn unpin(sidecar: &str) -> String {
    format!("`sidecar-injector rollout --unpin {sidecar}`")
}

/// Makes the restarts a manual rollout policy leaves to a person.
pub(crate) const RUN_ROLLOUT: &str = "`sidecar-injector rollout`";

/// The plan's messages with the flags and commands that act on them: what ends each wait,
/// and how a workload an earlier failure left stale is rolled back. What the plan printed,
/// logged and explained says.
pub(crate) fn hint_plan(plan: &mut crate::rollout::RolloutPlan) {
    for waiting in &mut plan.waiting {
        if let Some(hint) = wait(&waiting.reason) {
            waiting.message = format!("{} ({hint})", waiting.message);
        }
    }
    for earlier in &mut plan.failed_earlier {
        earlier.message = format!(
            "{}, or roll back with {}",
            earlier.message,
            roll_back(&earlier.sidecar)
        );
    }
}

/// What ends `reason`, when a flag or a command of ours does.
pub(crate) fn wait(reason: &WaitReason) -> Option<String> {
    Some(match reason {
        WaitReason::Settling { .. } => "--settle to change".to_owned(),
        WaitReason::Cooldown { .. } => "--cooldown to change".to_owned(),
        WaitReason::CampaignPaused { .. } => RESUME.to_owned(),
        WaitReason::AwaitingPromotion { sidecar } => promote(sidecar),
        WaitReason::RollingOut { .. } => "--rollout-timeout to change".to_owned(),
        WaitReason::MaxParallel { .. } => "--max-parallel".to_owned(),
        WaitReason::MaxParallelInNamespace { .. } => "--max-parallel-per-namespace".to_owned(),
        WaitReason::RateLimit { .. } => "--max-restarts-per-minute".to_owned(),
        WaitReason::Manual { .. } => format!("run {}", RUN_ROLLOUT),
        WaitReason::Downtime { .. } => {
            "--allow-downtime, or NS/allow-downtime: \"true\" on the workload, to accept".to_owned()
        }
        WaitReason::BookFull(overflow) => return release(overflow),
        WaitReason::Canary { .. }
        | WaitReason::DeploymentPaused
        | WaitReason::Partition { .. }
        | WaitReason::NotKnownYet
        | WaitReason::OutsideMaintenanceWindow { .. }
        | WaitReason::Unhealthy { .. }
        | WaitReason::MaintenanceWindowInvalid { .. }
        | WaitReason::PodsWouldBeRefused { .. } => return None,
    })
}

/// The commands that shrink a full book besides a new revision: releasing the hold and the pin
/// of its largest sidecar, when they take room.
pub(crate) fn release(overflow: &crate::rollout::wait::BookOverflow) -> Option<String> {
    (overflow.held_and_pinned_bytes > 0).then(|| {
        format!(
            "or with {} and {}",
            release_hold(&overflow.sidecar),
            unpin(&overflow.sidecar)
        )
    })
}

/// Why the engine leaves a workload's pods out, with the flag that would take them in.
pub(crate) fn exclusion(why: &Exclusion) -> String {
    match why {
        Exclusion::Namespace(words) => words.clone(),
        Exclusion::ReplicaSetWithoutDeployment => {
            "owned by a ReplicaSet without a Deployment".to_owned()
        }
        Exclusion::ReplicaSetNotKnown => "its ReplicaSet is not known yet".to_owned(),
        Exclusion::JobPod => "a Job's pod (runs to completion)".to_owned(),
        Exclusion::BarePod => {
            "a bare pod (no controller; --evict-bare-pods to restart it)".to_owned()
        }
        Exclusion::OwnedBy(kind) => format!("owned by a {kind}"),
        Exclusion::RolloutDisabled => "rollout disabled by annotation".to_owned(),
    }
}

/// Why `rollout --sidecar-container-name` leaves a pod alone, with the flag that would not.
pub(crate) fn skipped(why: &NotSelected) -> String {
    match why {
        NotSelected::BarePod => format!("{why} (pass --evict-bare-pods to evict it)"),
        _ => why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{RolloutPlan, Waiting};
    use crate::workload::{WorkloadKind, WorkloadRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn waiting(reason: WaitReason) -> Waiting {
        Waiting {
            workload: WorkloadRef::new(WorkloadKind::Deployment, "team", "web"),
            sidecars: vec!["logger:v1".into()],
            message: crate::render::wait_reason(&reason),
            reason,
        }
    }

    #[test]
    fn a_wait_says_the_flag_or_command_that_ends_it_and_nothing_when_none_does() {
        let mut plan = RolloutPlan {
            waiting: vec![
                waiting(WaitReason::Cooldown {
                    until: Time(Timestamp::UNIX_EPOCH),
                }),
                waiting(WaitReason::CampaignPaused {
                    sidecar: "logger:v1".into(),
                }),
                waiting(WaitReason::Downtime {
                    why: crate::drift::Downtime::Recreate,
                }),
                waiting(WaitReason::AwaitingPromotion {
                    sidecar: "logger:v1".into(),
                }),
                waiting(WaitReason::DeploymentPaused),
            ],
            ..RolloutPlan::default()
        };
        let before: Vec<String> = plan.waiting.iter().map(|w| w.message.clone()).collect();
        hint_plan(&mut plan);
        let hints: Vec<&str> = plan
            .waiting
            .iter()
            .zip(&before)
            .map(|(w, before)| w.message.strip_prefix(before.as_str()).unwrap())
            .collect();
        assert_eq!(
            hints,
            [
                " (--cooldown to change)",
                " (`sidecar-injector rollout --resume`)",
                " (--allow-downtime, or NS/allow-downtime: \"true\" on the workload, to accept)",
                " (`sidecar-injector rollout --promote logger:v1`)",
                "",
            ]
        );
    }

    #[test]
    fn a_workload_an_earlier_failure_left_stale_says_how_to_roll_back() {
        let mut plan = RolloutPlan {
            failed_earlier: vec![crate::rollout::FailedEarlier::new(
                WorkloadRef::new(WorkloadKind::Deployment, "team", "canary"),
                "logger:v1",
                "bbbbbbbbbbbb",
                Some(&"not rolled out within 5m".into()),
            )],
            ..RolloutPlan::default()
        };
        super::super::failure::word_failures(&mut plan);
        hint_plan(&mut plan);
        assert_eq!(
            plan.failed_earlier[0].message,
            "its restart to logger:v1 bbbbbbbbbbbb failed (not rolled out within 5m); it is not \
             restarted again under this revision: fix or revert the config, or roll back with \
             `sidecar-injector rollout --to logger:v1=previous`"
        );
    }

    #[test]
    fn a_pod_left_out_for_want_of_a_flag_says_the_flag() {
        assert_eq!(
            exclusion(&Exclusion::BarePod),
            "a bare pod (no controller; --evict-bare-pods to restart it)"
        );
        assert_eq!(
            exclusion(&Exclusion::JobPod),
            "a Job's pod (runs to completion)"
        );
        assert_eq!(
            skipped(&NotSelected::BarePod),
            "a bare pod (pass --evict-bare-pods to evict it)"
        );
        assert_eq!(
            skipped(&NotSelected::Job("job".into())),
            "owned by Job job, which is not restarted"
        );
    }
}
