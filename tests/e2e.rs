//! End-to-end: the real `serve` binary behind a real MutatingWebhookConfiguration of a real
//! kube-apiserver (v1.20.2, built from Debian's source package by testbed/build.sh), with the
//! real Deployment, ReplicaSet, StatefulSet and DaemonSet controllers creating the pods. No
//! container runs: a test kubelet marks pods Ready.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::cluster::{TestContext, configmap, kustomize, of_kind, put_config, rollout_args};
use support::injector::eventually;
use support::kubelet::NODES;

const DEADLINE: Duration = Duration::from_secs(60);

/// `logger:v1=REV` as the shipped config stamps it, computed by the library itself.
fn logger_v1_stamp() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let report = sidecar_injector::sources::directory::load_config_directory(&dir).unwrap();
    report
        .sidecar_set()
        .get(&"logger:v1".parse().unwrap())
        .expect("logger:v1 ships in config/")
        .stamp
        .clone()
}

fn template(app: &str, request: Option<&str>) -> Value {
    let mut annotations = json!({});
    if let Some(request) = request {
        annotations["injector/request"] = json!(request);
    }
    json!({
        "metadata": {"labels": {"app": app}, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    })
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("created");
}

/// A Deployment of `replicas` pods made from `template`, selected by its `app` label.
async fn create_deployment(ctx: &TestContext, name: &str, replicas: i32, template: Value) {
    create(&ctx.api::<Deployment>(), json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}
    }))
    .await;
}

/// A StatefulSet (its service named after it) of `replicas` pods made from `template`.
async fn create_statefulset(ctx: &TestContext, name: &str, replicas: i32, template: Value) {
    create(
        &ctx.api::<StatefulSet>(),
        json!({
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}}, "template": template}
        }),
    )
    .await;
}

/// A DaemonSet (a pod per test node) made from `template`.
async fn create_daemonset(ctx: &TestContext, name: &str, template: Value) {
    create(
        &ctx.api::<DaemonSet>(),
        json!({
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template}
        }),
    )
    .await;
}

async fn pods_of(ctx: &TestContext, app: &str) -> Vec<Pod> {
    ctx.api::<Pod>()
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("pods listed")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `Kind/name` of every workload a `rollout -o json` plan restarts or holds, sorted.
fn planned_workloads(plan: &Value) -> Vec<String> {
    let mut planned: Vec<String> = plan["restarts"]
        .as_array()
        .unwrap()
        .iter()
        .chain(plan["waiting"].as_array().unwrap())
        .map(|r| {
            format!(
                "{}/{}",
                r["workload"]["kind"].as_str().unwrap(),
                r["workload"]["name"].as_str().unwrap()
            )
        })
        .collect();
    planned.sort();
    planned
}

fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

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

/// Waits until the injector's latest "sidecar configs in force" line does (or, with
/// `present` false, no longer does) mention `text`.
async fn wait_in_force(injector: &support::injector::Injector, text: String, present: bool) {
    let what = format!("{text} {}", if present { "in force" } else { "gone" });
    eventually(DEADLINE, &what, || async {
        let last = injector
            .logs()
            .into_iter()
            .rev()
            .find(|l| l.contains("sidecar configs in force"))
            .unwrap_or_default();
        (last.contains(&text) == present).then_some(())
    })
    .await
}

/// The `injector/revision` item a config's text would stamp, computed by the library.
fn stamp_of(text: &str) -> String {
    let config = sidecar_injector::config::parse_config("test", text)
        .unwrap()
        .config;
    sidecar_injector::config::LoadedSidecar::new(config, "test").stamp
}

async fn create_pod(ctx: &TestContext, name: &str, request: &str) -> Result<Pod, kube::Error> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}, "annotations": {"injector/request": request}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    }))
    .unwrap();
    ctx.api::<Pod>().create(&PostParams::default(), &pod).await
}

