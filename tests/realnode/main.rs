//! End-to-end on a real node: the injector image built by scripts/image, installed by
//! `kubectl apply -k` of a test overlay of deploy/ (2 replicas, its own ServiceAccount and
//! RBAC, called by the API server through its Service), and real containers run by a real
//! kubelet and containerd, with real readiness probes.
#![allow(clippy::too_many_lines)] // a test reads as one scenario

mod node;
mod resize;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerState, ContainerStatus, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use node::{client, eventually, helm_ok, injector_command, kubectl_ok, node, realnode};

const INSTALL: Duration = Duration::from_secs(180);
const DEADLINE: Duration = Duration::from_secs(120);
const SYSTEM: &str = "injector-system";
const TEAM: &str = "team";

fn shipper(version: &str) -> String {
    format!(
        r#"name: shipper:v1
containers:
  - name: shipper
    image: localhost/busybox:1.35
    imagePullPolicy: Never
    command: ["sh", "-c", "echo shipper {version}; exec sleep 100000"]
    readinessProbe: {{exec: {{command: ["true"]}}, periodSeconds: 2}}
volumes:
  - name: shared-logs
    emptyDir: {{}}
env:
  - name: SHIPPER_ENDPOINT
    value: http://127.0.0.1:2020
volumeMounts:
  - name: shared-logs
    mountPath: /var/log/app
"#
    )
}

/// A Deployment of busybox whose app is Ready (a real exec probe) once it has written what
/// it sees of the sidecar's env and volume.
fn deployment(name: &str, replicas: i32, request: Option<&str>) -> Deployment {
    let annotations = request.map_or(json!({}), |r| json!({"injector/request": r}));
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "app",
                        "image": "localhost/busybox:1.35",
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c",
                            "echo \"$SHIPPER_ENDPOINT\" > /tmp/endpoint; test -d /var/log/app && echo mounted > /tmp/volume; touch /tmp/ready; exec sleep 100000"],
                        "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1},
                    }],
                },
            },
        },
    }))
    .unwrap()
}

async fn pods_of(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn stamp(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get("injector/revision")
        .map(String::as_str)
}

/// Names of the containers the kubelet reports running and ready.
fn running(pod: &Pod) -> BTreeSet<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|statuses| {
            statuses
                .iter()
                .filter(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
                .map(|c| c.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `app` has exactly `count` pods, each Ready with `containers` running, and
/// (when given) stamped with a revision containing `revision`; returns them.
async fn wait_running(
    pods: &Api<Pod>,
    app: &str,
    count: usize,
    containers: &[&str],
    revision: Option<&str>,
) -> Vec<Pod> {
    let wanted: BTreeSet<String> = containers.iter().map(|c| (*c).to_owned()).collect();
    eventually(
        DEADLINE,
        &format!("{app}: {count} Ready pods running {containers:?} at {revision:?}"),
        || async {
            let list = pods_of(pods, app).await;
            (list.len() == count
                && list.iter().all(|p| {
                    ready(p)
                        && running(p) == wanted
                        && revision.is_none_or(|r| stamp(p).is_some_and(|s| s.contains(r)))
                }))
            .then_some(list)
        },
    )
    .await
}

async fn replicasets_of(client: &kube::Client, app: &str) -> usize {
    Api::<ReplicaSet>::namespaced(client.clone(), TEAM)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| l.items.len())
        .unwrap_or_default()
}

/// Whether the engine restarted `name` once more to heal pods created while the webhook was
/// bypassed (the API server restart or the holder's kill can fall inside a rollout).
async fn healed(deployments: &Api<Deployment>, name: &str) -> bool {
    let Ok(d) = deployments.get(name).await else {
        return false;
    };
    let template = d.spec.and_then(|s| s.template.metadata).unwrap_or_default();
    template
        .annotations
        .unwrap_or_default()
        .contains_key("injector/rollout-heal")
}

/// What to read when a workload was restarted more often than expected: each ReplicaSet's
/// template stamps (`rollout-heal` says the engine healed pods created past the webhook), and
/// the injectors' log lines about the workload.
async fn restarts_explained(client: &kube::Client, app: &str) -> String {
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), TEAM)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut said = String::new();
    for set in sets {
        let annotations = set
            .spec
            .and_then(|s| s.template)
            .and_then(|t| t.metadata)
            .and_then(|m| m.annotations)
            .unwrap_or_default();
        let stamps: Vec<String> = annotations
            .iter()
            .filter(|(k, _)| k.starts_with("injector/rollout"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        said += &format!(
            "ReplicaSet {} created {:?}: {stamps:?}\n",
            set.metadata.name.unwrap_or_default(),
            set.metadata.creation_timestamp.map(|t| t.0.to_string())
        );
    }
    for line in injector_logs(&["--tail=400", "--prefix"]).lines() {
        if line.contains(app) || line.contains("uninjected") || line.contains("heal") {
            said += line;
            said.push('\n');
        }
    }
    said
}

/// The injector replicas' logs (`kubectl logs -l app=sidecar-injector` with `options`),
/// whatever kubectl's exit status.
fn injector_logs(options: &[&str]) -> String {
    let mut args = vec!["-n", SYSTEM, "logs", "-l", "app=sidecar-injector"];
    args.extend_from_slice(options);
    String::from_utf8_lossy(&node::kubectl(&args).stdout).into_owned()
}

fn pod_names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// A labelled ConfigMap `name` holding one config: sidecar `{name}:v1`, a busybox container
/// `name` running `command`.
fn busybox_config(name: &str, command: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"sidecar-injector.io/config": "true"}},
        "data": {format!("{name}.yaml"): format!(
            "name: {name}:v1\ncontainers:\n  - name: {name}\n    image: localhost/busybox:1.35\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"{command}\"]\n"
        )},
    }))
    .unwrap()
}

/// Replaces the data of the ConfigMap named like `edited` with its data, as an operator's edit.
async fn edit(configmaps: &Api<ConfigMap>, edited: ConfigMap) {
    let name = edited.metadata.name.clone().unwrap();
    let mut current = configmaps.get(&name).await.unwrap();
    current.data = edited.data;
    configmaps
        .replace(&name, &PostParams::default(), &current)
        .await
        .unwrap();
}

/// Waits until both injector replicas publish a revision of `sidecar`.
async fn wait_both_publish(configmaps: &Api<ConfigMap>, sidecar: &str) {
    eventually(
        DEADLINE,
        &format!("both replicas publish {sidecar}"),
        || async {
            let status = configmaps.get("sidecar-injector-status").await.ok()?;
            let injectors: Value =
                serde_json::from_str(status.data.as_ref()?.get("injectors")?).ok()?;
            let publishing = injectors
                .as_object()?
                .values()
                .filter(|p| p["revisions"].get(sidecar).is_some())
                .count();
            (publishing == 2).then_some(())
        },
    )
    .await;
}

