//! The Helm chart (charts/sidecar-injector): what it renders is what deploy/ renders, its values
//! are checked by its schema, and helm installs, upgrades and uninstalls it on a real API server.

use std::collections::BTreeMap;

use super::*;
use support::cluster::OtherControlPlane;
use support::helm::{chart, documents, helm, helm_ok, template};

/// Helm's own labels (which release of which chart), and the standard ones the chart puts
/// on objects deploy/ leaves unlabelled.
fn added_by_the_chart(key: &str) -> bool {
    key.starts_with("app.kubernetes.io/") || key == "helm.sh/chart"
}

/// Objects by kind, namespace and name; labels the chart adds where deploy/ has none of them
/// are left out, so what remains must be equal.
fn by_identity(
    objects: Vec<Value>,
    kustomized: Option<&BTreeMap<String, Value>>,
) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|mut object| {
            let identity = format!(
                "{} {}/{}",
                object["kind"].as_str().unwrap(),
                object["metadata"]["namespace"].as_str().unwrap_or(""),
                object["metadata"]["name"].as_str().unwrap()
            );
            if let Some(kustomized) = kustomized {
                let theirs = kustomized
                    .get(&identity)
                    .map(|o| o["metadata"]["labels"].clone());
                if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
                    labels.retain(|key, _| {
                        !added_by_the_chart(key)
                            || theirs.as_ref().is_some_and(|t| t.get(key).is_some())
                    });
                    if labels.is_empty() {
                        object["metadata"].as_object_mut().unwrap().remove("labels");
                    }
                }
            }
            (identity, object)
        })
        .collect()
}