#[tokio::test(flavor = "multi_thread")]
async fn configmap_configs_are_served_edited_guarded_and_removed() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ctx = TestContext::with_deploy_rbac(
        "configmaps",
        &[
            "--configmap-namespace",
            "e2e-configmaps",
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
        ],
    )
    .await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        DEADLINE,
        "/ready after the first ConfigMap list",
        || async { (injector.lifecycle_get("/ready").0 == 200).then_some(()) },
    )
    .await;
    let in_force = |stamp: String| wait_in_force(injector, stamp, true);
    let configmaps: Api<ConfigMap> = ctx.api();
    let v1 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
    configmaps
        .create(
            &PostParams::default(),
            &configmap("tracing", true, "tracer.yaml", v1),
        )
        .await
        .unwrap();
    in_force(stamp_of(v1)).await;
    let pod = create_pod(&ctx, "first", "tracer:v1")
        .await
        .expect("injected from the ConfigMap");
    assert_eq!(container_names(&pod), ["app", "tracer"]);
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(stamp_of(v1).as_str())
    );

    // An edit gives new pods the new content and a new revision.
    let v2 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    configmaps
        .replace("tracing", &PostParams::default(), &{
            let mut cm = configmaps.get("tracing").await.unwrap();
            cm.data = Some([("tracer.yaml".to_owned(), v2.to_owned())].into());
            cm
        })
        .await
        .unwrap();
    in_force(stamp_of(v2)).await;
    let pod = create_pod(&ctx, "second", "tracer:v1").await.unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[1].image.as_deref(),
        Some("tracer:2")
    );
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(stamp_of(v2).as_str())
    );
    assert_ne!(stamp_of(v1), stamp_of(v2));

    // An invalid edit keeps v2 serving and leaves a Warning Event on the ConfigMap.
    configmaps
        .replace("tracing", &PostParams::default(), &{
            let mut cm = configmaps.get("tracing").await.unwrap();
            cm.data = Some(
                [(
                    "tracer.yaml".to_owned(),
                    "name: tracer:v1\nimagee: typo\n".to_owned(),
                )]
                .into(),
            );
            cm
        })
        .await
        .unwrap();
    let warning = eventually(DEADLINE, "a Warning Event on the ConfigMap", || async {
        let events: Api<Event> = ctx.api();
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.involved_object.kind.as_deref() == Some("ConfigMap")
                    && e.involved_object.name.as_deref() == Some("tracing")
            })
    })
    .await;
    assert_eq!(warning.reason.as_deref(), Some("InvalidSidecarConfig"));
    let message = warning.message.unwrap_or_default();
    assert!(
        message.contains("item tracer.yaml:2: unknown top-level key \"imagee\""),
        "{message}"
    );
    let pod = create_pod(&ctx, "third", "tracer:v1").await.unwrap();
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(stamp_of(v2).as_str()),
        "the last good version serves"
    );
    assert!(
        injector
            .metric("sidecar_injector_config_reloads_total{source=\"configmap\",result=\"error\"}")
            >= 1.0
    );

    // Unlabelled, or in another namespace: ignored.
    let ghost = "name: ghost:v1\ncontainers: [{name: ghost, image: 'ghost:1'}]\n";
    configmaps
        .create(
            &PostParams::default(),
            &configmap("unlabelled", false, "ghost.yaml", ghost),
        )
        .await
        .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "e2e-configmaps-other"}})).unwrap(),
        )
        .await
        .unwrap();
    let elsewhere: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "e2e-configmaps-other");
    elsewhere
        .create(
            &PostParams::default(),
            &configmap("elsewhere", true, "ghost.yaml", ghost),
        )
        .await
        .unwrap();
    // A change the injector does see, so that the ghost ConfigMaps had their chance too.
    let marker = "name: marker:v1\n";
    configmaps
        .create(
            &PostParams::default(),
            &configmap("marker", true, "marker.yaml", marker),
        )
        .await
        .unwrap();
    in_force(stamp_of(marker)).await;
    let denied = create_pod(&ctx, "ghostly", "ghost:v1")
        .await
        .expect_err("ghost:v1 is not served");
    assert!(
        denied
            .to_string()
            .contains(r#"sidecar "ghost:v1" not found"#),
        "{denied}"
    );

    // Deleting the ConfigMap removes its configs.
    configmaps
        .delete("tracing", &Default::default())
        .await
        .unwrap();
    wait_in_force(injector, "tracer:v1".into(), false).await;
    let denied = create_pod(&ctx, "fourth", "tracer:v1")
        .await
        .expect_err("tracer:v1 is gone");
    assert!(
        denied
            .to_string()
            .contains(r#"sidecar "tracer:v1" not found"#),
        "{denied}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_renders_and_the_base_passes_a_server_side_dry_run() {
    let plane = support::cluster::control_plane();
    let base = kustomize("deploy");
    let kinds: Vec<&str> = base.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "MutatingWebhookConfiguration",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let matchconditions = kustomize("deploy/overlays/matchconditions");
    assert!(
        of_kind(&matchconditions, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
            [0]["expression"]
            .as_str()
            .unwrap()
            .contains("'injector/request' in object.metadata.annotations")
    );
    let cert_manager = kustomize("deploy/overlays/cert-manager");
    assert_eq!(
        of_kind(&cert_manager, "Certificate")["spec"]["secretName"],
        of_kind(&base, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
    );
    assert!(of_kind(&cert_manager, "MutatingWebhookConfiguration")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_string());

    // v1.20 has no policy/v1, which current clusters need: the PodDisruptionBudget is checked
    // here, against the Deployment it protects.
    let pdb = of_kind(&base, "PodDisruptionBudget");
    let deployment = of_kind(&base, "Deployment");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(deployment["spec"]["replicas"].as_i64().unwrap() >= 2);
    for (key, value) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &deployment["spec"]["template"]["metadata"]["labels"][key], value,
            "the PDB selects the injector's pods"
        );
    }
    let security = &deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );

    // Everything else, server-side: the namespace for real, then a dry run of the rest.
    let kubectl = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&plane.kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let yaml = |docs: Vec<&Value>| {
        docs.iter()
            .map(|d| serde_yaml::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n")
    };
    kubectl(
        &["apply", "-f", "-"],
        &yaml(vec![of_kind(&base, "Namespace")]),
    );
    let rest: Vec<&Value> = base
        .iter()
        .filter(|d| d["kind"] != "Namespace" && d["kind"] != "PodDisruptionBudget")
        .collect();
    let applied = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        &yaml(rest.clone()),
    );
    assert_eq!(
        applied
            .lines()
            .filter(|l| l.contains("(server dry run)"))
            .count(),
        rest.len(),
        "{applied}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_injector_runs_on_the_rbac_of_deploy_and_nothing_more() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let ctx = TestContext::with_deploy_rbac(
        "rbac",
        &[
            "--configmap-namespace",
            "e2e-rbac",
            "--configmap-labels",
            "sidecar-injector.io/config=true",
        ],
    )
    .await;
    let example = of_kind(&kustomize("deploy"), "ConfigMap").clone();
    let mut example: ConfigMap = serde_json::from_value(example).unwrap();
    example.metadata.namespace = None;
    ctx.api::<ConfigMap>()
        .create(&PostParams::default(), &example)
        .await
        .unwrap();
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        DEADLINE,
        "/ready: the ConfigMap list works under deploy/'s RBAC",
        || async { (injector.lifecycle_get("/ready").0 == 200).then_some(()) },
    )
    .await;
    eventually(
        DEADLINE,
        "deploy/'s example ConfigMap config loaded",
        || async {
            (injector.metric("sidecar_injector_configs_loaded{source=\"configmap\"}") == 1.0)
                .then_some(())
        },
    )
    .await;

    // The same identity is refused what the RBAC does not grant.
    let kubeconfig = ctx
        .injector_kubeconfig
        .as_ref()
        .expect("the injector's own kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ctx.namespace);
    match secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("reading Secrets must be forbidden: {other:?}"),
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ctx.namespace);
    let patch = kube::api::Patch::Merge(json!({"data": {"x": "y"}}));
    match configmaps
        .patch(
            "sidecar-configs",
            &kube::api::PatchParams::default(),
            &patch,
        )
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("only the status ConfigMap may be written: {other:?}"),
    }
    let pods: Api<Pod> = Api::all(client);
    pods.list_metadata(&ListParams::default().limit(1))
        .await
        .expect("pod metadata is readable cluster-wide");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_allow_a_deleted_configmap_sidecar_lets_pods_through_uninjected() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ctx = TestContext::with_deploy_rbac(
        "allow",
        &[
            "--on-missing-sidecar",
            "allow",
            "--configmap-namespace",
            "e2e-allow",
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
        ],
    )
    .await;
    let injector = ctx.injector.as_ref().unwrap();
    let text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
    let configmaps: Api<ConfigMap> = ctx.api();
    configmaps
        .create(
            &PostParams::default(),
            &configmap("tracing", true, "tracer.yaml", text),
        )
        .await
        .unwrap();
    wait_in_force(injector, stamp_of(text), true).await;
    let pod = create_pod(&ctx, "before", "tracer:v1").await.unwrap();
    assert_eq!(container_names(&pod), ["app", "tracer"]);
    configmaps
        .delete("tracing", &Default::default())
        .await
        .unwrap();
    wait_in_force(injector, "tracer:v1".into(), false).await;
    let pod = create_pod(&ctx, "after", "tracer:v1")
        .await
        .expect("allowed with --on-missing-sidecar=allow");
    assert_eq!(container_names(&pod), ["app"]);
    assert_eq!(annotation(&pod, "injector/status"), None);
}

