use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;

use super::publisher::{after_failure, retry_delay};
use super::*;
use crate::config::RevisionsInForce;
use crate::rollout::CampaignBook;

fn status(item: Option<&str>) -> ConfigMap {
    ConfigMap {
        data: item.map(|text| {
            [(STATUS_INJECTORS_KEY.to_owned(), text.to_owned())]
                .into_iter()
                .collect()
        }),
        ..Default::default()
    }
}

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
    assert_eq!(decode_book(&status(None)).unwrap(), None);
}

fn publication(revision: &str, seconds_ago: i64) -> Publication {
    Publication {
        revisions: [("logger:v1".to_owned(), revision.to_owned())]
            .into_iter()
            .collect(),
        manual: BTreeSet::new(),
        at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 - seconds_ago).unwrap(),
        ),
    }
}

fn choose(injectors: &[(&str, Publication)], source: RevisionsSource) -> RevisionsChoice {
    choose_with(injectors, source, ConfigsHere::Read)
}

fn choose_with(
    injectors: &[(&str, Publication)],
    source: RevisionsSource,
    configs: ConfigsHere,
) -> RevisionsChoice {
    let injectors: BTreeMap<String, Publication> = injectors
        .iter()
        .map(|(n, p)| ((*n).to_owned(), p.clone()))
        .collect();
    let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
    choose_revisions(
        &injectors,
        source,
        now,
        std::time::Duration::from_secs(90),
        configs,
    )
}

#[test]
fn configs_that_cannot_be_read_here_give_way_to_any_publication() {
    let unread = |injectors: &[(&str, Publication)], source| {
        choose_with(injectors, source, ConfigsHere::Unreadable)
    };
    let revisions = |choice: &RevisionsChoice| match choice {
        RevisionsChoice::Published { publication, .. } => {
            publication.revisions.get("logger:v1").map(str::to_owned)
        }
        _ => None,
    };
    let stale = unread(
        &[("gone", publication("aaaaaaaaaaaa", 3600))],
        RevisionsSource::Auto,
    );
    assert_eq!(
        stale,
        RevisionsChoice::Published {
            publication: publication("aaaaaaaaaaaa", 3600),
            why: "the sidecar configs cannot be read here: revisions as gone published them 1h ago, though stale (older than 1m 30s: is the injector running?)".into()
        }
    );
    let split = unread(
        &[
            ("a", publication("aaaaaaaaaaaa", 5)),
            ("b", publication("bbbbbbbbbbbb", 2)),
        ],
        RevisionsSource::Auto,
    );
    assert_eq!(revisions(&split).as_deref(), Some("bbbbbbbbbbbb"));
    let RevisionsChoice::Published { why, .. } = &split else {
        panic!("{split:?}")
    };
    assert_eq!(
        why,
        "the sidecar configs cannot be read here: revisions as b published them 2s ago, the newest of injectors that disagree (a publishes logger:v1=aaaaaaaaaaaa, b publishes logger:v1=bbbbbbbbbbbb)"
    );
    // Fresh publications that agree: chosen as always.
    let agreeing = [
        ("a", publication("aaaaaaaaaaaa", 5)),
        ("old", publication("bbbbbbbbbbbb", 600)),
    ];
    let fresh = unread(&agreeing, RevisionsSource::Auto);
    assert_eq!(fresh, choose(&agreeing, RevisionsSource::Auto));
    assert_eq!(revisions(&fresh).as_deref(), Some("aaaaaaaaaaaa"));
    // Nothing published, or the configs asked for by name: nothing to judge by.
    assert_eq!(
        unread(&[], RevisionsSource::Auto),
        RevisionsChoice::Neither {
            why: "no running injector has published its revisions".into()
        }
    );
    assert!(matches!(
        unread(
            &[("a", publication("aaaaaaaaaaaa", 5))],
            RevisionsSource::Configs
        ),
        RevisionsChoice::Neither { .. }
    ));
    assert!(matches!(
        unread(&[], RevisionsSource::Published),
        RevisionsChoice::Neither { .. }
    ));
}

#[test]
fn fresh_publications_that_agree_are_the_revisions_in_force() {
    let choice = choose(
        &[
            ("a", publication("aaaaaaaaaaaa", 10)),
            ("b", publication("aaaaaaaaaaaa", 40)),
        ],
        RevisionsSource::Auto,
    );
    let RevisionsChoice::Published { publication, why } = choice else {
        panic!("{choice:?}")
    };
    assert_eq!(publication.revisions.get("logger:v1"), Some("aaaaaaaaaaaa"));
    assert_eq!(
        why,
        "revisions as the running injector(s) a, b published them (10s ago)"
    );
}

