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

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, VolumeMount};
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::{LoadedSidecar, SidecarSet};
use crate::name::{NameError, SidecarName};
use crate::revision::Revision;

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
    pub metadata: PodMetadataView<'a>,
    #[serde(default, borrow)]
    pub spec: Option<PodSpecView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PodMetadataView<'a> {
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
pub enum Decision {
    /// Allow unchanged.
    Skip(SkipReason),
    /// Allow with this patch.
    Inject(Injection),
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
pub struct Injection {
    pub patch: Patch,
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
pub fn decide(
    pod: &PodView<'_>,
    namespace: &str,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> Decision {
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
    let mut found: Vec<&LoadedSidecar> = Vec::with_capacity(requested.len());
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

/// A container the pod already has: what injection adds to it, and which of its mounts go.
struct ExistingContainer<'v> {
    list: &'static str,
    index: usize,
    view: &'v ContainerView<'v>,
    removed_mounts: Vec<usize>,
    added_env: Vec<EnvVar>,
    added_mounts: Vec<VolumeMount>,
}

impl ExistingContainer<'_> {
    fn has_env(&self, name: &str) -> bool {
        self.view.env.iter().flatten().any(|e| e.name == name)
            || self.added_env.iter().any(|e| e.name == name)
    }

    fn has_mount(&self, mount: &VolumeMount) -> bool {
        let kept = self
            .view
            .volume_mounts
            .iter()
            .flatten()
            .enumerate()
            .filter(|(index, _)| !self.removed_mounts.contains(index))
            .any(|(_, m)| m.name == mount.name || m.mount_path == mount.mount_path);
        kept || self
            .added_mounts
            .iter()
            .any(|m| m.name == mount.name || m.mount_path == mount.mount_path)
    }
}

fn container_has_env(container: &Container, name: &str) -> bool {
    container.env.iter().flatten().any(|e| e.name == name)
}

fn container_has_mount(container: &Container, mount: &VolumeMount) -> bool {
    container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.name == mount.name || m.mount_path == mount.mount_path)
}

/// The pod as the requested sidecars leave it, kept as deltas against the received pod so that
/// every change becomes one explicit operation.
struct PatchBuilder<'v> {
    pod: &'v PodView<'v>,
    spec: &'v PodSpecView<'v>,
    existing: Vec<ExistingContainer<'v>>,
    prepended: Vec<Container>,
    appended: Vec<Container>,
    appended_init: Vec<Container>,
    removed_volumes: Vec<usize>,
    added_volumes: Vec<k8s_openapi::api::core::v1::Volume>,
    added_host_aliases: Vec<HostAlias>,
    host_network: bool,
    host_pid: bool,
    service_account: Option<String>,
}

