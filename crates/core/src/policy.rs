//! Sidecar configs compiled into admission policies the API server runs itself (CEL, in
//! process): a MutatingAdmissionPolicy that injects what the webhook injects and stamps the
//! same annotations, and a ValidatingAdmissionPolicy that refuses what the webhook refuses.
//! Pure: configs and settings in, the objects out, or each config the policies cannot inject
//! exactly as the webhook does, with the reason.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use crate::annotations::AnnotationKeys;
use crate::config::{LoadedSidecar, SidecarSet};
use crate::injection::MissingSidecarPolicy;

mod cel;
mod containers;
mod pod_resources;
use containers::{appended, classic_containers, native_containers};

/// What the policies are named and labelled by (`kubectl get mutatingadmissionpolicies -l
/// app.kubernetes.io/managed-by=sidecar-injector`).
pub const MANAGED_BY: &str = "sidecar-injector";

/// What the policies follow of the webhook's settings.
#[derive(Clone, Debug)]
pub struct PolicySettings<'a> {
    pub keys: &'a AnnotationKeys,
    pub ignored_namespaces: &'a BTreeSet<String>,
    pub on_missing_sidecar: MissingSidecarPolicy,
    /// The objects' name.
    pub name: &'a str,
    /// The namespaces the bindings reach (all but the ignored ones without it), as the
    /// webhook configuration's `namespaceSelector` does.
    pub namespace_selector: Option<&'a LabelSelector>,
}

/// A rule of a config the policy mode does not express, so that config is refused rather
/// than injected differently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsupported {
    NativeSidecars,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unsupported::NativeSidecars => {
                "nativeSidecars: auto: the form follows the nodes' kubelets, which a policy does not see (true or jobs can be compiled)"
            }
        })
    }
}

/// A config the policies cannot inject, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{sidecar} ({origin}): {reason}")]
pub struct Refused {
    pub sidecar: String,
    pub origin: String,
    pub reason: Unsupported,
}

/// Why `sidecar` cannot be compiled, if it cannot.
pub fn unsupported(sidecar: &LoadedSidecar) -> Vec<Unsupported> {
    let config = &sidecar.config;
    let mut why = Vec::new();
    if config.native_sidecars() == crate::config::NativeSidecars::Auto {
        why.push(Unsupported::NativeSidecars);
    }
    why
}

/// Under `serve --injection=policy`, each config of `report` the policies cannot express
/// becomes an error of its origin, so its source keeps the last good version of it, as for a
/// broken config.
pub fn screen(report: &mut crate::config::LoadReport) {
    let (kept, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut report.sidecars)
        .into_iter()
        .partition(|s| unsupported(s).is_empty());
    report.sidecars = kept;
    for sidecar in refused {
        for reason in unsupported(&sidecar) {
            report
                .errors
                .push(crate::config::ConfigError::not_in_policy_mode(
                    sidecar.origin.clone(),
                    reason,
                ));
        }
    }
}

/// The largest policy written: etcd stores objects of 1.5 MiB at most, and the API server
/// needs room beside the object.
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;

/// Why no policies are printed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Configs the policies cannot express, each rule with its reason.
    #[error("{} rule(s) of the configs are not expressed by the policies", .0.len())]
    Refused(Vec<Refused>),
    /// Each position of a request repeats every config's patch, so the policy grows with the
    /// square of the number of configs.
    #[error(
        "the MutatingAdmissionPolicy for {configs} configs would be {bytes} bytes, over the {MAX_POLICY_BYTES} the API server can store: render fewer configs a policy (--name, with a --config-directory each)"
    )]
    TooLarge { configs: usize, bytes: usize },
}

/// The MutatingAdmissionPolicy, the ValidatingAdmissionPolicy and their bindings for
/// `sidecars`, in the order to apply them; or every config they cannot express.
pub fn render(
    sidecars: &SidecarSet,
    settings: &PolicySettings<'_>,
) -> Result<Vec<Value>, PolicyError> {
    let refused: Vec<Refused> = sidecars
        .iter()
        .flat_map(|s| {
            unsupported(s).into_iter().map(|reason| Refused {
                sidecar: s.config.name.to_string(),
                origin: s.origin.to_string(),
                reason,
            })
        })
        .collect();
    if !refused.is_empty() {
        return Err(PolicyError::Refused(refused));
    }
    let sidecars: Vec<&LoadedSidecar> = sidecars.iter().map(AsRef::as_ref).collect();
    let mutating = mutating_policy(&sidecars, settings);
    let bytes = mutating.to_string().len();
    if bytes > MAX_POLICY_BYTES {
        return Err(PolicyError::TooLarge {
            configs: sidecars.len(),
            bytes,
        });
    }
    Ok(vec![
        mutating,
        binding("MutatingAdmissionPolicyBinding", settings),
        validating_policy(&sidecars, settings),
        binding("ValidatingAdmissionPolicyBinding", settings),
    ])
}

