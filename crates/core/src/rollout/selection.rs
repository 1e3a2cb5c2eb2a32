//! `rollout --sidecar-container-name`: the k8s-sidecar-rollout way of choosing what to restart,
//! for sidecars another system injected (no revision to compare). A workload is chosen when one
//! of its pods runs a container of that name and started before `--only-started-before`; it is
//! done once those pods are gone. Pure: the pod specs are listed once by the caller, and which
//! of the chosen pods still exist comes in as a set of uids.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::drift::{
    DriftPolicy, DriftReport, DriftState, PodToReplace, StateCounts, WorkloadDrift,
};
use crate::rollout::SidecarTarget;
use crate::workload::{PodWorkload, ReplicaSetOwner, WorkloadRef, resolve_pod_owner};

/// What the selection needs of a pod: never its whole spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSummary {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The controlling owner's kind and name.
    pub controller: Option<(String, String)>,
    /// Names of its containers and init containers.
    pub containers: Vec<String>,
    /// When it started (`status.startTime`, else its creation).
    pub started: Option<Timestamp>,
}

impl PodSummary {
    /// `None` for a terminating pod: it is already going away.
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let meta = &pod.metadata;
        if meta.deletion_timestamp.is_some() {
            return None;
        }
        let spec = pod.spec.as_ref();
        let containers = spec
            .into_iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .map(|c| c.name.clone())
            .collect();
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(meta.creation_timestamp.as_ref())
            .map(|t| t.0);
        Some(Self {
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            controller: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| (o.kind.clone(), o.name.clone())),
            containers,
            started,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SelectedPod {
    pub name: String,
    pub uid: String,
    /// Which of the named containers it runs.
    pub containers: BTreeSet<String>,
}

/// A pod that runs a named container but whose workload cannot be restarted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkippedPod {
    pub namespace: String,
    pub name: String,
    #[serde(serialize_with = "super::plan::serialize_display")]
    pub reason: NotSelected,
}

/// Why a pod running a named container is not restarted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSelected {
    #[error("owned by ReplicaSet {0}, which no Deployment controls")]
    ReplicaSetWithoutDeployment(String),
    #[error("owned by Job {0}, which is not restarted")]
    Job(String),
    #[error("owned by {kind} {name}, which is not restarted")]
    Other { kind: String, name: String },
    #[error("a bare pod")]
    BarePod,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSelection {
    pub containers: Vec<String>,
    pub started_before: Timestamp,
    pub workloads: BTreeMap<WorkloadRef, Vec<SelectedPod>>,
    pub skipped: Vec<SkippedPod>,
    /// Why each (workload, container) was chosen, when not by start time alone: the foreign
    /// sidecar's changes of `rollout --foreign-sidecar`.
    #[serde(skip)]
    pub reasons: BTreeMap<(WorkloadRef, String), crate::drift::RowReason>,
}

pub struct SelectionInput<'a> {
    pub pods: &'a [PodSummary],
    pub containers: &'a [String],
    pub started_before: Timestamp,
    pub policy: &'a DriftPolicy,
    /// The Deployment that controls a ReplicaSet, by namespace and ReplicaSet name.
    pub deployment_of: &'a dyn Fn(&'a str, &'a str) -> Option<&'a str>,
}

/// The sidecar name the planner knows a container selection by.
pub fn selection_key(container: &str) -> String {
    format!("container/{container}")
}

pub fn select(input: SelectionInput<'_>) -> ContainerSelection {
    let SelectionInput {
        pods,
        containers,
        started_before,
        policy,
        deployment_of,
    } = input;
    let wanted: BTreeSet<&str> = containers.iter().map(String::as_str).collect();
    let mut workloads: BTreeMap<WorkloadRef, Vec<SelectedPod>> = BTreeMap::new();
    let mut skipped = Vec::new();
    for pod in pods {
        let matched: BTreeSet<String> = pod
            .containers
            .iter()
            .filter(|c| wanted.contains(c.as_str()))
            .cloned()
            .collect();
        if matched.is_empty()
            || policy.namespace_exclusion(&pod.namespace).is_some()
            || pod.started.is_none_or(|t| t >= started_before)
        {
            continue;
        }
        let controller = pod
            .controller
            .as_ref()
            .map(|(kind, name)| (kind.as_str(), name.as_str()));
        let replicaset_owner = |rs| match deployment_of(&pod.namespace, rs) {
            Some(deployment) => ReplicaSetOwner::Deployment(deployment),
            None => ReplicaSetOwner::NoDeployment,
        };
        let reason = match resolve_pod_owner(
            controller,
            &pod.name,
            policy.evict_bare_pods,
            replicaset_owner,
        ) {
            PodWorkload::Workload(kind, name) => {
                let workload = WorkloadRef::new(kind, &pod.namespace, name);
                workloads.entry(workload).or_default().push(SelectedPod {
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                    containers: matched,
                });
                continue;
            }
            PodWorkload::ReplicaSetWithoutDeployment(rs) | PodWorkload::ReplicaSetNotKnown(rs) => {
                NotSelected::ReplicaSetWithoutDeployment(rs.to_owned())
            }
            PodWorkload::Job(name) => NotSelected::Job(name.to_owned()),
            PodWorkload::Other { kind, name } => NotSelected::Other {
                kind: kind.to_owned(),
                name: name.to_owned(),
            },
            PodWorkload::BarePod => NotSelected::BarePod,
        };
        skipped.push(SkippedPod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            reason,
        });
    }
    ContainerSelection {
        containers: containers.to_vec(),
        started_before,
        workloads,
        skipped,
        reasons: BTreeMap::new(),
    }
}

