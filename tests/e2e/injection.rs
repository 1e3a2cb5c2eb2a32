//! Injection through the real apiserver: controllers, denials, failurePolicy Ignore, the test kubelet.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn controllers_create_injected_pods_through_the_real_webhook() {
    let ctx = TestContext::new("workloads", &[]).await;
    let stamp = logger_v1_stamp();
    create_deployment(&ctx, "web", 2, template("web", Some("logger:v1"))).await;
    create_statefulset(&ctx, "db", 2, template("db", Some("logger:v1"))).await;
    create_daemonset(&ctx, "agent", template("agent", Some("logger:v1"))).await;
    create(
        &ctx.api::<Pod>(),
        json!({
            "metadata": {"name": "plain", "labels": {"app": "plain"}},
            "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
        }),
    )
    .await;

    // The StatefulSet's second pod only appears once the first is Ready: the kubelet is in play.
    for (app, expected) in [("web", 2), ("db", 2), ("agent", NODES.len())] {
        let pods = eventually(DEADLINE, &format!("{expected} {app} pods"), || async {
            let pods = pods_of(&ctx, app).await;
            (pods.len() == expected).then_some(pods)
        })
        .await;
        for pod in &pods {
            let name = pod.metadata.name.as_deref().unwrap();
            assert_eq!(container_names(pod), ["app", "log-shipper"], "{name}");
            assert_eq!(
                annotation(pod, "injector/status"),
                Some("injected"),
                "{name}"
            );
            assert_eq!(
                annotation(pod, "injector/revision"),
                Some(stamp.as_str()),
                "{name}"
            );
            let env = pod.spec.as_ref().unwrap().containers[0]
                .env
                .clone()
                .unwrap_or_default();
            assert!(
                env.iter().any(|e| e.name == "LOG_SHIPPER_ENDPOINT"),
                "{name}: env reaches the app"
            );
        }
    }
    let plain = ctx.api::<Pod>().get("plain").await.unwrap();
    assert_eq!(
        container_names(&plain),
        ["app"],
        "a pod without the annotation is untouched"
    );
    assert_eq!(annotation(&plain, "injector/status"), None);
    assert!(
        ctx.injector
            .as_ref()
            .unwrap()
            .metric("sidecar_injector_injections_total{sidecar=\"logger:v1\",result=\"injected\"}")
            >= 6.0,
        "the injector counted the injections"
    );

    // The apiserver's own view of the calls to our webhook, kept as a report of the run.
    let metrics = ctx
        .client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .expect("apiserver /metrics");
    let ours: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_admission_webhook_admission_duration_seconds"))
        .filter(|l| l.contains("name=\"sidecar-injector.injector.dev\""))
        .collect();
    let count: f64 = ours
        .iter()
        .filter(|l| l.starts_with("apiserver_admission_webhook_admission_duration_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        count >= 7.0,
        "the apiserver called the webhook for every pod:\n{}",
        ours.join("\n")
    );
    let report =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("apiserver-webhook-metrics.txt");
    std::fs::write(&report, ours.join("\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_sidecar_is_denied_and_the_replicaset_says_why() {
    let ctx = TestContext::new("denied", &[]).await;
    create_deployment(&ctx, "typo", 1, template("typo", Some("logger:v9"))).await;
    let message = eventually(
        DEADLINE,
        "a FailedCreate event on the ReplicaSet",
        || async {
            let events: Api<Event> = ctx.api();
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("FailedCreate")
                        && e.involved_object.kind.as_deref() == Some("ReplicaSet")
                })
                .and_then(|e| e.message)
        },
    )
    .await;
    assert!(
        message.contains(
            r#"denied the request: sidecar "logger:v9" not found; known: logger:v1, logger:v2"#
        ),
        "{message}"
    );
    assert!(pods_of(&ctx, "typo").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_injector_down_failure_policy_ignore_creates_the_pod_uninjected() {
    let mut ctx = TestContext::new("down", &[]).await;
    ctx.stop_injector();
    create(&ctx.api::<Pod>(), json!({
        "metadata": {"name": "while-down", "labels": {"app": "while-down"}, "annotations": {"injector/request": "logger:v1"}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    })).await;
    let pod = ctx.api::<Pod>().get("while-down").await.unwrap();
    assert_eq!(container_names(&pod), ["app"]);
    assert_eq!(
        annotation(&pod, "injector/request"),
        Some("logger:v1"),
        "it still asks: drift will see it"
    );
    assert_eq!(annotation(&pod, "injector/status"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_test_kubelet_never_readies_a_broken_image() {
    let ctx = TestContext::new("kubelet", &[]).await;
    for (name, image) in [
        ("good", "example.org/app:1.0"),
        ("bad", "example.org/app:broken"),
    ] {
        create(
            &ctx.api::<Pod>(),
            json!({
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            }),
        )
        .await;
    }
    let condition = |pod: &Pod, kind: &str| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == kind))
            .map(|c| c.status.clone())
    };
    for (name, ready) in [("good", "True"), ("bad", "False")] {
        let pod = eventually(DEADLINE, &format!("{name} is Running"), || async {
            let pod = ctx.api::<Pod>().get(name).await.ok()?;
            (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
        })
        .await;
        assert_eq!(condition(&pod, "Ready").as_deref(), Some(ready), "{name}");
        let statuses = pod
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .clone()
            .unwrap();
        assert_eq!(statuses[0].ready, ready == "True", "{name}");
    }
}

/// Every review the injector answered, whatever its result.
fn reviews(ctx: &TestContext) -> f64 {
    let injector = ctx.injector.as_ref().unwrap();
    ["injected", "skipped", "denied", "not_a_pod", "invalid_pod"]
        .iter()
        .map(|result| {
            injector.metric(&format!(
                "sidecar_injector_admission_requests_total{{result=\"{result}\"}}"
            ))
        })
        .sum()
}

async fn plain_pod(ctx: &TestContext, name: &str) -> Pod {
    ctx.api::<Pod>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": "plain"}},
                "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
            }))
            .unwrap(),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_matchconditions_overlay_keeps_pods_that_request_nothing_from_the_webhook() {
    let ctx = TestContext::new("matchconditions", &[]).await;
    // Without conditions every pod of the namespace is reviewed, requesting or not.
    let before = reviews(&ctx);
    for name in ["plain-0", "plain-1"] {
        plain_pod(&ctx, name).await;
    }
    assert_eq!(reviews(&ctx) - before, 2.0, "both plain pods reviewed");

    // The overlay's conditions on this test's webhook: the API server itself evaluates them.
    let overlay = support::cluster::kustomize("deploy/overlays/matchconditions");
    let conditions = support::cluster::of_kind(&overlay, "MutatingWebhookConfiguration")
        ["webhooks"][0]["matchConditions"]
        .clone();
    assert!(conditions.as_array().is_some_and(|c| !c.is_empty()));
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(ctx.client.clone());
    let name = format!("sidecar-injector-{}", ctx.namespace);
    let mut configuration = configurations.get(&name).await.unwrap();
    let mut webhook = serde_json::to_value(&configuration.webhooks.as_ref().unwrap()[0]).unwrap();
    webhook["matchConditions"] = conditions;
    configuration.webhooks = Some(vec![serde_json::from_value(webhook).unwrap()]);
    configurations
        .replace(&name, &PostParams::default(), &configuration)
        .await
        .unwrap();
    // The API server's view of webhook configurations lags a write: a server-side dry run of a
    // plain pod (which a webhook is called for, as for a real one) reaches the webhook until
    // the conditions are in force.
    let pods = ctx.api::<Pod>();
    eventually(DEADLINE, "the matchConditions in force", || async {
        let before = reviews(&ctx);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
        }))
        .unwrap();
        pods.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
        .ok()?;
        (reviews(&ctx) == before).then_some(())
    })
    .await;
    let before = reviews(&ctx);
    for name in ["plain-2", "plain-3", "plain-4"] {
        let pod = plain_pod(&ctx, name).await;
        assert_eq!(container_names(&pod), ["app"]);
    }
    assert_eq!(
        reviews(&ctx),
        before,
        "no pod that requests nothing reached the webhook"
    );
    // Requesting pods still do, and are injected (a pod may be reviewed more than once:
    // `reinvocationPolicy: IfNeeded` calls the webhook again after later plugins changed it).
    for name in ["asks-0", "asks-1"] {
        let pod = create_pod(&ctx, name, "logger:v1").await.unwrap();
        assert_eq!(container_names(&pod), ["app", "log-shipper"], "{name}");
    }
    assert!(
        reviews(&ctx) >= before + 2.0,
        "the requesting pods reached it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_native_sidecar_keeps_its_restart_policy_through_admission() {
    let namespace = "e2e-native-sidecar";
    let ctx = TestContext::with_deploy_rbac(
        "native-sidecar",
        &[
            "--configmap-namespace",
            namespace,
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
        ],
    )
    .await;
    let config = "name: proxy:v1\ninitContainers: [{name: proxy, image: 'proxy:1', restartPolicy: Always}]\n";
    put_config(&ctx, "proxy", "proxy.yaml", config).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_in_force(injector, stamp_of(config), true).await;
    let created = create_pod(&ctx, "meshed", "proxy:v1").await.unwrap();
    // What the API server stored, read back: the field survived defaulting and validation.
    let stored = ctx
        .api::<Pod>()
        .get(created.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    let init = stored.spec.unwrap().init_containers.unwrap_or_default();
    let proxy = init
        .iter()
        .find(|c| c.name == "proxy")
        .expect("the proxy injected as an init container");
    assert_eq!(proxy.restart_policy.as_deref(), Some("Always"));
    assert_eq!(annotation(&created, "injector/status"), Some("injected"));
}

/// `sidecar-injector check ARGS` against the shared control plane.
fn check_command(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("check")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(args)
        .output()
        .expect("check runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn check_proves_the_webhook_injects_and_says_why_when_it_does_not() {
    let ctx = TestContext::new("check", &[]).await;
    let ns = ctx.namespace.as_str();
    let stamp = logger_v1_stamp();
    let revision = stamp.strip_prefix("logger:v1=").unwrap();
    let passed = check_command(&["-n", ns, "--request", "logger:v1", "--wait", "60s"]);
    let stdout = String::from_utf8_lossy(&passed.stdout);
    assert!(
        passed.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&passed.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "logger:v1: injected, revision {revision}, into a dry-run pod in namespace {ns}"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("containers as the API server answered: app, log-shipper"),
        "{stdout}"
    );
    let left = ctx.api::<Pod>().list(&Default::default()).await.unwrap();
    assert!(left.items.is_empty(), "a dry run creates no pod");

    // No injector selects the namespace: exit status 1, and the reason.
    let unreached = check_command(&["-n", "default", "--request", "logger:v1"]);
    let stderr = String::from_utf8_lossy(&unreached.stderr);
    assert_eq!(unreached.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("logger:v1: not injected into a dry-run pod in namespace default"),
        "{stderr}"
    );
    assert!(stderr.contains("no injector reached the pod"), "{stderr}");

    // A sidecar the injector has no config for: the webhook's denial, as the API server said it.
    let denied = check_command(&["-n", ns, "--request", "tracer:v9"]);
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert_eq!(denied.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the API server refused the dry-run pod in namespace {ns}"
        )) && stderr.contains("tracer:v9"),
        "{stderr}"
    );
}