fn metadata(settings: &PolicySettings<'_>) -> Value {
    json!({
        "name": settings.name,
        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
    })
}

/// Pods created outside the ignored namespaces.
fn match_constraints(settings: &PolicySettings<'_>) -> Value {
    let mut constraints = json!({
        "resourceRules": [{
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
        }],
    });
    if !settings.ignored_namespaces.is_empty() {
        constraints["namespaceSelector"] = json!({"matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": settings.ignored_namespaces,
        }]});
    }
    constraints
}

fn binding(kind: &str, settings: &PolicySettings<'_>) -> Value {
    let mut spec = json!({"policyName": settings.name});
    if kind == "ValidatingAdmissionPolicyBinding" {
        spec["validationActions"] = json!(["Deny"]);
    }
    if let Some(selector) = settings.namespace_selector {
        spec["matchResources"] = json!({"namespaceSelector": selector});
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(settings),
        "spec": spec,
    })
}

/// The CEL variables both policies start from: the request, its sidecar names as the webhook
/// reads them (trimmed, lowercased, `:latest` when unversioned, each once), and those a config
/// defines.
fn variables(sidecars: &[&LoadedSidecar], keys: &AnnotationKeys) -> Value {
    let request = cel::string(&keys.request);
    let known: Vec<String> = sidecars
        .iter()
        .map(|s| cel::string(&s.config.name.to_string()))
        .collect();
    json!([
        {"name": "requested", "expression": format!(
            "object.metadata.annotations[{request}].split(',').map(r, r.trim()).filter(r, r != '')\
             .map(r, r.lowerAscii()).map(r, r.contains(':') ? r : r + ':{}').distinct()",
            crate::name::DEFAULT_VERSION
        )},
        {"name": "known", "expression": format!(
            "variables.requested.filter(r, r in [{}])", known.join(", ")
        )},
    ])
}

/// The pod requests a sidecar and was not injected yet (a copied manifest's status counts).
fn match_conditions(keys: &AnnotationKeys) -> Value {
    let request = cel::string(&keys.request);
    let status = cel::string(&keys.status);
    json!([
        {"name": "requests-a-sidecar", "expression": format!(
            "has(object.metadata.annotations) && {request} in object.metadata.annotations"
        )},
        {"name": "not-injected-yet", "expression": format!(
            "!({status} in object.metadata.annotations) || object.metadata.annotations[{status}] != 'injected'"
        )},
    ])
}

fn mutating_policy(sidecars: &[&LoadedSidecar], settings: &PolicySettings<'_>) -> Value {
    let keys = settings.keys;
    // Each mutation sees the object as the ones before left it, so the decision to inject is
    // taken once, by the first, on the pod as it came: it stamps the pod, and the others act
    // on a stamped pod only (one stamped before us is left out by the match conditions).
    let stamped = format!(
        "object.metadata.annotations[{}] == 'injected'",
        cel::string(&keys.status)
    );
    let mut mutations = stamp_mutations(sidecars, keys, &stamped);
    // On the pod as it came: it places the sidecars' containers itself.
    mutations.extend(pod_resources::mutation(sidecars, keys, &stamped));
    mutations.extend(injection_mutations(sidecars, keys, &stamped));
    // With `--on-missing-sidecar deny`, a request naming an unknown sidecar gets nothing
    // here, and the validating policy refuses it.
    let complete = match settings.on_missing_sidecar {
        MissingSidecarPolicy::Deny => "variables.requested.all(r, r in variables.known)",
        MissingSidecarPolicy::Allow => "true",
    };
    let mut variables = variables(sidecars, keys);
    let list = variables.as_array_mut().expect("a list");
    list.push(json!({"name": "names_conflict", "expression": names_conflict(sidecars)}));
    list.push(json!({"name": "inject", "expression": format!(
        "size(variables.known) > 0 && !variables.names_conflict && {complete}"
    )}));
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": metadata(settings),
        "spec": {
            "matchConstraints": match_constraints(settings),
            "matchConditions": match_conditions(keys),
            "variables": variables,
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "mutations": mutations,
        },
    })
}

