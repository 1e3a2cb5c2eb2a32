//! The sentences a person reads about what the core decided (a notice to `--notify-url`, ...),
//! with the flags and commands that act on it: written once here, for the command line and
//! for `serve` alike. The core answers with data; it spells no flag.

mod drift_notes;
mod held;
mod hints;
mod notice;

pub(crate) use drift_notes::{ends, sidecar_note};
pub(crate) use held::new_pods;
pub(crate) use hints::*;
pub(crate) use notice::NoticePayload;
