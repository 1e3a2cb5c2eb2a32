//! The injector at the size of a real cluster, on the real control plane (kube-apiserver and
//! kube-controller-manager from testbed/, the test kubelet marking pods Ready): N Deployments
//! of R pods (5,000 x 10 = 50,000 pods by default), half requesting `tracer:v1`, half
//! `logger:v1`, every pod made by the controllers through the webhook. Then `serve` (the
//! engine on, under deploy/'s RBAC, `--kube-api-qps 20 --kube-api-burst 30`) is restarted on
//! that cluster and `tracer:v1`'s ConfigMap edited.
//!
//! It prints, each beside its target: `serve`'s memory after its first sync and at the end,
//! its first sync from start; edit to first restart and to the drift gauge showing the edit;
//! the engine's plan time and the gauge update (p50/p99 of their histograms); the injector's
//! requests per restart, LISTs after the sync, its peak request rate over 10 s and the most
//! workloads in flight; the one-shot `drift` beside `kubectl get pods -A -o json | jq length`
//! (wall time and peak memory, same cluster).
//!
//! `cargo bench --bench scale_control_plane` (`-- --deployments N --replicas R` to change).
//! Under `cargo test` a smoke pass (20 x 2) checks the harness, the no-LIST rule and the rate
//! limit, without reporting figures.
#![allow(clippy::too_many_lines)] // a bench reads as one scenario

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, VecDeque};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::bench::{
    bench_deployment, cpu_seconds, gauge, memory_mib, quantile, samples, samples_in, verdict,
};
use support::cluster::{CONTROLLER_QPS, TestContext, control_plane, put_config, rollout_args};
use support::injector::eventually;

const TRACER_V1: &str = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
const TRACER_V2: &str = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
const NAMESPACE: &str = "e2e-scale-bench";
const QPS: f64 = 20.0;
const BURST: f64 = 30.0;
const MAX_PARALLEL: f64 = 50.0;
/// Low enough to bind before --max-parallel does once restarts take seconds each.
const RESTARTS_PER_MINUTE: f64 = 120.0;
/// Restarts measured before the campaign is left to itself: more than a minute's worth, so
/// that both limits are seen at work.
const MEASURED_RESTARTS: usize = 300;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let measure = args.iter().any(|a| a == "--bench");
    let flag = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let deployments = flag("--deployments", if measure { 5_000 } else { 20 });
    let replicas = flag("--replicas", if measure { 10 } else { 2 });
    if !measure {
        println!(
            "scale_control_plane: smoke run (use `cargo bench --bench scale_control_plane` to measure)"
        );
    }
    // The set-up creates every pod through the controllers: their client-side limit, not the
    // API server, would be the bound at 200 a second.
    let _ = CONTROLLER_QPS.set(if measure { 1_000 } else { 200 });
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(run(deployments, replicas, measure));
}

