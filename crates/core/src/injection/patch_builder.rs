//! The patch builder: the pod as the requested sidecars leave it, kept as deltas against the
//! received pod, turned into one explicit operation per change (one function per kind).

use crate::nodes::NodeKubelets;

use foldhash::{HashSet, HashSetExt};
use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, VolumeMount};
use serde_json::Value;

use super::json_patch::{JsonPatch, PatchValue};
use super::pod::{ContainerView, PodSpecView, PodView};
use super::pod_resources::{Placed, PodLevel, PodResourcesMisfit, fit, parsed_map};
use super::resources::Counted;
use super::{DEFAULT_SERVICE_ACCOUNT, LEGACY_DEFAULT_TOKEN_PREFIX, MAX_PATCH_BYTES};
use presence::{EnvNames, Presence};

/// Roughly what one operation adds to the patch besides its value
/// (`{"op":"add","path":"/spec/containers/12/env/-","value":}`). Only the order matters: the
/// exact bound is applied when the patch is serialized.
const OP_BYTES: usize = 48;

/// The items of a pod list except those at `removed` (the legacy token's volume and mounts).
fn kept<'a, T>(items: &'a Option<Vec<T>>, removed: &[usize]) -> impl Iterator<Item = &'a T> {
    let removed: HashSet<usize> = removed.iter().copied().collect();
    items
        .iter()
        .flatten()
        .enumerate()
        .filter(move |(index, _)| !removed.contains(index))
        .map(|(_, item)| item)
}

/// The rendered JSON of added items, written as it is.
fn raw_items<'s, T>(added: &[(T, &'s RenderedJson)]) -> Vec<PatchValue<'s>> {
    added
        .iter()
        .map(|(_, v)| PatchValue::Raw(&v.text))
        .collect()
}

/// Why no patch was built.
#[derive(Debug)]
pub(super) enum NotBuilt {
    /// The per-container additions passed [`MAX_PATCH_BYTES`]; building stopped there.
    TooLarge,
    /// The pod sets pod-level resources that a sidecar in `refuse` mode does not fit.
    Misfit(Box<PodResourcesMisfit>),
}
use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::{LoadedSidecar, NativePlacement, RenderedJson, RevisionStamp};

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
        rendered: &'s RenderedJson,
        sidecar: &'s LoadedSidecar,
        /// A native sidecar: it runs beside the init containers after it.
        native: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Before the pod's containers (`prependContainers` of a classic config).
    Prepend,
    /// After the pod's init containers.
    Init,
    /// Before the pod's init containers (a native config placed first: its own init
    /// containers, then its sidecars).
    InitFront,
    /// After the pod's containers.
    Append,
}

/// A container of the final pod and what injection adds to it. Additions borrow the sidecar's
/// typed item (for the presence checks) and its pre-rendered JSON (for the patch).
struct TargetContainer<'v, 's> {
    origin: Origin<'v, 's>,
    added_env: Vec<(&'s EnvVar, &'s RenderedJson)>,
    added_mounts: Vec<(&'s VolumeMount, &'s RenderedJson)>,
    /// What the container holds, built on first use: a pod may carry many thousands of
    /// containers or env entries, and scanning lists for each addition made injection
    /// quadratic.
    presence: Option<Presence<'v>>,
}

