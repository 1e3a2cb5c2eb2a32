//! `sidecar-injector drift` against a real cluster.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn drift_reports_exactly_the_stale_workloads_after_a_configmap_edit() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let mut ctx = TestContext::with_deploy_rbac(
        "drift",
        &[
            "--configmap-namespace",
            "e2e-drift",
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
            "--include-namespace",
            "e2e-drift",
        ],
    )
    .await;
    let v1 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
    let configmaps: Api<ConfigMap> = ctx.api();
    configmaps
        .create(
            &PostParams::default(),
            &configmap("tracing", true, "tracer.yaml", v1),
        )
        .await
        .unwrap();
    wait_in_force(ctx.injector.as_ref().unwrap(), stamp_of(v1), true).await;
    create_deployment(&ctx, "web", 2, template("web", Some("tracer:v1"))).await;
    create_statefulset(&ctx, "db", 1, template("db", Some("tracer:v1"))).await;
    create_deployment(&ctx, "plain", 1, template("plain", Some("logger:v1"))).await;
    for (app, count) in [("web", 2), ("db", 1), ("plain", 1)] {
        eventually(DEADLINE, &format!("{app} injected"), || async {
            let pods = pods_of(&ctx, app).await;
            (pods.len() == count
                && pods
                    .iter()
                    .all(|p| annotation(p, "injector/status") == Some("injected")))
            .then_some(())
        })
        .await;
    }
    create_pod(&ctx, "bare", "tracer:v1").await.unwrap();

    // serve's gauge, kept from its watches, agrees with the one-shot report.
    let report = drift_report(&drift_args());
    let tracer = report["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tracer:v1")
        .unwrap()
        .clone();
    assert_eq!(tracer["pods"]["current"], 3, "{tracer}");
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        DEADLINE,
        "the pods gauge matches the drift report",
        || async {
            ["current", "stale", "uninjected", "unknown", "orphaned"]
                .iter()
                .all(|state| {
                    let sample =
                        format!("sidecar_injector_pods{{sidecar=\"tracer:v1\",state=\"{state}\"}}");
                    injector.metric(&sample) == tracer["pods"][state].as_f64().unwrap()
                })
                .then_some(())
        },
    )
    .await;
    // The bare pod (created last) is counted once the injector's watch has seen it.
    eventually(DEADLINE, "the bare pod counted excluded", || async {
        (injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"excluded\"}") >= 1.0)
            .then_some(())
    })
    .await;
    // A Deployment requesting a sidecar no config defines: the webhook denies its pods, so it
    // has none, yet drift shows it, from its template, with the reason.
    create_deployment(&ctx, "refused", 1, template("refused", Some("tracer:v9"))).await;
    wait_pods_denied(&ctx, "refused").await;
    assert!(pods_of(&ctx, "refused").await.is_empty());
    let report = drift_report(&drift_args());
    let refused = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "refused")
        .unwrap_or_else(|| panic!("refused not in {report:#}"));
    assert_eq!(refused["state"], "denied", "{refused}");
    assert_eq!(refused["sidecar"], "tracer:v9");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("which no config defines"),
        "{refused}"
    );
    ctx.api::<Deployment>()
        .delete("refused", &Default::default())
        .await
        .unwrap();

    // The webhook bypassed (down, failurePolicy Ignore): this workload's pod is never injected.
    ctx.stop_injector();
    create_statefulset(&ctx, "late", 1, template("late", Some("tracer:v1"))).await;
    eventually(DEADLINE, "late's pod", || async {
        (pods_of(&ctx, "late").await.len() == 1).then_some(())
    })
    .await;

    let args = drift_args();
    let state = |report: &Value, kind: &str, name: &str| -> String {
        report["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["kind"] == kind && w["namespace"] == "e2e-drift" && w["name"] == name)
            .unwrap_or_else(|| panic!("{kind}/{name} not in {report:#}"))["state"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = drift_report(&args);
    assert_eq!(state(&before, "Deployment", "web"), "current");
    assert_eq!(state(&before, "StatefulSet", "db"), "current");

    // The ConfigMap changes: exactly the tracer workloads go stale.
    let v2 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    configmaps
        .replace("tracing", &PostParams::default(), &{
            let mut cm = configmaps.get("tracing").await.unwrap();
            cm.data = Some([("tracer.yaml".to_owned(), v2.to_owned())].into());
            cm
        })
        .await
        .unwrap();
    let after = drift_report(&args);
    assert_eq!(state(&after, "Deployment", "web"), "stale");

    // kubectl-style: one namespace (listed in it alone), one sidecar, one state, and an exit
    // status for CI; --context as kubectl's.
    let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // The configs as drift_args() reads them, without its --include-namespace.
    let run = |extra: &[&str]| {
        let mut args = drift_args()[..6].to_vec();
        args.extend_from_slice(extra);
        drift_command(checkout, &args)
    };
    let narrowed = run(&[
        "-n",
        "e2e-drift",
        "--sidecar",
        "tracer:v1",
        "--state",
        "stale",
        "--exit-code",
    ]);
    assert_eq!(
        narrowed.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&narrowed.stderr)
    );
    let report: Value = serde_json::from_slice(&narrowed.stdout).unwrap();
    let rows = report["workloads"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|w| w["namespace"] == "e2e-drift"
            && w["sidecar"] == "tracer:v1"
            && w["state"] == "stale"),
        "{report:#}"
    );
    let calm = run(&["-n", "e2e-drift", "--state", "current", "--exit-code"]);
    assert_eq!(
        calm.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&calm.stderr)
    );
    // A misspelt --sidecar is called out, not answered with an empty report alone.
    let misspelt = run(&["-n", "e2e-drift", "--sidecar", "tracr:v1"]);
    assert!(
        misspelt.status.success()
            && String::from_utf8_lossy(&misspelt.stderr)
                .contains("--sidecar tracr:v1: no config defines it and no listed pod requests it"),
        "{}",
        String::from_utf8_lossy(&misspelt.stderr)
    );
    let unknown_context = run(&["--context", "no-such-context"]);
    assert!(!unknown_context.status.success());
    assert!(
        String::from_utf8_lossy(&unknown_context.stderr).contains("--context")
            || String::from_utf8_lossy(&unknown_context.stderr).contains("no-such-context"),
        "{}",
        String::from_utf8_lossy(&unknown_context.stderr)
    );
    assert_eq!(state(&after, "StatefulSet", "db"), "stale");
    assert_eq!(
        state(&after, "Deployment", "plain"),
        "current",
        "logger:v1 did not change"
    );
    assert_eq!(state(&after, "StatefulSet", "late"), "uninjected");
    assert_eq!(state(&after, "Pod", "bare"), "excluded");
    let tracer = after["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tracer:v1")
        .unwrap();
    let v2_revision = stamp_of(v2);
    assert_eq!(tracer["revision"], v2_revision.split('=').nth(1).unwrap());
    // Other tests' tracer pods, in namespaces this report does not include, count as excluded.
    let pods = &tracer["pods"];
    assert_eq!(
        (
            &pods["stale"],
            &pods["uninjected"],
            &pods["current"],
            &pods["unknown"],
            &pods["orphaned"]
        ),
        (&json!(3), &json!(1), &json!(0), &json!(0), &json!(0))
    );
    assert!(
        pods["excluded"].as_u64().unwrap() >= 1,
        "the bare pod at least: {pods}"
    );

    // A running injector (here with --rollout=off) publishes what it injects, with who and
    // when: started after the edit, v2. A drift run that reads no configs at all judges by it.
    // (The one stopped above withdrew its publication on the way out.)
    let _replica = ctx.start_replica_with(&[]);
    let v2_revision = v2_revision.split('=').nth(1).unwrap().to_owned();
    let published_in = |status: &ConfigMap| -> Vec<String> {
        let injectors: Value = status
            .data
            .as_ref()
            .and_then(|d| d.get("injectors"))
            .map(|t| serde_json::from_str(t).unwrap())
            .unwrap_or(json!({}));
        injectors
            .as_object()
            .unwrap()
            .values()
            .map(|p| {
                p["revisions"]["tracer:v1"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    eventually(DEADLINE, "the injector publishes v2", || async {
        let status = configmaps.get_opt("sidecar-injector-status").await.ok()??;
        published_in(&status).contains(&v2_revision).then_some(())
    })
    .await;
    let only_published = [
        "--include-namespace",
        "e2e-drift",
        "--injector-namespace",
        "e2e-drift",
    ];
    let elsewhere = tempfile::tempdir().unwrap();
    // Outside a checkout (no config/ directory, no ConfigMap flags): not an error.
    let published = drift_report_from(elsewhere.path(), &only_published);
    assert_eq!(
        state(&published, "Deployment", "web"),
        "stale",
        "judged by the published revision"
    );
    let tracer = published["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tracer:v1")
        .unwrap();
    assert_eq!(tracer["revision"], v2_revision.as_str());

    // There, the configs read are the ConfigMaps deploy/ installs (labelled
    // sidecar-injector.io/config=true in --injector-namespace), not none: judged by them, the
    // tracer row has their revision.
    let v3 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "deployed-sidecars",
                             "labels": {"sidecar-injector.io/config": "true"}},
                "data": {"tracer.yaml": v3}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut from_configs = only_published.to_vec();
    from_configs.extend(["--revisions-from", "configs"]);
    let output = drift_command(elsewhere.path(), &from_configs);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("no config/ directory here: reading the sidecar ConfigMaps of e2e-drift labelled sidecar-injector.io/config=true"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let v3_revision = stamp_of(v3).split('=').nth(1).unwrap().to_owned();
    assert_eq!(
        sidecar_row(&report, "tracer:v1")["revision"],
        v3_revision.as_str(),
        "{report:#}"
    );
    // `inject` there injects what those ConfigMaps say (as istioctl kube-inject reads the
    // mesh's), instead of failing on the missing config/ directory.
    let (stamped, stderr) = inject_revision(
        elsewhere.path(),
        "tracer:v1",
        &["--injector-namespace", "e2e-drift"],
    )
    .unwrap_or_else(|stderr| panic!("inject failed: {stderr}"));
    assert_eq!(stamped, stamp_of(v3), "{stderr}");
    assert!(
        stderr.contains("no config/ directory here: reading the sidecar ConfigMaps of e2e-drift labelled sidecar-injector.io/config=true"),
        "{stderr}"
    );
    // The running replica injects v2 (it reads other ConfigMaps): the preview says where it
    // differs from what the webhook does, naming both revisions.
    let differs = |stderr: &str| {
        stderr.contains(&format!(
            "tracer:v1: the config read here is revision {v3_revision}, but the running injector(s) "
        )) && stderr.contains(&format!(" inject revision {v2_revision}: the webhook has not loaded"))
    };
    assert!(differs(&stderr), "{stderr}");
    // So does `explain -f` (the manifest `inject_revision` wrote there).
    let explained = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args([
            "explain",
            "-f",
            "inject-me.yaml",
            "--injector-namespace",
            "e2e-drift",
        ])
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.status.success()
            && page.contains(&format!(
                "config tracer:v1       revision {v3_revision} from ConfigMap e2e-drift/deployed-sidecars"
            ))
            && differs(&String::from_utf8_lossy(&explained.stderr)),
        "{page}{}",
        String::from_utf8_lossy(&explained.stderr)
    );
    // Labels that select no config are said, not silently read as no sidecar at all.
    from_configs.extend(["--configmap-labels", "nothing=here"]);
    let output = drift_command(elsewhere.path(), &from_configs);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success()
            && stderr
                .contains("no sidecar config in the ConfigMaps of e2e-drift labelled nothing=here"),
        "{stderr}"
    );
    configmaps
        .delete("deployed-sidecars", &Default::default())
        .await
        .unwrap();

    // Another replica that publishes v1 (say, one that has not seen the edit) disagrees: the
    // report says so in one line and judges by the configs it reads.
    let v1_revision = stamp_of(v1).split('=').nth(1).unwrap().to_owned();
    // A read-modify-write at the version read, retried when the injector's own heartbeat
    // wrote in between (409), as every writer of the status ConfigMap does.
    eventually(
        DEADLINE,
        "the lagging replica's publication written",
        || async {
            let mut status = configmaps.get("sidecar-injector-status").await.ok()?;
            let mut injectors: Value =
                serde_json::from_str(&status.data.as_ref()?["injectors"]).ok()?;
            injectors["lagging-replica"] = json!({
                "revisions": {"tracer:v1": v1_revision},
                "at": k8s_openapi::jiff::Timestamp::now().to_string(),
            });
            status
                .data
                .as_mut()?
                .insert("injectors".into(), injectors.to_string());
            configmaps
                .replace("sidecar-injector-status", &PostParams::default(), &status)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    let mut args = vec!["--injector-namespace", "e2e-drift"];
    args.extend(drift_args());
    let output = drift_command(checkout, &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("running injectors disagree (")
            && stderr.contains("using the configs read here"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(state(&report, "Deployment", "web"), "stale");
}

/// A replica whose `--injector-namespace` does not exist (not created yet, or misspelt) says so
/// in the API server's words, tries again ever less often instead of every second, and
/// publishes as soon as a retry finds the namespace.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_injector_namespace_is_said_plainly_retried_ever_less_often_then_published() {
    use k8s_openapi::api::core::v1::Namespace;
    let absent = "e2e-publish-later-system";
    let kubeconfig = support::cluster::control_plane()
        .kubeconfig
        .to_str()
        .unwrap()
        .to_owned();
    let ctx = TestContext::new(
        "publish-later",
        &[
            "--kubeconfig",
            &kubeconfig,
            "--injector-namespace",
            absent,
            "--publish-interval",
            "4s",
        ],
    )
    .await;
    let seen = wait_failures(
        ctx.injector.as_ref().unwrap(),
        4,
        |message| message.starts_with("cannot publish the revisions in force"),
        &format!("namespaces \"{absent}\" not found (NotFound, 404)"),
        // Waits of 1 s, 2 s and 4 s (the heartbeat caps them): 7 s from the first failure to
        // the fourth. Retrying every second, it took 3 s.
        Duration::from_millis(6500),
    )
    .await;
    assert!(
        seen[2].1.contains("retrying in 4s"),
        "the third failure says when it retries: {}",
        seen[2].1
    );

    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    create(&namespaces, json!({"metadata": {"name": absent}})).await;
    wait_published_in(&ctx, absent, &logger_v1_stamp()).await;
    namespaces
        .delete(absent, &Default::default())
        .await
        .expect("the namespace deleted");
}

/// A replica renews its publication onto the status ConfigMap its watch keeps: each heartbeat
/// is one update, not a read and an update (at 50,000 pods, the requests a campaign pays by
/// time are what keeps it above 2.5 a restart).
#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_is_one_update_with_no_read() {
    // With the engine leading, as a replica runs: its writes of the book are there too.
    let ctx = engine_context(
        "heartbeat-requests",
        &["--rollout=auto", "--publish-interval", "1s"],
    )
    .await;
    wait_published(&ctx, &stamp_of(TRACER_V1)).await;
    let injector = ctx.injector.as_ref().unwrap();
    let configmaps = |verb: &str| {
        support::bench::samples(injector, "sidecar_injector_kube_requests_total")
            .get(&format!("{{verb=\"{verb}\",resource=\"configmaps\"}}"))
            .copied()
            .unwrap_or(0.0)
    };
    let (gets, updates) = (configmaps("get"), configmaps("update"));
    eventually(DEADLINE, "three more heartbeats", || async {
        (configmaps("update") >= updates + 3.0).then_some(())
    })
    .await;
    assert_eq!(
        configmaps("get"),
        gets,
        "the heartbeats read the status ConfigMap ({updates} updates before, {} after)",
        configmaps("update")
    );
}

/// Under a ClusterRole like Tumblr's (ConfigMaps only), the drift index's watches are refused.
/// Each refusal is logged once, in the API server's words, and retried ever less often: kube's
/// watcher sends `Init` before each list, which reset its backoff and kept the retries at about
/// a second.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_the_rbac_refuses_is_retried_ever_less_often_and_said_once() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let ctx = TestContext::new("refused-watch", &[]).await;
    let account = "tumblr-like";
    create(
        &ctx.api::<ServiceAccount>(),
        json!({"metadata": {"name": account}}),
    )
    .await;
    let role = "e2e-refused-watch-configmaps-only";
    create(
        &Api::<ClusterRole>::all(ctx.client.clone()),
        json!({
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
        }),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(ctx.client.clone()),
        json!({
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ctx.namespace}]
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::cluster::service_account_kubeconfig(
        &ctx.client,
        &ctx.namespace,
        account,
        dir.path(),
    )
    .await;
    let refused = ctx.start_replica_with(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--rollout=off",
    ]);
    wait_failures(
        &refused,
        5,
        |message| {
            message.starts_with("drift watch failed") && message.contains("pods is forbidden")
        },
        "(Forbidden, 403)",
        // Waits of at least 0.8, 1.6, 3.2 and 6.4 s: 12 s from the first refusal to the fifth.
        // Reset by each `Init`, they stayed between 0.8 and 1.6 s: at most 6.4 s.
        Duration::from_secs(9),
    )
    .await;
    assert!(
        !refused
            .logs()
            .iter()
            .any(|line| line.contains("\"target\":\"kube_runtime::watcher\"")),
        "kube's own warning (with the Status dump) repeats ours"
    );
}

/// A team whose rights stop at its namespace (kubectl's `view` there, nothing in the injector's
/// namespace) is told what it lacks and who can grant it; once a platform admin applies
/// deploy/components/status-readers, its `drift -n TEAM` and `status` work, judged by the
/// revisions the running injector publishes.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_with_rights_in_its_namespace_alone_reads_drift_once_the_status_readers_component_is_applied()
 {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let injector_namespace = "e2e-readers";
    let team = "e2e-readers-team";
    let ctx = engine_context("readers", &[]).await;
    // A second sidecar whose restarts are left to a person: the team cannot read its config,
    // only what the injector publishes of it.
    const LEDGER_MANUAL: &str = "name: ledger:v1\ncontainers: [{name: ledger, image: 'ledger:1'}]\nrollout: {policy: manual}\n";
    put_config(&ctx, "ledger", "ledger.yaml", LEDGER_MANUAL).await;
    let stamp = stamp_of(TRACER_V1);
    wait_published(&ctx, &stamp).await;
    wait_published(&ctx, &stamp_of(LEDGER_MANUAL)).await;
    let namespaces = Api::<Namespace>::all(ctx.client.clone());
    create(&namespaces, json!({"metadata": {"name": team}})).await;
    for (app, sidecar) in [("web", "tracer:v1"), ("batch", "ledger:v1")] {
        create(
            &Api::<Deployment>::namespaced(ctx.client.clone(), team),
            json!({"metadata": {"name": app}, "spec": {
                "replicas": 1, "selector": {"matchLabels": {"app": app}},
                "template": template(app, Some(sidecar))}}),
        )
        .await;
        eventually(DEADLINE, &format!("{app}'s pod"), || async {
            let pods = pods_in(&Api::namespaced(ctx.client.clone(), team), app).await;
            (!pods.is_empty()).then_some(())
        })
        .await;
    }
    create(
        &Api::<ServiceAccount>::namespaced(ctx.client.clone(), team),
        json!({"metadata": {"name": "dev"}}),
    )
    .await;
    create(
        &Api::<RoleBinding>::namespaced(ctx.client.clone(), team),
        json!({"metadata": {"name": "dev-view"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": team}]}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig =
        support::cluster::service_account_kubeconfig(&ctx.client, team, "dev", dir.path()).await;
    let as_dev = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--injector-namespace", injector_namespace])
            .current_dir(dir.path())
            .output()
            .unwrap()
    };

    // Refused: the error says what and who can grant it, in the API server's words.
    let refused = as_dev(&["drift", "-n", team]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("is refused to you: a platform admin can let every user read it (deploy/components/status-readers)")
            && stderr.contains("(Forbidden, 403)"),
        "{stderr}"
    );
    let refused = as_dev(&["status"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("the injector's status ConfigMap and rollout Lease are refused to you: a platform admin can let every user read them (deploy/components/status-readers)")
            && stderr.contains("(Forbidden, 403)"),
        "{stderr}"
    );
    // Judged by configs it can read instead: it has none, and says so rather than report
    // every pod orphaned.
    let nothing = as_dev(&["drift", "-n", team, "--revisions-from", "configs"]);
    let stderr = String::from_utf8_lossy(&nothing.stderr);
    assert!(
        !nothing.status.success() && stderr.contains("there is nothing to judge the pods by"),
        "{stderr}"
    );

    // The component, as deploy/overlays/status-readers renders it (moved into the injector's
    // namespace): a Role and its RoleBinding.
    let granted: Vec<Value> = kustomize("deploy/overlays/status-readers")
        .into_iter()
        .filter(|d| d["metadata"]["name"] == "sidecar-injector-status-reader")
        .collect();
    assert_eq!(granted.len(), 2, "{granted:#?}");
    for mut object in granted {
        object["metadata"]["namespace"] = json!(injector_namespace);
        let client = ctx.client.clone();
        match object["kind"].as_str().unwrap() {
            "Role" => create(&Api::<Role>::namespaced(client, injector_namespace), object).await,
            "RoleBinding" => {
                create(
                    &Api::<RoleBinding>::namespaced(client, injector_namespace),
                    object,
                )
                .await;
            }
            other => panic!("the component holds a {other}"),
        }
    }
    let report = eventually(DEADLINE, "drift as the team, granted", || async {
        let output = as_dev(&["drift", "-n", team, "-o", "json"]);
        output.status.success().then_some(())?;
        serde_json::from_slice::<Value>(&output.stdout).ok()
    })
    .await;
    let revision = stamp.split_once('=').unwrap().1;
    assert_eq!(
        sidecar_row(&report, "tracer:v1")["revision"],
        revision,
        "judged by the published revision: {report:#}"
    );
    let names: Vec<&Value> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["name"])
        .collect();
    assert_eq!(names, ["batch", "web"], "{report:#}");
    // Its rollout is left to a person, as the publication says: the team learns that nothing
    // restarts its pods on its own.
    assert_eq!(
        sidecar_row(&report, "ledger:v1")["note"],
        "rollout policy manual: the engine leaves its restarts to `sidecar-injector rollout`",
        "{report:#}"
    );
    assert_eq!(sidecar_row(&report, "tracer:v1")["note"], Value::Null);
    // The publication stale (as when the injector is down): the configs it cannot read are no
    // better guess, so the stale publication judges, and stderr says so; never every pod
    // orphaned. Publications are stamped to the second: stale past 1ms once a second old.
    let fresh = report;
    let report = eventually(DEADLINE, "drift as the team, publication stale", || async {
        let stale = as_dev(&[
            "drift",
            "-n",
            team,
            "-o",
            "json",
            "--published-max-age",
            "1ms",
        ]);
        let stderr = String::from_utf8_lossy(&stale.stderr);
        assert!(stale.status.success(), "{stderr}");
        if stderr.contains("published them (0s ago)") {
            return None;
        }
        assert!(
            stderr.contains("the sidecar configs cannot be read here: revisions as ")
                && stderr.contains("though stale (older than 1ms: is the injector running?)"),
            "{stderr}"
        );
        serde_json::from_slice::<Value>(&stale.stdout).ok()
    })
    .await;
    assert_eq!(
        sidecar_row(&report, "tracer:v1")["revision"],
        revision,
        "{report:#}"
    );
    assert_eq!(report["workloads"], fresh["workloads"], "as when fresh");
    // `explain` as the team: the webhook's decision turns on configs it cannot read, so it is
    // unknown here, with what the running injector publishes of the sidecar (never "no config
    // defines it", which would send the team after a config that exists).
    let explained = as_dev(&["explain", "deploy/web", "-n", team]);
    let stdout = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.status.success(),
        "{}",
        String::from_utf8_lossy(&explained.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "=>  unknown here: the sidecar configs cannot be read (the ConfigMaps of {injector_namespace} labelled sidecar-injector.io/config=true: "
        )) && stdout.contains(&format!(
            "the running injectors publish tracer:v1 (revision {revision}), which the webhook injects unless the pod conflicts with its config"
        )) && stdout.contains(&format!(
            "config tracer:v1       revision {revision}, as the running injectors publish it"
        )),
        "{stdout}"
    );
    // Its Rollout cannot be planned by a team (the plan lists every namespace): said at once,
    // the rest of the answer kept.
    assert!(
        stdout.contains("not planned here: the rollout plan needs the pods, ReplicaSets and workloads of every namespace, and listing them is refused to you: ")
            && stdout.contains("(Forbidden, 403)"),
        "{stdout}"
    );
    let explained = as_dev(&["explain", "deploy/batch", "-n", team]);
    let stdout = String::from_utf8_lossy(&explained.stdout);
    let ledger = stamp_of(LEDGER_MANUAL);
    assert!(
        stdout.contains(&format!(
            "config ledger:v1       revision {}, as the running injectors publish it (rollout: manual)",
            ledger.split_once('=').unwrap().1
        )),
        "{stdout}"
    );
    let status = as_dev(&["status"]);
    assert!(
        status.status.success()
            && String::from_utf8_lossy(&status.stdout)
                .contains(" (rollout manual: ledger:v1, metrics-agent:v1)"),
        "{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    // Allowed to list the cluster (a role of the platform's own, still without the sidecar
    // ConfigMaps), the team's explain plans the Rollout, and leaves the workload of a manual
    // sidecar to a person as the publication says (its pod needs a restart: the test's webhook
    // does not reach the team's namespace, so it is uninjected).
    let lister = "e2e-readers-lister";
    create(
        &Api::<ClusterRole>::all(ctx.client.clone()),
        json!({"metadata": {"name": lister}, "rules": [
            {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets", "daemonsets"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
             "verbs": ["get", "list", "watch"]}]}),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(ctx.client.clone()),
        json!({"metadata": {"name": lister},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": lister},
               "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": team}]}),
    )
    .await;
    let planned = eventually(DEADLINE, "the team's explain plans the Rollout", || async {
        let explained = as_dev(&["explain", "deploy/batch", "-n", team]);
        let stdout = String::from_utf8_lossy(&explained.stdout).into_owned();
        (explained.status.success() && !stdout.contains("not planned here")).then_some(stdout)
    })
    .await;
    assert!(
        planned.contains(
            "waits: ledger:v1 has rollout policy manual (run `sidecar-injector rollout`)"
        ),
        "{planned}"
    );
    namespaces.delete(team, &Default::default()).await.unwrap();
    Api::<ClusterRoleBinding>::all(ctx.client.clone())
        .delete(lister, &Default::default())
        .await
        .unwrap();
    Api::<ClusterRole>::all(ctx.client.clone())
        .delete(lister, &Default::default())
        .await
        .unwrap();
}
