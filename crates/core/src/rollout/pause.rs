//! Why a campaign paused, as data. The shell words it (`render::pause_reason`, with the
//! commands that resume or roll back) and keeps those words in the book
//! ([`crate::rollout::Campaign::pause_reason`]), in Events, notices and the plan.

use crate::workload::WorkloadRef;

/// A campaign that paused in this pass: its failures reached `max_failures`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// The revision whose rollout paused.
    pub revision: String,
    /// Its failed workloads not yet acknowledged by a resume.
    pub failed: usize,
    /// The first of them, each with why it failed; empty when the book keeps none (written by
    /// hand, or by an earlier version).
    pub named: Vec<(WorkloadRef, super::book::FailureReason)>,
    /// What new pods get while it is paused.
    pub new_pods: WhilePaused,
}

/// What new pods get while a campaign is paused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhilePaused {
    /// The last good revision, held (`on_campaign_failure: hold`).
    HeldAt(String),
    /// The paused revision: a hold was asked for, but no good revision is remembered.
    NoGoodRevision,
    /// The paused revision (`on_campaign_failure: continue`).
    NotHeld,
}
