//! Pod-level resources (`spec.resources`, KEP-2837: beta and on by default since Kubernetes
//! 1.34). The API server refuses a pod whose containers request more than its pod-level
//! requests, or one of whose containers has a limit above its pod-level limit, so a sidecar
//! injected into such a pod must be paid for or refused (the config's `podResources:`).

use std::borrow::Cow;
use std::fmt;

use super::pod::{QuantityMap, ResourcesView};
use super::resources::{Counted, Requests, aggregate, describe, milli};
use crate::config::PodResourcesMode;

/// Which of the pod-level lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodList {
    Requests,
    Limits,
}

impl PodList {
    pub fn key(self) -> &'static str {
        match self {
            PodList::Requests => "requests",
            PodList::Limits => "limits",
        }
    }
}

impl fmt::Display for PodList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// A pod-level figure the injection changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLevelChange {
    pub list: PodList,
    pub resource: String,
    pub from: i128,
    pub to: i128,
}

impl PodLevelChange {
    /// The new figure as a quantity the API server reads.
    pub fn quantity(&self) -> String {
        describe(&self.resource, self.to)
    }
}

/// Why sidecars whose config says `podResources: refuse` do not fit a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodResourcesMisfit {
    /// The refusing sidecars, `name:version`, comma-separated.
    pub sidecars: String,
    pub list: PodList,
    pub resource: String,
    /// The pod-level figure, as written.
    pub pod: String,
    /// What it would have to be at least.
    pub needed: String,
    /// The injected container whose limit is above the pod-level limit, when that is the
    /// misfit; else the misfit is the containers' requests together.
    pub container: Option<String>,
}

impl fmt::Display for PodResourcesMisfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = format!("spec.resources.{}.{}", self.list, self.resource);
        match &self.container {
            Some(container) => write!(
                f,
                "{field} is {}, below the limit of {} of the injected container {container:?}",
                self.pod, self.needed
            )?,
            None => write!(
                f,
                "{field} is {}, and the containers would request {} with the sidecar",
                self.pod, self.needed
            )?,
        }
        write!(
            f,
            "; raise {field} to {} or more, or remove spec.resources.{}.{}",
            self.needed, self.list, self.resource
        )
    }
}

/// A container of the final pod, in the order the pod lists it.
pub(super) struct Placed<'s> {
    pub(super) counted: Counted,
    /// In `initContainers`.
    pub(super) init: bool,
    /// The sidecar that injects it (name, mode, container name); `None` for the pod's own.
    pub(super) injected: Option<(&'s str, PodResourcesMode, &'s str)>,
}

/// The pod-level figures as the pod writes them.
pub(super) struct PodLevel<'v> {
    requests: Vec<(&'v str, &'v str, i128)>,
    limits: Vec<(&'v str, &'v str, i128)>,
}

impl<'v> PodLevel<'v> {
    /// `None` when the pod sets no pod-level figure (nothing to keep consistent).
    pub(super) fn of(view: Option<&'v ResourcesView<'v>>) -> Option<Self> {
        let parsed = |map: Option<&'v QuantityMap<'v>>| -> Vec<(&'v str, &'v str, i128)> {
            map.into_iter()
                .flatten()
                .filter_map(|(name, quantity): &'v (Cow<'v, str>, Cow<'v, str>)| {
                    Some((name.as_ref(), quantity.as_ref(), milli(quantity)?))
                })
                .collect()
        };
        let view = view?;
        let level = Self {
            requests: parsed(view.requests.as_ref()),
            limits: parsed(view.limits.as_ref()),
        };
        (!level.requests.is_empty() || !level.limits.is_empty()).then_some(level)
    }
}

/// Parses a written quantity map (an unreadable quantity counts as none: the API server
/// refuses it whatever is injected).
pub(super) fn parsed_map(map: Option<&QuantityMap<'_>>) -> Option<Requests> {
    map.map(|entries| {
        entries
            .iter()
            .filter_map(|(name, quantity)| Some((name.to_string(), milli(quantity)?)))
            .collect()
    })
}

