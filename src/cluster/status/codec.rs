//! The status ConfigMap's items: the replicas' publications and the campaign book, encoded
//! and decoded; and the one way it is written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::*;
use crate::config::RevisionsInForce;
use crate::rollout::CampaignBook;

/// Its data item holding the campaign book (JSON).
pub(crate) const STATUS_CAMPAIGNS_KEY: &str = "campaigns";
/// Its data item holding what each serving replica injects: `{"<identity>": Publication}`.
pub(crate) const STATUS_INJECTORS_KEY: &str = "injectors";

/// Every replica's publication, by identity; `{}` when the item is absent.
pub(crate) fn decode_injectors(
    status: &ConfigMap,
) -> Result<BTreeMap<String, Publication>, serde_json::Error> {
    status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_INJECTORS_KEY))
        .map(|text| serde_json::from_str(text))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// `data` with `identity`'s publication set, and publications older than `forget_after`
/// dropped (replicas long gone).
pub(crate) fn publish(
    data: &BTreeMap<String, String>,
    identity: &str,
    publication: Publication,
    forget_after: std::time::Duration,
) -> BTreeMap<String, String> {
    let now = publication.at.0;
    let mut injectors = injectors_in(data);
    let horizon = now
        .checked_sub(k8s_openapi::jiff::SignedDuration::try_from(forget_after).unwrap_or_default())
        .unwrap_or(k8s_openapi::jiff::Timestamp::MIN);
    injectors.retain(|_, p| p.at.0 >= horizon);
    injectors.insert(identity.to_owned(), publication);
    let mut data = data.clone();
    set_injectors(&mut data, &injectors);
    data
}

/// The publications in `data` as a writer reads them: a malformed item is started afresh
/// (the readers report it; a writer must not be stopped by it).
pub(super) fn injectors_in(data: &BTreeMap<String, String>) -> BTreeMap<String, Publication> {
    data.get(STATUS_INJECTORS_KEY)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

pub(super) fn set_injectors(
    data: &mut BTreeMap<String, String>,
    injectors: &BTreeMap<String, Publication>,
) {
    data.insert(
        STATUS_INJECTORS_KEY.to_owned(),
        serde_json::to_string_pretty(injectors).expect("publications serialize"),
    );
}

/// The status ConfigMap a running injector keeps in its namespace.
pub(crate) const STATUS_CONFIGMAP: &str = "sidecar-injector-status";
/// The campaign book item; `None` when the item is absent.
pub(crate) fn decode_book(status: &ConfigMap) -> Result<Option<CampaignBook>, serde_json::Error> {
    status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_CAMPAIGNS_KEY))
        .map(|text| CampaignBook::decode(text))
        .transpose()
}

/// The data of the status ConfigMap: `existing` with the campaign book replaced; the
/// replicas' publications (and anything else) kept as they are.
pub(crate) fn encode(
    existing: Option<&BTreeMap<String, String>>,
    book: &CampaignBook,
) -> BTreeMap<String, String> {
    let mut data = existing.cloned().unwrap_or_default();
    data.insert(STATUS_CAMPAIGNS_KEY.to_owned(), book.encode());
    data
}

/// The book without its progress counts and the end they forecast: what must reach the
/// status ConfigMap at once.
pub(crate) fn book_shape(book: &CampaignBook) -> String {
    let mut shape = book.clone();
    for campaign in shape.campaigns.values_mut() {
        campaign.counts = Default::default();
        // Recomputed from the counts at every plan: in the shape, it had each plan rewrite
        // the ConfigMap (about 2 writes a restart at 50,000 pods).
        campaign.expected_end = None;
    }
    serde_json::to_string(&shape).expect("the book serializes")
}

