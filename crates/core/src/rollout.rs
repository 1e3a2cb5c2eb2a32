//! The rollout planner: from the drift report, the workloads in the index, the revisions in
//! force, the campaign book persisted in the cluster, the settings and `now`, it computes which
//! workloads to restart now, which are rolling, which wait and why, and which failed. No I/O:
//! the executor ([`crate::engine`]) does what the plan says. Level-triggered: the plan is a
//! function of what is observed, so recomputing it after a crash or a leader change repeats
//! nothing and loses nothing.

pub mod analysis;
mod book;
pub mod book_commands;
pub mod change;
pub mod content;
pub mod drift_notes;
pub mod eviction;
mod gates;
mod health;
pub mod history;
pub mod in_place;
mod instant;
pub mod journal;
pub mod machine;
pub mod notice;
pub mod outcome;
pub mod pause;
mod plan;
mod planner;
pub mod promotion;
pub mod publication;
pub mod selection;
pub mod targets;
pub mod wait;
pub mod waves;

pub use book::{
    BOOK_BUDGET_BYTES, BakeChecks, BookOverflow, Campaign, CampaignBook, CampaignCounts,
    CampaignState, FAILURE_DETAILS, Failure, FailureCause, FailureReason, HeldWarning, NewPods,
    Pin, Resumed, Reversion, UpstreamWait,
};
#[cfg(any(test, feature = "test-fixtures"))]
pub use book::{Hold, MaintenanceStatus, Promotion, Resumption};
pub use change::SidecarChange;
#[cfg(any(test, feature = "test-fixtures"))]
pub use change::describe_changes;
pub use gates::after;
pub use health::container_problems_since;
pub use health::rolled_out;
pub use instant::{from_now, to_the_second};
#[cfg(any(test, feature = "test-fixtures"))]
pub use plan::{Bake, EvictionRestart, PlanInput, Rolling};
pub use plan::{
    FailedEarlier, OnCampaignFailure, Restart, RolloutPlan, RolloutSettings, Served, SidecarTarget,
    WaitReason, Waiting,
};
#[cfg(any(test, feature = "test-fixtures"))]
pub use planner::plan;

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
