//! A sidecar's containers as a policy's JSON patches: classic (prepended, appended, init) or
//! native (in the pod's init containers, placed first or last), each with the config's env and
//! mounts.

use serde_json::{Value, json};

use super::cel;
use crate::config::LoadedSidecar;

/// Its init containers, then its prepended and regular containers as native sidecars, all in
/// the pod's init containers: after them, or before them (after those of the sidecars before
/// it) when placed first.
pub(super) fn native_containers(sidecar: &LoadedSidecar, init_front: &str) -> Vec<String> {
    let rendered = &sidecar.rendered;
    let all: Vec<String> = rendered
        .init_containers
        .iter()
        .chain(&rendered.native_prepend_containers)
        .chain(&rendered.native_containers)
        .map(|c| {
            cel::object(
                &with_additions(&c.value, sidecar),
                "Object.spec.initContainers",
            )
        })
        .collect();
    if all.is_empty() {
        return Vec::new();
    }
    let create = "(has(object.spec.initContainers) ? [] : [JSONPatch{op: 'add', path: '/spec/initContainers', value: []}])";
    if sidecar.config.native_placement() == crate::config::NativePlacement::First {
        let inserted: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(n, c)| {
                format!(
                    "JSONPatch{{op: 'add', path: '/spec/initContainers/' + string({init_front} + {n}), value: {c}}}"
                )
            })
            .collect();
        return vec![format!("{create} + [{}]", inserted.join(", "))];
    }
    vec![appended(
        "'/spec/initContainers'",
        "has(object.spec.initContainers)",
        &format!("[{}]", all.join(", ")),
    )]
}

/// `missing` (a CEL list) appended to the list at `path` (a CEL string), made empty first when
/// `exists` is false: a patch value that is a list of objects makes kube-apiserver 1.36
/// panic (cel-go's list conversion).
pub(super) fn appended(path: &str, exists: &str, missing: &str) -> String {
    format!(
        "({exists} || size({missing}) == 0 ? [] : [JSONPatch{{op: 'add', path: {path}, value: []}}]) \
         + {missing}.map(v, JSONPatch{{op: 'add', path: {path} + '/-', value: v}})"
    )
}

/// Its containers with its env and mounts: prepended before the pod's (after those of the
/// sidecars before it), appended after them, and its init containers after the pod's.
pub(super) fn classic_containers(sidecar: &LoadedSidecar, prepended_before: &str) -> Vec<String> {
    let rendered = &sidecar.rendered;
    let container = |c: &crate::config::RenderedJson, path: &str| {
        cel::object(&with_additions(&c.value, sidecar), path)
    };
    let mut lists = Vec::new();
    let prepended: Vec<String> = rendered
        .prepend_containers
        .iter()
        .enumerate()
        .map(|(n, c)| {
            format!(
                "JSONPatch{{op: 'add', path: '/spec/containers/' + string({prepended_before} + {n}), value: {}}}",
                container(c, "Object.spec.containers")
            )
        })
        .collect();
    let appended_containers: Vec<String> = rendered
        .containers
        .iter()
        .map(|c| {
            format!(
                "JSONPatch{{op: 'add', path: '/spec/containers/-', value: {}}}",
                container(c, "Object.spec.containers")
            )
        })
        .collect();
    for list in [prepended, appended_containers] {
        if !list.is_empty() {
            lists.push(format!("[{}]", list.join(", ")));
        }
    }
    if !rendered.init_containers.is_empty() {
        let init: Vec<String> = rendered
            .init_containers
            .iter()
            .map(|c| container(c, "Object.spec.initContainers"))
            .collect();
        lists.push(appended(
            "'/spec/initContainers'",
            "has(object.spec.initContainers)",
            &format!("[{}]", init.join(", ")),
        ));
    }
    lists
}

/// An injected container with the config's env and mounts appended, as the webhook renders
/// it (an entry of a name, a mount of a name or path, it has already stays its own).
fn with_additions(container: &Value, sidecar: &LoadedSidecar) -> Value {
    let mut container = container.clone();
    for env in &sidecar.rendered.env {
        let has = container["env"]
            .as_array()
            .is_some_and(|list| list.iter().any(|e| e["name"] == env.value["name"]));
        if !has {
            push(&mut container, "env", env.value.clone());
        }
    }
    for mount in &sidecar.rendered.volume_mounts {
        let has = container["volumeMounts"].as_array().is_some_and(|list| {
            list.iter().any(|m| {
                m["name"] == mount.value["name"] || m["mountPath"] == mount.value["mountPath"]
            })
        });
        if !has {
            push(&mut container, "volumeMounts", mount.value.clone());
        }
    }
    container
}

fn push(object: &mut Value, key: &str, item: Value) {
    match object.get_mut(key).and_then(Value::as_array_mut) {
        Some(list) => list.push(item),
        None => object[key] = json!([item]),
    }
}