/// The identity holding the rollout Lease: the pod's name and the process id (1 in a
/// container).
fn lease_holder() -> String {
    kubectl_ok(&[
        "-n",
        SYSTEM,
        "get",
        "lease",
        "sidecar-injector-rollout",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .trim()
    .to_owned()
}

/// `sidecar-injector certs` into `dir`, for the injector's Service: the CA bundle it prints.
fn certs(dir: &std::path::Path) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("certs")
        .arg("--out-dir")
        .arg(dir)
        .args(["--dns-name", "sidecar-injector.injector-system.svc"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `kubectl create secret` of the serving pair `certs` wrote in `dir`, as the README says.
fn secret_args(dir: &std::path::Path) -> Vec<String> {
    [
        "-n",
        SYSTEM,
        "create",
        "secret",
        "generic",
        "sidecar-injector-tls",
        "--type=kubernetes.io/tls",
    ]
    .into_iter()
    .map(String::from)
    .chain(
        ["tls.crt", "tls.key", "ca.crt"]
            .map(|f| format!("--from-file={f}={}", dir.join(f).display())),
    )
    .collect()
}

/// `want` injector replicas, all available.
async fn injectors_available(client: &kube::Client, want: i32) -> Option<()> {
    let injectors: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM);
    let status = injectors.get("sidecar-injector").await.ok()?.status?;
    (status.available_replicas.unwrap_or(0) == want && status.replicas.unwrap_or(0) == want)
        .then_some(())
}

/// The webhook configuration's caBundle is `ca`.
async fn bundle_is(client: &kube::Client, ca: &[u8]) -> Option<()> {
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let c = configurations.get("sidecar-injector").await.ok()?;
    (c.webhooks?[0].client_config.ca_bundle.as_ref()?.0 == ca).then_some(())
}

/// Installs as the README says: deploy/ (the local image) through the test overlay, the Secret
/// made from `certs`, and nothing else by hand; returns once 2 replicas are available and the
/// caBundle is set. The folder holds the serving pair; the string is the CA bundle.
async fn install(client: &kube::Client) -> (tempfile::TempDir, String) {
    kubectl_ok(&["apply", "--validate=strict", "-k", "tests/realnode/overlay"]);
    let tls = tempfile::tempdir().unwrap();
    let ca_bundle = certs(tls.path());
    let args = secret_args(tls.path());
    kubectl_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    eventually(
        INSTALL,
        "2 injector replicas available (real probes)",
        || injectors_available(client, 2),
    )
    .await;
    let ca = std::fs::read(tls.path().join("ca.crt")).unwrap();
    eventually(DEADLINE, "the injectors set the caBundle", || {
        bundle_is(client, &ca)
    })
    .await;
    (tls, ca_bundle)
}

/// A namespace `name` made, once its default ServiceAccount exists (pods need it).
async fn team_namespace(client: &kube::Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    eventually(
        DEADLINE,
        &format!("the {name} namespace's default ServiceAccount"),
        || async {
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), name);
            accounts.get_opt("default").await.ok().flatten()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_injector_installed_by_kubectl_apply_k_injects_and_rolls_out_real_containers() {
    node();
    let client = client().await;

    let (tls, ca_bundle) = install(&client).await;
    let tls_file = |name: &str| tls.path().join(name).display().to_string();
    let secret_args = secret_args(tls.path());
    let injectors: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM);
    let available = |want: i32| injectors_available(&client, want);
    let ca = std::fs::read(tls.path().join("ca.crt")).unwrap();
    let bundle_set = || bundle_is(&client, &ca);

    // A Tumblr Deployment runs `command: ["entrypoint.sh"]`: the image resolves it on PATH to
    // the binary, which serves with the script's defaults (here it only prints serve's help).
    let tumblr: Pod = serde_json::from_value(json!({
        "metadata": {"name": "tumblr-entrypoint"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "injector", "image": "localhost/sidecar-injector:dev",
            "imagePullPolicy": "Never", "command": ["entrypoint.sh"], "args": ["--help"]}]},
    }))
    .unwrap();
    let system_pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    system_pods
        .create(&PostParams::default(), &tumblr)
        .await
        .unwrap();
    eventually(DEADLINE, "entrypoint.sh ran to completion", || async {
        let pod = system_pods.get("tumblr-entrypoint").await.ok()?;
        let phase = pod.status?.phase?;
        assert_ne!(phase, "Failed", "entrypoint.sh failed in the image");
        (phase == "Succeeded").then_some(())
    })
    .await;
    let help = kubectl_ok(&["-n", SYSTEM, "logs", "tumblr-entrypoint"]);
    assert!(help.contains("Run the admission webhook"), "{help}");

    // A sidecar from a ConfigMap, and a team namespace with a requesting and a plain workload.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM);
    let config = |version: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "shipper", "labels": {"sidecar-injector.io/config": "true"}},
            "data": {"shipper.yaml": shipper(version)},
        }))
        .unwrap()
    };
    configmaps
        .create(&PostParams::default(), &config("v1"))
        .await
        .unwrap();
    team_namespace(&client, TEAM).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), TEAM);
    let pods: Api<Pod> = Api::namespaced(client.clone(), TEAM);
    // The configs reach every replica through its ConfigMap watch: wait until both publish.
    wait_both_publish(&configmaps, "shipper:v1").await;
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 2, Some("shipper:v1")),
        )
        .await
        .unwrap();
    deployments
        .create(&PostParams::default(), &deployment("plain", 1, None))
        .await
        .unwrap();

    // The sidecar really runs next to the app; its env and volume reach the app container;
    // the revision is stamped.
    let web = wait_running(&pods, "web", 2, &["app", "shipper"], Some("shipper:v1=")).await;
    let plain = wait_running(&pods, "plain", 1, &["app"], None).await;
    let first = web[0].metadata.name.clone().unwrap();
    let seen = kubectl_ok(&[
        "-n",
        TEAM,
        "exec",
        &first,
        "-c",
        "app",
        "--",
        "cat",
        "/tmp/endpoint",
        "/tmp/volume",
    ]);
    assert_eq!(seen, "http://127.0.0.1:2020\nmounted\n");
    let v1_stamp = stamp(&web[0]).unwrap().to_owned();
    let logs = kubectl_ok(&["-n", TEAM, "logs", &first, "-c", "shipper"]);
    assert_eq!(logs.trim(), "shipper v1");

    pod_level_resources(&pods, &deployments, &configmaps).await;

    // Edit the ConfigMap: the engine (one replica holds the Lease) restarts exactly the stale
    // workload; its new pods pass their real readiness probes; the plain one is untouched.
    edit(&configmaps, config("v2")).await;
    let web = eventually(
        DEADLINE,
        "web restarted onto the edited sidecar",
        || async {
            let list = pods_of(&pods, "web").await;
            (list.len() == 2
                && list.iter().all(|p| {
                    ready(p)
                        && running(p).len() == 2
                        && stamp(p).is_some_and(|s| s.starts_with("shipper:v1=") && s != v1_stamp)
                }))
            .then_some(list)
        },
    )
    .await;
    let first = web[0].metadata.name.clone().unwrap();
    let logs = kubectl_ok(&["-n", TEAM, "logs", &first, "-c", "shipper"]);
    assert_eq!(logs.trim(), "shipper v2");
    assert_eq!(replicasets_of(&client, "web").await, 2, "web rolled once");
    assert_eq!(replicasets_of(&client, "plain").await, 1, "plain untouched");
    assert_eq!(
        pod_names(&pods_of(&pods, "plain").await),
        pod_names(&plain),
        "plain's pod untouched"
    );
    let lease = lease_holder();
    assert!(
        lease.starts_with("sidecar-injector-"),
        "held by a replica pod: {lease}"
    );

    // Re-apply deploy/ (the natural upgrade): the caBundle stays and injection keeps working.
    kubectl_ok(&["apply", "--validate=strict", "-k", "tests/realnode/overlay"]);
    eventually(DEADLINE, "the caBundle after a re-apply", bundle_set).await;

    // Renew the certificate as the README says: `certs` again in the same directory (the same
    // CA, so the same caBundle), the Secret replaced. Each replica reloads the new pair from
    // its volume (the kubelet's sync takes up to a minute or so), with no restart.
    assert_eq!(certs(tls.path()), ca_bundle, "a renewal keeps the caBundle");
    let renewed = std::fs::read(tls.path().join("tls.crt")).unwrap();
    let renewed_expiry =
        sidecar_injector::serve::tls::not_after(&renewed, "tls.crt").unwrap() as f64;
    let mut replace_args: Vec<&str> = secret_args.iter().map(String::as_str).collect();
    replace_args.extend(["--dry-run=client", "-o", "yaml"]);
    // (The README pipes it into `kubectl replace -f -`; a file is the same to kubectl.)
    std::fs::write(tls.path().join("secret.yaml"), kubectl_ok(&replace_args)).unwrap();
    kubectl_ok(&["replace", "-f", &tls_file("secret.yaml")]);
    let system_pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    let replicas = system_pods
        .list(&ListParams::default().labels("app=sidecar-injector"))
        .await
        .unwrap();
    // Each replica with its containers' restart counts: a reload restarts nothing.
    let restarts = |pods: Vec<Pod>| -> Vec<(String, i32)> {
        pods.into_iter()
            .map(|p| {
                let count = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .unwrap_or_default()
                    .iter()
                    .map(|c| c.restart_count)
                    .sum();
                (p.metadata.name.unwrap_or_default(), count)
            })
            .collect()
    };
    let replicas = restarts(replicas.items);
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    for (pod, _) in &replicas {
        let serves_renewed = || async {
            let metrics = kubectl_ok(&[
                "get",
                "--raw",
                &format!("/api/v1/namespaces/{SYSTEM}/pods/{pod}:9000/proxy/metrics"),
            ]);
            let expiry = metrics
                .lines()
                .find(|l| {
                    l.starts_with("sidecar_injector_certificate_expiration_timestamp_seconds ")
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
            (expiry == Some(renewed_expiry)).then_some(())
        };
        eventually(
            INSTALL,
            &format!("{pod} serves the renewed certificate"),
            serves_renewed,
        )
        .await;
    }
    assert!(bundle_set().await.is_some(), "the caBundle is the same CA");
    let after = system_pods
        .list(&ListParams::default().labels("app=sidecar-injector"))
        .await
        .unwrap();
    assert_eq!(
        restarts(after.items),
        replicas,
        "no replica replaced or restarted for the renewal"
    );
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    wait_running(&pods, "web", 3, &["app", "shipper"], Some("shipper:v1=")).await;

    // No injector at all: pods are created uninjected (failurePolicy Ignore) and drift says
    // so; back up, the engine restarts them into injected pods.
    injectors
        .patch(
            "sidecar-injector",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    eventually(DEADLINE, "no injector pod left", || async {
        let system: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
        let left = system
            .list(&ListParams::default().labels("app=sidecar-injector"))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    deployments
        .create(
            &PostParams::default(),
            &deployment("late", 1, Some("shipper:v1")),
        )
        .await
        .unwrap();
    wait_running(&pods, "late", 1, &["app"], None).await;
    let drift = injector_command(&[
        "drift",
        "-n",
        TEAM,
        "--injector-namespace",
        SYSTEM,
        "--configmap-namespace",
        SYSTEM,
        "--configmap-labels",
        "sidecar-injector.io/config=true",
        "--revisions-from",
        "configs",
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&drift.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&drift.stderr)));
    let late = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "late")
        .unwrap_or_else(|| panic!("late not in {report:#}"));
    assert_eq!(late["state"], "uninjected", "{late}");
    injectors
        .patch(
            "sidecar-injector",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    eventually(INSTALL, "2 injector replicas available again", || {
        available(2)
    })
    .await;
    wait_running(&pods, "late", 1, &["app", "shipper"], Some("shipper:v1=")).await;

    // A sidecar that starts, is Ready, and crashes 5 s later: the canary, the smallest
    // workload, rolls out, and fails within its health bake (--bake 15s in the overlay), the
    // reason naming the container; the campaign pauses, and the other workload is never
    // touched. The sidecar is Ready once its command got past its start (its probe).
    let crash = |command: &str| {
        let mut config = busybox_config("crash", command);
        let data = config.data.as_mut().unwrap();
        let yaml = data.get_mut("crash.yaml").unwrap();
        yaml.push_str(
            "    readinessProbe: {exec: {command: [\"test\", \"-f\", \"/tmp/started\"]}, periodSeconds: 1}\n",
        );
        config
    };
    configmaps
        .create(
            &PostParams::default(),
            &crash("touch /tmp/started; exec sleep 100000"),
        )
        .await
        .unwrap();
    wait_both_publish(&configmaps, "crash:v1").await;
    for (name, replicas) in [("small", 1), ("big", 2)] {
        deployments
            .create(
                &PostParams::default(),
                &deployment(name, replicas, Some("crash:v1")),
            )
            .await
            .unwrap();
    }
    wait_running(&pods, "small", 1, &["app", "crash"], Some("crash:v1=")).await;
    wait_running(&pods, "big", 2, &["app", "crash"], Some("crash:v1=")).await;
    edit(&configmaps, crash("touch /tmp/started; sleep 5; exit 3")).await;
    let campaign = eventually(DEADLINE, "the crash:v1 campaign pauses", || async {
        let status = configmaps.get("sidecar-injector-status").await.ok()?;
        let book: Value = serde_json::from_str(status.data.as_ref()?.get("campaigns")?).ok()?;
        let campaign = book["campaigns"]["crash:v1"].clone();
        (campaign["state"] == "paused").then_some(campaign)
    })
    .await;
    let failures = campaign["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{campaign:#}");
    assert_eq!(failures[0]["workload"]["name"], "small", "{campaign:#}");
    let reason = failures[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("within the bake (15s) of rolling out: pod small-")
            || reason.starts_with("became unhealthy within the bake (15s)"),
        "{reason}"
    );
    assert!(reason.contains("container crash ("), "{reason}");
    let big = deployments.get("big").await.unwrap();
    let template = big.spec.unwrap().template.metadata.unwrap_or_default();
    assert!(
        !template
            .annotations
            .unwrap_or_default()
            .contains_key("injector/rollout-revision"),
        "big was never restarted"
    );
    assert_eq!(replicasets_of(&client, "big").await, 1);
    // The canary's new pod really ran the broken sidecar: the kubelet saw it exit with status 3
    // (the bake may judge the pod from the terminated state, before the kubelet restarts it).
    let exited = |c: &ContainerStatus| {
        let code =
            |s: Option<&ContainerState>| s.and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code);
        c.name == "crash"
            && (c.restart_count >= 1
                || code(c.state.as_ref()) == Some(3)
                || code(c.last_state.as_ref()) == Some(3))
    };
    eventually(
        DEADLINE,
        "the kubelet sees small's crash sidecar exit",
        || async {
            let small = pods_of(&pods, "small").await;
            small
                .iter()
                .any(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .is_some_and(|statuses| statuses.iter().any(exited))
                })
                .then_some(())
        },
    )
    .await;
    let events = kubectl_ok(&[
        "-n",
        TEAM,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=small,reason=SidecarRolloutFailed",
        "-o",
        "name",
    ]);
    assert_eq!(events.lines().count(), 1, "{events}");

    // The Lease holder pod deleted mid-campaign: it gives the Lease up on SIGTERM, the other
    // replica takes over and finishes, and each workload is restarted exactly once.
    let tick =
        |message: &str| busybox_config("tick", &format!("echo {message}; exec sleep 100000"));
    configmaps
        .create(&PostParams::default(), &tick("one"))
        .await
        .unwrap();
    wait_both_publish(&configmaps, "tick:v1").await;
    let ticks = ["t1", "t2", "t3", "t4"];
    for name in ticks {
        // Each restart takes a few seconds (minReadySeconds), so the campaign is still under
        // way when the holder goes.
        let mut tick = deployment(name, 1, Some("tick:v1"));
        tick.spec.as_mut().unwrap().min_ready_seconds = Some(5);
        deployments
            .create(&PostParams::default(), &tick)
            .await
            .unwrap();
    }
    let mut before = Vec::new();
    for name in ticks {
        let pod = wait_running(&pods, name, 1, &["app", "tick"], Some("tick:v1=")).await;
        before.push(stamp(&pod[0]).unwrap().to_owned());
    }
    edit(&configmaps, tick("two")).await;
    let restarted = |deployments: Api<Deployment>| async move {
        let mut count = 0;
        for name in ticks {
            let d = deployments.get(name).await.ok()?;
            let template = d.spec?.template.metadata.unwrap_or_default();
            count += usize::from(
                template
                    .annotations
                    .unwrap_or_default()
                    .contains_key("injector/rollout-revision"),
            );
        }
        Some(count)
    };
    eventually(DEADLINE, "the campaign under way", || async {
        (restarted(deployments.clone()).await? >= 1).then_some(())
    })
    .await;
    let holder = lease_holder();
    // The identity is the pod's name and the process id (1 in a container).
    let holder_pod = holder.trim().trim_end_matches("-1").to_owned();
    kubectl_ok(&["-n", SYSTEM, "delete", "pod", &holder_pod, "--wait=false"]);
    for (name, old) in ticks.iter().zip(&before) {
        eventually(DEADLINE, &format!("{name} on the new tick:v1"), || async {
            let list = pods_of(&pods, name).await;
            (list.len() == 1
                && ready(&list[0])
                && stamp(&list[0]).is_some_and(|s| s.starts_with("tick:v1=") && s != old))
            .then_some(())
        })
        .await;
    }
    for name in ticks {
        assert_eq!(
            replicasets_of(&client, name).await,
            2,
            "{name} restarted exactly once"
        );
    }
    let new_holder = lease_holder();
    assert_ne!(
        new_holder.trim(),
        holder.trim(),
        "the other replica took over"
    );

    // An OnDelete StatefulSet behind a PodDisruptionBudget: while the budget allows no
    // disruption the eviction is refused (429) and retried, never forced; once it allows one,
    // pods are evicted one at a time, each really terminated and replaced before the next.
    let agent =
        |message: &str| busybox_config("agent", &format!("echo {message}; exec sleep 100000"));
    configmaps
        .create(&PostParams::default(), &agent("one"))
        .await
        .unwrap();
    wait_both_publish(&configmaps, "agent:v1").await;
    let template = deployment("db", 1, Some("agent:v1")).spec.unwrap().template;
    let statefulset: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "db"}},
            "template": template,
        },
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), TEAM)
        .create(&PostParams::default(), &statefulset)
        .await
        .unwrap();
    let db = wait_running(&pods, "db", 3, &["app", "agent"], Some("agent:v1=")).await;
    let old_uids: BTreeSet<String> = db.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let old_stamp = stamp(&db[0]).unwrap().to_owned();
    let apply_pdb = |min_available: i32| {
        let file = std::env::temp_dir().join(format!("realnode-pdb-{}.yaml", std::process::id()));
        std::fs::write(
            &file,
            format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: db, namespace: {TEAM}}}\nspec: {{minAvailable: {min_available}, selector: {{matchLabels: {{app: db}}}}}}\n"
            ),
        )
        .unwrap();
        kubectl_ok(&["apply", "-f", file.to_str().unwrap()]);
    };
    apply_pdb(3);
    edit(&configmaps, agent("two")).await;
    // The holder's own count of refused evictions, read through the API server's pod proxy.
    let blocked = || async {
        let holder = lease_holder();
        let pod = holder.trim().trim_end_matches("-1").to_owned();
        let metrics = node::kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/{SYSTEM}/pods/{pod}:9000/proxy/metrics"),
        ]);
        String::from_utf8_lossy(&metrics.stdout)
            .lines()
            .find(|l| {
                l.starts_with("sidecar_injector_rollouts_total{")
                    && l.contains("kind=\"StatefulSet\"")
                    && l.contains("result=\"eviction_blocked\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .filter(|n| *n >= 1.0)
    };
    eventually(DEADLINE, "an eviction refused by the budget (429)", blocked).await;
    let all_there = pods_of(&pods, "db").await;
    assert_eq!(
        all_there.len(),
        3,
        "nothing evicted while the budget says no"
    );
    assert!(
        all_there
            .iter()
            .all(|p| old_uids.contains(p.metadata.uid.as_deref().unwrap())),
        "nothing forced"
    );
    apply_pdb(2);
    // One at a time: never fewer than two Ready db pods, until all three are new and carry
    // the new revision (a rollout that failed meanwhile would have them recreated on the old
    // one). The deadline is the engine's rollout timeout (5m) and a little more.
    let fewest_ready = std::sync::Mutex::new(3usize);
    eventually(
        Duration::from_secs(330),
        "every db pod evicted and replaced on the new revision",
        || async {
            let list = pods_of(&pods, "db").await;
            let ready_now = list.iter().filter(|p| ready(p)).count();
            let mut fewest = fewest_ready.lock().unwrap();
            *fewest = (*fewest).min(ready_now);
            (list.len() == 3
                && list.iter().all(|p| {
                    ready(p)
                        && !old_uids.contains(p.metadata.uid.as_deref().unwrap_or_default())
                        && stamp(p).is_some_and(|s| s.starts_with("agent:v1=") && s != old_stamp)
                }))
            .then_some(())
        },
    )
    .await;
    assert!(
        *fewest_ready.lock().unwrap() >= 2,
        "one pod at a time: at least two stayed Ready throughout"
    );

    // Chaos mid-campaign: the status ConfigMap corrupted, then deleted, the API server
    // restarted (every watch breaks and resumes past the new watch cache: 410 Gone), and the
    // Lease holder's container SIGKILLed as the OOM killer would. Every stale workload is still
    // restarted exactly once, nothing else is touched, and no pod is left uninjected.
    let chaos =
        |message: &str| busybox_config("chaos", &format!("echo {message}; exec sleep 100000"));
    configmaps
        .create(&PostParams::default(), &chaos("one"))
        .await
        .unwrap();
    wait_both_publish(&configmaps, "chaos:v1").await;
    let stale = ["k1", "k2", "k3", "k4", "k5"];
    for name in stale {
        let mut workload = deployment(name, 1, Some("chaos:v1"));
        workload.spec.as_mut().unwrap().min_ready_seconds = Some(4);
        deployments
            .create(&PostParams::default(), &workload)
            .await
            .unwrap();
    }
    deployments
        .create(
            &PostParams::default(),
            &deployment("calm", 1, Some("tick:v1")),
        )
        .await
        .unwrap();
    let mut before = Vec::new();
    for name in stale {
        let pod = wait_running(&pods, name, 1, &["app", "chaos"], Some("chaos:v1=")).await;
        before.push(stamp(&pod[0]).unwrap().to_owned());
    }
    let calm = wait_running(&pods, "calm", 1, &["app", "tick"], Some("tick:v1=")).await;
    edit(&configmaps, chaos("two")).await;
    let under_way = |deployments: Api<Deployment>| async move {
        let mut count = 0;
        for name in stale {
            let d = deployments.get(name).await.ok()?;
            let template = d.spec?.template.metadata.unwrap_or_default();
            count += usize::from(
                template
                    .annotations
                    .unwrap_or_default()
                    .contains_key("injector/rollout-revision"),
            );
        }
        Some(count)
    };
    eventually(DEADLINE, "the chaos campaign under way", || async {
        (under_way(deployments.clone()).await? >= 1).then_some(())
    })
    .await;
    let mut status = configmaps.get("sidecar-injector-status").await.unwrap();
    status.data = Some(
        [
            ("injectors".to_owned(), "{not json".to_owned()),
            ("campaigns".to_owned(), "[[[".to_owned()),
        ]
        .into(),
    );
    configmaps
        .replace("sidecar-injector-status", &PostParams::default(), &status)
        .await
        .unwrap();
    realnode(&["restart-apiserver", "--compact"]);
    let _ = configmaps
        .delete("sidecar-injector-status", &Default::default())
        .await;
    // Right after the restart the Lease may be between holders (one that could not renew
    // through the outage gives it up): wait for the next.
    let holder = eventually(DEADLINE, "a Lease holder after the restart", || async {
        let holder = lease_holder();
        (!holder.is_empty()).then_some(holder)
    })
    .await;
    let holder_pod = holder.trim_end_matches("-1").to_owned();
    let injector_pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    let holder = injector_pods.get(&holder_pod).await.unwrap();
    let container_id = holder.status.unwrap().container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    realnode(&[
        "kill-container",
        container_id.trim_start_matches("containerd://"),
    ]);
    for (name, old) in stale.iter().zip(&before) {
        eventually(
            Duration::from_secs(180),
            &format!("{name} on the new chaos:v1"),
            || async {
                let list = pods_of(&pods, name).await;
                (list.len() == 1
                    && ready(&list[0])
                    && running(&list[0]).len() == 2
                    && stamp(&list[0]).is_some_and(|s| s.starts_with("chaos:v1=") && s != old))
                .then_some(())
            },
        )
        .await;
    }
    for name in stale {
        let count = replicasets_of(&client, name).await;
        let healed = healed(&deployments, name).await;
        println!("chaos: {name}: {count} ReplicaSets, healed: {healed}");
        assert!(
            count == 2 || (count == 3 && healed),
            "{name} restarted exactly once through the chaos (once more only to heal pods that missed the webhook): {count} ReplicaSets, healed: {healed}"
        );
    }
    assert_eq!(replicasets_of(&client, "calm").await, 1, "calm untouched");
    assert_eq!(
        pod_names(&pods_of(&pods, "calm").await),
        pod_names(&calm),
        "calm's pod untouched"
    );
    let killed = eventually(DEADLINE, "the killed injector back and Ready", || async {
        let pod = injector_pods.get(&holder_pod).await.ok()?;
        let status = pod.status.clone()?;
        let container = status.container_statuses?.into_iter().next()?;
        (container.restart_count >= 1 && container.ready).then_some(container)
    })
    .await;
    let last = killed.last_state.and_then(|s| s.terminated).unwrap();
    assert_eq!(last.exit_code, 137, "killed by SIGKILL: {last:?}");
    // The restart after the compaction expired the injectors' watches: each resumed from a
    // resource version the new API server no longer had (410 Gone) and relisted.
    eventually(
        DEADLINE,
        "a watch expired with 410 and was relisted",
        || async {
            injector_logs(&["--tail=-1"])
                .lines()
                .any(|l| {
                    l.contains("watch failed, retrying")
                        && (l.contains("410")
                            || l.contains("too old resource version")
                            || l.contains("Expired"))
                })
                .then_some(())
        },
    )
    .await;
    eventually(DEADLINE, "the status ConfigMap written again", || async {
        let status = configmaps.get("sidecar-injector-status").await.ok()?;
        let injectors: Value =
            serde_json::from_str(status.data.as_ref()?.get("injectors")?).ok()?;
        (injectors.as_object()?.len() >= 2).then_some(())
    })
    .await;
    eventually(
        DEADLINE,
        "drift says every chaos workload is current",
        || async {
            let drift = injector_command(&[
                "drift",
                "-n",
                TEAM,
                "--injector-namespace",
                SYSTEM,
                "--configmap-namespace",
                SYSTEM,
                "--configmap-labels",
                "sidecar-injector.io/config=true",
                "--revisions-from",
                "configs",
                "-o",
                "json",
            ]);
            let report: Value = serde_json::from_slice(&drift.stdout).ok()?;
            let current = report["workloads"]
                .as_array()?
                .iter()
                .filter(|w| stale.contains(&w["name"].as_str().unwrap_or_default()))
                .filter(|w| w["state"] == "current")
                .count();
            (current == stale.len()).then_some(())
        },
    )
    .await;

    // A config flapping between two contents every 4 s for a minute: each workload is
    // restarted at most once (the cooldown), nothing else is touched, and every pod stays
    // injected.
    let flap =
        |message: &str| busybox_config("flap", &format!("echo {message}; exec sleep 100000"));
    configmaps
        .create(&PostParams::default(), &flap("a"))
        .await
        .unwrap();
    wait_both_publish(&configmaps, "flap:v1").await;
    let flapping = ["f1", "f2", "f3"];
    for name in flapping {
        deployments
            .create(
                &PostParams::default(),
                &deployment(name, 1, Some("flap:v1")),
            )
            .await
            .unwrap();
    }
    for name in flapping {
        wait_running(&pods, name, 1, &["app", "flap"], Some("flap:v1=")).await;
    }
    let started = tokio::time::Instant::now();
    let mut flips = 0;
    while started.elapsed() < Duration::from_secs(60) {
        flips += 1;
        edit(&configmaps, flap(if flips % 2 == 1 { "b" } else { "a" })).await;
        // The flapping itself: a new content every 4 s.
        tokio::time::sleep(Duration::from_secs(4)).await;
        for name in flapping {
            assert!(
                replicasets_of(&client, name).await <= 2,
                "{name} restarted more than once within the cooldown (flip {flips})"
            );
        }
    }
    let mut restarted = 0;
    for name in flapping {
        let count = replicasets_of(&client, name).await;
        assert!(count <= 2, "{name}: {count} ReplicaSets");
        restarted += count - 1;
        for pod in pods_of(&pods, name).await {
            assert!(
                stamp(&pod).is_some_and(|s| s.starts_with("flap:v1=")),
                "{name}: a pod left uninjected: {:?}",
                pod.metadata.name
            );
        }
    }
    assert!(restarted >= 1, "the engine acted during the flapping");
    assert_eq!(replicasets_of(&client, "calm").await, 1, "calm untouched");
    // The flapping over, its workloads may still be stale, each within its cooldown (10
    // minutes): the engine would rightly restart them once it passes, in whatever step runs
    // then (the uninstall, on a slow machine). The scenario ends here, its objects with it.
    for name in flapping {
        deployments
            .delete(name, &DeleteParams::foreground())
            .await
            .unwrap();
    }
    configmaps
        .delete("flap", &DeleteParams::default())
        .await
        .unwrap();
    eventually(DEADLINE, "the flapping workloads gone", || async {
        let mut left = 0;
        for name in flapping {
            left += pods_of(&pods, name).await.len();
            left += usize::from(deployments.get_opt(name).await.ok()?.is_some());
        }
        (left == 0).then_some(())
    })
    .await;

    // A node drain during a campaign (the workloads' pods evicted and held Pending while the
    // node is cordoned, then rescheduled): no workload restarted more than once, every pod
    // injected with the new revision.
    let drain =
        |message: &str| busybox_config("drain", &format!("echo {message}; exec sleep 100000"));
    configmaps
        .create(&PostParams::default(), &drain("one"))
        .await
        .unwrap();
    wait_both_publish(&configmaps, "drain:v1").await;
    let drained = ["d1", "d2", "d3"];
    for name in drained {
        let mut workload = deployment(name, 1, Some("drain:v1"));
        workload.spec.as_mut().unwrap().min_ready_seconds = Some(3);
        deployments
            .create(&PostParams::default(), &workload)
            .await
            .unwrap();
    }
    let mut before = Vec::new();
    for name in drained {
        let pod = wait_running(&pods, name, 1, &["app", "drain"], Some("drain:v1=")).await;
        before.push(stamp(&pod[0]).unwrap().to_owned());
    }
    edit(&configmaps, drain("two")).await;
    let under_way = |deployments: Api<Deployment>| async move {
        let mut count = 0;
        for name in drained {
            let d = deployments.get(name).await.ok()?;
            let template = d.spec?.template.metadata.unwrap_or_default();
            count += usize::from(
                template
                    .annotations
                    .unwrap_or_default()
                    .contains_key("injector/rollout-revision"),
            );
        }
        Some(count)
    };
    eventually(DEADLINE, "the drain campaign under way", || async {
        (under_way(deployments.clone()).await? >= 1).then_some(())
    })
    .await;
    kubectl_ok(&[
        "drain",
        "realnode",
        "--pod-selector",
        "app in (d1,d2,d3)",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=180s",
    ]);
    eventually(
        DEADLINE,
        "the drained pods Pending on the cordoned node",
        || async {
            let mut pending = 0;
            for name in drained {
                pending += pods_of(&pods, name)
                    .await
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
                    .count();
            }
            (pending >= 1).then_some(())
        },
    )
    .await;
    kubectl_ok(&["uncordon", "realnode"]);
    for (name, old) in drained.iter().zip(&before) {
        eventually(
            Duration::from_secs(180),
            &format!("{name} on the new drain:v1"),
            || async {
                let list = pods_of(&pods, name).await;
                (list.len() == 1
                    && ready(&list[0])
                    && running(&list[0]).len() == 2
                    && stamp(&list[0]).is_some_and(|s| s.starts_with("drain:v1=") && s != old))
                .then_some(())
            },
        )
        .await;
    }
    // A pod the drain recreated from the old template is injected with the new revision
    // already: that workload needs no restart, and gets none.
    for name in drained {
        let count = replicasets_of(&client, name).await;
        assert!(
            count <= 2,
            "{name} restarted at most once through the drain: {count} ReplicaSets"
        );
    }

    in_place_upgrade(&client, &pods, &deployments, &configmaps).await;
    resize::resize_in_place(&client, &pods, &deployments, &configmaps).await;
    native_sidecar(&pods, &deployments, &configmaps).await;
    native_stop_order(&pods, &configmaps).await;
    native_in_place(&client, &pods, &deployments, &configmaps).await;
    native_migration(&client, &pods, &deployments, &configmaps).await;
    switch_to_policy_mode(&pods, &deployments).await;
    uninstall(&pods, &deployments).await;
    helm_lifecycle(&client).await;
}

/// The native-sidecar steps of the test above alone, on a node of another release: what the
/// kubelet decides (init order, startup probes, stop order, in-place resize, a Job that
/// completes) is checked on each release `scripts/test-matrix` builds. The test above runs
/// them on the default release at every change; this one runs only when asked.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "scripts/test-matrix runs it on each release's node"]
async fn native_sidecars_run_as_this_releases_kubelet_runs_them() {
    node();
    let client = client().await;
    let version = client.apiserver_version().await.unwrap();
    eprintln!("realnode: native sidecars on {}", version.git_version);
    let _tls = install(&client).await;
    team_namespace(&client, TEAM).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), TEAM);
    let pods: Api<Pod> = Api::namespaced(client.clone(), TEAM);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM);
    native_sidecar(&pods, &deployments, &configmaps).await;
    native_stop_order(&pods, &configmaps).await;
    native_in_place(&client, &pods, &deployments, &configmaps).await;
    native_migration(&client, &pods, &deployments, &configmaps).await;
}

