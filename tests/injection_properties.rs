//! Property tests of injection over generated pods and configs: the patch applies with the
//! json-patch crate, the result is a valid Pod, every requested sidecar's containers appear
//! exactly once, nothing is duplicated, and a second injection changes nothing.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};
use sidecar_injector::config::{LoadedSidecar, SidecarSet, parse_config};
use sidecar_injector::injection::{Decision, InjectionSettings, PodView, SkipReason, decide};

const ENV_NAMES: &[&str] = &["A", "B", "LOG_ENDPOINT", "PORT"];
const MOUNTS: &[(&str, &str)] = &[
    ("data", "/data"),
    ("logs", "/var/log"),
    ("cache", "/cache"),
    ("logs", "/logs"),
    ("scratch", "/data"),
];
const VOLUMES: &[&str] = &["data", "logs", "cache", "default-token-abcde"];

/// Values that read like another entry's name, or that force escapes into the list's JSON,
/// as well as plain ones: injection must tell a name from a value that reads like one.
const ENV_VALUES: &[&str] = &["pod", "A", "LOG_ENDPOINT", "say \"hi\""];

fn env_list() -> impl Strategy<Value = Option<Vec<Value>>> {
    proptest::option::of(
        proptest::sample::subsequence(ENV_NAMES, 0..=ENV_NAMES.len())
            .prop_flat_map(|names| {
                let values =
                    proptest::collection::vec(proptest::sample::select(ENV_VALUES), names.len());
                (Just(names), values)
            })
            .prop_map(|(names, values)| {
                names
                    .into_iter()
                    .zip(values)
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect()
            }),
    )
}

fn mount_list() -> impl Strategy<Value = Option<Vec<Value>>> {
    proptest::option::of(
        proptest::sample::subsequence(MOUNTS, 0..=2).prop_map(|mounts| {
            // A valid pod never mounts two volumes at one path.
            let mut paths = BTreeSet::new();
            mounts
                .into_iter()
                .filter(|(_, path)| paths.insert(*path))
                .map(|(name, path)| json!({"name": name, "mountPath": path}))
                .collect()
        }),
    )
}

fn container(name: String) -> impl Strategy<Value = Value> {
    (env_list(), mount_list()).prop_map(move |(env, mounts)| {
        let mut c = json!({"name": name, "image": "img:1"});
        if let Some(env) = env {
            c["env"] = json!(env);
        }
        if let Some(mounts) = mounts {
            c["volumeMounts"] = json!(mounts);
        }
        c
    })
}