/// The drift command's view of the e2e-drift test: configs as its injector reads them.
fn drift_args() -> Vec<&'static str> {
    vec![
        "--config-directory",
        concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        "--configmap-namespace",
        "e2e-drift",
        "--configmap-labels",
        "sidecar-injector-e2e/config=true",
        "--include-namespace",
        "e2e-drift",
    ]
}

/// `sidecar-injector drift -o json` against the control plane, as an operator runs it.
fn drift_report(args: &[&str]) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("drift")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(["-o", "json"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("drift runs");
    assert!(
        output.status.success(),
        "drift: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("drift prints JSON")
}

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
    assert!(
        injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"excluded\"}") >= 1.0,
        "the bare pod"
    );
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
            .find(|w| w["kind"] == kind && w["name"] == name)
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

    // A running injector's status ConfigMap, when present, gives the revisions in force.
    let v1_revision = stamp_of(v1).split('=').nth(1).unwrap().to_owned();
    let status: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "sidecar-injector-status"},
        "data": {"revisions": json!({"tracer:v1": v1_revision}).to_string()}
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &status)
        .await
        .unwrap();
    let mut published_args = drift_args();
    published_args.extend(["--injector-namespace", "e2e-drift"]);
    let published = drift_report(&published_args);
    assert_eq!(
        state(&published, "Deployment", "web"),
        "current",
        "judged by the published revision"
    );
    let tracer = published["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tracer:v1")
        .unwrap();
    assert_eq!(tracer["revision"], v1_revision);
}

