//! The injection decision and its RFC 6902 patch.
//!
//! The pod is read through [`PodView`], which deserializes only the fields injection looks at
//! (borrowing strings where it can) and skips the rest, managedFields included. The patch is
//! built from explicit operations against the pod as received; no document is ever diffed.
//!
//! Several requested sidecars are applied in request order, each to the pod as the previous ones
//! left it: a later sidecar's `env` reaches an earlier sidecar's containers, and the first
//! `serviceAccountName` wins.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, VolumeMount};
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::{LoadedSidecar, RevisionStamp, SidecarSet};
use crate::name::{NameError, SidecarName};
pub mod json_patch;
pub mod manifest;

use crate::config::revision::Revision;
use json_patch::{JsonPatch, PatchValue};

/// Namespaces whose pods are never injected unless the operator says otherwise.
pub const DEFAULT_IGNORED_NAMESPACES: &[&str] = &["kube-system", "kube-public"];

/// Legacy secret-based tokens of the `default` account are named `default-token-<suffix>`.
const LEGACY_DEFAULT_TOKEN_PREFIX: &str = "default-token-";
const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// What to do when a pod requests a sidecar no config defines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
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

/// The parts of a pod (or pod template) that injection reads.
#[derive(Debug, Default, Deserialize)]
pub struct PodView<'a> {
    #[serde(default, borrow)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub metadata: PodMetadataView<'a>,
    #[serde(default, borrow)]
    pub spec: Option<PodSpecView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetadataView<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub generate_name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub annotations: Option<BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView<'a> {
    #[serde(default, borrow)]
    pub containers: Option<Vec<ContainerView<'a>>>,
    #[serde(default, borrow)]
    pub init_containers: Option<Vec<ContainerView<'a>>>,
    #[serde(default, borrow)]
    pub volumes: Option<Vec<VolumeView<'a>>>,
    #[serde(default)]
    pub host_aliases: Option<Vec<HostAlias>>,
    #[serde(default)]
    pub host_network: Option<bool>,
    #[serde(default, rename = "hostPID")]
    pub host_pid: Option<bool>,
    #[serde(default, borrow)]
    pub service_account_name: Option<Cow<'a, str>>,
    /// Deprecated alias the apiserver still fills; kept in step with `serviceAccountName`.
    #[serde(default, borrow)]
    pub service_account: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub env: Option<Vec<NamedView<'a>>>,
    #[serde(default, borrow)]
    pub volume_mounts: Option<Vec<MountView<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct NamedView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub mount_path: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
pub struct VolumeView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default)]
    pub secret: Option<serde::de::IgnoredAny>,
}

