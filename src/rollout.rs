//! The rollout planner: from the drift report, the workloads in the index, the revisions in
//! force, the campaign book persisted in the cluster, the settings and `now`, it computes which
//! workloads to restart now, which are rolling, which wait and why, and which failed. No I/O:
//! the executor ([`crate::engine`]) does what the plan says. Level-triggered: the plan is a
//! function of what is observed, so recomputing it after a crash or a leader change repeats
//! nothing and loses nothing.

mod book;
pub(crate) mod change;
pub(crate) mod content;
pub(crate) mod eviction;
mod gates;
mod health;
pub(crate) mod history;
pub(crate) mod in_place;
mod instant;
pub(crate) mod journal;
pub(crate) mod machine;
pub(crate) mod notice;
pub(crate) mod outcome;
mod plan;
mod planner;
pub(crate) mod promotion;
pub(crate) mod publication;
pub(crate) mod selection;
pub(crate) mod targets;
pub(crate) mod waves;

pub(crate) use book::{
    BOOK_BUDGET_BYTES, BookOverflow, Campaign, CampaignBook, CampaignState, Failure, Pin, Resumed,
    Reversion, UpstreamWait,
};
#[cfg(test)]
pub(crate) use book::{Hold, MaintenanceStatus, Promotion, Resumption};
#[cfg(test)]
pub(crate) use change::{SidecarChange, describe_changes, rollout_reason};
pub(crate) use gates::after;
pub(crate) use health::container_problems_since;
pub use health::rolled_out;
pub(crate) use instant::to_the_second;
#[cfg(test)]
pub(crate) use plan::{Bake, EvictionRestart, PlanInput, Rolling};
pub(crate) use plan::{
    FailedEarlier, Hints, OnCampaignFailure, Restart, RolloutPlan, RolloutSettings, Served,
    SidecarTarget, WaitReason, Waiting,
};
#[cfg(test)]
pub(crate) use planner::plan;

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