impl<'v> PatchBuilder<'v> {
    fn new(pod: &'v PodView<'v>, spec: &'v PodSpecView<'v>) -> Self {
        let existing = [
            ("containers", &spec.containers),
            ("initContainers", &spec.init_containers),
        ]
        .into_iter()
        .flat_map(|(list, containers)| {
            containers
                .iter()
                .flatten()
                .enumerate()
                .map(move |(index, view)| ExistingContainer {
                    list,
                    index,
                    view,
                    removed_mounts: Vec::new(),
                    added_env: Vec::new(),
                    added_mounts: Vec::new(),
                })
        })
        .collect();
        Self {
            pod,
            spec,
            existing,
            prepended: Vec::new(),
            appended: Vec::new(),
            appended_init: Vec::new(),
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
            .as_deref()
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
            || self.added_volumes.iter().any(|v| v.name == name)
    }

    fn has_host_alias(&self, alias: &HostAlias) -> bool {
        self.spec.host_aliases.iter().flatten().any(|a| a == alias)
            || self.added_host_aliases.contains(alias)
    }

    fn apply(&mut self, sidecar: &LoadedSidecar) {
        let config = &sidecar.config;
        self.prepended
            .extend(config.prepend_containers.iter().cloned());
        self.appended_init
            .extend(config.init_containers.iter().cloned());
        self.appended.extend(config.containers.iter().cloned());

        if let Some(account) = config.service_account_name.as_deref()
            && matches!(
                self.current_service_account(),
                None | Some(DEFAULT_SERVICE_ACCOUNT)
            )
            && account != DEFAULT_SERVICE_ACCOUNT
        {
            self.service_account = Some(account.to_owned());
            self.remove_legacy_default_token();
        }

        for env in &config.env {
            for container in &mut self.existing {
                if !container.has_env(&env.name) {
                    container.added_env.push(env.clone());
                }
            }
            for container in self.injected_containers_mut() {
                if !container_has_env(container, &env.name) {
                    container.env.get_or_insert_with(Vec::new).push(env.clone());
                }
            }
        }
        for mount in &config.volume_mounts {
            for container in &mut self.existing {
                if !container.has_mount(mount) {
                    container.added_mounts.push(mount.clone());
                }
            }
            for container in self.injected_containers_mut() {
                if !container_has_mount(container, mount) {
                    container
                        .volume_mounts
                        .get_or_insert_with(Vec::new)
                        .push(mount.clone());
                }
            }
        }
        for volume in &config.volumes {
            if !self.has_volume(&volume.name) {
                self.added_volumes.push(volume.clone());
            }
        }
        for alias in &config.host_aliases {
            if !self.has_host_alias(alias) {
                self.added_host_aliases.push(alias.clone());
            }
        }
        self.host_network |= config.host_network;
        self.host_pid |= config.host_pid;
    }

    fn injected_containers_mut(&mut self) -> impl Iterator<Item = &mut Container> {
        self.prepended
            .iter_mut()
            .chain(self.appended_init.iter_mut())
            .chain(self.appended.iter_mut())
    }

    /// The token of `default` would give the pod's new account the wrong identity; the
    /// ServiceAccount admission plugin mounts the right one when it runs again after us.
    /// Projected `kube-api-access-*` volumes follow the account by themselves and stay.
    fn remove_legacy_default_token(&mut self) {
        let legacy: Vec<(usize, &str)> = self
            .spec
            .volumes
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, v)| v.secret.is_some() && v.name.starts_with(LEGACY_DEFAULT_TOKEN_PREFIX))
            .map(|(index, v)| (index, v.name.as_ref()))
            .collect();
        for (index, name) in legacy {
            if !self.removed_volumes.contains(&index) {
                self.removed_volumes.push(index);
            }
            for container in &mut self.existing {
                for (mount_index, mount) in
                    container.view.volume_mounts.iter().flatten().enumerate()
                {
                    if mount.name == name && !container.removed_mounts.contains(&mount_index) {
                        container.removed_mounts.push(mount_index);
                    }
                }
            }
        }
    }

    fn build(mut self, sidecars: &[&LoadedSidecar], keys: &AnnotationKeys) -> Patch {
        for sidecar in sidecars {
            self.apply(sidecar);
        }
        let mut ops = Vec::new();
        let spec = self.spec;

        // Removals first, highest index first, so the indices of what follows stay valid.
        for container in &mut self.existing {
            container.removed_mounts.sort_unstable_by(|a, b| b.cmp(a));
            for mount_index in &container.removed_mounts {
                ops.push(remove(&[
                    "spec",
                    container.list,
                    &container.index.to_string(),
                    "volumeMounts",
                    &mount_index.to_string(),
                ]));
            }
        }
        self.removed_volumes.sort_unstable_by(|a, b| b.cmp(a));
        for index in &self.removed_volumes {
            ops.push(remove(&["spec", "volumes", &index.to_string()]));
        }

        // Additions to the pod's own containers, at their original indices (nothing has been
        // inserted before them yet).
        for container in &self.existing {
            let index = container.index.to_string();
            let base = ["spec", container.list, index.as_str()];
            append_all(
                &mut ops,
                &base,
                "env",
                container.view.env.is_some(),
                &container.added_env,
            );
            append_all(
                &mut ops,
                &base,
                "volumeMounts",
                container.view.volume_mounts.is_some(),
                &container.added_mounts,
            );
        }
        append_all(
            &mut ops,
            &["spec"],
            "initContainers",
            spec.init_containers.is_some(),
            &self.appended_init,
        );
        append_all(
            &mut ops,
            &["spec"],
            "containers",
            spec.containers.is_some(),
            &self.appended,
        );
        if !self.prepended.is_empty() {
            if spec.containers.is_some() || !self.appended.is_empty() {
                for (position, container) in self.prepended.iter().enumerate() {
                    ops.push(add(
                        &["spec", "containers", &position.to_string()],
                        to_json(container),
                    ));
                }
            } else {
                ops.push(add(&["spec", "containers"], to_json(&self.prepended)));
            }
        }
        append_all(
            &mut ops,
            &["spec"],
            "volumes",
            spec.volumes.is_some(),
            &self.added_volumes,
        );
        append_all(
            &mut ops,
            &["spec"],
            "hostAliases",
            spec.host_aliases.is_some(),
            &self.added_host_aliases,
        );
        if self.host_network && spec.host_network != Some(true) {
            ops.push(set(
                &["spec", "hostNetwork"],
                spec.host_network.is_some(),
                Value::Bool(true),
            ));
        }
        if self.host_pid && spec.host_pid != Some(true) {
            ops.push(set(
                &["spec", "hostPID"],
                spec.host_pid.is_some(),
                Value::Bool(true),
            ));
        }
        if let Some(account) = &self.service_account {
            ops.push(set(
                &["spec", "serviceAccountName"],
                spec.service_account_name.is_some(),
                Value::from(account.as_str()),
            ));
            if spec.service_account.is_some() {
                ops.push(set(
                    &["spec", "serviceAccount"],
                    true,
                    Value::from(account.as_str()),
                ));
            }
        }

        let revision = sidecars
            .iter()
            .map(|s| format!("{}={}", s.config.name, s.revision))
            .collect::<Vec<_>>()
            .join(",");
        match &self.pod.metadata.annotations {
            Some(annotations) => {
                for (key, value) in [
                    (&keys.status, STATUS_INJECTED),
                    (&keys.revision, revision.as_str()),
                ] {
                    ops.push(set(
                        &["metadata", "annotations", key],
                        annotations.contains_key(key.as_str()),
                        Value::from(value),
                    ));
                }
            }
            None => {
                let mut map = serde_json::Map::new();
                map.insert(keys.status.clone(), Value::from(STATUS_INJECTED));
                map.insert(keys.revision.clone(), Value::from(revision));
                ops.push(add(&["metadata", "annotations"], Value::Object(map)));
            }
        }
        Patch(ops)
    }
}

/// Appends items to a list that exists, or creates the list with them.
fn append_all<T: serde::Serialize>(
    ops: &mut Vec<PatchOperation>,
    base: &[&str],
    field: &str,
    exists: bool,
    items: &[T],
) {
    if items.is_empty() {
        return;
    }
    let mut path: Vec<&str> = base.to_vec();
    path.push(field);
    if exists {
        path.push("-");
        for item in items {
            ops.push(add(&path, to_json(item)));
        }
    } else {
        ops.push(add(&path, to_json(&items)));
    }
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn add(tokens: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: pointer(tokens),
        value,
    })
}

fn remove(tokens: &[&str]) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation {
        path: pointer(tokens),
    })
}

/// `replace` where the member exists (a reader of the patch sees an overwrite), else `add`.
fn set(tokens: &[&str], exists: bool, value: Value) -> PatchOperation {
    if exists {
        PatchOperation::Replace(ReplaceOperation {
            path: pointer(tokens),
            value,
        })
    } else {
        add(tokens, value)
    }
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).expect("Kubernetes types serialize to JSON")
}

#[cfg(test)]
mod tests;
