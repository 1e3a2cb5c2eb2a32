//! What `--foreign-sidecar` costs at scale: the dry runs that say what a new pod of each
//! workload gets, for many workloads sharing fewer templates.
//!
//! A control plane of its own (no kubelet), Kyverno injecting `mesh-proxy` by a ClusterPolicy
//! (a random env value at each admission), and W Deployments of one replica each made from T
//! distinct templates (they differ by a label). Once every pod runs the sidecar, `drift
//! --foreign-sidecar mesh-proxy` runs twice and the bench prints, each run: its wall time, the
//! dry-run creates it sent (the API server's own `apiserver_request_total`, `dry_run="All"`)
//! and its other requests, and checks that every workload is current. Then the policy's image
//! changes and one more run must find every workload stale.
//!
//! `cargo bench --bench foreign_dry_runs` (5,000 workloads, 500 templates; `-- --workloads 1000
//! --templates 100` to change). Under `cargo test`, a smoke pass of 20 workloads and 4
//! templates checks the harness and that one pair of dry runs is sent per template.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::cluster::OtherControlPlane;
use support::kyverno::Kyverno;

const NAMESPACE: &str = "bench";

struct Settings {
    workloads: usize,
    templates: usize,
    measure: bool,
}

fn settings() -> Settings {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    let measure = args.iter().any(|a| a == "--bench");
    Settings {
        workloads: value("--workloads").unwrap_or(if measure { 5_000 } else { 20 }),
        templates: value("--templates").unwrap_or(if measure { 500 } else { 4 }),
        measure,
    }
}

fn main() {
    let settings = settings();
    if !settings.measure {
        println!(
            "foreign_dry_runs: smoke run (use `cargo bench --bench foreign_dry_runs` to measure)"
        );
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(run(settings));
}

/// The API server's request counts so far: (dry-run creates of pods, every other request).
fn requests(kubeconfig: &std::path::Path) -> (f64, f64) {
    let output = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "--raw", "/metrics"])
        .output()
        .expect("kubectl runs");
    assert!(output.status.success(), "the API server's metrics");
    let (mut dry, mut other) = (0.0, 0.0);
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let value: f64 = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        if rest.contains("dry_run=\"All\"")
            && rest.contains("resource=\"pods\"")
            && rest.contains("verb=\"POST\"")
        {
            dry += value;
        } else {
            other += value;
        }
    }
    (dry, other)
}

/// One `drift --foreign-sidecar mesh-proxy` run: its report, its wall time, the dry-run
/// creates it sent and the other requests the API server served meanwhile.
fn drift(kubeconfig: &std::path::Path) -> (Value, Duration, f64, f64) {
    let before = requests(kubeconfig);
    let start = Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
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
            "--webhook-configuration",
            "",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("drift runs");
    let took = start.elapsed();
    let after = requests(kubeconfig);
    assert!(
        output.status.success(),
        "drift: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = serde_json::from_slice(&output.stdout).expect("drift prints JSON");
    // The metrics reads themselves are one request each way.
    (report, took, after.0 - before.0, after.1 - before.1 - 1.0)
}

fn states(report: &Value) -> std::collections::BTreeMap<String, usize> {
    let mut states = std::collections::BTreeMap::new();
    for row in report["workloads"].as_array().unwrap() {
        if row["sidecar"] == "mesh-proxy" {
            *states
                .entry(row["state"].as_str().unwrap().to_owned())
                .or_insert(0) += 1;
        }
    }
    states
}

async fn run(settings: Settings) {
    let Settings {
        workloads,
        templates,
        ..
    } = settings;
    let plane = OtherControlPlane::start("foreign-bench");
    let client = plane.client().await;
    let kubeconfig = plane.plane.kubeconfig.clone();
    let mut kyverno = Kyverno::start(&plane.plane);
    kyverno.inject_mesh_proxy("mesh/proxy:1.27");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
        )
        .await
        .expect("the namespace");
    kyverno.wait_injects(NAMESPACE, "mesh/proxy:1.27");

    let start = Instant::now();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(0..workloads)
        .map(|i| {
            let deployments = deployments.clone();
            async move {
                let name = format!("w{i:05}");
                let deployment: Deployment = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bench", "variant": format!("t{}", i % templates)}},
                             "template": {"metadata": {"labels": {"app": "bench", "variant": format!("t{}", i % templates), "mesh": "on"}},
                                          "spec": {"containers": [{"name": "app", "image": "example.org/app:1"}]}}}
                }))
                .unwrap();
                deployments
                    .create(&PostParams::default(), &deployment)
                    .await
                    .expect("a Deployment");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Duration::from_secs(60 + workloads as u64 / 5);
    loop {
        let listed = pods.list(&ListParams::default()).await.expect("pods");
        let injected = listed
            .items
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.name == "mesh-proxy"))
            })
            .count();
        if injected >= workloads {
            break;
        }
        assert!(
            start.elapsed() < deadline,
            "{injected} of {workloads} pods injected within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "foreign_dry_runs: {workloads} Deployments of 1 pod from {templates} templates, every pod injected by Kyverno, in {:.1}s",
        start.elapsed().as_secs_f64()
    );

    for run in 1..=2 {
        let (report, took, dry, other) = drift(&kubeconfig);
        let states = states(&report);
        println!(
            "foreign_dry_runs: drift run {run}: {:.2}s, {dry} dry-run creates ({:.0}/s), {other} other API requests meanwhile (any client), rows {states:?}",
            took.as_secs_f64(),
            dry / took.as_secs_f64()
        );
        assert_eq!(states.get("current"), Some(&workloads), "{states:?}");
        assert_eq!(
            dry as usize,
            2 * templates,
            "one pair of dry runs per template"
        );
    }

    kyverno.inject_mesh_proxy("mesh/proxy:1.28");
    kyverno.wait_injects(NAMESPACE, "mesh/proxy:1.28");
    let (report, took, dry, _) = drift(&kubeconfig);
    let states = states(&report);
    println!(
        "foreign_dry_runs: after the policy's image changed: {:.2}s, {dry} dry-run creates, rows {states:?}",
        took.as_secs_f64()
    );
    assert_eq!(states.get("stale"), Some(&workloads), "{states:?}");
}
