//! What a person asks of the campaign book (`rollout --promote`, `--unpin`, `--release-hold`,
//! `--to`), decided here: each command is an edit of the book, or a typed refusal. The shell
//! applies the edit to the status ConfigMap; the command line says what happened.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::book::{CampaignBook, CampaignState, Pin};
use super::content::{ContentError, sidecar_with_content};
use super::history::{HistoryEntry, HistoryError, RevisionHistory};
use crate::config::{RevisionsInForce, SidecarSet};

/// `--promote SIDECAR[=REVISION]` done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Promoted {
    /// Approved now.
    Now { revision: String },
    /// The revision was approved before; nothing changed.
    Already { revision: String },
}

/// Why `--promote SIDECAR` (naming no revision) approves nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PromoteRefusal {
    /// Its campaign does not wait for promotion.
    #[error("its campaign of {revision} is {}", state.as_str())]
    NotGated {
        revision: String,
        state: CampaignState,
    },
    /// The book keeps no campaign of it.
    #[error("it has no campaign")]
    NoCampaign,
}

/// Why `--to SIDECAR=REVISION` pins nothing.
#[derive(Debug, thiserror::Error)]
pub enum PinRefusal {
    #[error(transparent)]
    History(#[from] HistoryError),
    /// No config of that name is loaded, nor published.
    #[error("sidecar {sidecar} is not in force (no config of that name is loaded)")]
    NotInForce { sidecar: String },
    /// The remembered content no longer makes a sidecar under its revision.
    #[error(transparent)]
    Content(#[from] ContentError),
}

/// A pin `--to` asks for: the sidecar, the history entry it pins, and the pin.
#[derive(Clone, Debug)]
pub struct PinRequest<'h> {
    pub sidecar: String,
    pub entry: &'h HistoryEntry,
    pub pin: Pin,
}

impl CampaignBook {
    /// `--promote`: approves `wanted` (also a revision not arrived yet), or with none the
    /// revision the sidecar's campaign waits with.
    pub fn promote_command(
        &mut self,
        sidecar: &str,
        wanted: Option<&str>,
        by: &str,
        at: Time,
    ) -> Result<Promoted, PromoteRefusal> {
        let gated = self
            .campaigns
            .get(sidecar)
            .filter(|c| c.state == CampaignState::Gated)
            .map(|c| c.revision.clone());
        let Some(revision) = wanted.map(str::to_owned).or(gated) else {
            return Err(match self.campaigns.get(sidecar) {
                Some(c) => PromoteRefusal::NotGated {
                    revision: c.revision.clone(),
                    state: c.state,
                },
                None => PromoteRefusal::NoCampaign,
            });
        };
        Ok(if self.promote(sidecar, &revision, by, at) {
            Promoted::Now { revision }
        } else {
            Promoted::Already { revision }
        })
    }

    /// `--unpin`: the revision the pin of `sidecar` served, when it had one.
    pub fn unpin(&mut self, sidecar: &str) -> Option<String> {
        self.pins.remove(sidecar).map(|p| p.revision)
    }