// ---- The rollout engine -------------------------------------------------------------------

/// A rollout test's world: the injector (with `extra`, under deploy/'s RBAC) reads the test's
/// ConfigMaps, and `tracer:v1` is in force.
async fn engine_context(test: &str, extra: &[&str]) -> TestContext {
    let namespace = format!("e2e-{test}");
    let ctx = TestContext::with_deploy_rbac(test, &rollout_args(&namespace, extra)).await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V1).await;
    wait_in_force(ctx.injector.as_ref().unwrap(), stamp_of(TRACER_V1), true).await;
    ctx
}

/// Waits until `app` has exactly `count` pods, all stamped with `stamp` and Ready.
async fn wait_pods_at(ctx: &TestContext, app: &str, count: usize, stamp: &str, deadline: Duration) {
    eventually(
        deadline,
        &format!("{app}: {count} ready pods at {stamp}"),
        || async {
            let pods = pods_of(ctx, app).await;
            (pods.len() == count
                && pods
                    .iter()
                    .all(|p| annotation(p, "injector/revision") == Some(stamp) && is_ready(p)))
            .then_some(())
        },
    )
    .await;
}

/// Waits until `app` has exactly `count` pods, all Ready.
async fn wait_ready(ctx: &TestContext, app: &str, count: usize) {
    eventually(DEADLINE, &format!("{app}: {count} ready pods"), || async {
        let pods = pods_of(ctx, app).await;
        (pods.len() == count && pods.iter().all(is_ready)).then_some(())
    })
    .await
}

