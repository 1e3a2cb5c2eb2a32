//! Workloads as the drift index and the rollout planner name them: the kinds the engine can
//! restart (a bare pod included: it is evicted, not recreated), a typed reference to one, the
//! owners a pod may report instead, and update strategies. Pure.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

/// What the rollout engine can restart. `Pod` is a bare pod (no controller): with
/// `--evict-bare-pods` it is evicted, and nothing recreates it. Ordered by name, as the
/// reports and plans list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    Pod,
}

impl WorkloadKind {
    /// The controllers whose pod template the engine stamps.
    pub const CONTROLLERS: [WorkloadKind; 3] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::Pod => "Pod",
        }
    }

    /// The kind named as [`Self::as_str`] spells it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::CONTROLLERS
            .into_iter()
            .chain([WorkloadKind::Pod])
            .find(|kind| kind.as_str() == name)
    }

    /// The kind a kubectl resource name means, as `kubectl get` takes it: singular, plural or
    /// short, any case, a workload's with or without its group (`deploy`, `Deployments`,
    /// `deployment.apps`, `deployment.v1.apps`; `po`, `pods`).
    pub fn from_resource(resource: &str) -> Option<Self> {
        let (name, group) = resource_name_and_group(resource);
        let kind = match name.as_str() {
            "po" | "pod" | "pods" => WorkloadKind::Pod,
            "deploy" | "deployment" | "deployments" => WorkloadKind::Deployment,
            "sts" | "statefulset" | "statefulsets" => WorkloadKind::StatefulSet,
            "ds" | "daemonset" | "daemonsets" => WorkloadKind::DaemonSet,
            _ => return None,
        };
        let groups: &[&str] = match kind {
            WorkloadKind::Pod => &[],
            _ => &["apps", "v1.apps"],
        };
        match group {
            Some(group) if !groups.contains(&group.as_str()) => None,
            _ => Some(kind),
        }
    }

    /// A controller that rolls its pods from a template (everything but a bare pod).
    pub fn is_controller(self) -> bool {
        self != WorkloadKind::Pod
    }

    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::Pod => "v1",
            _ => "apps/v1",
        }
    }
}

/// A kubectl resource name as `kubectl get` takes it (any case), cut at its first dot into
/// the name and the group: `Deployment.v1.apps` is (`deployment`, `v1.apps`).
pub fn resource_name_and_group(resource: &str) -> (String, Option<String>) {
    let resource = resource.to_ascii_lowercase();
    match resource.split_once('.') {
        Some((name, group)) => (name.to_owned(), Some(group.to_owned())),
        None => (resource, None),
    }
}

impl PartialOrd for WorkloadKind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorkloadKind {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One workload, by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkloadRef {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

impl WorkloadRef {
    pub fn new(kind: WorkloadKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The controller that rolls this workload's pods; `None` for a bare pod.
    pub fn controller_kind(&self) -> Option<WorkloadKind> {
        self.kind.is_controller().then_some(self.kind)
    }
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// Whom a drift row belongs to: a workload the engine can restart, or an owner it never
/// touches (reported only). Shown and ordered by its kind's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    Workload(WorkloadKind),
    /// A ReplicaSet without a Deployment, or whose Deployment is not known yet.
    ReplicaSet,
    Job,
    /// Any other controller (a custom resource, a CronJob's Job...).
    Other(String),
}

impl OwnerKind {
    pub fn as_str(&self) -> &str {
        match self {
            OwnerKind::Workload(kind) => kind.as_str(),
            OwnerKind::ReplicaSet => "ReplicaSet",
            OwnerKind::Job => "Job",
            OwnerKind::Other(kind) => kind,
        }
    }

    /// The kind an owner reference names, read once where the reference is read.
    pub fn parse(kind: &str) -> OwnerKind {
        match WorkloadKind::from_name(kind) {
            Some(WorkloadKind::Pod) | None => [OwnerKind::ReplicaSet, OwnerKind::Job]
                .into_iter()
                .find(|known| known.as_str() == kind)
                .unwrap_or_else(|| OwnerKind::Other(kind.to_owned())),
            Some(workload) => OwnerKind::Workload(workload),
        }
    }

