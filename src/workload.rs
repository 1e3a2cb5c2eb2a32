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

    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "Deployment" => Some(WorkloadKind::Deployment),
            "StatefulSet" => Some(WorkloadKind::StatefulSet),
            "DaemonSet" => Some(WorkloadKind::DaemonSet),
            "Pod" => Some(WorkloadKind::Pod),
            _ => None,
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
    fn kinds_read_back_what_they_print() {
        for kind in [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
            WorkloadKind::Pod,
        ] {
            assert_eq!(WorkloadKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(WorkloadKind::parse("ReplicaSet"), None);
        assert!(!WorkloadKind::Pod.is_controller());
        assert_eq!(WorkloadKind::Pod.api_version(), "v1");
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