fn containers(
    prefix: &'static str,
    range: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<Value>> {
    range.prop_flat_map(move |n| {
        (0..n)
            .map(|i| container(format!("{prefix}-{i}")))
            .collect::<Vec<_>>()
    })
}

/// A sidecar config as JSON text (JSON is YAML, so the real parser reads it).
fn config(index: usize) -> impl Strategy<Value = String> {
    (
        containers("c", 0..3),
        containers("p", 0..2),
        containers("i", 0..2),
        proptest::sample::subsequence(ENV_NAMES, 0..=2),
        proptest::sample::subsequence(MOUNTS, 0..=2),
        proptest::sample::subsequence(&VOLUMES[..3], 0..=2),
        proptest::option::of(prop_oneof![Just("default"), Just("agent")]),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(containers, prepend, init, env, mounts, volumes, account, net, pid, alias, native, last)| {
            let rename = |list: Vec<Value>| -> Vec<Value> {
                list.into_iter()
                    .map(|mut c| {
                        c["name"] = json!(format!("s{index}-{}", c["name"].as_str().unwrap()));
                        c
                    })
                    .collect()
            };
            let mut config = json!({
                "name": format!("sidecar-{index}:v1"),
                "containers": rename(containers),
                "prependContainers": rename(prepend),
                "initContainers": rename(init),
                "env": env.iter().map(|n| json!({"name": n, "value": format!("sidecar-{index}")})).collect::<Vec<_>>(),
                "volumeMounts": mounts.iter().map(|(n, p)| json!({"name": n, "mountPath": p})).collect::<Vec<_>>(),
                "volumes": volumes.iter().map(|n| json!({"name": n, "emptyDir": {}})).collect::<Vec<_>>(),
                "hostNetwork": net,
                "hostPID": pid,
            });
            if let Some(account) = account {
                config["serviceAccountName"] = json!(account);
            }
            if native {
                config["nativeSidecars"] = json!(true);
                config["nativeSidecarPlacement"] = json!(if last { "last" } else { "first" });
            }
            if alias {
                config["hostAliases"] = json!([{"ip": format!("10.0.0.{index}"), "hostnames": ["x.internal"]}]);
            }
            config.to_string()
        })
}

fn pod() -> impl Strategy<Value = Value> {
    (
        containers("app", 0..4),
        proptest::option::of(containers("init", 0..3)),
        proptest::option::of(proptest::sample::subsequence(VOLUMES, 0..=VOLUMES.len())),
        proptest::option::of(prop_oneof![Just("default"), Just("team-app")]),
        proptest::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(containers, init, volumes, account, host_network, has_containers)| {
            let mut spec = json!({});
            if has_containers || !containers.is_empty() {
                spec["containers"] = json!(containers);
            }
            if let Some(init) = init {
                spec["initContainers"] = json!(init);
            }
            if let Some(volumes) = volumes {
                spec["volumes"] = json!(volumes
                    .iter()
                    .map(|n| if n.starts_with("default-token-") {
                        json!({"name": n, "secret": {"secretName": n}})
                    } else {
                        json!({"name": n, "emptyDir": {}})
                    })
                    .collect::<Vec<_>>());
            }
            if let Some(account) = account {
                spec["serviceAccountName"] = json!(account);
            }
            if let Some(host_network) = host_network {
                spec["hostNetwork"] = json!(host_network);
            }
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {}}, "spec": spec})
        })
}

