//! The revision history ConfigMap, which only the Lease holder writes.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use super::*;
use crate::rollout::history::RevisionHistory;

/// The ConfigMap holding each sidecar's revision history, next to the status ConfigMap; only
/// the Lease holder writes it.
pub(crate) const HISTORY_CONFIGMAP: &str = "sidecar-injector-history";
/// Its data item (JSON).
pub(crate) const HISTORY_KEY: &str = "history";

/// The revision history in `configmap`; empty when the item is absent.
pub(crate) fn decode_history(configmap: &ConfigMap) -> Result<RevisionHistory, serde_json::Error> {
    configmap
        .data
        .as_ref()
        .and_then(|d| d.get(HISTORY_KEY))
        .map(|text| serde_json::from_str(text))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// The history ConfigMap holding `history`; with the `resource_version` it was read at, a
/// replace fails (409) when someone wrote it since.
pub(crate) fn history_object(
    namespace: &str,
    resource_version: Option<String>,
    history: &RevisionHistory,
) -> ConfigMap {
    let mut object = status_object(
        namespace,
        resource_version,
        [(
            HISTORY_KEY.to_owned(),
            serde_json::to_string_pretty(history).expect("the history serializes"),
        )]
        .into(),
    );
    object.metadata.name = Some(HISTORY_CONFIGMAP.into());
    object
}

/// The history in the cluster and the version read; `None` and an empty history when the
/// ConfigMap does not exist.
pub(crate) async fn read_history(
    api: &Api<ConfigMap>,
) -> Result<(RevisionHistory, Option<String>), HistoryReadError> {
    let Some(configmap) = api
        .get_opt(HISTORY_CONFIGMAP)
        .await
        .map_err(HistoryReadError::Read)?
    else {
        return Ok((RevisionHistory::default(), None));
    };
    let history = decode_history(&configmap).map_err(HistoryReadError::Decode)?;
    Ok((history, configmap.metadata.resource_version))
}

/// Why the revision history could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HistoryReadError {
    #[error("cannot read the revision history ConfigMap {HISTORY_CONFIGMAP}: {0}")]
    Read(#[source] kube::Error),
    #[error("the {HISTORY_KEY} item of the ConfigMap {HISTORY_CONFIGMAP} is malformed: {0}")]
    Decode(#[source] serde_json::Error),
}
