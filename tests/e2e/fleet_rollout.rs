//! `rollout --promote SIDECAR --wave staging --wave prod`: a revision promoted cluster by
//! cluster across two real control planes, each with its own `serve --promotion=gated`
//! (engine, webhook, test kubelet): the shared plane as `staging`, a second one as `prod`.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use support::cluster::{OtherControlPlane, control_plane, fleet_kubeconfig};

use super::*;
use history::revision;

const NAME: &str = "fleet-waves";
const BAKE: &str = "4s";

fn fleet_command(
    kubeconfig: &std::path::Path,
    namespace: &str,
    extra: &[&str],
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"));
    command
        .args(["rollout", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--injector-namespace", namespace, "--promote", "tracer:v1"])
        .args(["--wave", "staging", "--wave", "prod", "--wave-bake", BAKE])
        .args(["--wave-timeout", "3m"])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

async fn scale(ctx: &TestContext, name: &str, replicas: i32) {
    ctx.api::<Deployment>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The run wrote a promotion into `cluster`'s book.
fn promoted(out: &str, cluster: &str) -> bool {
    out.lines()
        .any(|line| line == format!("{cluster}: promoted"))
}

fn time_at(book: &Value, pointer: &str) -> Timestamp {
    book.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} in {book:#}"))
        .parse()
        .unwrap()
}

/// `ctx`'s campaign of tracer:v1 once it waits for promotion of `stamp`, its new pods held at
/// `held`.
async fn wait_gated(ctx: &TestContext, stamp: &str, held: &str) {
    eventually(
        DEADLINE,
        &format!("{} gated at {stamp}", ctx.namespace),
        || async {
            let book = campaign_book(ctx).await?;
            let campaign = &book["campaigns"]["tracer:v1"];
            (campaign["revision"] == revision(stamp)
                && campaign["state"] == "gated"
                && campaign["held"]["revision"] == revision(held))
            .then_some(())
        },
    )
    .await;
}

async fn wait_good(ctx: &TestContext, stamp: &str) {
    eventually(
        DEADLINE,
        &format!("{stamp} good in the history"),
        || async {
            let history = revision_history(ctx).await?;
            history["sidecars"]["tracer:v1"]
                .as_array()?
                .iter()
                .any(|e| e["revision"] == revision(stamp) && e["outcome"] == "good")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_is_promoted_wave_by_wave_and_a_canary_failure_in_staging_never_reaches_prod() {
    // A workload restarted for v2 may restart again for v3 at once.
    let flags = [QUICK_FAILURE, &["--promotion=gated", "--cooldown", "1s"]].concat();
    let staging = engine_context(NAME, &flags).await;
    let prod_plane = OtherControlPlane::start("waves-prod");
    support::kubelet::start(&prod_plane.plane.kubeconfig, Duration::from_millis(300));
    let prod = engine_context_in(&prod_plane.plane, NAME, &flags).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("fleet.kubeconfig");
    fleet_kubeconfig(
        &kubeconfig,
        &[
            ("staging", &control_plane().kubeconfig),
            ("prod", &prod_plane.plane.kubeconfig),
        ],
    );
    let namespace = staging.namespace.clone();
    let v1 = stamp_of(TRACER_V1);
    for ctx in [&staging, &prod] {
        create_deployment(ctx, "web", 1, template("web", Some("tracer:v1"))).await;
        wait_pods_at(ctx, "web", 1, &v1, DEADLINE).await;
        wait_good(ctx, &v1).await;
    }

    // v2 reaches both clusters' configs (GitOps would): both wait for promotion.
    let v2_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    let v2 = stamp_of(v2_text);
    for ctx in [&staging, &prod] {
        put_config(ctx, "tracing", "tracer.yaml", v2_text).await;
        wait_gated(ctx, &v2, &v1).await;
    }

    // A first run is interrupted once it promoted staging: prod is not promoted yet.
    let mut first = fleet_command(&kubeconfig, &namespace, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(DEADLINE, "staging promoted by the first run", || async {
        let book = campaign_book(&staging).await?;
        (book["promotions"]["tracer:v1"]["revision"] == revision(&v2)).then_some(())
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let prod_book = campaign_book(&prod).await.unwrap();
    assert!(
        prod_book["promotions"]["tracer:v1"].is_null(),
        "prod promoted before staging completed and baked: {prod_book:#}"
    );

    // A second run goes on from there: staging completes and bakes, then prod is promoted.
    let second = fleet_command(&kubeconfig, &namespace, &[])
        .output()
        .unwrap();
    let out = text(&second.stdout);
    assert!(second.status.success(), "{out}\n{}", text(&second.stderr));
    assert!(
        out.contains("wave 1/2 (staging): tracer:v1 revision"),
        "{out}"
    );
    assert!(!promoted(&out, "staging"), "promoted twice: {out}");
    assert!(promoted(&out, "prod"), "{out}");
    assert!(out.contains("wave 2/2 done"), "{out}");
    for ctx in [&staging, &prod] {
        wait_pods_at(ctx, "web", 1, &v2, DEADLINE).await;
        assert_eq!(
            replicaset_count(ctx, "web").await,
            2,
            "{}: web restarted exactly once",
            ctx.namespace
        );
    }
    let staging_book = campaign_book(&staging).await.unwrap();
    let prod_book = campaign_book(&prod).await.unwrap();
    let staging_baked = time_at(&staging_book, "/campaigns/tracer:v1/completed")
        + std::time::Duration::from_secs(4);
    let prod_promoted = time_at(&prod_book, "/promotions/tracer:v1/at");
    assert!(
        prod_promoted >= staging_baked,
        "prod promoted at {prod_promoted}, before staging completed and baked at {staging_baked}"
    );
    assert!(
        prod_book["promotions"]["tracer:v1"]["by"]
            .as_str()
            .unwrap()
            .starts_with("fleet-rollout/"),
        "{prod_book:#}"
    );

    // A run after the run: everything is done, nothing is written or restarted.
    let third = fleet_command(&kubeconfig, &namespace, &[])
        .output()
        .unwrap();
    assert!(third.status.success(), "{}", text(&third.stderr));
    let out = text(&third.stdout);
    assert!(
        !promoted(&out, "staging") && !promoted(&out, "prod"),
        "{out}"
    );
    assert_eq!(
        time_at(
            &campaign_book(&prod).await.unwrap(),
            "/promotions/tracer:v1/at"
        ),
        prod_promoted
    );
    for ctx in [&staging, &prod] {
        assert_eq!(replicaset_count(ctx, "web").await, 2);
        wait_good(ctx, &v2).await;
    }

    // v3 is broken: its canary fails in staging, and prod is never promoted.
    let v3_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    let v3 = stamp_of(v3_text);
    for ctx in [&staging, &prod] {
        put_config(ctx, "tracing", "tracer.yaml", v3_text).await;
        wait_gated(ctx, &v3, &v2).await;
    }
    let failed = fleet_command(&kubeconfig, &namespace, &[])
        .output()
        .unwrap();
    let (out, err) = (text(&failed.stdout), text(&failed.stderr));
    assert_eq!(failed.status.code(), Some(1), "{out}\n{err}");
    assert!(promoted(&out, "staging"), "{out}");
    assert!(!promoted(&out, "prod"), "{out}");
    assert!(
        err.contains(&format!(
            "the fleet stops: staging: tracer:v1 revision {} failed: Deployment/{namespace}/web: ",
            revision(&v3)
        )) && err.contains("nothing further is promoted (waves not started: prod)"),
        "{err}"
    );
    let prod_book = campaign_book(&prod).await.unwrap();
    assert_eq!(
        prod_book["promotions"]["tracer:v1"]["revision"],
        revision(&v2),
        "{prod_book:#}"
    );
    assert_eq!(prod_book["campaigns"]["tracer:v1"]["state"], "gated");
    // prod's new pods keep v2, the last good revision.
    scale(&prod, "web", 2).await;
    wait_pods_at(&prod, "web", 2, &v2, DEADLINE).await;
    assert_eq!(replicaset_count(&prod, "web").await, 2);

    // A run after the stop stops again, at the same place, and still promotes nothing.
    let again = fleet_command(&kubeconfig, &namespace, &[])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again.stderr));
    let out = text(&again.stdout);
    assert!(
        !promoted(&out, "staging") && !promoted(&out, "prod"),
        "{out}"
    );
}

/// deploy/overlays/upstream-reader's ServiceAccount, Role, RoleBinding and token Secret, moved
/// into `namespace` of the cluster `client` reaches; a kubeconfig that connects as that
/// account, its context named `context`.
async fn upstream_reader_kubeconfig(
    client: &kube::Client,
    namespace: &str,
    context: &str,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let objects: Vec<Value> = support::cluster::kustomize("deploy/overlays/upstream-reader")
        .into_iter()
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("sidecar-injector-upstream-reader"))
        })
        .collect();
    assert_eq!(objects.len(), 4, "{objects:#?}");
    for mut object in objects {
        object["metadata"]["namespace"] = json!(namespace);
        if let Some(subjects) = object.get_mut("subjects") {
            subjects[0]["namespace"] = json!(namespace);
        }
        let client = client.clone();
        match object["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                create(
                    &Api::<ServiceAccount>::namespaced(client, namespace),
                    object,
                )
                .await
            }
            "Secret" => create(&Api::<Secret>::namespaced(client, namespace), object).await,
            "Role" => create(&Api::<Role>::namespaced(client, namespace), object).await,
            "RoleBinding" => {
                create(&Api::<RoleBinding>::namespaced(client, namespace), object).await
            }
            other => panic!("the component holds a {other}"),
        }
    }
    let account = support::cluster::service_account_kubeconfig(
        client,
        namespace,
        "sidecar-injector-upstream-reader",
        dir,
    )
    .await;
    let path = dir.join("upstream.kubeconfig");
    fleet_kubeconfig(&path, &[(context, &account)]);
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_cluster_promotes_itself_once_upstream_completed_and_baked_and_never_a_failed_revision()
 {
    const GATE: &str = "upstream-gate";
    let staging = engine_context(GATE, &[QUICK_FAILURE, &["--cooldown", "1s"]].concat()).await;
    let dir = tempfile::tempdir().unwrap();
    let upstream =
        upstream_reader_kubeconfig(&staging.client, &staging.namespace, "staging", dir.path())
            .await;
    let prod_plane = OtherControlPlane::start("gate-prod");
    support::kubelet::start(&prod_plane.plane.kubeconfig, Duration::from_millis(300));
    let gated = [
        QUICK_FAILURE,
        &[
            "--cooldown",
            "1s",
            "--promotion=gated",
            "--promote-after",
            "staging",
            "--promote-bake",
            "3s",
            "--upstream-kubeconfig",
            upstream.to_str().unwrap(),
        ],
    ]
    .concat();
    let prod = engine_context_in(&prod_plane.plane, GATE, &gated).await;
    let v1 = stamp_of(TRACER_V1);
    for ctx in [&staging, &prod] {
        create_deployment(ctx, "web", 1, template("web", Some("tracer:v1"))).await;
        wait_pods_at(ctx, "web", 1, &v1, DEADLINE).await;
        wait_good(ctx, &v1).await;
    }

    // v2 reaches prod first: it waits there, and drift says for what.
    let v2_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    let v2 = stamp_of(v2_text);
    put_config(&prod, "tracing", "tracer.yaml", v2_text).await;
    wait_gated(&prod, &v2, &v1).await;
    let note = eventually(DEADLINE, "prod's drift note names staging", || async {
        let book = campaign_book(&prod).await?;
        let waiting = book["upstream"]["tracer:v1"]["waiting"]
            .as_str()?
            .to_owned();
        waiting.starts_with("staging: ").then_some(waiting)
    })
    .await;
    assert!(
        note.contains(&format!("its campaign is of revision {}", revision(&v1))),
        "{note}"
    );
    let drift = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args(["drift", "-o", "json", "-n", &prod.namespace, "--kubeconfig"])
        .arg(&prod_plane.plane.kubeconfig)
        .args(["--injector-namespace", &prod.namespace])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&drift.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&drift.stderr)));
    let row = sidecar_row(&report, "tracer:v1");
    assert!(
        row["note"].as_str().unwrap().starts_with(&format!(
            "waits for promotion: {} (promoted once complete and baked in upstream staging, or by `sidecar-injector rollout --promote tracer:v1`; now staging: ",
            revision(&v2)
        )),
        "{row:#}"
    );

    // Staging rolls it out; prod promotes itself after the bake and rolls it out once.
    put_config(&staging, "tracing", "tracer.yaml", v2_text).await;
    wait_pods_at(&staging, "web", 1, &v2, DEADLINE).await;
    wait_pods_at(&prod, "web", 1, &v2, DEADLINE).await;
    let staging_book = campaign_book(&staging).await.unwrap();
    let prod_book = campaign_book(&prod).await.unwrap();
    assert_eq!(
        prod_book["promotions"]["tracer:v1"]["by"], "upstream staging",
        "{prod_book:#}"
    );
    assert!(
        time_at(&prod_book, "/promotions/tracer:v1/at")
            >= time_at(&staging_book, "/campaigns/tracer:v1/completed")
                + std::time::Duration::from_secs(3),
        "promoted before staging baked: {prod_book:#}\n{staging_book:#}"
    );
    assert_eq!(replicaset_count(&prod, "web").await, 2);
    wait_good(&prod, &v2).await;
    wait_good(&staging, &v2).await;

    // v3 is broken: it fails in staging, and prod never promotes it; its new pods keep v2.
    let v3_text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    let v3 = stamp_of(v3_text);
    put_config(&staging, "tracing", "tracer.yaml", v3_text).await;
    put_config(&prod, "tracing", "tracer.yaml", v3_text).await;
    wait_gated(&prod, &v3, &v2).await;
    wait_book_paused(&staging, "tracer:v1").await;
    eventually(DEADLINE, "prod's gate says staging failed", || async {
        let book = campaign_book(&prod).await?;
        let waiting = book["upstream"]["tracer:v1"]["waiting"]
            .as_str()?
            .to_owned();
        waiting.starts_with("staging: failed: ").then_some(())
    })
    .await;
    let prod_book = campaign_book(&prod).await.unwrap();
    assert_eq!(
        prod_book["promotions"]["tracer:v1"]["revision"],
        revision(&v2)
    );
    assert_eq!(prod_book["campaigns"]["tracer:v1"]["state"], "gated");
    scale(&prod, "web", 2).await;
    wait_pods_at(&prod, "web", 2, &v2, DEADLINE).await;
    assert_eq!(replicaset_count(&prod, "web").await, 2);
}
