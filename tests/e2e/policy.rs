//! One contract for both injection paths: the same pods, created once through the webhook and
//! once through the admission policies `sidecar-injector policy` compiles, on the same real
//! API server, are stored equal field by field.

use k8s_openapi::api::core::v1::Namespace;

use super::*;

const TRACER: &str = "name: tracer:v1\n\
    containers: [{name: tracer, image: 'tracer:1', args: [--collector, 'http://collector:4317'], \
                  resources: {requests: {cpu: 5m}}, securityContext: {runAsNonRoot: true}}]\n\
    env: [{name: OTEL_ENDPOINT, value: 'http://collector:4317'}, \
          {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]\n\
    volumes: [{name: traces, emptyDir: {medium: Memory}}]\n\
    volumeMounts: [{name: traces, mountPath: /var/traces}]\n\
    prependContainers: [{name: tracer-agent, image: 'tracer-agent:1'}]\n\
    hostPID: true\n";

/// Init and prepended containers, and a host alias.
const VAULT: &str = "name: vault:v1\n\
    initContainers: [{name: vault-init, image: 'vault:1', args: [agent, -exit-after-auth]}]\n\
    prependContainers: [{name: vault-refresher, image: 'vault:1'}]\n\
    volumes: [{name: secrets, emptyDir: {medium: Memory}}]\n\
    volumeMounts: [{name: secrets, mountPath: /vault/secrets}]\n\
    hostAliases: [{ip: 10.0.0.9, hostnames: [vault.internal]}]\n";

/// Native sidecars: placed first (with an init container of its own), placed last, a second
/// placed first, native in the pods of Jobs only, and one that requests resources.
const NATIVE: [(&str, &str); 5] = [
    (
        "mesh",
        "name: mesh:v1\nnativeSidecars: true\n\
        initContainers: [{name: mesh-init, image: 'mesh-init:1'}]\n\
        containers: [{name: mesh-proxy, image: 'mesh:1', args: [proxy]}]\n\
        env: [{name: MESH, value: 'on'}]\n",
    ),
    (
        "agent",
        "name: agent:v1\nnativeSidecars: true\nnativeSidecarPlacement: last\n\
        containers: [{name: agent, image: 'agent:1'}]\n",
    ),
    (
        "proxy",
        "name: proxy:v1\nnativeSidecars: true\n\
        prependContainers: [{name: proxy, image: 'proxy:1'}]\n",
    ),
    (
        "batch-logger",
        "name: batch-logger:v1\nnativeSidecars: jobs\n\
        containers: [{name: batch-shipper, image: 'shipper:1'}]\n\
        volumeMounts: [{name: data, mountPath: /batch}]\n",
    ),
    (
        "sized",
        "name: sized:v1\nnativeSidecars: true\n\
        initContainers: [{name: sized-init, image: 'init:1', resources: {requests: {cpu: 300m}}}]\n\
        containers: [{name: sized-proxy, image: 'proxy:1', \
                      resources: {requests: {cpu: 20m, memory: 16Mi}, limits: {memory: 32Mi}}}]\n",
    ),
];

/// A pod of a fixture captured from a real API server (its AdmissionReview's object), named.
fn fixture_pod(file: &str, name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/admission/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut pod = review["request"]["object"].clone();
    let metadata = pod["metadata"].as_object_mut().unwrap();
    for key in [
        "generateName",
        "ownerReferences",
        "managedFields",
        "uid",
        "creationTimestamp",
        "namespace",
    ] {
        metadata.remove(key);
    }
    metadata.insert("name".into(), json!(name));
    pod.as_object_mut().unwrap().remove("status");
    pod
}

fn pod(name: &str, request: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"injector/request": request}},
        "spec": spec,
    })
}