/// A pod that sets pod-level resources (Kubernetes 1.34+), its app requesting all of them:
/// the API server would refuse it with any requesting sidecar added as it is. Injected, its
/// pod-level figures grow by the sidecar's, the kubelet admits it, and both containers run.
async fn pod_level_resources(
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    configmaps: &Api<ConfigMap>,
) {
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "meter", "labels": {"sidecar-injector.io/config": "true"}},
        "data": {"meter.yaml": "name: meter:v1\ncontainers:\n  - name: meter\n    image: localhost/busybox:1.35\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"exec sleep 100000\"]\n    resources: {requests: {cpu: 50m, memory: 16Mi}, limits: {memory: 32Mi}}\n"},
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    wait_both_publish(configmaps, "meter:v1").await;
    let mut sized = deployment("sized", 1, Some("meter:v1"));
    let spec = sized.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    spec.resources = Some(
        serde_json::from_value(json!({
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"}
        }))
        .unwrap(),
    );
    spec.containers[0].resources = Some(
        serde_json::from_value(json!({"requests": {"cpu": "100m", "memory": "64Mi"}})).unwrap(),
    );
    deployments
        .create(&PostParams::default(), &sized)
        .await
        .unwrap();
    let running = wait_running(pods, "sized", 1, &["app", "meter"], Some("meter:v1=")).await;
    let resources = serde_json::to_value(&running[0].spec.as_ref().unwrap().resources).unwrap();
    assert_eq!(
        resources,
        json!({"requests": {"cpu": "150m", "memory": "80Mi"},
               "limits": {"cpu": "550m", "memory": "160Mi"}})
    );
}

