use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::publisher::{after_failure, retry_delay};
use super::*;
use crate::rollout::CampaignBook;
use crate::test_fixtures::{publication, status_with_injectors};

#[test]
fn the_book_reads_back_what_is_encoded() {
    let mut book = CampaignBook::default();
    book.campaigns.insert(
        "logger:v1".into(),
        crate::rollout::Campaign {
            pause_reason: Some("broken".into()),
            ..crate::test_fixtures::campaign(
                "aaaaaaaaaaaa",
                crate::rollout::CampaignState::Paused,
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            )
        },
    );
    // The replicas' publications stay as they are; only the book is replaced.
    let published = publish(
        &BTreeMap::new(),
        "a",
        publication("aaaaaaaaaaaa", 0),
        std::time::Duration::from_secs(300),
    );
    let configmap = status_object("injector-system", None, encode(Some(&published), &book));
    let existing = configmap.data.clone().unwrap();
    assert_eq!(
        existing[STATUS_INJECTORS_KEY],
        published[STATUS_INJECTORS_KEY]
    );
    let kept = encode(Some(&existing), &CampaignBook::default());
    assert_eq!(kept[STATUS_INJECTORS_KEY], existing[STATUS_INJECTORS_KEY]);
    assert_ne!(kept[STATUS_CAMPAIGNS_KEY], existing[STATUS_CAMPAIGNS_KEY]);
    assert_eq!(configmap.metadata.name.as_deref(), Some(STATUS_CONFIGMAP));
    assert_eq!(decode_book(&configmap).unwrap(), Some(book));
    assert_eq!(decode_book(&status_with_injectors(None)).unwrap(), None);
}

#[test]
fn a_publication_replaces_its_own_entry_and_forgets_long_gone_replicas() {
    let data = publish(
        &BTreeMap::new(),
        "gone",
        publication("aaaaaaaaaaaa", 7200),
        std::time::Duration::from_secs(300),
    );
    let data = publish(
        &data,
        "a",
        publication("aaaaaaaaaaaa", 60),
        std::time::Duration::from_secs(300),
    );
    let data = publish(
        &data,
        "a",
        publication("bbbbbbbbbbbb", 0),
        std::time::Duration::from_secs(300),
    );
    let injectors = decode_injectors(&ConfigMap {
        data: Some(data),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(injectors.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(
        injectors["a"].revisions.get("logger:v1"),
        Some("bbbbbbbbbbbb")
    );
}

#[test]
fn a_publication_names_its_manual_rollouts_and_reads_one_that_names_none() {
    let mut manual = publication("aaaaaaaaaaaa", 0);
    manual.manual = ["logger:v1".to_owned()].into();
    let data = publish(
        &BTreeMap::new(),
        "a",
        manual.clone(),
        std::time::Duration::from_secs(300),
    );
    let configmap = |data| ConfigMap {
        data: Some(data),
        ..Default::default()
    };
    assert_eq!(decode_injectors(&configmap(data)).unwrap()["a"], manual);
    // As an earlier release publishes (no manual item), and as this one publishes none.
    let earlier = BTreeMap::from([(
        STATUS_INJECTORS_KEY.to_owned(),
        r#"{"a": {"revisions": {"logger:v1": "aaaaaaaaaaaa"}, "at": "2027-01-15T08:00:00Z"}}"#
            .to_owned(),
    )]);
    assert!(
        decode_injectors(&configmap(earlier)).unwrap()["a"]
            .manual
            .is_empty()
    );
    let none = publish(
        &BTreeMap::new(),
        "a",
        publication("aaaaaaaaaaaa", 0),
        std::time::Duration::from_secs(300),
    );
    assert!(!none[STATUS_INJECTORS_KEY].contains("manual"), "{none:?}");
}

#[test]
fn an_absent_item_is_none_and_a_malformed_one_an_error() {
    assert!(
        decode_injectors(&status_with_injectors(None))
            .unwrap()
            .is_empty()
    );
    assert!(decode_injectors(&status_with_injectors(Some("[1, 2]"))).is_err());
}

#[test]
fn a_failing_publication_is_retried_ever_less_often_up_to_the_heartbeat() {
    let every = std::time::Duration::from_secs(30);
    let delays: Vec<u64> = (1..=8)
        .map(|failures| retry_delay(failures, every).as_secs())
        .collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(retry_delay(u32::MAX, every).as_secs(), 30);
    // A conflict is retried within a second, however often it comes, and ends a run of
    // lasting failures (the write reached the API server).
    let mut failures = 0;
    let delays: Vec<u64> = [false, false, false, true, true, false]
        .into_iter()
        .map(|conflict| after_failure(&mut failures, conflict, every).as_secs())
        .collect();
    assert_eq!(delays, [1, 2, 4, 1, 1, 1]);
    // A heartbeat shorter than a second does not retry faster than once a second.
    assert_eq!(
        retry_delay(1, std::time::Duration::from_millis(100)).as_secs(),
        1
    );
}

#[test]
fn progress_and_the_end_it_forecasts_are_not_the_books_shape_but_a_state_change_is() {
    let since = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
    );
    let book = |state, restarted, end: i64| {
        let mut book = CampaignBook::default();
        let mut campaign = crate::test_fixtures::campaign("aaaaaaaaaaaa", state, since.clone());
        campaign.counts.succeeded = restarted;
        campaign.expected_end = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + end).unwrap(),
        ));
        book.campaigns.insert("logger:v1".into(), campaign);
        book
    };
    let running = crate::rollout::CampaignState::Running;
    assert_eq!(
        book_shape(&book(running, 3, 60)),
        book_shape(&book(running, 4, 58)),
        "a restart is written with the counts, every few seconds"
    );
    assert_ne!(
        book_shape(&book(running, 3, 60)),
        book_shape(&book(crate::rollout::CampaignState::Paused, 3, 60)),
        "a pause is written at once"
    );
}