/// The pod-level figures the injection must change for the pod to stay valid, or why the
/// sidecars that refuse to change them do not fit. Sidecars in `add` mode grow the requests
/// by what they add to the pod's requests as the kubelet counts them, and the limits by
/// their containers' limits (their requests where they set none), so the pod's own budget
/// stays whole and requests stay within limits. A misfit the pod had before any sidecar is
/// left to the API server.
pub(super) fn fit(
    pod: &PodLevel<'_>,
    containers: &[Placed<'_>],
) -> Result<Vec<PodLevelChange>, Box<PodResourcesMisfit>> {
    let counted = |keep: &dyn Fn(&Placed<'_>) -> bool| {
        let kept = || containers.iter().filter(|c| keep(c));
        aggregate(
            kept().filter(|c| c.init).map(|c| &c.counted),
            kept().filter(|c| !c.init).map(|c| &c.counted),
        )
    };
    let adds = |c: &Placed<'_>| matches!(c.injected, Some((_, PodResourcesMode::Add, _)));
    let before = counted(&|c| c.injected.is_none());
    let with_added = counted(&|c| c.injected.is_none() || adds(c));
    let after = counted(&|_| true);
    let mut changes = Vec::new();
    let mut requests = Vec::new();
    for &(resource, _, from) in &pod.requests {
        let grown = with_added.get(resource).copied().unwrap_or(0)
            - before.get(resource).copied().unwrap_or(0);
        let to = from + grown.max(0);
        requests.push((resource, to));
        if to != from {
            changes.push(change(PodList::Requests, resource, from, to));
        }
    }
    let mut limits = Vec::new();
    for &(resource, _, from) in &pod.limits {
        let grown: i128 = containers
            .iter()
            .filter(|c| adds(c))
            .filter_map(|c| {
                (c.counted.limits.get(resource)).or_else(|| c.counted.requests.get(resource))
            })
            .sum();
        limits.push((resource, from + grown));
        if grown > 0 {
            changes.push(change(PodList::Limits, resource, from, from + grown));
        }
    }
    let counts = Counts { with_added, after };
    match refusal(&requests, &limits, containers, &counts) {
        Some(misfit) => Err(Box::new(misfit)),
        None => Ok(changes),
    }
}

/// What the containers request: with the sidecars in `add` mode only, and with all.
struct Counts {
    with_added: Requests,
    after: Requests,
}

/// Why the sidecars in `refuse` mode do not fit the pod-level figures `requests` and
/// `limits` (after those in `add` mode grew them); `None` when they fit.
fn refusal(
    requests: &[(&str, i128)],
    limits: &[(&str, i128)],
    containers: &[Placed<'_>],
    counts: &Counts,
) -> Option<PodResourcesMisfit> {
    let refusing: Vec<&str> = containers
        .iter()
        .filter_map(|c| match c.injected {
            Some((sidecar, PodResourcesMode::Refuse, _)) => Some(sidecar),
            _ => None,
        })
        .fold(Vec::new(), |mut names, name| {
            if !names.contains(&name) {
                names.push(name);
            }
            names
        });
    if refusing.is_empty() {
        return None;
    }
    let misfit = |list, resource: &str, pod: i128, needed: i128, container: Option<&str>| {
        PodResourcesMisfit {
            sidecars: refusing.join(", "),
            list,
            resource: resource.to_owned(),
            pod: describe(resource, pod),
            needed: describe(resource, needed),
            container: container.map(str::to_owned),
        }
    };
    let needs = |of: &Requests, resource: &str| of.get(resource).copied().unwrap_or(0);
    let (after, with_added) = (&counts.after, &counts.with_added);
    for &(resource, to) in requests {
        if needs(after, resource) > to && needs(with_added, resource) <= to {
            return Some(misfit(
                PodList::Requests,
                resource,
                to,
                needs(after, resource),
                None,
            ));
        }
    }
    for &(resource, to) in limits {
        // Requests the API server defaults from the limit must stay within it.
        let defaulted = !requests.iter().any(|(r, _)| *r == resource);
        if defaulted && needs(after, resource) > to && needs(with_added, resource) <= to {
            return Some(misfit(
                PodList::Limits,
                resource,
                to,
                needs(after, resource),
                None,
            ));
        }
        let over = containers.iter().find_map(|c| match c.injected {
            Some((_, PodResourcesMode::Refuse, name)) if !c.init => c
                .counted
                .limits
                .get(resource)
                .filter(|limit| **limit > to)
                .map(|limit| (name, *limit)),
            _ => None,
        });
        if let Some((container, limit)) = over {
            return Some(misfit(
                PodList::Limits,
                resource,
                to,
                limit,
                Some(container),
            ));
        }
    }
    None
}

fn change(list: PodList, resource: &str, from: i128, to: i128) -> PodLevelChange {
    PodLevelChange {
        list,
        resource: resource.to_owned(),
        from,
        to,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(cpu: &str, memory: &str, native: bool) -> Counted {
        let map = |cpu: &str, memory: &str| -> Requests {
            [("cpu", cpu), ("memory", memory)]
                .into_iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(n, q)| (n.to_owned(), milli(q).unwrap()))
                .collect()
        };
        Counted::from_maps(Some(map(cpu, memory)), None, native)
    }

    fn own(cpu: &str, memory: &str) -> Placed<'static> {
        Placed {
            counted: counted(cpu, memory, false),
            init: false,
            injected: None,
        }
    }

    fn sidecar(mode: PodResourcesMode, cpu: &str, memory: &str) -> Placed<'static> {
        Placed {
            counted: counted(cpu, memory, false),
            init: false,
            injected: Some(("logger:v1", mode, "log-shipper")),
        }
    }

    fn level(requests: &[(&'static str, &'static str)]) -> PodLevel<'static> {
        PodLevel {
            requests: requests
                .iter()
                .map(|(n, q)| (*n, *q, milli(q).unwrap()))
                .collect(),
            limits: Vec::new(),
        }
    }

    #[test]
    fn an_added_sidecar_grows_the_pod_requests_by_its_own() {
        let pod = level(&[("cpu", "500m"), ("memory", "256Mi")]);
        let changes = fit(
            &pod,
            &[
                own("450m", "200Mi"),
                sidecar(PodResourcesMode::Add, "100m", "64Mi"),
            ],
        )
        .unwrap();
        let shown: Vec<(PodList, &str, String)> = changes
            .iter()
            .map(|c| (c.list, c.resource.as_str(), c.quantity()))
            .collect();
        assert_eq!(
            shown,
            [
                (PodList::Requests, "cpu", "600m".to_owned()),
                (PodList::Requests, "memory", "320Mi".to_owned())
            ]
        );
    }

    #[test]
    fn a_refusing_sidecar_that_does_not_fit_names_both_figures() {
        let pod = level(&[("cpu", "500m"), ("memory", "256Mi")]);
        let misfit = fit(
            &pod,
            &[
                own("450m", "200Mi"),
                sidecar(PodResourcesMode::Refuse, "100m", "64Mi"),
            ],
        )
        .unwrap_err();
        assert_eq!(
            misfit.to_string(),
            "spec.resources.requests.cpu is 500m, and the containers would request 550m with the \
             sidecar; raise spec.resources.requests.cpu to 550m or more, or remove \
             spec.resources.requests.cpu"
        );
        // With room to spare it fits and nothing changes.
        let roomy = level(&[("cpu", "1"), ("memory", "1Gi")]);
        let fits = fit(
            &roomy,
            &[
                own("450m", "200Mi"),
                sidecar(PodResourcesMode::Refuse, "100m", "64Mi"),
            ],
        );
        assert_eq!(fits, Ok(Vec::new()));
    }

    #[test]
    fn a_pod_that_did_not_fit_before_is_left_to_the_api_server() {
        let pod = level(&[("cpu", "100m")]);
        let fits = fit(
            &pod,
            &[
                own("450m", ""),
                sidecar(PodResourcesMode::Refuse, "100m", ""),
            ],
        );
        assert_eq!(fits, Ok(Vec::new()));
    }

    #[test]
    fn a_native_sidecar_after_a_larger_init_container_costs_the_pod_nothing() {
        let pod = level(&[("cpu", "1")]);
        let init = Placed {
            counted: counted("1", "", false),
            init: true,
            injected: None,
        };
        let native_last = Placed {
            counted: counted("100m", "", true),
            init: true,
            injected: Some(("proxy:v1", PodResourcesMode::Add, "proxy")),
        };
        // Before: max(init 1, app 200m) = 1; after: max(1, 200m + 100m) = 1.
        assert_eq!(
            fit(&pod, &[init, native_last, own("200m", "")]),
            Ok(Vec::new())
        );
        // Placed before the init container, the sidecar runs beside it: 1 + 100m.
        let native_first = Placed {
            counted: counted("100m", "", true),
            init: true,
            injected: Some(("proxy:v1", PodResourcesMode::Add, "proxy")),
        };
        let init = Placed {
            counted: counted("1", "", false),
            init: true,
            injected: None,
        };
        let changes = fit(&pod, &[native_first, init, own("200m", "")]).unwrap();
        assert_eq!(changes[0].quantity(), "1100m");
    }

    #[test]
    fn limits_grow_by_the_sidecar_limit_or_its_request() {
        let pod = PodLevel {
            requests: Vec::new(),
            limits: vec![
                ("cpu", "1", 1000),
                ("memory", "512Mi", milli("512Mi").unwrap()),
            ],
        };
        let mut with_limit = sidecar(PodResourcesMode::Add, "100m", "64Mi");
        with_limit
            .counted
            .limits
            .insert("cpu".into(), milli("200m").unwrap());
        let changes = fit(&pod, &[own("450m", "200Mi"), with_limit]).unwrap();
        let shown: Vec<String> = changes.iter().map(PodLevelChange::quantity).collect();
        assert_eq!(shown, ["1200m", "576Mi"]);
        // Refused: a container limit above the pod's.
        let mut over = sidecar(PodResourcesMode::Refuse, "100m", "64Mi");
        over.counted.limits.insert("cpu".into(), 2000);
        let misfit = fit(&pod, &[own("450m", "200Mi"), over]).unwrap_err();
        assert_eq!(misfit.container.as_deref(), Some("log-shipper"));
        assert_eq!((misfit.pod.as_str(), misfit.needed.as_str()), ("1", "2"));
    }
}
