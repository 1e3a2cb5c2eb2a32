//! The patch builder: the pod as the requested sidecars leave it, kept as deltas against the
//! received pod, turned into one explicit operation per change (one function per kind).

use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, VolumeMount};
use serde_json::Value;

use super::json_patch::{JsonPatch, PatchValue};
use super::pod::{ContainerView, PodSpecView, PodView};
use super::{DEFAULT_SERVICE_ACCOUNT, LEGACY_DEFAULT_TOKEN_PREFIX};
use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::{LoadedSidecar, RevisionStamp};

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
pub(super) struct PatchBuilder<'v, 's> {
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
    pub(super) fn new(pod: &'v PodView<'v>, spec: &'v PodSpecView<'v>) -> Self {
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
    pub(super) fn build(
        mut self,
        sidecars: &[&'s LoadedSidecar],
        keys: &AnnotationKeys,
    ) -> JsonPatch<'s> {
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
