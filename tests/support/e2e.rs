//! What the end-to-end tests share beyond the cluster: workload fixtures, waits on the
//! cluster's state, and the one-shot commands run as a user runs them.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::cluster::{TestContext, put_config, rollout_args};
use super::injector::eventually;

pub const DEADLINE: Duration = Duration::from_secs(60);

/// `logger:v1=REV` as the shipped config stamps it, computed by the library itself.
pub fn logger_v1_stamp() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let report = sidecar_injector::sources::directory::load_config_directory(&dir).unwrap();
    report
        .sidecar_set()
        .get(&"logger:v1".parse().unwrap())
        .expect("logger:v1 ships in config/")
        .stamp
        .clone()
}

pub fn template(app: &str, request: Option<&str>) -> Value {
    let mut annotations = json!({});
    if let Some(request) = request {
        annotations["injector/request"] = json!(request);
    }
    json!({
        "metadata": {"labels": {"app": app}, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    })
}

pub async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("created");
}

/// A Deployment of `replicas` pods made from `template`, selected by its `app` label.
pub async fn create_deployment(ctx: &TestContext, name: &str, replicas: i32, template: Value) {
    create(&ctx.api::<Deployment>(), json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}
    }))
    .await;
}

/// A StatefulSet (its service named after it) of `replicas` pods made from `template`.
pub async fn create_statefulset(ctx: &TestContext, name: &str, replicas: i32, template: Value) {
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
pub async fn create_daemonset(ctx: &TestContext, name: &str, template: Value) {
    create(
        &ctx.api::<DaemonSet>(),
        json!({
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template}
        }),
    )
    .await;
}

pub async fn pods_of(ctx: &TestContext, app: &str) -> Vec<Pod> {
    pods_in(&ctx.api(), app).await
}

/// As [`pods_of`], in the namespace of `pods`.
pub async fn pods_in(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("pods listed")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until the ReplicaSet of Deployment `app` reports that the webhook denied its pods.
pub async fn wait_pods_denied(ctx: &TestContext, app: &str) {
    let replicasets = ctx.api::<k8s_openapi::api::apps::v1::ReplicaSet>();
    let selector = format!("app={app}");
    eventually(
        DEADLINE,
        &format!("{app}'s ReplicaSet reports the denial"),
        || async {
            let list = replicasets
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            list.items
                .iter()
                .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
                .any(|c| {
                    c.type_ == "ReplicaFailure"
                        && c.message.as_deref().unwrap_or_default().contains("denied")
                })
                .then_some(())
        },
    )
    .await;
}

pub fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `Kind/name` of every workload a `rollout -o json` plan restarts or holds, sorted.
pub fn planned_workloads(plan: &Value) -> Vec<String> {
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

pub fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Waits until the injector's latest "sidecar configs in force" line does (or, with
/// `present` false, no longer does) mention `text`.
pub async fn wait_in_force(injector: &super::injector::Injector, text: String, present: bool) {
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

/// The injector's log messages (JSON lines) that contain `text`.
pub fn logged(injector: &super::injector::Injector, text: &str) -> Vec<String> {
    injector
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l["message"].as_str().map(str::to_owned))
        .filter(|m| m.contains(text))
        .collect()
}

/// Waits until the injector logs a message containing `text`; returns it.
pub async fn wait_logged(injector: &super::injector::Injector, text: &str) -> String {
    eventually(
        DEADLINE,
        &format!("a log message with {text:?}"),
        || async { logged(injector, text).pop() },
    )
    .await
}

/// Waits until the injector has logged `count` messages that `matches` (failures it retries);
/// returns them with their times. Each is checked to say what the API server `said`, without
/// kube's dump of the whole Status, and the first and the last to be at least `spread` apart
/// (retried ever less often, not every second).
pub async fn wait_failures(
    injector: &super::injector::Injector,
    count: usize,
    matches: impl Fn(&str) -> bool,
    said: &str,
    spread: Duration,
) -> Vec<(k8s_openapi::jiff::Timestamp, String)> {
    let failures = || -> Vec<(k8s_openapi::jiff::Timestamp, String)> {
        injector
            .logs()
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|record| {
                let message = record["message"].as_str()?;
                matches(message).then(|| {
                    let at = record["timestamp"].as_str().unwrap().parse().unwrap();
                    (at, message.to_owned())
                })
            })
            .collect()
    };
    let seen = eventually(DEADLINE, &format!("{count} failures logged"), || async {
        let seen = failures();
        (seen.len() >= count).then_some(seen)
    })
    .await;
    for (_, message) in &seen {
        assert!(
            message.contains(said) && !message.contains("Status {"),
            "said as the API server said it ({said}), without a dump: {message}"
        );
    }
    let span = seen[count - 1].0.duration_since(seen[0].0);
    assert!(
        span >= k8s_openapi::jiff::SignedDuration::try_from(spread).unwrap(),
        "{count} failures within {span:?}, not {spread:?} or more: retried too often"
    );
    seen
}

/// The `injector/revision` item a config's text would stamp, computed by the library.
pub fn stamp_of(text: &str) -> String {
    let config = sidecar_injector::config::parse_config("test", text)
        .unwrap()
        .config;
    sidecar_injector::config::LoadedSidecar::new(config, "test").stamp
}

pub async fn create_pod(ctx: &TestContext, name: &str, request: &str) -> Result<Pod, kube::Error> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}, "annotations": {"injector/request": request}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    }))
    .unwrap();
    ctx.api::<Pod>().create(&PostParams::default(), &pod).await
}

