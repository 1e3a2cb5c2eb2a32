//! `drift` and `status` across clusters: the shared control plane as `staging`, a second one
//! as `prod`, one kubeconfig with both contexts.

use super::*;
use k8s_openapi::api::core::v1::Namespace;
use support::cluster::{OtherControlPlane, fleet_kubeconfig};

fn run(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg(args[0])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(&args[1..])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the command runs")
}

fn json_of(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The state of each workload row named `name`, by cluster.
fn states(report: &Value, name: &str) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["name"] == name)
        .map(|w| {
            (
                w["cluster"].as_str().unwrap().to_owned(),
                w["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn drift_and_status_report_every_cluster_and_one_that_is_down_is_a_row_with_its_error() {
    // staging: the shared control plane, with the injector; its pods are injected.
    let ctx = TestContext::new("fleet", &[]).await;
    create_deployment(&ctx, "web", 2, template("web", Some("logger:v1"))).await;
    eventually(DEADLINE, "web injected in staging", || async {
        let pods = pods_of(&ctx, "web").await;
        (pods.len() == 2
            && pods
                .iter()
                .all(|p| annotation(p, "injector/status") == Some("injected")))
        .then_some(())
    })
    .await;
    // prod: a cluster of its own, where no injector ran: the same workload, uninjected.
    let prod = OtherControlPlane::start("prod");
    let prod_client = prod.client().await;
    create(
        &Api::<Namespace>::all(prod_client.clone()),
        json!({"metadata": {"name": ctx.namespace}}),
    )
    .await;
    let prod_deployments: Api<Deployment> = Api::namespaced(prod_client.clone(), &ctx.namespace);
    create(
        &prod_deployments,
        json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": template("web", Some("logger:v1"))}
        }),
    )
    .await;
    let prod_pods: Api<Pod> = Api::namespaced(prod_client, &ctx.namespace);
    eventually(DEADLINE, "web's pod in prod", || async {
        (prod_pods
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len()
            == 1)
            .then_some(())
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("fleet");
    fleet_kubeconfig(
        &kubeconfig,
        &[
            ("staging", &support::cluster::control_plane().kubeconfig),
            ("prod", &prod.plane.kubeconfig),
        ],
    );
    let namespace = ctx.namespace.as_str();
    let drift = |extra: &[&str]| {
        let mut args = vec![
            "drift",
            "-n",
            namespace,
            "--revisions-from",
            "configs",
            "--injector-namespace",
            namespace,
        ];
        args.extend_from_slice(extra);
        run(&kubeconfig, &args)
    };

    let both = drift(&[
        "--context",
        "staging",
        "--context",
        "prod",
        "-o",
        "json",
        "--exit-code",
    ]);
    let report = json_of(&both);
    assert_eq!(
        report["clusters"],
        json!([{"cluster": "staging"}, {"cluster": "prod"}]),
        "{report:#}"
    );
    assert_eq!(
        states(&report, "web"),
        [
            ("prod".to_owned(), "uninjected".to_owned()),
            ("staging".to_owned(), "current".to_owned())
        ],
        "{report:#}"
    );
    assert!(
        report["sidecars"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["cluster"] == "staging" || s["cluster"] == "prod"),
        "every sidecar row names its cluster: {report:#}"
    );
    assert_eq!(
        both.status.code(),
        Some(1),
        "stale in prod, every cluster read"
    );

    // Every context of the kubeconfig, as a table: a CLUSTER column first.
    let table = drift(&["--all-contexts"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.status.code(), Some(0), "{text}");
    let row = |cluster: &str| {
        text.lines()
            .find(|l| l.starts_with(cluster) && l.contains(&format!("Deployment/{namespace}/web")))
            .unwrap_or_else(|| panic!("no {cluster} row for web in\n{text}"))
            .to_owned()
    };
    assert!(text.starts_with("CLUSTER "), "{text}");
    assert!(row("staging").contains("current"), "{text}");
    assert!(row("prod").contains("uninjected"), "{text}");

    // prod goes down: its row says so, staging is still reported.
    prod.stop();
    let down = drift(&[
        "--context",
        "staging",
        "--context",
        "prod",
        "-o",
        "json",
        "--exit-code",
        "--cluster-timeout",
        "20s",
    ]);
    let report = json_of(&down);
    assert_eq!(
        report["clusters"][0],
        json!({"cluster": "staging"}),
        "{report:#}"
    );
    assert_eq!(report["clusters"][1]["cluster"], "prod");
    assert!(
        report["clusters"][1]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{report:#}"
    );
    assert_eq!(
        states(&report, "web"),
        [("staging".to_owned(), "current".to_owned())]
    );
    assert_eq!(
        down.status.code(),
        Some(3),
        "nothing stale where read, a cluster not read: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    let table = drift(&["--context", "staging", "--context", "prod"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("prod") && l.contains("(not read)")),
        "{text}"
    );

    // status across both: staging's campaigns book and Lease, prod's error.
    let status = run(
        &kubeconfig,
        &[
            "status",
            "--all-contexts",
            "--injector-namespace",
            namespace,
            "-o",
            "json",
        ],
    );
    let view = json_of(&status);
    assert_eq!(view["clusters"][0]["cluster"], "staging", "{view:#}");
    assert!(view["clusters"][0]["error"].is_null(), "{view:#}");
    assert!(view["clusters"][0]["lease"].is_object(), "{view:#}");
    assert_eq!(view["clusters"][1]["cluster"], "prod");
    assert!(view["clusters"][1]["error"].is_string(), "{view:#}");
    assert_eq!(status.status.code(), Some(3));
    let table = run(
        &kubeconfig,
        &[
            "status",
            "--all-contexts",
            "--injector-namespace",
            namespace,
        ],
    );
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("staging") && l.contains("rollout")
                || l.starts_with("staging") && l.contains("free")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("prod") && l.contains("(not read)")),
        "{text}"
    );
}
