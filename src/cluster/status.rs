//! The status ConfigMap (`sidecar-injector-status` in the injector's namespace): the revisions
//! in force and the campaign book, which outlive any one process.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::watcher;
use tokio::sync::watch as signal;

use super::watch::{Change, watch};
use crate::config::RevisionsInForce;
use crate::rollout::CampaignBook;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

/// Its data item holding the campaign book (JSON).
pub const STATUS_CAMPAIGNS_KEY: &str = "campaigns";

/// The status ConfigMap a running injector keeps in its namespace.
pub const STATUS_CONFIGMAP: &str = "sidecar-injector-status";
/// Its data item holding `{"name:version": "REV", ...}`, the revisions in force.
pub const STATUS_REVISIONS_KEY: &str = "revisions";

/// The revisions a running injector published, when its status ConfigMap exists.
pub async fn published_revisions(
    client: &Client,
    namespace: &str,
) -> Result<Option<RevisionsInForce>, PublishedError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(status) = api
        .get_opt(STATUS_CONFIGMAP)
        .await
        .map_err(PublishedError::Read)?
    else {
        return Ok(None);
    };
    decode_revisions(&status).map_err(|e| {
        PublishedError::Malformed(format!(
            "{namespace}/{STATUS_CONFIGMAP} item {STATUS_REVISIONS_KEY}: {e}"
        ))
    })
}

/// The revisions item of a status ConfigMap (pure: the read is apart, so this is tested
/// without a cluster). `None` when the item is absent.
pub fn decode_revisions(status: &ConfigMap) -> Result<Option<RevisionsInForce>, serde_json::Error> {
    status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_REVISIONS_KEY))
        .map(|text| serde_json::from_str(text))
        .transpose()
}

/// The revisions item as the engine writes it: JSON, sorted by sidecar.
pub fn encode_revisions(revisions: &RevisionsInForce) -> String {
    serde_json::to_string(revisions).expect("a map of strings serializes")
}

/// The campaign book item; `None` when the item is absent.
pub fn decode_book(status: &ConfigMap) -> Result<Option<CampaignBook>, serde_json::Error> {
    status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_CAMPAIGNS_KEY))
        .map(|text| serde_json::from_str(text))
        .transpose()
}

/// The data of the status ConfigMap: `existing` with the campaign book replaced and, from a
/// process that serves the webhook, the revisions it injects. A one-shot command injects
/// nothing, so it leaves the published revisions as they are.
pub fn encode(
    existing: Option<&BTreeMap<String, String>>,
    revisions: Option<&RevisionsInForce>,
    book: &CampaignBook,
) -> BTreeMap<String, String> {
    let mut data = existing.cloned().unwrap_or_default();
    if let Some(revisions) = revisions {
        data.insert(STATUS_REVISIONS_KEY.to_owned(), encode_revisions(revisions));
    }
    data.insert(
        STATUS_CAMPAIGNS_KEY.to_owned(),
        serde_json::to_string_pretty(book).expect("the book serializes"),
    );
    data
}

