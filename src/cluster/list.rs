//! One-shot reads for `sidecar-injector drift`: the pods and ReplicaSets of the cluster as
//! metadata-only lists (never specs), the workloads cut down to their index entries page by
//! page, fed into a [`DriftIndex`], and the ConfigMap configs as `serve` would load them.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use tracing::info;

use crate::annotations::AnnotationKeys;
use crate::config::{LoadReport, configmap_origin, load_configmap_items};
use crate::drift::{DriftIndex, WebhookReach, WorkloadEntry};
use crate::workload::WorkloadKind;

const PAGE: u32 = 500;

/// Every object `api` lists, page by page, each page cut down by `keep` before the next is
/// read, so a large cluster is never held whole.
pub(crate) async fn list_paged<K, T>(
    api: &Api<K>,
    keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    list_selected(api, ListParams::default(), keep).await
}

/// [`list_paged`] of the objects `params` select (by label, say).
pub(crate) async fn list_selected<K, T>(
    api: &Api<K>,
    params: ListParams,
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut kept = Vec::new();
    let mut params = params.limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        kept.extend(page.items.into_iter().filter_map(&mut keep));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(kept),
        }
    }
}

/// Every object of a kind `keep` keeps, cluster-wide or, for a user whose rights stop at some
/// namespaces, in exactly those (`namespaces` empty: cluster-wide), page by page.
pub(crate) async fn list_in_namespaces<K, T>(
    client: &Client,
    namespaces: &[String],
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    if namespaces.is_empty() {
        return list_paged(&Api::<K>::all(client.clone()), &mut keep).await;
    }
    let mut kept = Vec::new();
    for namespace in namespaces {
        kept.extend(list_paged(&Api::<K>::namespaced(client.clone(), namespace), &mut keep).await?);
    }
    Ok(kept)
}

/// Every object's metadata (a metadata-only list: never specs), as [`list_in_namespaces`].
async fn list_metadata<K>(
    client: &Client,
    namespaces: &[String],
) -> Result<Vec<ObjectMeta>, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    list_in_namespaces(client, namespaces, |o: PartialObjectMeta<K>| {
        Some(o.metadata)
    })
    .await
}

/// Every object of a kind (cluster-wide, or in each of `namespaces`), page by page, each
/// projected by `entry` as it arrives: (namespace, name, entry).
async fn list_objects<K, T>(
    client: &Client,
    namespaces: &[String],
    entry: impl Fn(&K) -> T,
) -> Result<Vec<(String, String, T)>, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    list_in_namespaces(client, namespaces, |object: K| {
        let meta = object.meta();
        Some((
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
            entry(&object),
        ))
    })
    .await
}

/// The drift index from one round of lists; `namespaces` empty means cluster-wide.
///
/// With `webhook_configuration`, pods of namespaces its namespaceSelector leaves out count as
/// excluded.
pub(crate) async fn index(
    client: &Client,
    keys: &AnnotationKeys,
    namespaces: &[String],
    webhook_configuration: Option<&str>,
) -> Result<DriftIndex, kube::Error> {
    let mut index = DriftIndex::default();
    let replicasets = list_metadata::<ReplicaSet>(client, namespaces).await?;
    index.reset_replicasets(replicasets.iter());
    // Workloads with their specs, each cut down to its entry at once: the template's request
    // shows a workload whose pods are all denied, and its rollout status the engine's view.
    let entries = [
        (
            WorkloadKind::Deployment,
            list_objects::<Deployment, _>(client, namespaces, |d| {
                WorkloadEntry::from_deployment(d, keys)
            })
            .await?,
        ),
        (
            WorkloadKind::StatefulSet,
            list_objects::<StatefulSet, _>(client, namespaces, |s| {
                WorkloadEntry::from_statefulset(s, keys)
            })
            .await?,
        ),
        (
            WorkloadKind::DaemonSet,
            list_objects::<DaemonSet, _>(client, namespaces, |d| {
                WorkloadEntry::from_daemonset(d, keys)
            })
            .await?,
        ),
    ];
    for (kind, entries) in entries {
        for (namespace, name, entry) in entries {
            index.apply_workload_entry(kind, &namespace, &name, entry);
        }
    }
    let pods = list_metadata::<Pod>(client, namespaces).await?;
    index.reset_pods(pods.iter(), keys);
    if let Some(name) = webhook_configuration {
        follow_reach_once(client, name, &mut index).await;
    }
    Ok(index)
}

