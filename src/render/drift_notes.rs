//! What `drift` and `status` say of a sidecar beside its counts, from the core's notes.

use crate::rollout::drift_notes::SidecarNote;
use crate::rollout::{from_now, to_the_second};

use super::release;

/// The note on `sidecar`'s row.
pub(crate) fn sidecar_note(sidecar: &str, note: &SidecarNote) -> String {
    match note {
        SidecarNote::Gated {
            revision,
            held,
            upstream,
        } => {
            let new_pods = match held {
                Some(held) => format!("new pods keep {held} meanwhile"),
                None => "new pods get it already (no good revision is remembered to keep them at)"
                    .to_owned(),
            };
            let by = match upstream {
                Some(upstream) => format!(
                    "promoted once complete and baked in upstream {}, or by {}; now {}",
                    upstream.after.join(", "),
                    super::promote(sidecar),
                    upstream.waiting
                ),
                None => format!("promoted by {}", super::promote(sidecar)),
            };
            format!("waits for promotion: {revision} ({by}); {new_pods}")
        }
        SidecarNote::Held {
            held,
            revision,
            reason,
        } => format!(
            "held at {held} ({revision} failed: {})",
            reason.as_deref().unwrap_or("its campaign paused")
        ),
        SidecarNote::Paused { reason } => reason.clone(),
        SidecarNote::Reverted { from, reason } => {
            format!("reverted from {from} ({})", super::failure_reason(reason))
        }
        SidecarNote::Pinned { revision, by, over } => format!(
            "pinned at {revision} by {by} (the config says {over}): {} or a config change ends it",
            super::unpin(sidecar)
        ),
        SidecarNote::Manual => format!(
            "rollout policy manual: the engine leaves its restarts to {}",
            super::RUN_ROLLOUT
        ),
        SidecarNote::BookFull(overflow) => match release(overflow) {
            Some(release) => format!("{}, {release}", super::book_full(overflow)),
            None => super::book_full(overflow),
        },
        SidecarNote::OutsideWindow {
            windows,
            opens,
            now,
        } => {
            let opens = match opens {
                Some(at) => format!("opens {}, at {}", from_now(at.0, *now), to_the_second(at.0)),
                None => "none opens within a week".to_owned(),
            };
            format!("outside maintenance window ({opens}; {windows})")
        }
        SidecarNote::Ends { at, pending } => ends(at, *pending),
    }
}

/// "ends at the earliest 2026-12-02T14:05:00Z (3 to restart, by --max-restarts-per-minute)".
pub(crate) fn ends(
    at: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    pending: u32,
) -> String {
    format!(
        "ends at the earliest {} ({pending} to restart, by --max-restarts-per-minute)",
        to_the_second(at.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::UpstreamWait;
    use crate::rollout::wait::BookOverflow;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    const LOGGER: &str = "logger:v1";

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn each_note_says_what_waits_and_the_command_that_acts_on_it() {
        let note = |note: SidecarNote| sidecar_note(LOGGER, &note);
        assert_eq!(
            note(SidecarNote::Gated {
                revision: "bbbbbbbbbbbb".into(),
                held: Some("aaaaaaaaaaaa".into()),
                upstream: None,
            }),
            "waits for promotion: bbbbbbbbbbbb (promoted by `sidecar-injector rollout --promote \
             logger:v1`); new pods keep aaaaaaaaaaaa meanwhile"
        );
        assert_eq!(
            note(SidecarNote::Gated {
                revision: "bbbbbbbbbbbb".into(),
                held: None,
                upstream: Some(UpstreamWait {
                    revision: "bbbbbbbbbbbb".into(),
                    after: vec!["staging".into(), "qa".into()],
                    waiting: "staging: 3 to restart".into(),
                }),
            }),
            "waits for promotion: bbbbbbbbbbbb (promoted once complete and baked in upstream \
             staging, qa, or by `sidecar-injector rollout --promote logger:v1`; now staging: 3 \
             to restart); new pods get it already (no good revision is remembered to keep them at)"
        );
        assert_eq!(
            note(SidecarNote::Held {
                held: "aaaaaaaaaaaa".into(),
                revision: "bbbbbbbbbbbb".into(),
                reason: None,
            }),
            "held at aaaaaaaaaaaa (bbbbbbbbbbbb failed: its campaign paused)"
        );
        assert_eq!(
            note(SidecarNote::Reverted {
                from: "bbbbbbbbbbbb".into(),
                reason: "the config was put back".into(),
            }),
            "reverted from bbbbbbbbbbbb (the config was put back)"
        );
        assert_eq!(
            note(SidecarNote::Pinned {
                revision: "aaaaaaaaaaaa".into(),
                by: "ops".into(),
                over: "bbbbbbbbbbbb".into(),
            }),
            "pinned at aaaaaaaaaaaa by ops (the config says bbbbbbbbbbbb): `sidecar-injector \
             rollout --unpin logger:v1` or a config change ends it"
        );
        assert_eq!(
            note(SidecarNote::Manual),
            "rollout policy manual: the engine leaves its restarts to `sidecar-injector rollout`"
        );
        assert_eq!(
            note(SidecarNote::OutsideWindow {
                windows: "Sat-Sun 00:00-04:00".into(),
                opens: Some(at(3600 + 300)),
                now: at(0).0,
            }),
            "outside maintenance window (opens in 1h 5m, at 1970-01-01T01:05:00Z; Sat-Sun \
             00:00-04:00)"
        );
        assert_eq!(
            note(SidecarNote::Ends {
                at: at(600),
                pending: 42
            }),
            "ends at the earliest 1970-01-01T00:10:00Z (42 to restart, by \
             --max-restarts-per-minute)"
        );
    }

    #[test]
    fn a_full_book_names_the_commands_that_shrink_it_when_holds_or_pins_take_room() {
        let mut overflow = BookOverflow {
            bytes: 950_000,
            budget: 900_000,
            sidecar: LOGGER.into(),
            failed_workloads: 3,
            held_and_pinned_bytes: 0,
        };
        assert_eq!(
            sidecar_note(LOGGER, &SidecarNote::BookFull(overflow.clone())),
            "the status ConfigMap is nearly full: the campaign book takes 950000 bytes, over its budget of 900000, most of it for logger:v1 (3 failed workloads); no restart starts until it shrinks, as it does when logger:v1 gets a new revision (fix or revert its config)"
        );
        overflow.held_and_pinned_bytes = 250_000;
        assert_eq!(
            sidecar_note(LOGGER, &SidecarNote::BookFull(overflow.clone())),
            format!(
                "{}, or with `sidecar-injector rollout --release-hold logger:v1` and \
                 `sidecar-injector rollout --unpin logger:v1`",
                crate::render::book_full(&overflow)
            )
        );
    }
}
