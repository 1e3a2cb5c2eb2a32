//! Edits of the campaign book by the CLI (`rollout --resume`, `--to`, `--unpin`,
//! `--release-hold`): read-modify-writes at the version read.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use super::*;
use crate::rollout::CampaignBook;

/// Why `rollout --resume` (or `--to`, `--unpin`, `--release-hold`) could not record its change.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("cannot read the status ConfigMap {STATUS_CONFIGMAP}: {0}")]
    Read(#[source] kube::Error),
    #[error(
        "the {STATUS_CAMPAIGNS_KEY} item of the status ConfigMap {STATUS_CONFIGMAP} is malformed: {0}"
    )]
    Decode(#[source] serde_json::Error),
    #[error("cannot write the status ConfigMap {STATUS_CONFIGMAP}: {0}")]
    Write(#[source] kube::Error),
    #[error("the status ConfigMap {STATUS_CONFIGMAP} kept changing under us; try again")]
    Contended,
}

/// The campaign book of the status ConfigMap `api` reaches, within `limit`; `None` when there
/// is no ConfigMap or no book in it yet.
pub(crate) async fn read_book(
    api: &Api<ConfigMap>,
    limit: std::time::Duration,
) -> Result<Option<CampaignBook>, ResumeError> {
    let configmap = crate::cluster::with_timeout(limit, api.get_opt(STATUS_CONFIGMAP))
        .await
        .map_err(ResumeError::Read)?;
    configmap
        .as_ref()
        .map(decode_book)
        .transpose()
        .map(Option::flatten)
        .map_err(ResumeError::Decode)
}

/// `rollout --resume`: the paused campaigns of the book in the cluster resumed. The Lease
/// holder adopts the book at its next plan and acts on it; nobody else needs to.
pub(crate) async fn resume_paused(
    api: &Api<ConfigMap>,
    namespace: &str,
    by: &str,
) -> Result<Vec<crate::rollout::Resumed>, ResumeError> {
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let resumed = edit_book(api, namespace, false, |book| {
        let resumed = book.resume_paused(by, now.clone());
        (!resumed.is_empty()).then_some(resumed)
    })
    .await?;
    Ok(resumed.unwrap_or_default())
}

/// A read-modify-write of the campaign book in the cluster at the version read (retried when
/// someone wrote in between). `edit` returns `None` when it changed nothing (nothing is
/// written). With no status ConfigMap (or no book in it), `edit` gets an empty book when
/// `create` says so, else nothing happens.
pub(crate) async fn edit_book<T>(
    api: &Api<ConfigMap>,
    namespace: &str,
    create: bool,
    mut edit: impl FnMut(&mut CampaignBook) -> Option<T>,
) -> Result<Option<T>, ResumeError> {
    let edited = read_modify_write(api, namespace, None, 5, |current| {
        let book = current.map(decode_book).transpose()?.flatten();
        let mut book = match book {
            Some(book) => book,
            None if create => CampaignBook::default(),
            None => return Ok(None),
        };
        let Some(result) = edit(&mut book) else {
            return Ok(None);
        };
        Ok(Some((
            encode(current.and_then(|c| c.data.as_ref()), &book),
            result,
        )))
    })
    .await;
    edited.map_err(|err| match err {
        EditError::Read(e) => ResumeError::Read(e),
        EditError::Edit(e) => ResumeError::Decode(e),
        EditError::Write(e) if crate::cluster::is_conflict(&e) => ResumeError::Contended,
        EditError::Write(e) => ResumeError::Write(e),
    })
}
