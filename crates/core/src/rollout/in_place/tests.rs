use super::*;
use crate::rollout::history::{HistoryEntry, Outcome};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[test]
fn one_pod_of_a_healthy_workload_is_upgraded_at_a_time_and_none_after_a_failure() {
    let stale = [
        PodToReplace::injected("web-a"),
        PodToReplace::injected("web-b"),
    ];
    let next = |healthy, upgrading, failed| {
        next_upgrade(&stale, healthy, upgrading, failed, |_| false)
            .map(|next| next.pod.name.as_str())
    };
    assert_eq!(next(true, false, false), Some("web-b"));
    assert_eq!(
        next(false, false, false),
        None,
        "an unhealthy workload waits"
    );
    assert_eq!(next(true, true, false), None, "one pod at a time");
    assert_eq!(
        next(true, false, true),
        None,
        "a failed upgrade stops the workload's other pods"
    );
    assert_eq!(next_upgrade(&[], true, false, false, |_| false), None);
}

#[test]
fn a_pod_a_failed_revision_broke_is_healed_first_even_while_its_workload_is_unhealthy() {
    let stale = [
        PodToReplace::at("d1-a", "logger:v1=broken"),
        PodToReplace::at("d1-b", "logger:v1=good"),
    ];
    let broken = |p: &PodToReplace| p.revision.as_deref() == Some("logger:v1=broken");
    let next = |healthy| next_upgrade(&stale, healthy, false, false, broken);
    // Unhealthy (because of that very pod): the broken pod, only if it is unavailable.
    assert_eq!(
        next(false),
        Some(NextPod {
            pod: &stale[0],
            heal: true
        })
    );
    // Healthy: still the broken pod first, then the rest by the usual order.
    assert_eq!(
        next(true),
        Some(NextPod {
            pod: &stale[0],
            heal: false
        })
    );
    let rest = &stale[1..];
    assert_eq!(next_upgrade(rest, false, false, false, broken), None);
    assert_eq!(
        next_upgrade(rest, true, false, false, broken).map(|n| n.pod),
        Some(&stale[1])
    );
    // One at a time and none after a failure, heal or not.
    assert_eq!(next_upgrade(&stale, false, true, false, broken), None);
    assert_eq!(next_upgrade(&stale, false, false, true, broken), None);
}

fn content(image: &str, env: &str) -> Value {
    json!({
        "containers": [{"name": "shipper", "image": image, "env": [{"name": "E", "value": env}]}],
        "volumes": [{"name": "logs", "emptyDir": {}}]
    })
}

#[test]
fn only_an_image_change_of_injected_containers_is_made_in_place() {
    let changes = container_changes(&content("s:1", "a"), &content("s:2", "a")).unwrap();
    assert_eq!(
        changes,
        BTreeMap::from([(
            "shipper".into(),
            ContainerChange {
                image: Some("s:2".into()),
                resources: vec![]
            }
        )])
    );
    let err = container_changes(&content("s:1", "a"), &content("s:2", "b")).unwrap_err();
    assert_eq!(err, NotInPlace::BeyondImages);
    assert!(
        err.to_string()
            .starts_with("containers changed beyond their images, CPU and memory"),
        "{err}"
    );
    let mut with_env = content("s:1", "a");
    with_env["env"] = json!([{"name": "X", "value": "1"}]);
    let err = container_changes(&content("s:1", "a"), &with_env).unwrap_err();
    assert!(err.to_string().starts_with("env changed"), "{err}");
    let mut init = content("s:2", "a");
    init["initContainers"] = json!([{"name": "setup", "image": "i:1"}]);
    let err = container_changes(&content("s:1", "a"), &init).unwrap_err();
    assert!(
        err.to_string().starts_with("initContainers changed"),
        "{err}"
    );
    assert_eq!(
        container_changes(&content("s:1", "a"), &content("s:1", "a")).unwrap_err(),
        NotInPlace::NothingToChange
    );
}

