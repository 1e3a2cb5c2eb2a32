//! The failed workloads of a campaign, written compactly in the status ConfigMap.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::workload::{WorkloadKind, WorkloadRef};

/// Workloads, written as `{namespace: ["Kind/name", ...]}`: about 45 bytes each in the
/// status ConfigMap, where a [`Failure`] takes about 320.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedWorkloads(BTreeSet<WorkloadRef>);

impl FailedWorkloads {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, workload: &WorkloadRef) -> bool {
        self.0.contains(workload)
    }

    pub fn insert(&mut self, workload: WorkloadRef) -> bool {
        self.0.insert(workload)
    }
}

impl Serialize for FailedWorkloads {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut by_namespace: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for workload in &self.0 {
            by_namespace
                .entry(&workload.namespace)
                .or_default()
                .push(format!("{}/{}", workload.kind, workload.name));
        }
        by_namespace.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FailedWorkloads {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_namespace = BTreeMap::<String, Vec<String>>::deserialize(deserializer)?;
        let mut workloads = BTreeSet::new();
        for (namespace, names) in by_namespace {
            for entry in names {
                let workload = entry
                    .split_once('/')
                    .and_then(|(kind, name)| {
                        let kind = WorkloadKind::from_name(kind)?;
                        (!name.is_empty()).then(|| WorkloadRef::new(kind, &namespace, name))
                    })
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "failedWorkloads: {entry:?} in namespace {namespace:?} is not Kind/name (Deployment, StatefulSet, DaemonSet or Pod)"
                        ))
                    })?;
                workloads.insert(workload);
            }
        }
        Ok(Self(workloads))
    }
}