/// The drift command's view of the e2e-drift test: configs as its injector reads them.
pub fn drift_args() -> Vec<&'static str> {
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

/// `sidecar-injector drift -o json ARGS` against the control plane, run from `dir`; whatever
/// its exit status.
pub fn drift_command(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    drift_command_as(&super::cluster::control_plane().kubeconfig, dir, args)
}

/// As [`drift_command`], connecting with `kubeconfig` (an account's, say).
pub fn drift_command_as(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("drift")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-o", "json"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("drift runs")
}

/// `sidecar-injector inject` of a Deployment whose pods ask for `request`, run in `dir` against
/// the test cluster with `args`: the `injector/revision` its template is stamped with, or the
/// command's stderr when it fails.
pub fn inject_revision(
    dir: &std::path::Path,
    request: &str,
    args: &[&str],
) -> Result<(String, String), String> {
    let manifest = dir.join("inject-me.yaml");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "inject-me"},
        "spec": {"selector": {"matchLabels": {"app": "inject-me"}},
                 "template": template("inject-me", Some(request))}});
    std::fs::write(&manifest, deployment.to_string()).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("inject")
        .arg("-f")
        .arg(&manifest)
        .arg("--kubeconfig")
        .arg(&super::cluster::control_plane().kubeconfig)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("inject runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(stderr);
    }
    let injected: Value = serde_yaml::from_slice(&output.stdout).unwrap();
    let revision = injected["spec"]["template"]["metadata"]["annotations"]["injector/revision"]
        .as_str()
        .unwrap_or_else(|| panic!("no revision: {injected:#}"))
        .to_owned();
    Ok((revision, stderr))
}

/// `sidecar-injector explain pod/POD -n NS` (its text form) for a pod of the test's namespace,
/// with the configs read as its injector reads them; whatever its exit status.
pub fn explain_pod(ctx: &TestContext, pod: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("explain")
        .arg("--kubeconfig")
        .arg(&super::cluster::control_plane().kubeconfig)
        .args(super::cluster::scope_args(&ctx.namespace))
        .args(["-n", &ctx.namespace, &format!("pod/{pod}")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("explain runs")
}

/// `sidecar-injector drift -o json` against the control plane, as an operator runs it.
pub fn drift_report(args: &[&str]) -> Value {
    drift_report_from(std::path::Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// As [`drift_report`], run from `dir` (outside the checkout, say).
pub fn drift_report_from(dir: &std::path::Path, args: &[&str]) -> Value {
    drift_report_as(&super::cluster::control_plane().kubeconfig, dir, args)
}

/// As [`drift_report_from`], connecting with `kubeconfig`.
pub fn drift_report_as(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    args: &[&str],
) -> Value {
    let output = drift_command_as(kubeconfig, dir, args);
    assert!(
        output.status.success(),
        "drift: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("drift prints JSON")
}

/// The row of `sidecar` in a `drift -o json` report.
pub fn sidecar_row<'r>(report: &'r Value, sidecar: &str) -> &'r Value {
    report["sidecars"]
        .as_array()
        .and_then(|rows| rows.iter().find(|s| s["name"] == sidecar))
        .unwrap_or_else(|| panic!("no {sidecar} row: {report:#}"))
}

// ---- The rollout engine -------------------------------------------------------------------

/// A rollout test's world: the injector (with `extra`, under deploy/'s RBAC) reads the test's
/// ConfigMaps, and `tracer:v1` is in force.
/// `kubectl ARGS` with `env` added to its environment and `stdin` written to it; whatever its
/// exit status.
pub fn kubectl(
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
    stdin: &str,
) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// What kubectl prints on stderr (its warnings) for a server-side dry run of a pod requesting
/// `request` in the test's namespace: it goes through the webhook and creates nothing.
/// `None` when kubectl fails.
pub fn dry_run_warnings(ctx: &TestContext, request: &str) -> Option<String> {
    let output = dry_run_pod(ctx, request, &[]);
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stderr).into_owned())
}

/// `kubectl create --dry-run=server EXTRA` of a pod requesting `request` in the test's
/// namespace: it goes through the webhook and creates nothing. Whatever its exit status.
pub fn dry_run_pod(ctx: &TestContext, request: &str, extra: &[&str]) -> std::process::Output {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "annotations": {"injector/request": request}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    });
    let kubeconfig = super::cluster::control_plane().kubeconfig.clone();
    let mut args = vec![
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "-n",
        &ctx.namespace,
        "create",
        "--dry-run=server",
    ];
    args.extend_from_slice(extra);
    args.extend(["-f", "-"]);
    kubectl(&args, &[], &pod.to_string())
}

