//! How a restarted workload that no longer has pods in the report ends: every workload a run
//! restarted must end in exactly one outcome, and one whose pods all went (scaled to zero,
//! deleted, a bare pod evicted) would otherwise be neither succeeded nor failed.

use std::collections::{BTreeMap, BTreeSet};

use super::health::rolled_out;
use crate::drift::{DriftIndex, DriftReport};
use crate::workload::WorkloadRef;

/// The end of a restarted workload that has no pods left to judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PodlessOutcome {
    /// Still there and rolled out, with no pod left on an old revision (scaled to zero).
    Succeeded,
    /// No longer exists: deleted, or a bare pod evicted (nothing recreates it).
    Gone,
}

/// For each of `restarted` with no row in `report`: its outcome, or nothing while its
/// controller is still rolling.
pub fn podless_outcomes(
    restarted: &BTreeSet<WorkloadRef>,
    report: &DriftReport,
    index: &DriftIndex,
) -> BTreeMap<WorkloadRef, PodlessOutcome> {
    // Called on every plan: nothing to look up while nothing awaits an outcome.
    if restarted.is_empty() {
        return BTreeMap::new();
    }
    let with_pods: BTreeSet<(&str, &str, &str)> = report
        .workloads
        .iter()
        .map(|w| (w.kind.as_str(), w.namespace.as_str(), w.name.as_str()))
        .collect();
    restarted
        .iter()
        .filter(|w| !with_pods.contains(&(w.kind.as_str(), w.namespace.as_str(), w.name.as_str())))
        .filter_map(|w| {
            let outcome = match w.controller_kind() {
                None => PodlessOutcome::Gone,
                Some(kind) => match index.workload(kind, &w.namespace, &w.name) {
                    None => PodlessOutcome::Gone,
                    Some(entry) if rolled_out(kind, entry) => PodlessOutcome::Succeeded,
                    Some(_) => return None,
                },
            };
            Some((w.clone(), outcome))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::{DriftPolicy, WorkloadEntry};
    use crate::workload::WorkloadKind;

    fn entry(replicas: i32, rolled: bool) -> WorkloadEntry {
        WorkloadEntry {
            generation: Some(2),
            observed_generation: Some(if rolled { 2 } else { 1 }),
            replicas: Some(replicas),
            status_replicas: Some(replicas),
            updated_replicas: Some(replicas),
            ready_replicas: Some(replicas),
            available_replicas: Some(replicas),
            ..Default::default()
        }
    }

    #[test]
    fn a_restarted_workload_without_pods_still_ends_in_one_outcome() {
        let mut index = DriftIndex::default();
        index.apply_workload_entry(WorkloadKind::Deployment, "team", "scaled", entry(0, true));
        index.apply_workload_entry(WorkloadKind::Deployment, "team", "rolling", entry(0, false));
        let restarted: BTreeSet<WorkloadRef> = [
            WorkloadRef::new(WorkloadKind::Deployment, "team", "scaled"),
            WorkloadRef::new(WorkloadKind::Deployment, "team", "rolling"),
            WorkloadRef::new(WorkloadKind::Deployment, "team", "deleted"),
            WorkloadRef::new(WorkloadKind::Pod, "team", "lonely"),
        ]
        .into_iter()
        .collect();
        let report = index.classify_revisions(&Default::default(), &DriftPolicy::default());
        let outcomes = podless_outcomes(&restarted, &report, &index);
        let named: Vec<(&str, PodlessOutcome)> = outcomes
            .iter()
            .map(|(w, o)| (w.name.as_str(), *o))
            .collect();
        assert_eq!(
            named,
            [
                ("deleted", PodlessOutcome::Gone),
                ("scaled", PodlessOutcome::Succeeded),
                ("lonely", PodlessOutcome::Gone),
            ]
        );
    }
}
