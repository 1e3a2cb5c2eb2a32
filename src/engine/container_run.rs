//! `rollout --sidecar-container-name`: the pods chosen by container name and start time
//! (with `--foreign-sidecar`, those of them that differ from what a new pod gets), listed once
//! and then watched, so that the run follows them as they are replaced.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use crate::cluster::drift_feed::DriftFeed;
use crate::cluster::list::list_paged;
use crate::cluster::watch::{Change, watch};
use crate::engine::{ContainerRun, EngineOptions};
use crate::rollout::selection::{PodSummary, SelectionInput, select};

/// How long the pod watch may take to list the cluster.
const SYNC_DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub(crate) enum ContainerRunError {
    #[error("cannot list pods (with their specs) to find the named containers: {0}")]
    List(#[source] kube::Error),
    #[error("the pods were not listed within {SYNC_DEADLINE:?}")]
    NotListed,
    #[error("the pod watch stopped")]
    WatchStopped,
}

/// `--sidecar-container-name`: the pod specs listed once (page by page, per included namespace
/// when the run is limited to some), then a metadata watch that says which chosen pods remain.
pub(crate) async fn container_run(
    client: &kube::Client,
    containers: &[String],
    options: &EngineOptions,
    feed: &DriftFeed,
    started_before: Timestamp,
    only: Option<&HashSet<String>>,
) -> Result<ContainerRun, ContainerRunError> {
    let scopes: Vec<Api<Pod>> = if options.policy.include_namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        options
            .policy
            .include_namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    let mut pods = Vec::new();
    for api in scopes {
        let summaries = list_paged(&api, |pod| PodSummary::from_pod(&pod))
            .await
            .map_err(ContainerRunError::List)?;
        // `--foreign-sidecar`: only the pods that differ from what a new pod gets.
        pods.extend(
            summaries
                .into_iter()
                .filter(|p| only.is_none_or(|only| only.contains(&p.uid))),
        );
    }
    let live = Arc::new(Mutex::new(HashSet::new()));
    let mut listed = watch_live_pods(client.clone(), live.clone());
    tokio::time::timeout(SYNC_DEADLINE, listed.wait_for(|l| *l))
        .await
        .map_err(|_| ContainerRunError::NotListed)?
        .map_err(|_| ContainerRunError::WatchStopped)?;
    let selection = {
        let index = feed.index.lock().expect("drift index lock");
        let deployment_of = |ns: &str, rs: &str| index.deployment_of(ns, rs);
        select(SelectionInput {
            pods: &pods,
            containers,
            started_before,
            policy: &options.policy,
            deployment_of: &deployment_of,
        })
    };
    Ok(ContainerRun { selection, live })
}

/// Keeps `live` equal to the uids of the pods that exist and are not terminating; the
/// receiver turns true once the first list is in.
fn watch_live_pods(
    client: kube::Client,
    live: Arc<Mutex<HashSet<String>>>,
) -> tokio::sync::watch::Receiver<bool> {
    let (listed_tx, listed) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let api: Api<PartialObjectMeta<Pod>> = Api::all(client);
        // Terminating pods count as gone: they are on their way out.
        let mut changes = watch(
            api,
            watcher::Config::default(),
            "pod",
            |pod: PartialObjectMeta<Pod>| {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                Some((uid, pod.metadata.deletion_timestamp.is_none()))
            },
        );
        while let Some(change) = changes.next().await {
            let mut live = live.lock().expect("live pods lock");
            match change {
                Change::Listed(pods) => {
                    *live = pods
                        .into_iter()
                        .filter(|(_, running)| *running)
                        .map(|(uid, _)| uid)
                        .collect();
                    let _ = listed_tx.send(true);
                }
                Change::Applied((uid, true)) => {
                    live.insert(uid);
                }
                Change::Applied((uid, false)) | Change::Deleted((uid, _)) => {
                    live.remove(&uid);
                }
            }
        }
    });
    listed
}