#[test]
fn the_chart_renders_what_deploy_renders_and_its_schema_refuses_a_wrong_value() {
    let lint = helm_ok(&["lint", "--strict", &chart()]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    // Each overlay of deploy/ and the values that give the same objects. The namespace is
    // deploy/'s only with createNamespace (helm's --create-namespace makes it otherwise).
    let variants: [(&str, &[&str]); 8] = [
        ("deploy", &["createNamespace=true"]),
        (
            "deploy/overlays/cert-manager",
            &["createNamespace=true", "certificate.source=certManager"],
        ),
        (
            "deploy/overlays/matchconditions",
            &["createNamespace=true", "webhook.matchConditions=true"],
        ),
        (
            "deploy/overlays/monitoring",
            &["createNamespace=true", "monitoring.enabled=true"],
        ),
        (
            "deploy/overlays/status-readers",
            &["createNamespace=true", "statusReaders=true"],
        ),
        (
            "deploy/overlays/policy-mode",
            &["createNamespace=true", "injection=policy"],
        ),
        (
            "deploy/overlays/promote-after",
            &["createNamespace=true", "promotion.promoteAfter={staging}"],
        ),
        (
            "deploy/overlays/upstream-reader",
            &["createNamespace=true", "upstreamReader=true"],
        ),
    ];
    for (overlay, set) in variants {
        let kustomized = by_identity(kustomize(overlay), None);
        let rendered = by_identity(template("injector-system", set), Some(&kustomized));
        assert_eq!(
            rendered.keys().collect::<Vec<_>>(),
            kustomized.keys().collect::<Vec<_>>(),
            "{overlay}: the same objects"
        );
        for (identity, object) in &kustomized {
            assert_eq!(&rendered[identity], object, "{overlay}: {identity}");
        }
    }
    // By default the chart leaves the namespace to helm, and labels every object as Helm's.
    let default = template("injector-system", &[]);
    assert!(!default.iter().any(|o| o["kind"] == "Namespace"));
    for object in &default {
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm",
            "{object}"
        );
    }
    // Another namespace: every reference follows it.
    let elsewhere = template("platform", &[]);
    let webhook = of_kind(&elsewhere, "MutatingWebhookConfiguration");
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "platform"
    );
    assert_eq!(
        webhook["webhooks"][0]["name"],
        "sidecar-injector.platform.svc"
    );
    assert_eq!(
        webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"][1]["values"],
        json!(["platform", "kube-system"])
    );

    // A wrong value stops helm before anything is applied, naming the value and what it takes.
    for (set, said) in [
        ("replicas=two", "at '/replicas': got string, want integer"),
        (
            "certificate.source=vault",
            "at '/certificate/source': value must be one of 'existingSecret', 'certManager', 'generate'",
        ),
        (
            "webhook.failurePolicy=Maybe",
            "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'",
        ),
        (
            "extraArgs[0]=bake=2m",
            "at '/extraArgs/0': 'bake=2m' does not match pattern",
        ),
        ("colour=blue", "additional properties 'colour' not allowed"),
        (
            "injection=sidecar",
            "at '/injection': value must be one of 'webhook', 'policy'",
        ),
        (
            "promotion.promoteBake=soon",
            "at '/promotion/promoteBake': 'soon' does not match pattern",
        ),
        (
            "traces.samplingRatio=2",
            "at '/traces/samplingRatio': maximum: got 2, want 1",
        ),
        (
            "test.wait=soon",
            "at '/test/wait': 'soon' does not match pattern",
        ),
    ] {
        let output = helm(&["template", "sidecar-injector", &chart(), "--set", set]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(said),
            "{set}: {stderr}"
        );
    }

    // Sidecar configs and serve's flags as values.
    let dir = tempfile::tempdir().unwrap();
    let tracer = dir.path().join("tracer.yaml");
    std::fs::write(&tracer, TRACER_V1).unwrap();
    let chart = chart();
    let rendered = documents(&helm_ok(&[
        "template",
        "sidecar-injector",
        &chart,
        "-n",
        "injector-system",
        "--set-file",
        &format!("sidecarConfigs.tracer\\.yaml={}", tracer.display()),
        "--set",
        "extraArgs={--rollout=dry-run,--bake=2m}",
        "--set",
        "traces.otlpEndpoint=http://otel-collector.observability:4318",
    ]));
    let configs = rendered
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "sidecar-configs")
        .unwrap();
    assert_eq!(configs["data"]["tracer.yaml"], TRACER_V1);
    assert!(
        configs["data"]["logger-v1.yaml"].is_string(),
        "the defaults stay"
    );
    let args =
        &of_kind(&rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
    let args: Vec<&str> = args
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        &args[args.len() - 4..],
        [
            "--otlp-endpoint=http://otel-collector.observability:4318",
            "--otlp-sampling-ratio=1",
            "--rollout=dry-run",
            "--bake=2m"
        ]
    );

    // `helm test`'s hook: it dry-runs a pod requesting the first config, in test.namespace.
    let hooks = documents(&helm_ok(&[
        "template",
        "sidecar-injector",
        &chart,
        "-n",
        "injector-system",
        "--show-only",
        "templates/tests/check.yaml",
        "--set",
        "test.namespace=team-a",
    ]));
    let pod = of_kind(&hooks, "Pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        json!([
            "check",
            "--namespace=team-a",
            "--request=logger:v1",
            "--wait=2m"
        ])
    );
    assert_eq!(of_kind(&hooks, "Role")["metadata"]["namespace"], "team-a");
}

