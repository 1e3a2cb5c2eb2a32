//! What differs between a running pod's foreign part and what a new pod gets, as data: the
//! rendering layer words it (`istio-proxy image proxyv2:1.27.1 -> proxyv2:1.28.0; env
//! ISTIO_META_MESH added`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::part::{ADDED_INIT_CONTAINERS, ADDED_VOLUMES, ContainerForm, ForeignPart, Placed};

/// One difference, named as a person checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForeignChange {
    /// A new pod gets the sidecar; the running pod has none.
    Missing { container: String },
    /// The running pod has the sidecar; a new pod no longer gets it.
    NoLongerInjected { container: String },
    Form {
        container: String,
        running: ContainerForm,
        expected: ContainerForm,
    },
    Position {
        container: String,
        running: u64,
        expected: u64,
    },
    Image {
        container: String,
        running: String,
        expected: String,
    },
    /// A list of named entries (`env`, `ports`, `volumeMounts`...) that differs.
    Entries {
        container: String,
        field: String,
        entries: EntryChanges,
    },
    /// Any other field of the container's spec (`args`, `resources`, `readinessProbe`...).
    Field { container: String, field: String },
    /// The volumes admission adds beside the sidecars.
    Volumes(EntryChanges),
    /// The init containers admission adds beside the sidecars.
    InitContainers(EntryChanges),
}

impl ForeignChange {
    /// Whether it is about `container`: its own, or what was added beside the sidecars.
    pub fn concerns(&self, container: &str) -> bool {
        match self {
            ForeignChange::Missing { container: c }
            | ForeignChange::NoLongerInjected { container: c }
            | ForeignChange::Form { container: c, .. }
            | ForeignChange::Position { container: c, .. }
            | ForeignChange::Image { container: c, .. }
            | ForeignChange::Entries { container: c, .. }
            | ForeignChange::Field { container: c, .. } => c == container,
            ForeignChange::Volumes(_) | ForeignChange::InitContainers(_) => true,
        }
    }
}

/// Entries of a list by their key: those a new pod gets that the running pod lacks
/// (`added`), the reverse (`removed`), and those both have with other contents (`changed`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl EntryChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The field that keys each entry of a container's lists.
fn entry_key(field: &str) -> Option<&'static str> {
    match field {
        "env" | "ports" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "resizePolicy" => Some("resourceName"),
        _ => None,
    }
}

pub(super) fn between(
    running: &ForeignPart,
    expected: &ForeignPart,
    ignored: &BTreeSet<String>,
    generated: &BTreeMap<String, String>,
) -> Vec<ForeignChange> {
    let lists = Lists { ignored, generated };
    let differing: BTreeSet<String> = running
        .differing_paths(expected)
        .into_iter()
        .filter(|path| !ignored.contains(path))
        .collect();
    let mut changes = Vec::new();
    let names: BTreeSet<&String> = running
        .containers
        .keys()
        .chain(expected.containers.keys())
        .collect();
    for name in names {
        match (running.containers.get(name), expected.containers.get(name)) {
            (None, Some(_)) => changes.push(ForeignChange::Missing {
                container: name.clone(),
            }),
            (Some(_), None) => changes.push(ForeignChange::NoLongerInjected {
                container: name.clone(),
            }),
            (Some(have), Some(want)) => {
                container_changes(name, have, want, &differing, &lists, &mut changes);
            }
            (None, None) => {}
        }
    }
    if differing.iter().any(|p| p.starts_with(ADDED_VOLUMES)) {
        let entries = lists.compare(ADDED_VOLUMES, &running.volumes, &expected.volumes, "name");
        if !entries.is_empty() {
            changes.push(ForeignChange::Volumes(entries));
        }
    }
    if differing
        .iter()
        .any(|p| p.starts_with(ADDED_INIT_CONTAINERS))
    {
        let entries = lists.compare(
            ADDED_INIT_CONTAINERS,
            &running.init_containers,
            &expected.init_containers,
            "name",
        );
        if !entries.is_empty() {
            changes.push(ForeignChange::InitContainers(entries));
        }
    }
    changes
}

