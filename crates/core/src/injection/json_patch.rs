//! RFC 6902 JSON Patch, built from explicit operations. Values borrow from the sidecar configs
//! (a config's rendered containers, env, volumes) and are only serialized, so answering a
//! request copies no JSON tree.

use std::io::{self, Write};

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::RenderedJson;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Operation<'a> {
    Add {
        path: String,
        value: PatchValue<'a>,
    },
    Remove {
        path: String,
    },
    Replace {
        path: String,
        value: PatchValue<'a>,
    },
    /// Fails the whole patch unless the value at `path` is `value` (a guard against a document
    /// changed since it was read).
    Test {
        path: String,
        value: PatchValue<'a>,
    },
}

/// The value of an operation, as it will be written.
#[derive(Debug, Clone)]
pub enum PatchValue<'a> {
    Borrowed(&'a Value),
    /// JSON text written as it is (a config item rendered at load).
    Raw(&'a RawValue),
    Owned(Value),
    List(Vec<PatchValue<'a>>),
    /// An object with items appended to some of its lists (an injected container that receives
    /// the config's env and mounts), written without copying the object.
    Extended {
        base: &'a RenderedJson,
        appended: Vec<(&'static str, Vec<&'a RawValue>)>,
    },
}

/// Equal when they write the same JSON (raw text included).
impl PartialEq for PatchValue<'_> {
    fn eq(&self, other: &Self) -> bool {
        serde_json::to_value(self).ok() == serde_json::to_value(other).ok()
    }
}

impl<'a> From<&'a Value> for PatchValue<'a> {
    fn from(value: &'a Value) -> Self {
        PatchValue::Borrowed(value)
    }
}

impl From<Value> for PatchValue<'_> {
    fn from(value: Value) -> Self {
        PatchValue::Owned(value)
    }
}

impl Serialize for PatchValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            PatchValue::Borrowed(value) => value.serialize(serializer),
            PatchValue::Raw(text) => text.serialize(serializer),
            PatchValue::Owned(value) => value.serialize(serializer),
            PatchValue::List(items) => items.serialize(serializer),
            PatchValue::Extended { base, appended } => {
                let base = &base.value;
                let Value::Object(fields) = base else {
                    return base.serialize(serializer);
                };
                let extra = |key: &str| appended.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
                let new_keys = appended
                    .iter()
                    .filter(|(key, items)| !items.is_empty() && !fields.contains_key(*key));
                let mut map = serializer.serialize_map(None)?;
                for (key, value) in fields {
                    match (extra(key), value) {
                        (Some(items), Value::Array(own)) if !items.is_empty() => {
                            map.serialize_entry(key, &Chained(own, items))?;
                        }
                        _ => map.serialize_entry(key, value)?,
                    }
                }
                for (key, items) in new_keys {
                    map.serialize_entry(key, items)?;
                }
                map.end()
            }
        }
    }
}

impl PatchValue<'_> {
    /// Writes the value as its `Serialize` does, byte for byte, but an extended object as its
    /// rendered text with the items spliced in: serializing the object again cost more than
    /// the rest of the patch.
    fn write_json<W: Write>(&self, out: &mut W) -> io::Result<()> {
        match self {
            PatchValue::Borrowed(value) => Ok(serde_json::to_writer(out, value)?),
            PatchValue::Owned(value) => Ok(serde_json::to_writer(out, value)?),
            PatchValue::Raw(text) => out.write_all(text.get().as_bytes()),
            PatchValue::List(items) => {
                out.write_all(b"[")?;
                write_joined(out, items, |out, item| item.write_json(out))?;
                out.write_all(b"]")
            }
            PatchValue::Extended { base, appended } => write_extended(out, base, appended),
        }
    }
}

