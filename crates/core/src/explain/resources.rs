//! What injection does to a pod's resources, as `explain` shows it: its effective requests
//! (as the kubelet counts them) and its pod-level figures, before and after.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// The pod-level requests and limits before and after injection, as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodResourcesChange {
    pub requests: RequestsChange,
    pub limits: RequestsChange,
}

impl fmt::Display for PodResourcesChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lists = [("requests", &self.requests), ("limits", &self.limits)];
        let shown: Vec<String> = lists
            .iter()
            .filter(|(_, change)| !change.before.is_empty() || !change.after.is_empty())
            .map(|(list, change)| format!("{list} {change}"))
            .collect();
        f.write_str(&shown.join("; "))
    }
}

/// Each resource's effective request before and after injection, as the kubelet counts it
/// (a native sidecar adds to the peak of every later init container).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestsChange {
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
}

impl fmt::Display for RequestsChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let none = String::from("0");
        let each: Vec<String> = self
            .after
            .keys()
            .chain(self.before.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|name| {
                let before = self.before.get(name).unwrap_or(&none);
                let after = self.after.get(name).unwrap_or(&none);
                format!("{name} {before} -> {after}")
            })
            .collect();
        f.write_str(&each.join(", "))
    }
}

/// The pod-level resources of `pod` and of `patched`, as written; `None` when neither sets
/// any.
pub(super) fn pod_resources_change(
    pod: &serde_json::Value,
    patched: &serde_json::Value,
) -> Option<PodResourcesChange> {
    let list = |pod: &serde_json::Value, list: &str| -> BTreeMap<String, String> {
        pod["spec"]["resources"][list]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, quantity)| {
                let text = quantity
                    .as_str()
                    .map_or_else(|| quantity.to_string(), str::to_owned);
                (name.clone(), text)
            })
            .collect()
    };
    let change = |name: &str| RequestsChange {
        before: list(pod, name),
        after: list(patched, name),
    };
    let (requests, limits) = (change("requests"), change("limits"));
    let empty = |c: &RequestsChange| c.before.is_empty() && c.after.is_empty();
    (!empty(&requests) || !empty(&limits)).then_some(PodResourcesChange { requests, limits })
}

/// `pod` patched by `patch`; `None` when the patch does not apply.
pub(super) fn patched(
    pod: &serde_json::Value,
    patch: &crate::injection::json_patch::JsonPatch<'_>,
) -> Option<serde_json::Value> {
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch.to_json_patch()).ok()?;
    Some(patched)
}

/// The effective requests of `pod` and of `patched`; `None` when nothing is requested.
pub(super) fn requests_change(
    pod: &serde_json::Value,
    patched: &serde_json::Value,
) -> Option<RequestsChange> {
    use crate::injection::resources::{describe, effective_requests};
    let spec = |pod: &serde_json::Value| {
        serde_json::from_value::<k8s_openapi::api::core::v1::PodSpec>(pod["spec"].clone()).ok()
    };
    let shown = |spec: &k8s_openapi::api::core::v1::PodSpec| -> BTreeMap<String, String> {
        effective_requests(spec)
            .into_iter()
            .map(|(name, milli)| {
                let text = describe(&name, milli);
                (name, text)
            })
            .collect()
    };
    let (before, after) = (shown(&spec(pod)?), shown(&spec(patched)?));
    (!before.is_empty() || !after.is_empty()).then_some(RequestsChange { before, after })
}
