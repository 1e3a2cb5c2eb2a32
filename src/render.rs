//! The sentences a person reads about what the core decided, with the flags and commands that
//! act on it, written once here for the command line and for `serve` alike: drift's notes,
//! the webhook's warnings on held sidecars, why a campaign paused, notices to `--notify-url`,
//! what ends a wait, `status`'s table, the webhook's warnings and refusals, `explain`'s answer.
//! The core answers with data.

mod admission;
mod checks;
mod drift;
mod drift_notes;
mod explain;
mod failure;
mod fleet;
mod foreign;
mod held;
mod hints;
mod injection_check;
mod journal;
mod notice;
mod pause;
mod plan;
mod publication;
mod restart;
mod status;
mod wait;
mod waves;

pub(crate) use admission::admission_message;
pub(crate) use checks::{campaign_checks, check_failure, check_reading, checks_standing};
pub(crate) use drift::{fleet_document, word_drift, write_drift_table};
pub(crate) use drift_notes::{ends, sidecar_note};
pub(crate) use explain::{
    Document as ExplanationDocument, Page as ExplanationPage, controller, skip_reason,
};
pub(crate) use failure::{failure_reason, word_book, word_failure};
pub(crate) use fleet::{ClusterRead, ClusterState, InCluster, cluster_width};
pub(crate) use foreign::foreign_changes;
pub(crate) use held::new_pods;
pub(crate) use hints::*;
pub(crate) use injection_check::check_lines;
pub(crate) use journal::journal_line;
pub(crate) use notice::NoticePayload;
pub(crate) use pause::{keep_pause_words, pause_reason};
pub(crate) use plan::write_plan_table;
pub(crate) use publication::{configs_why, neither_why, preview_warning, published_why};
pub(crate) use restart::{restart_reason, word_restart};
pub(crate) use status::{
    FleetCluster, FleetStatus, StatusView, status_view, write_fleet_table, write_status_table,
};
pub(crate) use wait::{book_full, wait_message, wait_reason};
pub(crate) use waves::{
    fleet_stopped, promoted_by, standing, upstream_verdict, upstream_waiting, wave_heading,
    wave_timed_out,
};

/// The plan's sentences, as everything that shows a plan reads them: what ends each wait, how
/// a workload an earlier failure left stale is rolled back, why a campaign paused.
pub(crate) fn word_plan(plan: &mut crate::rollout::RolloutPlan, now: k8s_openapi::jiff::Timestamp) {
    for waiting in &mut plan.waiting {
        waiting.message = wait_message(&waiting.reason, now);
    }
    plan.restarts.iter_mut().for_each(word_restart);
    failure::word_failures(plan);
    hint_plan(plan);
    pause::word_pauses(plan);
}
