use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;

const LOGGER: &str = "logger:v1";
const REV: &str = "aaaaaaaaaaaa";

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

fn book_with(
    revision: &str,
    state: CampaignState,
    edit: impl FnOnce(&mut Campaign),
) -> CampaignBook {
    crate::test_fixtures::book_of(LOGGER, revision, state, edit)
}

#[test]
fn a_gated_campaign_keeps_its_hold_and_ends_it_when_promoted() {
    use crate::rollout::history::{HistoryEntry, Outcome, RevisionHistory};
    let history = RevisionHistory {
        sidecars: [(
            LOGGER.to_owned(),
            vec![
                HistoryEntry {
                    revision: "bbbbbbbbbbbb".into(),
                    content: serde_json::json!({"containers": []}),
                    first_served: Time(at(0)),
                    outcome: Outcome::Good,
                    reason: None,
                },
                HistoryEntry {
                    revision: REV.into(),
                    content: serde_json::json!({"containers": []}),
                    first_served: Time(at(10)),
                    outcome: Outcome::Pending,
                    reason: None,
                },
            ],
        )]
        .into(),
    };
    let mut book = book_with(REV, CampaignState::Gated, |_| {});
    gate_campaigns(&mut book, PromotionMode::Gated, &history, at(20));
    let held = book.campaigns[LOGGER].held.clone().unwrap();
    assert_eq!(
        (held.revision.as_str(), held.since.clone()),
        ("bbbbbbbbbbbb", Time(at(20)))
    );
    // Later plans keep the hold as it was.
    gate_campaigns(&mut book, PromotionMode::Gated, &history, at(30));
    assert_eq!(book.campaigns[LOGGER].held.as_ref(), Some(&held));
    // An approval of its revision ends the gate and the hold.
    book.promotions.insert(
        LOGGER.into(),
        crate::rollout::Promotion {
            revision: REV.into(),
            by: "ops".into(),
            at: Time(at(40)),
        },
    );
    gate_campaigns(&mut book, PromotionMode::Gated, &history, at(45));
    let campaign = &book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Settling);
    assert!(campaign.held.is_none());
    // It comes into force for new pods now, and settles from here before any restart.
    assert_eq!(campaign.since, Time(at(45)));
}
