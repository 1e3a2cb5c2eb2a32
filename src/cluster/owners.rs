//! The pods a workload, a Job or a CronJob controls, and the controller of a pod, read
//! through their owners.

use crate::annotations::AnnotationKeys;
use crate::cluster::list::list_selected;
use crate::drift::Exclusion;
use crate::workload::{OwnerKind, ReplicaSetOwner, WorkloadKind, WorkloadRef, resolve_pod_owner};
use anyhow::Context;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{ListParams, PartialObjectMeta};
use kube::core::Selector;
use std::collections::BTreeSet;

/// What stands between a workload and its pods, when something does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// A Deployment's ReplicaSets.
    ReplicaSets,
    /// A CronJob's Jobs.
    Jobs,
}

/// The pods (as metadata) in `namespace` that `selector` matches and `owner` (by uid)
/// controls: directly, or through the objects `via` it controls (listed by the same
/// selector), so another workload's pods that happen to match are left out. `label` names the
/// owner in errors.
pub(crate) async fn pods_controlled(
    client: &kube::Client,
    namespace: &str,
    selector: &Selector,
    owner: &str,
    via: Option<Via>,
    label: &dyn std::fmt::Display,
) -> anyhow::Result<Vec<ObjectMeta>> {
    let own = BTreeSet::from([owner.to_owned()]);
    let between = match via {
        None => None,
        Some(Via::ReplicaSets) => Some(
            controlled::<ReplicaSet>(client, namespace, selector, &own)
                .await
                .with_context(|| format!("cannot list the ReplicaSets of {label}"))?,
        ),
        Some(Via::Jobs) => Some(
            controlled::<Job>(client, namespace, selector, &own)
                .await
                .with_context(|| format!("cannot list the Jobs of {label}"))?,
        ),
    };
    let owners = match between {
        Some(objects) => objects.into_iter().filter_map(|meta| meta.uid).collect(),
        None => own,
    };
    controlled::<Pod>(client, namespace, selector, &owners)
        .await
        .with_context(|| format!("cannot list the pods of {label}"))
}

/// The metadata of the objects of a kind in `namespace` that `selector` matches
/// and one of `owners` (by uid) controls, listed page by page.
pub(crate) async fn controlled<K>(
    client: &kube::Client,
    namespace: &str,
    selector: &Selector,
    owners: &BTreeSet<String>,
) -> Result<Vec<ObjectMeta>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels_from(selector);
    list_selected(&api, params, |object| {
        let meta = object.metadata;
        let controlled = meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && owners.contains(&r.uid));
        controlled.then_some(meta)
    })
    .await
}

/// Who controls a pod: what it is, the workload the engine restarts (if any), and the template
/// new pods are made from.
pub(crate) struct Owner {
    pub(crate) controller: Controller,
    pub(crate) workload: Option<WorkloadRef>,
    pub(crate) template: Option<PodTemplateSpec>,
    /// The workload is annotated `NS/rollout: disabled`.
    pub(crate) rollout_disabled: bool,
}

/// A pod's controller, as its owner references and the objects they name say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Controller {
    /// No controller: with `--evict-bare-pods` the engine evicts it, else nothing restarts it.
    BarePod { evicted: bool },
    /// A StatefulSet or a DaemonSet.
    Workload { kind: WorkloadKind, name: String },
    /// A ReplicaSet, and the Deployment that owns it, if one does.
    ReplicaSet {
        name: String,
        deployment: Option<String>,
    },
    /// A kind the engine does not restart.
    Other { kind: OwnerKind, name: String },
}

impl Owner {
    pub(crate) async fn of(
        client: &kube::Client,
        namespace: &str,
        pod: &Pod,
        evict_bare_pods: bool,
        keys: &AnnotationKeys,
    ) -> anyhow::Result<Self> {
        let Some(controller) = controller_of(&pod.metadata) else {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            return Ok(Self {
                controller: Controller::BarePod {
                    evicted: evict_bare_pods,
                },
                workload: evict_bare_pods
                    .then(|| WorkloadRef::new(WorkloadKind::Pod, namespace, name)),
                template: None,
                rollout_disabled: false,
            });
        };
        let name = controller.name.as_str();
        let workload = |kind| Some(WorkloadRef::new(kind, namespace, name));
        Ok(match OwnerKind::parse(&controller.kind) {
            OwnerKind::ReplicaSet => Self::of_replicaset(client, namespace, name, keys).await?,
            OwnerKind::Workload(kind @ (WorkloadKind::StatefulSet | WorkloadKind::DaemonSet)) => {
                let (metadata, template) = if kind == WorkloadKind::StatefulSet {
                    let set: StatefulSet = read(client, namespace, name, kind).await?;
                    (set.metadata, set.spec.map(|s| s.template))
                } else {
                    let set: DaemonSet = read(client, namespace, name, kind).await?;
                    (set.metadata, set.spec.map(|s| s.template))
                };
                Self {
                    controller: Controller::Workload {
                        kind,
                        name: name.to_owned(),
                    },
                    workload: workload(kind),
                    template,
                    rollout_disabled: crate::drift::rollout_disabled(&metadata, keys),
                }
            }
            kind => Self {
                controller: Controller::Other {
                    kind,
                    name: name.to_owned(),
                },
                workload: None,
                template: None,
                rollout_disabled: false,
            },
        })
    }