fn history() -> RevisionHistory {
    let entry = |revision: &str, image: &str| HistoryEntry {
        revision: revision.into(),
        content: content(image, "a"),
        first_served: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        outcome: Outcome::Good,
        reason: None,
    };
    RevisionHistory {
        sidecars: [(
            "logger:v1".to_owned(),
            vec![entry("aaaaaaaaaaaa", "s:1"), entry("bbbbbbbbbbbb", "s:2")],
        )]
        .into(),
    }
}

fn pod(revision: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "team", "uid": "u-1",
            "annotations": {"injector/revision": revision}},
        "spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "shipper", "image": "s:1"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [
            {"name": "app", "ready": true, "restartCount": 0, "image": "app:1", "imageID": "", "state": {"running": {}}},
            {"name": "shipper", "ready": true, "restartCount": 0, "image": "docker.io/s:1", "imageID": "", "state": {"running": {}}}
        ]}
    }))
    .unwrap()
}

/// A pod at logger:v1 aaaaaaaaaaaa and its patch to bbbbbbbbbbbb.
fn logger_pod_and_its_patch() -> (Pod, InPlacePatch) {
    let target = RevisionStamp::from_annotation("logger:v1=bbbbbbbbbbbb");
    let before = pod("logger:v1=aaaaaaaaaaaa");
    let patch = pod_patch(&before, &AnnotationKeys::default(), &target, &history()).unwrap();
    (before, patch)
}

#[test]
fn the_pod_patch_sets_the_images_and_the_revision_guarded_by_uid_and_name() {
    let keys = AnnotationKeys::default();
    let target = RevisionStamp::from_annotation("logger:v1=bbbbbbbbbbbb");
    let patch = pod_patch(
        &pod("logger:v1=aaaaaaaaaaaa,tracer:v1=cccccccccccc"),
        &keys,
        &target,
        &history(),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(&patch.patch).unwrap(),
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "u-1"},
            {"op": "test", "path": "/spec/containers/1/name", "value": "shipper"},
            {"op": "replace", "path": "/spec/containers/1/image", "value": "s:2"},
            {"op": "replace", "path": "/metadata/annotations/injector~1revision",
             "value": "logger:v1=bbbbbbbbbbbb,tracer:v1=cccccccccccc"}
        ])
    );
    let err = pod_patch(&pod("logger:v1=dddddddddddd"), &keys, &target, &history()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "revision dddddddddddd of logger:v1 is not in the history"
    );
    let err = pod_patch(&pod("logger:v1=bbbbbbbbbbbb"), &keys, &target, &history()).unwrap_err();
    assert_eq!(err, NotInPlace::PodCurrent);
}

#[test]
fn an_upgraded_pod_is_done_once_ready_for_its_workload_s_min_ready_seconds() {
    let (before, patch) = logger_pod_and_its_patch();
    let ready_at: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
    let mut upgraded: Value = serde_json::to_value(&before).unwrap();
    upgraded["status"]["conditions"][0]["lastTransitionTime"] = json!("2026-11-29T10:00:00Z");
    upgraded["status"]["containerStatuses"][1]["restartCount"] = json!(1);
    let upgraded: Pod = serde_json::from_value(upgraded).unwrap();
    let at = |seconds: i64| ready_at + k8s_openapi::jiff::SignedDuration::from_secs(seconds);

    let patient = InPlaceUpgrade::of(&before, &patch, Duration::from_secs(10));
    assert_eq!(
        patient.progress(Some(&upgraded), at(3)),
        UpgradeProgress::Ready {
            available_at: at(10)
        },
        "Ready 3 s of minReadySeconds 10: not yet available"
    );
    assert!(matches!(
        patient.progress(Some(&upgraded), at(10)),
        UpgradeProgress::Done(_)
    ));
    let eager = InPlaceUpgrade::of(&before, &patch, Duration::ZERO);
    assert!(matches!(
        eager.progress(Some(&upgraded), at(0)),
        UpgradeProgress::Done(_)
    ));
}