/// The running cluster switched from the webhook to policies as docs/policy-mode.md says: the
/// policy-mode overlay applied, its rollout waited for, the webhook configuration deleted.
/// A new pod then runs its sidecar, injected by the API server.
async fn switch_to_policy_mode(pods: &Api<Pod>, deployments: &Api<Deployment>) {
    kubectl_ok(&[
        "apply",
        "--validate=strict",
        "-k",
        "tests/realnode/overlay-policy",
    ]);
    kubectl_ok(&[
        "-n",
        SYSTEM,
        "rollout",
        "status",
        "deployment/sidecar-injector",
        "--timeout=180s",
    ]);
    kubectl_ok(&["delete", "mutatingwebhookconfiguration", "sidecar-injector"]);
    let policies = kubectl_ok(&[
        "get",
        "mutatingadmissionpolicies,mutatingadmissionpolicybindings",
        "-l",
        "app.kubernetes.io/managed-by=sidecar-injector",
        "-o",
        "name",
    ]);
    assert_eq!(
        policies.lines().count(),
        2,
        "the policy and its binding: {policies}"
    );
    deployments
        .create(
            &PostParams::default(),
            &deployment("by-policy", 1, Some("shipper:v1")),
        )
        .await
        .unwrap();
    let created = wait_running(
        pods,
        "by-policy",
        1,
        &["app", "shipper"],
        Some("shipper:v1"),
    )
    .await;
    let annotations = created[0].metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("injector/status").map(String::as_str),
        Some("injected"),
        "{annotations:?}"
    );
}

