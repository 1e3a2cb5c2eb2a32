//! The rollout planner: from the drift report, the workloads in the index, the revisions in
//! force, the campaign book persisted in the cluster, the settings and `now`, it computes which
//! workloads to restart now, which are rolling, which wait and why, and which failed. No I/O:
//! the executor ([`crate::engine`]) does what the plan says. Level-triggered: the plan is a
//! function of what is observed, so recomputing it after a crash or a leader change repeats
//! nothing and loses nothing.

mod book;
pub mod change;
pub mod content;
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
mod plan;
mod planner;
pub mod publication;
pub mod selection;
pub mod targets;

pub use book::{
    BOOK_BUDGET_BYTES, BookOverflow, Campaign, CampaignBook, CampaignCounts, CampaignState,
    Failure, Hold, MaintenanceStatus, Pin, Resumed, Resumption, Reversion,
};
pub use change::{SidecarChange, describe_changes, rollout_reason};
pub use gates::after;
pub use health::{container_problems, container_problems_since, rolled_out};
pub use instant::{from_now, to_the_second};
pub use plan::{
    Bake, EvictionRestart, FailedEarlier, OnCampaignFailure, PlanInput, Restart, Rolling,
    RolloutPlan, RolloutSettings, SidecarTarget, WaitReason, Waiting,
};
pub use planner::{plan, target_stamp};

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
