//! Kyverno's admission controller (built by testbed/kyverno.sh from the Go module proxy into a
//! cache), run beside a control plane as an out-of-cluster webhook: a real injector that is
//! not ours, adding a sidecar by a ClusterPolicy, for the tests of `--foreign-sidecar`.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::cluster::ControlPlane;

const DEADLINE: Duration = Duration::from_secs(120);

/// The folder holding `kyverno` and `crds/` ($KYVERNO_BIN, else built and cached by
/// testbed/kyverno.sh).
fn bin_dir() -> PathBuf {
    super::testbed_folder("kyverno.sh")
}

pub struct Kyverno {
    child: Child,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Kyverno {
    /// Kyverno's CRDs installed in `plane` and its admission controller started against it;
    /// it registers its own webhooks (at 127.0.0.1) once it runs.
    pub fn start(plane: &ControlPlane) -> Self {
        let bin = bin_dir();
        let kubeconfig = plane.kubeconfig.clone();
        let kubectl = |args: &[&str]| {
            let output = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(args)
                .output()
                .expect("kubectl runs");
            assert!(
                output.status.success(),
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        kubectl(&[
            "apply",
            "--server-side",
            "-f",
            bin.join("crds").to_str().unwrap(),
        ]);
        kubectl(&["create", "namespace", "kyverno"]);
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("kyverno.log")).unwrap();
        let port = super::free_port();
        let child = Command::new(bin.join("kyverno"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                &format!("--serverIP=127.0.0.1:{port}"),
                &format!("--webhookServerPort={port}"),
                "--admissionReports=false",
                "--metricsPort=0",
                "--controllerRuntimeMetricsAddress=0",
                "--leaderElectionRetryPeriod=1s",
                "--loggingFormat=json",
                "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
                "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
            ])
            .envs([
                ("KYVERNO_NAMESPACE", "kyverno"),
                ("KYVERNO_POD_NAME", "kyverno-test"),
                ("KYVERNO_SERVICEACCOUNT_NAME", "kyverno"),
                ("KYVERNO_ROLE_NAME", "kyverno"),
                ("KYVERNO_DEPLOYMENT", "kyverno"),
                ("INIT_CONFIG", "kyverno"),
                ("METRICS_CONFIG", "kyverno-metrics"),
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("kyverno starts");
        Self {
            child,
            kubeconfig,
            dir,
        }
    }

    /// The ClusterPolicy `mesh-proxy` applied: pods labelled `mesh: on` get a `mesh-proxy`
    /// container of `image` (with a random value in its env, new at each admission) and a
    /// `mesh-certs` volume. Retried until Kyverno's own webhook for policies answers.
    pub fn inject_mesh_proxy(&mut self, image: &str) {
        let policy = format!(
            r#"apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: mesh-proxy}}
spec:
  rules:
  - name: inject-mesh-proxy
    match:
      any:
      - resources:
          kinds: [Pod]
          selector: {{matchLabels: {{mesh: "on"}}}}
    mutate:
      patchStrategicMerge:
        spec:
          containers:
          - name: mesh-proxy
            image: "{image}"
            args: ["proxy", "sidecar"]
            env:
            - name: MESH_NONCE
              value: "{{{{ random('[a-z0-9]{{12}}') }}}}"
            volumeMounts: [{{name: mesh-certs, mountPath: /etc/mesh}}]
          volumes:
          - name: mesh-certs
            emptyDir: {{}}
"#
        );
        let start = Instant::now();
        loop {
            let output = super::e2e::kubectl(
                &[
                    "--kubeconfig",
                    self.kubeconfig.to_str().unwrap(),
                    "apply",
                    "-f",
                    "-",
                ],
                &[],
                &policy,
            );
            if output.status.success() {
                return;
            }
            self.assert_running();
            assert!(
                start.elapsed() < DEADLINE,
                "Kyverno did not take the policy within {DEADLINE:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until a new pod labelled `mesh: on` in `namespace` gets `image` as its
    /// `mesh-proxy` (Kyverno takes a policy into its cache a moment after accepting it).
    pub fn wait_injects(&mut self, namespace: &str, image: &str) {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "probe-", "namespace": namespace, "labels": {"mesh": "on"}},
            "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]}
        })
        .to_string();
        let start = Instant::now();
        loop {
            let output = super::e2e::kubectl(
                &[
                    "--kubeconfig",
                    self.kubeconfig.to_str().unwrap(),
                    "create",
                    "--dry-run=server",
                    "-o",
                    "jsonpath={.spec.containers[?(@.name==\"mesh-proxy\")].image}",
                    "-f",
                    "-",
                ],
                &[],
                &pod,
            );
            if String::from_utf8_lossy(&output.stdout).trim() == image {
                return;
            }
            self.assert_running();
            assert!(
                start.elapsed() < DEADLINE,
                "Kyverno did not inject {image} within {DEADLINE:?}: {} {}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn assert_running(&mut self) {
        let exited = self.child.try_wait().ok().flatten();
        assert!(
            exited.is_none(),
            "Kyverno exited ({exited:?}):\n{}",
            self.log_tail(60)
        );
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("kyverno.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Kyverno {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- kyverno log (last 100 lines) ---\n{}\n---",
                self.log_tail(100)
            );
        }
    }
}
