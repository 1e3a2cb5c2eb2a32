//! What a platform team waits for: pod creation through a real kube-apiserver, with the
//! webhook and without it, in the same run.
//!
//! A control plane of its own (kube-apiserver, etcd, kube-controller-manager from testbed/; no
//! kubelet, so nothing but creation loads it) and `serve` registered as the webhook for one
//! namespace. N clients each create pods one after another, all at once, for a few seconds:
//! in that namespace (the API server calls the webhook, which injects `logger:v1`), then in a
//! namespace the webhook does not select (the API server calls nothing), alternating, so both
//! see the same machine. Prints pod-create p50/p99 for both at each N and the difference: the
//! latency the webhook adds. The same for the policy mode (`serve --injection=policy`: the API
//! server injects through MutatingAdmissionPolicies, calling nothing), in a third namespace.
//! Then the CPU each process spent per pod created each way (kube-apiserver, etcd, the
//! injector, the load generator), which says where the difference goes on a machine they
//! share. The pods are deleted between runs.
//!
//! `cargo bench --bench pod_create` (10, 50, 200 and 500 clients, 3 rounds of 5 s each way;
//! `-- --clients 10,50 --rounds 2 --seconds 3` to change). Under `cargo test` it runs a
//! small smoke pass (2 clients, one short round) that checks the harness: the pods come back
//! injected where an injector selects their namespace, and not elsewhere.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::bench::cpu_seconds;
use support::cluster::{OtherControlPlane, TestContext};

/// The CPU each process spent and the pods created, summed over runs one way.
#[derive(Default)]
struct Spent {
    cpu: [f64; 4],
    pods: usize,
}

impl Spent {
    fn add(&mut self, before: [f64; 4], after: [f64; 4], pods: usize) {
        for (i, (b, a)) in before.iter().zip(after).enumerate() {
            self.cpu[i] += a - b;
        }
        self.pods += pods;
    }

    /// Milliseconds of CPU per pod, each process.
    fn per_pod(&self) -> [f64; 4] {
        self.cpu.map(|s| s * 1000.0 / self.pods.max(1) as f64)
    }
}

struct Settings {
    clients: Vec<usize>,
    rounds: usize,
    seconds: f64,
    measure: bool,
}

