//! What the loaders produce and the webhook serves: configs that passed every check, with
//! their revision and origin; one source's last good versions; the two sources merged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::origin::Origin;
use super::parse::{ConfigError, ConfigWarning};
use super::revision::{Revision, RevisionsInForce};
use super::sidecar::SidecarConfig;
use crate::name::SidecarName;

/// A config that passed every check, with its revision and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSidecar {
    pub config: SidecarConfig,
    pub revision: Revision,
    pub origin: Origin,
    /// The config's items as JSON, rendered once at load so that a request only borrows them.
    pub rendered: RenderedSidecar,
    /// `name:version=REV`, this sidecar's item in the revision annotation.
    pub stamp: String,
}

impl LoadedSidecar {
    pub fn new(config: SidecarConfig, origin: impl Into<Origin>) -> Self {
        let revision = Revision::of(&config);
        Self {
            stamp: format!("{}={}", config.name, revision),
            revision,
            rendered: RenderedSidecar::of(&config),
            config,
            origin: origin.into(),
        }
    }

    /// `name:version`, the stamp without its revision.
    pub fn name(&self) -> &str {
        self.stamp
            .split_once('=')
            .map_or(&self.stamp, |(name, _)| name)
    }
}

/// One config item as JSON: the value, for what looks inside it, and its text, which a patch
/// copies as it is instead of serializing the value again on every request.
#[derive(Debug, Clone)]
pub struct RenderedJson {
    pub value: Value,
    pub text: Box<RawValue>,
    /// Where each list of an object ends in `text`, so that items appended to the lists (an
    /// injected container that receives the config's env) are spliced into the text instead
    /// of the object being serialized again.
    pub list_ends: Vec<ListEnd>,
}

/// A list member of a rendered object: its key, the offset of its closing `]` in the text,
/// and whether it is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEnd {
    pub key: String,
    pub bracket: usize,
    pub empty: bool,
}

impl RenderedJson {
    pub fn of<T: Serialize>(item: &T) -> Self {
        let value = serde_json::to_value(item).expect("Kubernetes types serialize to JSON");
        let Value::Object(fields) = &value else {
            let text = serde_json::value::to_raw_value(&value).expect("a JSON value serializes");
            return Self {
                value,
                text,
                list_ends: Vec::new(),
            };
        };
        // Written member by member as serde_json writes an object, noting where lists end.
        let mut text = String::from("{");
        let mut list_ends = Vec::new();
        for (index, (key, member)) in fields.iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            text.push_str(&serde_json::to_string(key).expect("a string serializes"));
            text.push(':');
            text.push_str(&member.to_string());
            if let Value::Array(items) = member {
                list_ends.push(ListEnd {
                    key: key.clone(),
                    bracket: text.len() - 1,
                    empty: items.is_empty(),
                });
            }
        }
        text.push('}');
        let text = RawValue::from_string(text).expect("members written as JSON make JSON");
        Self {
            value,
            text,
            list_ends,
        }
    }
}

impl PartialEq for RenderedJson {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// Each list of a [`SidecarConfig`] as JSON, index for index.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedSidecar {
    pub containers: Vec<RenderedJson>,
    pub prepend_containers: Vec<RenderedJson>,
    /// `containers` and `prependContainers` as native sidecars (`restartPolicy: Always`),
    /// for a config that injects them so into some pods; empty for a classic one.
    pub native_containers: Vec<RenderedJson>,
    pub native_prepend_containers: Vec<RenderedJson>,
    pub init_containers: Vec<RenderedJson>,
    pub volumes: Vec<RenderedJson>,
    pub env: Vec<RenderedJson>,
    pub volume_mounts: Vec<RenderedJson>,
    pub host_aliases: Vec<RenderedJson>,
    /// The JSON size of each `env` and `volumeMounts` item: these are added to every
    /// container, so a request's patch grows with their product and is bounded as it is built.
    pub env_bytes: Vec<usize>,
    pub volume_mount_bytes: Vec<usize>,
}

