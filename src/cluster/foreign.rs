//! Sidecars other injectors add (`--foreign-sidecar`): the running pods that carry one,
//! grouped by workload, and what a new pod of each workload gets, asked of the API server by
//! two dry-run creates of its template (one pair per distinct template and namespace).

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::PartialObjectMeta;

use super::list::list_in_namespaces;
use super::owners::controller_of;
use crate::drift::{ForeignWorkload, RowReason, foreign_pods_to_replace, foreign_rows};
use crate::foreign::{Expected, ForeignSidecars};
use crate::workload::{OwnerKind, WorkloadKind, WorkloadRef};

/// Dry runs in flight at once: each runs every mutating webhook of the cluster, so a
/// cluster-wide ask is paced below what one `kubectl apply` of many pods would send.
const DRY_RUNS_IN_FLIGHT: usize = 4;

/// A workload whose running pods carry a named sidecar: its template and those pods.
#[derive(Clone, Debug)]
pub(crate) struct Carrier {
    pub(crate) kind: WorkloadKind,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) template: PodTemplateSpec,
    pub(crate) pods: Vec<CarriedPod>,
}

/// A running pod that carries a named sidecar.
#[derive(Clone, Debug)]
pub(crate) struct CarriedPod {
    pub(crate) uid: String,
    pub(crate) spec: PodSpec,
}

/// Why a dry run said nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum DryRunError {
    /// The API server refused it: our ServiceAccount lacks `create` on pods
    /// (deploy/components/foreign-sidecars grants it), or an admission webhook denied the pod.
    #[error("the API server refused a dry-run create of a pod in namespace {namespace}: {message}")]
    Refused { namespace: String, message: String },
    #[error("a dry-run create of a pod in namespace {namespace} failed: {message}")]
    Failed { namespace: String, message: String },
}

impl DryRunError {
    fn of(namespace: &str, err: &kube::Error) -> Self {
        let namespace = namespace.to_owned();
        match err {
            kube::Error::Api(status) if status.code == 403 || status.code == 400 => {
                DryRunError::Refused {
                    namespace,
                    message: status.message.clone(),
                }
            }
            other => DryRunError::Failed {
                namespace,
                message: other.to_string(),
            },
        }
    }
}

/// The workloads (Deployments, StatefulSets, DaemonSets) whose pods carry one of `names`,
/// with those pods; cluster-wide when `namespaces` is empty. Pods are listed whole but kept
/// only when they carry a named sidecar, page by page.
pub(crate) async fn carriers(
    client: &Client,
    namespaces: &[String],
    names: &ForeignSidecars,
) -> Result<Vec<Carrier>, kube::Error> {
    let pods: Vec<(ObjectMeta, PodSpec)> = list_in_namespaces(client, namespaces, |pod: Pod| {
        let spec = pod.spec?;
        let carries = !names.carried_by(&spec).is_empty();
        (carries && pod.metadata.deletion_timestamp.is_none()).then_some((pod.metadata, spec))
    })
    .await?;
    if pods.is_empty() {
        return Ok(Vec::new());
    }
    let replicasets: HashMap<(String, String), String> =
        list_in_namespaces(client, namespaces, |rs: PartialObjectMeta<ReplicaSet>| {
            let meta = rs.metadata;
            let deployment = controller_of(&meta)
                .filter(|o| o.kind == WorkloadKind::Deployment.as_str())?
                .name
                .clone();
            Some(((meta.namespace?, meta.name?), deployment))
        })
        .await?
        .into_iter()
        .collect();
    let mut by_workload: BTreeMap<WorkloadKey, Vec<CarriedPod>> = BTreeMap::new();
    for (meta, spec) in pods {
        let namespace = meta.namespace.clone().unwrap_or_default();
        let Some(controller) = controller_of(&meta) else {
            continue;
        };
        let owner = controller.name.as_str();
        let workload = match OwnerKind::parse(&controller.kind) {
            OwnerKind::ReplicaSet => replicasets
                .get(&(namespace.clone(), owner.to_owned()))
                .map(|d| (WorkloadKind::Deployment, d.clone())),
            OwnerKind::Workload(kind @ (WorkloadKind::StatefulSet | WorkloadKind::DaemonSet)) => {
                Some((kind, owner.to_owned()))
            }
            _ => None,
        };
        if let Some((kind, name)) = workload {
            by_workload
                .entry((kind, namespace, name))
                .or_default()
                .push(CarriedPod {
                    uid: meta.uid.clone().unwrap_or_default(),
                    spec,
                });
        }
    }
    let templates = templates(client, namespaces, &by_workload).await?;
    Ok(by_workload
        .into_iter()
        .filter_map(|((kind, namespace, name), pods)| {
            let template = templates
                .get(&(kind, namespace.clone(), name.clone()))?
                .clone();
            Some(Carrier {
                kind,
                namespace,
                name,
                template,
                pods,
            })
        })
        .collect())
}

type WorkloadKey = (WorkloadKind, String, String);

