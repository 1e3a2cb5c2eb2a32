use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::annotations::AnnotationKeys;
use crate::config::RevisionStamp;
use crate::rollout::history::{HistoryEntry, Outcome, RevisionHistory};
use crate::rollout::in_place::{
    ContainerChange, Figure, InPlaceUpgrade, NotInPlace, QosClass, UpgradeProgress,
    container_changes, pod_patch, qos_class,
};

fn shipper(image: &str, resources: Value) -> Value {
    json!({"containers": [{"name": "shipper", "image": image, "resources": resources}]})
}

fn memory(quantity: &str) -> Figure {
    Figure {
        list: "requests".into(),
        resource: "memory".into(),
        quantity: quantity.into(),
    }
}

#[test]
fn cpu_and_memory_figures_are_resized_in_place_and_nothing_else_of_the_resources() {
    let from = shipper("s:1", json!({"requests": {"memory": "64Mi", "cpu": "50m"}}));
    let raised = shipper(
        "s:1",
        json!({"requests": {"memory": "128Mi", "cpu": "50m"}}),
    );
    assert_eq!(
        container_changes(&from, &raised).unwrap(),
        BTreeMap::from([(
            "shipper".into(),
            ContainerChange {
                image: None,
                resources: vec![memory("128Mi")]
            }
        )])
    );
    // An image and a limit added at once: both, in one change.
    let both = shipper(
        "s:2",
        json!({"requests": {"memory": "64Mi", "cpu": "50m"}, "limits": {"memory": "256Mi"}}),
    );
    let change = &container_changes(&from, &both).unwrap()["shipper"];
    assert_eq!(change.image.as_deref(), Some("s:2"));
    assert_eq!(change.resources[0].to_string(), "limits.memory 256Mi");

    let storage = shipper(
        "s:1",
        json!({"requests": {"memory": "64Mi", "cpu": "50m", "ephemeral-storage": "1Gi"}}),
    );
    let err = container_changes(&from, &storage).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ephemeral-storage of shipper changed: only CPU and memory are resized in place"
    );
    let removed = shipper("s:1", json!({"requests": {"memory": "64Mi"}}));
    assert_eq!(
        container_changes(&from, &removed).unwrap_err().to_string(),
        "requests.cpu of shipper is removed, which no resize can do"
    );
    let claims = shipper(
        "s:1",
        json!({"requests": {"memory": "64Mi", "cpu": "50m"}, "claims": [{"name": "gpu"}]}),
    );
    assert_eq!(
        container_changes(&from, &claims).unwrap_err(),
        NotInPlace::ResourcesBeyondCpuMemory {
            container: "shipper".into()
        }
    );
    // Memory and an env var: a restart, as before.
    let mut env = raised.clone();
    env["containers"][0]["env"] = json!([{"name": "E", "value": "1"}]);
    assert_eq!(
        container_changes(&from, &env).unwrap_err(),
        NotInPlace::BeyondImages
    );
}

fn history(from: Value, to: Value) -> RevisionHistory {
    let entry = |revision: &str, content: Value| HistoryEntry {
        revision: revision.into(),
        content,
        first_served: Time(Timestamp::UNIX_EPOCH),
        outcome: Outcome::Good,
        reason: None,
    };
    RevisionHistory {
        sidecars: [(
            "logger:v1".to_owned(),
            vec![entry("aaaaaaaaaaaa", from), entry("bbbbbbbbbbbb", to)],
        )]
        .into(),
    }
}

fn memory_history() -> RevisionHistory {
    history(
        shipper("s:1", json!({"requests": {"memory": "64Mi"}})),
        shipper("s:1", json!({"requests": {"memory": "128Mi"}})),
    )
}

/// A running pod at logger:v1 aaaaaaaaaaaa whose shipper requests 64Mi; a LimitRange gave it a
/// memory limit the config does not set.
fn pod() -> Value {
    json!({
        "metadata": {"name": "web-1", "namespace": "team", "uid": "u-1", "generation": 1,
            "annotations": {"injector/revision": "logger:v1=aaaaaaaaaaaa"}},
        "spec": {"containers": [
            {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "shipper", "image": "s:1", "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "512Mi"}}}
        ]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [
            {"name": "app", "ready": true, "restartCount": 0, "image": "app:1", "imageID": "",
             "containerID": "containerd://app", "state": {"running": {}}},
            {"name": "shipper", "ready": true, "restartCount": 0, "image": "s:1", "imageID": "",
             "containerID": "containerd://s-1", "state": {"running": {}},
             "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "512Mi"}}}
        ]}
    })
}

fn target() -> RevisionStamp {
    RevisionStamp::from_annotation("logger:v1=bbbbbbbbbbbb")
}

#[test]
fn a_resize_goes_through_the_resize_subresource_and_keeps_the_figures_the_config_does_not_set() {
    let before: Pod = serde_json::from_value(pod()).unwrap();
    let keys = AnnotationKeys::default();
    let patch = pod_patch(&before, &keys, &target(), &memory_history()).unwrap();
    assert_eq!(
        serde_json::to_value(patch.resize.as_ref().unwrap()).unwrap(),
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "u-1"},
            {"op": "test", "path": "/spec/containers/1/name", "value": "shipper"},
            {"op": "replace", "path": "/spec/containers/1/resources",
             "value": {"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}}}
        ])
    );
    // The pod's own patch sets the revision only: no image changes.
    assert_eq!(
        serde_json::to_value(&patch.patch).unwrap(),
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "u-1"},
            {"op": "replace", "path": "/metadata/annotations/injector~1revision",
             "value": "logger:v1=bbbbbbbbbbbb"}
        ])
    );
    assert_eq!(patch.containers().collect::<Vec<_>>(), ["shipper"]);

    // An image change alone sends no resize.
    let images = history(
        shipper("s:1", json!({"requests": {"memory": "64Mi"}})),
        shipper("s:2", json!({"requests": {"memory": "64Mi"}})),
    );
    assert_eq!(
        pod_patch(&before, &keys, &target(), &images)
            .unwrap()
            .resize,
        None
    );
}