impl<'v, 's: 'v> TargetContainer<'v, 's> {
    fn new(origin: Origin<'v, 's>) -> Self {
        Self {
            origin,
            added_env: Vec::new(),
            added_mounts: Vec::new(),
            presence: None,
        }
    }

    fn presence(&mut self) -> &mut Presence<'v> {
        let origin = &self.origin;
        let (added_env, added_mounts) = (&self.added_env, &self.added_mounts);
        self.presence.get_or_insert_with(|| {
            let mut presence = match origin {
                Origin::Pod {
                    view,
                    removed_mounts,
                    ..
                } => {
                    let mut presence = Presence::new(
                        EnvNames::of_pod(view.env.as_ref()),
                        view.volume_mounts.as_ref().map_or(0, Vec::len) + added_mounts.len(),
                    );
                    for mount in kept(&view.volume_mounts, removed_mounts) {
                        presence.insert_mount(&mount.name, &mount.mount_path);
                    }
                    presence
                }
                Origin::Sidecar { container, .. } => {
                    let mut presence = Presence::new(
                        EnvNames::of_names(container.env.iter().flatten().map(|e| &*e.name)),
                        container.volume_mounts.as_ref().map_or(0, Vec::len) + added_mounts.len(),
                    );
                    for mount in container.volume_mounts.iter().flatten() {
                        presence.insert_mount(&mount.name, &mount.mount_path);
                    }
                    presence
                }
            };
            for (env, _) in added_env {
                presence.env.insert(&env.name);
            }
            for (mount, _) in added_mounts {
                presence.insert_mount(&mount.name, &mount.mount_path);
            }
            presence
        })
    }

    /// Adds the env entry unless the container has one of that name; true when added.
    fn add_env(&mut self, addition: (&'s EnvVar, &'s RenderedJson)) -> bool {
        let added = self.presence().env.insert(addition.0.name.as_str());
        if added {
            self.added_env.push(addition);
        }
        added
    }

    /// Adds the mount unless the container has one of that name or at that path; true when
    /// added.
    fn add_mount(&mut self, addition: (&'s VolumeMount, &'s RenderedJson)) -> bool {
        let mount = addition.0;
        let presence = self.presence();
        if presence.mount_names.contains(mount.name.as_str())
            || presence.mount_paths.contains(mount.mount_path.as_str())
        {
            return false;
        }
        presence.insert_mount(&mount.name, &mount.mount_path);
        self.added_mounts.push(addition);
        true
    }

    /// The injected container's JSON with the additions appended to its own lists.
    fn render_injected(&self, rendered: &'s RenderedJson) -> PatchValue<'s> {
        if self.added_env.is_empty() && self.added_mounts.is_empty() {
            return PatchValue::Raw(&rendered.text);
        }
        PatchValue::Extended {
            base: rendered,
            appended: vec![
                (
                    "env",
                    self.added_env.iter().map(|(_, v)| &*v.text).collect(),
                ),
                (
                    "volumeMounts",
                    self.added_mounts.iter().map(|(_, v)| &*v.text).collect(),
                ),
            ],
        }
    }
}

/// A sidecar's container lists with where each goes: a classic config's prepended, init and
/// appended containers; a native config's own init containers, which run to completion
/// first (network setup), then its sidecars, all in initContainers.
fn injected_lists<'s>(
    sidecar: &'s LoadedSidecar,
    pod: &NativeFor,
) -> [(Placement, &'s [Container], &'s [RenderedJson]); 3] {
    let (config, rendered) = (&sidecar.config, &sidecar.rendered);
    if pod.native(config) {
        let place = match config.native_placement() {
            NativePlacement::First => Placement::InitFront,
            NativePlacement::Last => Placement::Init,
        };
        return [
            (place, &config.init_containers, &rendered.init_containers),
            (
                place,
                &config.prepend_containers,
                &rendered.native_prepend_containers,
            ),
            (place, &config.containers, &rendered.native_containers),
        ];
    }
    [
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
    ]
}

/// The pod as the requested sidecars leave it, kept as deltas against the received pod so that
/// every change becomes one explicit operation.
pub(super) struct PatchBuilder<'v, 's> {
    pod: &'v PodView<'v>,
    spec: &'v PodSpecView<'v>,
    containers: Vec<TargetContainer<'v, 's>>,
    removed_volumes: Vec<usize>,
    added_volumes: Vec<(&'s str, &'s RenderedJson)>,
    /// The volume names the pod holds, built on first use (see [`TargetContainer::presence`]).
    volume_names: Option<HashSet<&'v str>>,
    legacy_token_removed: bool,
    /// Bytes of patch the per-container additions and removals come to so far: they multiply
    /// (env x containers), so building stops once they pass [`MAX_PATCH_BYTES`].
    patch_bytes: usize,
    added_host_aliases: Vec<(&'s HostAlias, &'s RenderedJson)>,
    host_network: bool,
    host_pid: bool,
    service_account: Option<&'s str>,
    /// What decides, for this pod, the form of a config that injects native sidecars.
    native: NativeFor,
    /// The sidecars injected natively so far (`name:version`).
    injected_native: Vec<&'s str>,
}