/// A config injected as native sidecars (`nativeSidecars: true`): the stored pod has the
/// sidecar as an init container with `restartPolicy: Always`, before the pod's own init
/// container, which can use it; the kubelet starts the sidecar first and holds the pod's init
/// and app containers back until its startupProbe passes (3 s after it starts); a Job whose
/// pod carries the native sidecar completes, while one with the same sidecar injected classic
/// never does.
async fn native_sidecar(
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    configmaps: &Api<ConfigMap>,
) {
    // The sidecar writes /shared/up three seconds after it starts; its startupProbe passes
    // then. The pod's init container fails (and would be restarted) unless it finds it.
    let config = |name: &str, native: bool| -> ConfigMap {
        let text = format!(
            "name: {name}:v1\n{}containers:\n  - name: proxy\n    image: localhost/busybox:1.35\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"sleep 3; touch /shared/up; exec sleep 100000\"]\n{}volumes:\n  - {{name: shared, emptyDir: {{}}}}\nvolumeMounts:\n  - {{name: shared, mountPath: /shared}}\n",
            if native { "nativeSidecars: true\n" } else { "" },
            if native {
                "    startupProbe: {exec: {command: [\"test\", \"-f\", \"/shared/up\"]}, periodSeconds: 1, failureThreshold: 30}\n"
            } else {
                ""
            },
        );
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"sidecar-injector.io/config": "true"}},
            "data": {format!("{name}.yaml"): text},
        }))
        .unwrap()
    };
    for (name, native) in [("native", true), ("classic", false)] {
        configmaps
            .create(&PostParams::default(), &config(name, native))
            .await
            .unwrap();
    }
    wait_both_publish(configmaps, "native:v1").await;
    wait_both_publish(configmaps, "classic:v1").await;
    let mut meshed = deployment("meshed", 1, Some("native:v1"));
    meshed
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .init_containers = Some(vec![
        serde_json::from_value(json!({
            "name": "needs-proxy",
            "image": "localhost/busybox:1.35",
            "imagePullPolicy": "Never",
            "command": ["test", "-f", "/shared/up"],
        }))
        .unwrap(),
    ]);
    deployments
        .create(&PostParams::default(), &meshed)
        .await
        .unwrap();
    let pod = eventually(DEADLINE, "meshed: its sidecar and app running", || async {
        let list = pods_of(pods, "meshed").await;
        let pod = list.into_iter().next()?;
        let status = pod.status.as_ref()?;
        let sidecar = status
            .init_container_statuses
            .as_ref()?
            .iter()
            .find(|c| c.name == "proxy")?;
        let sidecar_running = sidecar.state.as_ref()?.running.is_some();
        (ready(&pod) && sidecar_running && running(&pod).contains("app")).then_some(pod)
    })
    .await;
    let spec = pod.spec.as_ref().unwrap();
    let init: Vec<(&str, Option<&str>)> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.restart_policy.as_deref()))
        .collect();
    assert_eq!(
        init,
        [("proxy", Some("Always")), ("needs-proxy", None)],
        "the native sidecar before the pod's own init container"
    );
    assert!(spec.containers.iter().all(|c| c.name != "proxy"));
    let status = pod.status.as_ref().unwrap();
    let init_status = |name: &str| {
        status
            .init_container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no status of {name}"))
    };
    assert_eq!(
        init_status("needs-proxy").restart_count,
        0,
        "the pod's init container found the sidecar up at its first run"
    );
    let started = |statuses: Option<&Vec<ContainerStatus>>, name: &str| {
        statuses
            .and_then(|s| s.iter().find(|c| c.name == name))
            .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
            .unwrap_or_else(|| panic!("{name} has no start time"))
            .0
    };
    let sidecar_started = started(status.init_container_statuses.as_ref(), "proxy");
    let app_started = started(status.container_statuses.as_ref(), "app");
    // The probe cannot pass before the sidecar slept 3 s: the app started after that.
    assert!(
        app_started.duration_since(sidecar_started)
            >= k8s_openapi::jiff::SignedDuration::from_secs(3),
        "the startupProbe held the app back: sidecar started {sidecar_started}, app {app_started}"
    );
    deployments
        .delete("meshed", &Default::default())
        .await
        .unwrap();
    // Gone before the uninstall counts the containers that must outlive it.
    eventually(DEADLINE, "meshed's pod gone", || async {
        pods_of(pods, "meshed").await.is_empty().then_some(())
    })
    .await;
    jobs_with_sidecars(pods).await;
    for name in ["native", "classic"] {
        configmaps.delete(name, &Default::default()).await.unwrap();
    }
}

/// A deleted pod's native sidecar is stopped after its app: the app takes two seconds to
/// exit on SIGTERM, the sidecar exits at once on it, and each writes its name on exit into a
/// directory of the node (hostPath): the app's line comes first. Stopped together, the
/// sidecar's would.
async fn native_stop_order(pods: &Api<Pod>, configmaps: &Api<ConfigMap>) {
    let dir = tempfile::Builder::new()
        .prefix("sidecar-injector-stop-order-")
        .tempdir_in("/tmp")
        .unwrap();
    let log = dir.path().join("log");
    let on_term = |line: &str, wait: &str| {
        format!(
            "trap '{wait}echo {line} >> /order/log; exit 0' TERM; touch /tmp/started; while true; do sleep 1; done"
        )
    };
    let text = format!(
        "name: ordered:v1\nnativeSidecars: true\ncontainers:\n  - name: ordered\n    image: localhost/busybox:1.35\n    imagePullPolicy: Never\n    command: [sh, -c, {:?}]\n    readinessProbe: {{exec: {{command: [test, -f, /tmp/started]}}, periodSeconds: 1}}\nvolumes:\n  - {{name: order, hostPath: {{path: {}, type: Directory}}}}\nvolumeMounts:\n  - {{name: order, mountPath: /order}}\n",
        on_term("sidecar", ""),
        dir.path().display(),
    );
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "ordered", "labels": {"sidecar-injector.io/config": "true"}},
        "data": {"ordered.yaml": text},
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    wait_both_publish(configmaps, "ordered:v1").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "ordered", "labels": {"app": "ordered"},
                     "annotations": {"injector/request": "ordered:v1"}},
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "containers": [{
                "name": "app",
                "image": "localhost/busybox:1.35",
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", on_term("app", "sleep 2; ")],
                "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/started"]}, "periodSeconds": 1},
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually(
        DEADLINE,
        "ordered: its native sidecar and app running",
        || async {
            let pod = pods.get_opt("ordered").await.ok().flatten()?;
            (ready(&pod) && native_running(&pod, "ordered") && running(&pod).contains("app"))
                .then_some(())
        },
    )
    .await;
    pods.delete("ordered", &Default::default()).await.unwrap();
    eventually(DEADLINE, "ordered: the pod gone", || async {
        pods.get_opt("ordered")
            .await
            .ok()
            .is_some_and(|p| p.is_none())
            .then_some(())
    })
    .await;
    let order = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        ["app", "sidecar"],
        "the sidecar is stopped once the app has exited"
    );
    configmaps
        .delete("ordered", &Default::default())
        .await
        .unwrap();
}

/// The image of init container `name` in the pod's spec.
fn native_spec_image<'p>(pod: &'p Pod, name: &str) -> Option<&'p str> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == name)?
        .image
        .as_deref()
}

/// The running native sidecar of `pod` named `name`: its container ID as the kubelet reports
/// it, and its restart count.
fn native_status(pod: &Pod, name: &str) -> Option<(String, i32)> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name && c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .map(|c| (c.container_id.clone().unwrap_or_default(), c.restart_count))
}

/// An image-only change of a native sidecar is made in place: the same pods (uids), one at a
/// time, the kubelet restarting only that init container (a new container ID on the new
/// image), the app never restarted, no new ReplicaSet.
async fn native_in_place(
    client: &kube::Client,
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    configmaps: &Api<ConfigMap>,
) {
    let config = |image: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "npatch", "labels": {"sidecar-injector.io/config": "true"}},
            "data": {"npatch.yaml": format!(
                "name: npatch:v1\nnativeSidecars: true\ncontainers:\n  - name: npatch\n    image: {image}\n    imagePullPolicy: Never\n    command: [sh, -c, 'exec sleep 100000']\n    readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}\n"
            )},
        }))
        .unwrap()
    };
    configmaps
        .create(&PostParams::default(), &config("localhost/busybox:1.35"))
        .await
        .unwrap();
    wait_both_publish(configmaps, "npatch:v1").await;
    deployments
        .create(
            &PostParams::default(),
            &one_pod_at_a_time(deployment("native-inplace", 2, Some("npatch:v1"))),
        )
        .await
        .unwrap();
    let before = eventually(DEADLINE, "native-inplace: 2 pods running", || async {
        let list = pods_of(pods, "native-inplace").await;
        (list.len() == 2
            && list
                .iter()
                .all(|p| ready(p) && native_running(p, "npatch") && running(p).contains("app")))
        .then_some(list)
    })
    .await;
    // Each pod's sidecar container, by pod uid.
    let first: BTreeMap<String, String> = before
        .iter()
        .map(|p| {
            let (id, _) = native_status(p, "npatch").unwrap();
            (p.metadata.uid.clone().unwrap(), id)
        })
        .collect();
    let old_stamp = stamp(&before[0]).unwrap().to_owned();

    edit(configmaps, config("localhost/busybox:next")).await;
    let upgraded = eventually(
        Duration::from_secs(180),
        "native-inplace: both sidecars restarted on busybox:next",
        || async {
            let list = pods_of(pods, "native-inplace").await;
            (list.len() == 2
                && list.iter().all(|p| {
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    ready(p)
                        && stamp(p).is_some_and(|s| s.starts_with("npatch:v1=") && s != old_stamp)
                        && native_spec_image(p, "npatch") == Some("localhost/busybox:next")
                        // busybox:next is 1.35 retagged: the kubelet may report either name,
                        // so the new container is told by its ID.
                        && native_status(p, "npatch").is_some_and(|(id, restarts)| {
                            restarts >= 1 && first.get(&uid).is_some_and(|before| *before != id)
                        })
                }))
            .then_some(list)
        },
    )
    .await;
    for pod in &upgraded {
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(
            first.contains_key(pod.metadata.uid.as_deref().unwrap()),
            "{name}: the same pod"
        );
        let (app_restarts, _) = container_status(pod, "app").unwrap();
        assert_eq!(app_restarts, 0, "{name}: the app never restarted");
        assert!(native_running(pod, "npatch"), "{name}: still native");
    }
    assert_eq!(
        replicasets_of(client, "native-inplace").await,
        1,
        "no new ReplicaSet"
    );
    deployments
        .delete("native-inplace", &Default::default())
        .await
        .unwrap();
    eventually(DEADLINE, "native-inplace's pods gone", || async {
        pods_of(pods, "native-inplace")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    configmaps
        .delete("npatch", &Default::default())
        .await
        .unwrap();
}

/// A Job of `request` whose app exits at once.
fn job(name: &str, request: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"job": name}, "annotations": {"injector/request": request}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "app",
                        "image": "localhost/busybox:1.35",
                        "imagePullPolicy": "Never",
                        "command": ["true"],
                    }],
                },
            },
        },
    }))
    .unwrap()
}

