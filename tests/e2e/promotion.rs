//! Promotion gates: under `serve --promotion=gated` a new revision restarts nothing and new
//! pods keep the last good revision until `rollout --promote` approves it.

use super::*;
use history::{cli, revision};

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_revision_waits_with_new_pods_at_the_last_good_one_until_promoted() {
    let ctx = engine_context("promotion", &["--rollout=auto", "--promotion=gated"]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 1, &v1, DEADLINE).await;
    eventually(DEADLINE, "v1 good in the revision history", || async {
        let history = revision_history(&ctx).await?;
        let entries = history["sidecars"]["tracer:v1"].as_array()?.clone();
        (entries.len() == 1 && entries[0]["outcome"] == "good").then_some(())
    })
    .await;

    // Nothing to promote yet: refused with the reason.
    let early = cli(&ctx, &["rollout", "--promote", "tracer:v1"]);
    assert!(!early.status.success());
    assert!(
        String::from_utf8_lossy(&early.stderr).contains("does not wait for promotion"),
        "{}",
        String::from_utf8_lossy(&early.stderr)
    );

    let v2_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    let v2 = stamp_of(v2_text);
    put_config(&ctx, "tracing", "tracer.yaml", v2_text).await;
    let book = eventually(DEADLINE, "the v2 campaign gated", || async {
        let book = campaign_book(&ctx).await?;
        let campaign = &book["campaigns"]["tracer:v1"];
        (campaign["revision"] == revision(&v2)
            && campaign["state"] == "gated"
            && campaign["held"]["revision"] == revision(&v1))
        .then_some(book)
    })
    .await;
    assert_eq!(
        book["campaigns"]["tracer:v1"]["counts"]["pending"], 1,
        "{book:#}"
    );

    // A new pod gets v1, with a warning saying why; drift says the revision waits.
    let warning = format!(
        "Warning: sidecar tracer:v1 is held at {}: its revision {} waits for promotion (promoted by `sidecar-injector rollout --promote tracer:v1`)",
        revision(&v1),
        revision(&v2)
    );
    eventually(DEADLINE, "kubectl shows the gate's warning", || async {
        dry_run_warnings(&ctx, "tracer:v1").filter(|w| w.contains(&warning))
    })
    .await;
    ctx.api::<Deployment>()
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    wait_pods_at(&ctx, "web", 2, &v1, DEADLINE).await;
    let drift = cli(&ctx, &["drift", "-n", &ctx.namespace, "-o", "json"]);
    let report: Value = serde_json::from_slice(&drift.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&drift.stderr)));
    let row = sidecar_row(&report, "tracer:v1");
    assert_eq!(row["campaign"], "gated", "{row:#}");
    assert_eq!(
        row["note"],
        format!(
            "waits for promotion: {} (promoted by `sidecar-injector rollout --promote tracer:v1`); new pods keep {} meanwhile",
            revision(&v2),
            revision(&v1)
        ),
        "{row:#}"
    );
    // explain says it too, of what the webhook does with web's pods now.
    let explained = cli(
        &ctx,
        &[
            "explain",
            "-n",
            &ctx.namespace,
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
            "deployment/web",
        ],
    );
    let page = String::from_utf8_lossy(&explained.stdout);
    assert!(
        page.contains(&format!(
            "its revision {} waits for promotion",
            revision(&v2)
        )),
        "{page}\n{}",
        String::from_utf8_lossy(&explained.stderr)
    );
    // Past the settle window, still nothing was restarted.
    assert_eq!(replicaset_count(&ctx, "web").await, 1);

    // Promoted: the campaign runs and brings web to v2, once.
    let promoted = cli(&ctx, &["rollout", "--promote", "tracer:v1"]);
    assert!(
        promoted.status.success(),
        "{}",
        String::from_utf8_lossy(&promoted.stderr)
    );
    wait_pods_at(&ctx, "web", 2, &v2, DEADLINE).await;
    let book = campaign_book(&ctx).await.unwrap();
    assert_eq!(
        book["promotions"]["tracer:v1"]["revision"],
        revision(&v2),
        "{book:#}"
    );
    assert!(
        book["promotions"]["tracer:v1"]["by"]
            .as_str()
            .unwrap()
            .starts_with("rollout-cli/"),
        "{book:#}"
    );
    eventually(DEADLINE, "the v2 campaign complete", || async {
        let book = campaign_book(&ctx).await?;
        let campaign = &book["campaigns"]["tracer:v1"];
        (campaign["state"] == "complete" && campaign["completed"].is_string()).then_some(())
    })
    .await;
    assert_eq!(replicaset_count(&ctx, "web").await, 2);
}