    pub fn workload(&self) -> Option<WorkloadKind> {
        match self {
            OwnerKind::Workload(kind) => Some(*kind),
            _ => None,
        }
    }
}

impl From<WorkloadKind> for OwnerKind {
    fn from(kind: WorkloadKind) -> Self {
        OwnerKind::Workload(kind)
    }
}

impl fmt::Display for OwnerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialOrd for OwnerKind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OwnerKind {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Serialize for OwnerKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The workload a pod belongs to, from its controller: the one rule for the drift index and
/// the selection by container name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodWorkload<'a> {
    /// A workload the engine can restart (a bare pod when bare pods are evicted).
    Workload(WorkloadKind, &'a str),
    /// Its ReplicaSet has no Deployment: nothing would roll it.
    ReplicaSetWithoutDeployment(&'a str),
    /// Its ReplicaSet has not been seen yet.
    ReplicaSetNotKnown(&'a str),
    /// A Job's pod runs to completion.
    Job(&'a str),
    /// Another controller, never restarted.
    Other { kind: &'a str, name: &'a str },
    /// No controller, and bare pods are not evicted.
    BarePod,
}

/// What the caller knows of a ReplicaSet's controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaSetOwner<'a> {
    Deployment(&'a str),
    NoDeployment,
    NotKnown,
}

/// Resolves a pod's controller `(kind, name)` to its workload. A ReplicaSet is followed to
/// its Deployment through `replicaset_owner`.
pub fn resolve_pod_owner<'a>(
    controller: Option<(&'a str, &'a str)>,
    pod_name: &'a str,
    evict_bare_pods: bool,
    replicaset_owner: impl FnOnce(&'a str) -> ReplicaSetOwner<'a>,
) -> PodWorkload<'a> {
    let Some((kind, name)) = controller else {
        return if evict_bare_pods {
            PodWorkload::Workload(WorkloadKind::Pod, pod_name)
        } else {
            PodWorkload::BarePod
        };
    };
    match OwnerKind::parse(kind) {
        OwnerKind::ReplicaSet => match replicaset_owner(name) {
            ReplicaSetOwner::Deployment(deployment) => {
                PodWorkload::Workload(WorkloadKind::Deployment, deployment)
            }
            ReplicaSetOwner::NoDeployment => PodWorkload::ReplicaSetWithoutDeployment(name),
            ReplicaSetOwner::NotKnown => PodWorkload::ReplicaSetNotKnown(name),
        },
        OwnerKind::Workload(workload @ (WorkloadKind::StatefulSet | WorkloadKind::DaemonSet)) => {
            PodWorkload::Workload(workload, name)
        }
        OwnerKind::Job => PodWorkload::Job(name),
        _ => PodWorkload::Other { kind, name },
    }
}

/// How the engine restarts a workload: by stamping its pod template (its controller rolls
/// it), or by evicting its stale pods one at a time (for templates a GitOps controller
/// reverts: the template is never written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RestartMethod {
    #[default]
    Template,
    Evict,
    /// The images of the injected containers patched in the live pods, one pod at a time (the
    /// engine's own choice when only images change: never a flag or annotation value).
    #[serde(rename = "in-place")]
    InPlace,
}

impl RestartMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            RestartMethod::Template => "template",
            RestartMethod::Evict => "evict",
            RestartMethod::InPlace => "in-place",
        }
    }

    /// `NS/restart-method`'s value; anything else is no choice.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "template" => Some(RestartMethod::Template),
            "evict" => Some(RestartMethod::Evict),
            _ => None,
        }
    }
}

/// A workload's `spec.updateStrategy.type` (`strategy.type` for a Deployment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateStrategy {
    #[default]
    RollingUpdate,
    /// The controller never replaces pods by itself: the engine evicts them one at a time.
    OnDelete,
    Recreate,
}

