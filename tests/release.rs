//! `scripts/release VERSION` on this checkout: each artifact is there, checksummed, and is what
//! it says (the binary lists its crates, the SBOM the same crates, the image its labels, the
//! chart and install.yaml the release's image), and a wrong version is refused before anything
//! is built. It shares the static binary the hostile and real-node tests build (cargo's release
//! profile; a real release uses the image profile).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

// helm as the chart's tests run it, and the documents of a YAML stream.
#[allow(dead_code)]
#[path = "support/helm.rs"]
mod helm;
use helm::{documents, helm_bin};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const REPOSITORY: &str = "ghcr.io/sidecar-injector/sidecar-injector";

fn release(version: &str, out: &Path) -> Output {
    let mut command = Command::new("bash");
    command
        .arg(Path::new(ROOT).join("scripts/release"))
        .arg(version)
        .env("RELEASE_DIR", out)
        // The tests' trees may hold uncommitted work; the revision label then says so.
        .env("RELEASE_ALLOW_DIRTY", "1")
        .env("RELEASE_PERF_GUARD", "0")
        .env("SIDECAR_INJECTOR_PROFILE", "release");
    command.output().expect("bash runs scripts/release")
}

fn run(program: &str, args: &[&str], dir: &Path) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|err| panic!("{program} runs: {err}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The version Cargo.lock pins of `package` (the first, when several are locked).
fn locked_version(package: &str) -> String {
    let lock = std::fs::read_to_string(Path::new(ROOT).join("Cargo.lock")).unwrap();
    let entry = format!("name = \"{package}\"\nversion = \"");
    let start = lock.find(&entry).expect("locked") + entry.len();
    lock[start..].split('"').next().unwrap().to_owned()
}

fn deployment_image(objects: &[Value]) -> &str {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
}

#[test]
fn release_makes_every_artifact_of_the_version() {
    let scratch = tempfile::tempdir().unwrap();

    // Refused before anything is built, naming what is wrong.
    let wrong = release("9.9.9", &scratch.path().join("wrong"));
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success());
    assert!(
        said.contains(&format!("Cargo.toml says version {VERSION}, not 9.9.9")),
        "{said}"
    );
    let usage = release("v1", &scratch.path().join("wrong"));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("usage: scripts/release VERSION"));
    assert!(!scratch.path().join("wrong").exists(), "nothing made");

    let out = scratch.path().join("dist");
    let made = release(VERSION, &out);
    assert!(
        made.status.success(),
        "scripts/release: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let name = format!("sidecar-injector-{VERSION}");
    let files = [
        format!("{name}-linux-amd64"),
        format!("{name}-image.tar"),
        format!("{name}.tgz"),
        "install.yaml".to_owned(),
        format!("{name}.cdx.json"),
    ];
    let sums = run("sha256sum", &["-c", "SHA256SUMS"], &out);
    for file in &files {
        assert!(
            sums.contains(&format!("{file}: OK")),
            "{file} in SHA256SUMS: {sums}"
        );
    }
    the_binary_lists_its_crates(&out.join(&files[0]));
    the_sbom_lists_the_same_crates(&out.join(&files[4]));
    the_image_says_its_version(&out.join(&files[1]));
    the_chart_and_install_yaml_install_the_version(&out.join(&files[2]), &out.join(&files[3]));
}

/// Its version, and its crates as cargo auditable embedded them.
fn the_binary_lists_its_crates(binary: &Path) {
    let version = run(binary.to_str().unwrap(), &["--version"], Path::new(ROOT));
    assert!(
        version.starts_with(&format!("sidecar-injector {VERSION} ")),
        "{version}"
    );
    let embedded = auditable_info::audit_info_from_file(binary, Default::default())
        .expect("the binary carries its dependency list");
    let has = |name: &str, version: &str| {
        embedded
            .packages
            .iter()
            .any(|p| p.name == name && p.version.to_string() == version)
    };
    assert!(has("sidecar-injector", VERSION));
    assert!(has("kube-client", &locked_version("kube-client")));
    assert!(has("rustls", &locked_version("rustls")));
}

/// CycloneDX, of this version, listing the binary's crates with their purls, and no
/// dev-dependency.
fn the_sbom_lists_the_same_crates(path: &Path) {
    let sbom: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["specVersion"], "1.5");
    assert_eq!(sbom["metadata"]["component"]["name"], "sidecar-injector");
    assert_eq!(sbom["metadata"]["component"]["version"], VERSION);
    let purls: Vec<&str> = sbom["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["purl"].as_str())
        .collect();
    assert!(
        !purls.iter().any(|p| p.starts_with("pkg:cargo/criterion@")),
        "a dev-dependency is not in the binary"
    );
    for package in ["kube-client", "rustls", "sidecar-injector-core"] {
        let purl = format!("pkg:cargo/{package}@{}", locked_version(package));
        assert!(
            purls.iter().any(|p| p.starts_with(&purl)),
            "{purl} in the SBOM"
        );
    }
}

/// Tagged with the version, its OCI labels filled in.
fn the_image_says_its_version(image: &Path) {
    let image = image.to_str().unwrap();
    let here = Path::new(ROOT);
    let manifest: Value =
        serde_json::from_str(&run("tar", &["-xOf", image, "manifest.json"], here)).unwrap();
    assert_eq!(
        manifest[0]["RepoTags"][0],
        format!("{REPOSITORY}:{VERSION}")
    );
    let config_path = manifest[0]["Config"].as_str().unwrap();
    let config: Value =
        serde_json::from_str(&run("tar", &["-xOf", image, config_path], here)).unwrap();
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(
        labels["org.opencontainers.image.source"],
        "https://github.com/sidecar-injector/sidecar-injector"
    );
    let head = run("git", &["rev-parse", "HEAD"], here);
    assert!(
        labels["org.opencontainers.image.revision"]
            .as_str()
            .unwrap()
            .starts_with(head.trim()),
        "{labels}"
    );
}

/// The chart packaged at the version and install.yaml (deploy/ as kustomize renders it) both
/// install the release's image.
fn the_chart_and_install_yaml_install_the_version(chart: &Path, install: &Path) {
    let chart = chart.to_str().unwrap();
    let here = Path::new(ROOT);
    let helm = helm_bin();
    let helm = helm.to_str().unwrap();
    let shown: Value = serde_yaml::from_str(&run(helm, &["show", "chart", chart], here)).unwrap();
    assert_eq!(shown["version"], VERSION);
    assert_eq!(shown["appVersion"], VERSION);
    let rendered = documents(&run(
        helm,
        &["template", "sidecar-injector", chart, "--skip-tests"],
        here,
    ));
    assert_eq!(
        deployment_image(&rendered),
        format!("{REPOSITORY}:{VERSION}")
    );

    let installed = documents(&std::fs::read_to_string(install).unwrap());
    let mut deployed = documents(&run("kubectl", &["kustomize", "deploy"], here));
    assert_eq!(
        deployment_image(&installed),
        format!("{REPOSITORY}:{VERSION}")
    );
    for object in &mut deployed {
        if object["kind"] == "Deployment" {
            object["spec"]["template"]["spec"]["containers"][0]["image"] =
                format!("{REPOSITORY}:{VERSION}").into();
        }
    }
    assert_eq!(installed, deployed);
}
