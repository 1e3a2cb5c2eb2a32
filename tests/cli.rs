//! The `inject` and `validate` commands, run as the real binary on the shipped examples.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args(args)
        .current_dir(ROOT)
        .env_remove("CONFIG_DIR")
        .env_remove("ANNOTATION_NAMESPACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn documents(output: &Output) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(&text(&output.stdout))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// `validate` prints `ok  NAME  REV  ORIGIN`; the revision of `name`.
fn validated_revision(name: &str) -> String {
    let output = run(&["validate"], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1) == Some(&name)).then(|| fields[2].to_owned())
        })
        .unwrap_or_else(|| panic!("{name} not listed"))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[test]
fn inject_the_readme_example() {
    let output = run(&["inject", "-f", "examples/deployment.yaml"], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let docs = documents(&output);
    assert_eq!(docs.len(), 1);
    let template = &docs[0]["spec"]["template"];
    assert_eq!(
        names(&template["spec"]["containers"]),
        ["app", "log-shipper"]
    );
    assert_eq!(
        template["metadata"]["annotations"]["injector/status"],
        "injected"
    );
    assert_eq!(
        template["metadata"]["annotations"]["injector/revision"],
        format!("logger:v1={}", validated_revision("logger:v1"))
    );
    assert_eq!(
        docs[0]["metadata"]["name"], "web",
        "the rest of the Deployment is kept"
    );
}

#[test]
fn inject_reads_stdin_with_every_workload_kind_and_passes_other_kinds_through() {
    let manifest = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        metadata: {annotations: {injector/request: "metrics-agent:v1"}}
        spec: {containers: [{name: job, image: job:1}], restartPolicy: Never}
---
{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
   "spec": {"template": {"metadata": {"annotations": {"injector/request": "logger:v2"}}, "spec": {"containers": [{"name": "db"}]}}}},
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"}, "spec": {"containers": [{"name": "p"}]}}
]}
"#;
    let output = run(&["inject", "-f", "-"], Some(manifest));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let docs = documents(&output);
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[0]["spec"]["ports"][0]["port"], 80);
    let job = &docs[1]["spec"]["jobTemplate"]["spec"]["template"];
    assert_eq!(names(&job["spec"]["containers"]), ["job", "metrics-agent"]);
    assert_eq!(job["spec"]["hostAliases"][0]["ip"], "10.96.0.53");
    let statefulset = &docs[2]["items"][0]["spec"]["template"];
    assert_eq!(
        names(&statefulset["spec"]["containers"]),
        ["db", "log-shipper"]
    );
    assert_eq!(
        statefulset["spec"]["volumes"][1]["configMap"]["defaultMode"], 420,
        "logger:v2 inherits v1's volumes, octal mode read as Kubernetes does"
    );
    assert!(docs[2]["items"][1]["metadata"].get("annotations").is_none());
}

#[test]
fn a_denial_goes_to_stderr_with_exit_status_1() {
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {injector/request: logger:v9}\nspec: {containers: [{name: app}]}\n";
    let output = run(&["inject", "-f", "-"], Some(manifest));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stderr).trim(),
        r#"Pod/p: denied: sidecar "logger:v9" not found; known: logger:v1, logger:v2"#
    );
    let allowed = run(
        &["inject", "--on-missing-sidecar", "allow", "-f", "-"],
        Some(manifest),
    );
    assert!(allowed.status.success());
}