/// Every object the chart renders in `namespace` by its kind and name, with its
/// resourceVersion in the cluster (`None`: absent).
fn versions(kubeconfig: &std::path::Path, objects: &[Value]) -> BTreeMap<String, Option<String>> {
    objects
        .iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            let mut args = vec![
                "--kubeconfig".to_owned(),
                kubeconfig.display().to_string(),
                "get".into(),
                kind.to_owned(),
                name.to_owned(),
            ];
            if let Some(ns) = o["metadata"]["namespace"].as_str() {
                args.extend(["-n".to_owned(), ns.to_owned()]);
            }
            args.extend([
                "-o".into(),
                "jsonpath={.metadata.resourceVersion}".into(),
                "--ignore-not-found".into(),
            ]);
            let out = std::process::Command::new("kubectl")
                .args(&args)
                .output()
                .unwrap();
            let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (
                format!("{kind}/{name}"),
                (!version.is_empty()).then_some(version),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_installs_the_chart_upgrades_it_idempotently_and_uninstalls_it_leaving_nothing() {
    // A control plane of its own: the chart's cluster-wide objects are those every install has.
    let plane = OtherControlPlane::start("helm");
    let kubeconfig = plane.plane.kubeconfig.display().to_string();
    let chart = chart();
    let install = |verb: &'static str, extra: &[&str]| {
        let mut args = vec![
            verb,
            "sidecar-injector",
            chart.as_str(),
            "--kubeconfig",
            kubeconfig.as_str(),
            "-n",
            "injector-system",
            "--create-namespace",
            "--wait=false",
        ];
        args.extend(extra);
        helm_ok(&args)
    };
    // The chart makes the serving certificate.
    let generate = "certificate.source=generate";
    install("install", &["--set", generate]);
    let objects = template("injector-system", &[generate]);
    let installed = versions(&plane.plane.kubeconfig, &objects);
    for (object, version) in &installed {
        assert!(version.is_some(), "{object} installed");
    }

    // A pod of a team outside the release, to be left alone by the uninstall.
    let client = plane.client().await;
    let team: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    create(&team, json!({"metadata": {"name": "team"}})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    eventually(DEADLINE, "the team's default ServiceAccount", || async {
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), "team")
            .get_opt("default")
            .await
            .ok()
            .flatten()
    })
    .await;
    create(&pods, json!({"metadata": {"name": "app"}, "spec": {"containers": [{"name": "app", "image": "example.org/app:1"}]}})).await;
    let app_uid = pods.get("app").await.unwrap().metadata.uid;

    // The same values again: nothing in the cluster changes, the certificate included.
    install("upgrade", &["--set", generate]);
    assert_eq!(
        versions(&plane.plane.kubeconfig, &objects),
        installed,
        "a second upgrade changes nothing"
    );

    // A config edit as a value: only the ConfigMap of the configs changes.
    let dir = tempfile::tempdir().unwrap();
    let tracer = dir.path().join("tracer.yaml");
    std::fs::write(&tracer, TRACER_V1).unwrap();
    let file = format!("sidecarConfigs.tracer\\.yaml={}", tracer.display());
    install("upgrade", &["--set", generate, "--set-file", &file]);
    let edited = versions(&plane.plane.kubeconfig, &objects);
    let changed: Vec<&String> = installed
        .keys()
        .filter(|k| edited[*k] != installed[*k])
        .collect();
    assert_eq!(changed, ["ConfigMap/sidecar-configs"]);
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "injector-system");
    let data = configs.get("sidecar-configs").await.unwrap().data.unwrap();
    assert_eq!(data["tracer.yaml"], TRACER_V1);

    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "injector-system");
    let pair = secrets
        .get("sidecar-injector-tls")
        .await
        .unwrap()
        .data
        .unwrap();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(!pair[key].0.is_empty(), "{key} in the generated Secret");
    }
    let certificate = String::from_utf8(pair["tls.crt"].0.clone()).unwrap();
    assert!(
        certificate.starts_with("-----BEGIN CERTIFICATE-----"),
        "{certificate}"
    );

    // Uninstalled: none of its objects is left, cluster-wide ones included; the team's pod
    // is untouched.
    helm_ok(&[
        "uninstall",
        "sidecar-injector",
        "--kubeconfig",
        &kubeconfig,
        "-n",
        "injector-system",
        "--wait",
    ]);
    eventually(DEADLINE, "every object of the chart gone", || async {
        versions(&plane.plane.kubeconfig, &objects)
            .values()
            .all(Option::is_none)
            .then_some(())
    })
    .await;
    assert_eq!(pods.get("app").await.unwrap().metadata.uid, app_uid);
}
