use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::*;
use crate::cluster::status::{
    ConfigsHere, Publication, RevisionsChoice, RevisionsSource, choose_revisions, preview_warnings,
    preview_warnings_of,
};
use crate::test_fixtures::{publication, status_with_injectors};

/// The choice as the one-shot command says it.
fn words(choice: &RevisionsChoice) -> String {
    match choice {
        RevisionsChoice::Published { why, .. } => published_why(why),
        RevisionsChoice::Configs { why, .. } => configs_why(why),
        RevisionsChoice::Neither { why } => neither_why(why),
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
    assert_eq!(revisions(&stale).as_deref(), Some("aaaaaaaaaaaa"));
    assert_eq!(
        words(&stale),
        "the sidecar configs cannot be read here: revisions as gone published them 1h ago, though stale (older than 1m 30s: is the injector running?)"
    );
    let split = unread(
        &[
            ("a", publication("aaaaaaaaaaaa", 5)),
            ("b", publication("bbbbbbbbbbbb", 2)),
        ],
        RevisionsSource::Auto,
    );
    assert_eq!(revisions(&split).as_deref(), Some("bbbbbbbbbbbb"));
    assert_eq!(
        words(&split),
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
    let none = unread(&[], RevisionsSource::Auto);
    assert!(matches!(none, RevisionsChoice::Neither { .. }), "{none:?}");
    assert_eq!(
        words(&none),
        "no running injector has published its revisions"
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
    let RevisionsChoice::Published { publication, .. } = &choice else {
        panic!("{choice:?}")
    };
    assert_eq!(publication.revisions.get("logger:v1"), Some("aaaaaaaaaaaa"));
    assert_eq!(
        words(&choice),
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
            .iter()
            .map(preview_warning)
            .collect::<Vec<_>>()
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
    let said_of = |status: &ConfigMap| -> Vec<String> {
        preview_warnings_of(status, &here, now, max_age)
            .iter()
            .map(preview_warning)
            .collect()
    };
    let from_status = said_of(&status_with_injectors(Some(&published)));
    assert_eq!(from_status.len(), 1, "{from_status:?}");
    assert!(from_status[0].contains("inject revision bbbbbbbbbbbb"));
    assert!(said_of(&status_with_injectors(None)).is_empty());
    let mut broken = status_with_injectors(Some("{not json"));
    broken.metadata.namespace = Some("injector-system".into());
    let said = said_of(&broken);
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
    assert!(
        matches!(
            stale,
            RevisionsChoice::Configs {
                over_stale: true,
                ..
            }
        ),
        "{stale:?}"
    );
    assert_eq!(
        words(&stale),
        "the injectors' publication is stale (last from gone, 1h ago; older than 1m 30s): using the configs read here"
    );
    let split = choose(
        &[
            ("a", publication("aaaaaaaaaaaa", 5)),
            ("b", publication("bbbbbbbbbbbb", 5)),
        ],
        RevisionsSource::Auto,
    );
    assert!(
        matches!(
            split,
            RevisionsChoice::Configs {
                over_stale: false,
                ..
            }
        ),
        "{split:?}"
    );
    assert_eq!(
        words(&split),
        "running injectors disagree (a publishes logger:v1=aaaaaaaaaaaa, b publishes logger:v1=bbbbbbbbbbbb): using the configs read here"
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