/// What of a pod decides whether a config's sidecars go in natively.
#[derive(Clone, Debug)]
pub struct NativeFor {
    /// Its controller is a Job (`nativeSidecars: jobs`).
    pub job_pod: bool,
    /// `NS/native-sidecars: "false"` keeps its sidecars classic.
    pub kept_classic: bool,
    /// Whether the nodes it may run on start native sidecars (`nativeSidecars: auto`).
    pub nodes: crate::nodes::NativeSupport,
}

impl Default for NativeFor {
    fn default() -> Self {
        Self {
            job_pod: false,
            kept_classic: false,
            nodes: crate::nodes::NativeSupport::Unknown,
        }
    }
}

impl NativeFor {
    /// Whether this pod gets `config`'s sidecars as native sidecars.
    pub fn native(&self, config: &crate::config::SidecarConfig) -> bool {
        !self.kept_classic && config.native_for(self.job_pod, &self.nodes)
    }

    /// The sidecars of `injection` that, injected into this pod of a Job, would keep the
    /// Job from completing: they inject containers, and not natively here.
    pub fn keeping_the_job_running(
        &self,
        injection: &super::Injection<'_>,
        sidecars: &crate::config::SidecarSet,
    ) -> Vec<String> {
        injection
            .injected
            .iter()
            .filter_map(|(name, _)| sidecars.get(name))
            .filter(|s| {
                let config = &s.config;
                !self.native(config) && config.runs_sidecars()
            })
            .map(|s| s.config.name.to_string())
            .collect()
    }

    pub fn of(pod: &PodView<'_>, keys: &AnnotationKeys, nodes: &NodeKubelets) -> Self {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        Self {
            nodes: nodes.native_support(node),
            job_pod: pod.metadata.of_a_job(),
            kept_classic: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys.native_sidecars.as_str()))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("false")),
        }
    }
}

