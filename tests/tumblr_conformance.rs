//! Conformance with tumblr/k8s-sidecar-injector: the cases its own tests check (config
//! loading, which sidecar a pod resolves to, the pod a mutation produces), with inputs and
//! expectations of our own in tests/fixtures/tumblr/ (see its README). A mutation is judged by
//! the pod that comes out of applying the reply's patch, not by the patch's text. Cases marked
//! `difference:` are the deliberate differences listed in docs/migrating-from-tumblr.md.
#![allow(clippy::too_many_lines)] // a test reads as one scenario

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};
use sidecar_injector::annotations::AnnotationKeys;
use sidecar_injector::config::{
    LoadReport, Unreadable, configmap_origin, load_configmap_items, load_directory,
};
use sidecar_injector::injection::{InjectionSettings, MissingSidecarPolicy};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tumblr");
/// A namespace of our own, as Tumblr's tests use `injector.unittest.com`.
const ANNOTATION_NAMESPACE: &str = "injector.example.com";

fn load(directory: &str) -> LoadReport {
    let dir = Path::new(FIXTURES).join(directory);
    let files: BTreeMap<String, Result<String, Unreadable>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let text =
                std::fs::read_to_string(dir.join(&name)).map_err(|e| Unreadable::Io(e.to_string()));
            (name, text)
        })
        .collect();
    load_directory(directory, &files)
}

fn yaml(path: &Path) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn configs_load_as_tumblrs_loader_reports_them() {
    let expected = yaml(&Path::new(FIXTURES).join("configs.yaml"));
    let report = load("sidecars");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let good = expected["good"].as_object().unwrap();
    assert_eq!(report.sidecars.len(), good.len(), "every config loads");
    for (name, counts) in good {
        let sidecar = report
            .sidecars
            .iter()
            .find(|s| s.config.name.to_string() == *name)
            .unwrap_or_else(|| panic!("{name} not loaded"));
        let config = &sidecar.config;
        let actual = json!({
            "env": config.env.len(),
            "containers": config.containers.len(),
            "volumes": config.volumes.len(),
            "volumeMounts": config.volume_mounts.len(),
            "hostAliases": config.host_aliases.len(),
            "initContainers": config.init_containers.len(),
        });
        for (key, want) in counts.as_object().unwrap() {
            let got = match key.as_str() {
                "serviceAccountName" => json!(config.service_account_name),
                "hostNetwork" => json!(config.host_network),
                "hostPID" => json!(config.host_pid),
                _ => actual[key].clone(),
            };
            assert_eq!(&got, want, "{name}: {key}");
        }
    }

    // Each bad config fails on its own, with an error that says what is wrong.
    let report = load("bad");
    let bad = expected["bad"].as_object().unwrap();
    assert!(report.sidecars.is_empty(), "{:?}", report.sidecars.len());
    for (file, says) in bad {
        let says = says.as_str().unwrap();
        let error = report
            .errors
            .iter()
            .map(ToString::to_string)
            .find(|e| e.contains(&format!("bad/{file}")))
            .unwrap_or_else(|| panic!("{file}: no error in {:?}", report.errors));
        assert!(
            error.contains(says),
            "{file}: {error:?} does not say {says:?}"
        );
    }
}

#[test]
fn configmap_items_load_as_the_same_configs_in_files_do() {
    // One ConfigMap holding one config, and one holding several, as Tumblr's loader tests do.
    let files = load("sidecars");
    let item = |configmap: &str, file: &str| {
        let text =
            std::fs::read_to_string(Path::new(FIXTURES).join("sidecars").join(file)).unwrap();
        (configmap_origin("team", configmap, file), text)
    };
    let items = vec![
        item("environ", "environ.yaml"),
        item("several", "relay.yaml"),
        item("several", "bundle.yaml"),
        item("several", "hosts.yaml"),
    ];
    let report = load_configmap_items(&items);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.sidecars.len(), 4);
    for sidecar in &report.sidecars {
        let file = files
            .sidecars
            .iter()
            .find(|s| s.config.name == sidecar.config.name)
            .unwrap();
        assert_eq!(sidecar.config, file.config, "{}", sidecar.config.name);
        // Same content, same revision, wherever it was read from.
        assert_eq!(sidecar.revision, file.revision, "{}", sidecar.config.name);
    }
}

/// Empty lists and maps say nothing a missing field does not (Kubernetes reads both alike).
fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for item in map.values_mut() {
                normalise(item);
            }
            map.retain(|_, v| !matches!(v, Value::Array(a) if a.is_empty()));
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// Revisions are content hashes: compared as `name=*`.
fn without_hashes(stamp: &str) -> String {
    stamp
        .split(',')
        .map(|item| match item.split_once('=') {
            Some((name, _)) => format!("{name}=*"),
            None => item.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn pods_come_out_as_tumblrs_injector_makes_them() {
    let sidecars = load("sidecars").sidecar_set();
    let mut cases: Vec<_> = std::fs::read_dir(Path::new(FIXTURES).join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 19);
    for path in cases {
        let case = yaml(&path);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let settings = InjectionSettings {
            keys: AnnotationKeys::new(ANNOTATION_NAMESPACE),
            on_missing_sidecar: match case["settings"]["onMissingSidecar"].as_str() {
                Some("deny") => MissingSidecarPolicy::Deny,
                // Tumblr lets a pod through when its sidecar is missing.
                _ => MissingSidecarPolicy::Allow,
            },
            ..InjectionSettings::default()
        };
        let namespace = case["namespace"].as_str().unwrap_or("team");
        let pod = case["pod"].clone();
        let review = json!({
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "request": {
                "uid": name, "operation": "CREATE", "namespace": namespace,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": pod,
            }
        });
        let answer = sidecar_injector::serve::review(
            &serde_json::to_vec(&review).unwrap(),
            &sidecars,
            &settings,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let reply: Value = serde_json::from_slice(&answer.body).unwrap();
        let response = &reply["response"];
        let expect = &case["expect"];
        if let Some(says) = expect["denied"].as_str() {
            assert_eq!(response["allowed"], false, "{name}: {response}");
            let message = response["status"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{name}: {message:?}");
            assert!(
                case["difference"].is_string(),
                "{name}: a denial is a difference"
            );
            continue;
        }
        assert_eq!(response["allowed"], true, "{name}: {response}");
        if let Some(reason) = expect["unchanged"].as_str() {
            assert!(
                response.get("patch").is_none(),
                "{name}: patched: {response}"
            );
            assert_eq!(answer.tumblr_reason, reason, "{name}");
            continue;
        }
        let patch = base64::engine::general_purpose::STANDARD
            .decode(
                response["patch"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: no patch")),
            )
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut got = pod.clone();
        json_patch::patch(&mut got, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
        let annotations = &mut got["metadata"]["annotations"];
        let revision = format!("{ANNOTATION_NAMESPACE}/revision");
        if let Some(stamp) = annotations[&revision].as_str() {
            annotations[&revision] = json!(without_hashes(stamp));
        }
        let mut want = expect["pod"].clone();
        normalise(&mut got);
        normalise(&mut want);
        assert_eq!(
            got,
            want,
            "{name}: the pod differs\n got: {}\nwant: {}",
            serde_json::to_string_pretty(&got).unwrap(),
            serde_json::to_string_pretty(&want).unwrap()
        );
        assert_eq!(answer.tumblr_reason, "all_groovy", "{name}");
        let injected = expect["injected"].as_str().unwrap();
        assert!(
            answer.sidecars.iter().any(|(s, _)| s == injected),
            "{name}: {:?}",
            answer.sidecars
        );
    }
}
