//! In-place upgrades: a revision that changes only the images of injected containers is
//! patched into the live pods (same pods, the app container untouched); anything else
//! restarts the workload; a PodDisruptionBudget holds it; a failed in-place upgrade fails the
//! restart and pauses the campaign at its canary. The test kubelet restarts a container whose image changed as a kubelet
//! would (tests/realnode shows it with a real kubelet).

use super::*;

/// Each pod's uid, by name.
async fn uids(ctx: &TestContext, app: &str) -> BTreeMap<String, String> {
    pods_of(ctx, app)
        .await
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
        .collect()
}

/// A container's status in `pod`: its image and restart count.
fn container(pod: &Pod, name: &str) -> Option<(String, i32)> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)
        .map(|s| (s.image.clone(), s.restart_count))
}

/// Waits until every pod of `app` carries `stamp` and runs `image` in its tracer container.
async fn wait_upgraded(ctx: &TestContext, app: &str, count: usize, stamp: &str, image: &str) {
    eventually(
        Duration::from_secs(90),
        &format!("{app}: {count} pods at {stamp} running {image}"),
        || async {
            let pods = pods_of(ctx, app).await;
            (pods.len() == count
                && pods.iter().all(|p| {
                    annotation(p, "injector/revision") == Some(stamp)
                        && container(p, "tracer").is_some_and(|(i, _)| i == image)
                }))
            .then_some(())
        },
    )
    .await;
}

/// Every pod of `app` never restarted its app container and restarted its tracer
/// `tracer_restarts` times (`why`), and `app` has one ReplicaSet: upgraded in place.
async fn assert_upgraded_in_place(ctx: &TestContext, app: &str, tracer_restarts: i32, why: &str) {
    for pod in pods_of(ctx, app).await {
        assert_eq!(
            container(&pod, "app").unwrap().1,
            0,
            "the app never restarted"
        );
        assert_eq!(
            container(&pod, "tracer").unwrap().1,
            tracer_restarts,
            "{why}"
        );
    }
    assert_eq!(
        replicaset_count(ctx, app).await,
        1,
        "{app}: no new ReplicaSet"
    );
}

use std::collections::BTreeMap;