fn template_annotation(
    template: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    key: &str,
) -> Option<String> {
    template.as_ref()?.annotations.as_ref()?.get(key).cloned()
}

async fn replicaset_count(ctx: &TestContext, app: &str) -> usize {
    ctx.api::<k8s_openapi::api::apps::v1::ReplicaSet>()
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .len()
}

async fn events_for(ctx: &TestContext, name: &str, reason: &str) -> Vec<Event> {
    ctx.api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

const TRACER_V1: &str = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
const TRACER_V2: &str = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";

async fn tracer_workloads(ctx: &TestContext) {
    create_deployment(ctx, "web", 2, template("web", Some("tracer:v1"))).await;
    create_statefulset(ctx, "db", 1, template("db", Some("tracer:v1"))).await;
    create_daemonset(ctx, "agent", template("agent", Some("tracer:v1"))).await;
    create_deployment(ctx, "plain", 1, template("plain", Some("logger:v1"))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_engine_restarts_exactly_the_stale_workloads_once_after_a_configmap_edit() {
    let ns = "e2e-rollout-auto";
    let ctx = engine_context(
        "rollout-auto",
        &["--rollout=auto", "--settle", "1s", "--max-parallel", "10"],
    )
    .await;
    tracer_workloads(&ctx).await;
    let v1 = stamp_of(TRACER_V1);
    for (app, count) in [("web", 2), ("db", 1), ("agent", NODES.len())] {
        wait_pods_at(&ctx, app, count, &v1, DEADLINE).await;
    }
    eventually(DEADLINE, "plain ready", || async {
        (pods_of(&ctx, "plain").await.len() == 1).then_some(())
    })
    .await;
    let plain_before = ctx.api::<Deployment>().get("plain").await.unwrap();
    let plain_replicasets = replicaset_count(&ctx, "plain").await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    for (app, count) in [("web", 2), ("db", 1), ("agent", NODES.len())] {
        wait_pods_at(&ctx, app, count, &v2, Duration::from_secs(120)).await;
    }

    // Each stale workload was rolled once, stamped, explained.
    let injector = ctx.injector.as_ref().unwrap();
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "web rolled exactly once"
    );
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    let web_template = &web.spec.as_ref().unwrap().template.metadata;
    assert_eq!(
        template_annotation(web_template, "injector/rollout-revision"),
        Some(v2.clone())
    );
    let reason = template_annotation(web_template, "injector/rollout-reason").unwrap();
    let (old_rev, new_rev) = (v1.split('=').nth(1).unwrap(), v2.split('=').nth(1).unwrap());
    assert!(
        reason.contains(&format!("tracer:v1 {old_rev} -> {new_rev}")),
        "{reason}"
    );
    assert!(
        reason.contains("containers[tracer].image \"tracer:1\" -> \"tracer:2\""),
        "{reason}"
    );
    let annotations = web.metadata.annotations.clone().unwrap();
    assert!(annotations.contains_key("injector/rolled-at"));
    for name in ["web", "db", "agent"] {
        let events = eventually(
            DEADLINE,
            &format!("{name}'s SidecarRestart Event"),
            || async {
                let events = events_for(&ctx, name, "SidecarRestart").await;
                (!events.is_empty()).then_some(events)
            },
        )
        .await;
        assert_eq!(events.len(), 1, "{name} restarted once: {events:?}");
        assert!(
            events[0]
                .message
                .as_deref()
                .unwrap_or_default()
                .contains(new_rev)
        );
    }
    for kind in ["Deployment", "StatefulSet", "DaemonSet"] {
        assert_eq!(
            injector.metric(&format!(
                "sidecar_injector_rollouts_total{{kind=\"{kind}\",result=\"restarted\"}}"
            )),
            1.0,
            "{kind}"
        );
    }
    // kubectl rollout history shows why.
    let history = std::process::Command::new("kubectl")
        .args(["--kubeconfig"])
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(["-n", ns, "rollout", "history", "deployment/web"])
        .output()
        .expect("kubectl runs");
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(
        history.contains(&format!(
            "sidecar-injector: sidecar tracer:v1 {old_rev} -> {new_rev}"
        )),
        "{history}"
    );

    // The workload whose pods were current is untouched.
    let plain_after = ctx.api::<Deployment>().get("plain").await.unwrap();
    assert_eq!(
        plain_after.spec.unwrap().template,
        plain_before.spec.unwrap().template
    );
    assert_eq!(replicaset_count(&ctx, "plain").await, plain_replicasets);
    // Drift reaches zero, in the gauge and in the published status.
    eventually(DEADLINE, "no stale tracer pods in the gauge", || async {
        (injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"stale\"}") == 0.0
            && injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"current\"}")
                == 5.0)
            .then_some(())
    })
    .await;
    eventually(DEADLINE, "campaign complete", || async {
        (injector
            .metric("sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"complete\"}")
            == 1.0)
            .then_some(())
    })
    .await;
    let status = ctx
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get("sidecar-injector-status")
        .await
        .unwrap();
    let revisions: Value =
        serde_json::from_str(&status.data.as_ref().unwrap()["revisions"]).unwrap();
    assert_eq!(revisions["tracer:v1"], new_rev);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_revision_pauses_the_campaign_across_restarts_and_a_fix_converges() {
    let mut ctx = engine_context(
        "rollout-broken",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--rollout-timeout",
            "6s",
            "--lease-duration",
            "3s",
        ],
    )
    .await;
    for (name, replicas) in [("canary", 1), ("web", 2), ("api", 2)] {
        create_deployment(&ctx, name, replicas, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    for (app, count) in [("canary", 1), ("web", 2), ("api", 2)] {
        wait_pods_at(&ctx, app, count, &v1, DEADLINE).await;
    }

    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(Duration::from_secs(60), "the campaign pauses", || async {
        (injector
            .metric("sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"paused\"}")
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"failed\"}"),
        1.0
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        1.0
    );
    let failed = events_for(&ctx, "canary", "SidecarRolloutFailed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert!(
        !events_for(&ctx, "canary", "SidecarRolloutPaused")
            .await
            .is_empty()
    );
    let deployments = ctx.api::<Deployment>();
    let unpatched = |name: &'static str| {
        let api = deployments.clone();
        async move {
            let d = api.get(name).await.unwrap();
            template_annotation(
                &d.spec.unwrap().template.metadata,
                "injector/rollout-revision",
            )
            .is_none()
        }
    };
    assert!(
        unpatched("web").await && unpatched("api").await,
        "only the canary was patched"
    );

    // The pause lives in the cluster: a restarted injector keeps it.
    ctx.restart_injector().await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        Duration::from_secs(30),
        "the restarted engine reads the pause",
        || async {
            (injector.metric(
                "sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"paused\"}",
            ) == 1.0)
                .then_some(())
        },
    )
    .await;
    // That gauge is set only by the Lease holder after a plan: had the pause been lost, this
    // plan would have patched the others.
    assert!(
        unpatched("web").await && unpatched("api").await,
        "still paused after the restart"
    );

    // A fixed revision is a new campaign: everything converges.
    let fixed = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", fixed).await;
    let v3 = stamp_of(fixed);
    for (app, count) in [("canary", 1), ("web", 2), ("api", 2)] {
        wait_pods_at(&ctx, app, count, &v3, Duration::from_secs(120)).await;
    }
}

/// The stdout of a command that must have succeeded.
fn succeeded(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `sidecar-injector rollout` against the control plane, as an operator runs it.
fn rollout_command(namespace: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("rollout")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args([
            "--config-directory",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
            "--configmap-namespace",
            namespace,
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
            "--include-namespace",
            namespace,
            "--injector-namespace",
            namespace,
        ])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("rollout runs")
}

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

    // The dry run lists exactly the stale workloads.
    let output = rollout_command(ns, &["-o", "json", "--canary", "0"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!(
            "revisions computed from the configs (no status ConfigMap in {ns})"
        )),
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
    assert!(String::from_utf8_lossy(&output.stdout).contains("dry run: nothing changed"));
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
}

#[tokio::test(flavor = "multi_thread")]
async fn edits_inside_the_settle_window_make_one_campaign_and_the_cooldown_holds_the_next() {
    let ns = "e2e-rollout-settle";
    let ctx = engine_context("rollout-settle", &["--rollout=auto", "--settle", "3s"]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(TRACER_V1), DEADLINE).await;

    // Two edits in quick succession: one restart, to the last.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v3 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v3).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(v3), Duration::from_secs(90)).await;
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "one restart for both edits"
    );
    let injector = ctx.injector.as_ref().unwrap();
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        1.0
    );

    // A third edit inside the cooldown (10m by default): planned, held, not restarted.
    let v4 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:4'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v4).await;
    let v4_rev = stamp_of(v4).split('=').nth(1).unwrap().to_owned();
    let configmaps = ctx.api::<k8s_openapi::api::core::v1::ConfigMap>();
    eventually(DEADLINE, "the v4 campaign holds web back", || async {
        let status = configmaps.get("sidecar-injector-status").await.ok()?;
        let book: Value = serde_json::from_str(status.data.as_ref()?.get("campaigns")?).ok()?;
        let campaign = &book["campaigns"]["tracer:v1"];
        (campaign["revision"] == v4_rev.as_str()
            && campaign["state"] == "running"
            && campaign["counts"]["pending"] == 1)
            .then_some(())
    })
    .await;
    let dry_run = rollout_command(ns, &["-o", "json"]);
    assert!(
        String::from_utf8_lossy(&dry_run.stderr).contains(&format!(
            "revisions from {ns}/sidecar-injector-status, as the running injector published them"
        )),
        "{}",
        String::from_utf8_lossy(&dry_run.stderr)
    );
    let plan: Value = serde_json::from_slice(&dry_run.stdout).unwrap();
    assert_eq!(plan["waiting"][0]["workload"]["name"], "web", "{plan:#}");
    assert_eq!(plan["waiting"][0]["reason"], "cooldown", "{plan:#}");
    // Run where tracer's ConfigMap is not read at all: the plan is the same, because the
    // revisions come from what the running injector published.
    let elsewhere = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("rollout")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args([
            "--config-directory",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
            "--include-namespace",
            ns,
            "--injector-namespace",
            ns,
            "-o",
            "json",
        ])
        .output()
        .expect("rollout runs");
    let plan: Value = serde_json::from_slice(&elsewhere.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&elsewhere.stderr)));
    assert_eq!(plan["waiting"][0]["workload"]["name"], "web", "{plan:#}");
    assert_eq!(plan["waiting"][0]["sidecars"][0], "tracer:v1", "{plan:#}");
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "not restarted within the cooldown"
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_lease_holder_acts_and_a_survivor_finishes_the_campaign_exactly_once() {
    let ctx = engine_context("rollout-ha", &[]).await;
    let apps = ["a", "b", "c", "d"];
    for app in apps {
        create_deployment(&ctx, app, 1, template(app, Some("tracer:v1"))).await;
    }
    for app in apps {
        wait_pods_at(&ctx, app, 1, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    // Two engine replicas (the webhook's own process has --rollout=off, so that killing an
    // engine never takes the webhook down).
    let engine = [
        "--rollout=auto",
        "--lease-duration",
        "3s",
        "--settle",
        "1s",
        "--max-parallel",
        "1",
        "--canary",
        "0",
    ];
    let mut replicas = vec![
        ctx.start_replica_with(&engine),
        ctx.start_replica_with(&engine),
    ];
    let leader = eventually(DEADLINE, "one replica holds the Lease", || async {
        replicas.iter().position(|r| {
            r.logs()
                .iter()
                .any(|l| l.contains("holding the rollout Lease: this replica acts"))
        })
    })
    .await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    let deployments = ctx.api::<Deployment>();
    // Mid-campaign: one workload stamped, the rest still to go (--max-parallel 1).
    eventually(Duration::from_secs(60), "the first restart", || async {
        let list = deployments.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|d| {
                template_annotation(
                    &d.spec.as_ref().unwrap().template.metadata,
                    "injector/rollout-revision",
                )
                .as_deref()
                    == Some(v2.as_str())
            })
            .then_some(())
    })
    .await;
    let follower = 1 - leader;
    assert_eq!(
        replicas[follower]
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        0.0,
        "the replica without the Lease patched nothing"
    );
    drop(replicas.remove(leader));
    let survivor = &replicas[0];
    for app in apps {
        wait_pods_at(&ctx, app, 1, &v2, Duration::from_secs(120)).await;
    }
    assert!(
        survivor
            .logs()
            .iter()
            .any(|l| l.contains("holding the rollout Lease: this replica acts")),
        "the survivor took over"
    );
    for app in apps {
        assert_eq!(
            replicaset_count(&ctx, app).await,
            2,
            "{app} restarted exactly once"
        );
    }
}

/// A policy/v1beta1 PodDisruptionBudget: v1.20 serves no policy/v1, and k8s-openapi's types are
/// policy/v1 only.
fn pdb_api(ctx: &TestContext) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("policy", "v1beta1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &resource)
}

/// Watches the pods of `app` and remembers the fewest that were Ready and not being deleted at
/// any moment, and every pod uid seen.
fn watch_availability(
    ctx: &TestContext,
    app: &str,
) -> std::sync::Arc<std::sync::Mutex<(usize, std::collections::BTreeSet<String>)>> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let seen = std::sync::Arc::new(std::sync::Mutex::new((
        usize::MAX,
        std::collections::BTreeSet::new(),
    )));
    let api: Api<Pod> = ctx.api();
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut ready: std::collections::BTreeMap<String, bool> = Default::default();
        let mut stream = watcher(api, config).boxed();
        let mut listed = false;
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Init => ready.clear(),
                watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                    let up = pod.metadata.deletion_timestamp.is_none() && is_ready(&pod);
                    out.lock()
                        .unwrap()
                        .1
                        .insert(pod.metadata.uid.clone().unwrap_or_default());
                    ready.insert(pod.metadata.name.clone().unwrap_or_default(), up);
                }
                watcher::Event::Delete(pod) => {
                    ready.remove(&pod.metadata.name.clone().unwrap_or_default());
                }
                watcher::Event::InitDone => listed = true,
            }
            if listed {
                let up = ready.values().filter(|up| **up).count();
                let mut out = out.lock().unwrap();
                out.0 = out.0.min(up);
            }
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn an_on_delete_statefulset_behind_a_pdb_is_evicted_one_pod_at_a_time_never_forced() {
    let ctx = engine_context("rollout-ondelete", &["--rollout=auto", "--settle", "1s"]).await;
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
    let pdbs = pdb_api(&ctx);
    let pdb: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "db"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually(
        DEADLINE,
        "the disruption controller counts the budget",
        || async {
            let pdb = pdbs.get("db").await.ok()?;
            let status = pdb.data.get("status")?;
            (status["expectedPods"] == 3 && status["currentHealthy"] == 3).then_some(())
        },
    )
    .await;
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
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"StatefulSet\",result=\"restarted\"}"),
        1.0
    );
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
    // The run kept its campaign to itself: the injector's status ConfigMap is not written.
    assert!(
        ctx.api::<k8s_openapi::api::core::v1::ConfigMap>()
            .get_opt("sidecar-injector-status")
            .await
            .unwrap()
            .is_none()
    );
}
