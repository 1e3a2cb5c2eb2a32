use serde_json::json;
use std::sync::Arc;

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::annotations::AnnotationKeys;
use crate::config::{LoadedSidecar, SidecarSet, parse_config};
use crate::test_fixtures::PodMeta;
use crate::workload::{UpdateStrategy, WorkloadKind};

const LOGGER_V1: &str = "name: logger:v1\ncontainers: [{name: s, image: 's:1'}]\n";
const LOGGER_V1_EDITED: &str = "name: logger:v1\ncontainers: [{name: s, image: 's:2'}]\n";

fn sidecars(texts: &[&str]) -> SidecarSet {
    texts
        .iter()
        .map(|t| LoadedSidecar::new(parse_config("t", t).unwrap().config, "t"))
        .collect()
}

fn stamp(text: &str) -> String {
    LoadedSidecar::new(parse_config("t", text).unwrap().config, "t").stamp
}

fn rs(namespace: &str, name: &str, deployment: Option<&str>) -> ObjectMeta {
    let meta = PodMeta::new(namespace, name);
    match deployment {
        Some(d) => meta.owner("Deployment", d).0,
        None => meta.0,
    }
}

fn keys() -> AnnotationKeys {
    AnnotationKeys::default()
}

fn workload<'r>(report: &'r DriftReport, kind: &str, name: &str) -> &'r WorkloadDrift {
    report
        .workloads
        .iter()
        .find(|w| w.kind.as_str() == kind && w.name == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in {:#?}", report.workloads))
}

#[test]
fn every_state_by_precedence() {
    let set = sidecars(&[LOGGER_V1]);
    let current = stamp(LOGGER_V1);
    let mut index = DriftIndex::default();
    index.apply_replicaset(&rs("team", "web-1", Some("web")));
    let cases: Vec<(&str, PodMeta, &str)> = vec![
        (
            "current",
            PodMeta::new("team", "a")
                .request("logger:v1")
                .injected(&current)
                .owner("StatefulSet", "current"),
            "current",
        ),
        (
            "stale",
            PodMeta::new("team", "b")
                .request("logger:v1")
                .injected("logger:v1=000000000000")
                .owner("StatefulSet", "stale"),
            "stale",
        ),
        (
            "unknown",
            PodMeta::new("team", "c")
                .request("logger:v1")
                .annotation("injector/status", "injected")
                .owner("StatefulSet", "unknown"),
            "unknown",
        ),
        (
            "uninjected",
            PodMeta::new("team", "d")
                .request("logger:v1")
                .owner("StatefulSet", "uninjected"),
            "uninjected",
        ),
        (
            "orphaned",
            PodMeta::new("team", "e")
                .request("logger:v9")
                .injected("logger:v9=000000000000")
                .owner("StatefulSet", "orphaned"),
            "orphaned",
        ),
        (
            "job",
            PodMeta::new("team", "f")
                .request("logger:v1")
                .owner("Job", "job"),
            "excluded",
        ),
        (
            "bare",
            PodMeta::new("team", "g").request("logger:v1"),
            "excluded",
        ),
        (
            "ignored namespace beats orphaned",
            PodMeta::new("kube-system", "h")
                .request("logger:v9")
                .owner("DaemonSet", "ignored"),
            "excluded",
        ),
    ];
    for (_, pod, _) in &cases {
        index.apply_pod(&pod.0, &keys());
    }
    let policy = DriftPolicy {
        ignore_namespaces: ["kube-system".to_owned()].into(),
        ..Default::default()
    };
    let report = index.classify(&set, &policy);
    for (what, pod, expected) in &cases {
        let owner = pod.0.owner_references.as_ref().and_then(|o| o.first());
        let (kind, name) = match owner {
            Some(o) => (o.kind.as_str(), o.name.as_str()),
            None => ("Pod", pod.0.name.as_deref().unwrap()),
        };
        assert_eq!(
            workload(&report, kind, name).state.as_str(),
            *expected,
            "{what}"
        );
    }
    let logger = report
        .sidecars
        .iter()
        .find(|s| s.name == "logger:v1")
        .unwrap();
    assert_eq!(
        logger.revision.as_deref(),
        Some(
            set.get(&"logger:v1".parse().unwrap())
                .unwrap()
                .revision
                .as_str()
        )
    );
    assert_eq!(
        (
            logger.pods.current,
            logger.pods.stale,
            logger.pods.unknown,
            logger.pods.uninjected,
            logger.pods.excluded
        ),
        (1, 1, 1, 1, 2)
    );
    let orphan = report
        .sidecars
        .iter()
        .find(|s| s.name == "logger:v9")
        .unwrap();
    assert_eq!(orphan.revision, None);
    assert_eq!((orphan.pods.orphaned, orphan.pods.excluded), (1, 1));
    assert_eq!(
        workload(&report, "Pod", "g").why,
        RowReason::Excluded(Exclusion::BarePod)
    );
    assert_eq!(
        workload(&report, "StatefulSet", "stale").why,
        RowReason::Stale {
            from: "000000000000".into(),
            to: set
                .get(&"logger:v1".parse().unwrap())
                .unwrap()
                .revision
                .to_string()
        }
    );
    assert!(workload(&report, "StatefulSet", "stale").needs_restart);
    assert!(workload(&report, "StatefulSet", "uninjected").needs_restart);
    assert!(!workload(&report, "StatefulSet", "unknown").needs_restart);
    assert!(!workload(&report, "StatefulSet", "current").needs_restart);
}

#[test]
fn a_pod_whose_replicaset_arrives_later_resolves_to_its_deployment() {
    let set = sidecars(&[LOGGER_V1]);
    let mut index = DriftIndex::default();
    index.apply_pod(
        &PodMeta::new("team", "web-1-x")
            .request("logger:v1")
            .injected("logger:v1=000000000000")
            .owner("ReplicaSet", "web-1")
            .0,
        &keys(),
    );
    let before = index.classify(&set, &DriftPolicy::default());
    let pending = workload(&before, "ReplicaSet", "web-1");
    assert_eq!(
        (pending.state, &pending.why),
        (
            DriftState::Excluded,
            &RowReason::Excluded(Exclusion::ReplicaSetNotKnown)
        )
    );
    index.apply_replicaset(&rs("team", "web-1", Some("web")));
    let after = index.classify(&set, &DriftPolicy::default());
    assert_eq!(
        workload(&after, "Deployment", "web").state,
        DriftState::Stale
    );
    assert_eq!(after.workloads.len(), 1);
}

#[test]
fn a_workload_is_its_worst_pod_and_restartable_states_come_first() {
    let set = sidecars(&[LOGGER_V1]);
    let current = stamp(LOGGER_V1);
    let mut index = DriftIndex::default();
    index.apply_replicaset(&rs("team", "web-1", Some("web")));
    index.apply_replicaset(&rs("team", "web-2", Some("web")));
    for (name, pod) in [
        (
            "a",
            PodMeta::new("team", "a")
                .request("logger:v1")
                .injected(&current),
        ),
        (
            "b",
            PodMeta::new("team", "b")
                .request("logger:v1")
                .annotation("injector/status", "injected"),
        ),
        (
            "c",
            PodMeta::new("team", "c")
                .request("logger:v1")
                .injected("logger:v1=000000000000"),
        ),
    ] {
        let owner = if name == "a" { "web-2" } else { "web-1" };
        index.apply_pod(&pod.owner("ReplicaSet", owner).0, &keys());
    }
    let report = index.classify(&set, &DriftPolicy::default());
    let web = workload(&report, "Deployment", "web");
    assert_eq!(
        web.state,
        DriftState::Stale,
        "one stale pod among unknown and current ones"
    );
    assert_eq!(
        (web.pods.current, web.pods.unknown, web.pods.stale),
        (1, 1, 1)
    );
}

#[test]
fn deletes_terminating_pods_and_relists() {
    let set = sidecars(&[LOGGER_V1]);
    let mut index = DriftIndex::default();
    let pod = |name: &str| {
        PodMeta::new("team", name)
            .request("logger:v1")
            .owner("DaemonSet", "agent")
    };
    index.apply_pod(&pod("a").0, &keys());
    index.apply_pod(&pod("b").0, &keys());
    index.apply_pod(
        &PodMeta::new("team", "plain").owner("DaemonSet", "other").0,
        &keys(),
    );
    assert_eq!(
        index.pod_count(),
        2,
        "pods that request nothing are not indexed"
    );
    index.apply_pod(&pod("a").terminating().0, &keys());
    assert_eq!(index.pod_count(), 1, "a terminating pod leaves the index");
    index.delete_pod("team", "b");
    assert_eq!(index.pod_count(), 0);
    index.apply_pod(&pod("gone").0, &keys());
    let relisted = [pod("c").0, pod("d").0];
    index.reset_pods(relisted.iter(), &keys());
    let report = index.classify(&set, &DriftPolicy::default());
    assert_eq!(
        workload(&report, "DaemonSet", "agent").pods.uninjected,
        2,
        "exactly the relisted pods"
    );
}

#[test]
fn a_streamed_relist_keeps_what_the_index_held_until_its_end() {
    let mut index = DriftIndex::default();
    let pod = |name: &str| {
        PodMeta::new("team", name)
            .request("logger:v1")
            .owner("DaemonSet", "agent")
    };
    let names = |index: &DriftIndex| index.pod_names(WorkloadKind::DaemonSet, "team", "agent");
    index.apply_pod(&pod("a").0, &keys());
    index.apply_pod(&pod("b").0, &keys());
    index.apply_replicaset(&rs("team", "web-1", Some("web")));
    index.apply_replicaset(&rs("team", "web-2", Some("web")));

    index.start_pod_relist();
    index.apply_pod(&pod("c").0, &keys());
    assert_eq!(
        names(&index),
        ["a", "b", "c"],
        "nothing goes before the end"
    );
    // The relist fails midway and starts again: what it had listed counts for nothing.
    index.start_pod_relist();
    index.apply_pod(&pod("b").0, &keys());
    index.apply_pod(&pod("d").0, &keys());
    index.apply_pod(&PodMeta::new("team", "plain").0, &keys());
    index.end_pod_relist();
    assert_eq!(names(&index), ["b", "d"], "exactly what the relist listed");
    index.end_pod_relist();
    assert_eq!(
        names(&index),
        ["b", "d"],
        "an end without a start changes nothing"
    );

    index.start_replicaset_relist();
    index.apply_replicaset(&rs("team", "web-2", Some("web")));
    assert_eq!(index.deployment_of("team", "web-1"), Some("web"));
    index.end_replicaset_relist();
    assert_eq!(index.deployment_of("team", "web-1"), None);
    assert_eq!(index.deployment_of("team", "web-2"), Some("web"));
    index.start_replicaset_relist();
    index.end_replicaset_relist();
    assert!(index.replicasets.is_empty(), "no namespace left behind");
}

#[test]
fn a_config_change_turns_current_into_stale() {
    let before = sidecars(&[LOGGER_V1]);
    let after = sidecars(&[LOGGER_V1_EDITED]);
    let mut index = DriftIndex::default();
    index.apply_pod(
        &PodMeta::new("team", "a")
            .request("logger:v1")
            .injected(&stamp(LOGGER_V1))
            .owner("StatefulSet", "db")
            .0,
        &keys(),
    );
    assert_eq!(
        workload(
            &index.classify(&before, &DriftPolicy::default()),
            "StatefulSet",
            "db"
        )
        .state,
        DriftState::Current
    );
    assert_eq!(
        workload(
            &index.classify(&after, &DriftPolicy::default()),
            "StatefulSet",
            "db"
        )
        .state,
        DriftState::Stale
    );
    assert_eq!(
        workload(
            &index.classify(&sidecars(&[]), &DriftPolicy::default()),
            "StatefulSet",
            "db"
        )
        .state,
        DriftState::Orphaned
    );
}

#[test]
fn policy_filters_opt_out_bare_pods_and_unknown() {
    let set = sidecars(&[LOGGER_V1]);
    let mut index = DriftIndex::default();
    index.apply_pod(
        &PodMeta::new("a", "p")
            .request("logger:v1")
            .owner("StatefulSet", "s")
            .0,
        &keys(),
    );
    index.apply_pod(
        &PodMeta::new("b", "p")
            .request("logger:v1")
            .owner("StatefulSet", "s")
            .0,
        &keys(),
    );
    index.apply_pod(
        &PodMeta::new("c", "bare")
            .request("logger:v1")
            .annotation("injector/status", "injected")
            .0,
        &keys(),
    );
    let mut opted_out = PodMeta::new("c", "s")
        .annotation("injector/rollout", "disabled")
        .0;
    opted_out
        .annotations
        .as_mut()
        .unwrap()
        .remove("injector/request");
    index.apply_workload(WorkloadKind::StatefulSet, &opted_out, &keys());
    index.apply_pod(
        &PodMeta::new("c", "p")
            .request("logger:v1")
            .owner("StatefulSet", "s")
            .0,
        &keys(),
    );
    let state_of = |report: &DriftReport, ns: &str, kind: &str, name: &str| {
        report
            .workloads
            .iter()
            .find(|w| w.namespace == ns && w.kind.as_str() == kind && w.name == name)
            .unwrap()
            .clone()
    };
    let include_a = DriftPolicy {
        include_namespaces: ["a".to_owned()].into(),
        ..Default::default()
    };
    let report = index.classify(&set, &include_a);
    assert_eq!(
        state_of(&report, "a", "StatefulSet", "s").state,
        DriftState::Uninjected
    );
    assert_eq!(
        state_of(&report, "b", "StatefulSet", "s").why,
        RowReason::Excluded(Exclusion::Namespace("namespace b is not included".into()))
    );
    let exclude_b = DriftPolicy {
        exclude_namespaces: ["b".to_owned()].into(),
        evict_bare_pods: true,
        restart_unknown: true,
        ..Default::default()
    };
    let report = index.classify(&set, &exclude_b);
    assert_eq!(
        state_of(&report, "b", "StatefulSet", "s").why,
        RowReason::Excluded(Exclusion::Namespace("namespace b is excluded".into()))
    );
    assert_eq!(
        state_of(&report, "c", "StatefulSet", "s").why,
        RowReason::Excluded(Exclusion::RolloutDisabled)
    );
    let bare = state_of(&report, "c", "Pod", "bare");
    assert_eq!(
        bare.state,
        DriftState::Unknown,
        "--evict-bare-pods classifies bare pods"
    );
    assert!(
        bare.needs_restart,
        "--restart-unknown makes unknown restartable"
    );
}

#[test]
fn the_json_shape_has_every_count_and_is_sorted_by_name() {
    let set = sidecars(&[LOGGER_V1, "name: metrics:v1\n"]);
    let mut index = DriftIndex::default();
    index.apply_pod(
        &PodMeta::new("team", "z")
            .request("logger:v1")
            .owner("StatefulSet", "zeta")
            .0,
        &keys(),
    );
    index.apply_pod(
        &PodMeta::new("team", "a")
            .request("logger:v1")
            .owner("StatefulSet", "alpha")
            .0,
        &keys(),
    );
    let value = serde_json::to_value(index.classify(&set, &DriftPolicy::default())).unwrap();
    assert_eq!(
        value["sidecars"][1],
        json!({"name": "metrics:v1", "revision": set.get(&"metrics:v1".parse().unwrap()).unwrap().revision.as_str(),
        "pods": {"excluded": 0, "orphaned": 0, "uninjected": 0, "unknown": 0, "stale": 0, "current": 0},
        "native": 0})
    );
    let names: Vec<&str> = value["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert_eq!(value["workloads"][0]["state"], "uninjected");
    assert_eq!(value["workloads"][0]["kind"], "StatefulSet");
    assert!(value["workloads"][0].get("needs_restart").is_none());
}

#[test]
fn owners_of_different_kinds_with_one_name_stay_apart() {
    let set = sidecars(&[LOGGER_V1]);
    let mut index = DriftIndex::default();
    index.apply_pod(
        &PodMeta::new("team", "s-0")
            .request("logger:v1")
            .owner("StatefulSet", "db")
            .0,
        &keys(),
    );
    index.apply_pod(
        &PodMeta::new("team", "d-x")
            .request("logger:v1")
            .injected(&stamp(LOGGER_V1))
            .owner("DaemonSet", "db")
            .0,
        &keys(),
    );
    let report = index.classify(&set, &DriftPolicy::default());
    assert_eq!(
        workload(&report, "StatefulSet", "db").state,
        DriftState::Uninjected
    );
    assert_eq!(
        workload(&report, "DaemonSet", "db").state,
        DriftState::Current
    );
}

#[test]
fn pods_with_differently_written_requests_count_under_one_workload() {
    let set = sidecars(&[LOGGER_V1]);
    let mut index = DriftIndex::default();
    index.apply_pod(
        &PodMeta::new("team", "a")
            .request("logger:v1")
            .owner("StatefulSet", "db")
            .0,
        &keys(),
    );
    index.apply_pod(
        &PodMeta::new("team", "b")
            .request(" Logger:V1 ")
            .owner("StatefulSet", "db")
            .0,
        &keys(),
    );
    let report = index.classify(&set, &DriftPolicy::default());
    assert_eq!(report.workloads.len(), 1);
    assert_eq!(report.workloads[0].pods.uninjected, 2);
}

#[test]
fn strings_of_deleted_pods_do_not_accumulate() {
    let mut index = DriftIndex::default();
    for i in 0..3000 {
        let name = format!("job-{i}");
        // Each with labels of its own (the Job controller's `job-name`): their label sets
        // go with them.
        index.apply_pod(
            &PodMeta::new("batch", &name)
                .request("logger:v1")
                .owner("Job", &name)
                .label("job-name", &name)
                .0,
            &keys(),
        );
        index.delete_pod("batch", &name);
    }
    assert_eq!(index.pod_count(), 0);
    assert!(
        index.interned.len() < 1500,
        "{} strings kept",
        index.interned.len()
    );
    assert!(
        index.interned.label_sets() < 1500,
        "{} label sets kept",
        index.interned.label_sets()
    );
}

#[test]
fn namespaces_deleted_with_everything_in_them_leave_nothing_behind() {
    // Preview environments: a namespace a pull request, created, filled and deleted.
    let mut index = DriftIndex::default();
    for i in 0..3000 {
        let namespace = format!("pr-{i}");
        index.apply_workload(
            WorkloadKind::Deployment,
            &PodMeta::new(&namespace, "web").0,
            &keys(),
        );
        index.apply_workload(
            WorkloadKind::StatefulSet,
            &PodMeta::new(&namespace, "db").0,
            &keys(),
        );
        index.apply_replicaset(&rs(&namespace, "web-1", Some("web")));
        index.apply_pod(
            &PodMeta::new(&namespace, "web-1-a")
                .request("logger:v1")
                .owner("ReplicaSet", "web-1")
                .0,
            &keys(),
        );
        index.delete_pod(&namespace, "web-1-a");
        index.delete_replicaset(&namespace, "web-1");
        index.delete_workload(WorkloadKind::StatefulSet, &namespace, "db");
        index.delete_workload(WorkloadKind::Deployment, &namespace, "web");
    }
    assert_eq!(index.pod_count(), 0);
    assert_eq!(
        index.replicasets.len(),
        0,
        "namespaces kept for ReplicaSets"
    );
    for (kind, workloads) in index.workloads.iter().enumerate() {
        assert_eq!(
            workloads.len(),
            0,
            "namespaces kept for workloads of kind {kind}"
        );
    }
    assert!(
        index.interned.len() < 1500,
        "{} strings kept",
        index.interned.len()
    );
}

#[test]
fn workloads_are_stripped_to_what_planning_needs() {
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "team", "generation": 4, "annotations": {"injector/rollout": "Disabled", "injector/rolled-at": "2026-11-21T10:00:00Z", "injector/rollout-priority": " -5 ", "injector/allow-downtime": "True", "injector/maintenance-window": "Sat-Sun 00:00-04:00 Europe/Oslo"},
                     "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
        "spec": {"paused": true, "replicas": 3, "minReadySeconds": 10, "strategy": {"type": "RollingUpdate"}, "selector": {},
                 "template": {"metadata": {"annotations": {"injector/rollout-revision": "logger:v1=abc", "injector/rollout-heal": "logger:v1=def", "injector/request": "logger:v1"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
        "status": {"observedGeneration": 3, "replicas": 4, "updatedReplicas": 1, "readyReplicas": 3, "availableReplicas": 3}
    }))
    .unwrap();
    let entry = WorkloadEntry::from_deployment(&deployment, &keys());
    assert_eq!(
        entry,
        WorkloadEntry {
            rollout_disabled: true,
            rollout_revision: Some("logger:v1=abc".into()),
            rollout_heal: Some("logger:v1=def".into()),
            generation: Some(4),
            observed_generation: Some(3),
            update_strategy: UpdateStrategy::RollingUpdate,
            partition: None,
            paused: true,
            replicas: Some(3),
            updated_replicas: Some(1),
            ready_replicas: Some(3),
            available_replicas: Some(3),
            status_replicas: Some(4),
            update_revision_pending: false,
            rolled_at: Some("2026-11-21T10:00:00Z".parse().unwrap()),
            rollout_priority: Some(-5),
            downtime: None,
            max_unavailable: Some(0),
            min_ready_seconds: Some(10),
            allow_downtime: true,
            maintenance_window: Some(Ok(crate::maintenance::MaintenanceWindows::parse_list(
                "Sat-Sun 00:00-04:00 Europe/Oslo"
            )
            .unwrap())),
            restart_method: None,
            template_request: Some("logger:v1".into()),
            // No pod-level resources: the template's spec is not kept.
            template: None,
        }
    );
    // Every kind reads its pod template's annotations, each from its own key.
    let template = json!({"metadata": {"annotations": {"injector/rollout-revision": "tracer:v1=111", "injector/rollout-heal": "tracer:v1=222", "injector/request": "tracer:v1"}},
                          "spec": {"containers": [{"name": "db"}]}});
    let from_template = |entry: &WorkloadEntry| {
        (
            entry.rollout_revision.clone(),
            entry.rollout_heal.clone(),
            entry.template_request.clone(),
        )
    };
    let stamped = (
        Some("tracer:v1=111".into()),
        Some("tracer:v1=222".into()),
        Some("tracer:v1".into()),
    );
    let statefulset: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "team"},
        "spec": {"serviceName": "db", "selector": {}, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
                 "template": template}
    }))
    .unwrap();
    let entry = WorkloadEntry::from_statefulset(&statefulset, &keys());
    assert_eq!((entry.partition, entry.rollout_disabled), (Some(2), false));
    assert_eq!(from_template(&entry), stamped);
    let daemonset: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": "team"},
        "spec": {"selector": {}, "updateStrategy": {"type": "OnDelete"}, "template": template},
        "status": {"desiredNumberScheduled": 2, "numberReady": 1, "currentNumberScheduled": 2, "numberMisscheduled": 0}
    }))
    .unwrap();
    let entry = WorkloadEntry::from_daemonset(&daemonset, &keys());
    assert_eq!(
        (entry.update_strategy, entry.replicas, entry.ready_replicas),
        (UpdateStrategy::OnDelete, Some(2), Some(1))
    );
    assert_eq!(from_template(&entry), stamped);
    // A template with pod-level resources is kept whole, for the engine's preflight.
    let mut with_resources = daemonset.clone();
    let spec = with_resources.spec.as_mut().unwrap();
    spec.template.spec.as_mut().unwrap().resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "500m"}})).unwrap());
    let kept = WorkloadEntry::from_daemonset(&with_resources, &keys()).template;
    let kept: serde_json::Value = serde_json::from_str(&kept.expect("kept")).unwrap();
    assert_eq!(kept["spec"]["resources"]["requests"]["cpu"], "500m");
    assert_eq!(
        kept["metadata"]["annotations"]["injector/request"],
        "tracer:v1"
    );

    let mut index = DriftIndex::default();
    index.apply_workload_entry(
        WorkloadKind::Deployment,
        "team",
        "web",
        WorkloadEntry::from_deployment(&deployment, &keys()),
    );
    assert!(
        index
            .workload(WorkloadKind::Deployment, "team", "web")
            .unwrap()
            .paused
    );
    index.reset_workload_entries(WorkloadKind::Deployment, Vec::new());
    assert!(
        index
            .workload(WorkloadKind::Deployment, "team", "web")
            .is_none()
    );
}

