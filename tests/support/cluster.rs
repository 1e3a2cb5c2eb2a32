//! One real control plane (etcd, kube-apiserver, kube-controller-manager built from Debian's
//! source package by testbed/build.sh) per test binary, a test kubelet beside it, and a fresh
//! namespace, injector and MutatingWebhookConfiguration per test.
//!
//! When the control plane cannot be built or started, tests fail with the reason: they never
//! pass by skipping. Everything is stopped by pid when the test binary exits, also after a
//! panic: a reaper process waits for this process to end, then runs testbed/down.sh.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use sidecar_injector::serve::tls::DevCertificates;

use super::injector::Injector;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub struct ControlPlane {
    pub state_dir: PathBuf,
    pub kubeconfig: PathBuf,
}

static CONTROL_PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The control plane of this test binary, started on first use.
pub fn control_plane() -> &'static ControlPlane {
    CONTROL_PLANE
        .get_or_init(start_control_plane)
        .as_ref()
        .unwrap_or_else(|reason| {
            panic!("end-to-end tests need a real control plane, and it is not available: {reason}")
        })
}

/// kube-controller-manager's `--kube-api-qps` (burst twice that) for a control plane not yet
/// started: the scale bench raises it for its set-up of 50,000 pods.
pub static CONTROLLER_QPS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

fn run_script(script: &str, args: &[&str]) -> Result<String, String> {
    run_script_with(script, args, &[])
}

fn run_script_with(script: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let output = Command::new("bash")
        .arg(Path::new(ROOT).join("testbed").join(script))
        .args(args)
        .envs(env.iter().copied())
        .env(
            "K8S_TESTBED_CM_QPS",
            CONTROLLER_QPS.get().copied().unwrap_or(200).to_string(),
        )
        .output()
        .map_err(|e| format!("cannot run testbed/{script}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "testbed/{script} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .last()
        .map(str::to_owned)
        .ok_or_else(|| format!("testbed/{script} printed nothing"))
}

/// The minor release of the control plane the tests run on (`36` for v1.36.3), read from its
/// kube-apiserver binary: the tests of a feature newer than it check the fallback instead.
pub fn server_minor() -> u32 {
    static MINOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MINOR.get_or_init(|| {
        let bin = match std::env::var("K8S_TESTBED_BIN") {
            Ok(dir) if !dir.is_empty() => dir,
            _ => run_script("build.sh", &[]).expect("testbed/build.sh"),
        };
        let output = Command::new(Path::new(&bin).join("kube-apiserver"))
            .arg("--version")
            .output()
            .expect("kube-apiserver --version");
        let text = String::from_utf8_lossy(&output.stdout);
        text.split('.')
            .nth(1)
            .and_then(|minor| minor.parse().ok())
            .unwrap_or_else(|| panic!("no release in {text:?}"))
    })
}

/// Stops the control plane of `state` and removes it once this test binary has exited.
fn spawn_reaper(state: &str) -> Result<(), String> {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; bash '{ROOT}/testbed/down.sh' '{state}'; rm -rf '{state}'",
            pid = std::process::id(),
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the reaper: {e}"))?;
    Ok(())
}

fn start_control_plane() -> Result<ControlPlane, String> {
    let bin_dir = match std::env::var("K8S_TESTBED_BIN") {
        Ok(dir) if !dir.is_empty() => dir,
        _ => {
            eprintln!(
                "e2e: building (or finding cached) kube-apiserver and kube-controller-manager with testbed/build.sh"
            );
            run_script("build.sh", &[])?
        }
    };
    let state_dir =
        std::env::temp_dir().join(format!("sidecar-injector-e2e-{}", std::process::id()));
    let state = state_dir.to_str().ok_or("non-UTF-8 temp dir")?.to_owned();
    // The reaper first, so that even a failed start is cleaned up.
    spawn_reaper(&state)?;
    let kubeconfig = run_script("up.sh", &[&state, &bin_dir])?;
    let plane = ControlPlane {
        state_dir,
        kubeconfig: PathBuf::from(kubeconfig),
    };
    let version = Command::new("kubectl")
        .args(["version", "--kubeconfig"])
        .arg(&plane.kubeconfig)
        .output()
        .map_err(|e| format!("cannot run kubectl: {e}"))?;
    eprintln!(
        "e2e: control plane from {bin_dir}, the test kubelet's nodes report {}:\n{}",
        super::kubelet::KUBELET_VERSION,
        String::from_utf8_lossy(&version.stdout).trim()
    );
    super::kubelet::start(&plane.kubeconfig, Duration::from_millis(300));
    Ok(plane)
}

/// A further control plane (apiserver, etcd, controllers; no kubelet), for the tests that
/// need several clusters; stopped and removed when dropped (or, should the test binary die,
/// by a reaper as the shared one is).
pub struct OtherControlPlane {
    pub plane: ControlPlane,
}

impl OtherControlPlane {
    pub fn start(name: &str) -> Self {
        Self::start_with(name, "")
    }

    /// As [`OtherControlPlane::start`], kube-apiserver run with `apiserver_args` too.
    pub fn start_with(name: &str, apiserver_args: &str) -> Self {
        control_plane();
        let state_dir = std::env::temp_dir().join(format!(
            "sidecar-injector-e2e-{}-{name}",
            std::process::id()
        ));
        let state = state_dir.to_str().expect("a UTF-8 temp dir").to_owned();
        spawn_reaper(&state).expect("a reaper");
        let bin_dir = std::env::var("K8S_TESTBED_BIN").unwrap_or_default();
        let kubeconfig = run_script_with(
            "up.sh",
            &[&state, &bin_dir],
            &[("K8S_TESTBED_APISERVER_ARGS", apiserver_args)],
        )
        .unwrap_or_else(|err| panic!("control plane {name}: {err}"));
        Self {
            plane: ControlPlane {
                state_dir,
                kubeconfig: PathBuf::from(kubeconfig),
            },
        }
    }

    pub async fn client(&self) -> Client {
        client_of(&self.plane.kubeconfig).await
    }

    /// Stops its processes (its kubeconfig still names it: a cluster that is down).
    pub fn stop(&self) {
        let _ = run_script("down.sh", &[self.plane.state_dir.to_str().unwrap()]);
    }
}

impl Drop for OtherControlPlane {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.plane.state_dir);
    }
}

