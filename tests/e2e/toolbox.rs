//! The operator's toolbox against the real apiserver: the webhook's warnings as kubectl shows
//! them, and the binary run by kubectl as its `sidecar-injector` plugin.

use std::process::Command;

use k8s_openapi::api::batch::v1::Job;

use super::*;
use support::cluster::control_plane;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn pod(name: &str, key: &str, request: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}, "annotations": {key: request}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_shows_the_webhooks_warnings() {
    let ctx = TestContext::new("warnings", &["--on-missing-sidecar=allow"]).await;
    let kubeconfig = control_plane().kubeconfig.to_str().unwrap().to_owned();
    let create = |document: Value| {
        let output = kubectl(
            &[
                "--kubeconfig",
                &kubeconfig,
                "-n",
                &ctx.namespace,
                "create",
                "-f",
                "-",
            ],
            &[],
            &document.to_string(),
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stderr)
    };

    // Allowed by --on-missing-sidecar=allow, uninjected: the creator is told.
    let missing = create(pod("missing", "injector/request", "logger:v9"));
    assert!(
        missing.contains(r#"Warning: sidecar(s) not found, not injected: "logger:v9""#),
        "{missing}"
    );
    let created = ctx.api::<Pod>().get("missing").await.unwrap();
    assert_eq!(container_names(&created), ["app"]);

    // A request under another annotation namespace (a Tumblr manifest, say).
    let other = create(pod("tumblr", "injector.tumblr.com/request", "logger:v1"));
    assert!(
        other.contains(
            "Warning: not injected: the pod requests sidecars with injector.tumblr.com/request, but this injector reads injector/request"
        ),
        "{other}"
    );

    // An injected pod: nothing to warn about.
    let fine = create(pod("fine", "injector/request", "logger:v1"));
    assert!(!fine.contains("Warning"), "{fine}");
    let created = ctx.api::<Pod>().get("fine").await.unwrap();
    assert_eq!(container_names(&created), ["app", "log-shipper"]);

    // A Job whose pods would get logger:v1 as a classic sidecar: created, and its creator is
    // told that it would never complete.
    let job = create(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "nightly"},
        "spec": {"template": {
            "metadata": {"annotations": {"injector/request": "logger:v1"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "example.org/work:1"}]}
        }}
    }));
    assert!(
        job.contains(
            "Warning: sidecar(s) logger:v1 would be injected into this Job's pods as regular containers"
        ) && job.contains("the Job never completes"),
        "{job}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_runs_the_binary_as_its_sidecar_injector_plugin() {
    let ctx = TestContext::new("plugin", &[]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("logger:v1"))).await;
    wait_ready(&ctx, "web", 1).await;

    // The install step the README gives: a symlink named kubectl-sidecar_injector on PATH.
    let bin = tempfile::tempdir().unwrap();
    let plugin = bin.path().join("kubectl-sidecar_injector");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sidecar-injector"), &plugin).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.path().to_owned())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let kubeconfig = control_plane().kubeconfig.clone();
    let env = [
        ("PATH", path.as_os_str()),
        ("KUBECONFIG", kubeconfig.as_os_str()),
    ];

    let listed = kubectl(&["plugin", "list"], &env, "");
    assert!(
        text(&listed.stdout).contains(plugin.to_str().unwrap()),
        "{}{}",
        text(&listed.stdout),
        text(&listed.stderr)
    );

    // kubectl's conventions: the cluster from KUBECONFIG, -n, --context.
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config");
    let drift = |extra: &[&str]| {
        let mut args = vec![
            "sidecar-injector",
            "drift",
            "-n",
            &ctx.namespace,
            "--config-directory",
            config,
        ];
        args.extend_from_slice(extra);
        kubectl(&args, &env, "")
    };
    for extra in [
        &["-o", "json"][..],
        &["-o", "json", "--context", "testbed"][..],
    ] {
        let output = drift(extra);
        assert!(
            output.status.success(),
            "{extra:?}: {}",
            text(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        let rows = report["workloads"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{report:#}");
        assert_eq!(rows[0]["namespace"], ctx.namespace.as_str(), "{report:#}");
        assert_eq!(rows[0]["sidecar"], "logger:v1", "{report:#}");
        assert_eq!(rows[0]["state"], "current", "{report:#}");
    }
    // `-o yaml` holds the same document as `-o json`.
    let json_report: Value = serde_json::from_slice(&drift(&["-o", "json"]).stdout).unwrap();
    let yaml = drift(&["-o", "yaml"]);
    assert!(yaml.status.success(), "{}", text(&yaml.stderr));
    // (YAML, not JSON, which a YAML reader would take as well.)
    assert!(
        text(&yaml.stdout).starts_with("sidecars:\n"),
        "{}",
        text(&yaml.stdout)
    );
    let yaml_report: Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(yaml_report, json_report, "{}", text(&yaml.stdout));

    // The table says so when nothing is left to list, and why (kubectl's "No resources found").
    let table = drift(&["--state", "stale"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    assert!(
        text(&table.stdout).ends_with(&format!(
            "REASON\n(none in namespace {} matches --state stale)\n",
            ctx.namespace
        )),
        "{}",
        text(&table.stdout)
    );
    let unknown = drift(&["-o", "json", "--context", "no-such-context"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("--context no-such-context"),
        "{}",
        text(&unknown.stderr)
    );

    // Usage speaks of the command the user typed.
    let help = kubectl(&["sidecar-injector", "drift", "--help"], &env, "");
    assert!(
        text(&help.stdout).contains("Usage: kubectl sidecar-injector drift"),
        "{}",
        text(&help.stdout)
    );
}

/// `sidecar-injector explain ARGS` against the control plane, in its text form.
pub(crate) fn explain_page(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("explain")
        .arg("--kubeconfig")
        .arg(&control_plane().kubeconfig)
        .args(args)
        .output()
        .expect("explain runs");
    assert!(
        output.status.success(),
        "explain {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// `sidecar-injector explain ARGS -o json` against the control plane.
pub(crate) fn explain(args: &[&str]) -> Value {
    let args: Vec<&str> = ["-o", "json"].iter().chain(args).copied().collect();
    serde_json::from_str(&explain_page(&args)).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_says_why_a_pod_was_injected_how_stale_it_is_and_what_the_engine_plans() {
    // The engine only plans (dry-run), so the stale workload stays for explain to look at.
    let ctx = engine_context("explain", &["--rollout=dry-run"]).await;
    let namespace = ctx.namespace.clone();
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 1, &v1, DEADLINE).await;
    let web = pods_of(&ctx, "web").await[0].metadata.name.clone().unwrap();
    let pod_arg = format!("pod/{web}");
    let mut args = scope_args(&namespace);
    args.extend(["-n", namespace.as_str(), pod_arg.as_str()]);

    let current = explain(&args);
    assert_eq!(current["injection"]["verdict"], "inject", "{current:#}");
    assert!(
        current["judged"]
            .as_str()
            .unwrap()
            .starts_with("new pods of ReplicaSet web-"),
        "{current:#}"
    );
    let (_, revision) = v1.split_once('=').unwrap();
    assert_eq!(current["pod"]["injected"], true);
    assert_eq!(current["pod"]["revisions"]["tracer:v1"], revision);
    assert_eq!(current["sidecars"][0]["state"], "current", "{current:#}");
    assert_eq!(current["workload"], format!("Deployment {namespace}/web"));
    assert_eq!(current["rollout"]["action"], "nothing", "{current:#}");

    // The config changes: the pod is stale, and the engine would restart it as the canary...
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_published(&ctx, &v2).await;
    let stale = explain(&args);
    assert_eq!(stale["sidecars"][0]["state"], "stale", "{stale:#}");
    assert_eq!(stale["sidecars"][0]["carried"], revision);
    assert_eq!(
        stale["sidecars"][0]["wanted"],
        v2.split_once('=').unwrap().1
    );
    assert_eq!(stale["rollout"]["action"], "restart", "{stale:#}");
    assert_eq!(stale["rollout"]["canary"], true, "{stale:#}");

    // Asked about the Deployment: its own template, its pods by state, the stale pod, the same
    // plan. A bare pod its selector matches is not its pod.
    create(
        &ctx.api::<Pod>(),
        json!({
            "metadata": {"name": "stray", "labels": {"app": "web"},
                         "annotations": {"injector/request": "tracer:v1"}},
            "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
        }),
    )
    .await;
    let mut workload_args = scope_args(&namespace);
    workload_args.extend(["-n", namespace.as_str(), "deploy/web"]);
    let workload = explain(&workload_args);
    assert_eq!(
        workload["judged"], "new pods of Deployment web",
        "{workload:#}"
    );
    assert_eq!(workload["injection"]["verdict"], "inject", "{workload:#}");
    assert_eq!(workload["workload_pods"]["count"], 1, "{workload:#}");
    assert_eq!(workload["workload_pods"]["states"], json!({"stale": 1}));
    assert_eq!(workload["workload_pods"]["shown"], web.as_str());
    assert_eq!(workload["pod"], stale["pod"], "{workload:#}");
    assert_eq!(workload["sidecars"], stale["sidecars"], "{workload:#}");
    assert_eq!(workload["rollout"], stale["rollout"], "{workload:#}");
    let page = explain_page(&workload_args);
    assert!(
        page.contains("Injection (new pods of Deployment web):"),
        "{page}"
    );
    assert!(page.contains("Its pods: 1 (1 stale)"), "{page}");
    assert!(
        page.contains(&format!("Pod {web}, its only pod:")),
        "{page}"
    );

    // A Deployment whose pods the webhook denies has none: its template says why.
    create_deployment(&ctx, "refused", 1, template("refused", Some("tracer:v9"))).await;
    wait_pods_denied(&ctx, "refused").await;
    let mut refused_args = scope_args(&namespace);
    refused_args.extend(["-n", namespace.as_str(), "deployment.apps/refused"]);
    let refused = explain(&refused_args);
    assert_eq!(refused["injection"]["verdict"], "deny", "{refused:#}");
    assert!(
        refused["injection"]["message"]
            .as_str()
            .unwrap()
            .contains("\"tracer:v9\" not found"),
        "{refused:#}"
    );
    assert_eq!(refused["workload_pods"]["count"], 0, "{refused:#}");
    assert!(refused.get("pod").is_none(), "{refused:#}");
    assert_eq!(refused["rollout"]["why"], "it has no pods to restart");

    // A Job's pods run to completion: explained by its template and its pods, never restarted.
    // Made after the edit, its pod carries tracer's revision in force: current.
    let mut job_template = template("once", Some("tracer:v1"));
    job_template["spec"]["restartPolicy"] = json!("Never");
    create(
        &ctx.api::<Job>(),
        json!({"metadata": {"name": "once"}, "spec": {"template": job_template}}),
    )
    .await;
    let job_pod = eventually(DEADLINE, "the Job's pod", || async {
        pods_of(&ctx, "once").await.into_iter().next()
    })
    .await;
    let job_pod = job_pod.metadata.name.unwrap();
    let mut job_args = scope_args(&namespace);
    job_args.extend(["-n", namespace.as_str(), "job/once"]);
    let job = explain(&job_args);
    assert_eq!(job["judged"], "new pods of Job once", "{job:#}");
    assert_eq!(job["injection"]["verdict"], "inject", "{job:#}");
    assert_eq!(job["workload_pods"]["count"], 1, "{job:#}");
    // Excluded, as `drift` counts a Job's pods, with the revision it carries still shown.
    assert_eq!(job["workload_pods"]["states"], json!({"excluded": 1}));
    assert_eq!(job["workload_pods"]["shown"], job_pod.as_str());
    assert_eq!(job["sidecars"][0]["state"], "excluded", "{job:#}");
    assert_eq!(
        job["sidecars"][0]["excluded"], "a Job's pod (runs to completion)",
        "{job:#}"
    );
    assert_eq!(
        job["sidecars"][0]["carried"], job["sidecars"][0]["wanted"],
        "{job:#}"
    );
    assert!(
        job["rollout"]["why"]
            .as_str()
            .unwrap()
            .contains("never restarts a Job's pods"),
        "{job:#}"
    );

    // A CronJob (suspended, so only the Job made here as its controller would make it runs):
    // its pods are those of its Jobs; the Job above is not one.
    let cronjobs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &namespace,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "batch", "v1", "CronJob",
        )),
    );
    let mut nightly_template = template("nightly", Some("tracer:v1"));
    nightly_template["spec"]["restartPolicy"] = json!("Never");
    let cronjob: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "suspend": true,
                 "jobTemplate": {"spec": {"template": nightly_template}}}
    }))
    .unwrap();
    let cronjob = cronjobs
        .create(&PostParams::default(), &cronjob)
        .await
        .unwrap();
    create(
        &ctx.api::<Job>(),
        json!({
            "metadata": {"name": "nightly-1", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                "uid": cronjob.metadata.uid.unwrap(), "controller": true}]},
            "spec": {"template": nightly_template}
        }),
    )
    .await;
    let nightly_pod = eventually(DEADLINE, "the CronJob's Job's pod", || async {
        pods_of(&ctx, "nightly").await.into_iter().next()
    })
    .await;
    let mut cronjob_args = scope_args(&namespace);
    cronjob_args.extend(["-n", namespace.as_str(), "cj/nightly"]);
    let nightly = explain(&cronjob_args);
    assert_eq!(
        nightly["judged"], "new pods of CronJob nightly",
        "{nightly:#}"
    );
    assert_eq!(nightly["injection"]["verdict"], "inject", "{nightly:#}");
    assert_eq!(nightly["workload_pods"]["count"], 1, "{nightly:#}");
    assert_eq!(
        nightly["workload_pods"]["shown"],
        nightly_pod.metadata.name.unwrap()
    );
    let page = explain_page(&cronjob_args);
    assert!(
        page.contains("Injection (new pods of CronJob nightly):"),
        "{page}"
    );
    assert!(page.contains("Its pods: 1 (1 excluded)"), "{page}");
    assert!(
        page.contains("excluded   carries ") && page.contains(": a Job's pod (runs to completion)"),
        "{page}"
    );

    // The stale web pod's restart waits outside the maintenance window, and says until when.
    let now = k8s_openapi::jiff::Timestamp::now().to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    let opens = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_hours(2))
        .unwrap();
    let closes = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_hours(3))
        .unwrap();
    let window = format!(
        "{:02}:{:02}-{:02}:{:02} UTC",
        opens.hour(),
        opens.minute(),
        closes.hour(),
        closes.minute()
    );
    let mut windowed = args.clone();
    windowed.extend(["--maintenance-window", window.as_str()]);
    let waiting = explain(&windowed);
    assert_eq!(waiting["rollout"]["action"], "waiting", "{waiting:#}");
    let message = waiting["rollout"]["message"].as_str().unwrap();
    assert!(
        message.contains("outside maintenance window (opens"),
        "{message}"
    );

    // A pod let through uninjected: the check that decided, in words.
    create(&ctx.api::<Pod>(), json!({
        "metadata": {"name": "tumblr", "annotations": {"injector.tumblr.com/request": "tracer:v1"}},
        "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
    }))
    .await;
    let mut args = scope_args(&namespace);
    args.extend(["-n", namespace.as_str(), "tumblr"]);
    let skipped = explain(&args);
    assert_eq!(skipped["injection"]["verdict"], "skip", "{skipped:#}");
    assert_eq!(skipped["judged"], "this pod");
    let check = &skipped["injection"]["checks"][0];
    assert_eq!(check["passed"], false);
    assert!(
        check["detail"].as_str().unwrap().contains(
            "injector.tumblr.com/request is set, but this injector reads the injector prefix"
        ),
        "{skipped:#}"
    );
    assert_eq!(skipped["pod"]["injected"], false);
    assert!(skipped.get("rollout").is_none(), "{skipped:#}");

    // A bare pod: left out as `drift` leaves it out, unless bare pods are evicted, and then
    // the engine's plan for it is given.
    create(
        &ctx.api::<Pod>(),
        json!({
            "metadata": {"name": "bare", "annotations": {"injector/request": "tracer:v1"}},
            "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
        }),
    )
    .await;
    let mut args = scope_args(&namespace);
    args.extend(["-n", namespace.as_str(), "bare"]);
    let bare = explain(&args);
    assert_eq!(bare["pod"]["injected"], true, "{bare:#}");
    assert_eq!(bare["sidecars"][0]["state"], "excluded", "{bare:#}");
    assert_eq!(
        bare["sidecars"][0]["excluded"],
        "a bare pod (no controller; --evict-bare-pods to restart it)"
    );
    assert!(bare.get("rollout").is_none(), "{bare:#}");
    args.push("--evict-bare-pods");
    let evicted = explain(&args);
    assert_eq!(evicted["sidecars"][0]["state"], "current", "{evicted:#}");
    assert!(evicted["sidecars"][0].get("excluded").is_none());
    assert_eq!(
        evicted["workload"],
        format!("Pod {namespace}/bare"),
        "{evicted:#}"
    );
    assert_eq!(
        evicted["rollout"],
        json!({"action": "nothing", "why": "its pods run the revisions in force"})
    );

    // The text form reads as one answer.
    let page = explain_page(&windowed);
    assert!(
        page.contains("Injection (new pods of ReplicaSet web-"),
        "{page}"
    );
    assert!(page.contains("=>  injects tracer:v1 (revision "), "{page}");
    assert!(page.contains("stale"), "{page}");
    assert!(
        page.contains(&format!("Rollout of Deployment {namespace}/web:")),
        "{page}"
    );
    assert!(
        page.contains("waits: outside maintenance window (opens"),
        "{page}"
    );

    // Opted out of rollouts: its stale pod is excluded, as `drift` says, and left alone.
    ctx.api::<Deployment>()
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"injector/rollout": "disabled"}}}),
            ),
        )
        .await
        .unwrap();
    let disabled = explain(&workload_args);
    assert_eq!(
        disabled["workload_pods"]["states"],
        json!({"excluded": 1}),
        "{disabled:#}"
    );
    assert_eq!(
        disabled["sidecars"][0]["excluded"],
        "rollout disabled by annotation"
    );
    assert_eq!(
        disabled["rollout"],
        json!({"action": "nothing",
               "why": "the engine leaves its pods out: rollout disabled by annotation"})
    );
    // Asked about its pod, the same.
    let pod = explain(&windowed);
    assert_eq!(
        pod["sidecars"][0]["excluded"], "rollout disabled by annotation",
        "{pod:#}"
    );
    assert_eq!(pod["rollout"], disabled["rollout"], "{pod:#}");
}