#[test]
fn one_staleness_rule_gives_each_state_and_its_restart() {
    let want = Some("aaaaaaaaaaaa");
    assert_eq!(
        sidecar_state(true, Some("aaaaaaaaaaaa"), want),
        DriftState::Current
    );
    assert_eq!(
        sidecar_state(true, Some("bbbbbbbbbbbb"), want),
        DriftState::Stale
    );
    assert_eq!(sidecar_state(true, None, want), DriftState::Unknown);
    assert_eq!(sidecar_state(false, None, want), DriftState::Uninjected);
    assert_eq!(
        sidecar_state(true, Some("bbbbbbbbbbbb"), None),
        DriftState::Orphaned
    );
    let restarted: Vec<DriftState> = DriftState::ALL
        .into_iter()
        .filter(|s| s.needs_restart(false))
        .collect();
    assert_eq!(restarted, [DriftState::Uninjected, DriftState::Stale]);
    assert!(DriftState::Unknown.needs_restart(true));
    assert!(!DriftState::Orphaned.needs_restart(true));
}

#[test]
fn a_report_filters_by_sidecar_and_state_and_says_when_anything_needs_a_restart() {
    let sidecar = |name: &str| SidecarDrift {
        name: name.into(),
        revision: None,
        pods: StateCounts::default(),
        native: 0,
        campaign: None,
        expected_end: None,
        note: None,
        foreign: false,
    };
    let row = |name: &str, sidecar: &str, state: DriftState| WorkloadDrift {
        kind: crate::workload::OwnerKind::Workload(WorkloadKind::Deployment),
        namespace: "team".into(),
        name: name.into(),
        sidecar: sidecar.into(),
        state,
        reason: String::new(),
        pods: StateCounts::default(),
        form: None,
        native: 0,
        needs_restart: false,
        why: RowReason::Counts,
    };
    let report = DriftReport {
        sidecars: vec![sidecar("logger:latest"), sidecar("tracer:v1")],
        workloads: vec![
            row("a", "logger:latest", DriftState::Stale),
            row("b", "tracer:v1", DriftState::Current),
            row("c", "tracer:v1", DriftState::Uninjected),
        ],
    };
    assert!(report.needs_restart());
    let asked: Vec<String> = vec!["Logger".into(), "tracer:v1".into(), "tracr:v1".into()];
    assert_eq!(
        report.unmatched_sidecars(&asked),
        ["tracr:v1"],
        "a misspelt name is called out; `Logger` is logger:latest"
    );
    let logger = report.clone().filtered(&["Logger".into()], &[]);
    assert_eq!(logger.sidecars.len(), 1);
    assert_eq!(logger.workloads.len(), 1, "`Logger` means logger:latest");
    let current = report.clone().filtered(&[], &[DriftState::Current]);
    assert_eq!(current.workloads.len(), 1);
    assert!(!current.needs_restart());
    assert_eq!("STALE".parse::<DriftState>(), Ok(DriftState::Stale));
    assert!(
        "rotten"
            .parse::<DriftState>()
            .unwrap_err()
            .contains("current")
    );
}