fn case() -> impl Strategy<Value = (Value, Vec<String>, Vec<usize>)> {
    (
        pod(),
        (1usize..4).prop_flat_map(|n| (0..n).map(config).collect::<Vec<_>>()),
    )
        .prop_flat_map(|(pod, configs)| {
            let n = configs.len();
            (
                Just(pod),
                Just(configs),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
        .prop_flat_map(|(pod, configs, order)| {
            let n = order.len();
            (
                Just(pod),
                Just(configs),
                proptest::sample::subsequence(order, 1..=n),
            )
        })
}

fn load(configs: &[String]) -> SidecarSet {
    configs
        .iter()
        .map(|text| {
            let config = parse_config("generated", text)
                .expect("generated configs are valid")
                .config;
            LoadedSidecar::new(config, "generated")
        })
        .collect()
}

fn spec_list(pod: &Value, key: &str) -> Vec<Value> {
    pod["spec"][key].as_array().cloned().unwrap_or_default()
}

fn container_names(pod: &Value) -> Vec<String> {
    ["containers", "initContainers"]
        .iter()
        .flat_map(|list| pod["spec"][list].as_array().cloned().unwrap_or_default())
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn injection_applies_yields_a_pod_and_is_idempotent((mut pod, configs, order) in case()) {
        let sidecars = load(&configs);
        let requested: Vec<String> = order.iter().map(|i| format!("sidecar-{i}:v1")).collect();
        pod["metadata"]["annotations"]["injector/request"] = json!(requested.join(", "));
        let settings = InjectionSettings::default();

        let view = PodView::deserialize(&pod).unwrap();
        let Decision::Inject(injection) = decide(&view, "team-a", &sidecars, &settings) else {
            panic!("expected an injection");
        };
        // The webhook writes the patch by hand; it must be what serde writes.
        let mut written = Vec::new();
        injection.patch.write_json(&mut written).unwrap();
        prop_assert_eq!(written, serde_json::to_vec(&injection.patch).unwrap());
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &injection.patch.to_json_patch()).expect("the patch applies");
        let typed: Pod = serde_json::from_value(patched.clone()).expect("the result is a Pod");
        let spec = typed.spec.expect("a spec");

        // Each requested sidecar's containers appear exactly once; the pod's own are kept.
        let names = container_names(&patched);
        for index in &order {
            let sidecar = sidecars.get(&format!("sidecar-{index}:v1").parse().unwrap()).unwrap();
            for container in sidecar.config.injected_containers() {
                prop_assert_eq!(names.iter().filter(|n| **n == container.name).count(), 1);
            }
        }
        for own in container_names(&pod) {
            prop_assert!(names.contains(&own));
        }
        // A native config's containers are init containers that restart, a classic one's
        // regular containers; the pod's own init containers keep their order; the pod names
        // exactly the sidecars it got natively.
        let list = |key: &str| spec_list(&patched, key);
        let mut natively = Vec::new();
        for index in &order {
            let config: Value = serde_json::from_str(&configs[*index]).unwrap();
            let sidecars_of: Vec<Value> = ["containers", "prependContainers"]
                .iter()
                .flat_map(|key| config[key].as_array().cloned().unwrap_or_default())
                .collect();
            let is_native = config["nativeSidecars"] == json!(true);
            for container in &sidecars_of {
                let in_init = list("initContainers").iter().find(|c| c["name"] == container["name"]).cloned();
                prop_assert_eq!(in_init.is_some(), is_native, "{}", container["name"]);
                if let Some(init) = in_init {
                    prop_assert_eq!(&init["restartPolicy"], &json!("Always"));
                }
            }
            if is_native && !sidecars_of.is_empty() {
                natively.push(format!("sidecar-{index}:v1"));
            }
        }
        let own_init: Vec<Value> = spec_list(&pod, "initContainers").into_iter().map(|c| c["name"].clone()).collect();
        let kept: Vec<Value> = list("initContainers").into_iter().map(|c| c["name"].clone()).filter(|n| own_init.contains(n)).collect();
        prop_assert_eq!(kept, own_init);
        let said = patched["metadata"]["annotations"]["injector/injected-native"].as_str().map(str::to_owned);
        prop_assert_eq!(said, (!natively.is_empty()).then(|| natively.join(",")));
        let unique: BTreeSet<&String> = names.iter().collect();
        prop_assert_eq!(unique.len(), names.len(), "container names are unique");

        // Nothing is duplicated: env names per container, volume names.
        for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
            let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
            let distinct: BTreeSet<&str> = env.iter().copied().collect();
            prop_assert_eq!(distinct.len(), env.len(), "duplicate env in {}", c.name);
            let paths: Vec<&str> = c.volume_mounts.iter().flatten().map(|m| m.mount_path.as_str()).collect();
            let distinct: BTreeSet<&str> = paths.iter().copied().collect();
            prop_assert_eq!(distinct.len(), paths.len(), "duplicate mountPath in {}", c.name);
        }
        let volumes: Vec<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        let distinct: BTreeSet<&str> = volumes.iter().copied().collect();
        prop_assert_eq!(distinct.len(), volumes.len(), "duplicate volume");

        // The stamp lists exactly what was requested, in request order.
        let annotations = typed.metadata.annotations.unwrap();
        prop_assert_eq!(annotations.get("injector/status").map(String::as_str), Some("injected"));
        let stamped: Vec<&str> = annotations["injector/revision"].split(',').map(|i| i.split('=').next().unwrap()).collect();
        prop_assert_eq!(stamped, requested.iter().map(String::as_str).collect::<Vec<_>>());

        // A second pass over the result yields no patch.
        let again = PodView::deserialize(&patched).unwrap();
        prop_assert_eq!(decide(&again, "team-a", &sidecars, &settings), Decision::Skip(SkipReason::AlreadyInjected));
    }
}