async fn run(deployments: usize, replicas: usize, measure: bool) {
    let stale = deployments / 2;
    let pods = deployments * replicas;
    let tracer_pods = (stale * replicas) as f64;
    let qps = QPS.to_string();
    let burst = BURST.to_string();
    let max_parallel = MAX_PARALLEL.to_string();
    let per_minute = RESTARTS_PER_MINUTE.to_string();
    let serve_args = rollout_args(
        NAMESPACE,
        &[
            "--rollout=auto",
            "--max-parallel",
            &max_parallel,
            "--settle",
            "1s",
            "--max-restarts-per-minute",
            &per_minute,
            "--bake",
            "0s",
            "--kube-api-qps",
            &qps,
            "--kube-api-burst",
            &burst,
        ],
    );
    let mut ctx = TestContext::with_deploy_rbac("scale-bench", &serve_args).await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V1).await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(Duration::from_secs(60), "tracer:v1 in force", || async {
        injector
            .logs()
            .iter()
            .any(|l| l.contains("sidecar configs in force") && l.contains("tracer:v1="))
            .then_some(())
    })
    .await;

    let setup_started = Instant::now();
    let api: Api<Deployment> = ctx.api();
    futures::stream::iter(0..deployments)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let name = format!("app-{i:05}");
                let sidecar = if i < stale { "tracer:v1" } else { "logger:v1" };
                let deployment = bench_deployment(
                    &name,
                    replicas,
                    sidecar,
                    json!({"maxUnavailable": 1, "maxSurge": 1}),
                );
                api.create(&PostParams::default(), &deployment)
                    .await
                    .expect("a Deployment");
            }
        })
        .await;
    let setup = Duration::from_secs(300 + pods as u64 / 20);
    eventually(
        setup,
        "the injector's gauge sees every pod current",
        || async {
            (gauge(injector, "tracer:v1", "current") == tracer_pods
                && gauge(injector, "logger:v1", "current") == (pods as f64 - tracer_pods))
                .then_some(())
        },
    )
    .await;
    let setup_took = setup_started.elapsed();

    // A fresh `serve` on the cluster as it stands: its first sync and its memory.
    ctx.restart_injector().await;
    let started = Instant::now();
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        Duration::from_secs(600),
        "the restarted injector synced",
        || async {
            (gauge(injector, "tracer:v1", "current") == tracer_pods
                && gauge(injector, "logger:v1", "current") == (pods as f64 - tracer_pods))
                .then_some(())
        },
    )
    .await;
    let first_sync = started.elapsed();
    let (rss_synced, _) = memory_mib(injector.pid());
    // The killed injector's Lease has to expire before this one leads.
    eventually(Duration::from_secs(120), "the injector leading", || async {
        (injector.metric("sidecar_injector_rollout_leader") == 1.0).then_some(())
    })
    .await;
    let streamed = injector
        .logs()
        .iter()
        .any(|l| l.contains("streams initial lists"));

    let before = samples(injector, "sidecar_injector_kube_requests_total");
    let restarted_before = restarted(injector);
    let cpu_before = cpu_seconds(injector.pid());
    let plans_before = plans(injector);
    let edited = Instant::now();
    let edited_at = k8s_openapi::jiff::Timestamp::now();
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    // Sampled every 100 ms from here: the gauge's first sight of the edit, the request rate,
    // the workloads in flight.
    let mut gauge_saw_edit = None;
    let mut requests: VecDeque<(Instant, f64)> = VecDeque::new();
    let mut peak_rate_10s: f64 = 0.0;
    let mut most_in_flight: f64 = 0.0;
    let mut restarts_seen: VecDeque<(Instant, f64)> = VecDeque::new();
    let mut peak_restarts_a_minute: f64 = 0.0;
    let total_requests = |body: &str| -> f64 {
        samples_in(body, "sidecar_injector_kube_requests_total")
            .values()
            .sum()
    };
    let goal = MEASURED_RESTARTS.min(stale) as f64;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let (_, body) = injector.lifecycle_get("/metrics");
        let now = Instant::now();
        let stale_pods = samples_in(&body, "sidecar_injector_pods")
            .get("{sidecar=\"tracer:v1\",state=\"stale\"}")
            .copied()
            .unwrap_or(0.0);
        if gauge_saw_edit.is_none() && stale_pods > 0.0 {
            gauge_saw_edit = Some(now - edited);
        }
        let sent = total_requests(&body);
        requests.push_back((now, sent));
        while requests
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > Duration::from_secs(10))
        {
            requests.pop_front();
        }
        if let Some((_, oldest)) = requests.front() {
            peak_rate_10s = peak_rate_10s.max(sent - oldest);
        }
        most_in_flight = most_in_flight.max(
            samples_in(&body, "sidecar_injector_rollouts_in_flight")
                .values()
                .sum(),
        );
        let restarts_now = restarted_in(&body);
        restarts_seen.push_back((now, restarts_now));
        while restarts_seen
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > Duration::from_secs(60))
        {
            restarts_seen.pop_front();
        }
        if let Some((_, oldest)) = restarts_seen.front() {
            peak_restarts_a_minute = peak_restarts_a_minute.max(restarts_now - oldest);
        }
        if restarts_now - restarted_before >= goal {
            break;
        }
        assert!(
            now < deadline,
            "only {} restarts in 15 minutes",
            restarted_in(&body) - restarted_before
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let campaign_took = edited.elapsed();
    let campaign_cpu = cpu_seconds(injector.pid()) - cpu_before;
    let plans_after = plans(injector);
    let (plan_count, plan_seconds) = (
        plans_after.0 - plans_before.0,
        plans_after.1 - plans_before.1,
    );
    let after = samples(injector, "sidecar_injector_kube_requests_total");
    let restarts = restarted(injector) - restarted_before;
    let mut by_verb: BTreeMap<String, f64> = BTreeMap::new();
    for (labels, value) in &after {
        let delta = value - before.get(labels).copied().unwrap_or(0.0);
        if delta > 0.0 {
            by_verb.insert(labels.clone(), delta);
        }
    }
    let total: f64 = by_verb.values().sum();
    let lists = by_verb
        .iter()
        .filter(|(labels, _)| labels.contains("verb=\"list\""))
        .map(|(_, n)| n)
        .fold(0.0, |sum, n| sum + n);
    let first_restart = first_rolled_at(&api)
        .await
        .duration_since(edited_at)
        .as_secs_f64();
    let (_, metrics) = injector.lifecycle_get("/metrics");
    let histogram = |name: &str, selector: &str| {
        (
            quantile(&metrics, name, selector, 0.5),
            quantile(&metrics, name, selector, 0.99),
        )
    };
    let plan = histogram("sidecar_injector_rollout_plan_duration_seconds", "");
    let gauge_of = |update: &str| {
        histogram(
            "sidecar_injector_drift_gauge_update_duration_seconds",
            &format!("update=\"{update}\""),
        )
    };
    let (gauge_pods, gauge_revision, gauge_recount) =
        (gauge_of("pods"), gauge_of("revision"), gauge_of("recount"));
    let gauge_pod_updates = samples_in(
        &metrics,
        "sidecar_injector_drift_gauge_update_duration_seconds_count",
    )
    .get("{update=\"pods\"}")
    .copied()
    .unwrap_or(0.0);

    assert_eq!(lists, 0.0, "a LIST after the initial sync: {by_verb:?}");
    let rate_bound = BURST + QPS * 10.0;
    assert!(
        peak_rate_10s <= rate_bound,
        "{peak_rate_10s} requests in 10 s, above --kube-api-burst + 10 x --kube-api-qps ({rate_bound})"
    );
    assert!(
        most_in_flight <= MAX_PARALLEL,
        "{most_in_flight} workloads in flight, above --max-parallel {MAX_PARALLEL}"
    );
    assert!(
        peak_restarts_a_minute <= RESTARTS_PER_MINUTE,
        "{peak_restarts_a_minute} restarts in a minute, above --max-restarts-per-minute {RESTARTS_PER_MINUTE}"
    );
    assert!(restarts >= goal, "{restarts} restarts");
    if !measure {
        println!("scale_control_plane: smoke ok");
        return;
    }

    let (rss_end, rss_peak) = memory_mib(injector.pid());

    let ms = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{:.2} ms", s * 1000.0));
    println!(
        "scale_control_plane: {deployments} Deployments x {replicas} pods = {pods} pods ({stale} Deployments request tracer:v1), set up in {:.0} s",
        setup_took.as_secs_f64()
    );
    println!(
        "  serve: --max-parallel {MAX_PARALLEL} --max-restarts-per-minute {RESTARTS_PER_MINUTE} --settle 1s --bake 0s --kube-api-qps {QPS} --kube-api-burst {BURST}; initial lists {}",
        if streamed {
            "streamed (sendInitialEvents)"
        } else {
            "paged"
        }
    );
    println!(
        "  first sync, from start to every pod counted: {:.1} s (target <= 30 s) {}",
        first_sync.as_secs_f64(),
        verdict(first_sync.as_secs_f64() <= 30.0)
    );
    println!(
        "  RSS after the first sync: {rss_synced:.1} MiB (target <= 100 MiB) {}; at the end {rss_end:.1} MiB, peak {rss_peak:.1} MiB; {:.0} bytes a pod after the sync",
        verdict(rss_synced <= 100.0),
        rss_synced * 1024.0 * 1024.0 / pods as f64
    );
    println!(
        "  edit -> first restart: {first_restart:.2} s (target <= settle + 1 s = 2 s) {}",
        verdict(first_restart <= 2.0)
    );
    println!(
        "  edit -> drift gauge showing it: {:.2} s",
        gauge_saw_edit.map_or(f64::NAN, |d| d.as_secs_f64())
    );
    println!(
        "  plan per event: p50 {} p99 {}; while the campaign was measured, {plan_count} plans in {plan_seconds:.1} s ({:.2} of a core)",
        ms(plan.0),
        ms(plan.1),
        plan_seconds / campaign_took.as_secs_f64()
    );
    println!(
        "  serve's CPU while the campaign was measured: {campaign_cpu:.1} s in {:.0} s ({:.2} of a core)",
        campaign_took.as_secs_f64(),
        campaign_cpu / campaign_took.as_secs_f64()
    );
    println!(
        "  gauge update per pod event (its own work, once it holds the index; before it, the 0.5 s debounce and at most a plan; {gauge_pod_updates} updates): p50 {} p99 {} (target p99 <= 10 ms) {}; after the revision change: p50 {} p99 {}; full recounts (first count, relists): p50 {} p99 {}",
        ms(gauge_pods.0),
        ms(gauge_pods.1),
        verdict(gauge_pods.1.is_some_and(|p| p <= 0.010)),
        ms(gauge_revision.0),
        ms(gauge_revision.1),
        ms(gauge_recount.0),
        ms(gauge_recount.1)
    );
    println!(
        "  {restarts} restarts in {:.0} s: {total} API requests, {:.2} per restart (target <= 2.5) {}",
        campaign_took.as_secs_f64(),
        total / restarts,
        verdict(total / restarts <= 2.5)
    );
    let with_restarts: f64 = by_verb
        .iter()
        .filter(|(labels, _)| {
            labels.contains("resource=\"events\"") || labels.contains("resource=\"deployments\"")
        })
        .filter(|(labels, _)| !labels.contains("verb=\"watch\""))
        .map(|(_, n)| n)
        .sum();
    println!(
        "    {:.2} per restart come with it (Deployment patches, Events); the other {:.0} come with time: {:.1} a minute (Lease renewals, status writes, the heartbeat), {:.2} a restart at this cluster's {:.1} restarts a minute",
        with_restarts / restarts,
        total - with_restarts,
        (total - with_restarts) * 60.0 / campaign_took.as_secs_f64(),
        (total - with_restarts) / restarts,
        restarts * 60.0 / campaign_took.as_secs_f64()
    );
    for (labels, delta) in &by_verb {
        println!("    {labels}: {delta}");
    }
    println!("  LIST requests after the initial sync: {lists} (target 0) ok");
    println!(
        "  peak request rate: {peak_rate_10s} in 10 s (target <= burst + 10 x qps = {rate_bound}) ok; most workloads in flight {most_in_flight} (--max-parallel {MAX_PARALLEL}) ok; most restarts in a minute {peak_restarts_a_minute} (--max-restarts-per-minute {RESTARTS_PER_MINUTE}) ok"
    );
    // Last, and said as each ends: kubectl's list of every pod takes minutes at this size.
    let drift = one_shot(&format!(
        "{} drift --kubeconfig {} {} -o json > /dev/null",
        env!("CARGO_BIN_EXE_sidecar-injector"),
        control_plane().kubeconfig.display(),
        support::cluster::scope_args(NAMESPACE).join(" ")
    ));
    println!("  drift -o json: {:.1} s, {:.0} MiB peak", drift.0, drift.1);
    let kubectl = one_shot(&format!(
        "kubectl --kubeconfig {} get pods -A -o json | jq length > /dev/null",
        control_plane().kubeconfig.display()
    ));
    let wall_ratio = drift.0 / kubectl.0;
    let memory_ratio = drift.1 / kubectl.1;
    println!(
        "  kubectl get pods -A -o json | jq length: {:.1} s, {:.0} MiB peak; drift / kubectl = {wall_ratio:.2} wall (target <= 0.3) {}, {memory_ratio:.2} memory (target <= 0.3) {}",
        kubectl.0,
        kubectl.1,
        verdict(wall_ratio <= 0.3),
        verdict(memory_ratio <= 0.3)
    );
}

