//! The status ConfigMap (`sidecar-injector-status` in the injector's namespace): the revisions
//! in force and the campaign book, which outlive any one process.

use std::collections::BTreeMap;

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
) -> Result<Option<BTreeMap<String, String>>, PublishedError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(status) = api
        .get_opt(STATUS_CONFIGMAP)
        .await
        .map_err(PublishedError::Read)?
    else {
        return Ok(None);
    };
    let Some(text) = status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_REVISIONS_KEY))
    else {
        return Ok(None);
    };
    serde_json::from_str(text).map(Some).map_err(|e| {
        PublishedError::Malformed(format!(
            "{namespace}/{STATUS_CONFIGMAP} item {STATUS_REVISIONS_KEY}: {e}"
        ))
    })
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