/// The Job pod whose sidecar is native completes; the one whose sidecar is classic keeps
/// running after its app exited, so its Job never completes.
async fn jobs_with_sidecars(pods: &Api<Pod>) {
    let jobs: Api<Job> = Api::namespaced(pods.clone().into_client(), TEAM);
    for (name, request) in [("native-job", "native:v1"), ("classic-job", "classic:v1")] {
        jobs.create(&PostParams::default(), &job(name, request))
            .await
            .unwrap();
    }
    let complete = |job: &Job| {
        job.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            })
    };
    eventually(DEADLINE, "native-job complete", || async {
        complete(&jobs.get("native-job").await.ok()?).then_some(())
    })
    .await;
    // The classic Job's app exited, and its sidecar still runs: the pod stays Running.
    let classic = eventually(DEADLINE, "classic-job's app exited", || async {
        let list = pods
            .list(&ListParams::default().labels("job=classic-job"))
            .await
            .ok()?;
        let pod = list.items.into_iter().next()?;
        let app_done = pod
            .status
            .as_ref()?
            .container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == "app" && c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
        app_done.then_some(pod)
    })
    .await;
    let phase = classic.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(
        phase,
        Some("Running"),
        "the classic sidecar keeps the pod running"
    );
    assert!(
        !complete(&jobs.get("classic-job").await.unwrap()),
        "a Job whose sidecar is classic does not complete"
    );
    for name in ["native-job", "classic-job"] {
        jobs.delete(name, &DeleteParams::background())
            .await
            .unwrap();
    }
    eventually(DEADLINE, "the Jobs' pods gone", || async {
        pods.list(&ListParams::default().labels("job"))
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

/// The `mesh` config: a busybox sidecar Ready once started, classic or native.
fn mesh(native: bool, command: &str) -> ConfigMap {
    let mut config = busybox_config("mesh", command);
    let yaml = config.data.as_mut().unwrap().get_mut("mesh.yaml").unwrap();
    yaml.push_str(
        "    readinessProbe: {exec: {command: [\"test\", \"-f\", \"/tmp/started\"]}, periodSeconds: 1}\n",
    );
    if native {
        yaml.push_str("nativeSidecars: true\n");
    }
    config
}

/// Whether `pod` runs `name` as a native sidecar (an init container with `restartPolicy:
/// Always`, running and ready), not as a regular container.
fn native_running(pod: &Pod, name: &str) -> bool {
    let spec = pod.spec.as_ref();
    let declared = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
        });
    let regular = spec.is_some_and(|s| s.containers.iter().any(|c| c.name == name));
    let up = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .is_some_and(|statuses| {
            statuses.iter().any(|c| {
                c.name == name && c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some())
            })
        });
    declared && !regular && up
}

/// Three Deployments migrate from a classic sidecar to its native form as a canaried
/// rollout. A native form that crash-loops first: the canary fails, the campaign pauses, the
/// other two are untouched, and a new pod (a scale-up) gets the held classic form. Then the
/// fixed native form: the canary first, then the rest, every pod ending with the sidecar
/// native.
async fn native_migration(
    client: &kube::Client,
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    configmaps: &Api<ConfigMap>,
) {
    const UP: &str = "touch /tmp/started; exec sleep 100000";
    configmaps
        .create(&PostParams::default(), &mesh(false, UP))
        .await
        .unwrap();
    wait_both_publish(configmaps, "mesh:v1").await;
    let names = ["mig-a", "mig-b", "mig-c"];
    for name in names {
        deployments
            .create(
                &PostParams::default(),
                &deployment(name, 1, Some("mesh:v1")),
            )
            .await
            .unwrap();
    }
    let mut classic_uids = BTreeMap::new();
    for name in names {
        let list = wait_running(pods, name, 1, &["app", "mesh"], Some("mesh:v1=")).await;
        classic_uids.insert(name, list[0].metadata.uid.clone().unwrap());
    }
    let classic_stamp = stamp(&pods_of(pods, "mig-a").await[0]).unwrap().to_owned();
    // Its campaign complete, the classic revision is good: what a pause holds new pods at.
    let classic_revision = classic_stamp.trim_start_matches("mesh:v1=").to_owned();
    eventually(
        DEADLINE,
        "the classic mesh:v1 good in the history",
        || async {
            let history = configmaps.get("sidecar-injector-history").await.ok()?;
            let history: Value =
                serde_json::from_str(history.data.as_ref()?.get("history")?).ok()?;
            history["sidecars"]["mesh:v1"]
                .as_array()?
                .iter()
                .any(|e| e["revision"] == classic_revision.as_str() && e["outcome"] == "good")
                .then_some(())
        },
    )
    .await;

    // The native form crash-loops: the canary fails within its bake, the campaign pauses.
    edit(
        configmaps,
        mesh(true, "touch /tmp/started; sleep 5; exit 3"),
    )
    .await;
    let campaign = eventually(DEADLINE, "the broken native campaign pauses", || async {
        let status = configmaps.get("sidecar-injector-status").await.ok()?;
        let book: Value = serde_json::from_str(status.data.as_ref()?.get("campaigns")?).ok()?;
        let campaign = book["campaigns"]["mesh:v1"].clone();
        (campaign["state"] == "paused").then_some(campaign)
    })
    .await;
    let failures = campaign["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "one canary, one failure: {campaign:#}");
    let canary = failures[0]["workload"]["name"].as_str().unwrap().to_owned();
    assert!(
        failures[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("container mesh (")),
        "{campaign:#}"
    );
    let others: Vec<&str> = names.iter().copied().filter(|n| *n != canary).collect();
    for name in &others {
        let list = pods_of(pods, name).await;
        assert_eq!(list.len(), 1, "{name}");
        assert_eq!(
            list[0].metadata.uid.as_ref(),
            classic_uids.get(name),
            "{name}'s pod untouched while the campaign is paused"
        );
        assert_eq!(
            replicasets_of(client, name).await,
            1,
            "{name} never restarted"
        );
    }
    // New pods meanwhile get the last good, classic, form: a scale-up of one of the others.
    let scaled = others[0];
    deployments
        .patch(
            scaled,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let held = wait_running(pods, scaled, 2, &["app", "mesh"], Some(&classic_stamp)).await;
    assert!(
        held.iter().all(|p| !native_running(p, "mesh")),
        "held at the classic form"
    );

    // Fixed: the native form that works rolls out, the canary first.
    edit(configmaps, mesh(true, UP)).await;
    let migrated = eventually(
        DEADLINE,
        "every pod runs mesh as a native sidecar",
        || async {
            let mut all = BTreeMap::new();
            for name in names {
                let list = pods_of(pods, name).await;
                let wanted = if name == scaled { 2 } else { 1 };
                let done = list.len() == wanted
                    && list.iter().all(|p| {
                        ready(p) && native_running(p, "mesh") && running(p).contains("app")
                    });
                if !done {
                    return None;
                }
                all.insert(name, list);
            }
            Some(all)
        },
    )
    .await;
    let created = |name: &str| {
        migrated[name]
            .iter()
            .filter_map(|p| p.metadata.creation_timestamp.clone())
            .map(|t| t.0)
            .min()
            .unwrap()
    };
    for name in &others {
        assert!(
            created(&canary) < created(name),
            "the canary {canary} was restarted before {name}"
        );
    }
    for name in names {
        deployments.delete(name, &Default::default()).await.unwrap();
    }
    eventually(DEADLINE, "the migrated pods gone", || async {
        for name in names {
            if !pods_of(pods, name).await.is_empty() {
                return None;
            }
        }
        Some(())
    })
    .await;
    configmaps
        .delete("mesh", &Default::default())
        .await
        .unwrap();
}

/// Each container of `pods`: its pod's uid, its name, and how often the kubelet restarted it.
fn containers<'p>(pods: impl Iterator<Item = &'p Pod>) -> BTreeSet<(String, String, i32)> {
    pods.flat_map(|p| {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        p.status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(move |c| (uid.clone(), c.name.clone(), c.restart_count))
    })
    .collect()
}

/// Uninstalled as the README says, `kubectl delete -k` of what was applied: every object
/// deploy/ made is gone, cluster-wide ones included; the pods it injected run on untouched;
/// and a pod created afterwards is admitted, without the sidecar it asks for.
async fn uninstall(pods: &Api<Pod>, deployments: &Api<Deployment>) {
    // Every Ready pod but the canary's, whose sidecar crashes by design (its campaign failed).
    let listed = pods
        .list(&ListParams::default().labels("app!=small"))
        .await
        .unwrap()
        .items;
    let running_before = containers(
        listed
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && ready(p)),
    );
    let injected = running_before
        .iter()
        .filter(|(_, container, _)| container != "app")
        .count();
    assert!(
        injected >= 3,
        "sidecars run before the uninstall: {running_before:?}"
    );
    // kubectl waits until the objects are gone, the namespace (its pods, the Secret, the
    // engine's status ConfigMap and Lease) included.
    // The policy mode's uninstall: what was applied, then the policies its replicas wrote.
    kubectl_ok(&[
        "delete",
        "-k",
        "tests/realnode/overlay-policy",
        "--timeout=180s",
    ]);
    kubectl_ok(&[
        "delete",
        "mutatingadmissionpolicybinding,mutatingadmissionpolicy,validatingadmissionpolicybinding,validatingadmissionpolicy",
        "-l",
        "app.kubernetes.io/managed-by=sidecar-injector",
    ]);
    let left = kubectl_ok(&[
        "get",
        "-k",
        "tests/realnode/overlay-policy",
        "--ignore-not-found",
        "-o",
        "name",
    ]);
    assert_eq!(left.trim(), "", "left after kubectl delete -k");
    let left = kubectl_ok(&[
        "get",
        "mutatingwebhookconfigurations,clusterroles,clusterrolebindings,mutatingadmissionpolicies,validatingadmissionpolicies",
        "-o",
        "name",
    ]);
    assert!(
        !left.contains("sidecar-injector"),
        "cluster-wide objects left: {left}"
    );
    // The API server applies admission policies from its own cache, which learns of a delete
    // a moment later: until a pod created now (a server-side dry run) comes back uninjected.
    let probe: Pod = serde_json::from_value(
        serde_json::to_value(deployment("after-uninstall", 1, Some("shipper:v1"))).unwrap()["spec"]
            ["template"]
            .clone(),
    )
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        Duration::from_secs(60),
        "the API server stops applying the deleted policies",
        || async {
            let mut probe = probe.clone();
            probe.metadata.name = Some("uninstall-probe".into());
            let created = pods.create(&dry_run, &probe).await.ok()?;
            let containers = created.spec?.containers;
            (containers.len() == 1).then_some(())
        },
    )
    .await;

    deployments
        .create(
            &PostParams::default(),
            &deployment("after-uninstall", 1, Some("shipper:v1")),
        )
        .await
        .unwrap();
    let created = wait_running(pods, "after-uninstall", 1, &["app"], None).await;
    let annotations = created[0].metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations.contains_key("injector/request")
            && !annotations.contains_key("injector/status")
            && !annotations.contains_key("injector/revision"),
        "asked for a sidecar, not injected: {annotations:?}"
    );

    let running_after = containers(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter(),
    );
    let gone: Vec<_> = running_before.difference(&running_after).collect();
    assert!(
        gone.is_empty(),
        "containers restarted or gone since the uninstall: {gone:?}"
    );
}