/// Which namespaces the webhook configuration `name` reaches, read once into `index`. Not an
/// error when it cannot be read (no such configuration, or no right to list namespaces, as a
/// user whose rights stop at some namespaces has none): every namespace then counts as
/// reached, and the log says why.
async fn follow_reach_once(client: &Client, name: &str, index: &mut DriftIndex) {
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let configuration = match configurations.get_opt(name).await {
        Ok(Some(configuration)) => configuration,
        Ok(None) => {
            info!(
                "no MutatingWebhookConfiguration {name}: every namespace counts as reached by the webhook"
            );
            return;
        }
        Err(err) => {
            info!(
                "cannot read the MutatingWebhookConfiguration {name} ({}): every namespace counts as reached by the webhook",
                super::error_text(&err)
            );
            return;
        }
    };
    let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    match list_paged(&namespaces, |n| Some(n.metadata)).await {
        Ok(metas) => {
            index.reset_namespaces(&metas);
            index.set_webhook_reach(Some(WebhookReach::of(&configuration)));
        }
        Err(err) => info!(
            "cannot list namespaces ({}): every namespace counts as reached by the webhook {name}",
            super::error_text(&err)
        ),
    }
}

/// What the webhook configuration `name` reaches, and the labels of `namespace`, to say
/// whether the API server calls the webhook for a pod there; `None` when that cannot be read
/// (no such configuration, or no right to read it or the namespace).
pub(crate) async fn namespace_reach(
    client: &Client,
    name: &str,
    namespace: &str,
) -> Option<NamespaceReach> {
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let read = async {
        let configuration = configurations.get_opt(name).await?;
        let labels = namespaces.get_metadata_opt(namespace).await?;
        Ok::<_, kube::Error>(configuration.zip(labels))
    };
    match read.await {
        Ok(Some((configuration, labels))) => Some(NamespaceReach {
            reach: WebhookReach::of(&configuration),
            namespace: namespace.to_owned(),
            labels: labels.metadata.labels.unwrap_or_default(),
        }),
        Ok(None) => None,
        Err(err) => {
            info!(
                "cannot tell whether the webhook {name} is called for namespace {namespace}: {}",
                super::error_text(&err)
            );
            None
        }
    }
}

/// A webhook configuration's reach and one namespace's labels.
#[derive(Clone, Debug)]
pub(crate) struct NamespaceReach {
    reach: WebhookReach,
    namespace: String,
    labels: BTreeMap<String, String>,
}

impl NamespaceReach {
    /// Whether the webhook is called for pods of the namespace (for some of them, when an
    /// objectSelector chooses by label): what selects it, or why not.
    pub(crate) fn namespace(&self) -> Result<String, crate::drift::NotSent> {
        self.reach.reaches(&self.namespace, &self.labels)
    }

    /// Whether the webhook is called for a pod of the namespace labelled `labels`.
    pub(crate) fn pod(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, crate::drift::NotSent> {
        self.reach
            .reaches_pod(&self.namespace, &self.labels, labels)
    }
}

/// The labelled ConfigMaps' items, loaded as `serve` loads them.
pub(crate) async fn configmap_configs(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<LoadReport, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default().labels(selector)).await?;
    let mut items = Vec::new();
    for configmap in list.items {
        let name = configmap.metadata.name.clone().unwrap_or_default();
        for (key, text) in configmap.data.into_iter().flatten() {
            items.push((configmap_origin(namespace, &name, &key), text));
        }
    }
    Ok(load_configmap_items(&items))
}
