//! Sidecars another injector adds: Kyverno (a real webhook, not ours, built from its Go module)
//! injects `mesh-proxy` into pods labelled `mesh: on` by a ClusterPolicy, with a random value
//! in its env at each admission. `drift --foreign-sidecar mesh-proxy` compares each
//! workload's pods with what a dry-run create of its template gets now. On a control plane of
//! its own, so that Kyverno's webhook sees no other test's pods.

use super::*;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use support::cluster::OtherControlPlane;
use support::kyverno::Kyverno;

const NAMESPACE: &str = "shop";

fn drift(kubeconfig: &std::path::Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("drift")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "-o",
            "json",
            "-n",
            NAMESPACE,
            "--foreign-sidecar",
            "mesh-proxy",
        ])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("drift runs")
}

/// `rollout --foreign-sidecar mesh-proxy` in the test's namespace (its Lease there too).
fn rollout(kubeconfig: &std::path::Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("rollout")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--include-namespace",
            NAMESPACE,
            "--injector-namespace",
            NAMESPACE,
        ])
        .args([
            "--foreign-sidecar",
            "mesh-proxy",
            "--bake",
            "1s",
            "--in-place",
            "off",
        ])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("rollout runs")
}

fn succeeded_ok(output: &std::process::Output) -> Vec<u8> {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout.clone()
}