/// One kubeconfig with a context of each `(name, kubeconfig)` (each of up.sh's, with its
/// cluster, user and context renamed `name`), written to `path`.
pub fn fleet_kubeconfig(path: &Path, clusters: &[(&str, &Path)]) {
    let mut merged = json!({"apiVersion": "v1", "kind": "Config",
                            "clusters": [], "users": [], "contexts": []});
    for (name, kubeconfig) in clusters {
        let text = std::fs::read_to_string(kubeconfig).expect("a testbed kubeconfig");
        let one: serde_json::Value = serde_yaml::from_str(&text).expect("YAML");
        for (list, inner) in [
            ("clusters", "cluster"),
            ("users", "user"),
            ("contexts", "context"),
        ] {
            let mut entry = one[list][0].clone();
            entry["name"] = json!(name);
            if list == "contexts" {
                entry[inner]["cluster"] = json!(name);
                entry[inner]["user"] = json!(name);
            }
            merged[list].as_array_mut().unwrap().push(entry);
        }
    }
    merged["current-context"] = json!(clusters[0].0);
    std::fs::write(path, serde_yaml::to_string(&merged).unwrap()).expect("the kubeconfig written");
}

async fn client_of(kubeconfig: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("the testbed kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    Client::try_from(config).expect("a client")
}

pub async fn client() -> Client {
    let kubeconfig =
        Kubeconfig::read_from(&control_plane().kubeconfig).expect("the testbed kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    Client::try_from(config).expect("a client")
}

/// The last lines of one of the control plane's logs (apiserver, controller-manager, etcd).
pub fn log_tail(name: &str, lines: usize) -> String {
    let path = control_plane().state_dir.join(format!("{name}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One test's world: its namespace (labelled so that only its webhook sees it), its injector
/// and its MutatingWebhookConfiguration. Prints the logs when the test fails.
pub struct TestContext {
    pub client: Client,
    pub namespace: String,
    pub injector: Option<Injector>,
    pub certs: DevCertificates,
    /// The kubeconfig the injector connects with, when it has one.
    pub injector_kubeconfig: Option<PathBuf>,
    /// The injector's arguments, to start it again or start another replica.
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl TestContext {
    /// `test` names the namespace (`e2e-<test>`); `extra` are extra `serve` flags.
    pub async fn new(test: &str, extra: &[&str]) -> Self {
        Self::build(None, test, extra, false).await
    }

    /// As [`TestContext::new`], in another control plane than the shared one (the injector
    /// connects to it as its admin).
    pub async fn in_plane(plane: &ControlPlane, test: &str, extra: &[&str]) -> Self {
        Self::build(Some(plane), test, extra, false).await
    }

    /// As [`TestContext::new`], with the injector connected to the cluster as deploy/'s
    /// ServiceAccount under deploy/'s RBAC (moved into the test's namespace), never as admin.
    pub async fn with_deploy_rbac(test: &str, extra: &[&str]) -> Self {
        Self::build(None, test, extra, true).await
    }

    async fn build(
        plane: Option<&ControlPlane>,
        test: &str,
        extra: &[&str],
        deploy_rbac: bool,
    ) -> Self {
        control_plane();
        let client = match plane {
            Some(plane) => client_of(&plane.kubeconfig).await,
            None => client().await,
        };
        let namespace = format!("e2e-{test}");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": namespace, "labels": {"sidecar-injector-e2e": namespace}}
                }))
                .unwrap(),
            )
            .await
            .expect("a fresh namespace");
        // The ServiceAccount admission plugin rejects pods until the ServiceAccount controller
        // has made the namespace's `default` account; controllers retry, but a test creating a
        // Pod would not.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
        super::injector::eventually(
            Duration::from_secs(30),
            "the namespace's default ServiceAccount",
            || async { accounts.get_opt("default").await.ok().flatten() },
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let injector_kubeconfig = if deploy_rbac {
            Some(install_deploy_rbac(&client, &namespace, dir.path()).await)
        } else {
            plane.map(|plane| plane.kubeconfig.clone())
        };
        let identity: Vec<String> = injector_kubeconfig
            .iter()
            .flat_map(|path| ["--kubeconfig".to_owned(), path.to_str().unwrap().to_owned()])
            .collect();
        let certs = DevCertificates::generate(&["127.0.0.1".into(), "localhost".into()]).unwrap();
        certs.write(dir.path()).unwrap();
        let config = Path::new(ROOT).join("config");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let mut args = vec![
            "--config-directory",
            config.to_str().unwrap(),
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
            "--shutdown-delay",
            "0s",
            // The API server calls this process by URL, not through a Service: reachable as
            // soon as it listens.
            "--act-after-ready",
            "0s",
        ];
        args.extend(identity.iter().map(String::as_str));
        args.extend_from_slice(extra);
        // The rollout engine acts cluster-wide: off unless the test asks for it.
        if !extra
            .iter()
            .any(|a| *a == "--rollout" || a.starts_with("--rollout="))
        {
            args.push("--rollout=off");
        }
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        if deploy_rbac && let Some(at) = extra.iter().position(|a| *a == "--policy-name") {
            install_policy_rbac(&client, &namespace, extra[at + 1]).await;
        }
        let injector = Injector::start(
            dir.path(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[],
        );
        // Under `--injection=policy` the API server injects through the injector's policies.
        if !extra.contains(&"--injection=policy") {
            create_webhook_configuration(&client, &namespace, &injector, &certs).await;
        }
        TestContext {
            client,
            namespace,
            injector: Some(injector),
            certs,
            injector_kubeconfig,
            args,
            dir,
        }
    }

    /// Another `serve` process with the same arguments (not the one the webhook calls).
    pub fn start_replica(&self) -> Injector {
        Injector::start(
            self.dir.path(),
            &self.args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[],
        )
    }

    /// Another `serve` process with the same arguments but `--rollout=off`, plus `extra`.
    pub fn start_replica_with(&self, extra: &[&str]) -> Injector {
        self.start_replica_with_values(&[], extra)
    }

    /// As [`TestContext::start_replica_with`], with the value of each flag in `replaced`
    /// given instead.
    pub fn start_replica_with_values(&self, replaced: &[(&str, &str)], extra: &[&str]) -> Injector {
        let mut args: Vec<&str> = self
            .args
            .iter()
            .map(String::as_str)
            .filter(|a| *a != "--rollout=off")
            .collect();
        for (flag, value) in replaced {
            let at = args
                .iter()
                .position(|a| a == flag)
                .unwrap_or_else(|| panic!("the injector has no {flag} to replace"));
            args[at + 1] = value;
        }
        args.extend_from_slice(extra);
        Injector::start(self.dir.path(), &args, &[])
    }

    /// Another `serve` process with the same arguments, working in `dir` and serving the
    /// certificate files there instead (as a replica whose Secret holds another pair).
    pub fn start_replica_in(&self, dir: &Path) -> Injector {
        let moved = |name: &str| {
            let own = self.dir.path().join(name);
            (
                own.to_str().unwrap().to_owned(),
                dir.join(name).to_str().unwrap().to_owned(),
            )
        };
        let pair = [moved("tls.crt"), moved("tls.key")];
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| {
                pair.iter()
                    .find(|(own, _)| own == a)
                    .map_or_else(|| a.clone(), |(_, there)| there.clone())
            })
            .collect();
        Injector::start(
            dir,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[],
        )
    }

    /// Stops the injector gracefully (a Lease holder releases the Lease) and starts it again
    /// with `--rollout=MODE` instead of the mode it had (the webhook follows it).
    pub async fn restart_injector_in_mode(&mut self, mode: &str) {
        self.stop_injector();
        self.args.retain(|a| !a.starts_with("--rollout="));
        self.args.push(format!("--rollout={mode}"));
        self.restart_injector().await;
    }

    /// Stops the injector and starts it again with the same arguments; the webhook
    /// configuration follows its new port.
    pub async fn restart_injector(&mut self) {
        self.injector.take();
        let injector = self.start_replica();
        if self.args.iter().any(|a| a == "--injection=policy") {
            self.injector = Some(injector);
            return;
        }
        let webhooks: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let name = format!("sidecar-injector-{}", self.namespace);
        let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig/url",
                            "value": format!("https://127.0.0.1:{}/mutate", injector.tls.port())}]);
        webhooks
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Json::<()>(serde_json::from_value(patch).unwrap()),
            )
            .await
            .expect("the webhook follows the new port");
        self.injector = Some(injector);
    }

    /// The injector's working directory, which holds its certificate files (`tls.crt`,
    /// `tls.key`, `ca.crt`).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Stops the injector as Kubernetes does (SIGTERM), and waits for it to exit.
    /// Starts the injector again after [`TestContext::stop_injector`], and a webhook
    /// configuration that calls it (the test's earlier one deleted).
    pub async fn start_webhook_again(&mut self) {
        let injector = self.start_replica();
        create_webhook_configuration(&self.client, &self.namespace, &injector, &self.certs).await;
        self.injector = Some(injector);
    }

    pub fn stop_injector(&mut self) {
        if let Some(mut injector) = self.injector.take() {
            injector.signal("TERM");
            injector.wait_exit(std::time::Duration::from_secs(30));
        }
    }
}