/// Installed again, with Helm as a platform team installs it: the chart, the local image, a
/// certificate the chart generates, the sidecar config as a value. A workload gets its
/// sidecar; a second upgrade with the same values changes nothing; a config edit through
/// `helm upgrade` restarts exactly the workload running it; `helm uninstall` takes every object
/// of the chart away and leaves running pods as they are.
async fn helm_lifecycle(client: &kube::Client) {
    const CHARTED: &str = "charted";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("shipper.yaml");
    std::fs::write(&config, shipper("v1")).unwrap();
    let config_value = format!("sidecarConfigs.shipper\\.yaml={}", config.display());
    // The real-node overlay's pace; the engine restarts only in this test's namespace.
    let args = [
        "upgrade",
        "--install",
        "sidecar-injector",
        "charts/sidecar-injector",
        "-n",
        SYSTEM,
        "--create-namespace",
        "--set",
        "certificate.source=generate",
        "--set",
        "image.repository=localhost/sidecar-injector",
        "--set",
        "image.tag=dev",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "extraArgs={--settle=2s,--bake=15s,--lease-duration=6s,--publish-interval=5s,--include-namespace=charted}",
        "--set",
        "test.namespace=charted",
        "--set-file",
        &config_value,
    ];
    helm_ok(&args);
    eventually(INSTALL, "2 injector replicas installed by helm", || {
        injectors_available(client, 2)
    })
    .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), SYSTEM);
    let ca = secrets
        .get("sidecar-injector-tls")
        .await
        .unwrap()
        .data
        .unwrap()["ca.crt"]
        .0
        .clone();
    eventually(DEADLINE, "the injectors trust the generated CA", || {
        bundle_is(client, &ca)
    })
    .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM);
    wait_both_publish(&configmaps, "shipper:v1").await;

    team_namespace(client, CHARTED).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), CHARTED);
    let pods: Api<Pod> = Api::namespaced(client.clone(), CHARTED);
    for (name, request) in [("logs", Some("shipper:v1")), ("quiet", None)] {
        deployments
            .create(&PostParams::default(), &deployment(name, 1, request))
            .await
            .unwrap();
    }
    let logs = wait_running(&pods, "logs", 1, &["app", "shipper"], Some("shipper:v1=")).await;
    let quiet = wait_running(&pods, "quiet", 1, &["app"], None).await;
    let v1 = stamp(&logs[0]).unwrap().to_owned();

    // `helm test`: its pod, on the node, has the API server dry-run a pod that requests the
    // first config and passes once it comes back injected; then nothing of it is left.
    let tested = helm_ok(&["test", "sidecar-injector", "-n", SYSTEM, "--timeout=180s"]);
    assert!(
        tested.contains("sidecar-injector-check") && tested.contains("Succeeded"),
        "{tested}"
    );
    let hooks = kubectl_ok(&["get", "pods,serviceaccounts", "-n", SYSTEM, "-o", "name"]);
    assert!(!hooks.contains("sidecar-injector-check"), "left: {hooks}");
    assert_eq!(
        pod_names(&pods.list(&ListParams::default()).await.unwrap().items).len(),
        2,
        "the dry run created no pod in {CHARTED}"
    );

    // The same values again: no object of the chart changes.
    let versions = || {
        kubectl_ok(&[
            "get",
            "-n",
            SYSTEM,
            "deployment/sidecar-injector",
            "configmap/sidecar-configs",
            "secret/sidecar-injector-tls",
            "service/sidecar-injector",
            "mutatingwebhookconfiguration/sidecar-injector",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion} {end}",
        ])
    };
    // The caBundle the replicas wrote is theirs: helm's three-way merge leaves it.
    let before = versions();
    helm_ok(&args);
    assert_eq!(versions(), before, "a second upgrade with the same values");
    eventually(DEADLINE, "the caBundle kept", || bundle_is(client, &ca)).await;

    // The config edited through helm: exactly the workload running it is restarted.
    std::fs::write(&config, shipper("v2")).unwrap();
    helm_ok(&args);
    let logs = eventually(
        DEADLINE,
        "logs restarted onto the edited sidecar",
        || async {
            let list = pods_of(&pods, "logs").await;
            (list.len() == 1
                && ready(&list[0])
                && running(&list[0]).len() == 2
                && stamp(&list[0]).is_some_and(|s| s.starts_with("shipper:v1=") && s != v1))
            .then_some(list)
        },
    )
    .await;
    let shipped = kubectl_ok(&[
        "-n",
        CHARTED,
        "logs",
        logs[0].metadata.name.as_deref().unwrap(),
        "-c",
        "shipper",
    ]);
    assert_eq!(shipped.trim(), "shipper v2");
    assert_eq!(
        pod_names(&pods_of(&pods, "quiet").await),
        pod_names(&quiet),
        "quiet requests nothing: untouched"
    );

    // Uninstalled: nothing of the chart is left, and the running pods are as they were.
    let settled = || async {
        let items = pods.list(&ListParams::default()).await.ok()?.items;
        (items.len() == 2 && items.iter().all(ready)).then_some(items)
    };
    let listed = eventually(DEADLINE, "the replaced pod gone", settled).await;
    let running_before = containers(listed.iter());
    helm_ok(&[
        "uninstall",
        "sidecar-injector",
        "-n",
        SYSTEM,
        "--wait",
        "--timeout=180s",
    ]);
    let left = kubectl_ok(&[
        "get",
        "mutatingwebhookconfigurations,clusterroles,clusterrolebindings",
        "-o",
        "name",
    ]);
    assert!(
        !left.contains("sidecar-injector"),
        "cluster-wide objects left: {left}"
    );
    // The namespace stays, as helm leaves the namespaces it made, with the engine's memory
    // (the status and history ConfigMaps, which the replicas wrote): nothing of the chart.
    let left = kubectl_ok(&[
        "get",
        "-n",
        SYSTEM,
        "deployments,services,configmaps,secrets,roles,rolebindings,serviceaccounts,poddisruptionbudgets",
        "-o",
        "name",
    ]);
    let left: BTreeSet<&str> = left.lines().collect();
    assert_eq!(
        left,
        BTreeSet::from([
            "configmap/kube-root-ca.crt",
            "configmap/sidecar-injector-history",
            "configmap/sidecar-injector-status",
            "serviceaccount/default",
        ]),
        "left in {SYSTEM} after helm uninstall"
    );
    let running_after = containers(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter(),
    );
    assert_eq!(
        running_after, running_before,
        "running pods untouched by the uninstall"
    );
}

/// A labelled ConfigMap holding `patcher:v1`: a busybox sidecar of `image`, with `env` when
/// given, ready by a real exec probe.
fn patcher(image: &str, env: Option<&str>) -> ConfigMap {
    let env = env.map_or(String::new(), |value| {
        format!("    env: [{{name: LEVEL, value: {value}}}]\n")
    });
    serde_json::from_value(json!({
        "metadata": {"name": "patcher", "labels": {"sidecar-injector.io/config": "true"}},
        "data": {"patcher.yaml": format!(
            "name: patcher:v1\ncontainers:\n  - name: patcher\n    image: {image}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"exec sleep 100000\"]\n    readinessProbe: {{exec: {{command: [\"true\"]}}, periodSeconds: 1}}\n{env}"
        )},
    }))
    .unwrap()
}

/// `workload` rolled one pod at a time (maxUnavailable 1, no surge), as an in-place upgrade
/// of its pods is.
fn one_pod_at_a_time(mut workload: Deployment) -> Deployment {
    workload.spec.as_mut().unwrap().strategy = Some(
        serde_json::from_value(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
        )
        .unwrap(),
    );
    workload
}

/// The image of container `name` in the pod's spec.
fn spec_image<'p>(pod: &'p Pod, name: &str) -> Option<&'p str> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)?
        .image
        .as_deref()
}

/// The restart count and image of container `name` in `pod`.
fn container_status(pod: &Pod, name: &str) -> Option<(i32, String)> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .map(|c| (c.restart_count, c.image.clone()))
}

/// What a watch saw of the pods of an in-place upgrade: each change of a pod's readiness, of
/// its sidecar's image in the spec or of that container's restart count, in order. A pod is
/// upgrading from its patch (its spec names the new image) until it is first seen Ready on a
/// restarted sidecar.
#[derive(Clone, Debug)]
struct UpgradeTimeline {
    sidecar: &'static str,
    new_image: &'static str,
    started: std::time::Instant,
    pods: BTreeMap<String, WatchedPod>,
    lines: Vec<String>,
    most_unready: usize,
    most_upgrading: usize,
    /// Each patch made while another pod had been unready longer than the Deployment's status
    /// takes to say so: the engine would have known, and should have waited.
    patched_into_unready: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct WatchedPod {
    ready: bool,
    image: String,
    restarts: i32,
    /// The sidecar's restart count when the watch first saw the pod.
    first_restarts: i32,
    unready_since: Option<std::time::Instant>,
    /// Seen Ready on a restarted sidecar once: done, whatever its readiness does after.
    upgraded: bool,
}

impl UpgradeTimeline {
    /// How long a pod's unreadiness may take to reach its Deployment's status, which the engine
    /// reads; a patch within that is not a decision made against what it knew.
    const STATUS_LAG: Duration = Duration::from_secs(5);

    fn new(sidecar: &'static str, new_image: &'static str) -> Self {
        Self {
            sidecar,
            new_image,
            started: std::time::Instant::now(),
            pods: BTreeMap::new(),
            lines: Vec::new(),
            most_unready: 0,
            most_upgrading: 0,
            patched_into_unready: Vec::new(),
        }
    }

    fn saw(&mut self, pod: &Pod, now: std::time::Instant) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let image = spec_image(pod, self.sidecar).unwrap_or_default().to_owned();
        let restarts = container_status(pod, self.sidecar).map_or(0, |(r, _)| r);
        let ready = ready(pod);
        let before = self.pods.get(&name).cloned();
        let first_restarts = before.as_ref().map_or(restarts, |b| b.first_restarts);
        let was_unready_since = before.as_ref().and_then(|b| b.unready_since);
        let patched_now =
            image == self.new_image && before.as_ref().is_none_or(|b| b.image != self.new_image);
        if patched_now {
            for (other, state) in &self.pods {
                if let Some(since) = state.unready_since.filter(|_| *other != name)
                    && now.duration_since(since) > Self::STATUS_LAG
                {
                    self.patched_into_unready.push(format!(
                        "{name} patched while {other} had been unready for {} ms",
                        now.duration_since(since).as_millis()
                    ));
                }
            }
        }
        let upgraded = before.as_ref().is_some_and(|b| b.upgraded)
            || (image == self.new_image && ready && restarts > first_restarts);
        let state = WatchedPod {
            ready,
            upgraded,
            unready_since: if ready {
                None
            } else {
                Some(was_unready_since.unwrap_or(now))
            },
            image,
            restarts,
            first_restarts,
        };
        if before.as_ref() == Some(&state) {
            return;
        }
        self.pods.insert(name.clone(), state);
        let unready = self.pods.values().filter(|s| !s.ready).count();
        let upgrading = self
            .pods
            .values()
            .filter(|s| s.image == self.new_image && !s.upgraded)
            .count();
        self.most_unready = self.most_unready.max(unready);
        self.most_upgrading = self.most_upgrading.max(upgrading);
        let pod = &self.pods[&name];
        self.lines.push(format!(
            "{:>7} ms  {name}: ready {}, {} image {}, restarts {}  (unready {unready}, upgrading {upgrading})",
            now.duration_since(self.started).as_millis(),
            pod.ready,
            self.sidecar,
            pod.image,
            pod.restarts,
        ));
    }
}

