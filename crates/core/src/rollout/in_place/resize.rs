//! A sidecar's CPU and memory changed in a running pod: in-place pod resize (GA in 1.35), also
//! for native sidecars (1.33). The API server accepts a resize only through the pod's `resize`
//! subresource, only of CPU and memory, never removing a request or a limit, and never changing
//! the pod's QoS class; a pod with pod-level resources cannot be resized (its aggregate would
//! change, and resizing pod-level resources is alpha). Pure: what a change resizes, whether a
//! pod may be, and what the kubelet reports of it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec};
use serde_json::Value;

use super::NotInPlace;
use crate::injection::resources::milli;

/// The resources a kubelet resizes in place.
const RESIZABLE: [&str; 2] = ["cpu", "memory"];
const LISTS: [&str; 2] = ["requests", "limits"];

/// One figure a resize sets: `requests`/`limits`, the resource, the quantity as written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Figure {
    pub list: String,
    pub resource: String,
    pub quantity: String,
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{} {}", self.list, self.resource, self.quantity)
    }
}

/// The figures a container's `resources` goes through from `from` to `to` (its content in two
/// revisions), none when they are the same; or why a resize cannot do it.
pub(super) fn figures(
    container: &str,
    from: Option<&Value>,
    to: Option<&Value>,
) -> Result<Vec<Figure>, NotInPlace> {
    let empty = Value::Object(Default::default());
    let (from, to) = (from.unwrap_or(&empty), to.unwrap_or(&empty));
    let beyond = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            for list in LISTS {
                map.remove(list);
            }
        }
        v
    };
    if beyond(from) != beyond(to) {
        return Err(NotInPlace::ResourcesBeyondCpuMemory {
            container: container.to_owned(),
        });
    }
    let mut figures = Vec::new();
    for list in LISTS {
        let (old, new) = (from.get(list), to.get(list));
        let mut names: Vec<&String> = [old, new]
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .flat_map(|m| m.keys())
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let (was, now) = (old.and_then(|m| m.get(name)), new.and_then(|m| m.get(name)));
            if was == now {
                continue;
            }
            if !RESIZABLE.contains(&name.as_str()) {
                return Err(NotInPlace::NotResizable {
                    container: container.to_owned(),
                    resource: name.clone(),
                });
            }
            let Some(quantity) = now.and_then(Value::as_str) else {
                return Err(NotInPlace::ResourceRemoved {
                    container: container.to_owned(),
                    figure: format!("{list}.{name}"),
                });
            };
            figures.push(Figure {
                list: list.to_owned(),
                resource: name.clone(),
                quantity: quantity.to_owned(),
            });
        }
    }
    Ok(figures)
}

/// `container`'s resources with `figures` set, as JSON for the resize patch: its other figures
/// (a LimitRange's defaults among them) are kept.
pub(super) fn resized(container: &Container, figures: &[Figure]) -> Value {
    let mut resources = container
        .resources
        .as_ref()
        .and_then(|r| serde_json::to_value(r).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Default::default()));
    for figure in figures {
        let list = resources
            .as_object_mut()
            .expect("an object")
            .entry(figure.list.clone())
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(list) = list.as_object_mut() {
            list.insert(
                figure.resource.clone(),
                Value::String(figure.quantity.clone()),
            );
        }
    }
    resources
}

/// A pod's QoS class, as the API server computes it (pod-level resources aside: such pods are
/// never resized here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl std::fmt::Display for QosClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        })
    }
}

/// The QoS class of a pod spec: BestEffort when no container asks CPU or memory; Guaranteed
/// when every container limits both and requests what it limits; else Burstable.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let (mut any, mut guaranteed) = (false, true);
    for container in containers {
        let resources = container.resources.as_ref();
        let get = |list: Option<&BTreeMap<String, _>>, name: &str| {
            list.and_then(
                |l: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
                    l.get(name)
                },
            )
            .and_then(|q| milli(&q.0))
            .filter(|v| *v != 0)
        };
        let requests = resources.and_then(|r| r.requests.as_ref());
        let limits = resources.and_then(|r| r.limits.as_ref());
        for name in RESIZABLE {
            let (request, limit) = (get(requests, name), get(limits, name));
            any |= request.is_some() || limit.is_some();
            // An unset request defaults to the limit.
            guaranteed &= limit.is_some() && request.is_none_or(|r| Some(r) == limit);
        }
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// Whether a pod sets pod-level requests or limits.
pub(super) fn has_pod_level_resources(spec: &PodSpec) -> bool {
    spec.resources.as_ref().is_some_and(|r| {
        r.requests.as_ref().is_some_and(|m| !m.is_empty())
            || r.limits.as_ref().is_some_and(|m| !m.is_empty())
    })
}

/// Whether the kubelet reports `status` running with every figure of `figures` (quantities
/// compared by value: `128Mi` is `134217728`).
pub(super) fn applied(status: &ContainerStatus, figures: &[Figure]) -> bool {
    let actual = status.resources.as_ref();
    figures.iter().all(|figure| {
        let list = match figure.list.as_str() {
            "requests" => actual.and_then(|r| r.requests.as_ref()),
            _ => actual.and_then(|r| r.limits.as_ref()),
        };
        let reported = list
            .and_then(|l| l.get(&figure.resource))
            .and_then(|q| milli(&q.0));
        reported.is_some() && reported == milli(&figure.quantity)
    })
}

/// The API server's refusal of a resize: its HTTP code, message and causes' reasons.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResizeRefusal {
    pub code: u16,
    pub message: String,
    pub causes: Vec<String>,
}

impl ResizeRefusal {
    /// The failure of the upgrade of `pod` when the node cannot fit the resize (since 1.35 the
    /// API server checks the node's allocatable before the kubelet sees it): the same as a
    /// kubelet's `Infeasible`, for restarting the pod would only make one that no node
    /// schedules. `None`: this pod cannot be resized at all (no resize served, not allowed,
    /// invalid), and is restarted instead.
    pub fn failure(&self, pod: &str, containers: &[&String]) -> Option<String> {
        let node_capacity = self.code == 403
            && (self.causes.iter().any(|c| c == "NodeCapacity")
                || self.message.contains("enough allocatable resources"));
        node_capacity.then(|| {
            let containers: Vec<&str> = containers.iter().map(|c| c.as_str()).collect();
            format!(
                "pod {pod}: the API server refused to resize {}: {}",
                containers.join(", "),
                self.message
            )
        })
    }
}

/// Whether the pod's conditions say a resize is pending or in progress.
pub(super) fn in_flight(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
    conditions.into_iter().flatten().any(|c| {
        c.status == "True" && (c.type_ == "PodResizePending" || c.type_ == "PodResizeInProgress")
    })
}

/// What the kubelet says of a resize it cannot make, from the pod's conditions: pending because
/// the node cannot fit it (`Infeasible`, or `Deferred` for now), or in progress with an error.
pub(super) fn refusal(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_deref()?;
    conditions.iter().find_map(|c| {
        let reason = c.reason.as_deref().unwrap_or_default();
        let refused = c.status == "True"
            && match c.type_.as_str() {
                "PodResizePending" => reason == "Infeasible" || reason == "Deferred",
                "PodResizeInProgress" => reason == "Error",
                _ => false,
            };
        refused.then(|| match c.message.as_deref().filter(|m| !m.is_empty()) {
            Some(message) => format!("{} {reason}: {message}", c.type_),
            None => format!("{} {reason}", c.type_),
        })
    })
}

#[cfg(test)]
mod tests;