impl Drop for TestContext {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- kube-apiserver log (tail) ---\n{}",
                log_tail("apiserver", 40)
            );
            eprintln!(
                "--- kube-controller-manager log (tail) ---\n{}",
                log_tail("controller-manager", 40)
            );
        }
    }
}

/// deploy/ rendered by `kubectl kustomize`, as the documents a user would apply.
pub fn kustomize(dir: &str) -> Vec<serde_json::Value> {
    let output = Command::new("kubectl")
        .args(["kustomize", &format!("{ROOT}/{dir}")])
        .output()
        .expect("kubectl runs (it renders deploy/ as a user would)");
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&output.stdout))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

pub fn of_kind<'v>(docs: &'v [serde_json::Value], kind: &str) -> &'v serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// Creates deploy/'s ServiceAccount, ClusterRole, Role and bindings for `namespace` (the
/// cluster-wide objects once per control plane, the binding per namespace) and writes a
/// kubeconfig that authenticates with that ServiceAccount's token.
pub async fn install_deploy_rbac(client: &Client, namespace: &str, dir: &Path) -> PathBuf {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let base = kustomize("deploy");
    let moved = |kind: &str| {
        let mut doc = of_kind(&base, kind).clone();
        if doc["metadata"].get("namespace").is_some() {
            doc["metadata"]["namespace"] = json!(namespace);
        }
        if let Some(subjects) = doc.get_mut("subjects") {
            subjects[0]["namespace"] = json!(namespace);
        }
        doc
    };
    let post = PostParams::default();
    match Api::<ClusterRole>::all(client.clone())
        .create(
            &post,
            &serde_json::from_value(moved("ClusterRole")).unwrap(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("ClusterRole: {e}"),
    }
    let mut binding = moved("ClusterRoleBinding");
    binding["metadata"]["name"] = json!(format!("sidecar-injector-{namespace}"));
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&post, &serde_json::from_value(binding).unwrap())
        .await
        .expect("ClusterRoleBinding");
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(&post, &serde_json::from_value(moved("Role")).unwrap())
        .await
        .expect("Role");
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(
            &post,
            &serde_json::from_value(moved("RoleBinding")).unwrap(),
        )
        .await
        .expect("RoleBinding");
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(
            &post,
            &serde_json::from_value(moved("ServiceAccount")).unwrap(),
        )
        .await
        .expect("ServiceAccount");
    service_account_kubeconfig(client, namespace, "sidecar-injector", dir).await
}

/// Grants deploy/'s ServiceAccount of `namespace` deploy/overlays/policy-mode's rights on
/// the policies, for those named `policy_name` (each test writes its own).
pub async fn install_policy_rbac(client: &Client, namespace: &str, policy_name: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let overlay = kustomize("deploy/overlays/policy-mode");
    let name = format!("sidecar-injector-policies-{namespace}");
    let mut role = overlay
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRole" && d["metadata"]["name"] == "sidecar-injector-policies"
        })
        .expect("the policy-mode ClusterRole")
        .clone();
    role["metadata"]["name"] = json!(name);
    for rule in role["rules"].as_array_mut().unwrap() {
        rule["resourceNames"] = json!([policy_name]);
    }
    let mut binding = overlay
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding"
                && d["metadata"]["name"] == "sidecar-injector-policies"
        })
        .expect("the policy-mode ClusterRoleBinding")
        .clone();
    binding["metadata"]["name"] = json!(name);
    binding["roleRef"]["name"] = json!(name);
    binding["subjects"][0]["namespace"] = json!(namespace);
    let post = PostParams::default();
    Api::<ClusterRole>::all(client.clone())
        .create(&post, &serde_json::from_value(role).unwrap())
        .await
        .expect("the policy ClusterRole");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&post, &serde_json::from_value(binding).unwrap())
        .await
        .expect("the policy ClusterRoleBinding");
}

