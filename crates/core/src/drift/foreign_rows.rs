//! The drift report's rows for foreign sidecars: one row per workload and named container,
//! and one per named container, counted as our own sidecars are.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;

use super::{DriftState, RowReason, SidecarDrift, SidecarForm, StateCounts, WorkloadDrift};
use crate::foreign::{Expected, ForeignChange, ForeignSidecars};
use crate::workload::{OwnerKind, WorkloadKind};

/// A workload whose pods carry a named sidecar, or whose new pods get one.
#[derive(Clone, Debug)]
pub struct ForeignWorkload<'a> {
    pub kind: WorkloadKind,
    pub namespace: &'a str,
    pub name: &'a str,
    /// What a new pod gets; the error of the dry run when the API server did not say.
    pub expected: Result<&'a Expected, &'a str>,
    /// Its running pods (not terminating).
    pub pods: Vec<&'a PodSpec>,
}

/// The rows of `workloads` for the drift report: sidecars by container name, workloads in
/// the order given.
pub fn foreign_rows(
    workloads: &[ForeignWorkload<'_>],
    names: &ForeignSidecars,
) -> (Vec<SidecarDrift>, Vec<WorkloadDrift>) {
    let mut rows = Vec::new();
    for workload in workloads {
        workload_rows(workload, names, &mut rows);
    }
    let mut totals: BTreeMap<String, (StateCounts, u32)> = BTreeMap::new();
    for row in &rows {
        let (pods, native) = totals.entry(row.sidecar.clone()).or_default();
        for state in DriftState::POD_STATES {
            pods.add_many(state, row.pods.get(state));
        }
        *native += row.native;
    }
    let sidecars = totals
        .into_iter()
        .map(|(name, (pods, native))| SidecarDrift {
            name,
            revision: None,
            pods,
            native,
            campaign: None,
            expected_end: None,
            note: None,
            foreign: true,
        })
        .collect();
    (sidecars, rows)
}

fn workload_rows(
    workload: &ForeignWorkload<'_>,
    names: &ForeignSidecars,
    rows: &mut Vec<WorkloadDrift>,
) {
    let mut containers: BTreeSet<String> = workload
        .pods
        .iter()
        .flat_map(|pod| names.carried_by(pod))
        .map(str::to_owned)
        .collect();
    let judgements = match workload.expected {
        Ok(expected) => {
            containers.extend(expected.containers().map(str::to_owned));
            workload
                .pods
                .iter()
                .map(|pod| Some(expected.judge(pod, names)))
                .collect()
        }
        Err(_) => vec![None; workload.pods.len()],
    };
    for container in containers {
        let mut pods = StateCounts::default();
        let mut native = 0;
        let mut injected = 0;
        let mut first_stale = None;
        for (pod, judgement) in workload.pods.iter().zip(&judgements) {
            let form = form_of(pod, &container);
            if form.is_some() {
                injected += 1;
            }
            if form == Some(SidecarForm::Native) {
                native += 1;
            }
            let state = match judgement {
                None => DriftState::Unknown,
                Some(judgement) => {
                    let changes: Vec<ForeignChange> = judgement
                        .changes
                        .iter()
                        .filter(|c| c.concerns(&container))
                        .cloned()
                        .collect();
                    let state = foreign_pod_state(&changes, &container);
                    if state != DriftState::Current && first_stale.is_none() {
                        first_stale = Some((judgement.revision.clone(), changes));
                    }
                    state
                }
            };
            pods.add_many(state, 1);
        }
        let state = DriftState::POD_STATES
            .into_iter()
            .filter(|s| pods.get(*s) > 0)
            .max_by_key(|s| s.severity())
            .unwrap_or(DriftState::Current);
        let why = match (workload.expected, first_stale) {
            (Err(error), _) => RowReason::ForeignNotAsked {
                error: error.to_owned(),
            },
            (Ok(expected), Some((from, changes))) => RowReason::Foreign {
                from,
                to: expected.revision().to_owned(),
                changes,
            },
            (Ok(_), None) => RowReason::Counts,
        };
        rows.push(WorkloadDrift {
            kind: OwnerKind::Workload(workload.kind),
            namespace: workload.namespace.to_owned(),
            name: workload.name.to_owned(),
            sidecar: container,
            state,
            reason: String::new(),
            why,
            pods,
            form: match (injected, native) {
                (0, _) => None,
                (_, 0) => Some(SidecarForm::Classic),
                (all, native) if all == native => Some(SidecarForm::Native),
                _ => Some(SidecarForm::Mixed),
            },
            native,
            needs_restart: state.needs_restart(false),
        });
    }
}

/// Which of a workload's `pods` differ from what a new pod gets of the named sidecars (by
/// index): those a restart replaces.
pub fn foreign_pods_to_replace(
    expected: &Expected,
    pods: &[&PodSpec],
    names: &ForeignSidecars,
) -> Vec<usize> {
    pods.iter()
        .enumerate()
        .filter(|(_, pod)| !expected.judge(pod, names).is_current())
        .map(|(i, _)| i)
        .collect()
}

/// A pod without a sidecar that a new pod gets was never injected with it; any other
/// difference makes it stale.
pub fn foreign_pod_state(changes: &[ForeignChange], container: &str) -> DriftState {
    if changes.is_empty() {
        DriftState::Current
    } else if changes
        .iter()
        .any(|c| matches!(c, ForeignChange::Missing { container: c } if c == container))
    {
        DriftState::Uninjected
    } else {
        DriftState::Stale
    }
}

fn form_of(pod: &PodSpec, container: &str) -> Option<SidecarForm> {
    if pod.containers.iter().any(|c| c.name == container) {
        return Some(SidecarForm::Classic);
    }
    pod.init_containers
        .iter()
        .flatten()
        .find(|c| c.name == container)
        .map(|c| {
            if c.restart_policy.as_deref() == Some("Always") {
                SidecarForm::Native
            } else {
                SidecarForm::Classic
            }
        })
}
