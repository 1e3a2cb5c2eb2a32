//! One sidecar config as written (Tumblr format plus `prependContainers` and `rollout`), and
//! how a child config inherits from its parent.

use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, Volume, VolumeMount};
use serde::{Deserialize, Serialize};

use crate::name::SidecarName;

/// Every top-level key a config may carry. Anything else is an error naming the key, because a
/// typo such as `volumeMount:` would otherwise silently inject nothing.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "name",
    "inherits",
    "containers",
    "prependContainers",
    "initContainers",
    "volumes",
    "env",
    "volumeMounts",
    "hostAliases",
    "hostNetwork",
    "hostPID",
    "serviceAccountName",
    "rollout",
    "nativeSidecars",
    "nativeSidecarPlacement",
    "podResources",
];

/// The `restartPolicy` that makes an init container a native sidecar.
pub const NATIVE_RESTART_POLICY: &str = "Always";

/// Whether an init container is a native sidecar: it restarts, and runs beside what follows.
pub fn is_native_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some(NATIVE_RESTART_POLICY)
}

/// Which pods get a config's containers as native sidecars (`nativeSidecars:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NativeSidecars {
    /// `false` (or absent): classic, as regular containers.
    #[default]
    Never,
    /// `true`: every pod.
    Always,
    /// `jobs`: the pods of Jobs (a classic sidecar would keep them from completing); other
    /// pods get the classic form.
    Jobs,
    /// `auto`: native where the pod's node (before scheduling: every node) runs a kubelet that
    /// starts native sidecars, and in a Job's pods where some node does; classic where the
    /// nodes are not known.
    Auto,
}

impl Serialize for NativeSidecars {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            NativeSidecars::Never => serializer.serialize_bool(false),
            NativeSidecars::Always => serializer.serialize_bool(true),
            NativeSidecars::Jobs => serializer.serialize_str("jobs"),
            NativeSidecars::Auto => serializer.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for NativeSidecars {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Word(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Flag(true) => Ok(NativeSidecars::Always),
            Written::Flag(false) => Ok(NativeSidecars::Never),
            Written::Word(word) if word == "jobs" => Ok(NativeSidecars::Jobs),
            Written::Word(word) if word == "auto" => Ok(NativeSidecars::Auto),
            Written::Word(word) => Err(serde::de::Error::custom(format!(
                "expected true, false, jobs or auto, found {word:?}"
            ))),
        }
    }
}

/// Where a config injected as native sidecars puts them among the pod's init containers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NativePlacement {
    /// Before the pod's own init containers, so that those can use them (a proxy, a secrets
    /// agent); after the config's own init containers, which run to completion first.
    #[default]
    First,
    /// After the pod's own init containers.
    Last,
}

/// What a config's sidecars do to a pod that sets pod-level resources (`spec.resources`,
/// Kubernetes 1.34+), whose requests must cover what its containers request
/// (`podResources:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PodResourcesMode {
    /// The pod-level requests grow by what the sidecars add to the pod's requests as the
    /// kubelet counts them, and the pod-level limits by the sidecars' limits (their requests
    /// where they set none): the app keeps the budget it was given.
    #[default]
    Add,
    /// The pod-level figures stay as written; a pod they do not cover with the sidecars is
    /// refused, naming both figures.
    Refuse,
}

/// Whether the rollout engine may restart workloads for this sidecar on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutMode {
    #[default]
    Auto,
    Manual,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutPolicy {
    #[serde(default)]
    pub policy: RolloutMode,
    /// `false`: a change of this sidecar's images restarts workloads like any other change,
    /// never upgrading pods in place.
    #[serde(default, rename = "inPlace", skip_serializing_if = "Option::is_none")]
    pub in_place: Option<bool>,
    /// Metric checks that each restarted workload's bake must pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<crate::rollout::analysis::MetricCheck>,
}

/// One sidecar as it will be injected (after inheritance once resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarConfig {
    pub name: SidecarName,
    pub inherits: Option<String>,
    pub containers: Vec<Container>,
    pub prepend_containers: Vec<Container>,
    pub init_containers: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub env: Vec<EnvVar>,
    pub volume_mounts: Vec<VolumeMount>,
    pub host_aliases: Vec<HostAlias>,
    pub host_network: bool,
    pub host_pid: bool,
    pub service_account_name: Option<String>,
    pub rollout: Option<RolloutPolicy>,
    /// `nativeSidecars: true`: `containers` and `prependContainers` are injected as native
    /// sidecars (init containers with `restartPolicy: Always`); absent or false: classic.
    pub native_sidecars: Option<NativeSidecars>,
    pub native_placement: Option<NativePlacement>,
    /// `podResources:`; absent means [`PodResourcesMode::Add`].
    pub pod_resources: Option<PodResourcesMode>,
}

