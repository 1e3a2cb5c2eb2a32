//! `sidecar-injector rollout`: the dry-run plan, --confirm, selection by container name.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_rollout_command_plans_exactly_the_stale_workloads_and_confirms() {
    let ns = "e2e-rollout-cli";
    let ctx = engine_context("rollout-cli", &[]).await;
    tracer_workloads(&ctx).await;
    let v1 = stamp_of(TRACER_V1);
    for (app, count) in [("web", 2), ("db", 1), ("agent", NODES.len())] {
        wait_pods_at(&ctx, app, count, &v1, DEADLINE).await;
    }
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    wait_published(&ctx, &stamp_of(TRACER_V2)).await;

    // The dry run lists exactly the stale workloads, by what the injector publishes.
    let output = rollout_command(ns, &["-o", "json", "--canary", "0"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("as the running injector(s) "),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    let planned = planned_workloads(&plan);
    assert_eq!(
        planned,
        ["DaemonSet/agent", "Deployment/web", "StatefulSet/db"],
        "{plan:#}"
    );

    // Strict booleans: --confirm=false changes nothing, a wrong value is an error.
    let output = rollout_command(ns, &["--confirm=false"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("dry run: nothing restarted"));
    let output = rollout_command(ns, &["--confirm=yes"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid value 'yes'"));
    assert_eq!(replicaset_count(&ctx, "web").await, 1, "nothing rolled");
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    assert_eq!(
        template_annotation(
            &web.spec.unwrap().template.metadata,
            "injector/rollout-revision"
        ),
        None
    );

    // --confirm rolls them, waits, and exits 0.
    let output = rollout_command(ns, &["--confirm", "--rollout-reason", "ticket OPS-1"]);
    let stdout = succeeded(&output);
    // Without a terminal: a line per workload as it ends, counted against this run's plan;
    // no INFO logging by default.
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let done: Vec<(usize, usize)> = stderr
        .lines()
        .filter(|l| l.starts_with("done "))
        .map(|l| {
            let (k, n) = l
                .rsplit_once('(')
                .unwrap()
                .1
                .trim_end_matches(')')
                .split_once('/')
                .unwrap();
            (k.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    assert!(
        stderr.contains("done Deployment/e2e-rollout-cli/web (") && done.len() >= 3,
        "{stderr}"
    );
    assert!(
        done.iter()
            .enumerate()
            .all(|(i, (k, n))| *k == i + 1 && k <= n),
        "numbered in order, never past the plan: {stderr}"
    );
    assert!(!stderr.contains(" INFO "), "{stderr}");
    for workload in [
        "Deployment/e2e-rollout-cli/web",
        "StatefulSet/e2e-rollout-cli/db",
        "DaemonSet/e2e-rollout-cli/agent",
    ] {
        assert!(
            stdout.contains(&format!("restarted  {workload}")),
            "{stdout}"
        );
    }
    let v2 = stamp_of(TRACER_V2);
    for (app, count) in [("web", 2), ("db", 1), ("agent", NODES.len())] {
        wait_pods_at(&ctx, app, count, &v2, DEADLINE).await;
    }
    // It held the rollout Lease while acting (no serve replica acts beside it) and gave it up.
    let lease = ctx
        .api::<k8s_openapi::api::coordination::v1::Lease>()
        .get("sidecar-injector-rollout")
        .await
        .unwrap();
    assert_eq!(
        lease.metadata.annotations.unwrap()["sidecar-injector/rollout-mode"],
        "cli"
    );
    assert_eq!(lease.spec.unwrap().holder_identity, None, "released");
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    let reason = template_annotation(
        &web.spec.unwrap().template.metadata,
        "injector/rollout-reason",
    )
    .unwrap();
    assert!(
        reason.starts_with("ticket OPS-1: sidecar tracer:v1"),
        "{reason}"
    );
    assert_eq!(replicaset_count(&ctx, "web").await, 2);
    assert_eq!(pods_of(&ctx, "plain").await.len(), 1);
    assert_eq!(replicaset_count(&ctx, "plain").await, 1, "plain untouched");

    // Another edit right away: every workload is in its cooldown. The run restarts nothing,
    // says how long each waits and which flag changes it, and exits 3 (not done).
    let tracer_v3 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", tracer_v3).await;
    wait_published(&ctx, &stamp_of(tracer_v3)).await;
    let output = rollout_command(ns, &["--confirm", "--canary", "0"]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(!stdout.contains("restarted  "), "{stdout}");
    assert!(
        stdout.contains(
            "waiting    Deployment/e2e-rollout-cli/web: restarted recently; cooldown ends in 10m ("
        ),
        "{stdout}"
    );
    assert!(stdout.contains("--cooldown to change"), "{stdout}");
    assert!(stderr.contains("exit status 3"), "{stderr}");
    assert_eq!(replicaset_count(&ctx, "web").await, 2, "nothing restarted");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workload_whose_pods_go_away_mid_rollout_ends_in_exactly_one_outcome() {
    let ns = "e2e-rollout-gone";
    let ctx = engine_context("rollout-gone", &[]).await;
    for name in ["doomed", "shrink"] {
        create_deployment(&ctx, name, 1, template(name, Some("tracer:v1"))).await;
    }
    for app in ["doomed", "shrink"] {
        wait_pods_at(&ctx, app, 1, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    // The new revision never becomes Ready: both workloads stay rolling once restarted.
    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    wait_published(&ctx, &stamp_of(broken)).await;
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("rollout")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args([
            "--include-namespace",
            ns,
            "--injector-namespace",
            ns,
            "--confirm",
            "--canary",
            "0",
            "--rollout-timeout",
            "5m",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deployments = ctx.api::<Deployment>();
    eventually(DEADLINE, "both restarted", || async {
        let mut patched = 0;
        for name in ["doomed", "shrink"] {
            let d = deployments.get(name).await.ok()?;
            let template = d.spec?.template.metadata;
            patched +=
                usize::from(template_annotation(&template, "injector/rollout-revision").is_some());
        }
        (patched == 2).then_some(())
    })
    .await;
    // Mid-rollout: one is deleted, the other scaled to zero.
    deployments
        .delete("doomed", &Default::default())
        .await
        .unwrap();
    deployments
        .patch(
            "shrink",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    let output = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // Each in exactly one outcome, and the summary adds up to the plan.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "restarted  Deployment/e2e-rollout-gone/shrink",
            "gone       Deployment/e2e-rollout-gone/doomed (restarted, then deleted or evicted)",
        ],
        "{stderr}"
    );
    let done: Vec<&str> = stderr.lines().filter(|l| l.contains("/2)")).collect();
    assert_eq!(done.len(), 2, "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rollout_command_selects_by_container_name_and_start_time() {
    let ns = "e2e-rollout-containers";
    let ctx = TestContext::with_deploy_rbac("rollout-containers", &rollout_args(ns, &[])).await;
    // Before any pod exists: a time no pod started before.
    let too_early = (k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::from_secs(2))
    .strftime("%Y-%m-%dT%H:%M:%SZ")
    .to_string();
    // Sidecars another injector put there: a container named istio-proxy, no request annotation.
    let meshed = |app: &str| {
        json!({
            "metadata": {"labels": {"app": app}},
            "spec": {"containers": [
                {"name": "app", "image": "example.org/app:1.0"},
                {"name": "istio-proxy", "image": "example.org/proxy:1.0"}
            ]}
        })
    };
    create_deployment(&ctx, "mesh-web", 2, meshed("mesh-web")).await;
    create_statefulset(&ctx, "mesh-db", 1, meshed("mesh-db")).await;
    create_deployment(&ctx, "plain", 1, template("plain", None)).await;
    wait_ready(&ctx, "mesh-web", 2).await;
    wait_ready(&ctx, "mesh-db", 1).await;
    wait_ready(&ctx, "plain", 1).await;
    let db_uid = pods_of(&ctx, "mesh-db").await[0].metadata.uid.clone();

    // Every pod started after this time: nothing to restart.
    let output = rollout_command(
        ns,
        &[
            "--sidecar-container-name",
            "istio-proxy",
            "--only-started-before",
            &too_early,
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("nothing to restart: no pod started before"),
        "{stdout}"
    );
    // --only-started-before selects among named containers only.
    let output = rollout_command(ns, &["--only-started-before", &too_early]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--sidecar-container-name"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The dry run lists exactly the workloads running the container.
    let output = rollout_command(
        ns,
        &[
            "--sidecar-container-name",
            "istio-proxy",
            "-o",
            "json",
            "--canary",
            "0",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    let planned = planned_workloads(&plan);
    assert_eq!(
        planned,
        ["Deployment/mesh-web", "StatefulSet/mesh-db"],
        "{plan:#}"
    );
    assert_eq!(
        replicaset_count(&ctx, "mesh-web").await,
        1,
        "a dry run changes nothing"
    );

    // --confirm restarts them, waits, exits 0.
    let output = rollout_command(
        ns,
        &["--sidecar-container-name", "istio-proxy", "--confirm"],
    );
    let stdout = succeeded(&output);
    for workload in [
        "Deployment/e2e-rollout-containers/mesh-web",
        "StatefulSet/e2e-rollout-containers/mesh-db",
    ] {
        assert!(
            stdout.contains(&format!("restarted  {workload}")),
            "{stdout}"
        );
    }
    assert_eq!(
        replicaset_count(&ctx, "mesh-web").await,
        2,
        "mesh-web rolled once"
    );
    let web = ctx.api::<Deployment>().get("mesh-web").await.unwrap();
    let web_template = &web.spec.unwrap().template.metadata;
    assert!(
        template_annotation(web_template, "injector/rollout-revision")
            .is_some_and(|r| r.starts_with("container/istio-proxy=")),
        "{web_template:?}"
    );
    let reason = template_annotation(web_template, "injector/rollout-reason").unwrap();
    assert!(
        reason.starts_with("container istio-proxy in 2 pod(s) started before"),
        "{reason}"
    );
    wait_ready(&ctx, "mesh-db", 1).await;
    assert_ne!(
        pods_of(&ctx, "mesh-db").await[0].metadata.uid,
        db_uid,
        "mesh-db's pod replaced"
    );
    assert_eq!(replicaset_count(&ctx, "plain").await, 1, "plain untouched");
    // The run kept its campaign to itself: no campaign book in the injector's status
    // ConfigMap (which holds only what the running injector publishes).
    let status = ctx
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get_opt("sidecar-injector-status")
        .await
        .unwrap();
    assert!(
        status
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .is_none_or(|d| !d.contains_key("campaigns")),
        "{status:?}"
    );
}

/// A campaign book near the 1 MiB a ConfigMap holds (a revision that failed on some 20,000
/// workloads): the run restarts nothing, says why, and exits 3.
#[tokio::test(flavor = "multi_thread")]
async fn a_status_configmap_near_its_limit_starts_no_restart() {
    let ns = "e2e-rollout-full";
    let ctx = engine_context("rollout-full", &[]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(TRACER_V1), DEADLINE).await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_published(&ctx, &v2).await;

    // The book as the engine would have left it: tracer:v1's campaign at the revision in
    // force, 20,000 workloads of 400 namespaces failed under it, every failure acknowledged
    // by `rollout --resume`.
    let (_, revision) = v2.split_once('=').unwrap();
    let mut failed = serde_json::Map::new();
    for team in 0..400 {
        let names: Vec<String> = (0..50)
            .map(|i| format!("Deployment/checkout-worker-{team:03}-{i:02}"))
            .collect();
        failed.insert(format!("team-{team:03}"), json!(names));
    }
    let book = json!({"campaigns": {"tracer:v1": {
        "revision": revision,
        "since": "2026-01-01T00:00:00Z",
        "state": "running",
        "failedWorkloads": failed,
        "acknowledgedFailures": 20_000,
    }}});
    let configmaps: Api<ConfigMap> = ctx.api();
    configmaps
        .patch(
            "sidecar-injector-status",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"campaigns": book.to_string()}})),
        )
        .await
        .expect("the API server takes the book");

    let output = rollout_command(ns, &["-o", "json"]);
    assert!(output.status.success(), "{output:?}");
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(plan["restarts"], json!([]), "{plan:#}");
    let waiting = &plan["waiting"][0];
    assert_eq!(waiting["workload"]["name"], "web", "{plan:#}");
    assert_eq!(waiting["reason"], "book-full", "{plan:#}");
    assert_eq!(waiting["sidecar"], "tracer:v1", "{plan:#}");
    assert_eq!(waiting["failedWorkloads"], 20_000, "{plan:#}");
    assert!(
        waiting["bytes"].as_u64().unwrap() > waiting["budget"].as_u64().unwrap(),
        "{plan:#}"
    );

    let output = rollout_command(ns, &["--confirm"]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("the status ConfigMap is nearly full")
            && stdout.contains("20000 failed workloads"),
        "{stdout}"
    );
    assert_eq!(replicaset_count(&ctx, "web").await, 1, "web not restarted");

    // So do `drift`, on the sidecar whose pods wait...
    let report = drift_report(&["-n", ns, "--injector-namespace", ns]);
    let tracer = sidecar_row(&report, "tracer:v1");
    assert!(
        tracer["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("the status ConfigMap is nearly full")),
        "{tracer}"
    );

    // ...and `status`, where an operator looks when nothing restarts.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("status")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(["--injector-namespace", ns])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success()
            && table.contains("warning: the status ConfigMap is nearly full")
            && table.contains("most of it for tracer:v1 (20000 failed workloads)"),
        "{table}{}",
        String::from_utf8_lossy(&status.stderr)
    );
}
