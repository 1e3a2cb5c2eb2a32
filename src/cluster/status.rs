//! The status ConfigMap (`sidecar-injector-status` in the injector's namespace): the revisions
//! in force and the campaign book, which outlive any one process.

use crate::config::RevisionsInForce;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

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

#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    #[error("cannot read the status ConfigMap: {0}")]
    Read(kube::Error),
    #[error("the status ConfigMap is malformed: {0}")]
    Malformed(String),
}

/// Its data item holding the campaign book (JSON).
pub const STATUS_CAMPAIGNS_KEY: &str = "campaigns";

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
    fn an_absent_item_is_none_and_a_malformed_one_an_error() {
        assert_eq!(decode_revisions(&status(None)).unwrap(), None);
        assert!(decode_revisions(&status(Some("[1, 2]"))).is_err());
    }
}