#[test]
fn a_workload_whose_pods_are_all_denied_shows_from_its_template() {
    let set = sidecars(&[LOGGER_V1]);
    let mut index = DriftIndex::default();
    let deployment = |request: &str, replicas: i32| {
        let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "team"},
            "spec": {"replicas": replicas, "selector": {},
                     "template": {"metadata": {"annotations": {"injector/request": request}},
                                  "spec": {"containers": [{"name": "app"}]}}}
        }))
        .unwrap();
        WorkloadEntry::from_deployment(&deployment, &keys())
    };
    for (name, request, replicas) in [
        ("missing", "logger:v1,logger:v9", 2),
        ("garbled", "logger:v1:extra", 1),
        ("scaled-down", "logger:v9", 0),
        ("defined", "logger:v1", 1),
    ] {
        index.apply_workload_entry(
            WorkloadKind::Deployment,
            "team",
            name,
            deployment(request, replicas),
        );
    }
    index.apply_workload_entry(
        WorkloadKind::Deployment,
        "kube-system",
        "sys",
        deployment("logger:v9", 1),
    );
    // A workload with pods is classified by its pods, not its template.
    index.apply_replicaset(&rs("team", "running-1", Some("running")));
    index.apply_workload_entry(
        WorkloadKind::Deployment,
        "team",
        "running",
        deployment("logger:v9", 1),
    );
    index.apply_pod(
        &PodMeta::new("team", "running-1-a")
            .request("logger:v9")
            .owner("ReplicaSet", "running-1")
            .0,
        &keys(),
    );
    let policy = DriftPolicy {
        ignore_namespaces: ["kube-system".to_owned()].into(),
        ..Default::default()
    };
    let report = index.classify(&set, &policy);
    let denied: Vec<(&str, &str, &RowReason)> = report
        .workloads
        .iter()
        .filter(|w| w.state == DriftState::Denied)
        .map(|w| (w.name.as_str(), w.sidecar.as_str(), &w.why))
        .collect();
    assert_eq!(denied.len(), 2, "{denied:#?}");
    assert_eq!(denied[0].0, "garbled");
    assert!(
        matches!(denied[0].2, RowReason::RequestUnparsed { .. }),
        "{:?}",
        denied[0].2
    );
    assert_eq!(denied[1], ("missing", "logger:v9", &RowReason::NoConfig));
    assert_eq!(
        workload(&report, "Deployment", "running").state,
        DriftState::Orphaned
    );
    assert!(
        !report.needs_restart(),
        "a denied workload is not restarted"
    );
    assert_eq!("denied".parse::<DriftState>().unwrap(), DriftState::Denied);
}