/// The revision history the engine keeps in the test's namespace, when there is one.
pub async fn revision_history(ctx: &TestContext) -> Option<Value> {
    let history = ctx
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get_opt("sidecar-injector-history")
        .await
        .ok()??;
    serde_json::from_str(history.data.as_ref()?.get("history")?).ok()
}

/// The campaign book of the test's status ConfigMap, when it has one.
pub async fn campaign_book(ctx: &TestContext) -> Option<Value> {
    let status = ctx
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get_opt("sidecar-injector-status")
        .await
        .ok()??;
    serde_json::from_str(status.data.as_ref()?.get("campaigns")?).ok()
}

/// The campaign book once the status ConfigMap says the campaign of `sidecar` paused (the
/// gauge is set before the ConfigMap is written).
pub async fn wait_book_paused(ctx: &TestContext, sidecar: &str) -> Value {
    eventually(
        DEADLINE,
        &format!("the pause of {sidecar} in the status ConfigMap"),
        || async {
            campaign_book(ctx)
                .await
                .filter(|b| b["campaigns"][sidecar]["state"] == "paused")
        },
    )
    .await
}

/// Engine flags for a test that breaks a revision: campaigns settle in 1 s, a restart that does
/// not roll out fails at 6 s, the Lease moves within 3 s.
pub const QUICK_FAILURE: &[&str] = &[
    "--rollout=auto",
    "--settle",
    "1s",
    "--rollout-timeout",
    "6s",
    "--lease-duration",
    "3s",
];

/// [`QUICK_FAILURE`]'s pace for a test whose restarts take several steps (pods one at a time, a
/// bake): a restart that does not roll out fails at 40 s.
pub const PATIENT_FAILURE: &[&str] = &[
    "--rollout=auto",
    "--settle",
    "1s",
    "--rollout-timeout",
    "40s",
    "--lease-duration",
    "3s",
];

/// Waits until the injector's engine reports the campaign of `sidecar` paused.
pub async fn wait_campaign_paused(injector: &super::injector::Injector, sidecar: &str) {
    wait_campaign(injector, sidecar, "paused", Duration::from_secs(60)).await;
}

/// Waits up to `deadline` until the injector's engine reports the campaign of `sidecar` in
/// `state` (`paused`, `complete`).
pub async fn wait_campaign(
    injector: &super::injector::Injector,
    sidecar: &str,
    state: &str,
    deadline: Duration,
) {
    let sample =
        format!("sidecar_injector_rollout_campaign{{sidecar=\"{sidecar}\",state=\"{state}\"}}");
    eventually(
        deadline,
        &format!("the campaign of {sidecar} {state}"),
        || async { (injector.metric(&sample) == 1.0).then_some(()) },
    )
    .await;
}

/// A rollout test's world with tracer:v1 in force. When the injector runs the engine
/// (`--rollout=auto` in `extra`), it leads before this returns: a campaign is recorded only by
/// the leader, and the tests' later edits are revisions of one it knows.
pub async fn engine_context(test: &str, extra: &[&str]) -> TestContext {
    let namespace = format!("e2e-{test}");
    let ctx = TestContext::with_deploy_rbac(test, &rollout_args(&namespace, extra)).await;
    with_tracer_v1(ctx, extra).await
}

/// As [`engine_context`], in another control plane (the injector connects as its admin).
pub async fn engine_context_in(
    plane: &super::cluster::ControlPlane,
    test: &str,
    extra: &[&str],
) -> TestContext {
    let namespace = format!("e2e-{test}");
    let ctx = TestContext::in_plane(plane, test, &rollout_args(&namespace, extra)).await;
    with_tracer_v1(ctx, extra).await
}