/// The first mutations: the status and revision stamp (in request order), and the removal of
/// a native-form annotation copied from another pod's manifest (it would tell drift a wrong
/// form).
fn stamp_mutations(
    sidecars: &[&LoadedSidecar],
    keys: &AnnotationKeys,
    stamped: &str,
) -> Vec<Value> {
    let revisions: Vec<String> = sidecars
        .iter()
        .map(|s| {
            format!(
                "{}: {}",
                cel::string(&s.config.name.to_string()),
                cel::string(&s.revision.to_string())
            )
        })
        .collect();
    let (status, revision, native) = (
        cel::string(&keys.status),
        cel::string(&keys.revision),
        cel::string(&keys.injected_native),
    );
    let natively = injected_natively(sidecars, keys);
    let stamp = |extra: &str| {
        format!(
            "Object{{metadata: Object.metadata{{annotations: {{{status}: 'injected', \
             {revision}: variables.known.map(r, r + '=' + {{{}}}[r]).join(','){extra}}}}}}}",
            revisions.join(", ")
        )
    };
    vec![
        json!({
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": format!(
                "variables.inject ? (size({natively}) > 0 ? {} : {}) : Object{{}}",
                stamp(&format!(", {native}: {natively}.join(',')")),
                stamp("")
            )},
        }),
        // Copied from another pod's manifest, it would tell drift a wrong form.
        json!({
            "patchType": "JSONPatch",
            "jsonPatch": {"expression": format!(
                "{stamped} && {native} in object.metadata.annotations && size({natively}) == 0 ? \
                 [JSONPatch{{op: 'remove', path: '/metadata/annotations/' + jsonpatch.escapeKey({native})}}] : []"
            )},
        }),
    ]
}

/// A mutation a position of the request, so that sidecars go in in request order, each seeing
/// what the ones before it added (the webhook's env and mounts go to the containers injected
/// before too). JSON patches: an apply configuration may not set atomic lists and structs (a
/// new container's args, an env entry's fieldRef).
fn injection_mutations(
    sidecars: &[&LoadedSidecar],
    keys: &AnnotationKeys,
    stamped: &str,
) -> Vec<Value> {
    // Each sidecar's patch once; every position that may name it repeats it (CEL variables
    // cannot build patches: `Object` and `JSONPatch` exist in mutations only).
    let patches: Vec<SidecarPatch> = sidecars
        .iter()
        .map(|sidecar| {
            let name = cel::string(&sidecar.config.name.to_string());
            let before = Before {
                prepended: placed_before(sidecars, keys, &name, false),
                init_front: placed_before(sidecars, keys, &name, true),
            };
            SidecarPatch {
                account: account(&sidecar.config).map(service_account),
                patch: added(sidecar, keys, &before),
                name,
            }
        })
        .collect();
    let accounts = patches.iter().any(|p| p.account.is_some());
    let mut mutations = Vec::new();
    for position in 0..sidecars.len() {
        let chain = |pick: &dyn Fn(&SidecarPatch) -> Option<String>| {
            let mut patch = String::from("[]");
            for entry in patches.iter().rev() {
                if let Some(ops) = pick(entry) {
                    patch = format!(
                        "variables.known[{position}] == {} ? {ops} : {patch}",
                        entry.name
                    );
                }
            }
            json!({
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": format!(
                    "{stamped} && size(variables.known) > {position} ? ({patch}) : []"
                )},
            })
        };
        // The account first, on its own: what follows sees the legacy token's mounts gone.
        if accounts {
            mutations.push(chain(&|p| p.account.clone()));
        }
        mutations.push(chain(&|p| Some(p.patch.clone())));
    }
    mutations
}

/// A sidecar's name (CEL) and its patches: the account's, and the rest.
struct SidecarPatch {
    name: String,
    account: Option<String>,
    patch: String,
}