/// The pods both paths get: the captured fixtures and what the webhook tests cover.
fn cases() -> Vec<Value> {
    let app = |env: Value, mounts: Value| {
        json!({"containers": [{"name": "app", "image": "app:1", "env": env, "volumeMounts": mounts}],
               "volumes": [{"name": "data", "emptyDir": {}}]})
    };
    vec![
        fixture_pod("bare-pod.json", "bare"),
        fixture_pod("deployment-pod.json", "deployment"),
        fixture_pod("daemonset-pod.json", "daemonset"),
        fixture_pod("statefulset-pod.json", "statefulset"),
        pod("several", "logger:v1, tracer:v1", app(json!([]), json!([]))),
        pod("reversed", "tracer:v1,logger:v2", app(json!([]), json!([]))),
        pod(
            "spelled",
            " Tracer:V1 ,,LOGGER:v1 , tracer:v1",
            app(json!([]), json!([])),
        ),
        // Env, mounts and a volume the pod has already stay its own.
        pod(
            "has-some",
            "logger:v1,tracer:v1",
            json!({
                "containers": [
                    {"name": "app", "image": "app:1",
                     "env": [{"name": "LOG_SHIPPER_ENDPOINT", "value": "mine"}, {"name": "NODE", "value": "n"}],
                     "volumeMounts": [{"name": "data", "mountPath": "/var/log/app"}]},
                    {"name": "second", "image": "second:1",
                     "volumeMounts": [{"name": "traces", "mountPath": "/elsewhere"}]},
                ],
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "traces", "emptyDir": {}}],
            }),
        ),
        // Init containers get the env and mounts too; prepended containers go first, in
        // request order across sidecars.
        pod(
            "init-and-prepend",
            "vault:v1, logger:v1, metrics-agent:v1",
            json!({
                "initContainers": [{"name": "migrate", "image": "migrate:1"}],
                "containers": [{"name": "app", "image": "app:1"}],
                "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["vault.internal"]},
                                {"ip": "10.96.0.53", "hostnames": ["other.internal"]}],
            }),
        ),
        pod(
            "prepend-after-prepend",
            "metrics-agent:v1,vault:v1,tracer:v1",
            app(json!([]), json!([])),
        ),
        // An account to replace, with the default account's legacy token to remove; an
        // account of the pod's own, kept.
        {
            let mut bare = fixture_pod("bare-pod.json", "account");
            bare["metadata"]["annotations"]["injector/request"] =
                json!("secrets-agent:v1,logger:v1");
            bare
        },
        {
            let mut own = pod("own-account", "secrets-agent:v1", app(json!([]), json!([])));
            own["spec"]["serviceAccountName"] = json!("mine");
            own
        },
        // Native sidecars before and after the pod's init containers, in request order, with a
        // classic one beside them.
        pod(
            "native",
            "mesh:v1,agent:v1,logger:v1,proxy:v1",
            json!({
                "initContainers": [{"name": "migrate", "image": "migrate:1"}],
                "containers": [{"name": "app", "image": "app:1"}],
            }),
        ),
        pod(
            "native-no-init",
            "proxy:v1,mesh:v1",
            app(json!([]), json!([])),
        ),
        // `NS/native-sidecars: "false"` keeps them classic.
        {
            let mut classic = pod(
                "kept-classic",
                "mesh:v1,proxy:v1",
                app(json!([]), json!([])),
            );
            classic["metadata"]["annotations"]["injector/native-sidecars"] = json!("false");
            classic
        },
        // `nativeSidecars: jobs`: native in a Job's pod, classic elsewhere.
        {
            let mut job = pod("job", "batch-logger:v1", app(json!([]), json!([])));
            job["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
                "name": "nightly", "uid": "5e1f4c1e-0000-4000-8000-000000000001", "controller": true}]);
            job["spec"]["restartPolicy"] = json!("Never");
            job
        },
        pod("not-a-job", "batch-logger:v1", app(json!([]), json!([]))),
        // A native-form annotation copied from another pod's manifest goes.
        {
            let mut stale = pod("stale-native", "logger:v1", app(json!([]), json!([])));
            stale["metadata"]["annotations"]["injector/injected-native"] = json!("mesh:v1");
            stale
        },
        // Pod-level resources (1.34+) the app fills: grown by what the sidecars add, a native
        // one counted beside the init container it runs next to; limits alone (the API server
        // defaults the requests).
        pod(
            "pod-level",
            "logger:v1,tracer:v1",
            json!({
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                              "limits": {"cpu": "1", "memory": "512Mi"}},
                "containers": [{"name": "app", "image": "app:1",
                                "resources": {"requests": {"cpu": "495m", "memory": "240Mi"}}}],
            }),
        ),
        pod(
            "pod-level-native",
            "sized:v1",
            json!({
                "resources": {"requests": {"cpu": "1", "memory": "128Mi"}},
                "initContainers": [{"name": "migrate", "image": "migrate:1",
                                    "resources": {"requests": {"cpu": "1"}}}],
                "containers": [{"name": "app", "image": "app:1",
                                "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}}],
            }),
        ),
        pod(
            "pod-level-limits",
            "tracer:v1",
            json!({
                "resources": {"limits": {"cpu": "1"}},
                "containers": [{"name": "app", "image": "app:1",
                                "resources": {"limits": {"cpu": "500m"}}}],
            }),
        ),
        // Copied from an injected pod: left as it is.
        {
            let mut copied = pod("copied", "logger:v1", app(json!([]), json!([])));
            copied["metadata"]["annotations"]["injector/status"] = json!("injected");
            copied
        },
    ]
}

