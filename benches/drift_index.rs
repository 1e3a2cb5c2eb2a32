//! The drift index at scale: 100,000 pods in 10,000 Deployments fed as metadata watch events.
//! Prints the index's memory per pod (resident-set growth while it is built, so it includes
//! the allocator's overhead) and the time to classify every pod after a revision change.
//! Targets (issue 6): at most 1 KiB per pod; under 50 ms to classify 100,000 pods.
//!
//! `cargo bench --bench drift_index`; under `cargo test` it runs a small smoke pass.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

use std::hint::black_box;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sidecar_injector::annotations::AnnotationKeys;
use sidecar_injector::config::{LoadedSidecar, RevisionsInForce, SidecarSet, parse_config};
use sidecar_injector::drift::{DriftGauge, DriftIndex, DriftPolicy};

fn sidecars(image: &str) -> SidecarSet {
    let text = format!("name: logger:v1\ncontainers: [{{name: log-shipper, image: '{image}'}}]\n");
    [LoadedSidecar::new(
        parse_config("bench", &text).unwrap().config,
        "bench",
    )]
    .into_iter()
    .collect()
}

fn owner(kind: &str, name: &str) -> Option<Vec<OwnerReference>> {
    Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("7c1b2a9e-0000-4000-8000-{:012}", name.len()),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }])
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (workloads, pods_per_workload) = if full { (10_000, 10) } else { (100, 10) };
    let keys = AnnotationKeys::default();
    let before = sidecars("shipper:1");
    let stamp = before.iter().next().unwrap().stamp.clone();

    // The watch events, prepared first so that only the index's own growth is measured.
    let mut replicasets = Vec::with_capacity(workloads);
    let mut pods = Vec::with_capacity(workloads * pods_per_workload);
    for w in 0..workloads {
        let namespace = format!("team-{:03}", w % 200);
        let deployment = format!("service-{w:05}");
        let rs = format!("{deployment}-7d9c6b5f4d");
        replicasets.push(ObjectMeta {
            namespace: Some(namespace.clone()),
            name: Some(rs.clone()),
            owner_references: owner("Deployment", &deployment),
            ..Default::default()
        });
        for p in 0..pods_per_workload {
            pods.push(ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(format!("{rs}-{p:05}")),
                owner_references: owner("ReplicaSet", &rs),
                // As a Deployment's pods are labelled: its template's labels and the hash.
                labels: Some(
                    [
                        ("app".to_owned(), deployment.clone()),
                        ("pod-template-hash".to_owned(), "7d9c6b5f4d".to_owned()),
                    ]
                    .into(),
                ),
                annotations: Some(
                    [
                        (keys.request.clone(), "logger:v1".to_owned()),
                        (keys.status.clone(), "injected".to_owned()),
                        (keys.revision.clone(), stamp.clone()),
                    ]
                    .into(),
                ),
                ..Default::default()
            });
        }
    }

    let rss_before = rss_kib();
    let started = Instant::now();
    let mut index = DriftIndex::default();
    index.track_changes();
    for rs in &replicasets {
        index.apply_replicaset(rs);
    }
    for pod in &pods {
        index.apply_pod(pod, &keys);
    }
    let feed = started.elapsed();
    let rss_after = rss_kib();
    let per_pod = (rss_after.saturating_sub(rss_before) * 1024) as f64 / pods.len() as f64;

    let after = sidecars("shipper:2");
    let policy = DriftPolicy::default();

    // The gauge's first full count, right after the feed: later, the classifications below
    // free memory the allocator would hand to the gauge, and its growth would not show.
    let mut gauge = DriftGauge::new(policy.clone());
    let wanted = after.revisions_in_force();
    let rss_before_gauge = rss_kib();
    let started = Instant::now();
    let rows = black_box(gauge.update(&mut index, &wanted));
    let first_count = started.elapsed();
    let gauge_per_pod =
        (rss_kib().saturating_sub(rss_before_gauge) * 1024) as f64 / pods.len() as f64;
    assert_eq!(rows[0].pods.total() as usize, pods.len());
    // A revision change of the one sidecar every pod requests: the gauge's worst case, every
    // pod's record is replaced (once per group of pods classified alike).
    let before_wanted = before.revisions_in_force();
    let mut recounts: Vec<Duration> = Vec::new();
    // An even number of rounds, so the last counts against `wanted` again.
    for round in 0..if full { 10 } else { 2 } {
        let set = if round % 2 == 0 {
            &before_wanted
        } else {
            &wanted
        };
        let started = Instant::now();
        let rows = black_box(gauge.update(&mut index, set));
        recounts.push(started.elapsed());
        assert_eq!(rows[0].pods.total() as usize, pods.len());
    }
    recounts.sort();
    let recount = recounts[recounts.len() / 2];

    // A revision change of a sidecar no pod requests (another team's): one pass over the
    // records, none classified again.
    let with_other = |revision: &str| -> RevisionsInForce {
        wanted
            .iter()
            .map(|(name, revision)| (name.to_owned(), revision.to_owned()))
            .chain([("tracer:v1".to_owned(), revision.to_owned())])
            .collect()
    };
    let others = [with_other("aaaaaaaaaaaa"), with_other("bbbbbbbbbbbb")];
    gauge.update(&mut index, &others[1]);
    let mut unrelated: Vec<Duration> = Vec::new();
    for round in 0..if full { 10 } else { 2 } {
        let started = Instant::now();
        let rows = black_box(gauge.update(&mut index, &others[round % 2]));
        unrelated.push(started.elapsed());
        assert_eq!(rows[0].pods.total() as usize, pods.len());
    }
    unrelated.sort();
    gauge.update(&mut index, &wanted);

    let mut timings: Vec<Duration> = Vec::new();
    for round in 0..if full { 15 } else { 2 } {
        let set = if round % 2 == 0 { &after } else { &before };
        let started = Instant::now();
        let report = black_box(index.classify(set, &policy));
        timings.push(started.elapsed());
        assert_eq!(report.workloads.len(), workloads);
    }
    timings.sort();
    let median = timings[timings.len() / 2];
    println!(
        "drift index: {} pods in {} Deployments; fed in {:?}; {:.0} bytes per pod (RSS growth); classify after a revision change: median {:?} (min {:?}, max {:?})",
        pods.len(),
        workloads,
        feed,
        per_pod,
        median,
        timings[0],
        timings[timings.len() - 1]
    );

    // Single pod events (a pod replaced at the new revision, as a rollout does), each
    // followed by a gauge update.
    let new_stamp = after.iter().next().unwrap().stamp.clone();
    let events = if full { 2_000 } else { 20 };
    let mut singles: Vec<Duration> = Vec::with_capacity(events);
    for pod in pods.iter().take(events) {
        let mut pod = pod.clone();
        pod.annotations
            .as_mut()
            .unwrap()
            .insert(keys.revision.clone(), new_stamp.clone());
        let started = Instant::now();
        index.apply_pod(&pod, &keys);
        let rows = black_box(gauge.update(&mut index, &wanted));
        singles.push(started.elapsed());
        black_box(rows);
    }
    let rows = gauge.update(&mut index, &wanted);
    assert_eq!(
        rows[0].pods.current as usize, events,
        "each event counted once"
    );
    singles.sort();
    let single = singles[singles.len() / 2];
    println!(
        "drift gauge: {gauge_per_pod:.0} bytes per pod (RSS growth); {} pods: first (full) count {:?}; after a revision change of the sidecar all request, median {:?} (min {:?}, max {:?}); after a revision change of a sidecar none requests, median {:?}; one pod event then a gauge update: median {:?} (p99 {:?}); revision change / one event = {:.0}",
        pods.len(),
        first_count,
        recount,
        recounts[0],
        recounts[recounts.len() - 1],
        unrelated[unrelated.len() / 2],
        single,
        singles[singles.len() * 99 / 100],
        recount.as_secs_f64() / single.as_secs_f64()
    );

    // A rollout's step as the watches bring it: a Deployment's new ReplicaSet, its pods at the
    // new revision, the old ones gone; then one gauge update, the new pods classified alike.
    // The ReplicaSet mostly comes first; when its pods come before it (its watch lagging), the
    // gauge scans the index for them.
    let steps = if full { 500 } else { 5 };
    for replicaset_first in [true, false] {
        let mut step_updates: Vec<Duration> = Vec::with_capacity(steps);
        let first = if replicaset_first { 0 } else { steps };
        for w in first..first + steps {
            let namespace = format!("team-{:03}", w % 200);
            let deployment = format!("service-{w:05}");
            let rs = format!("{deployment}-5f4d7d9c6b");
            let replicaset = ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(rs.clone()),
                owner_references: owner("Deployment", &deployment),
                ..Default::default()
            };
            if replicaset_first {
                index.apply_replicaset(&replicaset);
            }
            for old in &pods[w * pods_per_workload..(w + 1) * pods_per_workload] {
                index.delete_pod(&namespace, old.name.as_deref().unwrap());
                let mut pod = old.clone();
                pod.name = Some(format!("{rs}-{}", pod.name.as_deref().unwrap()));
                pod.owner_references = owner("ReplicaSet", &rs);
                pod.annotations
                    .as_mut()
                    .unwrap()
                    .insert(keys.revision.clone(), new_stamp.clone());
                index.apply_pod(&pod, &keys);
            }
            if !replicaset_first {
                black_box(gauge.update(&mut index, &wanted));
                index.apply_replicaset(&replicaset);
            }
            let started = Instant::now();
            black_box(gauge.update(&mut index, &wanted));
            step_updates.push(started.elapsed());
        }
        step_updates.sort();
        println!(
            "drift gauge: {} pods: a rollout step (a new ReplicaSet, its {pods_per_workload} pods replaced{}) then a gauge update: median {:?} (p99 {:?}, max {:?})",
            pods.len(),
            if replicaset_first {
                ""
            } else {
                "; the pods seen before their ReplicaSet, which sends the gauge to scan for them"
            },
            step_updates[step_updates.len() / 2],
            step_updates[step_updates.len() * 99 / 100],
            step_updates[step_updates.len() - 1]
        );
    }
    if full {
        println!(
            "targets: <= 1024 bytes per pod ({}), < 50 ms to classify ({})",
            if per_pod <= 1024.0 { "met" } else { "NOT met" },
            if median < Duration::from_millis(50) {
                "met"
            } else {
                "NOT met"
            }
        );
    }
}
