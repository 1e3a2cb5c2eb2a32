//! The injection decision and its RFC 6902 patch.
//!
//! The pod is read through [`PodView`], which deserializes only the fields injection looks at
//! (borrowing strings where it can) and skips the rest, managedFields included. The patch is
//! built from explicit operations against the pod as received; no document is ever diffed.
//!
//! Several requested sidecars are applied in request order, each to the pod as the previous ones
//! left it: a later sidecar's `env` reaches an earlier sidecar's containers, and the first
//! `serviceAccountName` wins.

pub mod json_patch;
pub mod manifest;
mod patch_builder;
mod pod;
pub mod pod_resources;
pub mod resources;
pub mod yaml;

use std::collections::BTreeSet;

use thiserror::Error;

use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::revision::Revision;
use crate::config::{LoadedSidecar, SidecarSet};
use crate::name::{NameError, SidecarName};
use json_patch::JsonPatch;
pub use patch_builder::NativeFor;
use patch_builder::{NotBuilt, PatchBuilder};
pub use pod::PodSpecView;
pub use pod::PodView;
pub use pod::borrowed_str;
pub use pod_resources::PodResourcesMisfit;

/// Namespaces whose pods are never injected unless the operator says otherwise.
pub const DEFAULT_IGNORED_NAMESPACES: &[&str] = &["kube-system", "kube-public"];

/// Legacy secret-based tokens of the `default` account are named `default-token-<suffix>`.
const LEGACY_DEFAULT_TOKEN_PREFIX: &str = "default-token-";
const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// What to do when a pod requests a sidecar no config defines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MissingSidecarPolicy {
    /// Deny the pod with a message naming the missing sidecar and the known ones.
    #[default]
    Deny,
    /// Inject what exists and let the pod through (Tumblr's behaviour).
    Allow,
}

#[derive(Debug, Clone)]
pub struct InjectionSettings {
    pub keys: AnnotationKeys,
    pub ignored_namespaces: BTreeSet<String>,
    pub on_missing_sidecar: MissingSidecarPolicy,
}

impl InjectionSettings {
    /// What the engine's preflight judges a workload's template by: a sidecar no config
    /// defines leaves its pods orphaned, not refused.
    pub fn preflight(keys: &AnnotationKeys) -> Self {
        Self {
            keys: keys.clone(),
            on_missing_sidecar: MissingSidecarPolicy::Allow,
            ..Self::default()
        }
    }
}

impl Default for InjectionSettings {
    fn default() -> Self {
        Self {
            keys: AnnotationKeys::default(),
            ignored_namespaces: DEFAULT_IGNORED_NAMESPACES
                .iter()
                .map(|ns| (*ns).to_owned())
                .collect(),
            on_missing_sidecar: MissingSidecarPolicy::Deny,
        }
    }
}

/// The webhook's answer for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<'s> {
    /// Allow unchanged.
    Skip(SkipReason),
    /// Allow with this patch.
    Inject(Injection<'s>),
    /// Refuse the pod; the message is for the person who created it.
    Deny(Denial),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    NoRequest,
    AlreadyInjected,
    IgnoredNamespace(String),
    /// Every requested sidecar is missing and `--on-missing-sidecar=allow` let the pod through.
    NothingFound(Vec<SidecarName>),
    /// The request does not parse, and `--on-missing-sidecar=allow` let the pod through as
    /// Tumblr's injector does (no name in it can be found).
    InvalidRequest {
        annotation: String,
        error: NameError,
    },
    /// No request under our annotation (`ours`), but one under another prefix (`key`): most
    /// likely a Tumblr deployment whose `injector.tumblr.com` prefix was not carried over.
    OtherAnnotationNamespace {
        key: String,
        ours: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Injection<'s> {
    /// Borrows from the sidecar configs it injects.
    pub patch: JsonPatch<'s>,
    /// What was injected, in request order.
    pub injected: Vec<(&'s SidecarName, &'s Revision)>,
    /// Requested but unknown, let through by `--on-missing-sidecar=allow`.
    pub missing: Vec<SidecarName>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Denial {
    #[error("annotation {annotation}: {error}")]
    InvalidRequest {
        annotation: String,
        error: NameError,
    },
    #[error("sidecar {name:?} not found; known: {known}")]
    SidecarNotFound { name: String, known: String },
    #[error(
        "sidecar {sidecar:?} cannot be injected: its container {container:?} has the same name as {holder}; rename one of them"
    )]
    ContainerNameClash {
        sidecar: String,
        container: String,
        holder: String,
    },
    #[error(
        "sidecar {sidecars:?} does not fit the pod's resources (its config says podResources: refuse): {misfit}",
        sidecars = .0.sidecars,
        misfit = .0
    )]
    PodResourcesMisfit(Box<PodResourcesMisfit>),
    #[error("the object has no pod spec to inject into")]
    NoPodSpec,
    #[error(
        "the pod would have {count} containers and init containers with its sidecars; sidecar-injector injects pods of at most {MAX_POD_CONTAINERS}"
    )]
    TooManyContainers { count: usize },
    #[error(
        "the injection patch would exceed {MAX_PATCH_BYTES} bytes; a pod grown by that much cannot be stored (etcd's default request limit is 1.5 MiB)"
    )]
    PatchTooLarge,
}

/// The most containers (init containers included) a pod may have once injected. Work and
/// reply size grow with containers x sidecar additions; no real pod comes close.
pub const MAX_POD_CONTAINERS: usize = 256;

/// The largest JSON patch the webhook sends (before base64): a pod grown by more cannot be
/// stored by an apiserver on etcd's default 1.5 MiB request limit, so building it only costs
/// memory.
pub const MAX_PATCH_BYTES: usize = 1536 * 1024;