fn restarted(injector: &support::injector::Injector) -> f64 {
    injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}")
}

fn restarted_in(body: &str) -> f64 {
    samples_in(body, "sidecar_injector_rollouts_total")
        .get("{kind=\"Deployment\",result=\"restarted\"}")
        .copied()
        .unwrap_or(0.0)
}

/// Wall time (s) and the peak resident memory (MiB) of the largest process of a shell
/// command, as GNU time reports them.
fn one_shot(command: &str) -> (f64, f64) {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "bash", "-o", "pipefail", "-c", command])
        .output()
        .expect("GNU time");
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let mut fields = last.split_whitespace();
    let wall: f64 = fields
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or(f64::NAN);
    let kib: f64 = fields
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or(f64::NAN);
    (wall, kib / 1024.0)
}

/// The earliest `injector/rolled-at` of the Deployments: when the engine made its first
/// restart after the edit.
async fn first_rolled_at(api: &Api<Deployment>) -> k8s_openapi::jiff::Timestamp {
    let mut params = ListParams::default().limit(500);
    let mut earliest: Option<k8s_openapi::jiff::Timestamp> = None;
    loop {
        let page = api.list(&params).await.expect("Deployments");
        for d in &page.items {
            let stamp = d
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("injector/rolled-at"))
                .and_then(|v| v.parse().ok());
            if let Some(stamp) = stamp {
                earliest =
                    Some(earliest.map_or(stamp, |e: k8s_openapi::jiff::Timestamp| e.min(stamp)));
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    earliest.expect("a Deployment restarted")
}

/// The engine's plans so far and the seconds they took, from its histogram.
fn plans(injector: &support::injector::Injector) -> (f64, f64) {
    let (_, body) = injector.lifecycle_get("/metrics");
    let of = |name: &str| samples_in(&body, name).values().sum::<f64>();
    (
        of("sidecar_injector_rollout_plan_duration_seconds_count"),
        of("sidecar_injector_rollout_plan_duration_seconds_sum"),
    )
}
