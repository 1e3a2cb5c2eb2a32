//! The operator's toolbox against the real apiserver: the webhook's warnings as kubectl shows
//! them, and the binary run by kubectl as its `sidecar-injector` plugin.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use super::*;
use support::cluster::control_plane;

fn kubectl(args: &[&str], env: &[(&str, &std::ffi::OsStr)], stdin: Option<&Value>) -> Output {
    let mut command = Command::new("kubectl");
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("kubectl runs");
    let mut input = child.stdin.take().unwrap();
    if let Some(document) = stdin {
        input
            .write_all(serde_json::to_string(document).unwrap().as_bytes())
            .unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

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
            Some(&document),
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

    let listed = kubectl(&["plugin", "list"], &env, None);
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
            "-o",
            "json",
            "--config-directory",
            config,
        ];
        args.extend_from_slice(extra);
        kubectl(&args, &env, None)
    };
    for extra in [&[][..], &["--context", "testbed"][..]] {
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
    let unknown = drift(&["--context", "no-such-context"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("--context no-such-context"),
        "{}",
        text(&unknown.stderr)
    );

    // Usage speaks of the command the user typed.
    let help = kubectl(&["sidecar-injector", "drift", "--help"], &env, None);
    assert!(
        text(&help.stdout).contains("Usage: kubectl sidecar-injector drift"),
        "{}",
        text(&help.stdout)
    );
}
