//! `inject`'s object walking: the pod template of each object a manifest holds (a Pod, or a
//! workload's template; each item of a `List`), injected as the webhook would. Pure: the CLI
//! reads the file and prints.

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use super::{Decision, InjectionSettings, PodView, SkipReason, decide};
use crate::config::SidecarSet;
use crate::name::SidecarName;

/// Where the pod template sits in each kind `inject` understands.
pub fn pod_template_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some(""),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => Some("/spec/template"),
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// What happened to one object with a pod template, named `Kind/name`.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectOutcome {
    /// Injected; `missing` are requested sidecars no config defines (allowed by policy).
    Injected {
        label: String,
        missing: Vec<SidecarName>,
    },
    Skipped {
        label: String,
        reason: SkipReason,
    },
    Denied {
        label: String,
        message: String,
    },
}

#[derive(Debug, Error)]
pub enum ManifestError {
    #[error("{label}: cannot read the pod: {source}")]
    ReadPod {
        label: String,
        source: serde_json::Error,
    },
    #[error("{label}: the patch does not apply: {source}")]
    ApplyPatch {
        label: String,
        source: json_patch::PatchError,
    },
}

/// Injects into `document` in place (each item of a `List`, as `kubectl get -o yaml` prints).
/// Kinds without a pod template pass through and report nothing.
pub fn inject_manifest(
    document: &mut Value,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> Result<Vec<ObjectOutcome>, ManifestError> {
    let mut outcomes = Vec::new();
    for at in pod_locations(document) {
        let object = document.pointer(&at.object).unwrap_or(&Value::Null);
        let label = document_label(object);
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_owned();
        let Some(template) = document.pointer_mut(&at.pod) else {
            continue;
        };
        outcomes.push(inject_pod(template, label, &namespace, sidecars, settings)?);
    }
    Ok(outcomes)
}

/// Injects into one pod or template in place, as the webhook would.
fn inject_pod(
    template: &mut Value,
    label: String,
    namespace: &str,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> Result<ObjectOutcome, ManifestError> {
    let pod = PodView::deserialize(&*template).map_err(|source| ManifestError::ReadPod {
        label: label.clone(),
        source,
    })?;
    Ok(match decide(&pod, namespace, sidecars, settings) {
        Decision::Inject(injection) => {
            let patch = injection.patch.to_json_patch();
            let missing = injection.missing.clone();
            drop(pod);
            json_patch::patch(template, &patch).map_err(|source| ManifestError::ApplyPatch {
                label: label.clone(),
                source,
            })?;
            ObjectOutcome::Injected { label, missing }
        }
        Decision::Skip(reason) => ObjectOutcome::Skipped { label, reason },
        Decision::Deny(denial) => ObjectOutcome::Denied {
            label,
            message: denial.to_string(),
        },
    })
}

/// Where a document holds a pod: the object (a Pod, or a kind with a pod template; each item
/// of a `List`) and its pod or template, as JSON pointers into the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLocation {
    pub object: String,
    pub pod: String,
}

/// Every pod a document holds, in document order.
pub fn pod_locations(document: &Value) -> Vec<PodLocation> {
    let mut found = Vec::new();
    let mut stack = vec![(String::new(), document)];
    while let Some((at, object)) = stack.pop() {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind == "List" {
            let items = object.get("items").and_then(Value::as_array);
            let items = items.map(Vec::as_slice).unwrap_or_default();
            let items = items.iter().enumerate().rev();
            stack.extend(items.map(|(i, item)| (format!("{at}/items/{i}"), item)));
        } else if let Some(pointer) = pod_template_pointer(kind)
            && object.pointer(pointer).is_some()
        {
            found.push(PodLocation {
                pod: format!("{at}{pointer}"),
                object: at,
            });
        }
    }
    found
}

/// The objects of a document that hold a pod, each with its pod or template, in order.
pub fn objects_with_pods(document: &Value) -> Vec<(&Value, &Value)> {
    pod_locations(document)
        .iter()
        .filter_map(|at| Some((document.pointer(&at.object)?, document.pointer(&at.pod)?)))
        .collect()
}

/// `Kind/name` (or the generateName) of a document, for messages.
pub fn document_label(document: &Value) -> String {
    let kind = document
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = document.get("metadata");
    let name = meta
        .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    format!("{kind}/{name}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::{LoadedSidecar, parse_config};

    fn logger() -> SidecarSet {
        let text = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:1.0'}]\n";
        let parsed = parse_config("logger.yaml", text).unwrap();
        std::iter::once(LoadedSidecar::new(parsed.config, "logger.yaml")).collect()
    }

    fn deployment(name: &str, request: &str) -> Value {
        json!({
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"template": {
                "metadata": {"annotations": {"injector/request": request}},
                "spec": {"containers": [{"name": "app", "image": "app"}]}
            }}
        })
    }

    #[test]
    fn every_template_of_a_list_is_injected_and_other_kinds_pass() {
        let mut list = json!({"kind": "List", "items": [
            deployment("web", "logger:v1"),
            {"kind": "Service", "metadata": {"name": "web"}},
            deployment("api", "logger:v9"),
        ]});
        let outcomes =
            inject_manifest(&mut list, &logger(), &InjectionSettings::default()).unwrap();
        assert_eq!(outcomes.len(), 2);
        assert_eq!(
            outcomes[0],
            ObjectOutcome::Injected {
                label: "Deployment/web".into(),
                missing: vec![]
            }
        );
        assert!(
            matches!(&outcomes[1], ObjectOutcome::Denied { label, message } if label == "Deployment/api" && message.contains("logger:v9"))
        );
        let containers = list
            .pointer("/items/0/spec/template/spec/containers")
            .unwrap();
        assert_eq!(containers[1]["name"], "shipper");
        assert_eq!(
            list["items"][1],
            json!({"kind": "Service", "metadata": {"name": "web"}})
        );
    }

    #[test]
    fn the_objects_with_pods_are_found_in_order_inside_lists() {
        let list = json!({"kind": "List", "items": [
            deployment("web", "logger:v1"),
            {"kind": "Service", "metadata": {"name": "web"}},
            {"kind": "List", "items": [
                {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}},
                {"kind": "Deployment", "metadata": {"name": "no-template"}, "spec": {}},
            ]},
            deployment("api", "logger:v9"),
        ]});
        let found: Vec<(String, &Value)> = objects_with_pods(&list)
            .into_iter()
            .map(|(object, pod)| (document_label(object), pod))
            .collect();
        let labels: Vec<&str> = found.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["Deployment/web", "Pod/p", "Deployment/api"]);
        assert_eq!(
            found[1].1, &list["items"][2]["items"][0],
            "a Pod is its own pod"
        );
        assert_eq!(found[2].1, &list["items"][3]["spec"]["template"]);
        assert!(objects_with_pods(&json!({"kind": "Service"})).is_empty());
    }

    #[test]
    fn a_cronjob_template_is_found_under_its_job_template() {
        assert_eq!(
            pod_template_pointer("CronJob"),
            Some("/spec/jobTemplate/spec/template")
        );
        assert_eq!(pod_template_pointer("ConfigMap"), None);
    }
}
