//! decide+patch on a realistic ~8 KB pod and on a pod with 1,500 env vars.
//!
//! Targets (issue 2): under 10 µs for the 8 KB pod, under 2 ms for the 1,500-env pod. Each case
//! also runs a same-run baseline, deserializing the pod into a full k8s-openapi `Pod` (what a
//! webhook that parses everything pays before it even decides), so figures can be read as
//! ratios on a noisy machine.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::{Value, json};
use sidecar_injector::config::{LoadedSidecar, SidecarSet, parse_config};
use sidecar_injector::injection::{Decision, InjectionSettings, PodView, decide};

fn sidecars() -> SidecarSet {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config");
    sidecar_injector::sources::directory::load_config_directory(std::path::Path::new(dir))
        .expect("example configs")
        .sidecar_set()
}

/// The DaemonSet pod the real apiserver sent (managedFields included), grown to about 8 KB
/// with the labels and env a production pod carries.
fn realistic_pod() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/admission/daemonset-pod.json"
    );
    let review: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut pod = review["request"]["object"].clone();
    pod["metadata"]["annotations"]["injector/request"] = json!("logger:v1, metrics-agent:v1");
    for i in 0..6 {
        pod["metadata"]["labels"][format!("app.kubernetes.io/part-{i}")] =
            json!("checkout-service");
    }
    while serde_json::to_vec(&pod).unwrap().len() < 8 * 1024 {
        let env = pod["spec"]["containers"][0]["env"].as_array_mut().unwrap();
        let n = env.len();
        env.push(
            json!({"name": format!("FEATURE_FLAG_{n}"), "value": "enabled-for-canary-cohort"}),
        );
    }
    serde_json::to_vec(&pod).unwrap()
}

fn many_env_pod(count: usize) -> Vec<u8> {
    let env: Vec<Value> = (0..count)
        .map(|i| json!({"name": format!("VAR_{i}"), "value": format!("value-{i}")}))
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "big-", "annotations": {"injector/request": "logger:v1, metrics-agent:v1"}},
        "spec": {"containers": [
            {"name": "app", "image": "app:1", "env": env.clone()},
            {"name": "helper", "image": "helper:1", "env": env}
        ]}
    }))
    .unwrap()
}

fn bench_pod(c: &mut Criterion, label: &str, bytes: &[u8], sidecars: &SidecarSet) {
    let settings = InjectionSettings::default();
    let view: PodView = serde_json::from_slice(bytes).unwrap();
    assert!(
        matches!(
            decide(&view, "team-a", sidecars, &settings),
            Decision::Inject(_)
        ),
        "the benchmark must measure a real injection"
    );
    let mut group = c.benchmark_group(format!("{label} ({} bytes)", bytes.len()));
    group.bench_function("decide+patch", |b| {
        b.iter(|| decide(black_box(&view), "team-a", sidecars, &settings))
    });
    group.bench_function("decide+patch+serialize", |b| {
        b.iter(
            || match decide(black_box(&view), "team-a", sidecars, &settings) {
                Decision::Inject(injection) => {
                    let mut patch = Vec::new();
                    injection.patch.write_json(&mut patch).unwrap();
                    patch
                }
                _ => unreachable!(),
            },
        )
    });
    group.bench_function("parse view+decide+patch", |b| {
        b.iter(|| {
            let view =
                PodView::deserialize(&mut serde_json::Deserializer::from_slice(black_box(bytes)))
                    .unwrap();
            decide(&view, "team-a", sidecars, &settings)
        })
    });
    // The whole request as the server runs it: the review envelope, the pod view, the
    // decision, the patch and the encoded reply.
    let review = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b5b4b4e-3d1f-4d4e-9f3c-2a6f1d7c9e01",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "team-a",
            "operation": "CREATE",
            "object": serde_json::from_slice::<Value>(bytes).unwrap(),
        }
    }))
    .unwrap();
    group.bench_function("review: body in, reply out", |b| {
        b.iter(|| sidecar_injector::serve::review(black_box(&review), sidecars, &settings).unwrap())
    });
    // What reading the body costs at the least: every byte scanned, nothing kept.
    group.bench_function("baseline: skim the review (IgnoredAny)", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&review)).unwrap())
    });
    group.bench_function("baseline: parse full k8s Pod", |b| {
        b.iter(|| serde_json::from_slice::<Pod>(black_box(bytes)).unwrap())
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let sidecars = sidecars();
    bench_pod(c, "8KB pod", &realistic_pod(), &sidecars);
    bench_pod(c, "1500-env pod", &many_env_pod(1500), &sidecars);
}

// Keeps the loader in the binary honest: parsing a config is not on the request path, but a
// regression here would slow hot reloads.
fn config_parse(c: &mut Criterion) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/logger-v1.yaml"
    ))
    .unwrap();
    c.bench_function("parse+revision logger-v1.yaml", |b| {
        b.iter(|| {
            let config = parse_config("logger-v1.yaml", black_box(&text))
                .unwrap()
                .config;
            LoadedSidecar::new(config, "logger-v1.yaml")
        })
    });
}

criterion_group!(injection, benches, config_parse);
criterion_main!(injection);