/// Pods classified alike are counted together: each pod still counts once in its workload's
/// row, a workload's pods at two revisions give it the worse state, and bare pods with the same
/// annotations stay one row each.
#[test]
fn pods_classified_alike_are_counted_once_each() {
    let set = sidecars(&[LOGGER_V1]);
    let current = stamp(LOGGER_V1);
    let mut index = DriftIndex::default();
    index.apply_replicaset(&rs("team", "web-1", Some("web")));
    for p in 0..5 {
        let revision = if p < 3 {
            current.as_str()
        } else {
            "logger:v1=000000000000"
        };
        let pod = PodMeta::new("team", &format!("web-1-{p}"))
            .request("logger:v1")
            .injected(revision)
            .owner("ReplicaSet", "web-1");
        index.apply_pod(&pod.0, &keys());
    }
    for name in ["bare-a", "bare-b"] {
        let pod = PodMeta::new("team", name)
            .request("logger:v1")
            .injected("logger:v1=000000000000");
        index.apply_pod(&pod.0, &keys());
    }
    let policy = DriftPolicy {
        evict_bare_pods: true,
        ..Default::default()
    };
    let report = index.classify(&set, &policy);

    let web = workload(&report, "Deployment", "web");
    assert_eq!(
        (web.pods.current, web.pods.stale, web.pods.total()),
        (3, 2, 5)
    );
    assert_eq!(web.state, DriftState::Stale);
    assert_eq!(
        web.why,
        RowReason::Stale {
            from: "000000000000".into(),
            to: current.trim_start_matches("logger:v1=").into()
        }
    );
    for name in ["bare-a", "bare-b"] {
        let bare = workload(&report, "Pod", name);
        assert_eq!((bare.pods.stale, bare.pods.total()), (1, 1), "{name}");
    }
    assert_eq!(report.workloads.len(), 3, "{:#?}", report.workloads);
    let logger = &report.sidecars[0];
    assert_eq!((logger.pods.current, logger.pods.stale), (3, 4));
}

