//! The status ConfigMap (`sidecar-injector-status` in the injector's namespace): the revisions
//! in force and the campaign book, which outlive any one process.
//!
//! Split by concern: [`codec`] (its items), [`publisher`] (each replica's publication, the
//! watch, the book applied to the configs served), [`history`] (the revision history
//! ConfigMap) and [`book_edits`] (the CLI's edits); the pure rules of choosing revisions from
//! publications are [`crate::rollout::publication`].

mod book_edits;
mod book_writer;
mod codec;
mod history;
mod publisher;

pub(crate) use crate::rollout::publication::*;
pub(crate) use book_edits::*;
pub(crate) use book_writer::*;
pub(crate) use codec::*;
pub(crate) use history::*;
pub(crate) use publisher::*;

#[cfg(test)]
mod tests;