/// The account a config gives the pods (`default` gives none).
fn account(config: &crate::config::SidecarConfig) -> Option<&str> {
    config
        .service_account_name
        .as_deref()
        .filter(|a| *a != "default")
}

/// A pod on no account or the default one gets `account`; the default account's legacy token
/// (a `default-token-*` secret volume, and its mounts) would give it the wrong identity and
/// goes, as the webhook removes it (projected `kube-api-access-*` volumes follow the account).
fn service_account(account: &str) -> String {
    let account = cel::string(account);
    let current = "(has(object.spec.serviceAccountName) && object.spec.serviceAccountName != '' \
        ? object.spec.serviceAccountName \
        : (has(object.spec.serviceAccount) ? object.spec.serviceAccount : ''))";
    let legacy = "(has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.secret) \
        && v.name.startsWith('default-token-')).map(v, v.name) : [])";
    let mounts = |list: &str| {
        let each = format!(
            "lists.range(size(object.spec.{list})).map(ci, has(object.spec.{list}[ci].volumeMounts) \
             ? lists.range(size(object.spec.{list}[ci].volumeMounts)) \
               .filter(mi, object.spec.{list}[ci].volumeMounts[mi].name in {legacy}).reverse() \
               .map(mi, JSONPatch{{op: 'remove', path: '/spec/{list}/' + string(ci) + '/volumeMounts/' + string(mi)}}) \
             : []).flatten()"
        );
        if list == "containers" {
            each
        } else {
            format!("(has(object.spec.{list}) ? {each} : [])")
        }
    };
    format!(
        "({current} in ['', 'default'] ? \
         [JSONPatch{{op: 'add', path: '/spec/serviceAccountName', value: {account}}}] \
         + (has(object.spec.serviceAccount) ? [JSONPatch{{op: 'add', path: '/spec/serviceAccount', value: {account}}}] : []) \
         + {} + {} \
         + (has(object.spec.volumes) ? lists.range(size(object.spec.volumes)) \
           .filter(i, object.spec.volumes[i].name in {legacy}).reverse() \
           .map(i, JSONPatch{{op: 'remove', path: '/spec/volumes/' + string(i)}}) : []) \
         : [])",
        mounts("containers"),
        mounts("initContainers")
    )
}

/// How many containers the sidecars before `name` in the request put before the pod's
/// (`init`: before the pod's init containers, natively placed first), as a CEL int.
fn placed_before(
    sidecars: &[&LoadedSidecar],
    keys: &AnnotationKeys,
    name: &str,
    init: bool,
) -> String {
    let mut counts = Vec::new();
    for s in sidecars {
        let config = &s.config;
        let native = native_for(config, keys);
        let first = config.native_placement() == crate::config::NativePlacement::First;
        let count = if init {
            match (&native, first) {
                (Some(cond), true) => {
                    let count = config.init_containers.len()
                        + config.prepend_containers.len()
                        + config.containers.len();
                    format!("({cond} ? {count} : 0)")
                }
                _ => continue,
            }
        } else {
            let count = config.prepend_containers.len();
            match &native {
                _ if count == 0 => continue,
                Some(cond) => format!("({cond} ? 0 : {count})"),
                None => count.to_string(),
            }
        };
        counts.push(format!(
            "{}: {count}",
            cel::string(&config.name.to_string())
        ));
    }
    if counts.is_empty() {
        return "0".to_owned();
    }
    format!(
        "variables.known.slice(0, variables.known.indexOf({name})).map(r, r in {{{0}}} ? {{{0}}}[r] : 0).sum()",
        counts.join(", ")
    )
}

/// When `config`'s sidecars go into a pod natively, as a CEL bool on the pod as it came (its
/// controller and its `NS/native-sidecars` annotation, which nothing here changes); `None`
/// when never.
fn native_for(config: &crate::config::SidecarConfig, keys: &AnnotationKeys) -> Option<String> {
    use crate::config::NativeSidecars;
    let key = cel::string(&keys.native_sidecars);
    let kept_classic = format!(
        "(has(object.metadata.annotations) && {key} in object.metadata.annotations \
         && object.metadata.annotations[{key}].trim().lowerAscii() == 'false')"
    );
    let job = "(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, \
        has(o.controller) && o.controller && o.kind == 'Job' && o.apiVersion.startsWith('batch/')))";
    match config.native_sidecars() {
        NativeSidecars::Never => None,
        NativeSidecars::Always => Some(format!("!{kept_classic}")),
        NativeSidecars::Jobs => Some(format!("(!{kept_classic} && {job})")),
        // Refused by `unsupported`.
        NativeSidecars::Auto => Some("false".to_owned()),
    }
}

