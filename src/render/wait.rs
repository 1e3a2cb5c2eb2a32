//! Why a workload waits, in words: the reason as a log line and `drift` say it, and as the
//! plan says it, with times from now.

use k8s_openapi::jiff::Timestamp;

use crate::rollout::WaitReason;
use crate::rollout::wait::BookOverflow;
use crate::rollout::{from_now, to_the_second};

/// What a person reads in the plan: times as "in 8m" (and the instant, to the second).
pub(crate) fn wait_message(reason: &WaitReason, now: Timestamp) -> String {
    match reason {
        WaitReason::Settling { until } => format!(
            "settling: the revision is too new ({})",
            from_now(until.0, now)
        ),
        WaitReason::Cooldown { until } => format!(
            "restarted recently; cooldown ends {} ({})",
            from_now(until.0, now),
            to_the_second(until.0)
        ),
        WaitReason::CampaignPaused { sidecar } => {
            format!("the campaign of {sidecar} is paused: fix or revert the config, or resume it")
        }
        WaitReason::DeploymentPaused => {
            "the Deployment is paused (`kubectl rollout resume` to let it roll)".to_owned()
        }
        WaitReason::Partition { partition } => format!(
            "partition {partition} holds pods back; not overridden (lower the partition to roll them)"
        ),
        WaitReason::RollingOut { until } => format!(
            "its last restart is still rolling out; restarted again once that is done, or {} if it is stuck",
            from_now(until.0, now)
        ),
        WaitReason::OutsideMaintenanceWindow {
            windows,
            opens: Some(opens),
        } => format!(
            "outside maintenance window (opens {}, at {}; {windows})",
            from_now(opens.0, now),
            to_the_second(opens.0)
        ),
        other => wait_reason(other),
    }
}

/// The reason with its instants, as a log line says it once.
pub(crate) fn wait_reason(reason: &WaitReason) -> String {
    match reason {
        WaitReason::Settling { until } => format!(
            "settling: the revision is too new (until {})",
            to_the_second(until.0)
        ),
        WaitReason::Canary { sidecar } => {
            format!("waiting for the canary of {sidecar} to become healthy")
        }
        WaitReason::MaxParallel { limit } => format!("{limit} workloads already rolling"),
        WaitReason::MaxParallelInNamespace { namespace, limit } => {
            format!("{limit} workloads of namespace {namespace} already rolling")
        }
        WaitReason::RateLimit { per_minute } => {
            format!("{per_minute} restarts in the last minute")
        }
        WaitReason::Cooldown { until } => format!(
            "restarted recently; cooldown until {}",
            to_the_second(until.0)
        ),
        WaitReason::CampaignPaused { sidecar } => format!("the campaign of {sidecar} is paused"),
        WaitReason::AwaitingPromotion { sidecar } => {
            format!("the revision of {sidecar} waits for promotion")
        }
        WaitReason::Manual { sidecar } => format!("{sidecar} has rollout policy manual"),
        WaitReason::DeploymentPaused => "the Deployment is paused".to_owned(),
        WaitReason::Partition { partition } => {
            format!("partition {partition} holds pods back; not overridden")
        }
        WaitReason::NotKnownYet => "the workload is not in the index yet".to_owned(),
        WaitReason::Downtime { why } => format!(
            "a restart would take it down: {}",
            match why {
                crate::drift::Downtime::Recreate =>
                    "strategy Recreate stops every pod before starting new ones",
                crate::drift::Downtime::SingleReplicaMaxUnavailable =>
                    "one replica, and maxUnavailable lets it go before its replacement is ready",
            }
        ),
        WaitReason::RollingOut { until } => format!(
            "its last restart is still rolling out (until {} at most)",
            to_the_second(until.0)
        ),
        WaitReason::OutsideMaintenanceWindow {
            windows,
            opens: Some(opens),
        } => format!(
            "outside maintenance window (opens at {}; {windows})",
            to_the_second(opens.0)
        ),
        WaitReason::OutsideMaintenanceWindow {
            windows,
            opens: None,
        } => format!("outside maintenance window, and none opens within a week ({windows})"),
        WaitReason::Unhealthy { progress } => format!(
            "not healthy before its restart ({progress}); restarted once it is, and not counted as a failure"
        ),
        WaitReason::MaintenanceWindowInvalid { error } => {
            format!("its NS/maintenance-window annotation is invalid, so it waits: {error}")
        }
        WaitReason::BookFull(overflow) => book_full(overflow),
        WaitReason::PodsWouldBeRefused { denial } => {
            format!("not restarted: the webhook would refuse its new pods ({denial})")
        }
    }
}

