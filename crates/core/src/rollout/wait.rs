//! Why a workload waits, as data, and the sentences that say it: the reason, and the
//! campaign book nearly full. What ends each wait is said by the shell (`render::wait`).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::instant::{from_now, to_the_second};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum WaitReason {
    Settling {
        until: Time,
    },
    Canary {
        sidecar: String,
    },
    MaxParallel {
        limit: usize,
    },
    /// `--max-parallel-per-namespace` workloads of its namespace are rolling.
    MaxParallelInNamespace {
        namespace: String,
        limit: usize,
    },
    RateLimit {
        per_minute: usize,
    },
    Cooldown {
        until: Time,
    },
    CampaignPaused {
        sidecar: String,
    },
    /// `serve --promotion=gated`: the revision is not promoted yet.
    AwaitingPromotion {
        sidecar: String,
    },
    Manual {
        sidecar: String,
    },
    DeploymentPaused,
    Partition {
        partition: i32,
    },
    NotKnownYet,
    /// Restarting it would take its service down; waits until accepted.
    Downtime {
        why: crate::drift::Downtime,
    },
    /// Its last restart is still rolling out, for at most --rollout-timeout.
    RollingOut {
        until: Time,
    },
    /// No maintenance window of the workload is open; `opens` is `None` when none opens
    /// within a week (a window inside a skipped DST hour).
    OutsideMaintenanceWindow {
        windows: String,
        opens: Option<Time>,
    },
    /// Not rolled out or not all available before any restart of ours: restarted once it is.
    Unhealthy {
        progress: String,
    },
    /// Its `NS/maintenance-window` does not parse: it waits rather than guess.
    MaintenanceWindowInvalid {
        #[serde(serialize_with = "serialize_display")]
        error: crate::maintenance::WindowError,
    },
    /// The campaign book nearly fills the status ConfigMap: nothing starts that it could not
    /// record.
    BookFull(BookOverflow),
    /// The webhook would refuse the pods a restart creates (the template's pod-level
    /// resources do not fit a sidecar whose config refuses such pods): restarting it would
    /// leave it without new pods.
    PodsWouldBeRefused {
        denial: String,
    },
}

impl WaitReason {
    /// A wait the run itself ends (a slot frees, the canary finishes, the minute passes, the
    /// index catches up), as opposed to one only time or a person ends (cooldown, pause,
    /// manual policy, a paused Deployment, a partition).
    pub fn clears_by_itself(&self) -> bool {
        matches!(
            self,
            WaitReason::MaxParallel { .. }
                | WaitReason::MaxParallelInNamespace { .. }
                | WaitReason::RateLimit { .. }
                | WaitReason::Canary { .. }
                | WaitReason::Settling { .. }
                | WaitReason::NotKnownYet
                | WaitReason::RollingOut { .. }
        )
    }
}