/// The stored pod as both paths must leave it: what the API server makes differently for any
/// two pods (identity, times, the token volume's random suffix, the node) set aside.
fn comparable(pod: &Pod) -> Value {
    let mut value = serde_json::to_value(pod).unwrap();
    let metadata = value["metadata"].as_object_mut().unwrap();
    for key in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "namespace",
        "generation",
    ] {
        metadata.remove(key);
    }
    let object = value.as_object_mut().unwrap();
    object.remove("status");
    object["spec"].as_object_mut().unwrap().remove("nodeName");
    let text = serde_json::to_string(&value).unwrap();
    let text = regex_lite_replace(&text, "kube-api-access-");
    serde_json::from_str(&text).unwrap()
}

/// `kube-api-access-xxxxx` (a random suffix) as `kube-api-access-*`.
fn regex_lite_replace(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at + prefix.len()]);
        rest = &rest[at + prefix.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        out.push('*');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn policy_command(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("policy")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_pods_through_the_webhook_and_through_the_policies_are_stored_equal() {
    if support::cluster::server_minor() < 36 {
        eprintln!("admission policies need Kubernetes 1.36: nothing to compare");
        return;
    }
    // The webhook path: its injector reads config/ and the tracer ConfigMap.
    let webhook_namespace = "e2e-contract-webhook";
    let ctx =
        TestContext::with_deploy_rbac("contract-webhook", &scope_args(webhook_namespace)).await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER).await;
    put_config(&ctx, "vault", "vault.yaml", VAULT).await;
    for (name, text) in NATIVE {
        put_config(&ctx, name, &format!("{name}.yaml"), text).await;
    }
    wait_in_force(ctx.injector.as_ref().unwrap(), stamp_of(TRACER), true).await;
    wait_in_force(ctx.injector.as_ref().unwrap(), stamp_of(VAULT), true).await;
    for (_, text) in NATIVE {
        wait_in_force(ctx.injector.as_ref().unwrap(), stamp_of(text), true).await;
    }

    // The policy path: the same configs compiled, bound to a namespace of its own.
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "logger-v1.yaml",
        "logger-v2.yaml",
        "metrics-agent.yaml",
        "secrets-agent.yaml",
    ] {
        std::fs::copy(
            format!("{}/config/{file}", env!("CARGO_MANIFEST_DIR")),
            dir.path().join(file),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("tracer.yaml"), TRACER).unwrap();
    std::fs::write(dir.path().join("vault.yaml"), VAULT).unwrap();
    for (name, text) in NATIVE {
        std::fs::write(dir.path().join(format!("{name}.yaml")), text).unwrap();
    }
    let policy_namespace = "e2e-contract-policy";
    create(
        &Api::<Namespace>::all(ctx.client.clone()),
        json!({"metadata": {"name": policy_namespace, "labels": {"sidecar-injector-e2e": policy_namespace}}}),
    )
    .await;
    for namespace in [webhook_namespace, policy_namespace] {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(ctx.client.clone(), namespace);
        for account in ["secrets-agent", "mine"] {
            create(&accounts, json!({"metadata": {"name": account}})).await;
        }
    }
    let rendered = policy_command(&[
        "--config-directory",
        dir.path().to_str().unwrap(),
        "--name",
        "sidecar-injector-contract",
        "-o",
        "json",
    ]);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let mut list: Value = serde_json::from_slice(&rendered.stdout).unwrap();
    for object in list["items"].as_array_mut().unwrap() {
        if object["kind"].as_str().unwrap().ends_with("Binding") {
            object["spec"]["matchResources"] = json!({"namespaceSelector": {
                "matchLabels": {"sidecar-injector-e2e": policy_namespace}}});
        }
    }
    let kubeconfig = support::cluster::control_plane().kubeconfig.clone();
    let applied = kubectl(
        &[
            "apply",
            "--server-side",
            "-f",
            "-",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        &[],
        &list.to_string(),
    );
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let pods_policy: Api<Pod> = Api::namespaced(ctx.client.clone(), policy_namespace);
    eventually(DEADLINE, "the policies in force", || async {
        let probe: Pod = serde_json::from_value(pod(
            "probe",
            "logger:v1",
            json!({"containers": [{"name": "app", "image": "app:1"}]}),
        ))
        .unwrap();
        let created = pods_policy
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
            .ok()?;
        (annotation(&created, "injector/status") == Some("injected")).then_some(())
    })
    .await;

    let pods_webhook = ctx.api::<Pod>();
    for case in cases() {
        let name = case["metadata"]["name"].as_str().unwrap().to_owned();
        let pod: Pod = serde_json::from_value(case).unwrap();
        let through_webhook = pods_webhook
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("{name} through the webhook: {e}"));
        let through_policy = pods_policy
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("{name} through the policies: {e}"));
        // Both injected (a copied manifest: left as it came), so equal says something.
        assert_eq!(
            annotation(&through_webhook, "injector/status"),
            Some("injected"),
            "{name}"
        );
        let spec = through_webhook.spec.as_ref().unwrap();
        let injected = spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len);
        assert_eq!(
            injected == 1,
            name == "copied",
            "{name}: {injected} containers"
        );
        if name == "account" {
            let spec = through_webhook.spec.as_ref().unwrap();
            assert_eq!(spec.service_account_name.as_deref(), Some("secrets-agent"));
            let volumes: Vec<&str> = spec
                .volumes
                .iter()
                .flatten()
                .map(|v| v.name.as_str())
                .collect();
            assert!(
                !volumes.iter().any(|v| v.starts_with("default-token-")),
                "{volumes:?}"
            );
        }
        let grown = match name.as_str() {
            "pod-level" => Some(json!({"requests": {"cpu": "515m", "memory": "288Mi"},
                                       "limits": {"cpu": "1015m", "memory": "576Mi"}})),
            "pod-level-native" => Some(json!({"requests": {"cpu": "1020m", "memory": "144Mi"}})),
            "pod-level-limits" => {
                Some(json!({"requests": {"cpu": "505m"}, "limits": {"cpu": "1005m"}}))
            }
            _ => None,
        };
        if let Some(grown) = grown {
            let resources = serde_json::to_value(&spec.resources).unwrap();
            assert_eq!(resources, grown, "{name}: the pod-level figures");
        }
        let (webhook, policy) = (comparable(&through_webhook), comparable(&through_policy));
        assert_eq!(
            webhook, policy,
            "{name}: stored differently\n--- webhook\n{webhook:#}\n--- policy\n{policy:#}"
        );
    }

    // Both refuse a request for a sidecar no config defines, and a container named as one a
    // requested sidecar injects.
    for (request, container) in [
        ("nope:v1", "app"),
        ("logger:v1", "log-shipper"),
        ("vault:v1", "vault-init"),
        // Two sidecars that inject a container of the same name.
        ("logger:v1,logger:v2", "app"),
    ] {
        let pod: Pod = serde_json::from_value(pod(
            "refused",
            request,
            json!({"containers": [{"name": container, "image": "app:1"}]}),
        ))
        .unwrap();
        for (path, pods) in [("webhook", &pods_webhook), ("policy", &pods_policy)] {
            let refused = pods.create(&PostParams::default(), &pod).await;
            assert!(
                refused.is_err(),
                "{path} let {request} with {container} through: {refused:?}"
            );
        }
    }

    // A config the policies cannot express is refused, with its reason, and nothing printed.
    let native = tempfile::tempdir().unwrap();
    std::fs::write(
        native.path().join("native.yaml"),
        "name: native:v1\nnativeSidecars: auto\ncontainers: [{name: n, image: n}]\n",
    )
    .unwrap();
    let refused = policy_command(&["--config-directory", native.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(refused.stdout.is_empty());
    assert!(
        stderr.contains("policy: cannot inject native:v1 (")
            && stderr.contains("nativeSidecars: auto: the form follows the nodes' kubelets"),
        "{stderr}"
    );
    let _ = kubectl(
        &[
            "delete",
            "-f",
            "-",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        &[],
        &list.to_string(),
    );
}