/// The requested sidecars that go into this pod natively and run sidecars there (those the
/// `NS/injected-native` annotation names), in request order: a CEL list.
fn injected_natively(sidecars: &[&LoadedSidecar], keys: &AnnotationKeys) -> String {
    let mut chain = String::from("false");
    for s in sidecars.iter().rev() {
        if !s.config.runs_sidecars() {
            continue;
        }
        if let Some(cond) = native_for(&s.config, keys) {
            chain = format!(
                "(r == {} ? {cond} : {chain})",
                cel::string(&s.config.name.to_string())
            );
        }
    }
    format!("variables.known.filter(r, {chain})")
}

/// A container of the pod already has the name of a container a requested sidecar injects:
/// nothing is injected, and the validating policy refuses the pod, as the webhook does.
fn names_conflict(sidecars: &[&LoadedSidecar]) -> String {
    let pairs: Vec<String> = sidecars
        .iter()
        .flat_map(|s| {
            s.config.injected_containers().map(move |c| {
                format!(
                    "(r == {} && n == {})",
                    cel::string(&s.config.name.to_string()),
                    cel::string(&c.name)
                )
            })
        })
        .collect();
    if pairs.is_empty() {
        return "false".to_owned();
    }
    let with_pod = format!(
        "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : []))\
         .map(c, c.name).exists(n, variables.known.exists(r, {}))",
        pairs.join(" || ")
    );
    // Two requested sidecars that inject a container of the same name.
    let mut together = Vec::new();
    for (n, a) in sidecars.iter().enumerate() {
        for b in &sidecars[n + 1..] {
            let shared = a
                .config
                .injected_containers()
                .any(|x| b.config.injected_containers().any(|y| y.name == x.name));
            if shared {
                together.push(format!(
                    "({} in variables.known && {} in variables.known)",
                    cel::string(&a.config.name.to_string()),
                    cel::string(&b.config.name.to_string())
                ));
            }
        }
    }
    together.insert(0, with_pod);
    together.join(" || ")
}

/// The JSON patch of the env and mounts `sidecar` gives each container the pod has as
/// `object` stands, unless it has one of that name (a mount: of that name or path), appended
/// to its lists in the config's order.
fn env_and_mounts(sidecar: &LoadedSidecar) -> Option<String> {
    let rendered = &sidecar.rendered;
    let lists = [
        (
            "env",
            rendered
                .env
                .iter()
                .map(|e| cel::object(&e.value, "Object.spec.containers.env"))
                .collect::<Vec<_>>(),
            "x.name == a.name",
        ),
        (
            "volumeMounts",
            rendered
                .volume_mounts
                .iter()
                .map(|m| cel::object(&m.value, "Object.spec.containers.volumeMounts"))
                .collect(),
            "x.name == a.name || x.mountPath == a.mountPath",
        ),
    ];
    let mut ops = Vec::new();
    for (field, items, same) in lists {
        if items.is_empty() {
            continue;
        }
        let missing = format!(
            "[{}].filter(a, !has(c.{field}) || !c.{field}.exists(x, {same}))",
            items.join(", ")
        );
        // The pod's init containers get them too, as the webhook gives them.
        for list in ["containers", "initContainers"] {
            let at = format!(
                "'/spec/{list}/' + string(object.spec.{list}.map(x, x.name).indexOf(c.name))"
            );
            let each = format!(
                "object.spec.{list}.map(c, {}).flatten()",
                appended(
                    &format!("{at} + '/{field}'"),
                    &format!("has(c.{field})"),
                    &missing
                )
            );
            ops.push(if list == "containers" {
                each
            } else {
                format!("(has(object.spec.{list}) ? {each} : [])")
            });
        }
    }
    (!ops.is_empty()).then(|| ops.join(" + "))
}

/// Where the sidecars before a position of the request put containers: before the pod's
/// containers (classic `prependContainers`), before its init containers (native, placed
/// first); CEL ints.
struct Before {
    prepended: String,
    init_front: String,
}