#[test]
fn pods_of_namespaces_the_webhook_configuration_leaves_out_are_excluded_not_uninjected() {
    let set = sidecars(&[LOGGER_V1]);
    let wanted = set.revisions_in_force();
    let mut index = DriftIndex::default();
    index.track_changes();
    for namespace in ["team", "legacy"] {
        index.apply_pod(
            &PodMeta::new(namespace, "p")
                .request("logger:v1")
                .owner("StatefulSet", "db")
                .0,
            &keys(),
        );
    }
    let namespace = |name: &str, labels: serde_json::Value| -> ObjectMeta {
        serde_json::from_value(json!({"name": name, "labels": labels})).unwrap()
    };
    let disabled = json!({"sidecar-injector.io/injection": "disabled"});
    index.reset_namespaces(&[
        namespace("team", json!({})),
        namespace("legacy", disabled.clone()),
    ]);
    let configuration: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
        serde_json::from_value(json!({
            "metadata": {"name": "sidecar-injector"},
            "webhooks": [{
                "name": "sidecar-injector.injector-system.svc",
                "clientConfig": {"url": "https://127.0.0.1/mutate"},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": {"matchExpressions": [
                    {"key": "sidecar-injector.io/injection", "operator": "NotIn", "values": ["disabled"]},
                ]},
            }],
        }))
        .unwrap();
    let states = |index: &DriftIndex| -> Vec<(String, DriftState, RowReason)> {
        index
            .classify_revisions(&wanted, &DriftPolicy::default())
            .workloads
            .into_iter()
            .map(|w| (w.namespace, w.state, w.why))
            .collect()
    };
    let mut gauge = DriftGauge::new(DriftPolicy::default());
    let counted = |gauge: &mut DriftGauge, index: &mut DriftIndex| {
        let rows = gauge.update(index, &wanted);
        (rows[0].pods.uninjected, rows[0].pods.excluded)
    };
    // Labels alone say nothing: which labels count is the configuration's to say.
    assert!(
        states(&index)
            .iter()
            .all(|(_, state, _)| *state == DriftState::Uninjected)
    );
    assert_eq!(counted(&mut gauge, &mut index), (2, 0));

    index.set_webhook_reach(Some(WebhookReach::of(&configuration)));
    let now = states(&index);
    assert_eq!(now[1].0, "team");
    assert_eq!(now[1].1, DriftState::Uninjected);
    assert_eq!(now[0].0, "legacy");
    assert_eq!(now[0].1, DriftState::Excluded);
    assert!(
        matches!(
            &now[0].2,
            RowReason::Excluded(Exclusion::Namespace(why))
                if why.contains("namespace legacy is not sent to the webhook (MutatingWebhookConfiguration sidecar-injector")
        ),
        "{:?}",
        now[0].2
    );
    assert_eq!(
        counted(&mut gauge, &mut index),
        (1, 1),
        "the gauge counts again"
    );

    // The label removed: reached again, and uninjected.
    index.apply_namespace(&namespace("legacy", json!({})));
    assert!(
        states(&index)
            .iter()
            .all(|(_, state, _)| *state == DriftState::Uninjected)
    );
    assert_eq!(counted(&mut gauge, &mut index), (2, 0));
    // Labelled again, then the configuration deleted: every namespace reached.
    index.apply_namespace(&namespace("legacy", disabled));
    assert_eq!(counted(&mut gauge, &mut index), (1, 1));
    index.set_webhook_reach(None);
    assert_eq!(counted(&mut gauge, &mut index), (2, 0));
    // A namespace deleted with its labels: its pods (if any are left) count as reached.
    index.set_webhook_reach(Some(WebhookReach::of(&configuration)));
    index.delete_namespace("legacy");
    assert_eq!(counted(&mut gauge, &mut index), (2, 0));
}