impl<'v, 's: 'v> PatchBuilder<'v, 's> {
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
                .map(move |(index, view)| {
                    TargetContainer::new(Origin::Pod {
                        list,
                        index,
                        view,
                        removed_mounts: Vec::new(),
                    })
                })
        })
        .collect();
        Self {
            pod,
            spec,
            containers,
            removed_volumes: Vec::new(),
            added_volumes: Vec::new(),
            volume_names: None,
            legacy_token_removed: false,
            patch_bytes: 0,
            added_host_aliases: Vec::new(),
            host_network: false,
            host_pid: false,
            service_account: None,
            native: NativeFor::default(),
            injected_native: Vec::new(),
        }
    }

    fn current_service_account(&self) -> Option<&str> {
        self.service_account
            .or(self.spec.service_account_name.as_deref())
            .or(self.spec.service_account.as_deref())
            .filter(|name| !name.is_empty())
    }

    /// Adds the volume unless the pod has one of that name.
    fn add_volume(&mut self, name: &'s str, value: &'s RenderedJson) {
        let (spec, removed, added) = (self.spec, &self.removed_volumes, &self.added_volumes);
        let names = self.volume_names.get_or_insert_with(|| {
            kept(&spec.volumes, removed)
                .map(|v| v.name.as_ref())
                .chain(added.iter().map(|(n, _)| *n))
                .collect()
        });
        if names.insert(name) {
            self.added_volumes.push((name, value));
        }
    }

    fn has_host_alias(&self, alias: &HostAlias) -> bool {
        self.spec.host_aliases.iter().flatten().any(|a| a == alias)
            || self.added_host_aliases.iter().any(|(a, _)| *a == alias)
    }

    fn apply(&mut self, sidecar: &'s LoadedSidecar) {
        let config = &sidecar.config;
        let rendered = &sidecar.rendered;
        if self.native.native(config) && config.runs_sidecars() {
            self.injected_native.push(sidecar.name());
        }
        let native_config = self.native.native(config);
        for (list, (placement, typed, values)) in injected_lists(sidecar, &self.native)
            .into_iter()
            .enumerate()
        {
            // A native config's containers and prepended containers become native sidecars
            // (its own init containers are listed first).
            let all_native = native_config && list > 0;
            for (container, rendered) in typed.iter().zip(values) {
                self.containers.push(TargetContainer::new(Origin::Sidecar {
                    placement,
                    container,
                    rendered,
                    sidecar,
                    native: all_native || crate::config::is_native_sidecar(container),
                }));
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

        let env = config
            .env
            .iter()
            .zip(&rendered.env)
            .zip(&rendered.env_bytes);
        for (addition, bytes) in env {
            for container in &mut self.containers {
                if container.add_env(addition) {
                    self.patch_bytes += bytes + OP_BYTES;
                }
            }
            if self.patch_bytes > MAX_PATCH_BYTES {
                return;
            }
        }
        let mounts = config
            .volume_mounts
            .iter()
            .zip(&rendered.volume_mounts)
            .zip(&rendered.volume_mount_bytes);
        for (addition, bytes) in mounts {
            for container in &mut self.containers {
                if container.add_mount(addition) {
                    self.patch_bytes += bytes + OP_BYTES;
                }
            }
            if self.patch_bytes > MAX_PATCH_BYTES {
                return;
            }
        }
        for (volume, value) in config.volumes.iter().zip(&rendered.volumes) {
            self.add_volume(&volume.name, value);
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
        if std::mem::replace(&mut self.legacy_token_removed, true) {
            return;
        }
        let mut legacy: HashSet<&str> = HashSet::new();
        for (index, volume) in self.spec.volumes.iter().flatten().enumerate() {
            if volume.secret.is_some() && volume.name.starts_with(LEGACY_DEFAULT_TOKEN_PREFIX) {
                legacy.insert(&volume.name);
                self.removed_volumes.push(index);
                self.patch_bytes += OP_BYTES;
            }
        }
        if legacy.is_empty() {
            return;
        }
        // What was present has changed: presence is rebuilt on next use.
        self.volume_names = None;
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
                if legacy.contains(mount.name.as_ref()) {
                    removed_mounts.push(mount_index);
                    container.presence = None;
                    self.patch_bytes += OP_BYTES;
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
        nodes: &NodeKubelets,
    ) -> Result<JsonPatch<'s>, NotBuilt> {
        self.native = NativeFor::of(self.pod, keys, nodes);
        for sidecar in sidecars {
            self.apply(sidecar);
            if self.patch_bytes > MAX_PATCH_BYTES {
                return Err(NotBuilt::TooLarge);
            }
        }
        let pod_level = match PodLevel::of(self.spec.resources.as_ref()) {
            Some(level) => fit(&level, &self.placed()).map_err(NotBuilt::Misfit)?,
            None => Vec::new(),
        };
        let mut ops = JsonPatch::with_capacity(16);
        for change in &pod_level {
            ops.set(
                &["spec", "resources", change.list.key(), &change.resource],
                true,
                PatchValue::Owned(Value::from(change.quantity())),
            );
        }
        self.removal_ops(&mut ops);
        self.pod_container_ops(&mut ops);
        self.injected_container_ops(&mut ops);
        self.pod_field_ops(&mut ops);
        let stamp = RevisionStamp::from_items(sidecars.iter().map(|s| s.stamp.as_str()));
        self.annotation_ops(&mut ops, &stamp, keys);
        Ok(ops)
    }

    /// The final pod's containers, init containers in the order the pod will list them.
    fn placed(&self) -> Vec<Placed<'s>> {
        let (mut front, mut own_init, mut back, mut app) = (vec![], vec![], vec![], vec![]);
        for container in &self.containers {
            match &container.origin {
                Origin::Pod { list, view, .. } => {
                    let init = *list == "initContainers";
                    let resources = view.resources.as_ref();
                    let native = init
                        && view.restart_policy.as_deref()
                            == Some(crate::config::NATIVE_RESTART_POLICY);
                    let placed = Placed {
                        counted: Counted::from_maps(
                            parsed_map(resources.and_then(|r| r.requests.as_ref())),
                            parsed_map(resources.and_then(|r| r.limits.as_ref())),
                            native,
                        ),
                        init,
                        injected: None,
                    };
                    if init {
                        own_init.push(placed)
                    } else {
                        app.push(placed)
                    }
                }
                Origin::Sidecar {
                    placement,
                    container,
                    sidecar,
                    native,
                    ..
                } => {
                    let init = matches!(placement, Placement::InitFront | Placement::Init);
                    let placed = Placed {
                        counted: Counted::of(container, init && *native),
                        init,
                        injected: Some((
                            sidecar.name(),
                            sidecar.config.pod_resources(),
                            container.name.as_str(),
                        )),
                    };
                    match placement {
                        Placement::InitFront => front.push(placed),
                        Placement::Init => back.push(placed),
                        Placement::Prepend | Placement::Append => app.push(placed),
                    }
                }
            }
        }
        front
            .into_iter()
            .chain(own_init)
            .chain(back)
            .chain(app)
            .collect()
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
            // `list` and the index need no pointer escaping.
            if !container.added_env.is_empty() {
                ops.append_all_at(
                    format!("/spec/{list}/{index}/env"),
                    view.env.is_some(),
                    raw_items(&container.added_env),
                );
            }
            if !container.added_mounts.is_empty() {
                ops.append_all_at(
                    format!("/spec/{list}/{index}/volumeMounts"),
                    view.volume_mounts.is_some(),
                    raw_items(&container.added_mounts),
                );
            }
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
        let init_front = self.injected(Placement::InitFront);
        let init_back = self.injected(Placement::Init);
        let init_exists = spec.init_containers.is_some();
        let init_back_any = !init_back.is_empty();
        ops.append_all(&["spec", "initContainers"], init_exists, init_back);
        if init_exists || init_back_any {
            for (position, container) in init_front.into_iter().enumerate() {
                ops.add(
                    &["spec", "initContainers", &position.to_string()],
                    container,
                );
            }
        } else {
            ops.append_all(&["spec", "initContainers"], false, init_front);
        }
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
        ops.append_all(
            &["spec", "volumes"],
            spec.volumes.is_some(),
            raw_items(&self.added_volumes),
        );
        ops.append_all(
            &["spec", "hostAliases"],
            spec.host_aliases.is_some(),
            raw_items(&self.added_host_aliases),
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
        let native = (!self.injected_native.is_empty()).then(|| self.injected_native.join(","));
        match &self.pod.metadata.annotations {
            Some(annotations) => {
                for (key, value) in [
                    (&keys.status, Some(STATUS_INJECTED)),
                    (&keys.revision, Some(stamp.as_str())),
                    (&keys.injected_native, native.as_deref()),
                ] {
                    let tokens = ["metadata", "annotations", key.as_str()];
                    let exists = annotations.contains_key(key.as_str());
                    match value {
                        Some(value) => ops.set(&tokens, exists, PatchValue::Owned(value.into())),
                        // Copied from another pod's manifest, it would tell drift a wrong form.
                        None if exists => ops.remove(&tokens),
                        None => {}
                    }
                }
            }
            None => {
                let mut map = serde_json::Map::new();
                map.insert(keys.status.clone(), Value::from(STATUS_INJECTED));
                map.insert(keys.revision.clone(), Value::from(stamp.as_str()));
                if let Some(native) = native {
                    map.insert(keys.injected_native.clone(), Value::from(native));
                }
                ops.add(
                    &["metadata", "annotations"],
                    PatchValue::Owned(Value::Object(map)),
                );
            }
        }
    }
}

mod presence;
#[cfg(test)]
mod tests;