/// A campaign's progress alone reaches the status ConfigMap at most every 15 s (each write is a
/// request a campaign pays by time); a change of its state is written at once.
#[tokio::test]
async fn progress_alone_is_written_at_most_every_15_s_and_a_pause_at_once() {
    let since = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
    );
    let book = |state, restarted| {
        let mut book = CampaignBook::default();
        let mut campaign = crate::test_fixtures::campaign("aaaaaaaaaaaa", state, since.clone());
        campaign.counts.succeeded = restarted;
        book.campaigns.insert("logger:v1".into(), campaign);
        book
    };
    let running = crate::rollout::CampaignState::Running;
    // Nothing listens there: a write that is sent fails, one that is not sent is `Later`.
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "injector");
    let written_at = k8s_openapi::jiff::Timestamp::from_second(1_800_000_100).unwrap();
    let later = |seconds| written_at + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
    let (_, status) = tokio::sync::watch::channel(None);
    let mut writer = BookWriter::new(status);
    writer.wrote(&book(running, 3), written_at);
    let timeout = std::time::Duration::from_secs(2);

    let write = writer
        .write(
            &api,
            "injector",
            &book(running, 4),
            false,
            later(14),
            timeout,
        )
        .await;
    assert!(
        matches!(write, BookWrite::Later(due) if due == later(15)),
        "a restart 14 s after the last write waits for the 15th second: {write:?}"
    );
    let write = writer
        .write(
            &api,
            "injector",
            &book(running, 5),
            false,
            later(15),
            timeout,
        )
        .await;
    assert!(
        matches!(write, BookWrite::Failed(_)),
        "progress is sent 15 s after the last write: {write:?}"
    );
    let paused = crate::rollout::CampaignState::Paused;
    let write = writer
        .write(&api, "injector", &book(paused, 3), false, later(1), timeout)
        .await;
    assert!(
        matches!(write, BookWrite::Failed(_)),
        "a pause is sent at once: {write:?}"
    );
}

/// A ConfigMap holding `items`.
fn configmap_of(items: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(
            items
                .iter()
                .map(|(key, text)| ((*key).to_owned(), (*text).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn an_injector_state_with_nothing_written_yet_is_empty_not_an_error() {
    let state = InjectorState::of("injector-system", Ok(None), Ok(None), Ok(None));
    assert!(state.status().unwrap().is_none());
    assert!(state.injectors().unwrap().is_empty());
    assert_eq!(state.book().unwrap(), &CampaignBook::default());
    assert!(state.history().unwrap().sidecars.is_empty());
    assert!(state.lease().unwrap().is_none());
}

#[test]
fn an_injector_state_names_the_malformed_item_and_keeps_the_others() {
    let publication =
        r#"{"a-1": {"revisions": {"logger:v1": "aaaaaaaaaaaa"}, "at": "2027-01-15T08:00:00Z"}}"#;
    let status = configmap_of(&[
        (STATUS_INJECTORS_KEY, publication),
        (STATUS_CAMPAIGNS_KEY, "{not json"),
    ]);
    let history = configmap_of(&[(HISTORY_KEY, "{not json")]);
    let state = InjectorState::of(
        "injector-system",
        Ok(Some(status)),
        Ok(Some(history)),
        Ok(None),
    );
    assert_eq!(
        state.injectors().unwrap().keys().collect::<Vec<_>>(),
        ["a-1"]
    );
    let book = state.book().unwrap_err().to_string();
    assert!(
        book.starts_with("injector-system/sidecar-injector-status item campaigns is malformed: "),
        "{book}"
    );
    let history = state.history().unwrap_err().to_string();
    assert!(
        history.starts_with("injector-system/sidecar-injector-history item history is malformed: "),
        "{history}"
    );
}

#[test]
fn a_refused_status_configmap_refuses_its_items_too() {
    let refused = StateError::Unread {
        namespace: "injector-system".into(),
        name: STATUS_CONFIGMAP,
        reason: "configmaps \"sidecar-injector-status\" is forbidden (Forbidden, 403)".into(),
        refused: true,
    };
    let state = InjectorState::of("injector-system", Err(refused), Ok(None), Ok(None));
    for err in [
        state.status().unwrap_err(),
        state.injectors().unwrap_err(),
        state.book().unwrap_err(),
    ] {
        assert!(err.refused(), "{err}");
        assert!(err.to_string().contains("(Forbidden, 403)"), "{err}");
    }
    // The history and the Lease are read on their own: the refusal is not theirs.
    assert!(state.history().is_ok() && state.lease().is_ok());
}
