//! What a restart changes: each sidecar's revisions, what differs between their contents, and
//! the Event's action.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use crate::drift::DriftState;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SidecarChange {
    pub sidecar: String,
    /// What the workload's pods run now: stale (`from` is their revision), uninjected, or
    /// injected without a revision (unknown).
    pub state: DriftState,
    /// The revision the workload's stale pods run; `None` when they were never injected or
    /// carry no revision.
    pub from: Option<String>,
    pub to: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
}

/// An Event's action for a restart: the sidecars and their two revisions, e.g.
/// `logger:v1 3f2a9c1e7b0d->77b0d2aa41c9`. Kube's recorder folds repeats by action, so what
/// differs between restarts goes here rather than in the note.
pub fn restart_action(changes: &[SidecarChange]) -> String {
    changes
        .iter()
        .map(|c| {
            format!(
                "{} {}->{}",
                c.sidecar,
                c.from.as_deref().unwrap_or("none"),
                c.to
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What differs between two injected contents, as at most three `path: old -> new` items.
pub fn describe_changes(old: &Value, new: &Value) -> String {
    let mut changes = Vec::new();
    diff(old, new, &mut String::new(), &mut changes);
    if changes.is_empty() {
        return "no content change".to_owned();
    }
    let more = changes.len().saturating_sub(3);
    changes.truncate(3);
    let mut text = changes.join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

fn short(value: Option<&Value>) -> String {
    match value {
        None => "(none)".to_owned(),
        Some(value) => {
            let text = value.to_string();
            if text.chars().count() > 60 {
                let cut: String = text.chars().take(57).collect();
                format!("{cut}...")
            } else {
                text
            }
        }
    }
}

fn diff(old: &Value, new: &Value, path: &mut String, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, path, out),
                    (x, y) => out.push(format!("{path} {} -> {}", short(x), short(y))),
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) if named(a) && named(b) => {
            let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
            let names: BTreeSet<String> = a.iter().chain(b).filter_map(name).collect();
            for n in names {
                let len = path.len();
                path.push_str(&format!("[{n}]"));
                match (find_named(a, &n), find_named(b, &n)) {
                    (Some(x), Some(y)) => diff(x, y, path, out),
                    (x, y) => out.push(format!(
                        "{path} {} -> {}",
                        if x.is_some() { "present" } else { "(none)" },
                        if y.is_some() { "present" } else { "(none)" }
                    )),
                }
                path.truncate(len);
            }
        }
        (a, b) if a != b => out.push(format!("{path} {} -> {}", short(Some(a)), short(Some(b)))),
        _ => {}
    }
}

fn find_named<'v>(list: &'v [Value], name: &str) -> Option<&'v Value> {
    list.iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
}

fn named(list: &[Value]) -> bool {
    !list.is_empty()
        && list
            .iter()
            .all(|v| v.get("name").is_some_and(Value::is_string))
}