#[test]
fn an_upgrade_is_done_when_the_new_container_runs_ready_and_nothing_else_restarted() {
    let (before, patch) = logger_pod_and_its_patch();
    let upgrade = InPlaceUpgrade::of(&before, &patch, Duration::ZERO);
    assert_eq!(upgrade.others, BTreeMap::from([("app".into(), 0)]));
    // Patched, the kubelet not there yet.
    assert_eq!(
        upgrade.progress(Some(&before), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Pending
    );
    let with = |shipper: Value, app_restarts: i32, uid: &str| -> Pod {
        let mut pod = before.clone();
        pod.metadata.uid = Some(uid.into());
        let mut status = serde_json::to_value(pod.status.take().unwrap()).unwrap();
        status["containerStatuses"][0]["restartCount"] = json!(app_restarts);
        status["containerStatuses"][1] = shipper;
        pod.status = Some(serde_json::from_value(status).unwrap());
        pod
    };
    let starting = json!({"name": "shipper", "ready": false, "restartCount": 1, "image": "docker.io/s:2", "imageID": "", "state": {"running": {}}});
    assert_eq!(
        upgrade.progress(Some(&with(starting, 0, "u-1")), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Pending
    );
    // A runtime may report the image by another of its tags: the restart tells.
    let retagged = json!({"name": "shipper", "ready": true, "restartCount": 1, "image": "docker.io/s:1", "imageID": "", "state": {"running": {}}});
    assert!(matches!(
        upgrade.progress(Some(&with(retagged, 0, "u-1")), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Done(_)
    ));
    let ready = json!({"name": "shipper", "ready": true, "restartCount": 1, "image": "docker.io/s:2", "imageID": "", "state": {"running": {}}});
    // Its containers ready, the pod not yet (a readiness gate): still unavailable.
    let mut gated = with(ready.clone(), 0, "u-1");
    gated.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    assert_eq!(
        upgrade.progress(Some(&gated), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Pending
    );
    assert_eq!(
        upgrade.progress(Some(&with(ready.clone(), 0, "u-1")), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Done(BTreeMap::from([("app".into(), 0), ("shipper".into(), 1)]))
    );
    let UpgradeProgress::Failed(why) =
        upgrade.progress(Some(&with(ready.clone(), 1, "u-1")), Timestamp::UNIX_EPOCH)
    else {
        panic!("an app restart fails it")
    };
    assert_eq!(
        why,
        "pod web-1: container app restarted during the in-place upgrade of shipper"
    );
    assert!(matches!(
        upgrade.progress(Some(&with(ready, 0, "u-2")), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Failed(_)
    ));
    let backoff = json!({"name": "shipper", "ready": false, "restartCount": 2, "image": "docker.io/s:2", "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
    assert_eq!(
        upgrade.progress(Some(&with(backoff, 0, "u-1")), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Failed(
            "pod web-1: upgraded container shipper is waiting (CrashLoopBackOff)".into()
        )
    );
    assert_eq!(
        upgrade.progress(None, Timestamp::UNIX_EPOCH),
        UpgradeProgress::Done(BTreeMap::new())
    );
}

#[test]
fn a_pod_healed_from_an_image_it_could_not_pull_is_judged_by_its_new_container_only() {
    // The pod a broken revision left backing off, as read before its patch.
    let mut broken: Value = serde_json::to_value(pod("logger:v1=aaaaaaaaaaaa")).unwrap();
    broken["status"]["conditions"][0]["status"] = json!("False");
    broken["status"]["containerStatuses"][1] = json!({"name": "shipper", "ready": false,
        "restartCount": 0, "image": "s:1", "imageID": "",
        "state": {"waiting": {"reason": "ImagePullBackOff"}}});
    let broken: Pod = serde_json::from_value(broken).unwrap();
    assert!(unavailable(&broken));
    let target = RevisionStamp::from_annotation("logger:v1=bbbbbbbbbbbb");
    let patch = pod_patch(&broken, &AnnotationKeys::default(), &target, &history()).unwrap();
    let upgrade = InPlaceUpgrade::of(&broken, &patch, Duration::ZERO);
    let now = Timestamp::UNIX_EPOCH;
    // Read again before the kubelet acted: the old back-off is no failure of the fix.
    assert_eq!(
        upgrade.progress(Some(&broken), now),
        UpgradeProgress::Pending
    );
    assert_eq!(
        upgrade.awaiting(Some(&broken)),
        "pod web-1: container shipper to run s:2 and be ready (it is waiting (ImagePullBackOff)); the pod is not Ready"
    );
    // The kubelet runs the new image: done.
    let mut healed: Value = serde_json::to_value(&broken).unwrap();
    healed["status"]["conditions"][0]["status"] = json!("True");
    healed["status"]["containerStatuses"][1] = json!({"name": "shipper", "ready": true,
        "restartCount": 0, "image": "s:2", "imageID": "", "state": {"running": {}}});
    let healed: Pod = serde_json::from_value(healed).unwrap();
    assert!(matches!(
        upgrade.progress(Some(&healed), now),
        UpgradeProgress::Done(_)
    ));
    // The new image cannot be pulled either: that is a failure of the new revision.
    let mut again: Value = serde_json::to_value(&broken).unwrap();
    again["status"]["containerStatuses"][1]["image"] = json!("s:2");
    let again: Pod = serde_json::from_value(again).unwrap();
    assert_eq!(
        upgrade.progress(Some(&again), now),
        UpgradeProgress::Failed(
            "pod web-1: upgraded container shipper is waiting (ImagePullBackOff)".into()
        )
    );
}

#[test]
fn a_running_sidecar_patched_to_an_image_the_node_cannot_get_fails_at_once() {
    let (before, patch) = logger_pod_and_its_patch();
    let upgrade = InPlaceUpgrade::of(&before, &patch, Duration::ZERO);
    // As a real kubelet reports it: the container killed, the new one never created, the
    // status still naming the image and restart count of the one that ran.
    let mut stuck: Value = serde_json::to_value(&before).unwrap();
    stuck["status"]["containerStatuses"][1]["ready"] = json!(false);
    stuck["status"]["containerStatuses"][1]["state"] =
        json!({"waiting": {"reason": "ErrImageNeverPull"}});
    let stuck: Pod = serde_json::from_value(stuck).unwrap();
    assert_eq!(
        upgrade.progress(Some(&stuck), Timestamp::UNIX_EPOCH),
        UpgradeProgress::Failed(
            "pod web-1: upgraded container shipper is waiting (ErrImageNeverPull)".into()
        )
    );
}

/// A pod whose shipper is a native sidecar, at logger:v1 aaaaaaaaaaaa.
fn native_pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "team", "uid": "u-1",
            "annotations": {"injector/revision": "logger:v1=aaaaaaaaaaaa"}},
        "spec": {
            "initContainers": [
                {"name": "setup", "image": "s:1"},
                {"name": "shipper", "image": "s:1", "restartPolicy": "Always"}
            ],
            "containers": [{"name": "app", "image": "app:1"}]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [
                {"name": "setup", "ready": false, "restartCount": 0, "image": "s:1", "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "shipper", "ready": true, "restartCount": 0, "image": "s:1", "imageID": "", "containerID": "c-1", "state": {"running": {}}}
            ],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 0, "image": "app:1", "imageID": "", "state": {"running": {}}}
            ]}
    }))
    .unwrap()
}

#[test]
fn a_native_sidecar_is_upgraded_in_place_in_the_init_containers() {
    let target = RevisionStamp::from_annotation("logger:v1=bbbbbbbbbbbb");
    let before = native_pod();
    let patch = pod_patch(&before, &AnnotationKeys::default(), &target, &history()).unwrap();
    let ops = serde_json::to_value(&patch.patch).unwrap();
    assert_eq!(
        ops.as_array().unwrap()[1..3],
        json!([
            {"op": "test", "path": "/spec/initContainers/1/name", "value": "shipper"},
            {"op": "replace", "path": "/spec/initContainers/1/image", "value": "s:2"}
        ])
        .as_array()
        .unwrap()[..]
    );
    // Its progress is read from the init containers' statuses; the init container that ran
    // to completion is no problem.
    let upgrade = InPlaceUpgrade::of(&before, &patch, Duration::ZERO);
    let mut after = before.clone();
    let status = &mut after
        .status
        .as_mut()
        .unwrap()
        .init_container_statuses
        .as_mut()
        .unwrap()[1];
    status.image = "s:2".into();
    status.restart_count = 1;
    status.container_id = Some("c-2".into());
    let now = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
    let UpgradeProgress::Done(baseline) = upgrade.progress(Some(&after), now) else {
        panic!("{:?}", upgrade.progress(Some(&after), now));
    };
    // The bake counts from there: the completed init container and the restart on purpose
    // are no problem...
    assert_eq!(
        crate::rollout::container_problems_since(&after, Some(&baseline)),
        None
    );
    // ...a native sidecar that crash-loops is.
    let status = &mut after
        .status
        .as_mut()
        .unwrap()
        .init_container_statuses
        .as_mut()
        .unwrap()[1];
    status.restart_count = 3;
    status.state =
        Some(serde_json::from_value(json!({"waiting": {"reason": "CrashLoopBackOff"}})).unwrap());
    let problem = crate::rollout::container_problems_since(&after, Some(&baseline)).unwrap();
    assert!(problem.contains("container shipper"), "{problem}");
}

#[test]
fn where_the_kubelet_reports_its_generation_a_status_is_judged_only_once_it_observed_the_patch() {
    // The pod the broken revision left backing off, as read before its patch (generation 3).
    let mut broken: Value = serde_json::to_value(pod("logger:v1=aaaaaaaaaaaa")).unwrap();
    broken["metadata"]["generation"] = json!(3);
    broken["status"]["observedGeneration"] = json!(3);
    broken["status"]["containerStatuses"][1] = json!({"name": "shipper", "ready": false,
        "restartCount": 4, "image": "s:1", "imageID": "", "containerID": "containerd://old-4",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
    let broken: Pod = serde_json::from_value(broken).unwrap();
    let target = RevisionStamp::from_annotation("logger:v1=bbbbbbbbbbbb");
    let patch = pod_patch(&broken, &AnnotationKeys::default(), &target, &history()).unwrap();
    let upgrade = InPlaceUpgrade::of(&broken, &patch, Duration::ZERO).patched(Some(4));
    let now = Timestamp::UNIX_EPOCH;
    let status = |observed: i64, shipper: Value| -> Pod {
        let mut pod: Value = serde_json::to_value(&broken).unwrap();
        pod["metadata"]["generation"] = json!(4);
        pod["status"]["observedGeneration"] = json!(observed);
        pod["status"]["containerStatuses"][1] = shipper;
        serde_json::from_value(pod).unwrap()
    };
    // The old container crashed once more under the old spec (another container id, the back-off
    // again): the kubelet has not observed generation 4, so that is no failure of the upgrade.
    // Without the generation, the new container id would read as the upgrade failing.
    let old_crash = json!({"name": "shipper", "ready": false, "restartCount": 5, "image": "s:1",
        "imageID": "", "containerID": "containerd://old-5",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
    assert_eq!(
        upgrade.progress(Some(&status(3, old_crash.clone())), now),
        UpgradeProgress::Pending
    );
    assert!(matches!(
        upgrade
            .clone()
            .patched(None)
            .progress(Some(&status(3, old_crash)), now),
        UpgradeProgress::Failed(_)
    ));
    // Observed, the first status of the new generation may still show the old container as
    // it was: not judged yet.
    let as_before =
        serde_json::to_value(&broken).unwrap()["status"]["containerStatuses"][1].clone();
    assert_eq!(
        upgrade.progress(Some(&status(4, as_before)), now),
        UpgradeProgress::Pending
    );
    // Observed, and the new container waits: the upgrade failed, for that reason.
    let pulling = json!({"name": "shipper", "ready": false, "restartCount": 4, "image": "s:2",
        "imageID": "", "containerID": "containerd://old-4",
        "state": {"waiting": {"reason": "ErrImagePull"}}});
    assert_eq!(
        upgrade.progress(Some(&status(4, pulling)), now),
        UpgradeProgress::Failed(
            "pod web-1: upgraded container shipper is waiting (ErrImagePull)".into()
        )
    );
    // Observed, and the new image runs ready: done.
    let running = json!({"name": "shipper", "ready": true, "restartCount": 5, "image": "s:2",
        "imageID": "", "containerID": "containerd://new", "state": {"running": {}}});
    let mut healed = status(4, running);
    healed.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
    assert!(matches!(
        upgrade.progress(Some(&healed), now),
        UpgradeProgress::Done(_)
    ));
}