#[test]
fn pods_an_object_selector_leaves_out_are_excluded_by_their_labels() {
    let set = sidecars(&[LOGGER_V1]);
    let wanted = set.revisions_in_force();
    let mut index = DriftIndex::default();
    index.track_changes();
    // web's two pods opt out by label (as with Istio's `sidecar.istio.io/inject: "false"`); a
    // StatefulSet's pods each carry a label of their own, and db's opt out too.
    index.apply_replicaset(&rs("team", "web-1", Some("web")));
    index.apply_replicaset(&rs("team", "api-1", Some("api")));
    for (pod, owner, app) in [
        ("web-1-a", "web-1", "web"),
        ("web-1-b", "web-1", "web"),
        ("api-1-a", "api-1", "api"),
    ] {
        let mut meta = PodMeta::new("team", pod)
            .request("logger:v1")
            .owner("ReplicaSet", owner)
            .label("app", app);
        if app == "web" {
            meta = meta.label("sidecars", "off");
        }
        index.apply_pod(&meta.0, &keys());
    }
    for pod in ["db-0", "db-1"] {
        index.apply_pod(
            &PodMeta::new("team", pod)
                .request("logger:v1")
                .owner("StatefulSet", "db")
                .label("statefulset.kubernetes.io/pod-name", pod)
                .label("sidecars", "off")
                .0,
            &keys(),
        );
    }
    let namespace: ObjectMeta = serde_json::from_value(json!({"name": "team"})).unwrap();
    index.reset_namespaces(&[namespace]);
    let configuration = |object_selector: serde_json::Value| {
        serde_json::from_value::<
            k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
        >(json!({
            "metadata": {"name": "sidecar-injector"},
            "webhooks": [{
                "name": "sidecar-injector.injector-system.svc",
                "clientConfig": {"url": "https://127.0.0.1/mutate"},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "objectSelector": object_selector,
            }],
        }))
        .unwrap()
    };
    let opt_out = configuration(json!({"matchExpressions": [
        {"key": "sidecars", "operator": "NotIn", "values": ["off"]},
    ]}));
    let states = |index: &DriftIndex| -> Vec<(String, DriftState, u32, RowReason)> {
        index
            .classify_revisions(&wanted, &DriftPolicy::default())
            .workloads
            .into_iter()
            .map(|w| (w.name, w.state, w.pods.total(), w.why))
            .collect()
    };
    let mut gauge = DriftGauge::new(DriftPolicy::default());
    let counted = |gauge: &mut DriftGauge, index: &mut DriftIndex| {
        let rows = gauge.update(index, &wanted);
        (rows[0].pods.uninjected, rows[0].pods.excluded)
    };
    assert_eq!(counted(&mut gauge, &mut index), (5, 0));

    index.set_webhook_reach(Some(WebhookReach::of(&opt_out)));
    let left_out = "the pods' labels leave them out of the webhook (MutatingWebhookConfiguration sidecar-injector: its objectSelector wants sidecars notin (off))";
    assert_eq!(
        states(&index),
        [
            (
                "api".to_owned(),
                DriftState::Uninjected,
                1,
                RowReason::Counts
            ),
            (
                "db".to_owned(),
                DriftState::Excluded,
                2,
                RowReason::Excluded(Exclusion::Namespace(left_out.to_owned()))
            ),
            (
                "web".to_owned(),
                DriftState::Excluded,
                2,
                RowReason::Excluded(Exclusion::Namespace(left_out.to_owned()))
            ),
        ],
        "{:#?}",
        states(&index)
    );
    assert_eq!(
        counted(&mut gauge, &mut index),
        (1, 4),
        "the gauge counts again"
    );

    // One of web's pods relabelled (its opt-out removed): reached, and uninjected.
    index.apply_pod(
        &PodMeta::new("team", "web-1-b")
            .request("logger:v1")
            .owner("ReplicaSet", "web-1")
            .label("app", "web")
            .0,
        &keys(),
    );
    assert_eq!(counted(&mut gauge, &mut index), (2, 3));
    let report = index.classify_revisions(&wanted, &DriftPolicy::default());
    let web = workload(&report, "Deployment", "web");
    assert_eq!(web.state, DriftState::Uninjected);
    assert_eq!((web.pods.uninjected, web.pods.excluded), (1, 1), "{web:#?}");
    // An OnDelete StatefulSet with one pod opted back in: only that pod is evicted; the other's
    // replacement would not be injected either.
    index.apply_pod(
        &PodMeta::new("team", "db-1")
            .request("logger:v1")
            .owner("StatefulSet", "db")
            .label("statefulset.kubernetes.io/pod-name", "db-1")
            .0,
        &keys(),
    );
    assert_eq!(
        index.pods_needing_restart(WorkloadKind::StatefulSet, "team", "db", &wanted, false),
        [PodToReplace {
            name: "db-1".to_owned(),
            injected: false,
            revision: None,
        }]
    );

    // An opt-in selector instead: only pods labelled on are reached, none is.
    let opt_in = configuration(json!({"matchLabels": {"sidecars": "on"}}));
    index.set_webhook_reach(Some(WebhookReach::of(&opt_in)));
    assert_eq!(counted(&mut gauge, &mut index), (0, 5));
    assert!(
        index
            .pods_needing_restart(WorkloadKind::StatefulSet, "team", "db", &wanted, false)
            .is_empty()
    );
    // The selector removed from the configuration: every pod reached again.
    index.set_webhook_reach(Some(WebhookReach::of(&configuration(json!({})))));
    assert!(
        states(&index)
            .iter()
            .all(|(_, state, _, _)| *state == DriftState::Uninjected)
    );
    assert_eq!(counted(&mut gauge, &mut index), (5, 0));
}