#[test]
fn a_pod_with_pod_level_resources_or_whose_qos_class_would_change_is_not_resized() {
    let keys = AnnotationKeys::default();
    let mut pod_level = pod();
    pod_level["spec"]["resources"] = json!({"requests": {"memory": "1Gi"}});
    let pod_level: Pod = serde_json::from_value(pod_level).unwrap();
    assert_eq!(
        pod_patch(&pod_level, &keys, &target(), &memory_history()).unwrap_err(),
        NotInPlace::PodLevelResources
    );

    // Guaranteed: every container requests what it limits. Raising the sidecar's request
    // alone would make it Burstable, which the API server refuses.
    let mut guaranteed = pod();
    for container in guaranteed["spec"]["containers"].as_array_mut().unwrap() {
        container["resources"] = json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                                        "limits": {"cpu": "100m", "memory": "64Mi"}});
    }
    let guaranteed: Pod = serde_json::from_value(guaranteed).unwrap();
    assert_eq!(
        qos_class(guaranteed.spec.as_ref().unwrap()),
        QosClass::Guaranteed
    );
    let err = pod_patch(&guaranteed, &keys, &target(), &memory_history()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "resizing shipper would change the pod's QoS class from Guaranteed to Burstable"
    );
    let before: Pod = serde_json::from_value(pod()).unwrap();
    assert_eq!(
        qos_class(before.spec.as_ref().unwrap()),
        QosClass::Burstable
    );
    let empty: Pod =
        serde_json::from_value(json!({"spec": {"containers": [{"name": "a"}]}})).unwrap();
    assert_eq!(
        qos_class(empty.spec.as_ref().unwrap()),
        QosClass::BestEffort
    );
}

/// The pod as the kubelet reports it later: `shipper`'s status edited by `edit`, and `app`
/// restarted `app_restarts` times.
fn reported(edit: impl FnOnce(&mut Value), app_restarts: i32, conditions: Value) -> Pod {
    let mut pod = pod();
    pod["metadata"]["generation"] = json!(2);
    edit(&mut pod["status"]["containerStatuses"][1]);
    pod["status"]["containerStatuses"][0]["restartCount"] = json!(app_restarts);
    pod["status"]["conditions"] = conditions;
    serde_json::from_value(pod).unwrap()
}

fn in_progress_now() -> Value {
    json!([{"type": "Ready", "status": "True"}, {"type": "PodResizeInProgress", "status": "True"}])
}

fn ready() -> Value {
    json!([{"type": "Ready", "status": "True"}])
}