impl RenderedSidecar {
    fn of(config: &SidecarConfig) -> Self {
        fn render<T: Serialize>(items: &[T]) -> Vec<RenderedJson> {
            items.iter().map(RenderedJson::of).collect()
        }
        let sizes = |items: &[RenderedJson]| -> Vec<usize> {
            items.iter().map(|item| item.text.get().len()).collect()
        };
        // A native sidecar is an init container that restarts: the config writes its
        // containers as containers, the pod gets them with `restartPolicy: Always`.
        let as_native = |containers: &[k8s_openapi::api::core::v1::Container]| {
            if config.native_sidecars() == super::sidecar::NativeSidecars::Never {
                return Vec::new();
            }
            containers
                .iter()
                .map(|c| {
                    RenderedJson::of(&k8s_openapi::api::core::v1::Container {
                        restart_policy: Some(super::NATIVE_RESTART_POLICY.to_owned()),
                        ..c.clone()
                    })
                })
                .collect()
        };
        let env = render(&config.env);
        let volume_mounts = render(&config.volume_mounts);
        Self {
            env_bytes: sizes(&env),
            volume_mount_bytes: sizes(&volume_mounts),
            env,
            volume_mounts,
            containers: render(&config.containers),
            prepend_containers: render(&config.prepend_containers),
            native_containers: as_native(&config.containers),
            native_prepend_containers: as_native(&config.prepend_containers),
            init_containers: render(&config.init_containers),
            volumes: render(&config.volumes),
            host_aliases: render(&config.host_aliases),
        }
    }
}

/// The configs in force, by normalised name. Cheap to clone and share between requests.
#[derive(Debug, Clone, Default)]
pub struct SidecarSet {
    by_name: BTreeMap<SidecarName, Arc<LoadedSidecar>>,
    /// What the webhook tells the creator of a pod it injects with a sidecar (its campaign is
    /// paused, say), by sidecar.
    warnings: BTreeMap<SidecarName, Arc<str>>,
    /// What the nodes' kubelets run (`nativeSidecars: auto`); unknown without a cluster.
    nodes: Arc<crate::nodes::NodeKubelets>,
}

impl SidecarSet {
    pub fn get(&self, name: &SidecarName) -> Option<&Arc<LoadedSidecar>> {
        self.by_name.get(name)
    }