fn report(kubeconfig: &std::path::Path) -> Value {
    let output = drift(kubeconfig, &[]);
    assert!(
        output.status.success(),
        "drift: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("drift prints JSON")
}

/// `(workload, state, stale pods, current pods, reason)` of each mesh-proxy row.
fn rows(report: &Value) -> Vec<(String, String, u64, u64, String)> {
    let mut rows: Vec<_> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["sidecar"] == "mesh-proxy")
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_owned(),
                w["state"].as_str().unwrap().to_owned(),
                w["pods"]["stale"].as_u64().unwrap(),
                w["pods"]["current"].as_u64().unwrap(),
                w["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn mesh_template(app: &str, mesh: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app, "mesh": mesh}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    })
}

/// Waits until `app` has `replicas` pods, each running `mesh-proxy` of `image` (or, with
/// `None`, none).
async fn wait_pods(pods: &Api<Pod>, app: &str, replicas: usize, image: Option<&str>) {
    eventually(DEADLINE, &format!("{app}'s pods"), || async {
        let listed = pods_in(pods, app).await;
        let images: Vec<Option<String>> = listed
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                p.spec.as_ref().and_then(|s| {
                    s.containers
                        .iter()
                        .find(|c| c.name == "mesh-proxy")
                        .and_then(|c| c.image.clone())
                })
            })
            .collect();
        (images.len() == replicas && images.iter().all(|i| i.as_deref() == image)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn drift_names_exactly_the_workloads_running_another_injectors_old_sidecar() {
    let plane = OtherControlPlane::start("foreign");
    // Pods turn Ready, so that restarts roll and finish.
    support::kubelet::start(&plane.plane.kubeconfig, Duration::from_millis(300));
    let client = plane.client().await;
    let kubeconfig = plane.plane.kubeconfig.clone();
    let mut kyverno = Kyverno::start(&plane.plane);
    kyverno.inject_mesh_proxy("mesh/proxy:1.27");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(&namespaces, json!({"metadata": {"name": NAMESPACE}})).await;
    kyverno.wait_injects(NAMESPACE, "mesh/proxy:1.27");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, replicas, mesh) in [("cart", 2, "on"), ("web", 1, "on"), ("plain", 1, "off")] {
        create(
            &deployments,
            json!({
                "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": mesh_template(name, mesh)}
            }),
        )
        .await;
    }
    wait_pods(&pods, "cart", 2, Some("mesh/proxy:1.27")).await;
    wait_pods(&pods, "web", 1, Some("mesh/proxy:1.27")).await;
    wait_pods(&pods, "plain", 1, None).await;

    // Every pod runs what a new pod gets: the random value Kyverno writes at each admission
    // is not drift. A workload without the sidecar has no row.
    let before = report(&kubeconfig);
    assert_eq!(
        rows(&before),
        [
            (
                "cart".into(),
                "current".into(),
                0,
                2,
                "all 2 pods current".into()
            ),
            (
                "web".into(),
                "current".into(),
                0,
                1,
                "all 1 pods current".into()
            ),
        ]
    );
    let sidecar = before["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "mesh-proxy")
        .expect("a mesh-proxy sidecar row");
    assert_eq!(sidecar["foreign"], json!(true));
    assert_eq!(sidecar["pods"]["current"], json!(3));

    // The injector's template changes: every injected pod runs the old sidecar now, and the
    // reason names the image, nothing else.
    kyverno.inject_mesh_proxy("mesh/proxy:1.28");
    kyverno.wait_injects(NAMESPACE, "mesh/proxy:1.28");
    let changed =
        "differ from what a new pod gets: mesh-proxy image mesh/proxy:1.27 -> mesh/proxy:1.28";
    assert_eq!(
        rows(&report(&kubeconfig)),
        [
            (
                "cart".into(),
                "stale".into(),
                2,
                0,
                format!("2 of 2 pods {changed}")
            ),
            (
                "web".into(),
                "stale".into(),
                1,
                0,
                format!("1 of 1 pods {changed}")
            ),
        ]
    );

    // explain says what a new pod gets, which fields it left out and why each pod differs.
    let explain = |output: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
            .arg("explain")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "deployment/cart",
                "-n",
                NAMESPACE,
                "--foreign-sidecar",
                "mesh-proxy",
            ])
            .args(["-o", output])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("explain runs");
        assert!(
            out.status.success(),
            "explain: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let answer: Value = serde_json::from_str(&explain("json")).unwrap();
    let found = &answer["foreign"][0];
    assert_eq!(found["container"], "mesh-proxy", "{answer}");
    assert_eq!(
        found["ignored"],
        json!([
            "addedVolumes[1].name",
            "mesh-proxy.env[0].value",
            "mesh-proxy.volumeMounts[1].name"
        ]),
        "the nonce, and the generated name of the token volume and of its mount: {answer}"
    );
    let states: Vec<&str> = found["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["stale", "stale"]);
    let reasons: Vec<&Value> = found["reasons"].as_object().unwrap().values().collect();
    assert_eq!(
        reasons,
        [
            &json!("mesh-proxy image mesh/proxy:1.27 -> mesh/proxy:1.28"),
            &json!("mesh-proxy image mesh/proxy:1.27 -> mesh/proxy:1.28")
        ]
    );
    let page = explain("table");
    assert!(
        page.contains(
            "ignored (they differ at each admission): addedVolumes[1].name, mesh-proxy.env[0].value"
        ),
        "{page}"
    );

    // web's pod replaced: it runs the new sidecar, cart still the old one.
    for pod in pods_in(&pods, "web").await {
        pods.delete(pod.metadata.name.as_deref().unwrap(), &Default::default())
            .await
            .expect("web's pod deleted");
    }
    wait_pods(&pods, "web", 1, Some("mesh/proxy:1.28")).await;
    let after = rows(&report(&kubeconfig));
    assert_eq!(
        after
            .iter()
            .map(|r| (r.0.as_str(), r.1.as_str()))
            .collect::<Vec<_>>(),
        [("cart", "stale"), ("web", "current")]
    );

    // A workload made after the change already runs what a new pod gets.
    create(
        &deployments,
        json!({
            "metadata": {"name": "fresh"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "fresh"}},
                     "template": mesh_template("fresh", "on")}
        }),
    )
    .await;
    wait_pods(&pods, "fresh", 1, Some("mesh/proxy:1.28")).await;
    let uids = |listed: Vec<Pod>| -> Vec<String> {
        let mut uids: Vec<String> = listed.into_iter().filter_map(|p| p.metadata.uid).collect();
        uids.sort();
        uids
    };
    let mut untouched = Vec::new();
    for app in ["web", "fresh", "plain"] {
        untouched.extend(uids(pods_in(&pods, app).await));
    }

    // The one-shot engine plans exactly the workload whose pods differ, then restarts it with
    // its safety (canary, bake), and touches nothing else.
    let plan = rollout(&kubeconfig, &["-o", "json"]);
    let plan: Value = serde_json::from_slice(&succeeded_ok(&plan)).unwrap();
    assert_eq!(planned_workloads(&plan), ["Deployment/cart"], "{plan:#}");
    let acted = rollout(&kubeconfig, &["--confirm"]);
    let stdout = String::from_utf8(succeeded_ok(&acted)).unwrap();
    assert!(
        stdout.contains("restarted  Deployment/shop/cart"),
        "{stdout}"
    );
    wait_pods(&pods, "cart", 2, Some("mesh/proxy:1.28")).await;
    let states: Vec<(String, String)> = rows(&report(&kubeconfig))
        .into_iter()
        .map(|r| (r.0, r.1))
        .collect();
    assert_eq!(
        states,
        [
            ("cart".into(), "current".into()),
            ("fresh".into(), "current".into()),
            ("web".into(), "current".into())
        ]
    );
    let mut now = Vec::new();
    for app in ["web", "fresh", "plain"] {
        now.extend(uids(pods_in(&pods, app).await));
    }
    assert_eq!(now, untouched, "web, fresh and plain kept their pods");
    let nothing = rollout(&kubeconfig, &[]);
    let stdout = String::from_utf8(succeeded_ok(&nothing)).unwrap();
    assert!(
        stdout.contains("nothing to restart: every pod runs what a new pod gets of mesh-proxy"),
        "{stdout}"
    );

    // An account that may read but not create pods: the dry run is refused, said once, and
    // every workload is unknown (never stale on a guess).
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    create(&accounts, json!({"metadata": {"name": "reader"}})).await;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    create(
        &bindings,
        json!({
            "metadata": {"name": "foreign-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NAMESPACE}]
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let reader = support::cluster::service_account_kubeconfig_of(
        &kubeconfig,
        &client,
        NAMESPACE,
        "reader",
        dir.path(),
    )
    .await;
    let refused = drift(&reader, &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(refused.status.success(), "drift: {stderr}");
    assert_eq!(
        stderr
            .matches("refused a dry-run create of a pod in namespace shop")
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("`create` on pods"), "{stderr}");
    let unknown: Value = serde_json::from_slice(&refused.stdout).unwrap();
    let states: Vec<(String, String)> = rows(&unknown).into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        states,
        [
            ("cart".into(), "unknown".into()),
            ("fresh".into(), "unknown".into()),
            ("web".into(), "unknown".into())
        ]
    );

    // A webhook that never answers, in front of pods of namespace `slow`: each dry run there
    // times out. Said, its workload unknown, nothing restarted; the other namespace is judged.
    create(&namespaces, json!({"metadata": {"name": "slow"}})).await;
    let slow_deployments: Api<Deployment> = Api::namespaced(client.clone(), "slow");
    create(
        &slow_deployments,
        json!({
            "metadata": {"name": "queue"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "queue"}},
                     "template": mesh_template("queue", "on")}
        }),
    )
    .await;
    let slow_pods: Api<Pod> = Api::namespaced(client.clone(), "slow");
    wait_pods(&slow_pods, "queue", 1, Some("mesh/proxy:1.28")).await;
    // Accepted by the kernel, never read: the API server's TLS handshake waits in vain.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    create(
        &webhooks,
        json!({
            "metadata": {"name": "silent"},
            "webhooks": [{
                "name": "silent.example.org",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate")},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "slow"}},
                "failurePolicy": "Fail", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 1
            }]
        }),
    )
    .await;
    let timed_out = drift(&kubeconfig, &["-n", "slow"]);
    let stderr = String::from_utf8_lossy(&timed_out.stderr);
    assert!(timed_out.status.success(), "drift: {stderr}");
    assert!(
        stderr.contains("a dry-run create of a pod in namespace slow failed"),
        "{stderr}"
    );
    assert!(stderr.contains("its workloads are unknown"), "{stderr}");
    let report: Value = serde_json::from_slice(&timed_out.stdout).unwrap();
    let states: Vec<(String, String)> = rows(&report).into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        states,
        [
            ("cart".into(), "current".into()),
            ("fresh".into(), "current".into()),
            ("queue".into(), "unknown".into()),
            ("web".into(), "current".into())
        ]
    );
    kyverno.inject_mesh_proxy("mesh/proxy:1.29");
    kyverno.wait_injects(NAMESPACE, "mesh/proxy:1.29");
    let queue_pods = uids(pods_in(&slow_pods, "queue").await);
    // shop's workloads are stale again and planned; queue, whose dry run times out, is not.
    let plan = rollout(&kubeconfig, &["-n", "slow", "-o", "json"]);
    let plan: Value = serde_json::from_slice(&succeeded_ok(&plan)).unwrap();
    assert_eq!(
        planned_workloads(&plan),
        ["Deployment/cart", "Deployment/fresh", "Deployment/web"],
        "{plan:#}"
    );
    assert!(
        String::from_utf8_lossy(&rollout(&kubeconfig, &["-n", "slow"]).stderr)
            .contains("a dry-run create of a pod in namespace slow failed")
    );
    assert_eq!(uids(pods_in(&slow_pods, "queue").await), queue_pods);
    drop(silent);
}
