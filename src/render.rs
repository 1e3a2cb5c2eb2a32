//! The sentences a person reads about what the core decided, with the flags and commands that
//! act on it, written once here for the command line and for `serve` alike: drift's notes,
//! the webhook's warnings on held sidecars, notices to `--notify-url`, what ends a wait. The
//! core answers with data. (It still words the reasons it stores in the campaign book with
//! `HINTS`, and the webhook's and explain's with `SPELLING`.)

mod drift_notes;
mod held;
mod hints;
mod notice;

pub(crate) use drift_notes::{ends, sidecar_note};
pub(crate) use held::new_pods;
pub(crate) use hints::*;
pub(crate) use notice::NoticePayload;
