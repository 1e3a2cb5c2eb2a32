//! Promotion gates: under `serve --promotion=gated` a new revision of a sidecar waits, its
//! new pods kept at the last good revision as during a hold, until it is promoted
//! (`rollout --promote`). No I/O, no clock: the time comes in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::book::{Campaign, CampaignBook, CampaignState, Hold};
use super::history::RevisionHistory;

/// `serve --promotion`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PromotionMode {
    /// A new revision's campaign starts once it settled.
    #[default]
    Auto,
    /// A new revision waits to be promoted.
    Gated,
}

/// A new campaign to `revision`, from `previous` (the campaign it replaces): gated when the
/// gate is on and it moves pods from a revision rolled out before. A sidecar new to the
/// cluster has nothing to keep its pods at, and a config put back to the revision rolled out
/// before needs no promotion.
pub(super) fn gated_from_start(
    mode: PromotionMode,
    previous: Option<&Campaign>,
    revision: &str,
) -> bool {
    mode == PromotionMode::Gated
        && previous
            .and_then(rolled_out_before)
            .is_some_and(|before| before != revision)
}

/// The revision a campaign replacing `previous` moves pods from: a revision that waited for
/// promotion and was never promoted moved nothing, so the one before it is still what runs.
pub(super) fn rolled_out_before(previous: &Campaign) -> Option<String> {
    if previous.state == CampaignState::Gated {
        previous.previous.clone()
    } else {
        Some(previous.revision.clone())
    }
}

/// Each gated campaign of `book`: promoted (an approval of its revision is in the book, or the
/// gate was turned off) it settles and runs as any new campaign; else its new pods are held at
/// the sidecar's last good revision in `history`.
pub(super) fn gate_campaigns(
    book: &mut CampaignBook,
    mode: PromotionMode,
    history: &RevisionHistory,
    now: Timestamp,
) {
    for (sidecar, campaign) in &mut book.campaigns {
        if campaign.state != CampaignState::Gated {
            continue;
        }
        let promoted = book
            .promotions
            .get(sidecar)
            .is_some_and(|p| p.revision == campaign.revision);
        if promoted || mode != PromotionMode::Gated {
            campaign.state = CampaignState::Settling;
            // New pods got the held revision until now: this one comes into force here, and
            // settles before any restart, so that every replica serves it by then (a restart
            // in the same pass would get the held one from a replica yet to read the book).
            if campaign.held.take().is_some() {
                campaign.since = Time(now);
            }
            continue;
        }
        let good = history.last_good(sidecar, &campaign.revision);
        let kept = campaign
            .held
            .as_ref()
            .is_some_and(|h| good.is_some_and(|g| g.revision == h.revision));
        if !kept {
            campaign.held = good.map(|good| Hold {
                revision: good.revision.clone(),
                content: good.content.clone(),
                since: Time(now),
            });
        }
    }
}

#[cfg(test)]
mod tests;
