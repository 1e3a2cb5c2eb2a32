//! What the running injectors keep about themselves in their namespace, read in one place: the
//! status ConfigMap (each replica's publication and the campaign book), the revision history
//! and the rollout Lease. A one-shot command reads the three once, at its start
//! ([`InjectorState::read`]); `serve` watches the status ConfigMap ([`watch_status`]), holds
//! the history it alone writes, and elects through the Lease.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch as signal;

use super::*;
use crate::cluster::lease::ROLLOUT_LEASE;
use crate::cluster::watch::{Change, watch};
use crate::rollout::CampaignBook;
use crate::rollout::history::RevisionHistory;

/// One read of the injector's objects, each decoded once. What could not be read or decoded
/// says why, and each command decides whether it can do without it.
#[derive(Debug)]
pub(crate) struct InjectorState {
    status: Result<Option<ConfigMap>, StateError>,
    injectors: Result<BTreeMap<String, Publication>, StateError>,
    book: Result<CampaignBook, StateError>,
    history: Result<RevisionHistory, StateError>,
    lease: Result<Option<Lease>, StateError>,
}

/// Why one of the injector's objects is missing from an [`InjectorState`].
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum StateError {
    #[error("cannot read {namespace}/{name}: {reason}")]
    Unread {
        namespace: String,
        name: &'static str,
        /// The API server's answer, in its words.
        reason: String,
        /// It refused (a user whose rights stop at a team's namespaces).
        refused: bool,
    },
    #[error("{namespace}/{name} item {item} is malformed: {reason}")]
    Malformed {
        namespace: String,
        name: &'static str,
        item: &'static str,
        reason: String,
    },
}

impl StateError {
    /// The API server refused the read.
    pub(crate) fn refused(&self) -> bool {
        matches!(self, Self::Unread { refused: true, .. })
    }

    fn unread(namespace: &str, name: &'static str, err: &kube::Error) -> Self {
        Self::Unread {
            namespace: namespace.to_owned(),
            name,
            reason: crate::cluster::error_text(err),
            refused: crate::cluster::is_forbidden(err),
        }
    }

    fn malformed(
        namespace: &str,
        name: &'static str,
        item: &'static str,
    ) -> impl Fn(serde_json::Error) -> Self {
        move |err| Self::Malformed {
            namespace: namespace.to_owned(),
            name,
            item,
            reason: err.to_string(),
        }
    }
}

impl InjectorState {
    /// The status ConfigMap, the history and the Lease of `namespace`, read together.
    pub(crate) async fn read(client: &Client, namespace: &str) -> Self {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let (status, history, lease) = tokio::join!(
            configmaps.get_opt(STATUS_CONFIGMAP),
            configmaps.get_opt(HISTORY_CONFIGMAP),
            leases.get_opt(ROLLOUT_LEASE),
        );
        let status = status.map_err(|err| StateError::unread(namespace, STATUS_CONFIGMAP, &err));
        let history = history.map_err(|err| StateError::unread(namespace, HISTORY_CONFIGMAP, &err));
        let lease = lease.map_err(|err| StateError::unread(namespace, ROLLOUT_LEASE, &err));
        Self::of(namespace, status, history, lease)
    }

    /// The state of objects already read (`Ok(None)`: absent).
    pub(crate) fn of(
        namespace: &str,
        status: Result<Option<ConfigMap>, StateError>,
        history: Result<Option<ConfigMap>, StateError>,
        lease: Result<Option<Lease>, StateError>,
    ) -> Self {
        let injectors = decode_item(&status, namespace, STATUS_INJECTORS_KEY, |c| {
            decode_injectors(c).map(Some)
        });
        let book = decode_item(&status, namespace, STATUS_CAMPAIGNS_KEY, decode_book);
        let history = history.and_then(|history| {
            history
                .as_ref()
                .map(decode_history)
                .transpose()
                .map(Option::unwrap_or_default)
                .map_err(StateError::malformed(
                    namespace,
                    HISTORY_CONFIGMAP,
                    HISTORY_KEY,
                ))
        });
        Self {
            status,
            injectors,
            book,
            history,
            lease,
        }
    }

    /// The status ConfigMap (`None`: no injector has written one yet).
    pub(crate) fn status(&self) -> Result<Option<&ConfigMap>, StateError> {
        self.status
            .as_ref()
            .map(Option::as_ref)
            .map_err(Clone::clone)
    }

    /// Each replica's publication, by identity; none while there is no status ConfigMap.
    pub(crate) fn injectors(&self) -> Result<&BTreeMap<String, Publication>, StateError> {
        self.injectors.as_ref().map_err(Clone::clone)
    }

    /// The campaign book; empty while there is none.
    pub(crate) fn book(&self) -> Result<&CampaignBook, StateError> {
        self.book.as_ref().map_err(Clone::clone)
    }

    /// The revision history; empty while there is none.
    pub(crate) fn history(&self) -> Result<&RevisionHistory, StateError> {
        self.history.as_ref().map_err(Clone::clone)
    }

    /// The rollout Lease (`None`: no engine ever held it).
    pub(crate) fn lease(&self) -> Result<Option<&Lease>, StateError> {
        self.lease
            .as_ref()
            .map(Option::as_ref)
            .map_err(Clone::clone)
    }
}

/// An item of the status ConfigMap (`status`), decoded; absent (or no ConfigMap), its default.
fn decode_item<T: Default>(
    status: &Result<Option<ConfigMap>, StateError>,
    namespace: &str,
    item: &'static str,
    decode: impl Fn(&ConfigMap) -> Result<Option<T>, serde_json::Error>,
) -> Result<T, StateError> {
    let status = status.as_ref().map_err(Clone::clone)?;
    Ok(status
        .as_ref()
        .map(decode)
        .transpose()
        .map_err(StateError::malformed(namespace, STATUS_CONFIGMAP, item))?
        .flatten()
        .unwrap_or_default())
}

/// The status ConfigMap as it changes (`None` while it does not exist); the first value is
/// published once the first read is done, whether it exists or not.
pub(crate) fn watch_status(client: Client, namespace: &str) -> signal::Receiver<Option<ConfigMap>> {
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