/// The watch's judge flags what the engine must not do, and only that.
#[test]
fn the_upgrade_timeline_flags_two_pods_upgrading_and_a_patch_into_an_unready_pod() {
    let pod = |name: &str, image: &str, restarts: i32, ready: bool| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app"}, {"name": "patcher", "image": image}]},
            "status": {
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "containerStatuses": [{
                    "name": "patcher", "image": image, "imageID": "", "ready": ready,
                    "restartCount": restarts,
                }],
            },
        }))
        .unwrap()
    };
    let (old, new) = ("localhost/busybox:1.35", "localhost/busybox:next");
    let start = std::time::Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let fresh = || {
        let mut timeline = UpgradeTimeline::new("patcher", new);
        timeline.started = start;
        for name in ["a", "b", "c"] {
            timeline.saw(&pod(name, old, 0, true), at(0));
        }
        timeline
    };

    // One at a time: a patched, restarted, Ready again; then b.
    let mut paced = fresh();
    paced.saw(&pod("a", new, 0, true), at(1_000));
    paced.saw(&pod("a", new, 1, false), at(9_000));
    paced.saw(&pod("a", new, 1, true), at(10_000));
    paced.saw(&pod("b", new, 0, true), at(11_000));
    // c's own probe fails while b upgrades: two unready, through no patch of the engine's.
    paced.saw(&pod("c", old, 0, false), at(12_000));
    paced.saw(&pod("b", new, 1, false), at(13_000));
    paced.saw(&pod("b", new, 1, true), at(14_000));
    paced.saw(&pod("c", old, 0, true), at(15_000));
    assert_eq!(
        (paced.most_upgrading, paced.most_unready),
        (1, 2),
        "{:#?}",
        paced.lines
    );
    assert!(paced.patched_into_unready.is_empty());

    // b patched before a is back.
    let mut hasty = fresh();
    hasty.saw(&pod("a", new, 0, true), at(1_000));
    hasty.saw(&pod("b", new, 0, true), at(2_000));
    assert_eq!(hasty.most_upgrading, 2);

    // b patched while c had been unready long enough for the Deployment's status to say so;
    // a patch within that lag is not held against the engine.
    let mut blind = fresh();
    blind.saw(&pod("c", old, 0, false), at(1_000));
    blind.saw(&pod("a", new, 0, true), at(1_500));
    blind.saw(&pod("a", new, 1, true), at(3_000));
    blind.saw(&pod("b", new, 0, true), at(9_000));
    assert_eq!(blind.most_upgrading, 1);
    assert_eq!(
        blind.patched_into_unready,
        ["b patched while c had been unready for 8000 ms"]
    );
}

/// In place on a real kubelet: an image-only change of a sidecar is patched into the live pods
/// of a 3-replica Deployment (maxUnavailable 1), the kubelet restarting just the sidecar
/// container: same pods, the app never restarted, one pod upgraded at a time, and none patched
/// while another was unready (seen by a watch; a pod whose own probe fails by itself, as they do
/// on a loaded node, is unready through no doing of the engine's, which sees it through the
/// Deployment's status). An env change then restarts the Deployment.
async fn in_place_upgrade(
    client: &kube::Client,
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    configmaps: &Api<ConfigMap>,
) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    configmaps
        .create(
            &PostParams::default(),
            &patcher("localhost/busybox:1.35", None),
        )
        .await
        .unwrap();
    wait_both_publish(configmaps, "patcher:v1").await;
    deployments
        .create(
            &PostParams::default(),
            &one_pod_at_a_time(deployment("inplace", 3, Some("patcher:v1"))),
        )
        .await
        .unwrap();
    let before = wait_running(pods, "inplace", 3, &["app", "patcher"], Some("patcher:v1=")).await;
    let uids: BTreeSet<String> = before
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let old_stamp = stamp(&before[0]).unwrap().to_owned();

    // Every state of the pods, from a watch: the most not Ready at once, and the most in the
    // middle of an upgrade (patched, not yet Ready on the restarted sidecar).
    let timeline = std::sync::Arc::new(std::sync::Mutex::new(UpgradeTimeline::new(
        "patcher",
        "localhost/busybox:next",
    )));
    let seen = timeline.clone();
    let watched = pods.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().labels("app=inplace");
        let mut events = watcher(watched, config).applied_objects().boxed();
        while let Some(Ok(pod)) = events.next().await {
            seen.lock().unwrap().saw(&pod, std::time::Instant::now());
        }
    });
    // The watch has the pods as they are (all Ready) before the edit.
    eventually(DEADLINE, "the watch sees the 3 pods Ready", || async {
        let timeline = timeline.lock().unwrap();
        (timeline.pods.len() == 3 && timeline.pods.values().all(|p| p.ready)).then_some(())
    })
    .await;

    edit(configmaps, patcher("localhost/busybox:next", None)).await;
    let upgraded = eventually(
        Duration::from_secs(180),
        "inplace: 3 pods upgraded in place to busybox:next",
        || async {
            let list = pods_of(pods, "inplace").await;
            (list.len() == 3
                && list.iter().all(|p| {
                    ready(p)
                        && running(p).len() == 2
                        && stamp(p).is_some_and(|s| s.starts_with("patcher:v1=") && s != old_stamp)
                        && spec_image(p, "patcher") == Some("localhost/busybox:next")
                        && container_status(p, "patcher").is_some_and(|(restarts, _)| restarts >= 1)
                }))
            .then_some(list)
        },
    )
    .await;
    watch.abort();
    let after: BTreeSet<String> = upgraded
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(after, uids, "the same pods, upgraded in place");
    for pod in &upgraded {
        let (app_restarts, _) = container_status(pod, "app").unwrap();
        let (sidecar_restarts, _) = container_status(pod, "patcher").unwrap();
        assert_eq!(app_restarts, 0, "the app container never restarted");
        assert!(sidecar_restarts >= 1, "the kubelet restarted the sidecar");
        // The signal the engine judged the upgrade by: the kubelet observed the generation
        // the patch made.
        let generation = pod.metadata.generation.unwrap_or_default();
        let observed = pod.status.as_ref().and_then(|s| s.observed_generation);
        assert!(
            generation >= 2 && observed == Some(generation),
            "pod generation {generation}, observed by the kubelet {observed:?}"
        );
    }
    let timeline = timeline.lock().unwrap().clone();
    println!(
        "in place, as the watch saw it (most unready at once: {}):\n{}",
        timeline.most_unready,
        timeline.lines.join("\n")
    );
    assert!(
        timeline.most_upgrading <= 1,
        "{} pods upgrading at once, not one at a time:\n{}",
        timeline.most_upgrading,
        timeline.lines.join("\n")
    );
    assert!(
        timeline.patched_into_unready.is_empty(),
        "a pod patched while another was unready (maxUnavailable 1): {:?}\n{}",
        timeline.patched_into_unready,
        timeline.lines.join("\n")
    );
    assert_eq!(
        replicasets_of(client, "inplace").await,
        1,
        "no new ReplicaSet"
    );

    // Before any restart of the template (whose cooldown would hold the next revision back):
    // a broken image, then its fix, healed into the broken pod first.
    heal_after_a_failed_in_place_upgrade(pods, configmaps, &upgraded).await;

    // An env change is not made in place: the Deployment is restarted.
    edit(configmaps, patcher("localhost/busybox:next", Some("debug"))).await;
    let restarted = eventually(
        Duration::from_secs(180),
        "inplace restarted for the env change",
        || async {
            let list = pods_of(pods, "inplace").await;
            (list.len() == 3
                && list.iter().all(|p| {
                    ready(p)
                        && running(p).len() == 2
                        && p.metadata.uid.as_ref().is_some_and(|u| !uids.contains(u))
                }))
            .then_some(list)
        },
    )
    .await;
    assert!(restarted.iter().all(|p| stamp(p) != stamp(&upgraded[0])));
    let sets = replicasets_of(client, "inplace").await;
    if sets != 2 {
        panic!(
            "inplace restarted once for the env change: 2 ReplicaSets, not {sets}:\n{}",
            restarts_explained(client, "inplace").await
        );
    }
}

/// An image the node does not have (and may never pull): the kubelet cannot start the first
/// patched pod's sidecar, the upgrade fails, the campaign pauses. The fix is upgraded into that
/// broken pod first, though its Deployment is unhealthy because of it, then into the others:
/// the same pods, all Ready on the fixed image.
async fn heal_after_a_failed_in_place_upgrade(
    pods: &Api<Pod>,
    configmaps: &Api<ConfigMap>,
    running_now: &[Pod],
) {
    let uids: BTreeSet<String> = running_now
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    edit(configmaps, patcher("localhost/busybox:missing", None)).await;
    let broken = eventually(
        Duration::from_secs(120),
        "one inplace pod patched to the missing image, its sidecar unable to start",
        || async {
            let list = pods_of(pods, "inplace").await;
            let waiting: Vec<&Pod> = list
                .iter()
                .filter(|p| {
                    spec_image(p, "patcher") == Some("localhost/busybox:missing")
                        && p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .into_iter()
                            .flatten()
                            .any(|c| {
                                c.name == "patcher"
                                    && c.state
                                        .as_ref()
                                        .and_then(|s| s.waiting.as_ref())
                                        .is_some_and(|w| w.reason.is_some())
                            })
                })
                .collect();
            (waiting.len() == 1).then(|| waiting[0].metadata.name.clone().unwrap())
        },
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the campaign of patcher:v1 paused",
        || async {
            let status = configmaps.get("sidecar-injector-status").await.ok()?;
            let book: Value = serde_json::from_str(status.data.as_ref()?.get("campaigns")?).ok()?;
            (book["campaigns"]["patcher:v1"]["state"] == "paused").then_some(())
        },
    )
    .await;
    assert_eq!(
        pods_of(pods, "inplace")
            .await
            .iter()
            .filter(|p| spec_image(p, "patcher") == Some("localhost/busybox:missing"))
            .count(),
        1,
        "no other pod touched after the failure"
    );

    edit(configmaps, patcher("localhost/busybox:1.35", None)).await;
    let healed = eventually(
        Duration::from_secs(180),
        "inplace: the broken pod healed, then the rest, all on busybox:1.35",
        || async {
            let list = pods_of(pods, "inplace").await;
            (list.len() == 3
                && list.iter().all(|p| {
                    ready(p)
                        && running(p).len() == 2
                        && spec_image(p, "patcher") == Some("localhost/busybox:1.35")
                }))
            .then_some(list)
        },
    )
    .await;
    let after: BTreeSet<String> = healed
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(after, uids, "the same pods, healed in place");
    let logs = injector_logs(&["--tail=-1"]);
    let first = logs
        .lines()
        .find(|l| l.contains("upgrading in place:") && l.contains("busybox:1.35"))
        .unwrap_or_default();
    assert!(
        first.contains(&broken),
        "the broken pod {broken} was upgraded first: {first}"
    );
    assert!(
        logs.contains(&format!("healing first: {broken} ")),
        "healed while its Deployment was unhealthy:\n{logs}"
    );
}
