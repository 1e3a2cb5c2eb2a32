//! Native sidecars chosen by the nodes (`nativeSidecars: auto`): the webhook watches the
//! Nodes under deploy/'s RBAC, and `drift` and `explain` say each pod's form.

use k8s_openapi::api::core::v1::Node;

use super::*;

const PROXY_AUTO: &str = "name: proxy:v1\nnativeSidecars: auto\ncontainers:\n  - {name: proxy, image: example.org/proxy:1}\n";

/// Whether the webhook would inject `proxy:v1` natively into a new pod now: a server-side dry
/// run, which goes through the webhook and creates nothing.
fn native_now(ctx: &TestContext) -> bool {
    let output = dry_run_pod(ctx, "proxy:v1", &["-o", "json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pod: Value = serde_json::from_slice(&output.stdout).unwrap();
    let native = pod["spec"]["initContainers"]
        .as_array()
        .is_some_and(|list| {
            list.iter()
                .any(|c| c["name"] == "proxy" && c["restartPolicy"] == "Always")
        });
    let classic = pod["spec"]["containers"]
        .as_array()
        .is_some_and(|list| list.iter().any(|c| c["name"] == "proxy"));
    assert!(native != classic, "injected exactly once: {pod:#}");
    native
}

/// A Node whose kubelet reports `version`, on which nothing is scheduled: no pod of another
/// test (a DaemonSet's included) lands there.
fn old_node(name: &str, version: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"unschedulable": true, "taints": [{"key": "e2e/not-a-node", "effect": "NoSchedule"}]},
        "status": {"nodeInfo": {
            "kubeletVersion": version, "architecture": "amd64", "operatingSystem": "linux",
            "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
            "machineID": "", "osImage": "", "systemUUID": ""
        }}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_injects_native_sidecars_once_every_kubelet_runs_them() {
    let ns = "e2e-native-auto";
    let ctx = TestContext::with_deploy_rbac("native-auto", &scope_args(ns)).await;
    put_config(&ctx, "proxy", "proxy.yaml", PROXY_AUTO).await;
    wait_in_force(ctx.injector.as_ref().unwrap(), stamp_of(PROXY_AUTO), true).await;

    // The test kubelet's nodes all run kubelet 1.36: native, once the webhook has listed them.
    eventually(DEADLINE, "native sidecars on current kubelets", || async {
        native_now(&ctx).then_some(())
    })
    .await;

    // A node with a kubelet that predates native sidecars joins: new pods get the classic form,
    // the one every kubelet runs.
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let old = format!("{ns}-old");
    nodes
        .create(&PostParams::default(), &old_node(&old, "v1.28.9"))
        .await
        .expect("the old node");
    eventually(
        DEADLINE,
        "classic sidecars beside an old kubelet",
        || async { (!native_now(&ctx)).then_some(()) },
    )
    .await;
    create_deployment(&ctx, "before", 2, template("before", Some("proxy:v1"))).await;
    wait_ready(&ctx, "before", 2).await;
    let explained = explain_pod(
        &ctx,
        pods_of(&ctx, "before").await[0]
            .metadata
            .name
            .as_deref()
            .unwrap(),
    );
    let explained_text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained_text.contains(&format!(
            "classic: auto, node {old} runs kubelet 1.28, before native sidecars (1.29)"
        )),
        "{explained_text}"
    );

    // A Job's pods get them natively all the same (classic, it would never complete), and its
    // creator is not warned.
    let kubeconfig = support::cluster::control_plane().kubeconfig.clone();
    let job = kubectl(
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "-n",
            ns,
            "create",
            "-f",
            "-",
        ],
        &[],
        &json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly"},
            "spec": {"template": {
                "metadata": {"labels": {"app": "nightly"}, "annotations": {"injector/request": "proxy:v1"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "example.org/work:1"}]}
            }}
        })
        .to_string(),
    );
    assert!(
        job.status.success(),
        "{}",
        String::from_utf8_lossy(&job.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&job.stderr).contains("Warning"),
        "{}",
        String::from_utf8_lossy(&job.stderr)
    );
    let job_pod = eventually(DEADLINE, "the Job's pod", || async {
        pods_of(&ctx, "nightly").await.pop()
    })
    .await;
    assert_eq!(
        annotation(&job_pod, "injector/injected-native"),
        Some("proxy:v1")
    );
    assert!(
        job_pod
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == "proxy" && c.restart_policy.as_deref() == Some("Always")),
        "{job_pod:?}"
    );

    // The old node leaves: new pods are native again; the pods made meanwhile stay classic at
    // the same revision (current: nothing restarts them for it).
    nodes
        .delete(&old, &Default::default())
        .await
        .expect("the old node deleted");
    eventually(DEADLINE, "native sidecars again", || async {
        native_now(&ctx).then_some(())
    })
    .await;
    create_deployment(&ctx, "after", 2, template("after", Some("proxy:v1"))).await;
    wait_ready(&ctx, "after", 2).await;

    let mut args = scope_args(ns);
    args.extend([
        "--config-directory",
        concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
    ]);
    let report = drift_report(&args);
    let row = |name: &str| {
        report["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == name && w["sidecar"] == "proxy:v1")
            .unwrap_or_else(|| panic!("no {name} row: {report:#}"))
            .clone()
    };
    let (before, after) = (row("before"), row("after"));
    assert_eq!(
        (&before["state"], &before["form"], &before["native"]),
        (&json!("current"), &json!("classic"), &json!(0)),
        "{before:#}"
    );
    assert_eq!(
        (&after["state"], &after["form"], &after["native"]),
        (&json!("current"), &json!("native"), &json!(2)),
        "{after:#}"
    );
    assert_eq!(
        sidecar_row(&report, "proxy:v1")["native"],
        3,
        "the Job's pod and the two of after: {report:#}"
    );
}