#[test]
fn a_pod_s_labels_are_shared_with_its_workload_s_and_follow_its_changes() {
    let mut index = DriftIndex::default();
    let pod = |name: &str, hash: &str| {
        PodMeta::new("team", name)
            .request("logger:v1")
            .owner("ReplicaSet", "web-1")
            .label("app", "web")
            .label("pod-template-hash", hash)
            .0
    };
    index.apply_pod(&pod("web-1-a", "1"), &keys());
    index.apply_pod(&pod("web-1-b", "1"), &keys());
    let labels = |index: &DriftIndex, name: &str| {
        index.pods[&(Arc::from("team"), Box::from(name))]
            .labels
            .clone()
    };
    assert!(Arc::ptr_eq(
        &labels(&index, "web-1-a"),
        &labels(&index, "web-1-b")
    ));
    // A status update: the same set.
    let before = labels(&index, "web-1-a");
    index.apply_pod(&pod("web-1-a", "1"), &keys());
    assert!(Arc::ptr_eq(&before, &labels(&index, "web-1-a")));
    // Relabelled: its new labels, and the other pod keeps the old ones.
    index.apply_pod(&pod("web-1-a", "2"), &keys());
    let now: Vec<(String, String)> = labels(&index, "web-1-a")
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        now,
        [
            ("app".to_owned(), "web".to_owned()),
            ("pod-template-hash".to_owned(), "2".to_owned())
        ]
    );
    assert_eq!(labels(&index, "web-1-b")[1].1.as_ref(), "1");
    // A label removed is seen too (same first label, one fewer).
    index.apply_pod(
        &PodMeta::new("team", "web-1-b")
            .request("logger:v1")
            .owner("ReplicaSet", "web-1")
            .label("app", "web")
            .0,
        &keys(),
    );
    assert_eq!(labels(&index, "web-1-b").len(), 1);
    // ...and one added after the others.
    index.apply_pod(
        &PodMeta::new("team", "web-1-b")
            .request("logger:v1")
            .owner("ReplicaSet", "web-1")
            .label("app", "web")
            .label("sidecars", "off")
            .0,
        &keys(),
    );
    assert_eq!(labels(&index, "web-1-b").len(), 2);
}