/// An extended object: `base`'s text, `appended` items spliced before the end of the lists
/// it has, and the lists it lacks added after its last member.
fn write_extended<W: Write>(
    out: &mut W,
    base: &RenderedJson,
    appended: &[(&'static str, Vec<&RawValue>)],
) -> io::Result<()> {
    let Value::Object(fields) = &base.value else {
        return out.write_all(base.text.get().as_bytes());
    };
    let text = base.text.get().as_bytes();
    let mut splices: Vec<(usize, bool, &[&RawValue])> = appended
        .iter()
        .filter(|(_, items)| !items.is_empty())
        .filter_map(|(key, items)| {
            let end = base.list_ends.iter().find(|end| end.key == *key)?;
            Some((end.bracket, end.empty, items.as_slice()))
        })
        .collect();
    splices.sort_unstable_by_key(|(bracket, ..)| *bracket);
    let mut written = 0;
    for (bracket, empty, items) in splices {
        out.write_all(&text[written..bracket])?;
        written = bracket;
        if !empty {
            out.write_all(b",")?;
        }
        write_joined(out, items, write_raw)?;
    }
    // The text ends with the object's `}`.
    out.write_all(&text[written..text.len() - 1])?;
    let mut members = fields.len();
    for (key, items) in appended {
        if items.is_empty() || fields.contains_key(*key) {
            continue;
        }
        if members > 0 {
            out.write_all(b",")?;
        }
        members += 1;
        serde_json::to_writer(&mut *out, key)?;
        out.write_all(b":[")?;
        write_joined(out, items, write_raw)?;
        out.write_all(b"]")?;
    }
    out.write_all(b"}")
}

/// `items` as the members of a JSON array (brackets not included), comma between each.
fn write_joined<W: Write, T>(
    out: &mut W,
    items: &[T],
    mut write_item: impl FnMut(&mut W, &T) -> io::Result<()>,
) -> io::Result<()> {
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        write_item(out, item)?;
    }
    Ok(())
}

fn write_raw<W: Write>(out: &mut W, item: &&RawValue) -> io::Result<()> {
    out.write_all(item.get().as_bytes())
}

/// Two slices written as one JSON array.
struct Chained<'v>(&'v [Value], &'v [&'v RawValue]);

impl Serialize for Chained<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len() + self.1.len()))?;
        for item in self.0 {
            seq.serialize_element(item)?;
        }
        for item in self.1 {
            seq.serialize_element(item)?;
        }
        seq.end()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct JsonPatch<'a> {
    operations: Vec<Operation<'a>>,
}

impl<'a> JsonPatch<'a> {
    pub fn add(&mut self, tokens: &[&str], value: PatchValue<'a>) {
        self.operations.push(Operation::Add {
            path: pointer(tokens),
            value,
        });
    }

    pub fn remove(&mut self, tokens: &[&str]) {
        self.operations.push(Operation::Remove {
            path: pointer(tokens),
        });
    }

    /// Fails the patch unless the value at `tokens` is `value`.
    pub fn test(&mut self, tokens: &[&str], value: PatchValue<'a>) {
        self.operations.push(Operation::Test {
            path: pointer(tokens),
            value,
        });
    }

    /// `replace` where the member exists (a reader of the patch sees an overwrite), else `add`.
    pub fn set(&mut self, tokens: &[&str], exists: bool, value: PatchValue<'a>) {
        let path = pointer(tokens);
        self.operations.push(if exists {
            Operation::Replace { path, value }
        } else {
            Operation::Add { path, value }
        });
    }

    pub fn with_capacity(operations: usize) -> Self {
        Self {
            operations: Vec::with_capacity(operations),
        }
    }

    /// Appends `items` to the list at `tokens`, or creates the list with them when absent.
    pub fn append_all(&mut self, tokens: &[&str], exists: bool, items: Vec<PatchValue<'a>>) {
        if !items.is_empty() {
            self.append_all_at(pointer(tokens), exists, items);
        }
    }

    /// [`JsonPatch::append_all`] at a pointer already built.
    pub fn append_all_at(&mut self, mut path: String, exists: bool, items: Vec<PatchValue<'a>>) {
        if items.is_empty() {
            return;
        }
        if exists {
            path.push_str("/-");
            for item in items {
                self.operations.push(Operation::Add {
                    path: path.clone(),
                    value: item,
                });
            }
        } else {
            self.operations.push(Operation::Add {
                path,
                value: PatchValue::List(items),
            });
        }
    }

    /// Writes the patch as JSON: the bytes its `Serialize` writes, with less work (see
    /// [`PatchValue::write_json`]). The webhook answers with these.
    pub fn write_json<W: Write>(&self, out: &mut W) -> io::Result<()> {
        out.write_all(b"[")?;
        write_joined(out, &self.operations, |out, operation| {
            let (op, path, value) = match operation {
                Operation::Add { path, value } => ("add", path, Some(value)),
                Operation::Remove { path } => ("remove", path, None),
                Operation::Replace { path, value } => ("replace", path, Some(value)),
                Operation::Test { path, value } => ("test", path, Some(value)),
            };
            out.write_all(b"{\"op\":\"")?;
            out.write_all(op.as_bytes())?;
            out.write_all(b"\",\"path\":")?;
            serde_json::to_writer(&mut *out, path)?;
            if let Some(value) = value {
                out.write_all(b",\"value\":")?;
                value.write_json(out)?;
            }
            out.write_all(b"}")
        })?;
        out.write_all(b"]")
    }

    /// The same patch as the json-patch crate's type, to apply it to a document.
    pub fn to_json_patch(&self) -> json_patch::Patch {
        serde_json::to_value(self)
            .and_then(serde_json::from_value)
            .expect("our operations are valid RFC 6902 operations")
    }
}