/// The status ConfigMap holding `data`; with the `resource_version` it was read at, a
/// replace of it fails (409) when someone wrote it since.
pub fn status_object(
    namespace: &str,
    resource_version: Option<String>,
    data: BTreeMap<String, String>,
) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(STATUS_CONFIGMAP.into()),
            namespace: Some(namespace.to_owned()),
            resource_version,
            labels: Some(
                [(
                    "app.kubernetes.io/name".to_owned(),
                    "sidecar-injector".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Creates the status ConfigMap (no version known yet) or replaces the version read.
pub async fn write(api: &Api<ConfigMap>, status: &ConfigMap) -> Result<ConfigMap, kube::Error> {
    match status.metadata.resource_version {
        None => api.create(&PostParams::default(), status).await,
        Some(_) => {
            api.replace(STATUS_CONFIGMAP, &PostParams::default(), status)
                .await
        }
    }
}

/// The status ConfigMap as it changes (`None` while it does not exist); the first value is
/// published once the first read is done, whether it exists or not.
pub fn watch_status(client: Client, namespace: &str) -> signal::Receiver<Option<ConfigMap>> {
    let (publish, receive) = signal::channel(None);
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={STATUS_CONFIGMAP}"));
    tokio::spawn(async move {
        let mut changes = watch(api, config, "status ConfigMap", Some);
        while let Some(change) = changes.next().await {
            match change {
                Change::Listed(mut listed) => {
                    publish.send_replace(listed.pop());
                }
                Change::Applied(configmap) => {
                    publish.send_replace(Some(configmap));
                }
                Change::Deleted(_) => {
                    publish.send_replace(None);
                }
            }
        }
    });
    receive
}

#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    #[error("cannot read the status ConfigMap: {0}")]
    Read(kube::Error),
    #[error("the status ConfigMap is malformed: {0}")]
    Malformed(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(item: Option<&str>) -> ConfigMap {
        ConfigMap {
            data: item.map(|text| {
                [(STATUS_REVISIONS_KEY.to_owned(), text.to_owned())]
                    .into_iter()
                    .collect()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn revisions_read_back_what_is_written() {
        let revisions: RevisionsInForce = [
            ("tracer:v1".to_owned(), "bbbbbbbbbbbb".to_owned()),
            ("logger:v1".to_owned(), "aaaaaaaaaaaa".to_owned()),
        ]
        .into_iter()
        .collect();
        let text = encode_revisions(&revisions);
        assert_eq!(
            text,
            r#"{"logger:v1":"aaaaaaaaaaaa","tracer:v1":"bbbbbbbbbbbb"}"#
        );
        assert_eq!(
            decode_revisions(&status(Some(&text))).unwrap(),
            Some(revisions)
        );
    }

    #[test]
    fn the_book_reads_back_what_is_encoded() {
        let revisions: RevisionsInForce = [("logger:v1".to_owned(), "aaaaaaaaaaaa".to_owned())]
            .into_iter()
            .collect();
        let mut book = CampaignBook::default();
        book.campaigns.insert(
            "logger:v1".into(),
            crate::rollout::Campaign {
                revision: "aaaaaaaaaaaa".into(),
                previous: None,
                since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                state: crate::rollout::CampaignState::Paused,
                counts: Default::default(),
                failures: Vec::new(),
                acknowledged_failures: 0,
                pause_reason: Some("broken".into()),
                changes: None,
            },
        );
        let configmap = status_object(
            "injector-system",
            None,
            encode(None, Some(&revisions), &book),
        );
        // A one-shot command keeps what the injector published and replaces only the book.
        let existing = configmap.data.clone().unwrap();
        let other: RevisionsInForce = [("logger:v1".to_owned(), "bbbbbbbbbbbb".to_owned())]
            .into_iter()
            .collect();
        let kept = encode(Some(&existing), None, &CampaignBook::default());
        assert_eq!(kept[STATUS_REVISIONS_KEY], existing[STATUS_REVISIONS_KEY]);
        assert_ne!(kept[STATUS_CAMPAIGNS_KEY], existing[STATUS_CAMPAIGNS_KEY]);
        let replaced = encode(Some(&existing), Some(&other), &book);
        assert_eq!(replaced[STATUS_REVISIONS_KEY], encode_revisions(&other));
        assert_eq!(configmap.metadata.name.as_deref(), Some(STATUS_CONFIGMAP));
        assert_eq!(decode_book(&configmap).unwrap(), Some(book));
        assert_eq!(decode_revisions(&configmap).unwrap(), Some(revisions));
        assert_eq!(decode_book(&status(None)).unwrap(), None);
    }

    #[test]
    fn an_absent_item_is_none_and_a_malformed_one_an_error() {
        assert_eq!(decode_revisions(&status(None)).unwrap(), None);
        assert!(decode_revisions(&status(Some("[1, 2]"))).is_err());
    }
}