#[test]
fn a_resize_is_done_when_the_kubelet_reports_the_new_figures_and_fails_with_its_reason() {
    let before: Pod = serde_json::from_value(pod()).unwrap();
    let patch = pod_patch(
        &before,
        &AnnotationKeys::default(),
        &target(),
        &memory_history(),
    )
    .unwrap();
    let upgrade = InPlaceUpgrade::of(&before, &patch, Duration::ZERO).patched(Some(2));
    assert_eq!(upgrade.others, BTreeMap::from([("app".into(), 0)]));
    let now = Timestamp::UNIX_EPOCH;
    let resized = |status: &mut Value| {
        status["resources"]["requests"]["memory"] = json!("134217728");
    };

    // Not acted on yet: the old figure.
    assert_eq!(
        upgrade.progress(Some(&reported(|_| {}, 0, ready())), now),
        UpgradeProgress::Pending
    );
    // The kubelet reports 128Mi (as bytes) with the container running on: done, no restart
    // needed (resizePolicy NotRequired, the default).
    assert!(matches!(
        upgrade.progress(Some(&reported(resized, 0, ready())), now),
        UpgradeProgress::Done(_)
    ));
    // resizePolicy RestartContainer: the kubelet restarts the sidecar with its new figure,
    // which is no failure; the application restarting is.
    let restarted = |status: &mut Value| {
        resized(status);
        status["restartCount"] = json!(1);
        status["containerID"] = json!("containerd://s-2");
    };
    assert!(matches!(
        upgrade.progress(Some(&reported(restarted, 0, ready())), now),
        UpgradeProgress::Done(_)
    ));
    assert_eq!(
        upgrade.progress(Some(&reported(resized, 1, ready())), now),
        UpgradeProgress::Failed(
            "pod web-1: container app restarted during the in-place upgrade of shipper".into()
        )
    );
    // The node cannot fit it.
    let infeasible = json!([{"type": "Ready", "status": "True"},
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible",
         "message": "Node didn't have enough capacity: memory, requested: 1099511627776, capacity: 4102672384"}]);
    assert_eq!(
        upgrade.progress(Some(&reported(|_| {}, 0, infeasible)), now),
        UpgradeProgress::Failed(
            "pod web-1: the kubelet did not resize shipper: PodResizePending Infeasible: Node didn't have enough capacity: memory, requested: 1099511627776, capacity: 4102672384".into()
        )
    );
    let error = json!([{"type": "Ready", "status": "True"},
        {"type": "PodResizeInProgress", "status": "True", "reason": "Error", "message": "memory limit below usage"}]);
    assert!(matches!(
        upgrade.progress(Some(&reported(|_| {}, 0, error)), now),
        UpgradeProgress::Failed(why) if why.ends_with("PodResizeInProgress Error: memory limit below usage")
    ));
    // A resize still under way is no failure.
    let in_progress = json!([{"type": "Ready", "status": "True"},
        {"type": "PodResizeInProgress", "status": "True"}]);
    assert_eq!(
        upgrade.progress(Some(&reported(|_| {}, 0, in_progress)), now),
        UpgradeProgress::Pending
    );
    // Restarted with its new figure, it crash-loops.
    let crashing = |status: &mut Value| {
        restarted(status);
        status["ready"] = json!(false);
        status["state"] = json!({"waiting": {"reason": "CrashLoopBackOff"}});
    };
    assert_eq!(
        upgrade.progress(Some(&reported(crashing, 0, ready())), now),
        UpgradeProgress::Failed(
            "pod web-1: resized container shipper is waiting (CrashLoopBackOff)".into()
        )
    );
    // A kubelet that reports the generation it observed: before it saw the resize, nothing
    // is judged, an old refusal included.
    let mut stale = reported(
        |_| {},
        0,
        json!([{"type": "Ready", "status": "True"},
        {"type": "PodResizePending", "status": "True", "reason": "Deferred"}]),
    );
    stale.status.as_mut().unwrap().observed_generation = Some(1);
    assert_eq!(
        upgrade.progress(Some(&stale), now),
        UpgradeProgress::Pending
    );
    // Observed, no resize pending nor in progress: made, though the status rounds the figure.
    let mut rounded = reported(
        |status| status["resources"]["requests"]["memory"] = json!("127Mi"),
        0,
        ready(),
    );
    rounded.status.as_mut().unwrap().observed_generation = Some(2);
    assert!(matches!(
        upgrade.progress(Some(&rounded), now),
        UpgradeProgress::Done(_)
    ));
    let mut rounded = reported(|_| {}, 0, in_progress_now());
    rounded.status.as_mut().unwrap().observed_generation = Some(2);
    assert_eq!(
        upgrade.progress(Some(&rounded), now),
        UpgradeProgress::Pending
    );
    assert!(
        upgrade
            .awaiting(Some(&reported(|_| {}, 0, ready())))
            .starts_with("pod web-1: container shipper to run requests.memory 128Mi and be ready"),
        "{}",
        upgrade.awaiting(None)
    );
}

#[test]
fn a_resize_the_api_server_refuses_for_the_nodes_capacity_fails_and_any_other_refusal_restarts() {
    let containers = ["shipper".to_owned()];
    let containers: Vec<&String> = containers.iter().collect();
    let capacity = crate::rollout::in_place::ResizeRefusal {
        code: 403,
        message: "pods \"web-1\" is forbidden: node didn't have enough allocatable resources: memory, requested: 1073741824000, allocatable: 25171324928".into(),
        causes: vec!["NodeCapacity".into()],
    };
    assert_eq!(
        capacity.failure("web-1", &containers).as_deref(),
        Some(
            "pod web-1: the API server refused to resize shipper: pods \"web-1\" is forbidden: node didn't have enough allocatable resources: memory, requested: 1073741824000, allocatable: 25171324928"
        )
    );
    let rbac = crate::rollout::in_place::ResizeRefusal {
        code: 403,
        message: "pods \"web-1\" is forbidden: User \"system:serviceaccount:injector-system:sidecar-injector\" cannot patch resource \"pods/resize\" in API group \"\" in the namespace \"team\"".into(),
        causes: vec![],
    };
    assert_eq!(rbac.failure("web-1", &containers), None);
    let invalid = crate::rollout::in_place::ResizeRefusal {
        code: 422,
        message: "Pod \"web-1\" is invalid: spec: Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing".into(),
        causes: vec![],
    };
    assert_eq!(invalid.failure("web-1", &containers), None);
}
