//! `serve --injection=policy`: no webhook, the API server injects through the policies the
//! injector keeps equal to the configs in force; the rollout engine works as with the webhook,
//! and a cluster switched from one path to the other (and back) injects every pod once.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};

use super::*;

/// `serve` flags of a test whose injector keeps the policies `name`, bound to its namespace.
fn policy_flags(namespace: &str) -> Vec<&str> {
    vec![
        "--injection=policy",
        "--namespace-selector",
        // The selector's text, leaked for the flags' life: the test's namespace, unless it is
        // labelled off.
        Box::leak(
            format!("sidecar-injector-e2e={namespace},sidecar-injector-e2e-off!=yes")
                .into_boxed_str(),
        ),
        "--policy-name",
        namespace,
    ]
}

fn mutating_policies(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "MutatingAdmissionPolicy".into(),
        plural: "mutatingadmissionpolicies".into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// The MutatingAdmissionPolicy `name` as JSON text, when it exists.
async fn policy_text(client: &kube::Client, name: &str) -> Option<String> {
    let policy = mutating_policies(client).get_opt(name).await.ok()??;
    Some(serde_json::to_value(policy).unwrap().to_string())
}

/// Waits until the MutatingAdmissionPolicy `name` stamps the revision of `stamp`; returns it.
async fn wait_policy_stamps(client: &kube::Client, name: &str, stamp: &str) -> Value {
    let revision = stamp.split('=').nth(1).unwrap().to_owned();
    let policies = mutating_policies(client);
    eventually(
        DEADLINE,
        &format!("the policy {name} stamps {stamp}"),
        || async {
            let policy = policies.get_opt(name).await.ok()??;
            let policy = serde_json::to_value(policy).unwrap();
            policy.to_string().contains(&revision).then_some(policy)
        },
    )
    .await
}

/// Waits until the API server injects `stamp` into a pod it is asked to create (a dry run):
/// it enforces a policy a moment after it stored it.
async fn wait_enforced(pods: &Api<Pod>, stamp: &str) {
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "annotations": {"injector/request": "tracer:v1"}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    }))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(
        DEADLINE,
        &format!("the API server injects {stamp}"),
        || async {
            let pod = pods.create(&dry_run, &probe).await.ok()?;
            (annotation(&pod, "injector/revision") == Some(stamp)).then_some(())
        },
    )
    .await;
}

fn tracer_containers(pod: &Pod) -> usize {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| c.name == "tracer")
        .count()
}

