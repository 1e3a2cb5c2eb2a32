//! Why a workload waits, as data: the reason, and the campaign book nearly full. The shell
//! says them (`render::wait_message`), with what ends each wait.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

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

/// A field a person reads, in JSON as its text.
pub(super) fn serialize_display<S: serde::Serializer>(
    value: &impl fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}
