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
use support::cluster::TestContext;
use support::injector::eventually;
use support::kubelet::NODES;

const DEADLINE: Duration = Duration::from_secs(60);

/// `logger:v1=REV` as the shipped config stamps it, computed by the library itself.
fn logger_v1_stamp() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let report = sidecar_injector::config_directory::load_config_directory(&dir).unwrap();
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
    let selector = |app: &str| json!({"matchLabels": {"app": app}});
    create(&ctx.api::<Deployment>(), json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": selector("web"), "template": template("web", Some("logger:v1"))}
    })).await;
    create(&ctx.api::<StatefulSet>(), json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": selector("db"), "template": template("db", Some("logger:v1"))}
    })).await;
    create(&ctx.api::<DaemonSet>(), json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": selector("agent"), "template": template("agent", Some("logger:v1"))}
    })).await;
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
    create(&ctx.api::<Deployment>(), json!({
        "metadata": {"name": "typo"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "typo"}}, "template": template("typo", Some("logger:v9"))}
    })).await;
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
