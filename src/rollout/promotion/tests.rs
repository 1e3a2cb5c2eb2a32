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
    let mut campaign = crate::test_fixtures::campaign(revision, state, Time(at(0)));
    edit(&mut campaign);
    let mut book = CampaignBook::default();
    book.campaigns.insert(LOGGER.into(), campaign);
    book
}

#[test]
fn a_gated_campaign_keeps_its_hold_and_learns_its_upstream() {
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
    let gate = PromotionGate {
        gated: true,
        upstream: vec!["staging".into()],
    };
    let mut book = book_with(REV, CampaignState::Gated, |_| {});
    gate_campaigns(&mut book, &gate, &history, at(20));
    let held = book.campaigns[LOGGER].held.clone().unwrap();
    assert_eq!(
        (held.revision.as_str(), held.since.clone()),
        ("bbbbbbbbbbbb", Time(at(20)))
    );
    // Later plans keep the hold as it was.
    gate_campaigns(&mut book, &gate, &history, at(30));
    assert_eq!(book.campaigns[LOGGER].held.as_ref(), Some(&held));
    assert_eq!(
        book.campaigns[LOGGER].gate.as_ref().unwrap().upstream,
        ["staging"]
    );
    // Its upstream state is kept until the upstream list changes.
    book.campaigns
        .get_mut(LOGGER)
        .unwrap()
        .gate
        .as_mut()
        .unwrap()
        .upstream_state = Some("staging: running".into());
    gate_campaigns(&mut book, &gate, &history, at(40));
    assert!(
        book.campaigns[LOGGER]
            .gate
            .as_ref()
            .unwrap()
            .upstream_state
            .is_some()
    );
    let other = PromotionGate {
        gated: true,
        upstream: vec!["prod-eu".into()],
    };
    gate_campaigns(&mut book, &other, &history, at(50));
    let status = book.campaigns[LOGGER].gate.clone().unwrap();
    assert_eq!(
        (status.upstream, status.upstream_state),
        (vec!["prod-eu".to_owned()], None)
    );
}