#[tokio::test(flavor = "multi_thread")]
async fn an_image_only_change_upgrades_pods_in_place_and_an_env_change_restarts_them() {
    // Time for four pods one at a time.
    let flags = [PATIENT_FAILURE, &["--in-place", "auto", "--cooldown", "1s"]].concat();
    let ctx = engine_context("in-place", &flags).await;
    // Four replicas: maxUnavailable 25% lets one pod at a time be unavailable.
    for name in ["canary", "web"] {
        create_deployment(&ctx, name, 4, template(name, Some("tracer:v1"))).await;
    }
    // canary's pods count as available 2 s after they are Ready: each upgraded pod is waited
    // out for that long before the next, by the engine itself (not only by the Deployment's
    // status, which may lag).
    let deployments = ctx.api::<Deployment>();
    deployments
        .patch(
            "canary",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"minReadySeconds": 2}})),
        )
        .await
        .unwrap();
    let v1 = stamp_of(TRACER_V1);
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 4, &v1, DEADLINE).await;
    }
    eventually(DEADLINE, "canary's 4 pods available", || async {
        let status = deployments.get("canary").await.ok()?.status?;
        (status.available_replicas == Some(4)).then_some(())
    })
    .await;
    let before = [uids(&ctx, "canary").await, uids(&ctx, "web").await];
    // web's budget allows no disruption: its pods wait, never patched past it.
    let pdbs = blocking_pdb(&ctx, "web", 4).await;

    // Only the image changes: the same pods are upgraded, the app container never restarts,
    // the template is never written, no ReplicaSet is added.
    let v2_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    let v2 = stamp_of(v2_text);
    put_config(&ctx, "tracing", "tracer.yaml", v2_text).await;
    wait_upgraded(&ctx, "canary", 4, &v2, "tracer:2").await;
    let injector = ctx.injector.as_ref().unwrap();
    let blocked =
        "sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"eviction_blocked\"}";
    eventually(DEADLINE, "web's upgrade held by its budget", || async {
        (injector.metric(blocked) >= 1.0).then_some(())
    })
    .await;
    assert!(
        pods_of(&ctx, "web")
            .await
            .iter()
            .all(|p| annotation(p, "injector/revision") == Some(v1.as_str())),
        "no pod of web patched past its budget"
    );
    pdbs.delete("web", &Default::default()).await.unwrap();
    wait_upgraded(&ctx, "web", 4, &v2, "tracer:2").await;
    assert_eq!(
        [uids(&ctx, "canary").await, uids(&ctx, "web").await],
        before,
        "the very same pods"
    );
    let waited = logged(injector, "the next pod waits until it is available at");
    assert!(
        waited.iter().any(|m| m.starts_with("canary-")),
        "the engine waited out canary's minReadySeconds: {waited:?}"
    );
    assert!(
        !waited.iter().any(|m| m.starts_with("web-")),
        "web has no minReadySeconds to wait out: {waited:?}"
    );
    for app in ["canary", "web"] {
        assert_upgraded_in_place(&ctx, app, 1, "the sidecar restarted once").await;
        let deployment = ctx.api::<Deployment>().get(app).await.unwrap();
        assert!(
            template_annotation(
                &deployment.spec.unwrap().template.metadata,
                "injector/rollout-revision"
            )
            .is_none(),
            "{app}: the template is untouched"
        );
    }
    wait_campaign(injector, "tracer:v1", "complete", DEADLINE).await;
    assert_eq!(
        injector.metric(
            "sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"upgraded_in_place\"}"
        ),
        8.0,
        "one patch per pod"
    );
    // Each pod is read once before its patch, once more when the pod watch says it changed
    // after it (the kubelet's report of the restarted sidecar), a canary pod once more when its
    // minReadySeconds are up, and once at the end of its workload's bake: not at every pass of
    // the engine (35 reads in this test when it was).
    let reads = injector.metric("sidecar_injector_rollout_api_requests_total{verb=\"read_pod\"}");
    assert!(
        reads <= 3.0 * 8.0 + 4.0,
        "{reads} pod reads for 8 pods upgraded in place"
    );
    let events = events_for(&ctx, "web", "SidecarRestart").await;
    assert!(
        events.iter().any(|e| e
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("upgrading pod by pod by sidecar-injector")
            && e.message
                .as_deref()
                .unwrap_or_default()
                .contains(": in place: sidecar tracer:v1")),
        "{events:?}"
    );

    // An env change cannot be made in place: the workloads are restarted, and say why.
    let v3_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2', env: [{name: LEVEL, value: debug}]}]\n";
    let v3 = stamp_of(v3_text);
    put_config(&ctx, "tracing", "tracer.yaml", v3_text).await;
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 4, &v3, Duration::from_secs(90)).await;
        assert_eq!(replicaset_count(&ctx, app).await, 2, "{app}: restarted");
    }
    let deployment = ctx.api::<Deployment>().get("web").await.unwrap();
    let reason = template_annotation(
        &deployment.spec.unwrap().template.metadata,
        "injector/rollout-reason",
    )
    .unwrap()
    .to_owned();
    assert!(
        reason.contains("not upgraded in place: tracer:v1: containers changed beyond their images"),
        "{reason}"
    );

    // A broken image fails its in-place upgrade at the canary's first pod: the campaign
    // pauses, no other pod is touched.
    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken', env: [{name: LEVEL, value: debug}]}]\n";
    let (reason, touched) = failing_edit(&ctx, broken).await;
    assert!(
        reason.starts_with("in-place upgrade failed: pod canary-")
            && reason.contains("upgraded container tracer is waiting (CrashLoopBackOff)"),
        "{reason}"
    );
    assert_eq!(touched, 1, "one pod of the canary, nothing else");
}