impl ContainerSelection {
    /// The `NS/rollout-revision` value of this run: one per `--only-started-before`, so that a
    /// later run with a later time restarts again, and a workload patched by this run is
    /// waited on, not patched twice.
    pub fn revision(&self) -> String {
        self.started_before
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    pub fn targets(&self) -> BTreeMap<String, SidecarTarget> {
        self.containers
            .iter()
            .map(|c| {
                (
                    selection_key(c),
                    SidecarTarget {
                        revision: self.revision(),
                        manual: false,
                        in_place: false,
                        changes: None,
                        changes_from: BTreeMap::new(),
                        checks: Vec::new(),
                        containers: Vec::new(),
                    },
                )
            })
            .collect()
    }

    /// The chosen pods as drift rows: a workload is stale while any of its chosen pods still
    /// exists (`live` holds the uids of the pods that do).
    pub fn report(&self, live: &HashSet<String>) -> DriftReport {
        let mut workloads = Vec::new();
        for (workload, pods) in &self.workloads {
            for container in &self.containers {
                let with: Vec<&SelectedPod> = pods
                    .iter()
                    .filter(|p| p.containers.contains(container))
                    .collect();
                if with.is_empty() {
                    continue;
                }
                let remaining = with.iter().filter(|p| live.contains(&p.uid)).count() as u32;
                let pods = StateCounts {
                    stale: remaining,
                    current: with.len() as u32 - remaining,
                    ..Default::default()
                };
                let state = if remaining > 0 {
                    DriftState::Stale
                } else {
                    DriftState::Current
                };
                workloads.push(WorkloadDrift {
                    kind: workload.kind.into(),
                    namespace: workload.namespace.clone(),
                    name: workload.name.clone(),
                    sidecar: selection_key(container),
                    state,
                    reason: String::new(),
                    why: self
                        .reasons
                        .get(&(workload.clone(), container.clone()))
                        .cloned()
                        .unwrap_or_else(|| crate::drift::RowReason::StartedBefore {
                            container: container.clone(),
                            before: self.revision(),
                            total: with.len(),
                        }),
                    pods,
                    // Chosen by container name, not by config: no form to tell.
                    form: None,
                    native: 0,
                    needs_restart: remaining > 0,
                });
            }
        }
        DriftReport {
            sidecars: Vec::new(),
            workloads,
        }
    }

    /// A workload's chosen pods that still exist, by name, sorted (what an OnDelete workload
    /// evicts next).
    pub fn pods_needing_restart(
        &self,
        workload: &WorkloadRef,
        live: &HashSet<String>,
    ) -> Vec<PodToReplace> {
        // Chosen by uid: a replacement under the same name is never among them.
        let mut pods: Vec<PodToReplace> = self
            .workloads
            .get(workload)
            .into_iter()
            .flatten()
            .filter(|p| live.contains(&p.uid))
            .map(|p| PodToReplace::injected(&p.name))
            .collect();
        pods.sort();
        pods
    }

    /// The `NS/rollout-reason` of a restart.
    pub fn selected(&self, workload: &WorkloadRef) -> SelectedPods {
        let pods = self
            .workloads
            .get(workload)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let containers: BTreeSet<&str> = pods
            .iter()
            .flat_map(|p| p.containers.iter().map(String::as_str))
            .collect();
        SelectedPods {
            containers: containers.into_iter().map(str::to_owned).collect(),
            pods: pods.len(),
            started_before: self.revision(),
        }
    }
}

/// The pods of a workload chosen by container name: why it is restarted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectedPods {
    pub containers: Vec<String>,
    pub pods: usize,
    pub started_before: String,
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