#[test]
fn a_preview_warns_where_its_configs_differ_from_what_the_running_injectors_inject() {
    let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
    let max_age = std::time::Duration::from_secs(90);
    let warnings = |here: &[(&str, &str)], injectors: &[(&str, Publication)]| {
        let here: RevisionsInForce = here
            .iter()
            .map(|(s, r)| ((*s).to_owned(), (*r).to_owned()))
            .collect();
        let injectors: BTreeMap<String, Publication> = injectors
            .iter()
            .map(|(n, p)| ((*n).to_owned(), p.clone()))
            .collect();
        preview_warnings(&here, &injectors, now, max_age)
    };
    let logger_a = [("logger:v1", "aaaaaaaaaaaa")];
    // The same revision as published, or nothing fresh to compare with: nothing to say.
    assert!(warnings(&logger_a, &[("r1", publication("aaaaaaaaaaaa", 5))]).is_empty());
    assert!(warnings(&logger_a, &[("gone", publication("bbbbbbbbbbbb", 3600))]).is_empty());
    assert!(warnings(&logger_a, &[]).is_empty());
    // An edit the webhook has not taken: both revisions, and who injects theirs.
    assert_eq!(
        warnings(
            &logger_a,
            &[
                ("r1", publication("bbbbbbbbbbbb", 5)),
                ("r2", publication("bbbbbbbbbbbb", 20)),
                ("gone", publication("cccccccccccc", 3600)),
            ]
        ),
        [
            "logger:v1: the config read here is revision aaaaaaaaaaaa, but the running injector(s) r1, r2 (published 5s ago) inject revision bbbbbbbbbbbb: the webhook has not loaded this config yet, or refused it and keeps its last good one (its log says why); shown with the config read here"
        ]
    );
    // A sidecar on one side only.
    let both = [("logger:v1", "aaaaaaaaaaaa"), ("tracer:v1", "dddddddddddd")];
    assert_eq!(
        warnings(&both, &[("r1", publication("aaaaaaaaaaaa", 5))]),
        [
            "tracer:v1: revision dddddddddddd is read here, but the running injector(s) r1 (published 5s ago) do not inject it: the webhook has not loaded this config yet, or refused it (its log says why); shown with it all the same"
        ]
    );
    let mut two = publication("aaaaaaaaaaaa", 5);
    two.revisions = [("logger:v1", "aaaaaaaaaaaa"), ("tracer:v1", "dddddddddddd")]
        .iter()
        .map(|(s, r)| ((*s).to_owned(), (*r).to_owned()))
        .collect();
    assert_eq!(
        warnings(&[], &[("r1", two)]),
        [
            "the running injector(s) r1 (published 5s ago) also inject logger:v1 (aaaaaaaaaaaa), tracer:v1 (dddddddddddd), but no config for them is read here: a pod that asks for one is shown without it"
        ]
    );
    // Replicas that disagree: one line, whatever is read here.
    assert_eq!(
        warnings(
            &logger_a,
            &[
                ("r1", publication("aaaaaaaaaaaa", 5)),
                ("r2", publication("bbbbbbbbbbbb", 5)),
            ]
        ),
        [
            "running injectors disagree (r1 publishes logger:v1=aaaaaaaaaaaa, r2 publishes logger:v1=bbbbbbbbbbbb): new pods get what the replica that answers serves; shown with the configs read here"
        ]
    );
    // Read from the status ConfigMap; a malformed item is said, not an error.
    let here: RevisionsInForce = [("logger:v1".to_owned(), "aaaaaaaaaaaa".to_owned())]
        .into_iter()
        .collect();
    let published = serde_json::json!({"r1": publication("bbbbbbbbbbbb", 5)}).to_string();
    let from_status = preview_warnings_of(&status(Some(&published)), &here, now, max_age);
    assert_eq!(from_status.len(), 1, "{from_status:?}");
    assert!(from_status[0].contains("inject revision bbbbbbbbbbbb"));
    assert!(preview_warnings_of(&status(None), &here, now, max_age).is_empty());
    let mut broken = status(Some("{not json"));
    broken.metadata.namespace = Some("injector-system".into());
    let said = preview_warnings_of(&broken, &here, now, max_age);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]
            .starts_with("injector-system/sidecar-injector-status item injectors is malformed (")
            && said[0]
                .ends_with("): whether the running injectors inject these revisions is unknown"),
        "{said:?}"
    );
}

#[test]
fn stale_or_disagreeing_publications_give_way_to_the_configs_and_say_so() {
    let stale = choose(
        &[("gone", publication("aaaaaaaaaaaa", 3600))],
        RevisionsSource::Auto,
    );
    assert_eq!(
        stale,
        RevisionsChoice::Configs {
            why: "the injectors' publication is stale (last from gone, 1h ago; older than 1m 30s): using the configs read here".into(),
            over_stale: true,
        }
    );
    let split = choose(
        &[
            ("a", publication("aaaaaaaaaaaa", 5)),
            ("b", publication("bbbbbbbbbbbb", 5)),
        ],
        RevisionsSource::Auto,
    );
    assert_eq!(
        split,
        RevisionsChoice::Configs {
            why: "running injectors disagree (a publishes logger:v1=aaaaaaaaaaaa, b publishes logger:v1=bbbbbbbbbbbb): using the configs read here".into(),
            over_stale: false,
        }
    );
    // A stale replica does not count against fresh ones that agree.
    let mixed = choose(
        &[
            ("a", publication("aaaaaaaaaaaa", 5)),
            ("old", publication("bbbbbbbbbbbb", 600)),
        ],
        RevisionsSource::Auto,
    );
    assert!(
        matches!(mixed, RevisionsChoice::Published { .. }),
        "{mixed:?}"
    );
    assert!(matches!(
        choose(&[], RevisionsSource::Auto),
        RevisionsChoice::Configs { .. }
    ));
}

#[test]
fn the_flag_chooses_the_source_explicitly() {
    let stale = [("gone", publication("aaaaaaaaaaaa", 3600))];
    assert!(matches!(
        choose(&stale, RevisionsSource::Published),
        RevisionsChoice::Published { .. }
    ));
    let fresh = [("a", publication("aaaaaaaaaaaa", 1))];
    assert!(matches!(
        choose(&fresh, RevisionsSource::Configs),
        RevisionsChoice::Configs { .. }
    ));
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
    assert!(decode_injectors(&status(None)).unwrap().is_empty());
    assert!(decode_injectors(&status(Some("[1, 2]"))).is_err());
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