/// Each pod's form comes from what the webhook wrote on it: a workload half migrated reads
/// `mixed`, with how many run the sidecar natively, and the sidecar row counts them all.
#[test]
fn the_report_says_how_each_workloads_pods_run_a_sidecar() {
    let set = sidecars(&[LOGGER_V1]);
    let current = stamp(LOGGER_V1);
    let mut index = DriftIndex::default();
    for (workload, native_pods) in [("web", 2), ("api", 0), ("batch", 3)] {
        index.apply_replicaset(&rs("team", &format!("{workload}-1"), Some(workload)));
        for p in 0..3 {
            let mut pod = PodMeta::new("team", &format!("{workload}-1-{p}"))
                .request("logger:v1")
                .injected(&current)
                .owner("ReplicaSet", &format!("{workload}-1"));
            if p < native_pods {
                pod = pod.annotation("injector/injected-native", "Logger:v1");
            }
            index.apply_pod(&pod.0, &keys());
        }
    }
    // Never injected: no form at all, whatever it was annotated with.
    index.apply_replicaset(&rs("team", "cold-1", Some("cold")));
    let cold = PodMeta::new("team", "cold-1-0")
        .request("logger:v1")
        .annotation("injector/injected-native", "logger:v1")
        .owner("ReplicaSet", "cold-1");
    index.apply_pod(&cold.0, &keys());
    let report = index.classify(&set, &DriftPolicy::default());

    let form = |name: &str| {
        let row = workload(&report, "Deployment", name);
        (row.form, row.native)
    };
    assert_eq!(form("web"), (Some(SidecarForm::Mixed), 2));
    assert_eq!(form("api"), (Some(SidecarForm::Classic), 0));
    assert_eq!(form("batch"), (Some(SidecarForm::Native), 3));
    assert_eq!(form("cold"), (None, 0));
    assert_eq!(report.sidecars[0].native, 5);
    let json = serde_json::to_value(workload(&report, "Deployment", "web")).unwrap();
    assert_eq!(
        (&json["form"], &json["native"]),
        (&json!("mixed"), &json!(2))
    );
}