/// The pod templates of the workloads `wanted` names.
async fn templates<T>(
    client: &Client,
    namespaces: &[String],
    wanted: &BTreeMap<WorkloadKey, T>,
) -> Result<HashMap<WorkloadKey, PodTemplateSpec>, kube::Error> {
    let keep = |kind: WorkloadKind, meta: ObjectMeta, template: Option<PodTemplateSpec>| {
        let key = (kind, meta.namespace?, meta.name?);
        wanted.contains_key(&key).then_some((key, template?))
    };
    let mut templates = HashMap::new();
    templates.extend(
        list_in_namespaces(client, namespaces, |d: Deployment| {
            keep(
                WorkloadKind::Deployment,
                d.metadata,
                d.spec.map(|s| s.template),
            )
        })
        .await?,
    );
    templates.extend(
        list_in_namespaces(client, namespaces, |s: StatefulSet| {
            keep(
                WorkloadKind::StatefulSet,
                s.metadata,
                s.spec.map(|s| s.template),
            )
        })
        .await?,
    );
    templates.extend(
        list_in_namespaces(client, namespaces, |d: DaemonSet| {
            keep(
                WorkloadKind::DaemonSet,
                d.metadata,
                d.spec.map(|s| s.template),
            )
        })
        .await?,
    );
    Ok(templates)
}

/// What a new pod of each carrier gets, in the carriers' order: two dry-run creates per
/// distinct template and namespace, a few at a time.
pub(crate) async fn ask(
    client: &Client,
    carriers: &[Carrier],
    names: &ForeignSidecars,
) -> Vec<Result<Expected, DryRunError>> {
    let mut distinct: Vec<(&str, &str, &PodTemplateSpec)> = Vec::new();
    let mut which: HashMap<(String, String), usize> = HashMap::new();
    let slots: Vec<usize> = carriers
        .iter()
        .map(|c| {
            let key = (c.namespace.clone(), template_key(&c.template));
            *which.entry(key).or_insert_with(|| {
                distinct.push((&c.namespace, &c.name, &c.template));
                distinct.len() - 1
            })
        })
        .collect();
    let answers: Vec<Result<Expected, DryRunError>> = futures::stream::iter(distinct)
        .map(|(namespace, name, template)| expected(client, namespace, name, template, names))
        .buffered(DRY_RUNS_IN_FLIGHT)
        .collect()
        .await;
    slots.into_iter().map(|i| answers[i].clone()).collect()
}

/// The template as JSON: k8s-openapi writes fields in a fixed order and maps sorted, so equal
/// templates give equal text.
fn template_key(template: &PodTemplateSpec) -> String {
    serde_json::to_string(template).unwrap_or_default()
}

/// What a new pod of the workload `name` gets: the template created twice as a dry run, so
/// that what varies per admission shows.
pub(crate) async fn expected(
    client: &Client,
    namespace: &str,
    name: &str,
    template: &PodTemplateSpec,
    names: &ForeignSidecars,
) -> Result<Expected, DryRunError> {
    let pod = Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(namespace.to_owned()),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone()),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    let spec_of = |answer: Result<Pod, kube::Error>| {
        answer
            .map_err(|err| DryRunError::of(namespace, &err))
            .map(|pod| pod.spec.unwrap_or_default())
    };
    let first = spec_of(super::dry_run::create_pod(client, namespace, &pod).await)?;
    let second = spec_of(super::dry_run::create_pod(client, namespace, &pod).await)?;
    let template = template.spec.clone().unwrap_or_default();
    Ok(Expected::from_answers(&template, &first, &second, names))
}

/// `rollout --foreign-sidecar`: the pods (by uid) that differ from what a new pod of their
/// workload gets, why each workload and container is chosen, and the dry runs that failed
/// (their workloads are left out: nothing is restarted on a guess).
#[derive(Debug, Default)]
pub(crate) struct ForeignChoice {
    pub(crate) pods: std::collections::HashSet<String>,
    pub(crate) reasons: BTreeMap<(WorkloadRef, String), RowReason>,
    pub(crate) errors: Vec<DryRunError>,
}

pub(crate) async fn choose(
    client: &Client,
    namespaces: &[String],
    names: &ForeignSidecars,
) -> Result<ForeignChoice, kube::Error> {
    let carriers = carriers(client, namespaces, names).await?;
    let answers = ask(client, &carriers, names).await;
    let mut choice = ForeignChoice::default();
    for (carrier, answer) in carriers.iter().zip(answers) {
        let expected = match answer {
            Ok(expected) => expected,
            Err(err) => {
                choice.errors.push(err);
                continue;
            }
        };
        let pods: Vec<&PodSpec> = carrier.pods.iter().map(|p| &p.spec).collect();
        for i in foreign_pods_to_replace(&expected, &pods, names) {
            choice.pods.insert(carrier.pods[i].uid.clone());
        }
        let (_, rows) = foreign_rows(
            &[ForeignWorkload {
                kind: carrier.kind,
                namespace: &carrier.namespace,
                name: &carrier.name,
                expected: Ok(&expected),
                pods,
            }],
            names,
        );
        let workload = WorkloadRef::new(carrier.kind, &carrier.namespace, &carrier.name);
        for row in rows.into_iter().filter(|r| r.needs_restart) {
            choice
                .reasons
                .insert((workload.clone(), row.sidecar), row.why);
        }
    }
    Ok(choice)
}
