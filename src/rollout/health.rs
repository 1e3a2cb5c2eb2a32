//! kubectl's rollout-status rule per kind: when a workload counts as rolled out.

use crate::drift::WorkloadEntry;
use crate::workload::{UpdateStrategy, WorkloadKind};

/// kubectl's rollout-status rule for the kind; OnDelete workloads count as rolled out once
/// observed and all ready (their pods' revisions are checked apart).
pub fn rolled_out(kind: WorkloadKind, w: &WorkloadEntry) -> bool {
    let observed = match (w.generation, w.observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        (None, _) => true,
        (Some(_), None) => false,
    };
    if !observed {
        return false;
    }
    let on_delete = w.update_strategy == UpdateStrategy::OnDelete;
    let updated = w.updated_replicas.unwrap_or(0);
    match kind {
        WorkloadKind::Deployment => {
            let wanted = w.replicas.unwrap_or(1);
            updated >= wanted
                && w.status_replicas.unwrap_or(0) <= updated
                && w.available_replicas.unwrap_or(0) >= updated
        }
        WorkloadKind::StatefulSet => {
            let wanted = w.replicas.unwrap_or(1);
            if w.ready_replicas.unwrap_or(0) < wanted {
                return false;
            }
            if on_delete {
                return true;
            }
            match w.partition.filter(|p| *p > 0) {
                Some(partition) => updated >= wanted - partition,
                None => !w.update_revision_pending,
            }
        }
        // A bare pod is evicted, not rolled: nothing is left to wait for.
        WorkloadKind::Pod => true,
        WorkloadKind::DaemonSet => {
            let desired = w.replicas.unwrap_or(0);
            (on_delete || updated >= desired) && w.available_replicas.unwrap_or(0) >= desired
        }
    }
}

pub(super) fn progress(kind: WorkloadKind, w: &WorkloadEntry) -> String {
    let wanted = w.replicas.unwrap_or(0);
    match kind {
        WorkloadKind::Deployment => format!(
            "{} of {wanted} updated, {} available",
            w.updated_replicas.unwrap_or(0),
            w.available_replicas.unwrap_or(0)
        ),
        _ => format!(
            "{} of {wanted} updated, {} ready",
            w.updated_replicas.unwrap_or(0),
            w.ready_replicas.unwrap_or(0)
        ),
    }
}