impl UpdateStrategy {
    /// As the API spells it; an absent or unknown value is the API's default, RollingUpdate.
    pub fn parse(text: Option<&str>) -> Self {
        match text {
            Some("OnDelete") => UpdateStrategy::OnDelete,
            Some("Recreate") => UpdateStrategy::Recreate,
            _ => UpdateStrategy::RollingUpdate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_pod_is_no_controller_and_lives_in_core_v1() {
        assert!(WorkloadKind::Deployment.is_controller());
        assert!(!WorkloadKind::Pod.is_controller());
        assert_eq!(WorkloadKind::Pod.api_version(), "v1");
    }

    #[test]
    fn resource_names_read_as_kubectl_reads_them() {
        for (resource, kind) in [
            ("deploy", WorkloadKind::Deployment),
            ("Deployment", WorkloadKind::Deployment),
            ("deployments.apps", WorkloadKind::Deployment),
            ("deployment.v1.apps", WorkloadKind::Deployment),
            ("sts", WorkloadKind::StatefulSet),
            ("statefulsets", WorkloadKind::StatefulSet),
            ("ds", WorkloadKind::DaemonSet),
            ("DaemonSet.apps", WorkloadKind::DaemonSet),
            ("po", WorkloadKind::Pod),
            ("pods", WorkloadKind::Pod),
        ] {
            assert_eq!(
                WorkloadKind::from_resource(resource),
                Some(kind),
                "{resource}"
            );
        }
        for resource in [
            "svc",
            "rs",
            "job",
            "deployment.batch",
            "pod.apps",
            "",
            "deploy.",
        ] {
            assert_eq!(WorkloadKind::from_resource(resource), None, "{resource}");
        }
    }

    #[test]
    fn a_reference_serializes_its_kind_as_the_api_name() {
        let workload = WorkloadRef::new(WorkloadKind::StatefulSet, "team-a", "db");
        let json = serde_json::to_value(&workload).unwrap();
        assert_eq!(json["kind"], "StatefulSet");
        assert_eq!(workload.to_string(), "StatefulSet/team-a/db");
        let back: WorkloadRef = serde_json::from_value(json).unwrap();
        assert_eq!(back, workload);
    }

    #[test]
    fn an_owner_reference_kind_is_read_into_its_type_and_printed_back() {
        for (name, kind) in [
            ("ReplicaSet", OwnerKind::ReplicaSet),
            ("Job", OwnerKind::Job),
            ("Deployment", OwnerKind::Workload(WorkloadKind::Deployment)),
            (
                "StatefulSet",
                OwnerKind::Workload(WorkloadKind::StatefulSet),
            ),
            ("DaemonSet", OwnerKind::Workload(WorkloadKind::DaemonSet)),
            // A pod owning a pod is no bare pod: it is some other controller.
            ("Pod", OwnerKind::Other("Pod".into())),
            ("Rollout", OwnerKind::Other("Rollout".into())),
            ("replicaset", OwnerKind::Other("replicaset".into())),
        ] {
            let parsed = OwnerKind::parse(name);
            assert_eq!(parsed, kind, "{name}");
            assert_eq!(parsed.as_str(), name);
        }
    }

    #[test]
    fn owner_kinds_sort_and_print_by_name() {
        let mut kinds = [
            OwnerKind::Workload(WorkloadKind::StatefulSet),
            OwnerKind::Other("CronJob".into()),
            OwnerKind::Job,
            OwnerKind::Workload(WorkloadKind::Deployment),
        ];
        kinds.sort();
        let names: Vec<&str> = kinds.iter().map(OwnerKind::as_str).collect();
        assert_eq!(names, ["CronJob", "Deployment", "Job", "StatefulSet"]);
        assert_eq!(
            serde_json::to_value(OwnerKind::ReplicaSet).unwrap(),
            "ReplicaSet"
        );
    }

    #[test]
    fn a_pod_belongs_to_the_workload_its_controller_rolls() {
        let known = |rs: &str| match rs {
            "web-5d8f" => ReplicaSetOwner::Deployment("web"),
            "orphan-1" => ReplicaSetOwner::NoDeployment,
            _ => ReplicaSetOwner::NotKnown,
        };
        let resolve = |controller, evict| resolve_pod_owner(controller, "p-0", evict, known);
        assert_eq!(
            resolve(Some(("ReplicaSet", "web-5d8f")), false),
            PodWorkload::Workload(WorkloadKind::Deployment, "web")
        );
        assert_eq!(
            resolve(Some(("ReplicaSet", "orphan-1")), false),
            PodWorkload::ReplicaSetWithoutDeployment("orphan-1")
        );
        assert_eq!(
            resolve(Some(("ReplicaSet", "new-1")), false),
            PodWorkload::ReplicaSetNotKnown("new-1")
        );
        assert_eq!(
            resolve(Some(("StatefulSet", "db")), false),
            PodWorkload::Workload(WorkloadKind::StatefulSet, "db")
        );
        assert_eq!(
            resolve(Some(("DaemonSet", "agent")), false),
            PodWorkload::Workload(WorkloadKind::DaemonSet, "agent")
        );
        assert_eq!(
            resolve(Some(("Job", "once")), true),
            PodWorkload::Job("once")
        );
        assert_eq!(
            resolve(Some(("Rollout", "canary")), true),
            PodWorkload::Other {
                kind: "Rollout",
                name: "canary"
            }
        );
        assert_eq!(resolve(None, false), PodWorkload::BarePod);
        assert_eq!(
            resolve(None, true),
            PodWorkload::Workload(WorkloadKind::Pod, "p-0")
        );
    }

    #[test]
    fn update_strategies_default_to_rolling_update() {
        assert_eq!(UpdateStrategy::parse(None), UpdateStrategy::RollingUpdate);
        assert_eq!(
            UpdateStrategy::parse(Some("OnDelete")),
            UpdateStrategy::OnDelete
        );
        assert_eq!(
            UpdateStrategy::parse(Some("Recreate")),
            UpdateStrategy::Recreate
        );
    }
}