/// The status ConfigMap holding `data`; with the `resource_version` it was read at, a
/// replace of it fails (409) when someone wrote it since.
pub(crate) fn status_object(
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

/// Creates the status (or history) ConfigMap when no version of it is known yet, or replaces
/// the version read.
pub(crate) async fn write(
    api: &Api<ConfigMap>,
    object: &ConfigMap,
) -> Result<ConfigMap, kube::Error> {
    match object.metadata.resource_version {
        None => api.create(&PostParams::default(), object).await,
        Some(_) => {
            let name = object.metadata.name.as_deref().unwrap_or(STATUS_CONFIGMAP);
            api.replace(name, &PostParams::default(), object).await
        }
    }
}

/// Why a [`read_modify_write`] did not write.
#[derive(Debug)]
pub(crate) enum EditError<E> {
    Read(kube::Error),
    /// What the edit refused (a malformed item it must not overwrite).
    Edit(E),
    /// The write failed; a conflict once every attempt met one.
    Write(kube::Error),
}

/// The one read-modify-write of the status ConfigMap: `edit` gets it as read (`None`: it does
/// not exist) and returns its new data and a result, or `None` to leave it as it is. The new
/// data is written at the version read, so a concurrent writer is never overwritten; on a
/// conflict it is read and edited again, `attempts` times in all. A `watched` copy (from
/// [`watch_status`]) is edited first in place of a read: a stale one costs a conflict and a
/// read, a fresh one saves the read.
pub(crate) async fn read_modify_write<T, E>(
    api: &Api<ConfigMap>,
    namespace: &str,
    watched: Option<ConfigMap>,
    attempts: usize,
    mut edit: impl FnMut(Option<&ConfigMap>) -> Result<Option<(BTreeMap<String, String>, T)>, E>,
) -> Result<Option<T>, EditError<E>> {
    let mut attempt = 1;
    let mut watched = watched.filter(|c| c.metadata.resource_version.is_some());
    let attempts = attempts + usize::from(watched.is_some());
    loop {
        let current = match watched.take() {
            Some(copy) => Some(copy),
            None => api
                .get_opt(STATUS_CONFIGMAP)
                .await
                .map_err(EditError::Read)?,
        };
        let Some((data, result)) = edit(current.as_ref()).map_err(EditError::Edit)? else {
            return Ok(None);
        };
        let version = current.and_then(|c| c.metadata.resource_version);
        match write(api, &status_object(namespace, version, data)).await {
            Ok(_) => return Ok(Some(result)),
            Err(e) if crate::cluster::is_conflict(&e) && attempt < attempts => attempt += 1,
            Err(e) => return Err(EditError::Write(e)),
        }
    }
}

/// The campaign book of the status ConfigMap as every long-running reader takes it:
/// `Some(None)` when there is none (no ConfigMap, or no book in it); malformed, `None`, and the
/// reader keeps what it had: said once per distinct error in `said`, never dropped silently.
pub(crate) fn book_or_warn(
    status: Option<&ConfigMap>,
    said: &mut Option<String>,
) -> Option<Option<CampaignBook>> {
    match status.map(decode_book).transpose() {
        Ok(book) => {
            *said = None;
            Some(book.flatten())
        }
        Err(err) => {
            let text = err.to_string();
            if said.as_deref() != Some(text.as_str()) {
                tracing::warn!(
                    "the status ConfigMap's {STATUS_CAMPAIGNS_KEY} item is malformed; keeping the campaigns, pins and holds read before: {text}"
                );
                *said = Some(text);
            }
            None
        }
    }
}

/// [`preview_warnings`] of the publications a status ConfigMap holds. A malformed item is
/// said in their place: the preview needs only the configs, and goes on.
pub(crate) fn preview_warnings_of(
    status: &ConfigMap,
    here: &RevisionsInForce,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Vec<PreviewWarning> {
    match decode_injectors(status) {
        Ok(injectors) => preview_warnings(here, &injectors, now, max_age),
        Err(err) => vec![PreviewWarning::Malformed {
            namespace: status.metadata.namespace.clone().unwrap_or_default(),
            error: err.to_string(),
        }],
    }
}
