//! Revision history: a paused campaign holds new pods at the last good revision, `rollout --to`
//! rolls back to a remembered revision, and a config change ends the pin.

use super::*;

/// `sidecar-injector ARGS` against the test cluster, in the test's namespace; its output.
fn cli(ctx: &TestContext, args: &[&str]) -> std::process::Output {
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

fn revision(stamp: &str) -> &str {
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