/// An RFC 6901 pointer from unescaped tokens (`injector/status` becomes `injector~1status`).
pub fn pointer(tokens: &[&str]) -> String {
    let mut path = String::with_capacity(tokens.iter().map(|t| t.len() + 1).sum::<usize>() + 4);
    for token in tokens {
        path.push('/');
        if !token.contains(['~', '/']) {
            path.push_str(token);
            continue;
        }
        for c in token.chars() {
            match c {
                '~' => path.push_str("~0"),
                '/' => path.push_str("~1"),
                c => path.push(c),
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pointer_escapes_tilde_and_slash() {
        assert_eq!(
            pointer(&["metadata", "annotations", "a~b/c"]),
            "/metadata/annotations/a~0b~1c"
        );
        assert_eq!(pointer(&[]), "");
    }

    #[test]
    fn serializes_as_rfc_6902_and_applies() {
        let borrowed = json!({"name": "x"});
        let mut patch = JsonPatch::default();
        patch.append_all(&["list"], false, vec![(&borrowed).into()]);
        patch.append_all(&["list"], true, vec![json!({"name": "y"}).into()]);
        patch.set(&["flag"], false, json!(true).into());
        patch.set(&["flag"], true, json!(false).into());
        patch.remove(&["list", "0"]);
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "add", "path": "/list", "value": [{"name": "x"}]},
                {"op": "add", "path": "/list/-", "value": {"name": "y"}},
                {"op": "add", "path": "/flag", "value": true},
                {"op": "replace", "path": "/flag", "value": false},
                {"op": "remove", "path": "/list/0"}
            ])
        );
        let mut doc = json!({});
        json_patch::patch(&mut doc, &patch.to_json_patch()).unwrap();
        assert_eq!(doc, json!({"list": [{"name": "y"}], "flag": false}));
    }

    #[test]
    fn an_extended_object_is_written_with_its_lists_appended() {
        let base = RenderedJson::of(&json!({"name": "c", "env": [{"name": "A"}], "image": "i"}));
        let raw = |value| serde_json::value::to_raw_value(&value).unwrap();
        let (b, c) = (raw(json!({"name": "B"})), raw(json!({"name": "/m"})));
        let value = PatchValue::Extended {
            base: &base,
            appended: vec![
                ("env", vec![&b]),
                ("volumeMounts", vec![&c]),
                ("args", vec![]),
            ],
        };
        assert_eq!(
            serde_json::to_value(&value).unwrap(),
            json!({"name": "c", "env": [{"name": "A"}, {"name": "B"}], "image": "i", "volumeMounts": [{"name": "/m"}]})
        );
    }

    /// The webhook writes patches with `write_json`; everything else serializes them. Both
    /// must write the same bytes, extended objects of every shape included.
    #[test]
    fn written_patches_are_byte_for_byte_what_serde_writes() {
        let raw = |value| serde_json::value::to_raw_value(&value).unwrap();
        let (one, two) = (raw(json!({"name": "B"})), raw(json!({"n": "x\"y"})));
        let bases = [
            json!({"args": ["a"], "env": [], "name": "c", "volumeMounts": [{"name": "m"}], "z": 1}),
            json!({"env": [{"name": "A"}], "name": "c\u{e9}\n"}),
            json!({"name": "c", "volumeMounts": "not a list"}),
            json!({}),
            json!(["not an object"]),
        ]
        .map(|base| RenderedJson::of(&base));
        let appendeds = [
            vec![("env", vec![&*one, &*two]), ("volumeMounts", vec![&*two])],
            vec![("volumeMounts", vec![&*one]), ("env", vec![])],
            vec![("ports", vec![&*one]), ("env", vec![&*two])],
            vec![],
        ];
        let owned = json!({"a": [1, "two", null]});
        for base in &bases {
            for appended in &appendeds {
                let mut patch = JsonPatch::default();
                patch.add(
                    &["spec", "containers", "-"],
                    PatchValue::Extended {
                        base,
                        appended: appended.clone(),
                    },
                );
                patch.append_all(
                    &["list"],
                    false,
                    vec![PatchValue::Raw(&one), (&owned).into()],
                );
                patch.set(&["a~b/c"], true, json!("q\"uote").into());
                patch.test(&["t"], json!(null).into());
                patch.remove(&["list", "0"]);
                let mut written = Vec::new();
                patch.write_json(&mut written).unwrap();
                let serialized = serde_json::to_vec(&patch).unwrap();
                assert_eq!(
                    String::from_utf8(written).unwrap(),
                    String::from_utf8(serialized).unwrap(),
                    "base {} with {appended:?}",
                    base.text
                );
            }
        }
    }
}
