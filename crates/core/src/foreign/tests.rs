use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Value, json};

use super::*;
use crate::drift::{DriftState, ForeignWorkload, RowReason, SidecarForm, foreign_rows};

fn names() -> ForeignSidecars {
    ForeignSidecars::new(["mesh-proxy"]).unwrap()
}

fn template() -> Value {
    json!({
        "containers": [{"name": "app", "image": "app:1"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
    })
}

/// A pod as a mesh injector leaves it: the template's app, the proxy after it, the proxy's
/// volume, and the token volume the ServiceAccount admission gives a generated name.
fn injected(image: &str, token: &str, random: &str) -> Value {
    json!({
        "containers": [
            {"name": "app", "image": "app:1", "volumeMounts": [
                {"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
            ]},
            {"name": "mesh-proxy", "image": image, "args": ["proxy", "sidecar"],
             "env": [{"name": "MESH_ID", "value": "one"}, {"name": "NONCE", "value": random}],
             "volumeMounts": [
                {"name": "mesh-certs", "mountPath": "/etc/certs"},
                {"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
             ]},
        ],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "mesh-certs", "emptyDir": {"medium": "Memory"}},
            {"name": token, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        ],
    })
}

fn spec(value: Value) -> PodSpec {
    serde_json::from_value(value).unwrap()
}

fn expected(first: Value, second: Value) -> Expected {
    Expected::from_answers(&spec(template()), &spec(first), &spec(second), &names())
}

fn proxy_v1() -> Expected {
    expected(
        injected("proxy:1.27", "kube-api-access-aaaaa", "r1"),
        injected("proxy:1.27", "kube-api-access-bbbbb", "r2"),
    )
}

fn edit(mut pod: Value, edit: impl FnOnce(&mut Value)) -> Value {
    edit(&mut pod);
    pod
}

#[test]
fn a_pod_as_a_new_one_gets_it_is_current_whatever_varies_per_admission() {
    let expected = proxy_v1();
    let pod = injected("proxy:1.27", "kube-api-access-zzzzz", "r3");
    let judgement = expected.judge(&spec(pod), &names());
    assert!(judgement.is_current(), "{judgement:?}");
    assert_eq!(judgement.revision, expected.revision());
    assert_eq!(expected.revision().len(), 12);
    let ignored: Vec<&str> = expected.ignored().iter().map(String::as_str).collect();
    assert_eq!(
        ignored,
        [
            "addedVolumes[1].name",
            "mesh-proxy.env[1].value",
            "mesh-proxy.volumeMounts[1].name",
        ]
    );
}

#[test]
fn a_new_image_makes_the_pod_stale_and_is_named_alone() {
    let expected = expected(
        injected("proxy:1.28", "kube-api-access-aaaaa", "r1"),
        injected("proxy:1.28", "kube-api-access-bbbbb", "r2"),
    );
    let pod = injected("proxy:1.27", "kube-api-access-zzzzz", "r3");
    let judgement = expected.judge(&spec(pod), &names());
    assert_ne!(judgement.revision, expected.revision());
    assert_eq!(
        judgement.changes,
        [ForeignChange::Image {
            container: "mesh-proxy".into(),
            running: "proxy:1.27".into(),
            expected: "proxy:1.28".into(),
        }]
    );
}

#[test]
fn env_entries_added_removed_and_changed_are_named_by_their_names() {
    let with_env = |env: Value| move |pod: &mut Value| pod["containers"][1]["env"] = env;
    let new = |token, random| {
        edit(
            injected("proxy:1.27", token, random),
            with_env(json!([
                {"name": "MESH_ID", "value": "two"},
                {"name": "NONCE", "value": random},
                {"name": "MESH_META", "value": "x"},
            ])),
        )
    };
    let expected = expected(
        new("kube-api-access-a", "r1"),
        new("kube-api-access-b", "r2"),
    );
    let pod = edit(
        injected("proxy:1.27", "kube-api-access-c", "r3"),
        with_env(json!([
            {"name": "MESH_ID", "value": "one"},
            {"name": "NONCE", "value": "r3"},
            {"name": "OLD", "value": "y"},
        ])),
    );
    let judgement = expected.judge(&spec(pod), &names());
    assert_eq!(
        judgement.changes,
        [ForeignChange::Entries {
            container: "mesh-proxy".into(),
            field: "env".into(),
            entries: EntryChanges {
                added: vec!["MESH_META".into()],
                removed: vec!["OLD".into()],
                changed: vec!["MESH_ID".into()],
            },
        }]
    );
}

#[test]
fn form_position_fields_and_added_volumes_are_each_a_change() {
    // A new pod gets the proxy as a native sidecar (an init container that keeps running),
    // with new args and one more volume.
    let native = |token: &str, random: &str| {
        edit(injected("proxy:1.27", token, random), |pod| {
            let mut proxy = pod["containers"][1].take();
            proxy["restartPolicy"] = json!("Always");
            proxy["args"] = json!(["proxy", "sidecar", "--native"]);
            pod["containers"] = json!([pod["containers"][0].clone()]);
            pod["initContainers"] = json!([proxy]);
            pod["volumes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "mesh-socket", "emptyDir": {}}));
        })
    };
    let expected = expected(
        native("kube-api-access-a", "r1"),
        native("kube-api-access-b", "r2"),
    );
    let pod = injected("proxy:1.27", "kube-api-access-c", "r3");
    let changes = expected.judge(&spec(pod), &names()).changes;
    assert!(
        changes.contains(&ForeignChange::Form {
            container: "mesh-proxy".into(),
            running: ContainerForm::Classic,
            expected: ContainerForm::Native,
        }),
        "{changes:?}"
    );
    assert!(changes.contains(&ForeignChange::Position {
        container: "mesh-proxy".into(),
        running: 1,
        expected: 0,
    }));
    assert!(changes.contains(&ForeignChange::Field {
        container: "mesh-proxy".into(),
        field: "args".into(),
    }));
    assert!(changes.contains(&ForeignChange::Volumes(EntryChanges {
        added: vec!["mesh-socket".into()],
        ..EntryChanges::default()
    })));
    assert_eq!(changes.len(), 4, "{changes:?}");
}

#[test]
fn a_pod_without_the_sidecar_misses_it_and_one_a_new_pod_lacks_has_it_no_longer() {
    let expected = proxy_v1();
    // As the ServiceAccount admission leaves a pod: a token volume of a generated name.
    let plain = spec(edit(template(), |pod| {
        pod["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "kube-api-access-c", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}));
    }));
    assert_eq!(
        expected.judge(&plain, &names()).changes,
        [
            ForeignChange::Missing {
                container: "mesh-proxy".into()
            },
            ForeignChange::Volumes(EntryChanges {
                added: vec!["mesh-certs".into()],
                ..EntryChanges::default()
            }),
        ]
    );
    let none = Expected::from_answers(&plain, &plain, &plain, &names());
    assert!(none.is_empty());
    let pod = injected("proxy:1.27", "kube-api-access-c", "r3");
    let changes = none.judge(&spec(pod), &names()).changes;
    assert_eq!(
        changes[0],
        ForeignChange::NoLongerInjected {
            container: "mesh-proxy".into()
        }
    );
}

#[test]
fn what_the_template_declares_is_not_the_injectors() {
    // The app's own image and volume are the workload's business: its controller rolls them.
    let expected = proxy_v1();
    let pod = edit(injected("proxy:1.27", "kube-api-access-c", "r3"), |pod| {
        pod["containers"][0]["image"] = json!("app:2");
        pod["volumes"][0]["emptyDir"] = json!({"sizeLimit": "1Gi"});
    });
    assert!(expected.judge(&spec(pod), &names()).is_current());
}

#[test]
fn the_revision_depends_on_the_content_only() {
    let again = proxy_v1();
    assert_eq!(proxy_v1().revision(), again.revision());
    let other = expected(
        injected("proxy:1.28", "kube-api-access-a", "r1"),
        injected("proxy:1.28", "kube-api-access-b", "r2"),
    );
    assert_ne!(other.revision(), again.revision());
}

#[test]
fn container_names_are_checked() {
    assert_eq!(
        ForeignSidecars::new(["istio-proxy", "Linkerd_Proxy"]),
        Err(NotAContainerName {
            name: "Linkerd_Proxy".into()
        })
    );
    let names = ForeignSidecars::new([" istio-proxy "]).unwrap();
    assert!(names.contains("istio-proxy"));
    let pod = spec(injected("proxy:1", "t", "r").to_owned());
    assert!(names.carried_by(&pod).is_empty());
    assert_eq!(
        ForeignSidecars::new(["mesh-proxy"])
            .unwrap()
            .carried_by(&pod)
            .into_iter()
            .collect::<Vec<_>>(),
        ["mesh-proxy"]
    );
}

#[test]
fn rows_count_each_workloads_pods_and_name_one_stale_pods_changes() {
    let expected = expected(
        injected("proxy:1.28", "kube-api-access-a", "r1"),
        injected("proxy:1.28", "kube-api-access-b", "r2"),
    );
    let old = spec(injected("proxy:1.27", "kube-api-access-c", "r3"));
    let new = spec(injected("proxy:1.28", "kube-api-access-d", "r4"));
    let plain = spec(template());
    let workloads = [
        ForeignWorkload {
            kind: crate::workload::WorkloadKind::Deployment,
            namespace: "shop",
            name: "cart",
            expected: Ok(&expected),
            pods: vec![&old, &new, &old],
        },
        ForeignWorkload {
            kind: crate::workload::WorkloadKind::Deployment,
            namespace: "shop",
            name: "web",
            expected: Ok(&expected),
            pods: vec![&new],
        },
        ForeignWorkload {
            kind: crate::workload::WorkloadKind::StatefulSet,
            namespace: "shop",
            name: "db",
            expected: Err("pods \"db-\" is forbidden: cannot create"),
            pods: vec![&old],
        },
        ForeignWorkload {
            kind: crate::workload::WorkloadKind::Deployment,
            namespace: "shop",
            name: "plain",
            expected: Ok(&Expected::from_answers(&plain, &plain, &plain, &names())),
            pods: vec![&plain],
        },
    ];
    let (sidecars, rows) = foreign_rows(&workloads, &names());
    let states: Vec<(&str, DriftState, u32, u32, bool)> = rows
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.state,
                r.pods.stale,
                r.pods.current,
                r.needs_restart,
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("cart", DriftState::Stale, 2, 1, true),
            ("web", DriftState::Current, 0, 1, false),
            ("db", DriftState::Unknown, 0, 0, false),
        ]
    );
    assert_eq!(
        rows[0].why,
        RowReason::Foreign {
            from: expected.judge(&old, &names()).revision,
            to: expected.revision().to_owned(),
            changes: vec![ForeignChange::Image {
                container: "mesh-proxy".into(),
                running: "proxy:1.27".into(),
                expected: "proxy:1.28".into(),
            }],
        }
    );
    assert!(
        matches!(&rows[2].why, RowReason::ForeignNotAsked { error } if error.contains("forbidden"))
    );
    assert_eq!(rows[0].form, Some(SidecarForm::Classic));
    assert_eq!(sidecars.len(), 1);
    assert_eq!(sidecars[0].name, "mesh-proxy");
    assert!(sidecars[0].foreign);
    assert_eq!(
        (
            sidecars[0].pods.stale,
            sidecars[0].pods.current,
            sidecars[0].pods.unknown
        ),
        (2, 2, 1)
    );
}

#[test]
fn explain_findings_list_each_pod_and_the_fields_left_out() {
    use crate::explain::foreign_findings;
    let expected = expected(
        injected("proxy:1.28", "kube-api-access-a", "r1"),
        injected("proxy:1.28", "kube-api-access-b", "r2"),
    );
    let pods = [
        (
            "cart-1".to_owned(),
            spec(injected("proxy:1.27", "kube-api-access-c", "r3")),
        ),
        (
            "cart-2".to_owned(),
            spec(injected("proxy:1.28", "kube-api-access-d", "r4")),
        ),
    ];
    let kind = crate::workload::WorkloadKind::Deployment;
    let found = foreign_findings(kind, ("shop", "cart"), Ok(&expected), &pods, &names());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].container, "mesh-proxy");
    assert_eq!(found[0].expected.as_deref(), Some(expected.revision()));
    assert_eq!(
        found[0].ignored,
        [
            "addedVolumes[1].name",
            "mesh-proxy.env[1].value",
            "mesh-proxy.volumeMounts[1].name"
        ]
    );
    let states: Vec<(&str, DriftState, usize)> = found[0]
        .pods
        .iter()
        .map(|p| (p.pod.as_str(), p.state, p.changes.len()))
        .collect();
    assert_eq!(
        states,
        [
            ("cart-1", DriftState::Stale, 1),
            ("cart-2", DriftState::Current, 0)
        ]
    );

    let unknown = foreign_findings(kind, ("shop", "cart"), Err("refused"), &pods, &names());
    assert_eq!(unknown[0].unknown.as_deref(), Some("refused"));
    assert_eq!(unknown[0].expected, None);
    assert!(
        unknown[0]
            .pods
            .iter()
            .all(|p| p.state == DriftState::Unknown)
    );
}

#[test]
fn only_the_pods_that_differ_are_to_be_replaced() {
    let expected = expected(
        injected("proxy:1.28", "kube-api-access-a", "r1"),
        injected("proxy:1.28", "kube-api-access-b", "r2"),
    );
    let old = spec(injected("proxy:1.27", "kube-api-access-c", "r3"));
    let new = spec(injected("proxy:1.28", "kube-api-access-d", "r4"));
    let plain = spec(template());
    assert_eq!(
        crate::drift::foreign_pods_to_replace(&expected, &[&new, &old, &plain, &new], &names()),
        [1, 2]
    );
}
