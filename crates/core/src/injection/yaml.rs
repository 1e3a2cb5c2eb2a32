//! YAML that reads back the same in YAML 1.1 readers (kubectl, PyYAML) and 1.2 readers alike:
//! block style, and every string a 1.1 reader would take for something else (`on`, `yes`,
//! `no`, `~`, `0644`, `1e3`, `2024-01-01`, ...) double-quoted. serde_yaml writes 1.2, where
//! `on` is a plain string, but kubectl reads it as a boolean and rejects the manifest.

use serde_json::Value;

/// `value` as a YAML document (without the `---` marker), ending with a newline.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_mapping(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_sequence(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_mapping(out: &mut String, map: &serde_json::Map<String, Value>, level: usize) {
    for (index, (key, value)) in map.iter().enumerate() {
        // The first key of a mapping inside a sequence item shares the `- ` line.
        if index > 0 || !out.ends_with("- ") {
            indent(out, level);
        }
        out.push_str(&string_text(key));
        out.push(':');
        write_value(out, value, level);
    }
}

fn write_sequence(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push_str("- ");
        match item {
            Value::Object(map) if !map.is_empty() => write_mapping(out, map, level + 1),
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                write_sequence(out, inner, level + 1);
            }
            scalar => {
                out.push_str(&scalar_text(scalar));
                out.push('\n');
            }
        }
    }
}

/// After `key:`: a scalar on the same line, a collection on the lines below.
fn write_value(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_mapping(out, map, level + 1);
        }
        // Kubernetes style: a list under a key is not indented further.
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_sequence(out, items, level);
        }
        scalar => {
            out.push(' ');
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string_text(s),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

/// A string plain when every reader takes it for that string, else double-quoted (JSON
/// escapes are valid YAML double-quoted escapes).
fn string_text(text: &str) -> String {
    if is_plain_safe(text) {
        text.to_owned()
    } else {
        serde_json::to_string(text).expect("a string serializes")
    }
}

/// YAML 1.1's booleans and nulls, which a 1.2 writer leaves plain.
const YAML11_WORDS: &[&str] = &[
    "y", "yes", "n", "no", "true", "false", "on", "off", "null", "~",
];

fn is_plain_safe(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    if YAML11_WORDS.contains(&text.to_ascii_lowercase().as_str()) {
        return false;
    }
    // Numbers, timestamps, octal and sexagesimal forms all start with a digit, a sign or a dot.
    if first.is_ascii_digit() || matches!(first, '+' | '-' | '.') {
        return false;
    }
    text.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '@'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strings_a_yaml_1_1_reader_would_retype_are_quoted() {
        for text in [
            "on",
            "On",
            "off",
            "yes",
            "No",
            "y",
            "n",
            "true",
            "NULL",
            "~",
            "0644",
            "1e3",
            "12:30",
            "2024-01-01",
            ".5",
            "-1",
            "+1",
            "",
            " padded",
            "a: b",
            "x #y",
            "*ref",
            "&a",
            "!tag",
            "line\nbreak",
            "[a]",
            "{a}",
            "%x",
            "`x`",
            "'q'",
            "\"q\"",
        ] {
            let yaml = to_yaml(&json!({ "value": text }));
            let quoted = serde_json::to_string(text).unwrap();
            assert_eq!(yaml, format!("value: {quoted}\n"), "{text:?}");
        }
        for text in ["app", "example.org/app", "logger-v1", "a_b", "x@y"] {
            assert_eq!(
                to_yaml(&json!({ "value": text })),
                format!("value: {text}\n")
            );
        }
    }

    #[test]
    fn block_style_reads_back_the_same_value() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {}, "annotations": {"injector/request": "logger:v1"}},
            "spec": {
                "containers": [
                    {"name": "app", "env": [{"name": "DEBUG", "value": "on"}], "args": ["-v", "2"]},
                    {"name": "shipper", "ports": [{"containerPort": 80}], "tty": true}
                ],
                "volumes": [],
                "nested": [["a", "b"], []],
                "nothing": null,
                "ratio": 0.5
            }
        });
        let yaml = to_yaml(&value);
        let back: Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(back, value, "{yaml}");
        assert!(yaml.contains("value: \"on\""), "{yaml}");
        assert!(yaml.contains("injector/request: \"logger:v1\""), "{yaml}");
        assert!(
            yaml.contains("  containers:\n  - args:\n    - \"-v\"\n"),
            "{yaml}"
        );
    }
}