/// The campaign book over its budget: by how much, for which sidecar, and what shrinks it.
pub(crate) fn book_full(overflow: &BookOverflow) -> String {
    let sidecar = &overflow.sidecar;
    let mut parts = Vec::new();
    if overflow.held_and_pinned_bytes == 0 || overflow.failed_workloads > 0 {
        parts.push(format!("{} failed workloads", overflow.failed_workloads));
    }
    if overflow.held_and_pinned_bytes > 0 {
        parts.push(format!(
            "{} bytes of held and pinned configs",
            overflow.held_and_pinned_bytes
        ));
    }
    format!(
        "the status ConfigMap is nearly full: the campaign book takes {} bytes, over its budget of {}, most of it for {sidecar} ({}); no restart starts until it shrinks, as it does when {sidecar} gets a new revision (fix or revert its config)",
        overflow.bytes,
        overflow.budget,
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::drift::Downtime;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn each_wait_is_said_with_its_values_and_times_from_now() {
        let now = at(0);
        let said = |reason: WaitReason| (wait_message(&reason, now), wait_reason(&reason));
        assert_eq!(
            said(WaitReason::Cooldown {
                until: Time(at(8 * 60 - 5))
            }),
            (
                "restarted recently; cooldown ends in 8m (2027-01-15T08:07:55Z)".to_owned(),
                "restarted recently; cooldown until 2027-01-15T08:07:55Z".to_owned()
            )
        );
        assert_eq!(
            said(WaitReason::OutsideMaintenanceWindow {
                windows: "Sat 00:00-04:00".into(),
                opens: Some(Time(at(14 * 3600))),
            })
            .0,
            "outside maintenance window (opens in 14h, at 2027-01-15T22:00:00Z; Sat 00:00-04:00)"
        );
        assert!(
            said(WaitReason::CampaignPaused {
                sidecar: "logger:v1".into()
            })
            .0
            .ends_with("fix or revert the config, or resume it")
        );
        let same_in_both = [
            (
                WaitReason::Partition { partition: 2 },
                "partition 2 holds pods back; not overridden",
            ),
            (
                WaitReason::MaxParallelInNamespace {
                    namespace: "prod".into(),
                    limit: 1,
                },
                "1 workloads of namespace prod already rolling",
            ),
            (
                WaitReason::Downtime {
                    why: Downtime::Recreate,
                },
                "a restart would take it down: strategy Recreate stops every pod before starting new ones",
            ),
            (
                WaitReason::Unhealthy {
                    progress: "1 of 1 updated, 0 available".into(),
                },
                "not healthy before its restart (1 of 1 updated, 0 available); restarted once it is, and not counted as a failure",
            ),
            (
                WaitReason::PodsWouldBeRefused {
                    denial: "sidecar \"logger:v1\" does not fit the pod's resources".into(),
                },
                "not restarted: the webhook would refuse its new pods (sidecar \"logger:v1\" does not fit the pod's resources)",
            ),
        ];
        for (reason, words) in same_in_both {
            assert_eq!(wait_reason(&reason), words);
        }
        let invalid = crate::maintenance::MaintenanceWindows::parse_list("Fri 12:00").unwrap_err();
        assert_eq!(
            wait_reason(&WaitReason::MaintenanceWindowInvalid { error: invalid }),
            "its NS/maintenance-window annotation is invalid, so it waits: `12:00` is not a span of wall-clock times (HH:MM-HH:MM, e.g. 22:00-06:00)"
        );
    }

    #[test]
    fn a_full_book_says_what_takes_its_room() {
        let mut overflow = BookOverflow {
            bytes: 950_000,
            budget: 900_000,
            sidecar: "logger:v1".into(),
            failed_workloads: 0,
            held_and_pinned_bytes: 260_000,
        };
        assert!(
            book_full(&overflow)
                .contains("most of it for logger:v1 (260000 bytes of held and pinned configs)"),
            "{overflow:?}"
        );
        overflow.failed_workloads = 20_000;
        let words = book_full(&overflow);
        assert!(
            words.starts_with("the status ConfigMap is nearly full")
                && words
                    .contains("(20000 failed workloads, 260000 bytes of held and pinned configs)")
                && words.contains("no restart starts until it shrinks"),
            "{words}"
        );
    }
}
