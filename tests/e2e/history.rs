//! Revision history: a paused campaign holds new pods at the last good revision, `rollout --to`
//! rolls back to a remembered revision, and a config change ends the pin.

use super::*;

/// `sidecar-injector ARGS` against the test cluster, in the test's namespace; its output.
pub(super) fn cli(ctx: &TestContext, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(["--injector-namespace", &ctx.namespace])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// The tracer:v1 stamp `inject` gives a new pod, with the configs the test's injector reads
/// (its ConfigMaps) and the pins and holds of its status ConfigMap.
fn injected(ctx: &TestContext) -> String {
    let dir = tempfile::tempdir().unwrap();
    inject_revision(
        dir.path(),
        "tracer:v1",
        &[
            "--injector-namespace",
            &ctx.namespace,
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
        ],
    )
    .unwrap_or_else(|stderr| panic!("inject failed: {stderr}"))
    .0
}

pub(super) fn revision(stamp: &str) -> &str {
    stamp.split_once('=').unwrap().1
}

/// The tracer:v1 row of `drift -o json`.
fn drift_row(ctx: &TestContext) -> Value {
    let drift = cli(ctx, &["drift", "-n", &ctx.namespace, "-o", "json"]);
    let report: Value = serde_json::from_slice(&drift.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&drift.stderr)));
    report["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tracer:v1")
        .cloned()
        .unwrap_or_else(|| panic!("no tracer:v1 row: {report:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_revision_is_held_back_for_new_pods_and_rolled_back_with_rollout_to_previous() {
    let flags = [QUICK_FAILURE, &["--cooldown", "1s"]].concat();
    let ctx = engine_context("rollout-hold", &flags).await;
    for name in ["canary", "web"] {
        create_deployment(&ctx, name, 1, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 1, &v1, DEADLINE).await;
    }
    // The engine remembers v1 and, its campaign complete, calls it good.
    eventually(DEADLINE, "v1 good in the revision history", || async {
        let history = revision_history(&ctx).await?;
        let entries = history["sidecars"]["tracer:v1"].as_array()?.clone();
        (entries.len() == 1
            && entries[0]["revision"] == revision(&v1)
            && entries[0]["outcome"] == "good"
            && entries[0]["content"]["containers"][0]["image"] == "tracer:1")
            .then_some(())
    })
    .await;

    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    let broken_stamp = stamp_of(broken);
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_campaign_paused(injector, "tracer:v1").await;
    let book = wait_book_paused(&ctx, "tracer:v1").await;
    let campaign = &book["campaigns"]["tracer:v1"];
    assert_eq!(campaign["revision"], revision(&broken_stamp), "{book:#}");
    assert_eq!(campaign["held"]["revision"], revision(&v1), "{book:#}");
    assert!(
        campaign["pauseReason"].as_str().unwrap().contains(&format!(
            "new pods get the last good revision {}",
            revision(&v1)
        )),
        "{book:#}"
    );
    eventually(
        DEADLINE,
        "the broken revision failed in the history",
        || async {
            let history = revision_history(&ctx).await?;
            let entries = history["sidecars"]["tracer:v1"].as_array()?.clone();
            (entries.len() == 2
                && entries[1]["revision"] == revision(&broken_stamp)
                && entries[1]["outcome"] == "failed")
                .then_some(())
        },
    )
    .await;

    // Whoever creates a pod now is told it gets the last good revision.
    let warning = format!(
        "Warning: sidecar tracer:v1 is held at its last good revision {}: the rollout of {} failed",
        revision(&v1),
        revision(&broken_stamp)
    );
    eventually(DEADLINE, "kubectl shows the hold's warning", || async {
        dry_run_warnings(&ctx, "tracer:v1").filter(|w| w.contains(&warning))
    })
    .await;

    // web scales up during the pause: its new pod gets v1, not the revision that failed; the
    // canary keeps its broken pod (paused: nothing is restarted).
    ctx.api::<Deployment>()
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    wait_pods_at(&ctx, "web", 2, &v1, DEADLINE).await;
    let canary = pods_of(&ctx, "canary").await;
    assert!(
        canary
            .iter()
            .any(|p| annotation(p, "injector/revision") == Some(broken_stamp.as_str())),
        "the canary keeps its broken pod during the pause"
    );
    // explain judges what the webhook injects now: the held revision.
    let web = pods_of(&ctx, "web").await[0].metadata.name.clone().unwrap();
    let explained = explain_pod(&ctx, &web);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.status.success() && text.contains(&format!("revision {} from", revision(&v1))),
        "{text}{}",
        String::from_utf8_lossy(&explained.stderr)
    );
    // So does `inject`, with the configs and the hold the cluster's injector serves.
    assert_eq!(injected(&ctx), v1, "held");
    let row = drift_row(&ctx);
    let note = row["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "held at {} ({} failed: ",
            revision(&v1),
            revision(&broken_stamp)
        )),
        "{row:#}"
    );

    // Releasing the hold gives new pods the failed revision again (the campaign stays
    // paused); kubectl says so.
    let run = cli(&ctx, &["rollout", "--release-hold", "tracer:v1"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let paused = format!(
        "Warning: the rollout of sidecar tracer:v1 (revision {}) is paused",
        revision(&broken_stamp)
    );
    eventually(DEADLINE, "the paused warning once released", || async {
        dry_run_warnings(&ctx, "tracer:v1").filter(|w| w.contains(&paused))
    })
    .await;
    let book = campaign_book(&ctx).await.expect("a campaign book");
    assert!(
        book["campaigns"]["tracer:v1"].get("held").is_none(),
        "{book:#}"
    );
    assert_eq!(
        book["campaigns"]["tracer:v1"]["state"], "paused",
        "{book:#}"
    );

    // Roll back: `rollout --to tracer:v1=previous` pins v1; the Lease holder rolls it out.
    let run = cli(&ctx, &["rollout", "--to", "tracer:v1=previous"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("pinned tracer:v1 at {} (good", revision(&v1))),
        "{stderr}"
    );
    for (app, count) in [("canary", 1), ("web", 2)] {
        wait_pods_at(&ctx, app, count, &v1, Duration::from_secs(120)).await;
    }
    let book = campaign_book(&ctx).await.expect("a campaign book");
    assert_eq!(
        book["pins"]["tracer:v1"]["revision"],
        revision(&v1),
        "{book:#}"
    );
    assert_eq!(
        book["pins"]["tracer:v1"]["over"],
        revision(&broken_stamp),
        "{book:#}"
    );
    eventually(DEADLINE, "drift shows the pin, nothing stale", || async {
        let row = drift_row(&ctx);
        (row["revision"] == revision(&v1)
            && row["pods"]["current"] == 3
            && row["pods"]["stale"] == 0
            && row["note"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("pinned at {}", revision(&v1)))))
        .then_some(())
    })
    .await;
    // A new pod gets the pinned revision too, and `inject` says so.
    assert_eq!(injected(&ctx), v1, "pinned");
    assert!(
        !dry_run_warnings(&ctx, "tracer:v1")
            .expect("dry run")
            .contains("Warning"),
        "no warning for a pinned revision"
    );

    // A config change ends the pin: the fixed revision rolls out everywhere.
    let fixed = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", fixed).await;
    let v3 = stamp_of(fixed);
    for (app, count) in [("canary", 1), ("web", 2)] {
        wait_pods_at(&ctx, app, count, &v3, Duration::from_secs(120)).await;
    }
    let book = campaign_book(&ctx).await.expect("a campaign book");
    assert!(book.get("pins").is_none(), "{book:#}");
    let run = cli(&ctx, &["rollout", "--unpin", "tracer:v1"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("tracer:v1 is not pinned; nothing to do"),
        "{stderr}"
    );
    // A revision the history does not hold is refused, naming those it does.
    let run = cli(&ctx, &["rollout", "--to", "tracer:v1=0123456789ab"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        stderr.contains("sidecar tracer:v1 has no revision 0123456789ab in its history; known: ")
            && stderr.contains(&format!("{} (good)", revision(&v1))),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scale_up_during_a_hold_fails_nothing_and_the_rollback_heals_the_canary() {
    let flags = [QUICK_FAILURE, &["--cooldown", "1s"]].concat();
    let ctx = engine_context("hold-scale", &flags).await;
    let apps = [("canary", 1), ("web", 2), ("api", 2)];
    for (name, replicas) in apps {
        create_deployment(&ctx, name, replicas, template(name, Some("tracer:v1"))).await;
    }
    for (app, count) in apps {
        wait_pods_at(&ctx, app, count as usize, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    // A good revision, rolled out by the engine: every workload is stamped with it.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let good = stamp_of(TRACER_V2);
    for (app, count) in apps {
        wait_pods_at(&ctx, app, count as usize, &good, Duration::from_secs(90)).await;
    }
    eventually(
        DEADLINE,
        "the good revision good in the history",
        || async {
            let history = revision_history(&ctx).await?;
            history["sidecars"]["tracer:v1"]
                .as_array()?
                .iter()
                .any(|e| e["revision"] == revision(&good) && e["outcome"] == "good")
                .then_some(())
        },
    )
    .await;

    // A broken revision: the canary's new pod never becomes ready, the campaign pauses and
    // holds new pods at the good revision.
    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    let broken_stamp = stamp_of(broken);
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let book = wait_book_paused(&ctx, "tracer:v1").await;
    assert_eq!(
        book["campaigns"]["tracer:v1"]["held"]["revision"],
        revision(&good),
        "{book:#}"
    );

    // web scales 2 -> 3: the new pod gets the held revision, and stays not Ready (a slow
    // start), so web is short of its replicas for as long as this test wants.
    let before: Vec<String> = pods_of(&ctx, "web")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    ctx.api::<Deployment>()
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let pods = ctx.api::<Pod>();
    let added = eventually(DEADLINE, "web's third pod", || async {
        pods_of(&ctx, "web")
            .await
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .find(|n| !before.contains(n))
    })
    .await;
    let added_pod = pods.get(&added).await.unwrap();
    assert_eq!(
        annotation(&added_pod, "injector/revision"),
        Some(good.as_str()),
        "held"
    );
    pods.patch(
        &added,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {support::kubelet::UNREADY: "true"}}}),
        ),
    )
    .await
    .unwrap();
    eventually(DEADLINE, "web short of a replica", || async {
        let status = ctx.api::<Deployment>().get("web").await.ok()?.status?;
        (status.replicas == Some(3) && status.available_replicas == Some(2)).then_some(())
    })
    .await;

    // Roll back: the pin's campaign restarts the canary, whose broken pod goes; web (stamped
    // with the good revision by its campaign a minute ago, short of a replica by a scale-up)
    // and api are nothing this campaign did, and fail nothing.
    let run = cli(&ctx, &["rollout", "--to", "tracer:v1=previous"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    wait_pods_at(&ctx, "canary", 1, &good, Duration::from_secs(60)).await;
    assert!(
        pods_of(&ctx, "canary")
            .await
            .iter()
            .all(|p| annotation(p, "injector/revision") != Some(broken_stamp.as_str())),
        "the broken pod is gone"
    );
    eventually(DEADLINE, "the rollback's campaign complete", || async {
        let book = campaign_book(&ctx).await?;
        let campaign = &book["campaigns"]["tracer:v1"];
        (campaign["revision"] == revision(&good) && campaign["state"] == "complete")
            .then_some(campaign.clone())
    })
    .await;
    let book = campaign_book(&ctx).await.unwrap();
    let campaign = &book["campaigns"]["tracer:v1"];
    assert!(
        campaign["failures"].as_array().is_none_or(Vec::is_empty),
        "{book:#}"
    );
    assert!(campaign.get("pauseReason").is_none(), "{book:#}");
    // web was never restarted for it: the same three pods, one still not Ready.
    let web: Vec<String> = pods_of(&ctx, "web")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(web.len(), 3);
    assert!(web.contains(&added), "{web:?}");
    let failed: Vec<Value> = ctx
        .injector
        .as_ref()
        .unwrap()
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "rollout failed")
        .collect();
    assert!(
        failed.iter().all(|l| l["workload"]
            .as_str()
            .is_some_and(|w| w.ends_with("/canary"))),
        "only the canary ever failed: {failed:#?}"
    );
}