/// The JSON patch of what injecting `sidecar` does to the pod as `object` stands: the env and
/// mounts of its containers, its own containers in the form this pod gets them, and the pod's
/// fields.
fn added(sidecar: &LoadedSidecar, keys: &AnnotationKeys, before: &Before) -> String {
    let containers = match native_for(&sidecar.config, keys) {
        None => join(classic_containers(sidecar, &before.prepended)),
        Some(cond) => format!(
            "({cond} ? {} : {})",
            join(native_containers(sidecar, &before.init_front)),
            join(classic_containers(sidecar, &before.prepended))
        ),
    };
    let lists: Vec<String> = env_and_mounts(sidecar)
        .into_iter()
        .chain([containers])
        .chain(pod_fields(sidecar))
        .collect();
    join(lists)
}

fn join(lists: Vec<String>) -> String {
    if lists.is_empty() {
        return "[]".to_owned();
    }
    lists.join(" + ")
}

/// Its volumes and host aliases the pod lacks (a volume of that name, an alias of that IP and
/// those hostnames), hostNetwork and hostPID.
fn pod_fields(sidecar: &LoadedSidecar) -> Vec<String> {
    let rendered = &sidecar.rendered;
    let mut lists = Vec::new();
    if !rendered.volumes.is_empty() {
        let volumes: Vec<String> = rendered
            .volumes
            .iter()
            .map(|v| cel::object(&v.value, "Object.spec.volumes"))
            .collect();
        let missing = format!(
            "[{}].filter(v, !has(object.spec.volumes) || !object.spec.volumes.exists(x, x.name == v.name))",
            volumes.join(", ")
        );
        lists.push(appended(
            "'/spec/volumes'",
            "has(object.spec.volumes)",
            &missing,
        ));
    }
    if !rendered.host_aliases.is_empty() {
        let aliases: Vec<String> = rendered
            .host_aliases
            .iter()
            .map(|a| cel::object(&a.value, "Object.spec.hostAliases"))
            .collect();
        let names = |v: &str| format!("(has({v}.hostnames) ? {v}.hostnames : [])");
        let missing = format!(
            "[{}].filter(a, !has(object.spec.hostAliases) || !object.spec.hostAliases.exists(x, x.ip == a.ip && {} == {}))",
            aliases.join(", "),
            names("x"),
            names("a")
        );
        lists.push(appended(
            "'/spec/hostAliases'",
            "has(object.spec.hostAliases)",
            &missing,
        ));
    }
    for (on, field) in [
        (sidecar.config.host_network, "hostNetwork"),
        (sidecar.config.host_pid, "hostPID"),
    ] {
        if on {
            lists.push(format!(
                "[JSONPatch{{op: 'add', path: '/spec/{field}', value: true}}]"
            ));
        }
    }
    lists
}

/// Refuses what the webhook refuses: a request for a sidecar no config defines (unless
/// `--on-missing-sidecar allow`), and a pod whose container has the name of one a requested
/// sidecar injects.
fn validating_policy(sidecars: &[&LoadedSidecar], settings: &PolicySettings<'_>) -> Value {
    let keys = settings.keys;
    let mut validations = vec![json!({
        "expression": format!("!({})", names_conflict(sidecars)),
        "messageExpression": "'a container name would be there twice if ' + variables.known.join(', ') + ' were injected (one of the pod\\'s, or of two sidecars requested together): rename it'",
        "reason": "Invalid",
    })];
    if settings.on_missing_sidecar == MissingSidecarPolicy::Deny {
        let known: Vec<String> = sidecars.iter().map(|s| s.config.name.to_string()).collect();
        validations.push(json!({
            "expression": "variables.requested.all(r, r in variables.known)",
            "messageExpression": format!(
                "'no sidecar config named ' + variables.requested.filter(r, !(r in variables.known)).join(', ') + {}",
                cel::string(&format!(" (known: {})", known.join(", ")))
            ),
            "reason": "Invalid",
        }));
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(settings),
        "spec": {
            "matchConstraints": match_constraints(settings),
            "matchConditions": match_conditions(keys),
            "variables": variables(sidecars, keys),
            "failurePolicy": "Fail",
            "validations": validations,
        },
    })
}

#[cfg(test)]
mod tests;
