//! The health bake: a restarted workload's pods are read when its health drops within the
//! bake, and read again only when the pod watch sees them change while it stays down.

use std::time::Instant;

use kube::api::{Patch, PatchParams};
use support::kubelet::UNREADY;

use super::*;

const POD_READS: &str = "sidecar_injector_rollout_api_requests_total{verb=\"read_pod\"}";

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_a_health_drop_within_the_bake_fails_the_canary_when_its_pod_changes() {
    // A bake far longer than the test: a failure found before it ends came from a read made
    // while it ran, not from the read at its end.
    let flags = [PATIENT_FAILURE, &["--bake", "10m"]].concat();
    let mut ctx = engine_context("bake", &flags).await;
    for (name, replicas) in [("canary", 2), ("web", 3)] {
        create_deployment(&ctx, name, replicas, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    for (app, count) in [("canary", 2), ("web", 3)] {
        wait_pods_at(&ctx, app, count, &v1, DEADLINE).await;
    }
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    wait_pods_at(&ctx, "canary", 2, &stamp_of(TRACER_V2), DEADLINE).await;
    ctx.injector
        .as_mut()
        .unwrap()
        .wait_for_log(DEADLINE, |line| {
            line["workload"]
                .as_str()
                .is_some_and(|w| w.ends_with("/canary"))
                && line["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("baking for 10m"))
        });
    let injector = ctx.injector.as_ref().unwrap();
    let pods = ctx.api::<Pod>();
    let reads_at_bake = injector.metric(POD_READS);

    // A readiness probe fails on one pod: the canary's health drops, its two pods are read,
    // and nothing wrong with a container is found.
    let victim = pods_of(&ctx, "canary").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    pods.patch(
        &victim,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {UNREADY: "true"}}})),
    )
    .await
    .unwrap();
    eventually(
        DEADLINE,
        "the canary's pods read at its health drop",
        || async { (injector.metric(POD_READS) >= reads_at_bake + 2.0).then_some(()) },
    )
    .await;

    // Then its sidecar crashes and backs off, as a kubelet reports it: the pod watch sees the
    // pod change, its pods are read again, and the canary fails, naming the container; the
    // campaign pauses and web is never restarted.
    let pod = pods.get(&victim).await.unwrap();
    let statuses: Vec<Value> = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .into_iter()
        .map(|s| {
            let crashed = s.name == "tracer";
            let mut status = serde_json::to_value(&s).unwrap();
            if crashed {
                status["restartCount"] = json!(1);
                status["ready"] = json!(false);
                status["state"] = json!({"waiting": {"reason": "CrashLoopBackOff"}});
                status["lastState"] = json!({"terminated": {"exitCode": 3, "reason": "Error"}});
            }
            status
        })
        .collect();
    pods.patch_status(
        &victim,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"containerStatuses": statuses}})),
    )
    .await
    .unwrap();
    let crashed_at = Instant::now();
    let book = wait_book_paused(&ctx, "tracer:v1").await;
    let failures = book["campaigns"]["tracer:v1"]["failures"]
        .as_array()
        .unwrap();
    assert_eq!(failures.len(), 1, "{book:#}");
    assert_eq!(failures[0]["workload"]["name"], "canary", "{book:#}");
    assert_eq!(
        failures[0]["reason"],
        format!(
            "within the bake (10m) of rolling out: pod {victim}: container tracer (restarted 1 time, CrashLoopBackOff, last exit: Error, code 3)"
        ),
        "{book:#}"
    );
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    assert!(
        template_annotation(
            &web.spec.unwrap().template.metadata,
            "injector/rollout-revision"
        )
        .is_none(),
        "web was never restarted"
    );
    // Two reads of the two pods (at the drop, after the crash), and at most one more of each
    // should the watch report a change older than a read.
    let reads = injector.metric(POD_READS) - reads_at_bake;
    assert!(
        (4.0..=6.0).contains(&reads),
        "{reads} pod reads within the bake"
    );
    eprintln!(
        "bake: the crash failed the canary {:?} after it was reported, with {reads} pod reads",
        crashed_at.elapsed()
    );
}