    pub fn insert(&mut self, sidecar: LoadedSidecar) {
        self.by_name
            .insert(sidecar.config.name.clone(), Arc::new(sidecar));
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<LoadedSidecar>> {
        self.by_name.values()
    }

    /// Each sidecar's revision, by normalised name.
    pub fn revisions_in_force(&self) -> RevisionsInForce {
        self.by_name
            .iter()
            .map(|(name, s)| (name.to_string(), s.revision.to_string()))
            .collect()
    }

    /// The sidecars whose config leaves their restarts to a person (`rollout: {policy: manual}`),
    /// by normalised name.
    pub fn manual_rollouts(&self) -> BTreeSet<String> {
        self.by_name
            .iter()
            .filter(|(_, s)| s.config.rollout_mode() == super::sidecar::RolloutMode::Manual)
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// The config of the sidecar a publication or the campaign book names (`name:version`,
    /// as they write it), if one is loaded here.
    pub fn named(&self, name: &str) -> Option<&Arc<LoadedSidecar>> {
        SidecarName::parse(name)
            .ok()
            .and_then(|name| self.by_name.get(&name))
    }

    /// Whether `name`'s restarts are left to a person: as its config read here says (what the
    /// engine reads), or, for a sidecar with no config here, as the judging publication says
    /// (`published_manual`, empty when none judges).
    pub fn rollout_is_manual(&self, name: &str, published_manual: &BTreeSet<String>) -> bool {
        match self.named(name) {
            Some(own) => own.config.rollout_mode() == super::sidecar::RolloutMode::Manual,
            None => published_manual.contains(name),
        }
    }

    /// Every sidecar whose restarts are left to a person, each judged by
    /// [`Self::rollout_is_manual`]: the manual configs read here, and the published manual
    /// sidecars that have no config here.
    pub fn manual_rollouts_with(&self, published_manual: &BTreeSet<String>) -> BTreeSet<String> {
        let own = self.manual_rollouts();
        let published = published_manual
            .iter()
            .filter(|name| self.rollout_is_manual(name, published_manual));
        own.iter().chain(published).cloned().collect()
    }

    /// The same configs, each injection of a sidecar in `warnings` warned about with its text.
    pub fn with_warnings(&self, warnings: BTreeMap<SidecarName, Arc<str>>) -> Self {
        Self {
            by_name: self.by_name.clone(),
            warnings,
            nodes: self.nodes.clone(),
        }
    }

    /// The same configs, injected for nodes as `nodes` says they are.
    pub fn with_nodes(&self, nodes: Arc<crate::nodes::NodeKubelets>) -> Self {
        Self {
            nodes,
            ..self.clone()
        }
    }

    pub fn nodes(&self) -> &crate::nodes::NodeKubelets {
        &self.nodes
    }

    /// The warning for injecting `name`, when there is one.
    pub fn warning(&self, name: &SidecarName) -> Option<&str> {
        self.warnings.get(name).map(AsRef::as_ref)
    }

    pub fn names(&self) -> impl Iterator<Item = &SidecarName> {
        self.by_name.keys()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

impl FromIterator<LoadedSidecar> for SidecarSet {
    fn from_iter<I: IntoIterator<Item = LoadedSidecar>>(iter: I) -> Self {
        let mut set = SidecarSet::default();
        for sidecar in iter {
            set.insert(sidecar);
        }
        set
    }
}

/// The outcome of loading one source: what loaded, what failed, what to look at.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub sidecars: Vec<LoadedSidecar>,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigWarning>,
}

impl LoadReport {
    pub fn sidecar_set(&self) -> SidecarSet {
        self.sidecars.iter().cloned().collect()
    }
}

/// What one config source serves: each origin's (file's, or ConfigMap item's) last good
/// version. A reload takes what loaded, keeps the last good version of what failed, and drops
/// what vanished, so a broken edit never replaces a good config.
#[derive(Debug, Clone, Default)]
pub struct SourceState {
    by_origin: BTreeMap<Origin, LoadedSidecar>,
}

/// What a reload changed, for the log line and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    /// Origins that failed and keep serving their last good version.
    pub kept: Vec<Origin>,
    pub errors: usize,
    pub served: usize,
}

impl SourceState {
    pub fn apply(&mut self, report: &LoadReport) -> ReloadSummary {
        let mut next: BTreeMap<Origin, LoadedSidecar> = report
            .sidecars
            .iter()
            .map(|s| (s.origin.clone(), s.clone()))
            .collect();
        let fresh_names: BTreeSet<&SidecarName> =
            report.sidecars.iter().map(|s| &s.config.name).collect();
        let mut kept = Vec::new();
        for error in &report.errors {
            // A fresh, valid config of the same name elsewhere supersedes the stale one.
            if let Some(previous) = self.by_origin.get(&error.origin)
                && !fresh_names.contains(&previous.config.name)
                && !next.contains_key(&error.origin)
            {
                next.insert(error.origin.clone(), previous.clone());
                kept.push(error.origin.clone());
            }
        }
        self.by_origin = next;
        ReloadSummary {
            kept,
            errors: report.errors.len(),
            served: self.by_origin.len(),
        }
    }

    pub fn sidecars(&self) -> impl Iterator<Item = &LoadedSidecar> {
        self.by_origin.values()
    }

    pub fn len(&self) -> usize {
        self.by_origin.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_origin.is_empty()
    }
}

/// The configs in force: the directory's, with a ConfigMap config of the same name taking its
/// place. Returns the names so overridden, for the log.
pub fn merge_sources(
    directory: &SourceState,
    configmaps: &SourceState,
) -> (SidecarSet, Vec<SidecarName>) {
    let mut set: SidecarSet = directory.sidecars().cloned().collect();
    let mut overridden = Vec::new();
    for sidecar in configmaps.sidecars() {
        if set.get(&sidecar.config.name).is_some() {
            overridden.push(sidecar.config.name.clone());
        }
        set.insert(sidecar.clone());
    }
    (set, overridden)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    #[test]
    fn a_config_read_here_decides_its_manual_policy_and_the_publication_the_rest() {
        let sidecars: SidecarSet = [
            "name: logger:v1\ncontainers: [{name: s, image: 's:1'}]\n",
            "name: agent:v1\ncontainers: [{name: a, image: 'a:1'}]\nrollout: {policy: manual}\n",
        ]
        .iter()
        .map(|t| LoadedSidecar::new(parse_config("t", t).unwrap().config, "t"))
        .collect();
        // The publication calls logger manual and agent not (an older config), and names a
        // sidecar with no config here.
        let published: BTreeSet<String> = ["logger:v1", "tracer:v1"].map(str::to_owned).into();
        let names = |set: BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        assert!(!sidecars.rollout_is_manual("logger:v1", &published));
        assert!(sidecars.rollout_is_manual("agent:v1", &published));
        assert!(sidecars.rollout_is_manual("tracer:v1", &published));
        assert!(!sidecars.rollout_is_manual("cache:v1", &published));
        assert_eq!(
            names(sidecars.manual_rollouts_with(&published)),
            ["agent:v1", "tracer:v1"]
        );
        assert_eq!(
            names(sidecars.manual_rollouts_with(&BTreeSet::new())),
            ["agent:v1"]
        );
        // No config read here: the publication says.
        let none = SidecarSet::default();
        assert_eq!(
            names(none.manual_rollouts_with(&published)),
            ["logger:v1", "tracer:v1"]
        );
        assert!(none.manual_rollouts_with(&BTreeSet::new()).is_empty());
    }
}