fn container_changes(
    name: &str,
    have: &Placed,
    want: &Placed,
    differing: &BTreeSet<String>,
    lists: &Lists<'_>,
    changes: &mut Vec<ForeignChange>,
) {
    let form_changed = differing.contains(&format!("{name}:form"));
    if form_changed {
        changes.push(ForeignChange::Form {
            container: name.to_owned(),
            running: have.form,
            expected: want.form,
        });
    }
    if differing.contains(&format!("{name}:position")) {
        changes.push(ForeignChange::Position {
            container: name.to_owned(),
            running: have.position as u64,
            expected: want.position as u64,
        });
    }
    let prefix = format!("{name}.");
    let fields: BTreeSet<&str> = differing
        .iter()
        .filter_map(|path| path.strip_prefix(&prefix))
        .map(|rest| rest.split(['.', '[']).next().unwrap_or(rest))
        .collect();
    for field in fields {
        // A native sidecar is an init container that restarts: the form says it.
        if form_changed && field == "restartPolicy" {
            continue;
        }
        let running = have.spec.get(field);
        let expected = want.spec.get(field);
        if field == "image" {
            changes.push(ForeignChange::Image {
                container: name.to_owned(),
                running: text(running),
                expected: text(expected),
            });
            continue;
        }
        let change = match (entry_key(field), list(running), list(expected)) {
            (Some(key), Some(running), Some(expected)) => {
                let entries = lists.compare(&format!("{name}.{field}"), running, expected, key);
                if entries.is_empty() {
                    continue;
                }
                ForeignChange::Entries {
                    container: name.to_owned(),
                    field: field.to_owned(),
                    entries,
                }
            }
            _ => ForeignChange::Field {
                container: name.to_owned(),
                field: field.to_owned(),
            },
        };
        changes.push(change);
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => "(none)".to_owned(),
    }
}

/// A list absent from a spec is an empty one.
fn list(value: Option<&Value>) -> Option<&[Value]> {
    match value {
        None | Some(Value::Null) => Some(&[]),
        Some(Value::Array(items)) => Some(items),
        Some(_) => None,
    }
}

/// What lists compare with: the fields ignored, and the names generated per admission.
struct Lists<'a> {
    ignored: &'a BTreeSet<String>,
    generated: &'a BTreeMap<String, String>,
}

impl Lists<'_> {
    /// `running` and `expected` (the list at `path` of each) compared by each entry's `key`
    /// field. A generated key is matched by its common start (`kube-api-access-*`), and an
    /// entry's ignored fields do not make it changed.
    fn compare(
        &self,
        path: &str,
        running: &[Value],
        expected: &[Value],
        key: &str,
    ) -> EntryChanges {
        let patterns: Vec<&String> = (0..expected.len())
            .filter_map(|i| self.generated.get(&format!("{path}[{i}].{key}")))
            .collect();
        let keyed = |items: &[Value]| -> BTreeMap<String, (usize, Value)> {
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let name = item
                        .get(key)
                        .map_or_else(|| format!("[{i}]"), |k| text(Some(k)));
                    let name = match patterns.iter().find(|p| name.starts_with(p.as_str())) {
                        Some(start) => format!("{start}*"),
                        None => name,
                    };
                    (name, (i, item.clone()))
                })
                .collect()
        };
        let (have, want) = (keyed(running), keyed(expected));
        let mut changes = EntryChanges::default();
        for (name, (i, wanted)) in &want {
            match have.get(name) {
                None => changes.added.push(name.clone()),
                Some((_, had)) if !self.same_but_ignored(&format!("{path}[{i}]"), had, wanted) => {
                    changes.changed.push(name.clone());
                }
                Some(_) => {}
            }
        }
        changes.removed = have
            .keys()
            .filter(|name| !want.contains_key(*name))
            .cloned()
            .collect();
        changes
    }

    /// Whether two entries are equal but for the fields ignored at `path` (the expected
    /// entry's place).
    fn same_but_ignored(&self, path: &str, had: &Value, wanted: &Value) -> bool {
        let leaves = |value: &Value| {
            let mut leaves = BTreeMap::new();
            super::part::flatten(path.to_owned(), value, &mut leaves);
            leaves.retain(|p, _| !self.ignored.contains(p));
            leaves
        };
        leaves(had) == leaves(wanted)
    }
}