/// A kubeconfig in `dir` that connects as the ServiceAccount `account` of `namespace` (created
/// beforehand), with a token of the TokenRequest API, valid for a day.
pub async fn service_account_kubeconfig(
    client: &Client,
    namespace: &str,
    account: &str,
    dir: &Path,
) -> PathBuf {
    service_account_kubeconfig_of(&control_plane().kubeconfig, client, namespace, account, dir)
        .await
}

/// As [`service_account_kubeconfig`], in the control plane `admin` (its up.sh kubeconfig)
/// names.
pub async fn service_account_kubeconfig_of(
    admin: &Path,
    client: &Client,
    namespace: &str,
    account: &str,
    dir: &Path,
) -> PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 86_400}
    }))
    .unwrap();
    let token = super::injector::eventually(
        Duration::from_secs(30),
        &format!("a token for {account}"),
        || async {
            accounts
                .create_token_request(account, &PostParams::default(), &request)
                .await
                .ok()?
                .status
                .map(|s| s.token)
        },
    )
    .await;
    let admin = std::fs::read_to_string(admin).unwrap();
    let as_account = admin.replace("token: admin-token", &format!("token: {token}"));
    assert_ne!(
        admin, as_account,
        "the testbed kubeconfig has the admin token to replace"
    );
    let path = dir.join(format!("{account}.kubeconfig"));
    std::fs::write(&path, as_account).unwrap();
    path
}

