//! `deploy/`: rendered with kustomize, dry-run on the server, and its RBAC is enough.

use super::*;

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
    // policy-mode: no webhook configuration, no certificate, no TLS port; the injector keeps
    // the policies, and may write only those of its name.
    let policy_mode = kustomize("deploy/overlays/policy-mode");
    assert!(
        !policy_mode
            .iter()
            .any(|d| d["kind"] == "MutatingWebhookConfiguration"),
        "no webhook configuration in policy mode"
    );
    let pod_spec = &of_kind(&policy_mode, "Deployment")["spec"]["template"]["spec"];
    let container = &pod_spec["containers"][0];
    assert!(pod_spec.get("volumes").is_none(), "{pod_spec}");
    assert_eq!(
        container["ports"],
        json!([{"name": "lifecycle", "containerPort": 9000}])
    );
    let args = container["args"].as_array().unwrap();
    assert!(
        !args.iter().any(|a| {
            let a = a.as_str().unwrap();
            a.starts_with("--webhook-configuration") || a.starts_with("--ca-bundle-file")
        }),
        "{args:?}"
    );
    let env = container["env"].as_array().unwrap();
    for (name, value) in [
        ("INJECTION", "policy"),
        (
            "NAMESPACE_SELECTOR",
            "sidecar-injector.io/injection!=disabled",
        ),
    ] {
        assert!(
            env.iter().any(|e| e["name"] == name && e["value"] == value),
            "{env:?}"
        );
    }
    let policy_role = policy_mode
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRole" && d["metadata"]["name"] == "sidecar-injector-policies"
        })
        .expect("the policies' ClusterRole");
    assert_eq!(
        policy_role["rules"][0]["resourceNames"],
        json!(["sidecar-injector"])
    );
    // cert-manager: a CA of its own signs the serving certificate into the Secret the
    // Deployment mounts, so that renewing it keeps the caBundle; the injector is the only
    // writer of the caBundle (no CA injector annotation), as in the base.
    let cert_manager = kustomize("deploy/overlays/cert-manager");
    let named = |kind: &str, name: &str| {
        cert_manager
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
    };
    let serving = named("Certificate", "sidecar-injector-serving");
    assert_eq!(
        serving["spec"]["secretName"],
        of_kind(&base, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
    );
    let issuer = named(
        "Issuer",
        serving["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    let ca = cert_manager
        .iter()
        .find(|d| {
            d["kind"] == "Certificate"
                && d["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
        })
        .expect("the serving certificate's issuer is a CA whose certificate cert-manager makes");
    assert_eq!(ca["spec"]["isCA"], true);
    let root = named("Issuer", ca["spec"]["issuerRef"]["name"].as_str().unwrap());
    assert!(root["spec"]["selfSigned"].is_object(), "{root}");
    let webhook_configuration = of_kind(&cert_manager, "MutatingWebhookConfiguration");
    assert!(
        webhook_configuration["metadata"]["annotations"]
            .get("cert-manager.io/inject-ca-from")
            .is_none(),
        "{webhook_configuration}"
    );
    assert!(
        of_kind(&cert_manager, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
            .to_string()
            .contains("--webhook-configuration=sidecar-injector")
    );

    // No caBundle in the manifests (the injector keeps it), so a re-apply cannot reset it; the
    // injector's namespace is excluded by a label the manifests set, on every version.
    let webhook = &of_kind(&base, "MutatingWebhookConfiguration")["webhooks"][0];
    assert!(
        webhook["clientConfig"].get("caBundle").is_none(),
        "{webhook}"
    );
    assert_eq!(
        of_kind(&base, "Namespace")["metadata"]["labels"]["sidecar-injector.io/injection"],
        "disabled"
    );
    assert!(
        webhook["namespaceSelector"]["matchExpressions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["key"] == "sidecar-injector.io/injection" && e["values"][0] == "disabled"),
        "{webhook}"
    );
    let args = of_kind(&base, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .to_string();
    assert!(
        args.contains("--webhook-configuration=sidecar-injector"),
        "{args}"
    );

    // The PodDisruptionBudget, against the Deployment it protects: policy/v1.
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

    // deploy/ applied for real, server-side, with strict field validation: the API server
    // accepts every object and field as written (a field it does not know is an error, not a
    // warning). Other tests on this control plane create and delete deploy/'s cluster-wide
    // objects under their own names: here those are renamed, and the webhook selects no
    // namespace, so that it never stands in the way of another test's pods.
    let kubectl = |args: &[&str], input: &str| {
        let output = kubectl(args, &[("KUBECONFIG", plane.kubeconfig.as_os_str())], input);
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let yaml = |docs: &[Value]| {
        docs.iter()
            .map(|d| serde_yaml::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n")
    };
    for (dir, suffix) in [
        ("deploy", "e2e-apply"),
        ("deploy/overlays/matchconditions", "e2e-apply-mc"),
        ("deploy/overlays/policy-mode", "e2e-apply-pm"),
    ] {
        let renamed: Vec<Value> = kustomize(dir)
            .into_iter()
            .map(|mut d| {
                if d["metadata"].get("namespace").is_none() && d["kind"] != "Namespace" {
                    let name = format!("{}-{suffix}", d["metadata"]["name"].as_str().unwrap());
                    d["metadata"]["name"] = json!(name);
                }
                if d["roleRef"]["kind"] == "ClusterRole" {
                    let role = format!("{}-{suffix}", d["roleRef"]["name"].as_str().unwrap());
                    d["roleRef"]["name"] = json!(role);
                }
                if d["kind"] == "MutatingWebhookConfiguration" {
                    for webhook in d["webhooks"].as_array_mut().unwrap() {
                        webhook["namespaceSelector"] =
                            json!({"matchLabels": {"sidecar-injector-e2e": "nothing"}});
                    }
                }
                d
            })
            .collect();
        let applied = kubectl(
            &[
                "apply",
                "--server-side",
                "--field-manager=e2e",
                "--force-conflicts",
                "--validate=strict",
                "-f",
                "-",
            ],
            &yaml(&renamed),
        );
        assert_eq!(
            applied
                .lines()
                .filter(|l| l.contains("serverside-applied"))
                .count(),
            renamed.len(),
            "{dir}: {applied}"
        );
        // Applied again, nothing changes.
        let again = kubectl(
            &[
                "apply",
                "--server-side",
                "--field-manager=e2e",
                "--validate=strict",
                "-f",
                "-",
            ],
            &yaml(&renamed),
        );
        assert_eq!(
            again
                .lines()
                .filter(|l| l.contains("serverside-applied"))
                .count(),
            renamed.len(),
            "{dir}: {again}"
        );
    }
    // A field the server does not know is refused under the same validation: the check is real.
    let mut wrong = of_kind(&base, "ConfigMap").clone();
    wrong["metadata"]["name"] = json!("e2e-apply-unknown-field");
    wrong["spec"] = json!({"notAField": true});
    let output = support::e2e::kubectl(
        &["apply", "--server-side", "--validate=strict", "-f", "-"],
        &[("KUBECONFIG", plane.kubeconfig.as_os_str())],
        &serde_yaml::to_string(&wrong).unwrap(),
    );
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(".spec: field not declared in schema"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_injector_runs_on_the_rbac_of_deploy_and_nothing_more() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    // deploy/'s webhook configuration, without a caBundle and sent nothing (no namespace
    // carries the label it selects): the injector, on deploy/'s RBAC, fills the caBundle.
    let client = support::cluster::client().await;
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut manifest = of_kind(&kustomize("deploy"), "MutatingWebhookConfiguration").clone();
    manifest["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"sidecar-injector-e2e": "nothing"}});
    let _ = configurations
        .delete("sidecar-injector", &Default::default())
        .await;
    configurations
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest).unwrap(),
        )
        .await
        .unwrap();
    let ctx = TestContext::with_deploy_rbac(
        "rbac",
        &[
            "--configmap-namespace",
            "e2e-rbac",
            "--configmap-labels",
            "sidecar-injector.io/config=true",
            "--webhook-configuration",
            "sidecar-injector",
            "--ca-bundle-file",
            "ca.crt",
        ],
    )
    .await;
    let ca = ctx.certs.ca_pem.clone().into_bytes();
    let new_ca = || {
        sidecar_injector::serve::tls::DevCertificates::generate(&["localhost".into()])
            .unwrap()
            .ca_pem
            .into_bytes()
    };
    bundle_becomes(&configurations, &ca, "the injector sets the caBundle").await;
    // Another replica already on the CA of a rotated Secret sets its own: this one, still on
    // the old CA, adds its CA after it instead of putting its own back (which the other would
    // undo in turn), so that the API server trusts both replicas while the rotation lasts.
    let rotated = new_ca();
    set_bundle(&configurations, &rotated).await;
    let both = [ca.clone(), rotated].concat();
    let what = "the injector adds its CA after the rotated one";
    bundle_becomes(&configurations, &both, what).await;
    // Blanked, as a re-apply of an older manifest would: set again at once, from the watch.
    set_bundle(&configurations, b"").await;
    bundle_becomes(&configurations, &ca, "the injector sets the caBundle again").await;
    // ca.crt alone changes (a new CA beside the old one, the pair unchanged): followed too.
    // The file is replaced in one rename, as a Secret volume swaps its files.
    // The log is read from the process's stderr as it comes.
    const RELOADED: &str = "serving certificate reloaded";
    let serving = ctx.injector.as_ref().unwrap();
    let reloaded_since = |before: usize| {
        eventually(DEADLINE, "the reload logged", move || async move {
            let logs = serving.logs().split_off(before);
            logs.iter()
                .any(|line| line.contains(RELOADED))
                .then_some(logs)
        })
    };
    let before = serving.logs().len();
    let both = [new_ca(), ca.clone()].concat();
    let staged = ctx.dir().join("ca.crt.next");
    std::fs::write(&staged, &both).unwrap();
    std::fs::rename(&staged, ctx.dir().join("ca.crt")).unwrap();
    bundle_becomes(
        &configurations,
        &both,
        "the injector trusts both CAs of its ca.crt",
    )
    .await;
    // The pair is reloaded with it: that reload must be over before the next step reads the
    // log for its own.
    reloaded_since(before).await;
    // A rotation in one step: a pair from a new CA, with that CA as ca.crt. The new pair is
    // served only once the caBundle trusts its CA, so the first handshake the new CA verifies
    // finds it there (the API server would otherwise refuse the replica until it was).
    let next = sidecar_injector::serve::tls::DevCertificates::generate(&[
        "127.0.0.1".into(),
        "localhost".into(),
    ])
    .unwrap();
    let before = serving.logs().len();
    for (name, text) in [
        ("ca.crt", &next.ca_pem),
        ("tls.key", &next.key_pem),
        ("tls.crt", &next.cert_pem),
    ] {
        let staged = ctx.dir().join(format!("{name}.next"));
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, ctx.dir().join(name)).unwrap();
    }
    let trusting_next = support::https::TlsClient::new(&[next.ca_pem.as_bytes()]);
    let deadline = std::time::Instant::now() + DEADLINE;
    while trusting_next.connect_tls(serving.tls).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the new pair not served within {DEADLINE:?}"
        );
    }
    let configuration = configurations.get("sidecar-injector").await.unwrap();
    let bundle = configuration.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .unwrap()
        .0;
    assert!(
        bundle.starts_with(next.ca_pem.as_bytes()),
        "the new pair was served before the caBundle trusted its CA"
    );
    let logs = reloaded_since(before).await;
    let first = |needle: &str| {
        logs.iter()
            .position(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in {logs:#?}"))
    };
    assert!(
        first("caBundle now trusts this replica's CA") < first(RELOADED),
        "the certificate was reloaded before the caBundle trusted its CA: {logs:#?}"
    );
    // A second replica on a CA of its own (a Secret copy the kubelet has not refreshed yet):
    // the caBundle comes to trust both replicas, and neither takes the other's CA out again.
    let other_dir = tempfile::tempdir().unwrap();
    let other_certs = sidecar_injector::serve::tls::DevCertificates::generate(&[
        "127.0.0.1".into(),
        "localhost".into(),
    ])
    .unwrap();
    other_certs.write(other_dir.path()).unwrap();
    let other = ctx.start_replica_in(other_dir.path());
    let both_trusted = eventually(DEADLINE, "the caBundle trusts both replicas", || async {
        let configuration = configurations.get("sidecar-injector").await.ok()?;
        let bundle = configuration.webhooks?[0]
            .client_config
            .ca_bundle
            .clone()?
            .0;
        let trusts = |pem: &str| {
            let wanted = pem.trim().as_bytes();
            bundle.windows(wanted.len()).any(|w| w == wanted)
        };
        (trusts(&other_certs.ca_pem) && trusts(&next.ca_pem))
            .then(|| (bundle, configuration.metadata.resource_version.unwrap()))
    })
    .await;
    let (bundle, version) = both_trusted;
    let trusting_bundle = support::https::TlsClient::new(&[&bundle]);
    for (replica, tls) in [("first", serving.tls), ("second", other.tls)] {
        eventually(
            DEADLINE,
            &format!("the {replica} replica's handshake verifies against the caBundle"),
            || async { trusting_bundle.connect_tls(tls).await.ok().map(drop) },
        )
        .await;
    }
    // Then nobody writes it again: a watch the API server closes after 5 s sees no change
    // (replicas that each put their own CA back would write it in turn, without end).
    let params = kube::api::WatchParams::default()
        .fields("metadata.name=sidecar-injector")
        .timeout(5);
    let changes: Vec<String> = {
        use futures::{StreamExt, TryStreamExt};
        configurations
            .watch(&params, &version)
            .await
            .unwrap()
            .try_filter_map(|event| async move {
                Ok(match event {
                    kube::api::WatchEvent::Modified(c) => Some(format!(
                        "resourceVersion {}: a caBundle of {} bytes",
                        c.metadata.resource_version.unwrap_or_default(),
                        c.webhooks.unwrap_or_default()[0]
                            .client_config
                            .ca_bundle
                            .as_ref()
                            .map_or(0, |b| b.0.len())
                    )),
                    _ => None,
                })
            })
            .take(3)
            .try_collect()
            .await
            .unwrap()
    };
    assert!(
        changes.is_empty(),
        "the caBundle is written again and again by the two replicas: {changes:#?}"
    );
    drop(other);
    configurations
        .delete("sidecar-injector", &Default::default())
        .await
        .unwrap();
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

/// Sets the first webhook's caBundle of `sidecar-injector`, as another writer would.
async fn set_bundle(
    configurations: &Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>,
    bundle: &[u8],
) {
    let patch = json!([{
        "op": "replace",
        "path": "/webhooks/0/clientConfig/caBundle",
        "value": k8s_openapi::ByteString(bundle.to_vec()),
    }]);
    configurations
        .patch(
            "sidecar-injector",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap();
}

/// Waits until the first webhook's caBundle of `sidecar-injector` is `expected`.
async fn bundle_becomes(
    configurations: &Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>,
    expected: &[u8],
    what: &str,
) {
    eventually(DEADLINE, what, || async {
        let configuration = configurations.get("sidecar-injector").await.ok()?;
        let bundle = configuration.webhooks?[0].client_config.ca_bundle.clone()?;
        (bundle.0 == expected).then_some(())
    })
    .await;
}