#[test]
fn inject_honours_the_annotation_namespace() {
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {injector.tumblr.com/request: logger:v1}\nspec: {containers: [{name: app}]}\n";
    let output = run(
        &[
            "inject",
            "--annotation-namespace",
            "injector.tumblr.com",
            "-f",
            "-",
        ],
        Some(manifest),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let pod = &documents(&output)[0];
    assert_eq!(
        pod["metadata"]["annotations"]["injector.tumblr.com/status"],
        "injected"
    );
    let default_ns = run(&["inject", "-f", "-"], Some(manifest));
    assert!(
        documents(&default_ns)[0]["metadata"]["annotations"]
            .get("injector/status")
            .is_none()
    );
}

fn pod(namespace: &str, annotations: &str, env_value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: {namespace}\n  annotations: {{{annotations}}}\nspec: {{containers: [{{name: app, env: [{{name: FLAG, value: \"{env_value}\"}}]}}]}}\n"
    )
}

fn injected(output: &Output) -> bool {
    documents(output)[0]["metadata"]["annotations"]
        .get("injector/status")
        .is_some()
}

#[test]
fn an_added_ignored_namespace_keeps_the_defaults_and_an_empty_one_clears_them() {
    let manifest = pod("kube-system", "injector/request: logger:v1", "x");
    let added = run(
        &["inject", "--ignore-namespace", "team-a", "-f", "-"],
        Some(&manifest),
    );
    assert!(added.status.success(), "{}", text(&added.stderr));
    assert!(!injected(&added), "kube-system stays ignored");
    assert_eq!(
        text(&added.stderr).trim(),
        "Pod/p: not injected: namespace kube-system is ignored (--ignore-namespace)"
    );
    let team = pod("team-a", "injector/request: logger:v1", "x");
    let output = run(
        &["inject", "--ignore-namespace", "team-a", "-f", "-"],
        Some(&team),
    );
    assert!(!injected(&output), "the added namespace is ignored too");
    let cleared = run(
        &["inject", "--ignore-namespace=", "-f", "-"],
        Some(&manifest),
    );
    assert!(injected(&cleared), "{}", text(&cleared.stderr));
}

#[test]
fn inject_says_on_stderr_why_it_let_a_requesting_pod_through() {
    let tumblr = pod("team", "injector.tumblr.com/request: logger:v1", "x");
    let output = run(&["inject", "-f", "-"], Some(&tumblr));
    assert!(output.status.success());
    assert!(!injected(&output));
    assert_eq!(
        text(&output.stderr).trim(),
        "Pod/p: not injected: no injector/request annotation, but injector.tumblr.com/request is set: is --annotation-namespace right?"
    );
    let missing = pod("team", "injector/request: logger:v9", "x");
    let allowed = run(
        &["inject", "--on-missing-sidecar", "allow", "-f", "-"],
        Some(&missing),
    );
    assert!(allowed.status.success());
    assert!(
        text(&allowed.stderr).contains(
            r#"Pod/p: not injected: no requested sidecar exists ("logger:v9"); let through by --on-missing-sidecar=allow"#
        ),
        "{}",
        text(&allowed.stderr)
    );
    let plain = run(&["inject", "-f", "-"], Some(&pod("team", "", "x")));
    assert_eq!(
        text(&plain.stderr),
        "",
        "a pod that requests nothing is not worth a line"
    );
}

#[test]
fn a_denial_writes_nothing_to_stdout_so_a_pipe_applies_nothing() {
    let good = pod("team", "injector/request: logger:v1", "x");
    let bad = pod("team", "injector/request: logger:v9", "x");
    let output = run(&["inject", "-f", "-"], Some(&format!("{good}---\n{bad}")));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    assert!(text(&output.stderr).contains("denied"));
}

#[test]
fn strings_a_yaml_1_1_reader_would_retype_are_printed_quoted() {
    for value in ["on", "yes", "off", "0644", "2024-01-01", "~"] {
        let output = run(
            &["inject", "-f", "-"],
            Some(&pod("team", "injector/request: logger:v1", value)),
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        let printed = text(&output.stdout);
        assert!(
            printed.contains(&format!("value: \"{value}\"")),
            "{value} must be quoted:\n{printed}"
        );
        assert_eq!(
            documents(&output)[0]["spec"]["containers"][0]["env"][0]["value"],
            value
        );
    }
}

#[test]
fn validate_lists_every_example_with_its_revision() {
    let output = run(&["validate"], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let listed: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("ok  "))
        .map(|l| l.split_whitespace().nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(
        listed,
        [
            "logger:v1",
            "logger:v2",
            "metrics-agent:v1",
            "secrets-agent:v1"
        ]
    );
    // Every shipped example can be injected by the policies too: nothing more is said.
    assert!(!stdout.contains("not in policy mode"), "{stdout}");
    // What `policy` would refuse is said under its config.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("native.yaml"),
        "name: native:v1\nnativeSidecars: auto\ncontainers: [{name: n, image: n}]\n",
    )
    .unwrap();
    let output = run(&["validate", dir.path().to_str().unwrap()], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let lines: Vec<String> = text(&output.stdout).lines().map(str::to_owned).collect();
    assert!(lines[0].starts_with("ok  native:v1"), "{lines:?}");
    assert_eq!(
        lines[1],
        "    not in policy mode: nativeSidecars: auto: the form follows the nodes' kubelets, which a policy does not see (true or jobs can be compiled)"
    );
    assert_ne!(
        validated_revision("logger:v1"),
        validated_revision("logger:v2")
    );
}

/// What `kubectl get configmaps -l app=k8s-sidecar-injector -A -o yaml` prints: a List, here
/// with Tumblr's own example ConfigMap, whose `environment:` key Tumblr ignored.
const CONFIGMAP_LIST: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: sidecar-test, namespace: kube-system, labels: {app: k8s-sidecar-injector}}
  data:
    test1: |
      name: test1
      environment:
        - name: HELLO
          value: world
      containers:
      - name: sidecar-nginx
        image: nginx:1.12.2
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: sidecars, namespace: kube-system}
  data:
    tracer: |
      name: tracer:v1
      containers: [{name: tracer, image: "tracer:1"}]
"#;

#[test]
fn validate_reads_configmap_manifests_item_by_item_from_a_file_or_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("configmaps.yaml");
    std::fs::write(&file, CONFIGMAP_LIST).unwrap();
    for output in [
        run(&["validate", "-"], Some(CONFIGMAP_LIST)),
        run(&["validate", file.to_str().unwrap()], None),
    ] {
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stdout.contains("ok  tracer:v1")
                && stdout.contains("ConfigMap kube-system/sidecars item tracer"),
            "{stdout}"
        );
        assert!(
            stderr.contains(
                "error: ConfigMap kube-system/sidecar-test item test1:2: unknown top-level key \"environment\""
            ),
            "{stderr}"
        );
    }
    // A ConfigMap left for `kubectl apply -n` to place is named without a namespace.
    let output = run(
        &["validate", "-"],
        Some(
            "kind: ConfigMap\nmetadata: {name: sidecars}\ndata:\n  tracer: |\n    name: tracer:v1\n    containers: [{name: tracer, image: \"tracer:1\"}]\n",
        ),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).ends_with("  ConfigMap sidecars item tracer\n"),
        "{}",
        text(&output.stdout)
    );
    // A FIFO named on the command line is refused by name, not read (it would block).
    let fifo = dir.path().join("pipe.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let output = Command::new("timeout")
        .args(["10", env!("CARGO_BIN_EXE_sidecar-injector"), "validate"])
        .arg(&fifo)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "124 is a hang");
    assert!(
        text(&output.stderr).contains("a FIFO, not a regular file"),
        "{}",
        text(&output.stderr)
    );
    // A config on standard input is a config, named `-`.
    let config = std::fs::read_to_string(format!("{ROOT}/config/logger-v1.yaml")).unwrap();
    let output = run(&["validate", "-"], Some(&config));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        format!(
            "ok  logger:v1                {}  -\n",
            validated_revision("logger:v1")
        )
    );
}

#[test]
fn validate_reports_errors_by_file_and_line_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| std::fs::write(dir.path().join(name), body).unwrap();
    write(
        "good.yaml",
        "name: good:v1\ncontainers: [{name: g, image: g:1}]\n",
    );
    write(
        "typo.yaml",
        "name: typo:v1\ncontainers: [{name: t}]\nvolumeMount: []\n",
    );
    write(
        "nested.yml",
        "name: nested:v1\ncontainers:\n  - name: n\n    imagePullPolcy: Always\n",
    );
    write(".hidden.yaml", "this is not: [valid\n");
    write("notes.txt", "ignored\n");
    let dir_arg = dir.path().to_str().unwrap();
    let output = run(&["validate", dir_arg], None);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "error: {dir_arg}/typo.yaml:3: unknown top-level key \"volumeMount\""
        )),
        "{stderr}"
    );
    let stdout = text(&output.stdout);
    assert!(stdout.contains("ok  good:v1"), "{stdout}");
    assert!(stdout.contains("ok  nested:v1"), "{stdout}");
    assert!(
        stdout.contains("warning: `containers[0].imagePullPolcy`"),
        "{stdout}"
    );
    assert!(!stdout.contains("hidden") && !stderr.contains("hidden"));

    // One file alone: only its own problems, judged beside its neighbours.
    let good = run(&["validate", &format!("{dir_arg}/good.yaml")], None);
    assert!(good.status.success(), "{}", text(&good.stderr));
    assert_eq!(text(&good.stdout).lines().count(), 1);
    let typo = run(&["validate", &format!("{dir_arg}/typo.yaml")], None);
    assert_eq!(typo.status.code(), Some(1));

    // A config name that is no readable file fails validation; it is never skipped.
    std::os::unix::fs::symlink(dir.path().join("gone.yaml"), dir.path().join("link.yaml")).unwrap();
    std::fs::create_dir(dir.path().join("folder.yaml")).unwrap();
    let output = run(&["validate", dir_arg], None);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    for expected in [
        format!("error: {dir_arg}/link.yaml: cannot read: a symlink whose target does not exist"),
        format!("error: {dir_arg}/folder.yaml: cannot read: a directory, not a regular file"),
    ] {
        assert!(stderr.contains(&expected), "{expected}\n{stderr}");
    }
}