/// A ConfigMap holding one sidecar config, labelled (or not) for the injector's
/// `--configmap-labels sidecar-injector-e2e/config=true`.
pub fn configmap(name: &str, labelled: bool, key: &str, text: &str) -> ConfigMap {
    let labels = if labelled {
        json!({"sidecar-injector-e2e/config": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {key: text}}),
    )
    .unwrap()
}

/// Creates the labelled ConfigMap `name` with one config, or replaces its data with it.
pub async fn put_config(ctx: &TestContext, name: &str, key: &str, text: &str) {
    let api: Api<ConfigMap> = ctx.api();
    match api.get_opt(name).await.expect("the ConfigMap read") {
        None => {
            api.create(&PostParams::default(), &configmap(name, true, key, text))
                .await
                .expect("the ConfigMap created");
        }
        Some(mut existing) => {
            existing.data = Some([(key.to_owned(), text.to_owned())].into());
            api.replace(name, &PostParams::default(), &existing)
                .await
                .expect("the ConfigMap edited");
        }
    }
}

/// The flags `serve`, `drift` and `rollout` share in a rollout test: configs from the test's
/// ConfigMaps, scoped to the test's namespace, the status ConfigMap there.
pub fn scope_args(namespace: &str) -> Vec<&str> {
    vec![
        "--configmap-namespace",
        namespace,
        "--configmap-labels",
        "sidecar-injector-e2e/config=true",
        "--include-namespace",
        namespace,
        "--injector-namespace",
        namespace,
    ]
}