/// Before 1.36 the API server serves no MutatingAdmissionPolicy: `serve --injection=policy`
/// says so at start and exits, having written nothing.
fn policy_mode_is_refused_before_1_36() {
    let kubeconfig = support::cluster::control_plane().kubeconfig.clone();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args([
            "serve",
            "--injection=policy",
            "--rollout=off",
            "--lifecycle-port",
            "0",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "--injection=policy needs an API server that serves MutatingAdmissionPolicy \
             (admissionregistration.k8s.io/v1, Kubernetes 1.36 or later), and this one (v1."
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configmap_edit_rolls_out_under_injection_policy_with_no_webhook() {
    if support::cluster::server_minor() < 36 {
        policy_mode_is_refused_before_1_36();
        return;
    }
    let ns = "e2e-policy-rollout";
    let mut flags = policy_flags(ns);
    // A settle that leaves the API server time to compile the new policy on a busy machine:
    // beside the other tests' large policies it took over 10 s (5 s of settle failed).
    flags.extend([
        "--rollout=auto",
        "--settle",
        "15s",
        "--rollout-timeout",
        "15s",
        // web is restarted twice: for v2, then as the canary of a broken revision.
        "--cooldown",
        "0s",
    ]);
    let mut ctx = engine_context("policy-rollout", &flags).await;
    let injector = ctx.injector.as_ref().unwrap();
    // No webhook: no configuration calls it, and it serves no TLS port.
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(ctx.client.clone());
    assert!(
        webhooks
            .get_opt(&format!("sidecar-injector-{ns}"))
            .await
            .unwrap()
            .is_none()
    );
    let listening = logged(injector, "listening");
    assert!(
        injector
            .logs()
            .iter()
            .any(|l| l.contains("\"listening\"") && l.contains("\"injection\":\"policy\"")),
        "{listening:?}"
    );
    let v1 = stamp_of(TRACER_V1);
    let policy = wait_policy_stamps(&ctx.client, ns, &v1).await;
    assert_eq!(
        policy["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "sidecar-injector"
    );
    let managers: Vec<&Value> = policy["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["manager"])
        .collect();
    assert_eq!(managers, [&json!("sidecar-injector")], "{policy}");
    wait_enforced(&ctx.api(), &v1).await;

    create_deployment(&ctx, "web", 2, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 2, &v1, DEADLINE).await;
    for pod in pods_of(&ctx, "web").await {
        assert_eq!(tracer_containers(&pod), 1, "{:?}", pod.metadata.name);
    }

    // The edit: the policies follow, and the engine restarts web once onto them.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_policy_stamps(&ctx.client, ns, &v2).await;
    wait_pods_at(&ctx, "web", 2, &v2, Duration::from_secs(120)).await;
    assert_eq!(replicaset_count(&ctx, "web").await, 2, "web rolled once");
    for pod in pods_of(&ctx, "web").await {
        let spec = pod.spec.as_ref().unwrap();
        let tracer = spec.containers.iter().find(|c| c.name == "tracer").unwrap();
        assert_eq!(tracer.image.as_deref(), Some("tracer:2"));
        assert_eq!(tracer_containers(&pod), 1);
    }
    let events = events_for(&ctx, "web", "SidecarRestart").await;
    assert_eq!(events.len(), 1, "{events:?}");
    // drift reads the pods as with the webhook: all current.
    let report = drift_report(&scope_args(ns));
    let tracer = sidecar_row(&report, "tracer:v1");
    assert_eq!(tracer["pods"]["current"], 2, "{tracer}");
    assert_eq!(tracer["pods"]["stale"], 0, "{tracer}");

    // A config the policies cannot express never replaces the one in force: the ConfigMap
    // says why, the policy keeps v2, and new pods get v2 with no restart.
    let auto =
        "name: tracer:v1\nnativeSidecars: auto\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", auto).await;
    let warning = eventually(DEADLINE, "the ConfigMap's Warning Event", || async {
        events_for(&ctx, "tracing", "InvalidSidecarConfig")
            .await
            .into_iter()
            .find(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("not in policy mode"))
            })
    })
    .await;
    assert!(
        warning
            .message
            .as_deref()
            .unwrap()
            .contains("nativeSidecars: auto"),
        "{warning:?}"
    );
    eventually(DEADLINE, "the source counted failing", || async {
        (injector.metric("sidecar_injector_config_source_failing{source=\"configmap\"}") == 1.0)
            .then_some(())
    })
    .await;
    let policy = policy_text(&ctx.client, ns).await.unwrap();
    assert!(policy.contains(v2.split('=').nth(1).unwrap()));
    assert!(!policy.contains("tracer:3"));
    ctx.api::<Deployment>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    wait_pods_at(&ctx, "web", 3, &v2, DEADLINE).await;
    assert_eq!(replicaset_count(&ctx, "web").await, 2, "no restart for it");

    // A revision that fails its canary: the campaign pauses, and the policies serve the held
    // revision v2 again, so new pods get it.
    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let v3 = stamp_of(broken);
    wait_policy_stamps(&ctx.client, ns, &v3).await;
    wait_campaign_paused(injector, "tracer:v1").await;
    eventually(DEADLINE, "the policy serves the held revision", || async {
        let policy = policy_text(&ctx.client, ns).await?;
        (policy.contains(v2.split('=').nth(1).unwrap()) && !policy.contains("tracer:broken"))
            .then_some(())
    })
    .await;
    wait_enforced(&ctx.api(), &v2).await;
    create_deployment(&ctx, "fresh", 1, template("fresh", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "fresh", 1, &v2, DEADLINE).await;

    // A restarted replica rewrites nothing before it has read every source: the policy in
    // force is not replaced by one of the directory's configs alone, even for a moment.
    let generation = |policy: DynamicObject| policy.metadata.generation;
    let before = generation(mutating_policies(&ctx.client).get(ns).await.unwrap());
    ctx.restart_injector().await;
    let restarted = ctx.injector.as_ref().unwrap();
    eventually(DEADLINE, "the restarted injector is ready", || async {
        (restarted.lifecycle_get("/ready").0 == 200).then_some(())
    })
    .await;
    let after = generation(mutating_policies(&ctx.client).get(ns).await.unwrap());
    assert_eq!(before, after, "the policy was rewritten by the restart");

    // --namespace-selector: a namespace the bindings leave out is not injected.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(ctx.client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sidecar-injector-e2e-off": "yes"}}})),
        )
        .await
        .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "annotations": {"injector/request": "tracer:v1"}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    }))
    .unwrap();
    eventually(DEADLINE, "the policies leave the namespace out", || async {
        let pod = ctx.api::<Pod>().create(&dry_run, &probe).await.ok()?;
        annotation(&pod, "injector/status").is_none().then_some(())
    })
    .await;
}

/// Pods created one after another, each asking for tracer:v1, until told to stop; the names
/// of those the API server took.
fn create_pods_until_stopped(
    pods: Api<Pod>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut created = Vec::new();
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            n += 1;
            let name = format!("switch-{n}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": {"injector/request": "tracer:v1"}},
                "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
            }))
            .unwrap();
            if pods.create(&PostParams::default(), &pod).await.is_ok() {
                created.push(name);
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        created
    })
}

async fn pod_count(pods: &Api<Pod>) -> usize {
    pods.list(&ListParams::default()).await.unwrap().items.len()
}