fn settings() -> Settings {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let measure = args.iter().any(|a| a == "--bench");
    let clients = value("--clients").map_or_else(
        || {
            if measure {
                vec![10, 50, 200, 500]
            } else {
                vec![2]
            }
        },
        |list| list.split(',').filter_map(|n| n.parse().ok()).collect(),
    );
    Settings {
        clients,
        rounds: value("--rounds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if measure { 3 } else { 1 }),
        seconds: value("--seconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if measure { 5.0 } else { 0.5 }),
        measure,
    }
}

fn main() {
    let settings = settings();
    if !settings.measure {
        println!("pod_create: smoke run (use `cargo bench --bench pod_create` to measure)");
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(run(settings));
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"generateName": "p-", "annotations": {"injector/request": "logger:v1"}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))
    .expect("a pod")
}

/// `clients` clients creating pods in `pods` one after another for `seconds`: each create's
/// latency.
async fn load(pods: &Api<Pod>, clients: usize, seconds: f64) -> Vec<Duration> {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let pods = pods.clone();
            tokio::spawn(async move {
                let (pod, mut latencies) = (pod(), Vec::new());
                // At least one each, however short the run.
                loop {
                    let start = Instant::now();
                    pods.create(&PostParams::default(), &pod)
                        .await
                        .expect("a pod created");
                    latencies.push(start.elapsed());
                    if Instant::now() >= until {
                        break;
                    }
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a client"));
    }
    all
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

/// How many containers the pods of `pods` have: each pod's count, deduplicated.
async fn container_counts(pods: &Api<Pod>) -> Vec<usize> {
    let mut counts: Vec<usize> = pods
        .list(&ListParams::default())
        .await
        .expect("pods listed")
        .items
        .iter()
        .map(|p| p.spec.as_ref().map_or(0, |s| s.containers.len()))
        .collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

async fn delete_all(pods: &Api<Pod>) {
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("pods deleted");
    // Pods no kubelet ever ran go at once; waited on, so no deletion overlaps the next run.
    support::injector::eventually(Duration::from_secs(120), "pods deleted", || async {
        pods.list(&ListParams::default().limit(1))
            .await
            .ok()
            .filter(|l| l.items.is_empty())
            .map(|_| ())
    })
    .await;
}

/// One way pods are created: its name, its namespace's pods, and whose CPU is its injector's.
struct Way {
    name: &'static str,
    pods: Api<Pod>,
    injector: Option<u32>,
}

async fn run(settings: Settings) {
    let plane = OtherControlPlane::start("pod-create");
    let webhook = TestContext::in_plane(&plane.plane, "pod-create", &[]).await;
    // The policy mode: no webhook; the API server injects through the policies this second
    // `serve` writes, bound to its namespace alone.
    let policy_namespace = "e2e-pod-create-policy";
    let selector = format!("sidecar-injector-e2e={policy_namespace}");
    let policy = TestContext::in_plane(
        &plane.plane,
        "pod-create-policy",
        &[
            "--injection=policy",
            "--namespace-selector",
            &selector,
            "--policy-name",
            policy_namespace,
        ],
    )
    .await;
    let pid_of = |name: &str| -> u32 {
        std::fs::read_to_string(plane.plane.state_dir.join(format!("{name}.pid")))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .expect("a pid file")
    };
    let (apiserver, etcd) = (pid_of("apiserver"), pid_of("etcd"));
    let client = plane.client().await;
    let plain = "pod-create-plain";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": plain}})).unwrap(),
        )
        .await
        .expect("a namespace no injector selects");
    // The namespace's default ServiceAccount, which pod admission waits for.
    support::injector::eventually(Duration::from_secs(30), "a ServiceAccount", || async {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), plain);
        accounts.get_opt("default").await.ok().flatten()
    })
    .await;
    let ways = [
        Way {
            name: "no injector",
            pods: Api::namespaced(client.clone(), plain),
            injector: None,
        },
        Way {
            name: "webhook",
            pods: Api::namespaced(client.clone(), &webhook.namespace),
            injector: webhook.injector.as_ref().map(|i| i.pid()),
        },
        Way {
            name: "policy",
            pods: Api::namespaced(client.clone(), &policy.namespace),
            injector: policy.injector.as_ref().map(|i| i.pid()),
        },
    ];

    // The harness: both injectors inject in their namespace (the policies once written), and
    // nothing is called in the third.
    support::injector::eventually(Duration::from_secs(60), "the policies in force", || async {
        load(&ways[2].pods, 1, 0.0).await;
        let counts = container_counts(&ways[2].pods).await;
        delete_all(&ways[2].pods).await;
        (counts == [2]).then_some(())
    })
    .await;
    for (way, containers) in ways.iter().zip([1, 2, 2]) {
        load(&way.pods, 1, 0.0).await;
        assert_eq!(
            container_counts(&way.pods).await,
            [containers],
            "{}",
            way.name
        );
        delete_all(&way.pods).await;
    }

    println!(
        "pod_create: {} round(s) of {} s each way per level, pods created one after another by each client",
        settings.rounds, settings.seconds
    );
    println!(
        "{:>8} | {:>22} | {:>38} | {:>38}",
        "clients", "no injector p50/p99", "webhook p50/p99 (added)", "policy p50/p99 (added)"
    );
    let mut spent: Vec<(usize, Vec<Spent>)> = Vec::new();
    for &clients in &settings.clients {
        let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
        let mut cpu: Vec<Spent> = ways.iter().map(|_| Spent::default()).collect();
        for round in 0..settings.rounds {
            // Each round starts with another way, so none always follows another's deletions.
            for step in 0..ways.len() {
                let at = (round + step) % ways.len();
                let way = &ways[at];
                let pids = [
                    apiserver,
                    etcd,
                    way.injector.unwrap_or(0),
                    std::process::id(),
                ];
                let before = pids.map(cpu_seconds);
                let run = load(&way.pods, clients, settings.seconds).await;
                let after = pids.map(cpu_seconds);
                delete_all(&way.pods).await;
                cpu[at].add(before, after, run.len());
                latencies[at].extend(run);
            }
        }
        for run in &mut latencies {
            run.sort_unstable();
        }
        let base = &latencies[0];
        let cell = |run: &Vec<Duration>, added: bool| {
            let (p50, p99) = (percentile(run, 0.5), percentile(run, 0.99));
            let rate = run.len() as f64 / (settings.seconds * settings.rounds as f64);
            let mut text = format!("{} / {} ms", ms(p50), ms(p99));
            if added {
                let signed = |a: Duration, b: Duration| {
                    if a >= b {
                        format!("+{}", ms(a - b))
                    } else {
                        format!("-{}", ms(b - a))
                    }
                };
                text.push_str(&format!(
                    " ({} / {})",
                    signed(p50, percentile(base, 0.5)),
                    signed(p99, percentile(base, 0.99))
                ));
            }
            format!("{text}, {rate:.0}/s")
        };
        println!(
            "{clients:>8} | {:>22} | {:>38} | {:>38}",
            cell(&latencies[0], false),
            cell(&latencies[1], true),
            cell(&latencies[2], true),
        );
        spent.push((clients, cpu));
    }
    println!("CPU per pod created, ms: kube-apiserver, etcd, the injector, the load generator");
    for (clients, cpu) in &spent {
        let cells: Vec<String> = ways
            .iter()
            .zip(cpu)
            .map(|(way, spent)| {
                let [a, e, i, l] = spent.per_pod();
                format!("{}: {a:.2}, {e:.2}, {i:.2}, {l:.2}", way.name)
            })
            .collect();
        println!("{clients:>8} | {}", cells.join(" | "));
    }
}