async fn with_tracer_v1(ctx: TestContext, extra: &[&str]) -> TestContext {
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V1).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_in_force(injector, stamp_of(TRACER_V1), true).await;
    if extra.contains(&"--rollout=auto") {
        eventually(DEADLINE, "the injector leads the rollout", || async {
            (injector.metric("sidecar_injector_rollout_leader") == 1.0).then_some(())
        })
        .await;
    }
    ctx
}

/// Waits until `app` has exactly `count` pods, all stamped with `stamp` and Ready.
pub async fn wait_pods_at(
    ctx: &TestContext,
    app: &str,
    count: usize,
    stamp: &str,
    deadline: Duration,
) {
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
pub async fn wait_ready(ctx: &TestContext, app: &str, count: usize) {
    eventually(DEADLINE, &format!("{app}: {count} ready pods"), || async {
        let pods = pods_of(ctx, app).await;
        (pods.len() == count && pods.iter().all(is_ready)).then_some(())
    })
    .await
}

pub fn template_annotation(
    template: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    key: &str,
) -> Option<String> {
    template.as_ref()?.annotations.as_ref()?.get(key).cloned()
}

pub async fn replicaset_count(ctx: &TestContext, app: &str) -> usize {
    replicaset_count_in(&ctx.api(), app).await
}

/// As [`replicaset_count`], in the namespace of `replicasets`.
pub async fn replicaset_count_in(
    replicasets: &Api<k8s_openapi::api::apps::v1::ReplicaSet>,
    app: &str,
) -> usize {
    replicasets
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .len()
}

pub async fn events_for(ctx: &TestContext, name: &str, reason: &str) -> Vec<Event> {
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

pub const TRACER_V1: &str = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";

pub const TRACER_V2: &str = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";

pub async fn tracer_workloads(ctx: &TestContext) {
    create_deployment(ctx, "web", 2, template("web", Some("tracer:v1"))).await;
    create_statefulset(ctx, "db", 1, template("db", Some("tracer:v1"))).await;
    create_daemonset(ctx, "agent", template("agent", Some("tracer:v1"))).await;
    create_deployment(ctx, "plain", 1, template("plain", Some("logger:v1"))).await;
}

/// The stdout of a command that must have succeeded.
pub fn succeeded(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `sidecar-injector rollout` against the control plane, as an operator runs it.
pub fn rollout_command(namespace: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("rollout")
        .arg("--kubeconfig")
        .arg(&super::cluster::control_plane().kubeconfig)
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
        // As for serve in these tests (see `rollout_args`).
        .args(if args.contains(&"--bake") {
            &[][..]
        } else {
            &["--bake", "1s"][..]
        })
        .args(if args.contains(&"--in-place") {
            &[][..]
        } else {
            &["--in-place", "off"][..]
        })
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("rollout runs")
}

/// A PodDisruptionBudget `app` over the `pods` pods of `app` that allows no disruption, once
/// the disruption controller counts them all healthy.
pub async fn blocking_pdb(ctx: &TestContext, app: &str, pods: usize) -> Api<PodDisruptionBudget> {
    let pdbs = ctx.api::<PodDisruptionBudget>();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {"minAvailable": pods, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let pods = i32::try_from(pods).unwrap();
    eventually(
        DEADLINE,
        "the disruption controller counts the budget",
        || async {
            let status = pdbs.get(app).await.ok()?.status?;
            (status.expected_pods == pods && status.current_healthy == pods).then_some(())
        },
    )
    .await;
    pdbs
}

/// Watches the pods of `app` and remembers the fewest that were Ready and not being deleted at
/// any moment, and every pod uid seen.
pub fn watch_availability(
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

/// Waits until the test's running injector publishes `stamp` (`name:version=REV`) in its
/// status ConfigMap, as it does within moments of a config edit.
pub async fn wait_published(ctx: &TestContext, stamp: &str) {
    wait_published_in(ctx, &ctx.namespace, stamp).await;
}

/// As [`wait_published`], with the status ConfigMap in `namespace` (`--injector-namespace`).
pub async fn wait_published_in(ctx: &TestContext, namespace: &str, stamp: &str) {
    let (sidecar, revision) = stamp.split_once('=').unwrap();
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(ctx.client.clone(), namespace);
    eventually(DEADLINE, &format!("{stamp} published"), || async {
        let status = configmaps.get_opt("sidecar-injector-status").await.ok()??;
        let injectors: Value =
            serde_json::from_str(status.data.as_ref()?.get("injectors")?).ok()?;
        injectors
            .as_object()?
            .values()
            .any(|p| p["revisions"][sidecar] == revision)
            .then_some(())
    })
    .await;
}