impl PodView<'_> {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(key))
            .map(|value| value.as_ref())
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct Injection<'s> {
    /// Borrows from the sidecar configs it injects.
    pub patch: JsonPatch<'s>,
    /// What was injected, in request order.
    pub injected: Vec<(SidecarName, Revision)>,
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
    #[error("the object has no pod spec to inject into")]
    NoPodSpec,
}

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
        return Decision::Skip(SkipReason::NoRequest);
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
                    name: name.to_string(),
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
    let patch = PatchBuilder::new(pod, spec).build(&found, keys);
    Decision::Inject(Injection {
        patch,
        injected: found
            .iter()
            .map(|s| (s.config.name.clone(), s.revision.clone()))
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

fn check_container_names(spec: &PodSpecView<'_>, found: &[&LoadedSidecar]) -> Result<(), Denial> {
    let pod_names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter())
        .flatten()
        .map(|c| c.name.as_ref())
        .collect();
    let mut injected: BTreeMap<&str, &SidecarName> = BTreeMap::new();
    for sidecar in found {
        for container in sidecar.config.injected_containers() {
            let clash = |holder: String| Denial::ContainerNameClash {
                sidecar: sidecar.config.name.to_string(),
                container: container.name.clone(),
                holder,
            };
            if pod_names.contains(container.name.as_str()) {
                return Err(clash("a container of the pod".to_owned()));
            }
            if let Some(other) = injected.insert(&container.name, &sidecar.config.name) {
                return Err(clash(format!(
                    "a container of sidecar {:?}, requested together",
                    other.to_string()
                )));
            }
        }
    }
    Ok(())
}

/// Where a container of the final pod comes from.
enum Origin<'v, 's> {
    /// The pod's own, at `index` of `list` (`containers` or `initContainers`).
    Pod {
        list: &'static str,
        index: usize,
        view: &'v ContainerView<'v>,
        removed_mounts: Vec<usize>,
    },
    /// Injected by a sidecar; `rendered` is its JSON from the config.
    Sidecar {
        placement: Placement,
        container: &'s Container,
        rendered: &'s Value,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    Prepend,
    Init,
    Append,
}

/// A container of the final pod and what injection adds to it. Additions borrow the sidecar's
/// typed item (for the presence checks) and its pre-rendered JSON (for the patch).
struct TargetContainer<'v, 's> {
    origin: Origin<'v, 's>,
    added_env: Vec<(&'s EnvVar, &'s Value)>,
    added_mounts: Vec<(&'s VolumeMount, &'s Value)>,
}

impl<'s> TargetContainer<'_, 's> {
    fn has_env(&self, name: &str) -> bool {
        let own = match &self.origin {
            Origin::Pod { view, .. } => view.env.iter().flatten().any(|e| e.name == name),
            Origin::Sidecar { container, .. } => {
                container.env.iter().flatten().any(|e| e.name == name)
            }
        };
        own || self.added_env.iter().any(|(e, _)| e.name == name)
    }

    fn has_mount(&self, mount: &VolumeMount) -> bool {
        let clashes = |name: &str, path: &str| name == mount.name || path == mount.mount_path;
        let own = match &self.origin {
            Origin::Pod {
                view,
                removed_mounts,
                ..
            } => view
                .volume_mounts
                .iter()
                .flatten()
                .enumerate()
                .filter(|(index, _)| !removed_mounts.contains(index))
                .any(|(_, m)| clashes(&m.name, &m.mount_path)),
            Origin::Sidecar { container, .. } => container
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| clashes(&m.name, &m.mount_path)),
        };
        own || self
            .added_mounts
            .iter()
            .any(|(m, _)| clashes(&m.name, &m.mount_path))
    }

    /// The injected container's JSON with the additions appended to its own lists.
    fn render_injected(&self, rendered: &'s Value) -> PatchValue<'s> {
        if self.added_env.is_empty() && self.added_mounts.is_empty() {
            return PatchValue::Borrowed(rendered);
        }
        PatchValue::Extended {
            base: rendered,
            appended: vec![
                ("env", self.added_env.iter().map(|(_, v)| *v).collect()),
                (
                    "volumeMounts",
                    self.added_mounts.iter().map(|(_, v)| *v).collect(),
                ),
            ],
        }
    }
}

/// The pod as the requested sidecars leave it, kept as deltas against the received pod so that
/// every change becomes one explicit operation.
struct PatchBuilder<'v, 's> {
    pod: &'v PodView<'v>,
    spec: &'v PodSpecView<'v>,
    containers: Vec<TargetContainer<'v, 's>>,
    removed_volumes: Vec<usize>,
    added_volumes: Vec<(&'s str, &'s Value)>,
    added_host_aliases: Vec<(&'s HostAlias, &'s Value)>,
    host_network: bool,
    host_pid: bool,
    service_account: Option<&'s str>,
}

impl<'v, 's> PatchBuilder<'v, 's> {
    fn new(pod: &'v PodView<'v>, spec: &'v PodSpecView<'v>) -> Self {
        let containers = [
            ("containers", &spec.containers),
            ("initContainers", &spec.init_containers),
        ]
        .into_iter()
        .flat_map(|(list, containers)| {
            containers
                .iter()
                .flatten()
                .enumerate()
                .map(move |(index, view)| TargetContainer {
                    origin: Origin::Pod {
                        list,
                        index,
                        view,
                        removed_mounts: Vec::new(),
                    },
                    added_env: Vec::new(),
                    added_mounts: Vec::new(),
                })
        })
        .collect();
        Self {
            pod,
            spec,
            containers,
            removed_volumes: Vec::new(),
            added_volumes: Vec::new(),
            added_host_aliases: Vec::new(),
            host_network: false,
            host_pid: false,
            service_account: None,
        }
    }

    fn current_service_account(&self) -> Option<&str> {
        self.service_account
            .or(self.spec.service_account_name.as_deref())
            .or(self.spec.service_account.as_deref())
            .filter(|name| !name.is_empty())
    }

    fn has_volume(&self, name: &str) -> bool {
        self.spec
            .volumes
            .iter()
            .flatten()
            .enumerate()
            .any(|(index, v)| v.name == name && !self.removed_volumes.contains(&index))
            || self.added_volumes.iter().any(|(n, _)| *n == name)
    }

    fn has_host_alias(&self, alias: &HostAlias) -> bool {
        self.spec.host_aliases.iter().flatten().any(|a| a == alias)
            || self.added_host_aliases.iter().any(|(a, _)| *a == alias)
    }

    fn apply(&mut self, sidecar: &'s LoadedSidecar) {
        let config = &sidecar.config;
        let rendered = &sidecar.rendered;
        for (placement, typed, values) in [
            (
                Placement::Prepend,
                &config.prepend_containers,
                &rendered.prepend_containers,
            ),
            (
                Placement::Init,
                &config.init_containers,
                &rendered.init_containers,
            ),
            (Placement::Append, &config.containers, &rendered.containers),
        ] {
            for (container, rendered) in typed.iter().zip(values) {
                self.containers.push(TargetContainer {
                    origin: Origin::Sidecar {
                        placement,
                        container,
                        rendered,
                    },
                    added_env: Vec::new(),
                    added_mounts: Vec::new(),
                });
            }
        }

        if let Some(account) = config.service_account_name.as_deref()
            && matches!(
                self.current_service_account(),
                None | Some(DEFAULT_SERVICE_ACCOUNT)
            )
            && account != DEFAULT_SERVICE_ACCOUNT
        {
            self.service_account = Some(account);
            self.remove_legacy_default_token();
        }

        for addition in config.env.iter().zip(&rendered.env) {
            for container in &mut self.containers {
                if !container.has_env(&addition.0.name) {
                    container.added_env.push(addition);
                }
            }
        }
        for addition in config.volume_mounts.iter().zip(&rendered.volume_mounts) {
            for container in &mut self.containers {
                if !container.has_mount(addition.0) {
                    container.added_mounts.push(addition);
                }
            }
        }
        for (volume, value) in config.volumes.iter().zip(&rendered.volumes) {
            if !self.has_volume(&volume.name) {
                self.added_volumes.push((&volume.name, value));
            }
        }
        for addition in config.host_aliases.iter().zip(&rendered.host_aliases) {
            if !self.has_host_alias(addition.0) {
                self.added_host_aliases.push(addition);
            }
        }
        self.host_network |= config.host_network;
        self.host_pid |= config.host_pid;
    }

    /// The token of `default` would give the pod's new account the wrong identity; the
    /// ServiceAccount admission plugin mounts the right one when it runs again after us.
    /// Projected `kube-api-access-*` volumes follow the account by themselves and stay.
    fn remove_legacy_default_token(&mut self) {
        let legacy = self
            .spec
            .volumes
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, v)| v.secret.is_some() && v.name.starts_with(LEGACY_DEFAULT_TOKEN_PREFIX));
        for (index, volume) in legacy {
            if !self.removed_volumes.contains(&index) {
                self.removed_volumes.push(index);
            }
            for container in &mut self.containers {
                let Origin::Pod {
                    view,
                    removed_mounts,
                    ..
                } = &mut container.origin
                else {
                    continue;
                };
                for (mount_index, mount) in view.volume_mounts.iter().flatten().enumerate() {
                    if mount.name == volume.name && !removed_mounts.contains(&mount_index) {
                        removed_mounts.push(mount_index);
                    }
                }
            }
        }
    }

    /// The JSON patch for `sidecars`, one explicit operation per change: removals first
    /// (highest index first, so the indices of what follows stay valid), then additions to the
    /// pod's own containers at their original indices, then the injected containers, the pod's
    /// fields, and our annotations.
    fn build(mut self, sidecars: &[&'s LoadedSidecar], keys: &AnnotationKeys) -> JsonPatch<'s> {
        for sidecar in sidecars {
            self.apply(sidecar);
        }
        let mut ops = JsonPatch::default();
        self.removal_ops(&mut ops);
        self.pod_container_ops(&mut ops);
        self.injected_container_ops(&mut ops);
        self.pod_field_ops(&mut ops);
        let stamp = RevisionStamp::from_items(sidecars.iter().map(|s| s.stamp.as_str()));
        self.annotation_ops(&mut ops, &stamp, keys);
        ops
    }

    fn removal_ops(&mut self, ops: &mut JsonPatch<'s>) {
        for container in &mut self.containers {
            if let Origin::Pod {
                list,
                index,
                removed_mounts,
                ..
            } = &mut container.origin
            {
                removed_mounts.sort_unstable_by(|a, b| b.cmp(a));
                for mount_index in removed_mounts.iter() {
                    ops.remove(&[
                        "spec",
                        list,
                        &index.to_string(),
                        "volumeMounts",
                        &mount_index.to_string(),
                    ]);
                }
            }
        }
        self.removed_volumes.sort_unstable_by(|a, b| b.cmp(a));
        for index in &self.removed_volumes {
            ops.remove(&["spec", "volumes", &index.to_string()]);
        }
    }

    /// Env and mounts added to the pod's own containers, at their original indices (nothing
    /// has been inserted before them yet).
    fn pod_container_ops(&self, ops: &mut JsonPatch<'s>) {
        for container in &self.containers {
            let Origin::Pod {
                list, index, view, ..
            } = &container.origin
            else {
                continue;
            };
            let index = index.to_string();
            let base = ["spec", list, index.as_str()];
            let env = container
                .added_env
                .iter()
                .map(|(_, v)| PatchValue::Borrowed(v))
                .collect();
            ops.append_all(&[&base[..], &["env"]].concat(), view.env.is_some(), env);
            let mounts = container
                .added_mounts
                .iter()
                .map(|(_, v)| PatchValue::Borrowed(v))
                .collect();
            ops.append_all(
                &[&base[..], &["volumeMounts"]].concat(),
                view.volume_mounts.is_some(),
                mounts,
            );
        }
    }

    fn injected(&self, wanted: Placement) -> Vec<PatchValue<'s>> {
        self.containers
            .iter()
            .filter_map(|c| match c.origin {
                Origin::Sidecar {
                    placement,
                    rendered,
                    ..
                } if placement == wanted => Some(c.render_injected(rendered)),
                _ => None,
            })
            .collect()
    }

    fn injected_container_ops(&self, ops: &mut JsonPatch<'s>) {
        let spec = self.spec;
        let prepended = self.injected(Placement::Prepend);
        let appended = self.injected(Placement::Append);
        ops.append_all(
            &["spec", "initContainers"],
            spec.init_containers.is_some(),
            self.injected(Placement::Init),
        );
        let appended_any = !appended.is_empty();
        ops.append_all(&["spec", "containers"], spec.containers.is_some(), appended);
        if prepended.is_empty() {
            return;
        }
        if spec.containers.is_some() || appended_any {
            for (position, container) in prepended.into_iter().enumerate() {
                ops.add(&["spec", "containers", &position.to_string()], container);
            }
        } else {
            ops.append_all(&["spec", "containers"], false, prepended);
        }
    }

    /// Volumes, host aliases, hostNetwork/hostPID and the service account.
    fn pod_field_ops(&self, ops: &mut JsonPatch<'s>) {
        let spec = self.spec;
        let volumes = self
            .added_volumes
            .iter()
            .map(|(_, v)| PatchValue::Borrowed(v))
            .collect();
        ops.append_all(&["spec", "volumes"], spec.volumes.is_some(), volumes);
        let aliases = self
            .added_host_aliases
            .iter()
            .map(|(_, v)| PatchValue::Borrowed(v))
            .collect();
        ops.append_all(
            &["spec", "hostAliases"],
            spec.host_aliases.is_some(),
            aliases,
        );
        let enable = PatchValue::Owned(Value::Bool(true));
        if self.host_network && spec.host_network != Some(true) {
            ops.set(
                &["spec", "hostNetwork"],
                spec.host_network.is_some(),
                enable.clone(),
            );
        }
        if self.host_pid && spec.host_pid != Some(true) {
            ops.set(&["spec", "hostPID"], spec.host_pid.is_some(), enable);
        }
        if let Some(account) = self.service_account {
            ops.set(
                &["spec", "serviceAccountName"],
                spec.service_account_name.is_some(),
                PatchValue::Owned(Value::from(account)),
            );
            if spec.service_account.is_some() {
                ops.set(
                    &["spec", "serviceAccount"],
                    true,
                    PatchValue::Owned(Value::from(account)),
                );
            }
        }
    }

    fn annotation_ops(
        &self,
        ops: &mut JsonPatch<'s>,
        stamp: &RevisionStamp,
        keys: &AnnotationKeys,
    ) {
        match &self.pod.metadata.annotations {
            Some(annotations) => {
                for (key, value) in [
                    (&keys.status, STATUS_INJECTED),
                    (&keys.revision, stamp.as_str()),
                ] {
                    ops.set(
                        &["metadata", "annotations", key],
                        annotations.contains_key(key.as_str()),
                        PatchValue::Owned(Value::from(value)),
                    );
                }
            }
            None => {
                let mut map = serde_json::Map::new();
                map.insert(keys.status.clone(), Value::from(STATUS_INJECTED));
                map.insert(keys.revision.clone(), Value::from(stamp.as_str()));
                ops.add(
                    &["metadata", "annotations"],
                    PatchValue::Owned(Value::Object(map)),
                );
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
