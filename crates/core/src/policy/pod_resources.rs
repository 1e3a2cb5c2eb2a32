//! Pod-level resources in the policy mode: the mutation that grows a pod's `spec.resources`
//! by what the requested sidecars in `podResources: add` mode add to it, computed in CEL as
//! the webhook computes it (`injection::pod_resources`). It runs on the pod as it came, before
//! the containers are added, so it places the sidecars' containers itself: their requests are
//! known here, in thousandths (`injection::resources::Counted`).
//!
//! A `podResources: refuse` sidecar leaves the figures as written; a pod they do not cover is
//! then refused by the API server's own validation, which names both figures.

use serde_json::{Value, json};

use super::{cel, native_for};
use crate::annotations::AnnotationKeys;
use crate::config::{LoadedSidecar, NativePlacement, PodResourcesMode, is_native_sidecar};
use crate::injection::resources::{Counted, Requests};

/// The CEL variable of the comprehension over the pod-level resources.
const RESOURCE: &str = "res";

/// The mutation (a JSON patch of `spec.resources`), for a pod the first mutation stamped;
/// `None` when no sidecar in `add` mode requests anything.
pub(super) fn mutation(
    sidecars: &[&LoadedSidecar],
    keys: &AnnotationKeys,
    stamped: &str,
) -> Option<Value> {
    let adding: Vec<&LoadedSidecar> = sidecars
        .iter()
        .copied()
        .filter(|s| s.config.pod_resources() == PodResourcesMode::Add)
        .filter(|s| {
            s.config
                .injected_containers()
                .any(|c| !Counted::of(c, false).requests.is_empty())
        })
        .collect();
    if adding.is_empty() {
        return None;
    }
    let grown = format!("{} - {}", aggregate(&adding, keys), aggregate(&[], keys));
    let requests = format!(
        "(has(object.spec.resources.requests) ? object.spec.resources.requests.filter({RESOURCE}, {grown} > 0)\
         .map({RESOURCE}, JSONPatch{{op: 'replace', path: '/spec/resources/requests/' + jsonpatch.escapeKey({RESOURCE}), \
         value: {}}}) : [])",
        quantity(&format!(
            "{} + {grown}",
            milli(&format!("object.spec.resources.requests[{RESOURCE}]"))
        ))
    );
    let added = limits_added(&adding);
    let limits = format!(
        "(has(object.spec.resources.limits) ? object.spec.resources.limits.filter({RESOURCE}, {added} > 0)\
         .map({RESOURCE}, JSONPatch{{op: 'replace', path: '/spec/resources/limits/' + jsonpatch.escapeKey({RESOURCE}), \
         value: {}}}) : [])",
        quantity(&format!(
            "{} + {added}",
            milli(&format!("object.spec.resources.limits[{RESOURCE}]"))
        ))
    );
    Some(json!({
        "patchType": "JSONPatch",
        "jsonPatch": {"expression": format!(
            "{stamped} && has(object.spec.resources) ? {requests} + {limits} : []"
        )},
    }))
}

/// A quantity (a string, or a number) in thousandths of its unit, as a CEL int.
fn milli(quantity: &str) -> String {
    format!("int(quantity(string({quantity})).asApproximateFloat() * 1000.0 + 0.5)")
}

/// The CEL string of `value` (thousandths of `RESOURCE`'s unit) as the webhook writes it
/// (`injection::resources::describe`): CPU in cores or millicores, anything else in whole
/// units with the largest binary suffix that divides them.
fn quantity(value: &str) -> String {
    let mut bytes = "string(u)".to_owned();
    for (suffix, shift) in [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)] {
        let unit = 1_i64 << shift;
        bytes = format!("(u != 0 && u % {unit} == 0 ? string(u / {unit}) + '{suffix}' : {bytes})");
    }
    format!(
        "[{value}].map(m, {RESOURCE} == 'cpu' ? (m % 1000 == 0 ? string(m / 1000) : string(m) + 'm') \
         : [(m + 999) / 1000].map(u, {bytes})[0])[0]"
    )
}

/// The pod's requests of `RESOURCE`, counted as the kubelet counts them, with the containers
/// `sidecars` add (those of the request that are among them), as a CEL int.
fn aggregate(sidecars: &[&LoadedSidecar], keys: &AnnotationKeys) -> String {
    let own_init = format!(
        "(has(object.spec.initContainers) ? object.spec.initContainers.map(c, [{}, \
         has(c.restartPolicy) && c.restartPolicy == 'Always' ? 1 : 0]) : [])",
        own_request("c")
    );
    let own_app = format!("object.spec.containers.map(c, {})", own_request("c"));
    let front = by_request(sidecars, |s| front(s, keys));
    let back = by_request(sidecars, |s| back(s, keys));
    let app = by_request(sidecars, |s| app(s, keys));
    let init = [front, Some(own_init), back]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    let app = [Some(own_app), app]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    // `[x].map(v, ...)[0]` names a value once for the expression that reads it thrice.
    format!(
        "[{}].map(ii, [{}].map(aa, ([aa.sum() + ii.filter(p, p[1] == 1).map(p, p[0]).sum()] \
         + ii.transformList(i, p, p[0] + ii.slice(0, i).filter(n, n[1] == 1).map(n, n[0]).sum())).max())[0])[0]",
        init.join(" + "),
        app.join(" + ")
    )
}

/// What a pod container requests of `RESOURCE` (its limit where it requests none, as the API
/// server defaults it), as a CEL int.
fn own_request(c: &str) -> String {
    format!(
        "(has({c}.resources) && has({c}.resources.requests) && {RESOURCE} in {c}.resources.requests ? {} \
         : (has({c}.resources) && has({c}.resources.limits) && {RESOURCE} in {c}.resources.limits ? {} : 0))",
        milli(&format!("{c}.resources.requests[{RESOURCE}]")),
        milli(&format!("{c}.resources.limits[{RESOURCE}]"))
    )
}

