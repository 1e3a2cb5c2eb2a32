//! OnDelete workloads: evictions one at a time, behind a PodDisruptionBudget.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn an_on_delete_statefulset_behind_a_pdb_is_evicted_one_pod_at_a_time_never_forced() {
    let ctx = engine_context(
        "rollout-ondelete",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--eviction-timeout",
            "4s",
        ],
    )
    .await;
    create(&ctx.api::<StatefulSet>(), json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "updateStrategy": {"type": "OnDelete"},
                 "selector": {"matchLabels": {"app": "db"}}, "template": template("db", Some("tracer:v1"))}
    }))
    .await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "db", 3, &v1, DEADLINE).await;
    let first_uids: std::collections::BTreeSet<String> = pods_of(&ctx, "db")
        .await
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    // A budget that allows no disruption at all.
    let pdbs = blocking_pdb(&ctx, "db", 3).await;
    let availability = watch_availability(&ctx, "db");

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    let injector = ctx.injector.as_ref().unwrap();
    let blocked =
        "sidecar_injector_rollouts_total{kind=\"StatefulSet\",result=\"eviction_blocked\"}";
    eventually(
        Duration::from_secs(60),
        "the blocked eviction retried",
        || async { (injector.metric(blocked) >= 3.0).then_some(()) },
    )
    .await;
    // Refused past --eviction-timeout: reported once, on the workload, with what happens next.
    let reported = eventually(DEADLINE, "the blocked eviction reported", || async {
        events_for(&ctx, "db", "EvictionBlocked").await.pop()
    })
    .await;
    let note = reported.message.unwrap_or_default();
    assert!(
        note.starts_with("a PodDisruptionBudget has refused to let db-"),
        "{note}"
    );
    assert!(note.contains("(--eviction-timeout 4s)"), "{note}");
    assert_eq!(reported.type_.as_deref(), Some("Warning"));
    // Retried, never forced: the template is stamped, yet every pod is the one from before.
    let db = ctx.api::<StatefulSet>().get("db").await.unwrap();
    assert_eq!(
        template_annotation(
            &db.spec.unwrap().template.metadata,
            "injector/rollout-revision"
        ),
        Some(v2.clone())
    );
    let uids: std::collections::BTreeSet<String> = pods_of(&ctx, "db")
        .await
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    assert_eq!(uids, first_uids, "no pod was deleted past the budget");
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"StatefulSet\",result=\"evicted\"}"),
        0.0
    );

    // A budget that would let two go at once: the engine still takes one at a time.
    pdbs.patch(
        "db",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"minAvailable": null, "maxUnavailable": 2}})),
    )
    .await
    .unwrap();
    wait_pods_at(&ctx, "db", 3, &v2, Duration::from_secs(120)).await;
    let (fewest_ready, seen) = availability.lock().unwrap().clone();
    assert_eq!(fewest_ready, 2, "never more than one pod out at a time");
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"StatefulSet\",result=\"evicted\"}"),
        3.0
    );
    let new_uids: std::collections::BTreeSet<String> = pods_of(&ctx, "db")
        .await
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    assert!(new_uids.is_disjoint(&first_uids), "every pod replaced");
    assert_eq!(seen.len(), 6, "each pod replaced exactly once: {seen:?}");
    assert_eq!(
        events_for(&ctx, "db", "EvictionBlocked").await.len(),
        1,
        "reported once"
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"StatefulSet\",result=\"restarted\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_pod_is_evicted_through_policy_v1_only_once_its_budget_allows() {
    let ctx = engine_context(
        "rollout-bare-pod",
        &["--rollout=auto", "--settle", "1s", "--evict-bare-pods"],
    )
    .await;
    let pods = ctx.api::<Pod>();
    let created = create_pod(&ctx, "lonely", "tracer:v1").await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    wait_ready(&ctx, "lonely", 1).await;
    // A policy/v1 budget that lets no disruption through.
    let pdbs = blocking_pdb(&ctx, "lonely", 1).await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let injector = ctx.injector.as_ref().unwrap();
    let blocked = "sidecar_injector_rollouts_total{kind=\"Pod\",result=\"eviction_blocked\"}";
    eventually(
        Duration::from_secs(60),
        "the bare pod's eviction refused by its budget",
        || async { (injector.metric(blocked) >= 1.0).then_some(()) },
    )
    .await;
    let still = pods.get_opt("lonely").await.unwrap();
    assert_eq!(
        still.and_then(|p| p.metadata.uid),
        Some(uid.clone()),
        "never deleted past its budget"
    );

    // The budget relaxed: the eviction goes through, the pod is gone (nothing recreates a bare
    // pod; its owner does, with the new revision).
    pdbs.patch(
        "lonely",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(60), "the bare pod evicted", || async {
        match pods.get_opt("lonely").await.ok()? {
            None => Some(()),
            Some(p) if p.metadata.deletion_timestamp.is_some() => Some(()),
            Some(_) => None,
        }
    })
    .await;
    // The API server marks the pod before the injector has its answer and counts it.
    let evicted = "sidecar_injector_rollouts_total{kind=\"Pod\",result=\"evicted\"}";
    eventually(Duration::from_secs(10), "the eviction counted", || async {
        (injector.metric(evicted) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(injector.metric(evicted), 1.0);
}