impl SidecarConfig {
    pub fn rollout_mode(&self) -> RolloutMode {
        self.rollout.as_ref().map(|r| r.policy).unwrap_or_default()
    }

    /// Whether its sidecars are injected as native sidecars into every pod.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn is_native(&self) -> bool {
        self.native_sidecars() == NativeSidecars::Always
    }

    pub fn native_sidecars(&self) -> NativeSidecars {
        self.native_sidecars.unwrap_or_default()
    }

    /// Whether a pod (of a Job, or not) whose nodes support native sidecars as `nodes` says
    /// gets its sidecars as native sidecars.
    pub fn native_for(&self, job_pod: bool, nodes: &crate::nodes::NativeSupport) -> bool {
        use crate::nodes::NativeSupport;
        match self.native_sidecars() {
            NativeSidecars::Never => false,
            NativeSidecars::Always => true,
            NativeSidecars::Jobs => job_pod,
            // A Job's pod with a classic sidecar never completes anywhere; native, it does on
            // every node that runs native sidecars.
            NativeSidecars::Auto => match nodes {
                NativeSupport::Everywhere => true,
                NativeSupport::Somewhere { .. } => job_pod,
                NativeSupport::Nowhere { .. } | NativeSupport::Unknown => false,
            },
        }
    }

    pub fn native_placement(&self) -> NativePlacement {
        self.native_placement.unwrap_or_default()
    }

    pub fn pod_resources(&self) -> PodResourcesMode {
        self.pod_resources.unwrap_or_default()
    }

    /// Whether its pods may be upgraded in place (`rollout: {inPlace: false}` says no).
    pub fn in_place_allowed(&self) -> bool {
        self.rollout
            .as_ref()
            .and_then(|r| r.in_place)
            .unwrap_or(true)
    }

    /// The metric checks each restarted workload's bake must pass (`rollout: {checks: ...}`).
    pub fn metric_checks(&self) -> &[crate::rollout::analysis::MetricCheck] {
        self.rollout.as_ref().map_or(&[], |r| r.checks.as_slice())
    }

    /// The names of the containers it injects, init containers included.
    pub fn container_names(&self) -> Vec<String> {
        self.prepend_containers
            .iter()
            .chain(&self.containers)
            .chain(&self.init_containers)
            .map(|c| c.name.clone())
            .collect()
    }

    /// Every container this config injects, in the order the pod will list them.
    /// Whether it injects containers that keep running beside the app (`containers`,
    /// `prependContainers`), not only init containers that run to completion.
    pub fn runs_sidecars(&self) -> bool {
        !self.containers.is_empty() || !self.prepend_containers.is_empty()
    }

    pub fn injected_containers(&self) -> impl Iterator<Item = &Container> {
        self.prepend_containers
            .iter()
            .chain(&self.init_containers)
            .chain(&self.containers)
    }

    /// Applies Tumblr's inheritance: `self` is the child, `parent` the resolved parent.
    pub(super) fn inherit_from(self, parent: &SidecarConfig) -> SidecarConfig {
        SidecarConfig {
            name: self.name,
            inherits: self.inherits,
            containers: merge_by_name(&parent.containers, self.containers, |c| &c.name),
            prepend_containers: merge_by_name(
                &parent.prepend_containers,
                self.prepend_containers,
                |c| &c.name,
            ),
            init_containers: merge_by_name(&parent.init_containers, self.init_containers, |c| {
                &c.name
            }),
            volumes: merge_by_name(&parent.volumes, self.volumes, |v| &v.name),
            env: merge_by_name(&parent.env, self.env, |e| &e.name),
            volume_mounts: merge_by_name(&parent.volume_mounts, self.volume_mounts, |m| &m.name),
            host_aliases: parent
                .host_aliases
                .iter()
                .cloned()
                .chain(self.host_aliases)
                .collect(),
            host_network: parent.host_network || self.host_network,
            host_pid: parent.host_pid || self.host_pid,
            service_account_name: self
                .service_account_name
                .or_else(|| parent.service_account_name.clone()),
            rollout: self.rollout.or_else(|| parent.rollout.clone()),
            native_sidecars: self.native_sidecars.or(parent.native_sidecars),
            native_placement: self.native_placement.or(parent.native_placement),
            pod_resources: self.pod_resources.or(parent.pod_resources),
        }
    }
}

/// A child's item replaces the parent's item of the same name in place; new items are appended.
fn merge_by_name<T: Clone>(parent: &[T], child: Vec<T>, key: impl Fn(&T) -> &String) -> Vec<T> {
    let mut merged: Vec<T> = parent.to_vec();
    for item in child {
        match merged
            .iter()
            .position(|existing| key(existing) == key(&item))
        {
            Some(index) => merged[index] = item,
            None => merged.push(item),
        }
    }
    merged
}
