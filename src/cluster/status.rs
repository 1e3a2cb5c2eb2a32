//! The status ConfigMap (`sidecar-injector-status` in the injector's namespace): the revisions
//! in force and the campaign book, which outlive any one process.
//!
//! Split by concern: [`codec`] (its items), [`publisher`] (each replica's publication, the
//! watch, the book applied to the configs served), [`history`] (the revision history
//! ConfigMap), [`book_edits`] (the CLI's edits) and [`snapshot`] (the three objects read
//! once, the status ConfigMap watched); the pure rules of choosing revisions from
//! publications are [`crate::rollout::publication`].

mod book_edits;
mod book_writer;
mod codec;
mod history;
mod publisher;
mod snapshot;

pub(crate) use crate::rollout::publication::*;
pub(crate) use book_edits::{ResumeError, edit_book, read_book, resume_paused};
pub(crate) use book_writer::{BookWrite, BookWriter};
pub(crate) use codec::*;
pub(crate) use history::{
    HISTORY_CONFIGMAP, HISTORY_KEY, decode_history, history_object, read_history,
};
pub(crate) use publisher::{BookSignals, apply_book, run_publisher};
pub(crate) use snapshot::{InjectorState, StateError, watch_status};

#[cfg(test)]
mod tests;
