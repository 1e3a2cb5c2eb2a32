//! JSON written as CEL literals for a policy's apply configuration: an object of the Pod
//! schema as `Object.spec.containers{...}` (its path names its type), a map field as a map.

use serde_json::Value;

/// Fields of the pod's schema that are maps (string keys chosen by the user), not structs.
const MAP_FIELDS: &[&str] = &[
    "limits",
    "requests",
    "volumeAttributes",
    "options",
    "labels",
    "annotations",
    "matchLabels",
    "nodeSelector",
];

/// A CEL string literal: JSON's escapes are CEL's.
pub(super) fn string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// `value` as a CEL literal of the schema type at `path` (`Object.spec.containers`).
pub(super) fn object(value: &Value, path: &str) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|item| object(item, path)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(key, v)| {
                    let inner = format!("{path}.{key}");
                    let text = if MAP_FIELDS.contains(&key.as_str()) {
                        map(v, &inner)
                    } else {
                        object(v, &inner)
                    };
                    format!("{key}: {text}")
                })
                .collect();
            format!("{path}{{{}}}", fields.join(", "))
        }
    }
}

/// A map field: its values are strings (quantities, labels) or, rarely, objects.
fn map(value: &Value, path: &str) -> String {
    let Value::Object(entries) = value else {
        return object(value, path);
    };
    let entries: Vec<String> = entries
        .iter()
        .map(|(key, v)| format!("{}: {}", string(key), object(v, path)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_are_typed_by_their_path_and_maps_stay_maps() {
        let container = serde_json::json!({
            "name": "log-shipper",
            "args": ["--config", "a \"quoted\" \\ path"],
            "resources": {"requests": {"cpu": "10m"}, "limits": {"memory": "64Mi"}},
            "securityContext": {"runAsUser": 65534, "runAsNonRoot": true},
            "terminationMessagePath": null,
        });
        assert_eq!(
            object(&container, "Object.spec.containers"),
            r#"Object.spec.containers{args: ["--config", "a \"quoted\" \\ path"], name: "log-shipper", resources: Object.spec.containers.resources{limits: {"memory": "64Mi"}, requests: {"cpu": "10m"}}, securityContext: Object.spec.containers.securityContext{runAsNonRoot: true, runAsUser: 65534}}"#
        );
    }
}