#[test]
fn a_missing_config_directory_is_a_clear_error() {
    let output = run(&["validate", "--config-directory", "no/such/dir"], None);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("no/such/dir"),
        "{}",
        text(&output.stderr)
    );
    assert!(!Path::new(ROOT).join("no").exists());
}

#[test]
fn inject_outside_a_checkout_reads_the_cluster_and_says_so_when_there_is_none() {
    let elsewhere = tempfile::tempdir().unwrap();
    let example = Path::new(ROOT).join("examples/deployment.yaml");
    let inject = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
            .arg("inject")
            .arg("-f")
            .arg(&example)
            .args(args)
            .current_dir(elsewhere.path())
            .env("HOME", elsewhere.path())
            .env("KUBECONFIG", elsewhere.path().join("no-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("CONFIG_DIR")
            .env_remove("CONFIGMAP_LABELS")
            .output()
            .unwrap()
    };
    let no_cluster = inject(&[]);
    assert_eq!(no_cluster.status.code(), Some(1));
    assert!(
        text(&no_cluster.stderr).contains("no config/ directory here, and the cluster whose sidecar ConfigMaps would be read instead is not reachable (--config-directory DIR to read files)"),
        "{}",
        text(&no_cluster.stderr)
    );
    assert!(no_cluster.stdout.is_empty());
    // A directory named: read offline, as always, with no cluster needed.
    let config = Path::new(ROOT).join("config");
    let offline = inject(&["--config-directory", config.to_str().unwrap()]);
    assert!(offline.status.success(), "{}", text(&offline.stderr));
    assert!(text(&offline.stdout).contains("log-shipper"));
}

#[test]
fn an_empty_environment_variable_counts_as_unset() {
    let with_env = |value: &str| {
        Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
            .arg("validate")
            .current_dir(ROOT)
            .env("CONFIG_DIR", value)
            .output()
            .unwrap()
    };
    let empty = with_env("");
    assert!(empty.status.success(), "{}", text(&empty.stderr));
    assert!(text(&empty.stdout).contains("logger:v1"));
    let elsewhere = with_env("/no/such/configs");
    assert_eq!(elsewhere.status.code(), Some(1));
    assert!(text(&elsewhere.stderr).contains("/no/such/configs"));
}

#[test]
fn the_configmap_source_says_what_it_needs() {
    let serve = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
            .args(["serve", "--tls-port", "0", "--lifecycle-port", "0"])
            .args(args)
            .current_dir(ROOT)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("CONFIGMAP_NAMESPACE")
            .env_remove("CONFIGMAP_LABELS")
            .output()
            .unwrap()
    };
    // A kubeconfig in the usual places is never read implicitly.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".kube")).unwrap();
    std::fs::write(
        home.path().join(".kube/config"),
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u, namespace: team}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let no_cluster = Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args([
            "serve",
            "--tls-port",
            "0",
            "--lifecycle-port",
            "0",
            "--configmap-labels",
            "a=b",
        ])
        .current_dir(ROOT)
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join(".kube/config"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(no_cluster.status.code(), Some(1));
    assert!(
        text(&no_cluster.stderr).contains("--configmap-labels needs a cluster connection: run in a cluster, or pass --kubeconfig or --master-url"),
        "{}",
        text(&no_cluster.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let no_namespace = serve(&[
        "--configmap-labels",
        "a=b",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert_eq!(no_namespace.status.code(), Some(1));
    assert!(
        text(&no_namespace.stderr).contains("outside one, pass --configmap-namespace"),
        "{}",
        text(&no_namespace.stderr)
    );
}

#[test]
fn a_bare_v_means_debug_and_glog_values_still_work() {
    for args in [
        &["-v", "validate"][..],
        &["validate", "-v"][..],
        &["--v", "validate"][..],
        &["-v=2", "validate"][..],
        &["-v", "2", "validate"][..],
        &["--log-level", "warn", "validate"][..],
    ] {
        let output = run(args, None);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

#[test]
fn rollout_accepts_dry_run_and_refuses_it_with_confirm() {
    let output = run(
        &[
            "rollout",
            "--dry-run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        None,
    );
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("cannot read --kubeconfig"), "{stderr}");
    let both = run(&["rollout", "--dry-run", "--confirm"], None);
    assert_eq!(both.status.code(), Some(2));
    assert!(
        text(&both.stderr).contains("cannot be used with"),
        "{}",
        text(&both.stderr)
    );
}

#[test]
fn certs_are_valid_for_a_year_unless_told_and_say_where_they_went() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let days_valid = |args: &[&str]| {
        let output = run(args, None);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let pem = std::fs::read(dir.path().join("tls.crt")).unwrap();
        let expiry = sidecar_injector::serve::tls::not_after(&pem, "tls.crt").unwrap();
        (expiry - now) as f64 / 86_400.0
    };
    let year = days_valid(&["certs", "--out-dir", out, "--dns-name", "x.svc"]);
    assert!((364.9..=365.1).contains(&year), "{year} days");
    let month = days_valid(&[
        "certs",
        "--out-dir",
        out,
        "--dns-name",
        "x.svc",
        "--validity",
        "30d",
    ]);
    assert!((29.9..=30.1).contains(&month), "{month} days");
    let ignored = std::fs::read_to_string(Path::new(ROOT).join(".gitignore")).unwrap();
    for path in ["/tls", "/cabundle.txt", "/certs"] {
        assert!(ignored.lines().any(|l| l == path), "{path} is git-ignored");
    }
}

#[test]
fn certs_run_again_renews_the_certificate_with_the_same_ca_and_never_replaces_it_silently() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let certs = |extra: &[&str]| {
        let mut args = vec!["certs", "--out-dir", out, "--dns-name", "x.svc"];
        args.extend_from_slice(extra);
        run(&args, None)
    };
    let first = certs(&[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(
        text(&first.stderr).contains("wrote a new CA"),
        "{}",
        text(&first.stderr)
    );
    let (ca, leaf) = (read("ca.crt"), read("tls.crt"));

    let renewal = certs(&[]);
    assert!(renewal.status.success(), "{}", text(&renewal.stderr));
    assert!(
        text(&renewal.stderr).contains("signed by the CA already in")
            && text(&renewal.stderr).contains("the caBundle is unchanged"),
        "{}",
        text(&renewal.stderr)
    );
    assert_eq!(
        text(&renewal.stdout),
        text(&first.stdout),
        "the same caBundle"
    );
    assert_eq!(read("ca.crt"), ca);
    assert_ne!(read("tls.crt"), leaf, "a new certificate");

    // A CA whose key is gone (or written by an older version) is not replaced behind the
    // user's back: nothing is written, and the error says how to replace it.
    std::fs::remove_file(dir.path().join("ca.key")).unwrap();
    let leaf = read("tls.crt");
    let refused = certs(&[]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("ca.key is not: a CA needs both; --new-ca replaces the CA"),
        "{}",
        text(&refused.stderr)
    );
    assert!(refused.stdout.is_empty());
    assert_eq!((read("ca.crt"), read("tls.crt")), (ca.clone(), leaf));

    let replaced = certs(&["--new-ca"]);
    assert!(replaced.status.success(), "{}", text(&replaced.stderr));
    assert_ne!(read("ca.crt"), ca);
    assert_ne!(text(&replaced.stdout), text(&first.stdout));

    // A certificate that would outlive the CA is refused: the caBundle would stop working first.
    let outliving = certs(&["--validity", "20y"]);
    assert_eq!(outliving.status.code(), Some(1));
    assert!(
        text(&outliving.stderr).contains("expires on"),
        "{}",
        text(&outliving.stderr)
    );
}

#[test]
fn certs_renewal_keeps_the_names_of_the_certificate_it_replaces_unless_told_others() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let names = || {
        let pem = std::fs::read(dir.path().join("tls.crt")).unwrap();
        sidecar_injector::serve::tls::subject_names(&pem, "tls.crt").unwrap()
    };
    // The first certificate needs its names: there is nothing to take them from.
    let nameless = run(&["certs", "--out-dir", out], None);
    assert_eq!(nameless.status.code(), Some(1));
    assert!(
        text(&nameless.stderr).contains("--dns-name is required for the first certificate"),
        "{}",
        text(&nameless.stderr)
    );
    assert!(!dir.path().join("ca.crt").exists(), "nothing written");

    let first = run(
        &[
            "certs",
            "--out-dir",
            out,
            "--dns-name",
            "sidecar-injector.injector-system.svc",
            "--dns-name",
            "127.0.0.1",
        ],
        None,
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let first_names = names();
    assert_eq!(
        first_names,
        ["sidecar-injector.injector-system.svc", "127.0.0.1"]
    );
    let leaf = std::fs::read_to_string(dir.path().join("tls.crt")).unwrap();

    // Run again as it was first run, minus the names: the renewal is for the same names.
    let renewal = run(&["certs", "--out-dir", out], None);
    assert!(renewal.status.success(), "{}", text(&renewal.stderr));
    assert_ne!(
        std::fs::read_to_string(dir.path().join("tls.crt")).unwrap(),
        leaf
    );
    assert_eq!(names(), first_names);
    assert!(
        text(&renewal.stderr).contains(
            "renewed the certificate for sidecar-injector.injector-system.svc, 127.0.0.1"
        ),
        "{}",
        text(&renewal.stderr)
    );
    assert!(
        !text(&renewal.stderr).contains("was for"),
        "the same names, nothing to warn of: {}",
        text(&renewal.stderr)
    );

    // A refused run writes nothing, and so warns of no change of names.
    let refused = run(
        &[
            "certs",
            "--out-dir",
            out,
            "--dns-name",
            "other.svc",
            "--validity",
            "20y",
        ],
        None,
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        !text(&refused.stderr).contains("was for"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(names(), first_names);

    // Other names are taken, and the change is said: a typo here would break the webhook's TLS.
    let renamed = run(
        &[
            "certs",
            "--out-dir",
            out,
            "--dns-name",
            "sidecar-injector.injector-sytem.svc",
        ],
        None,
    );
    assert!(renamed.status.success(), "{}", text(&renamed.stderr));
    assert_eq!(names(), ["sidecar-injector.injector-sytem.svc"]);
    assert!(
        text(&renamed.stderr).contains(
            "was for sidecar-injector.injector-system.svc, 127.0.0.1; the new certificate is for sidecar-injector.injector-sytem.svc"
        ),
        "{}",
        text(&renamed.stderr)
    );
}

#[test]
fn an_error_says_each_cause_once() {
    let output = run(&["drift", "--kubeconfig", "/nonexistent/kubeconfig"], None);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert_eq!(
        error.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn with_json_logs_stderr_carries_json_only_with_fields_of_their_own() {
    let lines = |output: &Output| -> Vec<Value> {
        text(&output.stderr)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
            .collect()
    };
    // A skip reason: the object and the reason as fields.
    let tumblr = pod("team", "injector.tumblr.com/request: logger:v1", "x");
    let output = run(
        &["--log-format", "json", "inject", "-f", "-"],
        Some(&tumblr),
    );
    assert!(output.status.success());
    let said = lines(&output);
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["object"], "Pod/p");
    assert!(
        said[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("no injector/request annotation"),
        "{said:?}"
    );
    // A denial and the error a command ends on: level ERROR, one object each.
    let missing = pod("team", "injector/request: logger:v9", "x");
    let denied = run(
        &["--log-format", "json", "inject", "-f", "-"],
        Some(&missing),
    );
    assert!(!denied.status.success());
    assert!(lines(&denied).iter().all(|l| l["level"] == "ERROR"));
    let output = run(
        &[
            "--log-format",
            "json",
            "drift",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        None,
    );
    assert!(!output.status.success());
    let said = lines(&output);
    let error = said.last().unwrap();
    assert_eq!(error["level"], "ERROR");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/kubeconfig"),
        "{said:?}"
    );
    // validate's errors too.
    let output = run(
        &["--log-format", "json", "validate", "/nonexistent/config"],
        None,
    );
    assert!(!output.status.success());
    assert!(!lines(&output).is_empty());
}

#[test]
fn tumblr_glog_flags_are_accepted_and_said_to_be_ignored() {
    let output = run(
        &[
            "--logtostderr",
            "--alsologtostderr=false",
            "--stderrthreshold=INFO",
            "--log_dir=/tmp/glog",
            "--vmodule=webhook=3",
            "-v=2",
            "validate",
        ],
        None,
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("glog flags accepted and ignored"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "--logtostderr=true --alsologtostderr=false --stderrthreshold=INFO --log_dir=/tmp/glog --vmodule=webhook=3"
        ),
        "{stderr}"
    );
    assert!(text(&output.stdout).contains("logger:v1"));
}

#[test]
fn run_as_tumblrs_entrypoint_sh_the_binary_serves_with_the_scripts_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("entrypoint.sh");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sidecar-injector"), &link).unwrap();
    // No cluster here: serve stops at the ConfigMap source the script's defaults turn on.
    let output = Command::new(&link)
        .args(["--v=2", "--tls-port", "0", "--lifecycle-port", "0"])
        .current_dir(ROOT)
        .env("KUBECONFIG", dir.path().join("none"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("ANNOTATION_NAMESPACE")
        .env_remove("CONFIGMAP_LABELS")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "run as Tumblr's entrypoint.sh: serve --annotation-namespace=injector.tumblr.com --configmap-labels=app=k8s-sidecar-injector --config-directory=/conf"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("--configmap-labels needs a cluster connection"),
        "{stderr}"
    );
    // The Deployment's args may set what the script defaulted: given once, not twice.
    let output = Command::new(&link)
        .args(["--annotation-namespace=example.com", "--configmap-labels="])
        .args(["--config-directory", "config", "--tls-port", "0"])
        .args(["--lifecycle-port", "0", "--help"])
        .current_dir(ROOT)
        .env_remove("ANNOTATION_NAMESPACE")
        .env_remove("CONFIGMAP_LABELS")
        .env_remove("CONFIG_DIR")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("--annotation-namespace"),
        "serve's help"
    );
}

/// `serve` with `args`, run in `dir` to its exit, with no cluster but one the args name.
fn serve_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("serve")
        .args(args)
        .current_dir(dir)
        .env("KUBECONFIG", dir.join("none"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("CONFIG_DIR")
        .output()
        .unwrap()
}

#[test]
fn a_missing_config_directory_stops_serve_with_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    for (given, said) in [
        ("missing", "the config directory missing does not exist"),
        ("file", "the config directory file is not a directory"),
    ] {
        let output = serve_in(
            dir.path(),
            &[
                "--config-directory",
                given,
                "--tls-port",
                "0",
                "--lifecycle-port",
                "0",
            ],
        );
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("error: {said} (--config-directory, CONFIG_DIR)")),
            "{stderr}"
        );
        // Nothing about what it would have served: it serves nothing.
        assert!(
            !stderr.contains("serving directory configs only"),
            "{stderr}"
        );
    }
}

#[test]
fn a_serve_that_cannot_run_exits_having_sent_nothing_to_the_cluster() {
    // The cluster: a socket that only counts who connects. Every part that would reach it
    // (the drift watches, the publisher, the Lease, the engine) is turned on.
    let cluster = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let master_url = format!("http://{}", cluster.local_addr().unwrap());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.crt"), "not a certificate").unwrap();
    std::fs::write(dir.path().join("bad.key"), "not a key").unwrap();
    let config_directory = format!("{ROOT}/config");
    let bad_pair = [
        "--config-directory",
        &config_directory,
        "--tls-cert-file",
        "bad.crt",
        "--tls-key-file",
        "bad.key",
        "--tls-port",
        "0",
        "--lifecycle-port",
        "0",
    ];
    let port_in_use = [
        "--config-directory",
        &config_directory,
        "--tls-port",
        &taken_port,
        "--lifecycle-port",
        "0",
    ];
    let no_configs = [
        "--config-directory",
        "missing",
        "--tls-port",
        "0",
        "--lifecycle-port",
        "0",
    ];
    let cluster_parts_on = [
        "--bind-address",
        "127.0.0.1",
        "--master-url",
        &master_url,
        "--injector-namespace",
        "inj",
        "--rollout",
        "auto",
    ];
    for (given, said) in [
        (
            &bad_pair[..],
            "error: cannot load the serving certificate".to_owned(),
        ),
        (
            &port_in_use[..],
            format!("cannot listen on 127.0.0.1:{taken_port} (--tls-port)"),
        ),
        (
            &no_configs[..],
            "error: the config directory missing does not exist".to_owned(),
        ),
    ] {
        let output = serve_in(dir.path(), &[&cluster_parts_on[..], given].concat());
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&said), "{stderr}");
        assert!(!stderr.contains("watching pods"), "{stderr}");
        // A connection the process made, even one it dropped, waits in the backlog.
        cluster.set_nonblocking(true).unwrap();
        let mut connections = 0;
        while cluster.accept().is_ok() {
            connections += 1;
        }
        assert_eq!(connections, 0, "given {given:?}, it reached the cluster");
    }
    assert!(
        !dir.path().join("certs").exists(),
        "a serve that could not listen wrote development certificates"
    );
}

#[test]
fn keeping_the_ca_bundle_says_it_needs_a_cluster_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let config_directory = format!("{ROOT}/config");
    let output = serve_in(
        dir.path(),
        &[
            "--config-directory",
            &config_directory,
            "--tls-port",
            "0",
            "--lifecycle-port",
            "0",
            "--webhook-configuration",
            "sidecar-injector",
            "--ca-bundle-file",
            "ca.crt",
        ],
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--webhook-configuration needs a cluster connection: run in a cluster, or pass --kubeconfig or --master-url"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
}

#[test]
fn version_names_the_git_commit_it_was_built_from() {
    let output = run(&["--version"], None);
    assert!(output.status.success());
    let git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(ROOT)
        .output()
        .expect("git runs");
    let commit = text(&git.stdout).trim().to_owned();
    assert!(git.status.success() && commit.len() == 12, "{commit}");
    assert_eq!(
        text(&output.stdout).trim(),
        format!(
            "sidecar-injector {} (commit {commit})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn the_bash_completion_completes_subcommands_and_flags() {
    let script = run(&["completion", "bash"], None);
    assert!(script.status.success(), "{}", text(&script.stderr));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sidecar-injector.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    // What bash does on TAB: the registered function, called with the words typed so far.
    let complete = |words: &str| {
        let program = format!(
            r#"source {path}
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="{words}"
COMP_POINT=${{#COMP_LINE}}
fn=$(complete -p sidecar-injector | sed -E 's/.* -F ([^ ]+) .*/\1/')
"$fn" sidecar-injector "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
            path = path.display()
        );
        let output = Command::new("bash")
            .args(["-c", &program])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let commands = complete("sidecar-injector dr");
    assert_eq!(commands, ["drift"]);
    let flags = complete("sidecar-injector rollout --max-parallel");
    assert!(
        flags.contains(&"--max-parallel-per-namespace".to_owned()),
        "{flags:?}"
    );
}

#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    for shell in ["zsh", "fish"] {
        let script = run(&["completion", shell], None);
        assert!(script.status.success(), "{}", text(&script.stderr));
        let script = text(&script.stdout);
        for command in ["inject", "validate", "serve", "drift", "status", "rollout"] {
            assert!(script.contains(command), "{shell}: no {command}");
        }
    }
    let unknown = run(&["completion", "tcsh"], None);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("invalid value 'tcsh'"));
}

#[test]
fn man_pages_render_without_warnings() {
    let page = run(&["man"], None);
    assert!(page.status.success(), "{}", text(&page.stderr));
    assert!(text(&page.stdout).starts_with(".ie \\n(.g .ds Aq"));
    let dir = tempfile::tempdir().unwrap();
    let written = run(&["man", "--dir", dir.path().to_str().unwrap()], None);
    assert!(written.status.success(), "{}", text(&written.stderr));
    for name in [
        "sidecar-injector",
        "sidecar-injector-serve",
        "sidecar-injector-rollout",
    ] {
        let file = dir.path().join(format!("{name}.1"));
        assert!(file.exists(), "{} missing", file.display());
        // groff (Debian's groff-base, priority important) as man would run it, every warning on.
        let rendered = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&file)
            .output()
            .expect("groff runs (Debian package groff-base)");
        assert!(
            rendered.status.success() && rendered.stderr.is_empty(),
            "{name}: {}",
            text(&rendered.stderr)
        );
    }
    let text_page = Command::new("groff")
        .args(["-man", "-Tutf8", "-P", "-cbou"])
        .arg(dir.path().join("sidecar-injector-rollout.1"))
        .output()
        .unwrap();
    let text_page = text(&text_page.stdout);
    assert!(
        text_page.contains("--max-parallel-per-namespace"),
        "{text_page}"
    );
}

#[test]
fn the_flag_reference_in_docs_is_the_one_the_binary_generates() {
    let generated = run(&["man", "--markdown"], None);
    assert!(generated.status.success(), "{}", text(&generated.stderr));
    let generated = text(&generated.stdout);
    assert!(
        generated.contains("## sidecar-injector rollout\n"),
        "{generated}"
    );
    assert!(
        generated.contains("--max-parallel-per-namespace"),
        "{generated}"
    );
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/flags.md"))
        .unwrap_or_default();
    assert!(
        committed == generated,
        "docs/flags.md is stale: run `cargo run -- man --markdown > docs/flags.md`"
    );
}

#[test]
fn run_as_kubectl_sidecar_injector_usage_names_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-sidecar_injector");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sidecar-injector"), &plugin).unwrap();
    let help = Command::new(&plugin)
        .args(["drift", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(
        text(&help.stdout).contains("Usage: kubectl sidecar-injector drift [OPTIONS]"),
        "{}",
        text(&help.stdout)
    );
    let direct = run(&["drift", "--help"], None);
    assert!(text(&direct.stdout).contains("Usage: sidecar-injector drift [OPTIONS]"));
}

#[test]
fn explain_judges_a_manifest_offline_with_each_check() {
    let output = run(
        &["explain", "-f", "examples/deployment.yaml", "-o", "json"],
        None,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let explained: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(explained["injection"]["verdict"], "inject");
    assert_eq!(explained["judged"], "the pods of this Deployment");
    // `-o yaml`, as kubectl's: the same document.
    let yaml = run(
        &["explain", "-f", "examples/deployment.yaml", "-o", "yaml"],
        None,
    );
    assert!(yaml.status.success(), "{}", text(&yaml.stderr));
    let from_yaml: Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(from_yaml, explained, "{}", text(&yaml.stdout));
    assert!(text(&yaml.stdout).starts_with("subject: Deployment "));
    let revision = validated_revision("logger:v1");
    assert_eq!(
        explained["injection"]["message"],
        format!("injects logger:v1 (revision {revision})")
    );

    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team",
        "annotations": {"injector/request": "logger:v9"}}, "spec": {"containers": [{"name": "app", "image": "a"}]}}"#;
    let denied = run(&["explain", "-f", "-"], Some(pod));
    assert!(denied.status.success(), "{}", text(&denied.stderr));
    let page = text(&denied.stdout);
    assert!(page.starts_with("Pod team/p (from -)"), "{page}");
    assert!(page.contains("NO  config logger:v9"), "{page}");
    assert!(
        page.contains("=>  denied: sidecar \"logger:v9\" not found; known: logger:v1, logger:v2"),
        "{page}"
    );
    let allowed = run(
        &[
            "explain",
            "-f",
            "-",
            "--on-missing-sidecar=allow",
            "-o",
            "json",
        ],
        Some(pod),
    );
    let allowed: Value = serde_json::from_slice(&allowed.stdout).unwrap();
    assert_eq!(allowed["injection"]["verdict"], "skip");

    // A document without a kind is read as a pod.
    let bare = run(
        &["explain", "-f", "-"],
        Some(
            "metadata: {name: p, annotations: {injector/request: logger:v1}}\nspec: {containers: [{name: app, image: a}]}\n",
        ),
    );
    assert!(
        text(&bare.stdout).starts_with("Pod default/p (from -)"),
        "{}{}",
        text(&bare.stdout),
        text(&bare.stderr)
    );

    let nothing = run(&["explain"], None);
    assert_eq!(nothing.status.code(), Some(2));
    // A kind explain cannot judge is refused before any cluster is asked.
    let service = run(
        &["explain", "svc/web", "--kubeconfig", "/nonexistent"],
        None,
    );
    assert_eq!(service.status.code(), Some(1));
    assert!(
        text(&service.stderr).contains(
            "svc/web: explain takes a pod (NAME or pod/NAME), a workload (deployment/NAME, statefulset/NAME or daemonset/NAME; deploy, sts, ds for short) or a job/NAME or cronjob/NAME, not \"svc\""
        ),
        "{}",
        text(&service.stderr)
    );
    let configmap = run(
        &["explain", "-f", "-"],
        Some("kind: ConfigMap\nmetadata: {name: c}\n"),
    );
    assert!(!configmap.status.success());
    assert!(
        text(&configmap.stderr).contains(
            "-: no Pod and no object with a pod template to explain (it holds ConfigMap/c)"
        ),
        "{}",
        text(&configmap.stderr)
    );

    // A manifest as teams keep them: a Service beside the Deployment, a CronJob after it;
    // each object with a pod is explained, in order.
    let manifest = format!(
        "kind: Service\nmetadata: {{name: web}}\n---\n{}\n---\n{}",
        std::fs::read_to_string("examples/deployment.yaml").unwrap(),
        "kind: CronJob\nmetadata: {name: nightly, namespace: team-a}\nspec: {jobTemplate: {spec: {template: {metadata: {annotations: {injector/request: logger:v9}}, spec: {containers: [{name: app, image: a}]}}}}}\n"
    );
    let both = run(&["explain", "-f", "-", "-o", "json"], Some(&manifest));
    assert!(both.status.success(), "{}", text(&both.stderr));
    let both: Value = serde_json::from_slice(&both.stdout).unwrap();
    let items = both["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{both:#}");
    assert_eq!(items[0]["subject"], "Deployment team-a/web (from -)");
    assert_eq!(
        items[0]["injection"], explained["injection"],
        "the Deployment, as when alone"
    );
    assert_eq!(items[1]["subject"], "CronJob team-a/nightly (from -)");
    assert_eq!(items[1]["injection"]["verdict"], "deny");
    let page = text(&run(&["explain", "-f", "-"], Some(&manifest)).stdout);
    assert!(
        page.contains("injects logger:v1 (revision ")
            && page.contains("\n\nCronJob team-a/nightly"),
        "{page}"
    );
}

#[test]
fn a_fleet_rollout_refuses_waves_the_kubeconfig_does_not_name_before_reaching_any_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // Two contexts whose servers nobody listens on: only the check of the waves runs.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: staging\n\
         clusters:\n- {name: staging, cluster: {server: 'https://127.0.0.1:1'}}\n\
         - {name: prod, cluster: {server: 'https://127.0.0.1:1'}}\n\
         users:\n- {name: me, user: {token: t}}\n\
         contexts:\n- {name: staging, context: {cluster: staging, user: me}}\n\
         - {name: prod, context: {cluster: prod, user: me}}\n",
    )
    .unwrap();
    let run = |waves: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sidecar-injector"));
        command
            .args(["rollout", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--promote", "logger:v1"]);
        for wave in waves {
            command.args(["--wave", wave]);
        }
        command.current_dir(ROOT).output().unwrap()
    };
    for (waves, said) in [
        (
            &["staging", "prod,prod-us"][..],
            "--wave \"prod,prod-us\": the kubeconfig has no context \"prod-us\" (it has: staging, prod)",
        ),
        (
            &["staging", "prod,staging"][..],
            "--wave: staging is in wave 1 and wave 2: a cluster is promoted once",
        ),
        (
            &["staging", ","][..],
            "--wave \",\" (wave 2) names no context",
        ),
    ] {
        let output = run(waves);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{waves:?}: {stderr}");
        assert!(stderr.contains(said), "{waves:?}: {stderr}");
    }
    // --wave promotes: it needs --promote, and is no --confirm run.
    let output = Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args(["rollout", "--wave", "staging"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("--promote"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn serve_refuses_an_upstream_gate_it_could_not_run_naming_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // A cluster nobody listens on: serve stops before it would reach it.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: here\n\
         clusters:\n- {name: here, cluster: {server: 'https://127.0.0.1:1'}}\n\
         users:\n- {name: me, user: {token: t}}\n\
         contexts:\n- {name: here, context: {cluster: here, user: me}}\n",
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let missing = dir.path().join("missing");
    let base = [
        "--kubeconfig",
        kubeconfig,
        "--injector-namespace",
        "injector-system",
        "--config-directory",
        "config",
        "--tls-port",
        "0",
        "--lifecycle-port",
        "0",
    ];
    for (extra, said) in [
        (
            vec!["--promote-after", "staging"],
            "--promote-after promotes revisions that wait under --promotion=gated: pass --promotion=gated too".to_owned(),
        ),
        (
            vec!["--promotion=gated", "--promote-after", "staging", "--upstream-kubeconfig", missing.to_str().unwrap()],
            format!("--promote-after: cannot read --upstream-kubeconfig {}", missing.display()),
        ),
        (
            vec!["--promotion=gated", "--promote-after", "staging", "--upstream-kubeconfig", kubeconfig],
            format!("--promote-after staging: --upstream-kubeconfig {kubeconfig} has no such context (it has: here)"),
        ),
        (
            vec!["--rollout=off", "--promotion=gated", "--promote-after", "here"],
            "--promote-after promotes the rollout engine's gated campaigns: it needs a cluster and --rollout=auto or dry-run".to_owned(),
        ),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let output = serve_in(Path::new(ROOT), &args);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{extra:?}: {stderr}");
        assert!(stderr.contains(&said), "{extra:?}: {stderr}");
    }
}

#[test]
fn serve_refuses_a_policy_mode_it_could_not_run_naming_what_is_wrong() {
    let base = [
        "--config-directory",
        "config",
        "--tls-port",
        "0",
        "--lifecycle-port",
        "0",
    ];
    for (extra, said) in [
        (
            vec!["--injection=policy"],
            "--injection=policy needs a cluster connection",
        ),
        (
            vec!["--namespace-selector", "team=a"],
            "--namespace-selector is the policies' (--injection=policy)",
        ),
        (
            vec!["--injection=policy", "--namespace-selector", "tier in web"],
            "\"tier in web\": expected values in parentheses, as in (a,b)",
        ),
        (
            vec![
                "--injection=policy",
                "--rollout=off",
                "--master-url",
                "https://127.0.0.1:1",
                "--webhook-configuration",
                "sidecar-injector",
                "--ca-bundle-file",
                "ca.crt",
            ],
            "--webhook-configuration keeps a webhook's caBundle, and --injection=policy serves no webhook",
        ),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let output = serve_in(Path::new(ROOT), &args);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{extra:?}: {stderr}");
        assert!(stderr.contains(said), "{extra:?}: {stderr}");
    }
}

#[test]
fn policy_prints_the_policies_and_bindings_for_kubectl_and_refuses_what_it_cannot_express() {
    let output = run(
        &["policy", "-o", "json", "--name", "injector-policies"],
        None,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let list: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let objects: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let kinds: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    assert!(objects.iter().all(|(_, name)| name == "injector-policies"));
    // Every shipped example is in it, with its revision in the stamp.
    let policy = list["items"][0].to_string();
    for name in [
        "logger:v1",
        "logger:v2",
        "metrics-agent:v1",
        "secrets-agent:v1",
    ] {
        assert!(
            policy.contains(&format!("{name}\\\": \\\"{}", validated_revision(name))),
            "{name} and its revision in {policy:.300}"
        );
    }
    // YAML by default, as documents kubectl reads.
    let yaml = run(&["policy"], None);
    assert!(yaml.status.success());
    assert_eq!(text(&yaml.stdout).matches("\n---\n").count() + 1, 4);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("auto.yaml"),
        "name: auto:v1\nnativeSidecars: auto\ncontainers: [{name: a, image: a}]\n",
    )
    .unwrap();
    let refused = run(
        &["policy", "--config-directory", dir.path().to_str().unwrap()],
        None,
    );
    assert!(!refused.status.success());
    assert!(refused.stdout.is_empty());
    assert!(
        text(&refused.stderr).contains("policy: cannot inject auto:v1 (")
            && text(&refused.stderr)
                .contains("nativeSidecars: auto: the form follows the nodes' kubelets"),
        "{}",
        text(&refused.stderr)
    );
}

/// A pod that sets pod-level resources (Kubernetes 1.34+), the app leaving 5m and 16Mi free.
const POD_LEVEL: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: asks\n  namespace: team\n  annotations: {injector/request: logger:v1}\nspec:\n  resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {cpu: 1, memory: 256Mi}}\n  containers:\n  - {name: app, image: example.org/app:1, resources: {requests: {cpu: 95m, memory: 112Mi}}}\n";

#[test]
fn inject_and_explain_keep_a_pod_with_pod_level_resources_valid_and_show_its_figures() {
    let output = run(&["inject", "-f", "-"], Some(POD_LEVEL));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let pod = &documents(&output)[0];
    // logger:v1 requests 10m and 32Mi and limits its memory to 64Mi.
    assert_eq!(
        pod["spec"]["resources"],
        serde_json::json!({"requests": {"cpu": "110m", "memory": "160Mi"},
                           "limits": {"cpu": "1010m", "memory": "320Mi"}})
    );
    let explained = run(&["explain", "-f", "-"], Some(POD_LEVEL));
    assert!(explained.status.success(), "{}", text(&explained.stderr));
    let page = text(&explained.stdout);
    assert!(
        page.contains(
            "pod-level resources: requests cpu 100m -> 110m, memory 128Mi -> 160Mi; \
             limits cpu 1 -> 1010m, memory 256Mi -> 320Mi"
        ),
        "{page}"
    );

    // A config that refuses such pods: inject denies, explain says why with both figures.
    let dir = tempfile::tempdir().unwrap();
    let refusing = std::fs::read_to_string(Path::new(ROOT).join("config/logger-v1.yaml")).unwrap()
        + "podResources: refuse\n";
    std::fs::write(dir.path().join("logger-v1.yaml"), refusing).unwrap();
    let config = dir.path().to_str().unwrap();
    let denied = run(
        &["inject", "--config-directory", config, "-f", "-"],
        Some(POD_LEVEL),
    );
    assert_eq!(denied.status.code(), Some(1), "{}", text(&denied.stdout));
    assert_eq!(
        text(&denied.stderr).trim(),
        "Pod/asks: denied: sidecar \"logger:v1\" does not fit the pod's resources (its config \
         says podResources: refuse): spec.resources.requests.cpu is 100m, and the containers \
         would request 105m with the sidecar; raise spec.resources.requests.cpu to 105m or \
         more, or remove spec.resources.requests.cpu"
    );
    let explained = run(
        &["explain", "--config-directory", config, "-f", "-"],
        Some(POD_LEVEL),
    );
    let page = text(&explained.stdout);
    assert!(
        page.contains("=>  denied: sidecar \"logger:v1\" does not fit the pod's resources"),
        "{page}"
    );
}

#[test]
fn serve_reads_its_settings_file_and_says_what_is_wrong_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |settings: &str| {
        let path = dir.path().join("settings.yaml");
        std::fs::write(&path, settings).unwrap();
        Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
            .args(["serve", "--settings", path.to_str().unwrap()])
            .current_dir(ROOT)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("CONFIGMAP_LABELS")
            .env_remove("SETTINGS_FILE")
            .output()
            .unwrap()
    };
    // A setting from the file reaches serve as its flag would.
    let labels = serve("tls-port: 0\nlifecycle-port: 0\nconfigmap-labels: a=b\n");
    assert_eq!(labels.status.code(), Some(1));
    assert!(
        text(&labels.stderr).contains("--configmap-labels needs a cluster connection"),
        "{}",
        text(&labels.stderr)
    );
    let misspelt = serve("configmap-label: a=b\n");
    assert_eq!(misspelt.status.code(), Some(2));
    assert!(
        text(&misspelt.stderr)
            .contains("settings.yaml: \"configmap-label\" is not a flag of serve"),
        "{}",
        text(&misspelt.stderr)
    );
    let wrong = serve("tls-port: https\n");
    assert_eq!(wrong.status.code(), Some(2));
    let stderr = text(&wrong.stderr);
    assert!(
        stderr.contains("from the settings file")
            && stderr.contains("invalid value 'https' for '--tls-port"),
        "{stderr}"
    );
    // The environment overrides the file: its wrong port is never read.
    let path = dir.path().join("overridden.yaml");
    std::fs::write(
        &path,
        "tls-port: https\nlifecycle-port: 0\nconfigmap-labels: a=b\n",
    )
    .unwrap();
    let overridden = Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .args(["serve", "--settings", path.to_str().unwrap()])
        .current_dir(ROOT)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("CONFIGMAP_LABELS")
        .env("TLS_PORT", "0")
        .output()
        .unwrap();
    assert_eq!(
        overridden.status.code(),
        Some(1),
        "{}",
        text(&overridden.stderr)
    );
    assert!(text(&overridden.stderr).contains("--configmap-labels needs a cluster connection"));
}