/// Waits until `n` more pods exist than now.
async fn more_pods(pods: &Api<Pod>, n: usize) {
    let from = pod_count(pods).await;
    eventually(DEADLINE, &format!("{n} more pods created"), || async {
        (pod_count(pods).await >= from + n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn switching_from_webhook_to_policies_and_back_injects_every_new_pod_exactly_once() {
    if support::cluster::server_minor() < 36 {
        eprintln!("policy mode needs Kubernetes 1.36: its refusal is checked by the test above");
        return;
    }
    let ns = "e2e-policy-switch";
    let mut ctx = TestContext::with_deploy_rbac("policy-switch", &scope_args(ns)).await;
    support::cluster::install_policy_rbac(&ctx.client, ns, ns).await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V1).await;
    let v1 = stamp_of(TRACER_V1);
    wait_in_force(ctx.injector.as_ref().unwrap(), v1.clone(), true).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = create_pods_until_stopped(ctx.api(), stop.clone());
    let pods = ctx.api::<Pod>();
    let mut phases: Vec<(&str, usize)> = Vec::new();
    more_pods(&pods, 5).await;
    phases.push(("webhook", pod_count(&pods).await));

    // To policies: a policy-mode replica beside the webhook, then the webhook removed.
    // The policies also reach a namespace of their own, which the webhook does not: a dry run
    // there tells when the API server enforces them.
    let probe_ns = "e2e-policy-switch-probe";
    create(
        &Api::<k8s_openapi::api::core::v1::Namespace>::all(ctx.client.clone()),
        json!({"metadata": {"name": probe_ns, "labels": {"sidecar-injector-e2e": probe_ns}}}),
    )
    .await;
    let selector = format!("sidecar-injector-e2e in ({ns},{probe_ns})");
    let flags = [
        "--injection=policy",
        "--namespace-selector",
        &selector,
        "--policy-name",
        ns,
        "--rollout=off",
    ];
    let policy_injector = ctx.start_replica_with(&flags);
    // Ready once its policies are written (what the rollout of the policy-mode Deployment waits
    // for), and enforced a moment later.
    eventually(DEADLINE, "the policy-mode replica is ready", || async {
        (policy_injector.lifecycle_get("/ready").0 == 200).then_some(())
    })
    .await;
    wait_policy_stamps(&ctx.client, ns, &v1).await;
    wait_enforced(&Api::namespaced(ctx.client.clone(), probe_ns), &v1).await;
    more_pods(&pods, 5).await;
    phases.push(("both", pod_count(&pods).await));
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(ctx.client.clone());
    webhooks
        .delete(&format!("sidecar-injector-{ns}"), &Default::default())
        .await
        .unwrap();
    ctx.stop_injector();
    more_pods(&pods, 5).await;
    phases.push(("policies", pod_count(&pods).await));

    // And back: the webhook first, then the policy-mode replica stopped and its policies
    // deleted, as docs/policy-mode.md says.
    ctx.start_webhook_again().await;
    let webhook = ctx.injector.as_ref().unwrap();
    eventually(
        DEADLINE,
        "the API server calls the webhook again",
        || async {
            (webhook.metric("sidecar_injector_admission_requests_total{result=\"skipped\"}")
                + webhook.metric("sidecar_injector_admission_requests_total{result=\"injected\"}")
                >= 1.0)
                .then_some(())
        },
    )
    .await;
    let replica_log: Vec<String> = policy_injector
        .logs()
        .into_iter()
        .filter(|l| l.contains("policies") || l.contains("ready"))
        .collect();
    drop(policy_injector);
    let kubeconfig = support::cluster::control_plane().kubeconfig.clone();
    let kinds = [
        "mutatingadmissionpolicybinding",
        "mutatingadmissionpolicy",
        "validatingadmissionpolicybinding",
        "validatingadmissionpolicy",
    ];
    let mut args: Vec<String> = kinds.iter().map(|k| format!("{k}/{ns}")).collect();
    args.extend([
        "--kubeconfig".to_owned(),
        kubeconfig.to_str().unwrap().to_owned(),
    ]);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.insert(0, "delete");
    let deleted = kubectl(&args, &[], "");
    assert!(deleted.status.success(), "{deleted:?}");
    more_pods(&pods, 5).await;
    phases.push(("webhook again", pod_count(&pods).await));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let created = creator.await.unwrap();

    // Every pod the API server took carries tracer exactly once, stamped v1.
    let mut wrong = Vec::new();
    for name in &created {
        let pod = pods.get(name).await.unwrap();
        let stamped = annotation(&pod, "injector/status") == Some("injected")
            && annotation(&pod, "injector/revision") == Some(v1.as_str());
        if tracer_containers(&pod) != 1 || !stamped {
            wrong.push(format!(
                "{name} (created {:?}): {} tracer container(s), annotations {:?}",
                pod.metadata.creation_timestamp,
                tracer_containers(&pod),
                pod.metadata.annotations
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} pods not injected exactly once (pods by the end of each phase: {phases:?}):\n{}\nthe policy-mode replica:\n{}",
        wrong.len(),
        created.len(),
        wrong.join("\n"),
        replica_log.join("\n")
    );
    assert!(created.len() >= 20, "{} pods", created.len());
}