/// The CEL list each requested sidecar contributes (`pick` of it, for this pod), in request
/// order; `None` when none contributes anything.
fn by_request(
    sidecars: &[&LoadedSidecar],
    pick: impl Fn(&LoadedSidecar) -> Option<String>,
) -> Option<String> {
    let mut chain = "[]".to_owned();
    let mut any = false;
    for sidecar in sidecars.iter().rev() {
        if let Some(list) = pick(sidecar) {
            any = true;
            chain = format!(
                "(r == {} ? {list} : {chain})",
                cel::string(&sidecar.config.name.to_string())
            );
        }
    }
    any.then(|| format!("variables.known.map(r, {chain}).flatten()"))
}

/// A request of `RESOURCE` known here, as a CEL int.
fn known_request(requests: &Requests) -> String {
    if requests.is_empty() {
        return "0".to_owned();
    }
    let map: Vec<String> = requests
        .iter()
        .map(|(name, value)| format!("{}: {value}", cel::string(name)))
        .collect();
    let map = format!("{{{}}}", map.join(", "));
    format!("({RESOURCE} in {map} ? {map}[{RESOURCE}] : 0)")
}

/// `[request, runs beside what follows]` of each container, as a CEL list.
fn pairs<'c>(
    containers: impl Iterator<Item = (&'c k8s_openapi::api::core::v1::Container, bool)>,
) -> Option<String> {
    let pairs: Vec<String> = containers
        .map(|(c, native)| {
            let counted = Counted::of(c, native);
            format!(
                "[{}, {}]",
                known_request(&counted.requests),
                u8::from(native)
            )
        })
        .collect();
    (!pairs.is_empty()).then(|| format!("[{}]", pairs.join(", ")))
}

/// A config's own init containers (native only where they say so), then, natively, its
/// prepended and regular containers.
fn native_list(sidecar: &LoadedSidecar) -> Option<String> {
    let config = &sidecar.config;
    pairs(
        config
            .init_containers
            .iter()
            .map(|c| (c, is_native_sidecar(c)))
            .chain(
                config
                    .prepend_containers
                    .iter()
                    .chain(&config.containers)
                    .map(|c| (c, true)),
            ),
    )
}

fn own_init_list(sidecar: &LoadedSidecar) -> Option<String> {
    pairs(
        sidecar
            .config
            .init_containers
            .iter()
            .map(|c| (c, is_native_sidecar(c))),
    )
}

/// Before the pod's init containers: a native config placed first, when native here.
fn front(sidecar: &LoadedSidecar, keys: &AnnotationKeys) -> Option<String> {
    let cond = native_for(&sidecar.config, keys)?;
    if sidecar.config.native_placement() != NativePlacement::First {
        return None;
    }
    Some(format!("({cond} ? {} : [])", native_list(sidecar)?))
}

/// After the pod's init containers: a classic config's init containers, or a native config
/// placed last.
fn back(sidecar: &LoadedSidecar, keys: &AnnotationKeys) -> Option<String> {
    let classic = own_init_list(sidecar);
    match native_for(&sidecar.config, keys) {
        None => classic,
        Some(cond) => {
            let native = match sidecar.config.native_placement() {
                NativePlacement::First => None,
                NativePlacement::Last => native_list(sidecar),
            };
            if native.is_none() && classic.is_none() {
                return None;
            }
            let or_empty = |list: Option<String>| list.unwrap_or_else(|| "[]".to_owned());
            Some(format!(
                "({cond} ? {} : {})",
                or_empty(native),
                or_empty(classic)
            ))
        }
    }
}

/// Beside the pod's containers: a classic config's prepended and regular containers' requests.
fn app(sidecar: &LoadedSidecar, keys: &AnnotationKeys) -> Option<String> {
    let config = &sidecar.config;
    let requests: Vec<String> = config
        .prepend_containers
        .iter()
        .chain(&config.containers)
        .map(|c| known_request(&Counted::of(c, false).requests))
        .collect();
    if requests.is_empty() {
        return None;
    }
    let list = format!("[{}]", requests.join(", "));
    Some(match native_for(config, keys) {
        None => list,
        Some(cond) => format!("({cond} ? [] : {list})"),
    })
}

/// What the requested sidecars among `adding` add to the pod-level limit of `RESOURCE`: each
/// container's limit, or its request where it sets none; a CEL int.
fn limits_added(adding: &[&LoadedSidecar]) -> String {
    let entries: Vec<String> = adding
        .iter()
        .filter_map(|s| {
            let mut sum = Requests::new();
            for c in s.config.injected_containers() {
                let counted = Counted::of(c, false);
                for (name, request) in &counted.requests {
                    let value = counted.limits.get(name).unwrap_or(request);
                    *sum.entry(name.clone()).or_default() += value;
                }
            }
            (!sum.is_empty()).then(|| {
                let map: Vec<String> = sum
                    .iter()
                    .map(|(name, value)| format!("{}: {value}", cel::string(name)))
                    .collect();
                format!(
                    "{}: {{{}}}",
                    cel::string(&s.config.name.to_string()),
                    map.join(", ")
                )
            })
        })
        .collect();
    if entries.is_empty() {
        return "0".to_owned();
    }
    let table = format!("{{{}}}", entries.join(", "));
    format!(
        "variables.known.map(r, r in {table} && {RESOURCE} in {table}[r] ? {table}[r][{RESOURCE}] : 0).sum()"
    )
}