/// Decides what to do with one pod. `namespace` is the request's namespace: pods created by
/// controllers carry none in the object.
pub fn decide<'s>(
    pod: &PodView<'_>,
    namespace: &str,
    sidecars: &'s SidecarSet,
    settings: &InjectionSettings,
) -> Decision<'s> {
    let keys = &settings.keys;
    let Some(request) = pod.annotation(&keys.request) else {
        return Decision::Skip(other_request_key(pod, &keys.request).map_or(
            SkipReason::NoRequest,
            |key| SkipReason::OtherAnnotationNamespace {
                key,
                ours: keys.request.clone(),
            },
        ));
    };
    if pod.annotation(&keys.status) == Some(STATUS_INJECTED) {
        return Decision::Skip(SkipReason::AlreadyInjected);
    }
    if settings.ignored_namespaces.contains(namespace) {
        return Decision::Skip(SkipReason::IgnoredNamespace(namespace.to_owned()));
    }
    let requested = match SidecarName::parse_list(request) {
        Ok(names) if names.is_empty() => return Decision::Skip(SkipReason::NoRequest),
        Ok(names) => names,
        Err(error) if settings.on_missing_sidecar == MissingSidecarPolicy::Allow => {
            return Decision::Skip(SkipReason::InvalidRequest {
                annotation: keys.request.clone(),
                error,
            });
        }
        Err(error) => {
            return Decision::Deny(Denial::InvalidRequest {
                annotation: keys.request.clone(),
                error,
            });
        }
    };
    let mut found: Vec<&'s LoadedSidecar> = Vec::with_capacity(requested.len());
    let mut missing = Vec::new();
    for name in requested {
        match sidecars.get(&name) {
            Some(sidecar) => found.push(sidecar),
            None if settings.on_missing_sidecar == MissingSidecarPolicy::Deny => {
                return Decision::Deny(Denial::SidecarNotFound {
                    known: known_names(sidecars, &name),
                    name: crate::name::quoted(&name.to_string()),
                });
            }
            None => missing.push(name),
        }
    }
    if found.is_empty() {
        return Decision::Skip(SkipReason::NothingFound(missing));
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Decision::Deny(Denial::NoPodSpec);
    };
    if let Err(denial) = check_container_names(spec, &found) {
        return Decision::Deny(denial);
    }
    let count = [&spec.containers, &spec.init_containers]
        .into_iter()
        .flatten()
        .map(Vec::len)
        .sum::<usize>()
        + found
            .iter()
            .map(|s| s.config.injected_containers().count())
            .sum::<usize>();
    if count > MAX_POD_CONTAINERS {
        return Decision::Deny(Denial::TooManyContainers { count });
    }
    let patch = match PatchBuilder::new(pod, spec).build(&found, keys, sidecars.nodes()) {
        Ok(patch) => patch,
        Err(NotBuilt::TooLarge) => return Decision::Deny(Denial::PatchTooLarge),
        Err(NotBuilt::Misfit(m)) => return Decision::Deny(Denial::PodResourcesMisfit(m)),
    };
    Decision::Inject(Injection {
        patch,
        injected: found
            .iter()
            .map(|s| (&s.config.name, &s.revision))
            .collect(),
        missing,
    })
}

/// Versions of the same sidecar first (the likely typo), else everything known.
fn known_names(sidecars: &SidecarSet, wanted: &SidecarName) -> String {
    const SHOWN: usize = 20;
    let same: Vec<String> = sidecars
        .names()
        .filter(|n| n.name() == wanted.name())
        .map(ToString::to_string)
        .collect();
    let names: Vec<String> = if same.is_empty() {
        sidecars.names().map(ToString::to_string).collect()
    } else {
        same
    };
    match names.len() {
        0 => "(no sidecar configs are loaded)".to_owned(),
        n if n > SHOWN => format!("{} and {} more", names[..SHOWN].join(", "), n - SHOWN),
        _ => names.join(", "),
    }
}

/// A `PREFIX/request` annotation under another prefix than ours (at most 253 characters, as
/// Kubernetes allows a prefix, so an echoed key stays short).
fn other_request_key(pod: &PodView<'_>, ours: &str) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()?
        .keys()
        .find(|k| k.len() <= 253 + "/request".len() && k.ends_with("/request") && *k != ours)
        .map(|k| k.to_string())
}

fn check_container_names(spec: &PodSpecView<'_>, found: &[&LoadedSidecar]) -> Result<(), Denial> {
    // Linear scans: a pod has at most MAX_POD_CONTAINERS containers and a request a handful of
    // sidecars, and sets built per request cost more than the comparisons.
    let pod_has = |name: &str| {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter())
            .flatten()
            .any(|c| c.name == name)
    };
    for (position, sidecar) in found.iter().enumerate() {
        for container in sidecar.config.injected_containers() {
            let clash = |holder: String| Denial::ContainerNameClash {
                sidecar: sidecar.config.name.to_string(),
                container: container.name.clone(),
                holder,
            };
            if pod_has(&container.name) {
                return Err(clash("a container of the pod".to_owned()));
            }
            let earlier = found[..=position].iter().find(|other| {
                let mut containers = other.config.injected_containers();
                if std::ptr::eq(**other, *sidecar) {
                    // Within one sidecar, only the containers before this one.
                    containers
                        .take_while(|c| !std::ptr::eq(*c, container))
                        .any(|c| c.name == container.name)
                } else {
                    containers.any(|c| c.name == container.name)
                }
            });
            if let Some(other) = earlier {
                return Err(clash(format!(
                    "a container of sidecar {:?}, requested together",
                    other.config.name.to_string()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
