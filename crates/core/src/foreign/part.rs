//! The foreign part of a pod spec, and its leaves: one `path = value` per scalar, so that two
//! parts compare field by field and a field can be ignored.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde_json::Value;

use super::ForeignSidecars;

/// What the template itself declares, so that what admission added stands out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateShape {
    volumes: BTreeSet<String>,
    init_containers: BTreeSet<String>,
}

impl TemplateShape {
    pub fn of(template: &PodSpec) -> Self {
        Self {
            volumes: template
                .volumes
                .iter()
                .flatten()
                .map(|v| v.name.clone())
                .collect(),
            init_containers: template
                .init_containers
                .iter()
                .flatten()
                .map(|c| c.name.clone())
                .collect(),
        }
    }
}

/// How a pod runs a named sidecar: among its containers, or as an init container (a native
/// sidecar when its `restartPolicy` is `Always`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerForm {
    Classic,
    Native,
    /// An init container that runs to completion before the pod's containers.
    Init,
}

impl ContainerForm {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerForm::Classic => "classic",
            ContainerForm::Native => "native",
            ContainerForm::Init => "init",
        }
    }
}

/// One named sidecar as a pod runs it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Placed {
    pub(super) form: ContainerForm,
    /// Its index among the containers (classic) or init containers (native).
    pub(super) position: usize,
    /// Its spec as JSON, without its name.
    pub(super) spec: Value,
}

/// The named sidecars of a pod spec, and the volumes and init containers it has beyond its
/// template's, in their order.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignPart {
    pub(super) containers: BTreeMap<String, Placed>,
    pub(super) volumes: Vec<Value>,
    pub(super) init_containers: Vec<Value>,
    leaves: BTreeMap<String, Value>,
}

pub(super) const ADDED_VOLUMES: &str = "addedVolumes";
pub(super) const ADDED_INIT_CONTAINERS: &str = "addedInitContainers";

impl ForeignPart {
    pub fn of(spec: &PodSpec, template: &TemplateShape, names: &ForeignSidecars) -> Self {
        let mut containers = BTreeMap::new();
        for (position, container) in spec.containers.iter().enumerate() {
            if names.contains(&container.name) {
                containers.insert(
                    container.name.clone(),
                    placed(container, ContainerForm::Classic, position),
                );
            }
        }
        let init = spec.init_containers.as_deref().unwrap_or_default();
        for (position, container) in init.iter().enumerate() {
            if names.contains(&container.name) {
                let form = if container.restart_policy.as_deref() == Some("Always") {
                    ContainerForm::Native
                } else {
                    ContainerForm::Init
                };
                containers.insert(container.name.clone(), placed(container, form, position));
            }
        }
        let volumes: Vec<Value> = spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| !template.volumes.contains(&v.name))
            .map(to_json)
            .collect();
        let init_containers: Vec<Value> = init
            .iter()
            .filter(|c| !names.contains(&c.name) && !template.init_containers.contains(&c.name))
            .map(to_json)
            .collect();
        let mut leaves = BTreeMap::new();
        for (name, placed) in &containers {
            leaves.insert(format!("{name}:form"), Value::from(placed.form.as_str()));
            leaves.insert(format!("{name}:position"), Value::from(placed.position));
            flatten(name.clone(), &placed.spec, &mut leaves);
        }
        for (i, volume) in volumes.iter().enumerate() {
            flatten(format!("{ADDED_VOLUMES}[{i}]"), volume, &mut leaves);
        }
        for (i, container) in init_containers.iter().enumerate() {
            flatten(
                format!("{ADDED_INIT_CONTAINERS}[{i}]"),
                container,
                &mut leaves,
            );
        }
        Self {
            containers,
            volumes,
            init_containers,
            leaves,
        }
    }

    /// Every scalar (and empty object or list) by its path, in path order.
    pub fn leaves(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.leaves.iter()
    }

    pub(super) fn leaf(&self, path: &str) -> Option<&Value> {
        self.leaves.get(path)
    }

    /// The named sidecars it has.
    pub fn containers(&self) -> impl Iterator<Item = &str> {
        self.containers.keys().map(String::as_str)
    }

    /// The paths whose values differ, or that one of the two has and the other has not.
    pub(super) fn differing_paths(&self, other: &ForeignPart) -> BTreeSet<String> {
        let mut paths: BTreeSet<String> = BTreeSet::new();
        for (path, value) in &self.leaves {
            if other.leaves.get(path) != Some(value) {
                paths.insert(path.clone());
            }
        }
        for path in other.leaves.keys() {
            if !self.leaves.contains_key(path) {
                paths.insert(path.clone());
            }
        }
        paths
    }
}

fn placed(container: &Container, form: ContainerForm, position: usize) -> Placed {
    let mut spec = to_json(container);
    if let Value::Object(fields) = &mut spec {
        fields.remove("name");
    }
    Placed {
        form,
        position,
        spec,
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    // k8s-openapi's types serialise to JSON without failing: their maps have string keys.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

pub(super) fn flatten(path: String, value: &Value, leaves: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, field) in fields {
                flatten(format!("{path}.{key}"), field, leaves);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                flatten(format!("{path}[{i}]"), item, leaves);
            }
        }
        _ => {
            leaves.insert(path, value.clone());
        }
    }
}