impl WaitReason {
    /// What a person reads: times as "in 8m" (and the instant, to the second).
    pub fn describe(&self, now: Timestamp) -> String {
        match self {
            WaitReason::Settling { until } => format!(
                "settling: the revision is too new ({})",
                from_now(until.0, now)
            ),
            WaitReason::Cooldown { until } => format!(
                "restarted recently; cooldown ends {} ({})",
                from_now(until.0, now),
                to_the_second(until.0)
            ),
            WaitReason::CampaignPaused { sidecar } => format!(
                "the campaign of {sidecar} is paused: fix or revert the config, or resume it"
            ),
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
            other => other.to_string(),
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Settling { until } => write!(
                f,
                "settling: the revision is too new (until {})",
                to_the_second(until.0)
            ),
            WaitReason::Canary { sidecar } => {
                write!(f, "waiting for the canary of {sidecar} to become healthy")
            }
            WaitReason::MaxParallel { limit } => {
                write!(f, "{limit} workloads already rolling")
            }
            WaitReason::MaxParallelInNamespace { namespace, limit } => write!(
                f,
                "{limit} workloads of namespace {namespace} already rolling"
            ),
            WaitReason::RateLimit { per_minute } => {
                write!(f, "{per_minute} restarts in the last minute")
            }
            WaitReason::Cooldown { until } => write!(
                f,
                "restarted recently; cooldown until {}",
                to_the_second(until.0)
            ),
            WaitReason::CampaignPaused { sidecar } => {
                write!(f, "the campaign of {sidecar} is paused")
            }
            WaitReason::AwaitingPromotion { sidecar } => {
                write!(f, "the revision of {sidecar} waits for promotion")
            }
            WaitReason::Manual { sidecar } => write!(f, "{sidecar} has rollout policy manual"),
            WaitReason::DeploymentPaused => write!(f, "the Deployment is paused"),
            WaitReason::Partition { partition } => {
                write!(f, "partition {partition} holds pods back; not overridden")
            }
            WaitReason::NotKnownYet => write!(f, "the workload is not in the index yet"),
            WaitReason::Downtime { why } => write!(
                f,
                "a restart would take it down: {}",
                match why {
                    crate::drift::Downtime::Recreate =>
                        "strategy Recreate stops every pod before starting new ones",
                    crate::drift::Downtime::SingleReplicaMaxUnavailable =>
                        "one replica, and maxUnavailable lets it go before its replacement is ready",
                }
            ),
            WaitReason::RollingOut { until } => write!(
                f,
                "its last restart is still rolling out (until {} at most)",
                to_the_second(until.0)
            ),
            WaitReason::OutsideMaintenanceWindow { windows, opens } => match opens {
                Some(opens) => write!(
                    f,
                    "outside maintenance window (opens at {}; {windows})",
                    to_the_second(opens.0)
                ),
                None => write!(
                    f,
                    "outside maintenance window, and none opens within a week ({windows})"
                ),
            },
            WaitReason::Unhealthy { progress } => write!(
                f,
                "not healthy before its restart ({progress}); restarted once it is, and not counted as a failure"
            ),
            WaitReason::MaintenanceWindowInvalid { error } => write!(
                f,
                "its NS/maintenance-window annotation is invalid, so it waits: {error}"
            ),
            WaitReason::BookFull(overflow) => write!(f, "{overflow}"),
            WaitReason::PodsWouldBeRefused { denial } => write!(
                f,
                "not restarted: the webhook would refuse its new pods ({denial})"
            ),
        }
    }
}

/// A book over [`BOOK_BUDGET_BYTES`]: past 1 MiB no status write succeeds, so a pause, a hold
/// or a failure could no longer be recorded for the next leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BookOverflow {
    pub bytes: usize,
    pub budget: usize,
    /// The sidecar whose campaign takes the most of it, with that campaign's failed
    /// workloads and the bytes of the config it holds new pods at and of its pin.
    pub sidecar: String,
    pub failed_workloads: usize,
    pub held_and_pinned_bytes: usize,
}

impl std::fmt::Display for BookOverflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sidecar = &self.sidecar;
        write!(
            f,
            "the status ConfigMap is nearly full: the campaign book takes {} bytes, over its budget of {}, most of it for {sidecar} (",
            self.bytes, self.budget
        )?;
        if self.held_and_pinned_bytes == 0 || self.failed_workloads > 0 {
            write!(f, "{} failed workloads", self.failed_workloads)?;
        }
        if self.held_and_pinned_bytes > 0 {
            if self.failed_workloads > 0 {
                f.write_str(", ")?;
            }
            write!(
                f,
                "{} bytes of held and pinned configs",
                self.held_and_pinned_bytes
            )?;
        }
        write!(
            f,
            "); no restart starts until it shrinks, as it does when {sidecar} gets a new revision (fix or revert its config)"
        )
    }
}

/// A field a person reads, in JSON as its text.
pub(super) fn serialize_display<S: serde::Serializer>(
    value: &impl fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}
