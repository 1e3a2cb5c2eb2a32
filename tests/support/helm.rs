//! helm (v4, built by testbed/helm.sh from the Go module proxy into a cache), run as a platform
//! team runs it against the chart in charts/sidecar-injector.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The chart, as a path helm takes.
pub fn chart() -> String {
    format!("{ROOT}/charts/sidecar-injector")
}

/// helm's path ($HELM_BIN/helm, else built and cached by testbed/helm.sh).
pub fn helm_bin() -> PathBuf {
    let output = Command::new("bash")
        .arg(Path::new(ROOT).join("testbed/helm.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs testbed/helm.sh");
    assert!(output.status.success(), "testbed/helm.sh failed");
    let stdout = String::from_utf8(output.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("a folder").trim()).join("helm")
}

/// `helm ARGS`, its output whatever it says.
pub fn helm(args: &[&str]) -> Output {
    Command::new(helm_bin())
        .args(args)
        .output()
        .expect("helm runs")
}

/// `helm ARGS`, which must succeed: its stdout.
pub fn helm_ok(args: &[&str]) -> String {
    let output = helm(args);
    assert!(
        output.status.success(),
        "helm {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The objects `helm template` renders of the chart in `namespace` with `set` values, its
/// `helm test` hooks left out (an install does not create them).
pub fn template(namespace: &str, set: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "sidecar-injector",
        chart.as_str(),
        "-n",
        namespace,
        "--skip-tests",
    ];
    for value in set {
        args.extend(["--set", value]);
    }
    documents(&helm_ok(&args))
}

/// The documents of a YAML stream, empty ones left out.
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|d: &Value| !d.is_null())
        .collect()
}