    /// Why the engine leaves out `pod`, which this owns, as `drift` judges it: its owner is
    /// not a workload the engine restarts, or one that opted out.
    pub(crate) fn exclusion(&self, pod: &Pod, evict_bare_pods: bool) -> Option<Exclusion> {
        if self.workload.is_some() && self.rollout_disabled {
            return Some(Exclusion::RolloutDisabled);
        }
        let controller = controller_of(&pod.metadata).map(|r| (r.kind.as_str(), r.name.as_str()));
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let owner = resolve_pod_owner(controller, name, evict_bare_pods, |_| {
            match &self.workload {
                Some(deployment) => ReplicaSetOwner::Deployment(&deployment.name),
                None => ReplicaSetOwner::NoDeployment,
            }
        });
        crate::drift::owner_exclusion(&owner)
    }

    async fn of_replicaset(
        client: &kube::Client,
        namespace: &str,
        name: &str,
        keys: &AnnotationKeys,
    ) -> anyhow::Result<Self> {
        let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
        let replicaset = api
            .get(name)
            .await
            .with_context(|| format!("cannot read ReplicaSet {namespace}/{name}"))?;
        let deployment = replicaset
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| {
                r.controller == Some(true)
                    && OwnerKind::parse(&r.kind) == WorkloadKind::Deployment.into()
            })
            .map(|r| r.name.clone());
        let template = replicaset.spec.and_then(|s| s.template);
        let controller = Controller::ReplicaSet {
            name: name.to_owned(),
            deployment: deployment.clone(),
        };
        Ok(match deployment {
            Some(deployment) => {
                let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
                let metadata = api
                    .get_metadata(&deployment)
                    .await
                    .with_context(|| format!("cannot read Deployment {namespace}/{deployment}"))?;
                Self {
                    controller,
                    workload: Some(WorkloadRef::new(
                        WorkloadKind::Deployment,
                        namespace,
                        &deployment,
                    )),
                    template,
                    rollout_disabled: crate::drift::rollout_disabled(&metadata.metadata, keys),
                }
            }
            None => Self {
                controller,
                workload: None,
                template,
                rollout_disabled: false,
            },
        })
    }
}

/// The object named `name`, of `kind`, read whole, or an error saying it does not exist.
pub(crate) async fn read<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    kind: WorkloadKind,
) -> anyhow::Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read {kind} {namespace}/{name}"))?
        .with_context(|| format!("{kind} {namespace}/{name} not found"))
}

/// The owner reference of an object's controller, if it has one.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// What is known of a workload by its spec: its uid (to know its pods by their owners), the
/// selector its pods carry, and the template new pods are made from.
pub(crate) struct WorkloadSpec {
    uid: String,
    selector: LabelSelector,
    pub(crate) template: PodTemplateSpec,
    /// Annotated `NS/rollout: disabled`.
    pub(crate) rollout_disabled: bool,
}

impl WorkloadSpec {
    pub(crate) async fn read(
        client: &kube::Client,
        workload: &WorkloadRef,
        keys: &AnnotationKeys,
    ) -> anyhow::Result<Self> {
        let (metadata, selector, template) = match workload.kind {
            WorkloadKind::Deployment => {
                let object: Deployment =
                    read(client, &workload.namespace, &workload.name, workload.kind).await?;
                let spec = object.spec.unwrap_or_default();
                (object.metadata, spec.selector, spec.template)
            }
            WorkloadKind::StatefulSet => {
                let object: StatefulSet =
                    read(client, &workload.namespace, &workload.name, workload.kind).await?;
                let spec = object.spec.unwrap_or_default();
                (object.metadata, spec.selector, spec.template)
            }
            WorkloadKind::DaemonSet => {
                let object: DaemonSet =
                    read(client, &workload.namespace, &workload.name, workload.kind).await?;
                let spec = object.spec.unwrap_or_default();
                (object.metadata, spec.selector, spec.template)
            }
            WorkloadKind::Pod => anyhow::bail!("a pod is not a workload with a template"),
        };
        Ok(Self {
            rollout_disabled: crate::drift::rollout_disabled(&metadata, keys),
            uid: metadata.uid.unwrap_or_default(),
            selector,
            template,
        })
    }

    /// The workload's pods, as metadata: those its selector matches and it controls (through
    /// a ReplicaSet it controls, for a Deployment), so another workload's pods that happen to
    /// match are left out.
    pub(crate) async fn pods(
        &self,
        client: &kube::Client,
        workload: &WorkloadRef,
    ) -> anyhow::Result<Vec<ObjectMeta>> {
        let selector = Selector::try_from(self.selector.clone())
            .with_context(|| format!("{workload}: its selector cannot be used to list its pods"))?;
        let via = (workload.kind == WorkloadKind::Deployment).then_some(Via::ReplicaSets);
        pods_controlled(
            client,
            &workload.namespace,
            &selector,
            &self.uid,
            via,
            workload,
        )
        .await
    }
}