/// Puts `config`, whose rollout fails, and waits for its campaign to pause: the one failure's
/// reason, and how many pods of `canary` and `web` took the config.
async fn failing_edit(ctx: &TestContext, config: &str) -> (String, usize) {
    put_config(ctx, "tracing", "tracer.yaml", config).await;
    wait_campaign_paused(ctx.injector.as_ref().unwrap(), "tracer:v1").await;
    let book = wait_book_paused(ctx, "tracer:v1").await;
    let failures = book["campaigns"]["tracer:v1"]["failures"]
        .as_array()
        .unwrap();
    assert_eq!(failures.len(), 1, "{book:#}");
    let stamp = stamp_of(config);
    let mut touched = 0;
    for app in ["canary", "web"] {
        for pod in pods_of(ctx, app).await {
            if annotation(&pod, "injector/revision") == Some(stamp.as_str()) {
                touched += 1;
            }
            assert_eq!(
                container(&pod, "app").unwrap().1,
                0,
                "the app never restarted"
            );
        }
    }
    (failures[0]["reason"].as_str().unwrap().to_owned(), touched)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_one_shot_command_upgrades_pods_in_place_as_the_engine_does() {
    // The engine writes the revision history the command compares contents with: it rolls
    // the first edit, then stops acting.
    let flags = [
        "--rollout=auto",
        "--settle",
        "1s",
        "--in-place",
        "auto",
        "--cooldown",
        "1s",
        "--bake",
        "0s",
    ];
    let mut ctx = engine_context("in-place-cli", &flags).await;
    let apps = ["one", "two", "three"];
    for app in apps {
        create_deployment(&ctx, app, 4, template(app, Some("tracer:v1"))).await;
    }
    for app in apps {
        wait_pods_at(&ctx, app, 4, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    let v2 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v2).await;
    for app in apps {
        wait_upgraded(&ctx, app, 4, &stamp_of(v2), "tracer:2").await;
    }
    ctx.restart_injector_in_mode("off").await;
    let before: Vec<_> = futures::future::join_all(apps.map(|app| uids(&ctx, app))).await;
    let v3 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v3).await;
    wait_published(&ctx, &stamp_of(v3)).await;

    let namespace = ctx.namespace.clone();
    let output = tokio::task::spawn_blocking(move || {
        support::e2e::rollout_command(
            &namespace,
            &[
                "--confirm",
                "--in-place",
                "auto",
                "--bake",
                "0s",
                "--cooldown",
                "0s",
            ],
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "rollout --confirm: {stderr}");
    assert!(
        stderr.contains("upgrade in place (canary)"),
        "the plan says how: {stderr}"
    );
    // Done when the command exits: every pod at v3, running tracer:3, the very same pods.
    let v3 = stamp_of(v3);
    for app in apps {
        for pod in pods_of(&ctx, app).await {
            assert_eq!(annotation(&pod, "injector/revision"), Some(v3.as_str()));
            assert_eq!(container(&pod, "tracer").unwrap().0, "tracer:3");
        }
        assert_eq!(
            replicaset_count(&ctx, app).await,
            1,
            "{app}: no new ReplicaSet"
        );
    }
    let after: Vec<_> = futures::future::join_all(apps.map(|app| uids(&ctx, app))).await;
    assert_eq!(after, before, "the very same pods");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fix_after_a_failed_in_place_upgrade_heals_the_broken_pod_first_and_completes() {
    let flags = [PATIENT_FAILURE, &["--in-place", "auto", "--cooldown", "1s"]].concat();
    let ctx = engine_context("in-place-heal", &flags).await;
    // The DaemonSet (a pod on each of the test kubelet's two nodes) is the canary: the
    // smallest workload.
    create_daemonset(&ctx, "d1", template("d1", Some("tracer:v1"))).await;
    for name in ["web", "api"] {
        create_deployment(&ctx, name, 3, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "d1", 2, &v1, DEADLINE).await;
    for app in ["web", "api"] {
        wait_pods_at(&ctx, app, 3, &v1, DEADLINE).await;
    }
    let before = uids(&ctx, "d1").await;

    // An image the sidecar cannot run: the canary's first pod is patched, its container backs
    // off, the upgrade fails, the campaign pauses.
    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_campaign_paused(injector, "tracer:v1").await;
    let broken_stamp = stamp_of(broken);
    let broken_pods: Vec<String> = pods_of(&ctx, "d1")
        .await
        .into_iter()
        .filter(|p| annotation(p, "injector/revision") == Some(broken_stamp.as_str()))
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(broken_pods.len(), 1, "one pod of the canary broken");

    // The fix: the broken pod is upgraded first, though its DaemonSet is unhealthy (because of
    // that very pod), then the rest; the same pods, every one Ready at the fix.
    let fixed = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    let v3 = stamp_of(fixed);
    put_config(&ctx, "tracing", "tracer.yaml", fixed).await;
    wait_upgraded(&ctx, "d1", 2, &v3, "tracer:3").await;
    wait_pods_at(&ctx, "d1", 2, &v3, DEADLINE).await;
    assert_eq!(uids(&ctx, "d1").await, before, "healed in place");
    let healed = logged(injector, "healing first:");
    assert!(
        healed
            .iter()
            .any(|m| m.starts_with(&format!("healing first: {} ", broken_pods[0]))),
        "the broken pod was healed first: {healed:?}"
    );
    for app in ["web", "api"] {
        wait_upgraded(&ctx, app, 3, &v3, "tracer:3").await;
    }
    // The fixed revision's campaign completes with no failure: nothing paused it again.
    eventually(
        Duration::from_secs(90),
        "the fix's campaign complete",
        || async {
            let book = campaign_book(&ctx).await?;
            let campaign = &book["campaigns"]["tracer:v1"];
            (campaign["revision"] == v3.split_once('=').unwrap().1
                && campaign["state"] == "complete"
                && campaign["failures"].as_array().is_none_or(Vec::is_empty))
            .then_some(())
        },
    )
    .await;
}

/// The memory request `pod`'s tracer container runs with, as its status reports it.
fn reported_memory(pod: &Pod) -> Option<String> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "tracer")?;
    Some(
        status
            .resources
            .as_ref()?
            .requests
            .as_ref()?
            .get("memory")?
            .0
            .clone(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_change_resizes_pods_in_place_and_one_the_node_cannot_fit_fails_with_its_reason() {
    let flags = [PATIENT_FAILURE, &["--in-place", "auto", "--cooldown", "1s"]].concat();
    let ctx = engine_context("in-place-resize", &flags).await;
    let v1 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1', resources: {requests: {memory: 64Mi}}}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v1).await;
    wait_published(&ctx, &stamp_of(v1)).await;
    for name in ["canary", "web"] {
        create_deployment(&ctx, name, 4, template(name, Some("tracer:v1"))).await;
    }
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 4, &stamp_of(v1), DEADLINE).await;
    }
    let before = [uids(&ctx, "canary").await, uids(&ctx, "web").await];

    // Only the memory request changes: each pod is resized where it runs.
    let v2 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1', resources: {requests: {memory: 128Mi}}}]\n";
    let v2_stamp = stamp_of(v2);
    put_config(&ctx, "tracing", "tracer.yaml", v2).await;
    for app in ["canary", "web"] {
        eventually(
            Duration::from_secs(90),
            &format!("{app}: 4 pods at {v2_stamp} running with 128Mi"),
            || async {
                let pods = pods_of(&ctx, app).await;
                (pods.len() == 4
                    && pods.iter().all(|p| {
                        annotation(p, "injector/revision") == Some(v2_stamp.as_str())
                            && reported_memory(p).as_deref() == Some("128Mi")
                    }))
                .then_some(())
            },
        )
        .await;
    }
    assert_eq!(
        [uids(&ctx, "canary").await, uids(&ctx, "web").await],
        before,
        "the very same pods"
    );
    for app in ["canary", "web"] {
        for pod in pods_of(&ctx, app).await {
            let spec = pod.spec.as_ref().unwrap();
            let tracer = spec.containers.iter().find(|c| c.name == "tracer").unwrap();
            let requests = tracer
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap();
            assert_eq!(requests["memory"].0, "128Mi", "the spec resized");
        }
        assert_upgraded_in_place(
            &ctx,
            app,
            0,
            "resizePolicy NotRequired: the sidecar runs on",
        )
        .await;
    }
    let injector = ctx.injector.as_ref().unwrap();
    wait_campaign(injector, "tracer:v1", "complete", DEADLINE).await;
    assert_eq!(
        injector.metric("sidecar_injector_rollout_api_requests_total{verb=\"resize_pod\"}"),
        8.0,
        "one resize per pod"
    );
    let events = events_for(&ctx, "web", "SidecarRestart").await;
    assert!(
        events.iter().any(|e| e
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(": in place: sidecar tracer:v1")),
        "{events:?}"
    );

    // More memory than a node has: the kubelet leaves the resize pending, Infeasible. The
    // canary's first pod fails with that reason, the campaign pauses, no other pod is touched.
    let huge = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1', resources: {requests: {memory: 64Gi}}}]\n";
    let (reason, touched) = failing_edit(&ctx, huge).await;
    assert!(
        reason.starts_with("in-place upgrade failed: pod canary-")
            && reason.contains(
                "the kubelet did not resize tracer: PodResizePending Infeasible: Node didn't have enough capacity: memory"
            ),
        "{reason}"
    );
    assert_eq!(touched, 1, "one pod of the canary, nothing else");
}