/// `serve` (or `rollout`) flags for a test of the rollout engine: [`scope_args`], then `extra`.
pub fn rollout_args<'a>(namespace: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = scope_args(namespace);
    args.extend_from_slice(extra);
    // The test kubelet's pods do not crash on their own: a short bake still runs every
    // restart through it (its end read included) without making each canary wait 30 s.
    if !extra.contains(&"--bake") {
        args.extend(["--bake", "1s"]);
    }
    // The tests' edits change images: they test restarts unless they ask for in-place
    // upgrades (tests/e2e/in_place.rs).
    if !extra.contains(&"--in-place") {
        args.extend(["--in-place", "off"]);
    }
    args
}

/// The test's MutatingWebhookConfiguration: pods of its namespace go to its injector.
async fn create_webhook_configuration(
    client: &Client,
    namespace: &str,
    injector: &Injector,
    certs: &DevCertificates,
) {
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let webhook = json!({
        "metadata": {"name": format!("sidecar-injector-{namespace}")},
        "webhooks": [{
            "name": "sidecar-injector.injector.dev",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}/mutate", injector.tls.port()),
                "caBundle": certs.ca_bundle(),
            },
            "rules": [
                {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
                {"operations": ["CREATE"], "apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs", "cronjobs"]},
            ],
            "namespaceSelector": {"matchLabels": {"sidecar-injector-e2e": namespace}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": 5,
        }]
    });
    webhooks
        .create(
            &PostParams::default(),
            &serde_json::from_value(webhook).unwrap(),
        )
        .await
        .expect("the webhook configuration");
}