    /// `--release-hold`: the revision the hold of `sidecar`'s campaign served, when it had one.
    pub fn release_hold(&mut self, sidecar: &str) -> Option<String> {
        self.campaigns
            .get_mut(sidecar)
            .and_then(|c| c.held.take())
            .map(|h| h.revision)
    }
}

/// `--to SIDECAR=REVISION` (or `=previous`): the pin of a remembered revision over the one in
/// force. The revision in force is the config's: a pin in force keeps the one it was pinned
/// over; otherwise what the injectors publish (`published`), or with no publication what the
/// configs read here (`configs`) say.
pub fn pin_request<'h>(
    history: &'h RevisionHistory,
    book: &CampaignBook,
    spec: &str,
    published: Option<&RevisionsInForce>,
    configs: &SidecarSet,
    by: &str,
    at: Time,
) -> Result<PinRequest<'h>, PinRefusal> {
    let configured = |sidecar: &str| -> Option<String> {
        if let Some(pin) = book.pins.get(sidecar) {
            return Some(pin.over.clone());
        }
        match published {
            Some(published) => published.get(sidecar).map(str::to_owned),
            None => configs.named(sidecar).map(|s| s.revision.to_string()),
        }
    };
    let (sidecar, entry) = history.resolve(spec, |sidecar| {
        book.pins
            .get(sidecar)
            .map(|p| p.revision.clone())
            .or_else(|| configured(sidecar))
    })?;
    let over = configured(&sidecar).ok_or_else(|| PinRefusal::NotInForce {
        sidecar: sidecar.clone(),
    })?;
    if let Some(own) = configs.named(&sidecar) {
        sidecar_with_content(own, &entry.revision, &entry.content)?;
    }
    let pin = Pin {
        revision: entry.revision.clone(),
        content: entry.content.clone(),
        over,
        by: by.to_owned(),
        at,
    };
    Ok(PinRequest {
        sidecar,
        entry,
        pin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::revision::injected_content;
    use crate::rollout::history::Outcome;
    use crate::test_fixtures::{campaign, loaded};
    use k8s_openapi::jiff::Timestamp;

    const LOGGER: &str = "logger:v1";

    fn at() -> Time {
        Time(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn promote_approves_the_gated_revision_once_and_refuses_a_campaign_not_waiting() {
        let mut book = CampaignBook::default();
        assert_eq!(
            book.promote_command(LOGGER, None, "ops", at()),
            Err(PromoteRefusal::NoCampaign)
        );
        book.campaigns.insert(
            LOGGER.into(),
            campaign("aaaaaaaaaaaa", CampaignState::Running, at()),
        );
        assert_eq!(
            book.promote_command(LOGGER, None, "ops", at()),
            Err(PromoteRefusal::NotGated {
                revision: "aaaaaaaaaaaa".into(),
                state: CampaignState::Running
            })
        );
        assert!(book.promotions.is_empty(), "a refusal edits nothing");
        book.campaigns.get_mut(LOGGER).unwrap().state = CampaignState::Gated;
        let approved = Promoted::Now {
            revision: "aaaaaaaaaaaa".into(),
        };
        assert_eq!(
            book.promote_command(LOGGER, None, "ops", at()),
            Ok(approved)
        );
        assert_eq!(book.promotions[LOGGER].by, "ops");
        assert_eq!(
            book.promote_command(LOGGER, Some("aaaaaaaaaaaa"), "ops", at()),
            Ok(Promoted::Already {
                revision: "aaaaaaaaaaaa".into()
            })
        );
        // A revision still to come is approved ahead, whatever the campaign's state.
        assert_eq!(
            book.promote_command("other:v1", Some("bbbbbbbbbbbb"), "ops", at()),
            Ok(Promoted::Now {
                revision: "bbbbbbbbbbbb".into()
            })
        );
    }

    #[test]
    fn unpin_and_release_hold_say_what_they_ended() {
        let mut book = CampaignBook::default();
        assert_eq!(book.unpin(LOGGER), None);
        assert_eq!(book.release_hold(LOGGER), None);
        book.pins.insert(
            LOGGER.into(),
            Pin {
                revision: "aaaaaaaaaaaa".into(),
                content: serde_json::json!({}),
                over: "bbbbbbbbbbbb".into(),
                by: "ops".into(),
                at: at(),
            },
        );
        let mut paused = campaign("bbbbbbbbbbbb", CampaignState::Paused, at());
        paused.held = Some(crate::rollout::Hold {
            revision: "aaaaaaaaaaaa".into(),
            content: serde_json::json!({}),
            since: at(),
        });
        book.campaigns.insert(LOGGER.into(), paused);
        assert_eq!(book.unpin(LOGGER).as_deref(), Some("aaaaaaaaaaaa"));
        assert!(book.pins.is_empty());
        assert_eq!(book.release_hold(LOGGER).as_deref(), Some("aaaaaaaaaaaa"));
        let campaign = &book.campaigns[LOGGER];
        assert_eq!(campaign.held, None);
        assert_eq!(campaign.state, CampaignState::Paused, "it stays paused");
    }

    #[test]
    fn to_pins_a_remembered_revision_over_the_one_in_force() {
        let sidecar = |image: &str| {
            loaded(&format!(
                "name: logger:v1\ncontainers: [{{name: log-shipper, image: '{image}'}}]\n"
            ))
        };
        let (good, broken) = (sidecar("shipper:1"), sidecar("shipper:2"));
        let entry = |s: &crate::config::LoadedSidecar, outcome| HistoryEntry {
            revision: s.revision.to_string(),
            content: injected_content(&s.config),
            first_served: at(),
            outcome,
            reason: None,
        };
        let history = RevisionHistory {
            sidecars: [(
                LOGGER.to_owned(),
                vec![entry(&good, Outcome::Good), entry(&broken, Outcome::Failed)],
            )]
            .into(),
        };
        let configs: SidecarSet = std::iter::once(broken.clone()).collect();
        let book = CampaignBook::default();
        let request = pin_request(
            &history,
            &book,
            "logger:v1=previous",
            None,
            &configs,
            "ops",
            at(),
        )
        .unwrap();
        assert_eq!(request.sidecar, LOGGER);
        assert_eq!(request.pin.revision, good.revision.to_string());
        assert_eq!(request.pin.over, broken.revision.to_string());
        assert_eq!(request.entry.outcome, Outcome::Good);
        // A sidecar no config names is not in force: nothing to pin over.
        let none = SidecarSet::default();
        let spec = format!("logger:v1={}", good.revision);
        assert!(matches!(
            pin_request(&history, &book, &spec, None, &none, "ops", at()),
            Err(PinRefusal::NotInForce { sidecar }) if sidecar == LOGGER
        ));
        // A revision the history does not keep is refused with the ones it does.
        let refusal = pin_request(
            &history,
            &book,
            "logger:v1=cccccccccccc",
            None,
            &configs,
            "ops",
            at(),
        )
        .unwrap_err();
        assert!(matches!(refusal, PinRefusal::History(_)), "{refusal}");
        assert!(
            refusal.to_string().contains(good.revision.as_str()),
            "{refusal}"
        );
    }
}
