//! One real node per test binary (testbed/realnode.sh: the testbed's control plane, kubelet,
//! containerd, kube-proxy and scheduler on this machine), with the injector image built by
//! scripts/image imported into it. When the node cannot be built or started, tests fail with
//! the reason: they never pass by skipping. A node left up by a killed run is taken down
//! first. A reaper process waits for this process to end, then runs `realnode.sh down`, which
//! restores the host, also after a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub struct Node {
    pub kubeconfig: PathBuf,
}

static NODE: OnceLock<Result<Node, String>> = OnceLock::new();

/// The node of this test binary, started on first use.
pub fn node() -> &'static Node {
    NODE.get_or_init(start).as_ref().unwrap_or_else(|reason| {
        panic!("the real-node tests need a real node, and it is not available: {reason}")
    })
}

fn last_line(script: &str, command: &mut Command) -> Result<String, String> {
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {script}: {e}"))?;
    if !output.status.success() {
        return Err(format!("{script} failed ({})", output.status));
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .map(str::to_owned)
        .ok_or_else(|| format!("{script} printed nothing"))
}

fn start() -> Result<Node, String> {
    let image = match std::env::var("SIDECAR_INJECTOR_IMAGE_TAR") {
        Ok(path) if !path.is_empty() => path,
        _ => {
            eprintln!("realnode: building the injector image with scripts/image");
            last_line(
                "scripts/image",
                // The image's binary as the hostile suite builds it: static, cargo's release
                // profile (the image's LTO decides no behaviour).
                Command::new("bash")
                    .arg(Path::new(ROOT).join("scripts/image"))
                    .env("SIDECAR_INJECTOR_PROFILE", "release"),
            )?
        }
    };
    // The reaper first, so that even a failed start is cleaned up.
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; bash '{root}/testbed/realnode.sh' down",
            pid = std::process::id(),
            root = ROOT,
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the reaper: {e}"))?;
    // `up` keeps a node that is already up, and these tests expect a fresh one: a run that
    // was killed with its reaper (a CI job or a session cut off) leaves its objects behind.
    eprintln!("realnode: taking down any node a killed run left up (testbed/realnode.sh down)");
    let down = realnode_command(&["down"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("cannot run testbed/realnode.sh down: {e}"))?;
    if !down.success() {
        return Err(format!("testbed/realnode.sh down failed ({down})"));
    }
    eprintln!("realnode: starting the node with testbed/realnode.sh up");
    let kubeconfig = last_line(
        "testbed/realnode.sh up",
        realnode_command(&["up"]).env("REALNODE_IMAGES", &image),
    )?;
    Ok(Node {
        kubeconfig: PathBuf::from(kubeconfig),
    })
}

pub async fn client() -> Client {
    let kubeconfig = Kubeconfig::read_from(&node().kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// `kubectl ARGS` against the node, as an operator runs it; its output whatever its status.
pub fn kubectl(args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&node().kubeconfig)
        .args(args)
        .current_dir(ROOT)
        .output()
        .expect("kubectl runs")
}

/// `helm ARGS` against the node (helm built by testbed/helm.sh, or $HELM_BIN's), which must
/// succeed; its stdout.
pub fn helm_ok(args: &[&str]) -> String {
    let dir = last_line(
        "testbed/helm.sh",
        Command::new("bash").arg(Path::new(ROOT).join("testbed/helm.sh")),
    )
    .expect("helm is built");
    let output = Command::new(Path::new(&dir).join("helm"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&node().kubeconfig)
        .current_dir(ROOT)
        .output()
        .expect("helm runs");
    assert!(
        output.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kubectl ARGS`, which must succeed; its stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    let output = kubectl(args);
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `sidecar-injector ARGS` against the node.
pub fn injector_command(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&node().kubeconfig)
        .current_dir(std::env::temp_dir())
        .output()
        .expect("sidecar-injector runs")
}

/// The last `count` lines of the node's `log` (in realnode.sh's state directory) that contain
/// any of `needles`.
fn node_log_lines(log: &str, needles: &[&str], count: usize) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let dir = std::env::var("RN").unwrap_or_else(|_| format!("{home}/.cache/k8s-realnode"));
    let log = std::fs::read_to_string(format!("{dir}/state/{log}")).unwrap_or_default();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// The API server's log lines about calling webhooks (a failed call admits a pod uninjected
/// under failurePolicy Ignore), the last 20.
fn apiserver_webhook_lines() -> String {
    node_log_lines("apiserver.log", &["webhook"], 20)
}

/// The kubelet's pod lifecycle lines, the last 30: when a deleted pod is finally removed
/// decides when a StatefulSet may recreate it under the same name.
fn kubelet_lifecycle_lines() -> String {
    node_log_lines(
        "kubelet.log",
        &[
            "SyncLoop ADD",
            "SyncLoop DELETE",
            "SyncLoop REMOVE",
            "Killing unwanted pod",
            "Orphaned pod",
            "eviction_manager",
        ],
        30,
    )
}

/// Polls `check` until it returns `Some`, or fails the test after `deadline` naming `what`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if start.elapsed() > deadline {
            let pods = kubectl(&["get", "pods", "-A", "-o", "wide"]);
            let logs = kubectl(&[
                "-n",
                "injector-system",
                "logs",
                "-l",
                "app=sidecar-injector",
                "--tail=40",
            ]);
            let conditions = kubectl(&[
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*].status.conditions[*]}{.type}={.status} {.message}{\"\\n\"}{end}",
            ]);
            panic!(
                "{what}: not within {deadline:?}\n{}\nnode conditions:\n{}\ninjector logs:\n{}\nAPI server, about webhooks:\n{}\nkubelet, pod lifecycle:\n{}",
                String::from_utf8_lossy(&pods.stdout),
                String::from_utf8_lossy(&conditions.stdout),
                String::from_utf8_lossy(&logs.stdout),
                apiserver_webhook_lines(),
                kubelet_lifecycle_lines()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The command `testbed/realnode.sh ARGS`, to run.
fn realnode_command(args: &[&str]) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(Path::new(ROOT).join("testbed/realnode.sh"))
        .args(args);
    command
}

/// `testbed/realnode.sh ARGS` (a fault to inject: `restart-apiserver`, `kill-container ID`),
/// which must succeed.
pub fn realnode(args: &[&str]) {
    let output = realnode_command(args)
        .stdin(Stdio::null())
        .output()
        .expect("realnode.sh runs");
    assert!(
        output.status.success(),
        "realnode.sh {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
