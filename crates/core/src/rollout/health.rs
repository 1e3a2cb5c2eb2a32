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

/// What is wrong with a pod's containers, as a person reads it: each container that
/// restarted, is waiting for anything but its creation (a back-off, an image it cannot pull),
/// or has terminated, with what its status says; `None` when nothing is. A container merely
/// not ready yet (a new pod of a scale-up) is not a problem.
#[cfg(test)]
pub fn container_problems(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    container_problems_since(pod, None)
}

/// The statuses of a pod's containers that keep running: its containers and its native
/// sidecars (init containers with `restartPolicy: Always`); an init container that ran to
/// completion has terminated on purpose.
pub fn running_statuses(
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Vec<&k8s_openapi::api::core::v1::ContainerStatus> {
    let native: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| crate::config::is_native_sidecar(c))
        .map(|c| c.name.as_str())
        .collect();
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(
            status
                .init_container_statuses
                .iter()
                .flatten()
                .filter(|s| native.contains(&s.name.as_str())),
        )
        .collect()
}

/// [`container_problems`], counting restarts from `baseline` (each container's restart count
/// when the pod was upgraded in place, the upgraded container having restarted on purpose).
pub fn container_problems_since(
    pod: &k8s_openapi::api::core::v1::Pod,
    baseline: Option<&std::collections::BTreeMap<String, i32>>,
) -> Option<String> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let statuses = running_statuses(pod);
    let problems: Vec<String> = statuses
        .iter()
        .filter_map(|c| {
            let waiting = c
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone())
                .filter(|r| r != "ContainerCreating" && r != "PodInitializing");
            let terminated = c.state.as_ref().is_some_and(|s| s.terminated.is_some());
            let last = c
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.state.as_ref().and_then(|s| s.terminated.as_ref()))
                .map(|t| match t.reason.as_deref() {
                    Some(reason) => format!("last exit: {reason}, code {}", t.exit_code),
                    None => format!("last exit: code {}", t.exit_code),
                });
            let mut what = Vec::new();
            let before = baseline.and_then(|b| b.get(&c.name)).copied().unwrap_or(0);
            let restarts = c.restart_count - before;
            if restarts > 0 {
                let times = if restarts == 1 { "time" } else { "times" };
                what.push(format!("restarted {restarts} {times}"));
            }
            what.extend(waiting);
            if !what.is_empty() || terminated {
                what.extend(last);
            }
            (!what.is_empty()).then(|| format!("container {} ({})", c.name, what.join(", ")))
        })
        .collect();
    (!problems.is_empty()).then(|| format!("pod {name}: {}", problems.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(statuses: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1"},
            "status": {"containerStatuses": statuses}
        }))
        .unwrap()
    }

    #[test]
    fn container_problems_name_the_container_and_what_happened() {
        let healthy = pod(serde_json::json!([
            {"name": "app", "ready": true, "restartCount": 0, "image": "", "imageID": "", "state": {"running": {}}}
        ]));
        assert_eq!(container_problems(&healthy), None);
        let crashing = pod(serde_json::json!([
            {"name": "app", "ready": true, "restartCount": 0, "image": "", "imageID": "", "state": {"running": {}}},
            {"name": "tracer", "ready": false, "restartCount": 2, "image": "", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}
        ]));
        assert_eq!(
            container_problems(&crashing).as_deref(),
            Some(
                "pod web-1: container tracer (restarted 2 times, CrashLoopBackOff, last exit: Error, code 3)"
            )
        );
        let oom = pod(serde_json::json!([
            {"name": "tracer", "ready": true, "restartCount": 1, "image": "", "imageID": "",
             "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
        ]));
        assert_eq!(
            container_problems(&oom).as_deref(),
            Some("pod web-1: container tracer (restarted 1 time, last exit: OOMKilled, code 137)")
        );
        let exited = pod(serde_json::json!([
            {"name": "tracer", "ready": false, "restartCount": 0, "image": "", "imageID": "",
             "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
        ]));
        assert_eq!(
            container_problems(&exited).as_deref(),
            Some("pod web-1: container tracer (last exit: Error, code 3)")
        );
        // Not ready yet, or still being created: a scale-up's new pod, no problem.
        let starting = pod(serde_json::json!([
            {"name": "app", "ready": false, "restartCount": 0, "image": "", "imageID": "", "state": {"running": {}}},
            {"name": "tracer", "ready": false, "restartCount": 0, "image": "", "imageID": "",
             "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]));
        assert_eq!(container_problems(&starting), None);
    }
}
