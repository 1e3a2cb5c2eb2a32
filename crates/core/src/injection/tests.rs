use serde_json::{Value, json};

use serde::Deserialize;

use super::*;
use crate::config::{LoadedSidecar, parse_config};

/// Sidecar configs from YAML, as the loader would produce them.
fn sidecars(configs: &[&str]) -> SidecarSet {
    configs
        .iter()
        .map(|text| {
            let config = parse_config("test.yaml", text)
                .unwrap_or_else(|e| panic!("{e}"))
                .config;
            LoadedSidecar::new(config, "test.yaml")
        })
        .collect()
}

const LOGGER_V1: &str = r#"
name: logger:v1
containers:
  - name: log-shipper
    image: shipper:1
    env: [{name: SHIPPER_ONLY, value: "1"}]
volumes:
  - {name: app-logs, emptyDir: {}}
env:
  - {name: LOG_ENDPOINT, value: http://collector}
volumeMounts:
  - {name: app-logs, mountPath: /var/log/app}
"#;

const LOGGER_V2: &str = r#"
name: logger:v2
containers:
  - {name: log-shipper, image: shipper:2}
"#;

const METRICS: &str = r#"
name: metrics:v1
containers:
  - {name: metrics-agent, image: agent:1}
prependContainers:
  - {name: metrics-first, image: first:1}
env:
  - {name: METRICS_PORT, value: "9102"}
hostAliases:
  - {ip: 10.0.0.9, hostnames: [metrics.internal]}
"#;

const SECRETS: &str = r#"
name: secrets:v1
serviceAccountName: secrets-agent
initContainers:
  - {name: secrets-init, image: vault:1}
"#;

/// A pod as the apiserver sends it, built up by each test.
struct PodBuilder(Value);

impl PodBuilder {
    fn new() -> Self {
        PodBuilder(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "annotations": {}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}
        }))
    }

    fn request(self, request: &str) -> Self {
        self.annotation("injector/request", request)
    }

    fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }

    fn spec(mut self, key: &str, value: Value) -> Self {
        self.0["spec"][key] = value;
        self
    }

    fn without_spec(mut self, key: &str) -> Self {
        self.0["spec"].as_object_mut().unwrap().remove(key);
        self
    }

    fn build(self) -> Value {
        self.0
    }
}

fn decide_on<'s>(
    pod: &Value,
    namespace: &str,
    set: &'s SidecarSet,
    settings: &InjectionSettings,
) -> Decision<'s> {
    let view = PodView::deserialize(pod).expect("the pod parses");
    decide(&view, namespace, set, settings)
}

fn try_inject<'s>(pod: &Value, set: &'s SidecarSet) -> Decision<'s> {
    decide_on(pod, "team-a", set, &InjectionSettings::default())
}

/// Injects, applies the patch with the json-patch crate, and checks the result is still a Pod.
fn inject(pod: &Value, set: &SidecarSet) -> Value {
    match try_inject(pod, set) {
        Decision::Inject(injection) => apply(pod, &injection.patch),
        other => panic!("expected an injection, got {other:?}"),
    }
}

fn apply(pod: &Value, patch: &JsonPatch<'_>) -> Value {
    let mut patched = pod.clone();
    ::json_patch::patch(&mut patched, &patch.to_json_patch())
        .unwrap_or_else(|e| panic!("patch does not apply: {e}\n{patch:?}"));
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(patched.clone())
        .expect("the result is a valid Pod");
    patched
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|items| items.iter().map(|i| i["name"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn env_of(container: &Value) -> Vec<(&str, &str)> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap(),
                        e["value"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn mounts_of(container: &Value) -> Vec<(&str, &str)> {
    container["volumeMounts"]
        .as_array()
        .map(|mounts| {
            mounts
                .iter()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap(),
                        m["mountPath"].as_str().unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn fixture(name: &str) -> (Value, String) {
    let path = format!(
        "{}/../../tests/fixtures/admission/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let namespace = review["request"]["namespace"].as_str().unwrap().to_owned();
    (review["request"]["object"].clone(), namespace)
}

#[test]
fn skips_a_pod_without_request() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new().annotation("other", "x").build();
    assert_eq!(
        try_inject(&pod, &set),
        Decision::Skip(SkipReason::NoRequest)
    );
    let mut bare = PodBuilder::new().build();
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(
        try_inject(&bare, &set),
        Decision::Skip(SkipReason::NoRequest)
    );
    let blank = PodBuilder::new().request(" , ").build();
    assert_eq!(
        try_inject(&blank, &set),
        Decision::Skip(SkipReason::NoRequest)
    );
}

#[test]
fn skips_an_already_injected_pod() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new()
        .request("logger:v1")
        .annotation("injector/status", "injected")
        .build();
    assert_eq!(
        try_inject(&pod, &set),
        Decision::Skip(SkipReason::AlreadyInjected)
    );
}

#[test]
fn skips_ignored_namespaces_by_the_request_namespace() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new().request("logger:v1").build();
    let settings = InjectionSettings::default();
    assert_eq!(
        decide_on(&pod, "kube-system", &set, &settings),
        Decision::Skip(SkipReason::IgnoredNamespace("kube-system".into()))
    );
    // The object's own namespace is not what counts (controllers leave it empty).
    let mut in_system = pod.clone();
    in_system["metadata"]["namespace"] = json!("kube-system");
    assert!(matches!(
        decide_on(&in_system, "team-a", &set, &settings),
        Decision::Inject(_)
    ));
    let custom = InjectionSettings {
        ignored_namespaces: ["injector-system".to_owned()].into(),
        ..InjectionSettings::default()
    };
    assert!(matches!(
        decide_on(&pod, "kube-system", &set, &custom),
        Decision::Inject(_)
    ));
    assert!(matches!(
        decide_on(&pod, "injector-system", &set, &custom),
        Decision::Skip(_)
    ));
}

#[test]
fn injects_into_a_real_apiserver_pod() {
    let (pod, namespace) = fixture("deployment-pod.json");
    let set = sidecars(&[LOGGER_V1]);
    let Decision::Inject(injection) =
        decide_on(&pod, &namespace, &set, &InjectionSettings::default())
    else {
        panic!("expected injection");
    };
    let revision = set
        .get(&"logger:v1".parse().unwrap())
        .unwrap()
        .revision
        .clone();
    let logger: SidecarName = "logger:v1".parse().unwrap();
    assert_eq!(injection.injected, [(&logger, &revision)]);
    let result = apply(&pod, &injection.patch);
    let annotations = &result["metadata"]["annotations"];
    assert_eq!(annotations["injector/status"], "injected");
    assert_eq!(
        annotations["injector/revision"],
        format!("logger:v1={revision}")
    );
    assert_eq!(
        annotations["prometheus.io/scrape"], "true",
        "other annotations are kept"
    );
    let containers = &result["spec"]["containers"];
    assert_eq!(names(containers), ["app", "log-shipper"]);
    assert_eq!(
        env_of(&containers[0]),
        [
            ("LOG_LEVEL", "debug"),
            ("POD_IP", ""),
            ("LOG_ENDPOINT", "http://collector")
        ]
    );
    assert_eq!(
        mounts_of(&containers[0]),
        [
            ("data", "/data"),
            (
                "default-token-t9m59",
                "/var/run/secrets/kubernetes.io/serviceaccount"
            ),
            ("app-logs", "/var/log/app")
        ]
    );
    assert_eq!(
        names(&result["spec"]["volumes"]),
        ["data", "default-token-t9m59", "app-logs"]
    );
    // Nothing else in the pod moved: the patch touches only what injection adds.
    let mut unpatched = result.clone();
    for (key, original) in pod["spec"].as_object().unwrap() {
        if !["containers", "volumes"].contains(&key.as_str()) {
            assert_eq!(&unpatched["spec"][key], original, "spec.{key} changed");
        }
    }
    unpatched["metadata"]["annotations"] = pod["metadata"]["annotations"].clone();
    assert_eq!(unpatched["metadata"], pod["metadata"]);
}

#[test]
fn every_real_fixture_injects_to_a_valid_pod() {
    let set = sidecars(&[LOGGER_V1, SECRETS, METRICS]);
    for name in [
        "deployment-pod.json",
        "statefulset-pod.json",
        "daemonset-pod.json",
        "bare-pod.json",
    ] {
        let (mut pod, namespace) = fixture(name);
        pod["metadata"]["annotations"]["injector/request"] =
            json!("logger:v1, secrets:v1, metrics:v1");
        let Decision::Inject(injection) =
            decide_on(&pod, &namespace, &set, &InjectionSettings::default())
        else {
            panic!("{name}: expected injection");
        };
        let result = apply(&pod, &injection.patch);
        assert_eq!(
            result["spec"]["serviceAccountName"], "secrets-agent",
            "{name}"
        );
        assert!(
            !names(&result["spec"]["volumes"])
                .iter()
                .any(|v| v.starts_with("default-token-")),
            "{name}: legacy token removed"
        );
        let again = PodView::deserialize(&result).unwrap();
        assert_eq!(
            decide(&again, &namespace, &set, &InjectionSettings::default()),
            Decision::Skip(SkipReason::AlreadyInjected),
            "{name}"
        );
    }
}

#[test]
fn pod_env_and_mounts_win_over_the_config() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new()
        .request("logger:v1")
        .spec(
            "containers",
            json!([{
                "name": "app",
                "env": [{"name": "LOG_ENDPOINT", "value": "http://mine"}],
                "volumeMounts": [{"name": "app-logs", "mountPath": "/elsewhere"}]
            }, {
                "name": "other",
                "volumeMounts": [{"name": "scratch", "mountPath": "/var/log/app"}]
            }]),
        )
        .build();
    let result = inject(&pod, &set);
    let containers = &result["spec"]["containers"];
    assert_eq!(env_of(&containers[0]), [("LOG_ENDPOINT", "http://mine")]);
    // Same mount name: skipped. Same mountPath under another name: skipped.
    assert_eq!(mounts_of(&containers[0]), [("app-logs", "/elsewhere")]);
    assert_eq!(mounts_of(&containers[1]), [("scratch", "/var/log/app")]);
    assert_eq!(
        env_of(&containers[1]),
        [("LOG_ENDPOINT", "http://collector")]
    );
}

#[test]
fn env_and_mounts_reach_every_container_init_container_and_injected_container() {
    let set = sidecars(&[LOGGER_V1, SECRETS]);
    let pod = PodBuilder::new()
        .request("secrets:v1,logger:v1")
        .spec(
            "containers",
            json!([{"name": "a"}, {"name": "b", "env": []}]),
        )
        .spec("initContainers", json!([{"name": "migrate"}]))
        .build();
    let result = inject(&pod, &set);
    let every: Vec<&Value> = result["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(result["spec"]["initContainers"].as_array().unwrap())
        .collect();
    let names: Vec<&str> = every.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "log-shipper", "migrate", "secrets-init"]);
    for container in every {
        let env = env_of(container);
        assert!(
            env.contains(&("LOG_ENDPOINT", "http://collector")),
            "{container}"
        );
        assert!(
            mounts_of(container).contains(&("app-logs", "/var/log/app")),
            "{container}"
        );
    }
    // The sidecar's own env is kept and comes first.
    assert_eq!(
        env_of(&result["spec"]["containers"][2]),
        [("SHIPPER_ONLY", "1"), ("LOG_ENDPOINT", "http://collector")]
    );
}

#[test]
fn an_existing_volume_is_not_added_twice() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new()
        .request("logger:v1")
        .spec(
            "volumes",
            json!([{"name": "app-logs", "hostPath": {"path": "/logs"}}]),
        )
        .build();
    let result = inject(&pod, &set);
    assert_eq!(names(&result["spec"]["volumes"]), ["app-logs"]);
    assert_eq!(
        result["spec"]["volumes"][0]["hostPath"]["path"], "/logs",
        "the pod's volume wins"
    );
}

#[test]
fn missing_arrays_and_maps_are_created() {
    let set = sidecars(&[LOGGER_V1, METRICS, SECRETS]);
    let mut pod = PodBuilder::new()
        .request("logger:v1,metrics:v1,secrets:v1")
        .build();
    pod["metadata"]["annotations"] = json!({"injector/request": "logger:v1,metrics:v1,secrets:v1"});
    let result = inject(&pod, &set);
    assert_eq!(names(&result["spec"]["volumes"]), ["app-logs"]);
    assert_eq!(names(&result["spec"]["initContainers"]), ["secrets-init"]);
    assert_eq!(result["spec"]["hostAliases"][0]["ip"], "10.0.0.9");
    assert_eq!(result["spec"]["serviceAccountName"], "secrets-agent");
    assert_eq!(
        names(&result["spec"]["containers"]),
        ["metrics-first", "app", "log-shipper", "metrics-agent"]
    );
    assert_eq!(
        env_of(&result["spec"]["containers"][1]),
        [
            ("LOG_ENDPOINT", "http://collector"),
            ("METRICS_PORT", "9102")
        ],
        "env created on a container that had none"
    );

    // No containers list at all (a template under construction) still works.
    let empty = PodBuilder::new()
        .request("metrics:v1")
        .without_spec("containers")
        .build();
    let result = inject(&empty, &set);
    assert_eq!(
        names(&result["spec"]["containers"]),
        ["metrics-first", "metrics-agent"]
    );
}

#[test]
fn annotations_map_is_created_when_absent() {
    // A pod view whose annotations come from elsewhere cannot happen through `decide` (the
    // request lives in annotations), so the builder is exercised directly.
    let set = sidecars(&[METRICS]);
    let pod = json!({"metadata": {}, "spec": {"containers": [{"name": "app"}]}});
    let view = PodView::deserialize(&pod).unwrap();
    let spec = view.spec.as_ref().unwrap();
    let sidecar = set.iter().next().unwrap();
    let patch = PatchBuilder::new(&view, spec)
        .build(&[sidecar], &AnnotationKeys::default(), &Default::default())
        .expect("a small patch");
    let result = apply(&pod, &patch);
    assert_eq!(
        result["metadata"]["annotations"]["injector/status"],
        "injected"
    );
    assert_eq!(
        result["metadata"]["annotations"]["injector/revision"],
        format!("metrics:v1={}", sidecar.revision)
    );
}

#[test]
fn containers_are_appended_and_prepended_in_request_order() {
    let second = r#"
name: second:v1
containers: [{name: second-agent}]
prependContainers: [{name: second-first}, {name: second-first-b}]
initContainers: [{name: second-init}]
"#;
    let set = sidecars(&[METRICS, second, SECRETS]);
    let pod = PodBuilder::new()
        .request("metrics:v1, second:v1, secrets:v1")
        .spec("containers", json!([{"name": "app"}, {"name": "app-2"}]))
        .spec("initContainers", json!([{"name": "own-init"}]))
        .build();
    let result = inject(&pod, &set);
    assert_eq!(
        names(&result["spec"]["containers"]),
        [
            "metrics-first",
            "second-first",
            "second-first-b",
            "app",
            "app-2",
            "metrics-agent",
            "second-agent"
        ]
    );
    assert_eq!(
        names(&result["spec"]["initContainers"]),
        ["own-init", "second-init", "secrets-init"]
    );
    let revision = result["metadata"]["annotations"]["injector/revision"]
        .as_str()
        .unwrap();
    let order: Vec<&str> = revision
        .split(',')
        .map(|item| item.split('=').next().unwrap())
        .collect();
    assert_eq!(order, ["metrics:v1", "second:v1", "secrets:v1"]);
}

#[test]
fn a_later_sidecar_env_reaches_earlier_sidecars_but_not_the_reverse() {
    let set = sidecars(&[LOGGER_V1, METRICS]);
    let pod = PodBuilder::new().request("logger:v1,metrics:v1").build();
    let result = inject(&pod, &set);
    let containers = &result["spec"]["containers"];
    assert_eq!(
        names(containers),
        ["metrics-first", "app", "log-shipper", "metrics-agent"]
    );
    assert!(env_of(&containers[2]).contains(&("METRICS_PORT", "9102")));
    // Applied in request order: logger's env was added before metrics' containers existed.
    assert_eq!(env_of(&containers[3]), [("METRICS_PORT", "9102")]);
}

#[test]
fn service_account_is_set_only_when_absent_or_default() {
    let set = sidecars(&[SECRETS]);
    let absent = PodBuilder::new().request("secrets:v1").build();
    let result = inject(&absent, &set);
    assert_eq!(result["spec"]["serviceAccountName"], "secrets-agent");

    let default = PodBuilder::new()
        .request("secrets:v1")
        .spec("serviceAccountName", json!("default"))
        .spec("serviceAccount", json!("default"))
        .build();
    let result = inject(&default, &set);
    assert_eq!(result["spec"]["serviceAccountName"], "secrets-agent");
    assert_eq!(
        result["spec"]["serviceAccount"], "secrets-agent",
        "the deprecated alias follows"
    );

    let own = PodBuilder::new()
        .request("secrets:v1")
        .spec("serviceAccountName", json!("team-a-app"))
        .spec("volumes", json!([{"name": "default-token-abcde", "secret": {"secretName": "default-token-abcde"}}]))
        .build();
    let result = inject(&own, &set);
    assert_eq!(result["spec"]["serviceAccountName"], "team-a-app");
    assert_eq!(
        names(&result["spec"]["volumes"]),
        ["default-token-abcde"],
        "nothing removed"
    );
}

#[test]
fn the_first_sidecar_with_a_service_account_wins() {
    let other = "name: other:v1\nserviceAccountName: other-agent\n";
    let set = sidecars(&[SECRETS, other]);
    let pod = PodBuilder::new().request("secrets:v1,other:v1").build();
    assert_eq!(
        inject(&pod, &set)["spec"]["serviceAccountName"],
        "secrets-agent"
    );
}

#[test]
fn the_legacy_default_token_is_removed_with_every_mount_of_it() {
    let set = sidecars(&[SECRETS]);
    let token_mount = json!({"name": "default-token-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true});
    let pod = PodBuilder::new()
        .request("secrets:v1")
        .spec("serviceAccountName", json!("default"))
        .spec(
            "volumes",
            json!([
                {"name": "data", "emptyDir": {}},
                {"name": "default-token-abcde", "secret": {"secretName": "default-token-abcde"}},
                {"name": "kube-api-access-x1y2z", "projected": {"sources": []}},
                {"name": "cache", "emptyDir": {}}
            ]),
        )
        .spec(
            "containers",
            json!([
                {"name": "a", "volumeMounts": [{"name": "data", "mountPath": "/data"}, token_mount, {"name": "cache", "mountPath": "/cache"}]},
                {"name": "b", "volumeMounts": [token_mount]}
            ]),
        )
        .spec("initContainers", json!([{"name": "i", "volumeMounts": [token_mount, {"name": "kube-api-access-x1y2z", "mountPath": "/k"}]}]))
        .build();
    let result = inject(&pod, &set);
    assert_eq!(
        names(&result["spec"]["volumes"]),
        ["data", "kube-api-access-x1y2z", "cache"]
    );
    assert_eq!(
        mounts_of(&result["spec"]["containers"][0]),
        [("data", "/data"), ("cache", "/cache")]
    );
    assert_eq!(mounts_of(&result["spec"]["containers"][1]), []);
    assert_eq!(
        mounts_of(&result["spec"]["initContainers"][0]),
        [("kube-api-access-x1y2z", "/k")]
    );
}

#[test]
fn a_config_mount_may_take_the_path_the_removed_token_held() {
    let config = "name: tok:v1\nserviceAccountName: agent\nvolumeMounts: [{name: agent-token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount}]\n";
    let set = sidecars(&[config]);
    let pod = PodBuilder::new()
        .request("tok:v1")
        .spec("volumes", json!([{"name": "default-token-q", "secret": {"secretName": "default-token-q"}}]))
        .spec("containers", json!([{"name": "a", "volumeMounts": [{"name": "default-token-q", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}]))
        .build();
    let result = inject(&pod, &set);
    assert_eq!(
        mounts_of(&result["spec"]["containers"][0]),
        [(
            "agent-token",
            "/var/run/secrets/kubernetes.io/serviceaccount"
        )]
    );
}

#[test]
fn host_flags_and_aliases_use_add_or_replace_as_the_pod_has_them() {
    let config = "name: host:v1\nhostNetwork: true\nhostPID: true\nhostAliases: [{ip: 10.0.0.9, hostnames: [m.internal]}]\n";
    let set = sidecars(&[config]);
    let pod = PodBuilder::new()
        .request("host:v1")
        .spec("hostNetwork", json!(false))
        .spec("hostAliases", json!([{"ip": "10.0.0.1", "hostnames": ["a"]}, {"ip": "10.0.0.9", "hostnames": ["m.internal"]}]))
        .build();
    let Decision::Inject(injection) = try_inject(&pod, &set) else {
        panic!()
    };
    let ops: Vec<Value> =
        serde_json::from_value(serde_json::to_value(&injection.patch).unwrap()).unwrap();
    assert!(
        ops.contains(&json!({"op": "replace", "path": "/spec/hostNetwork", "value": true})),
        "{ops:?}"
    );
    assert!(
        ops.contains(&json!({"op": "add", "path": "/spec/hostPID", "value": true})),
        "{ops:?}"
    );
    assert!(
        !ops.iter().any(|op| op["path"]
            .as_str()
            .unwrap()
            .starts_with("/spec/hostAliases")),
        "an identical alias is not repeated"
    );
    let result = apply(&pod, &injection.patch);
    assert_eq!(result["spec"]["hostNetwork"], true);
    assert_eq!(result["spec"]["hostPID"], true);

    let fresh = PodBuilder::new().request("host:v1").build();
    assert_eq!(
        inject(&fresh, &set)["spec"]["hostAliases"],
        json!([{"ip": "10.0.0.9", "hostnames": ["m.internal"]}])
    );
}

#[test]
fn annotation_keys_are_escaped_and_existing_ones_replaced() {
    let set = sidecars(&[LOGGER_V2]);
    let settings = InjectionSettings {
        keys: AnnotationKeys::new("injector.tumblr.com"),
        ..InjectionSettings::default()
    };
    let pod = PodBuilder::new()
        .annotation("injector.tumblr.com/request", "logger:v2")
        .annotation("injector.tumblr.com/revision", "logger:v1=000000000000")
        .build();
    let Decision::Inject(injection) = decide_on(&pod, "team-a", &set, &settings) else {
        panic!()
    };
    let ops = serde_json::to_value(&injection.patch).unwrap();
    let ops = ops.as_array().unwrap();
    assert!(ops.contains(&json!({"op": "add", "path": "/metadata/annotations/injector.tumblr.com~1status", "value": "injected"})), "{ops:?}");
    let revision = ops
        .iter()
        .find(|op| op["path"] == "/metadata/annotations/injector.tumblr.com~1revision")
        .unwrap();
    assert_eq!(revision["op"], "replace");
    // The default namespace's request is not ours under this setting: let through, and
    // named as a request under another annotation namespace.
    let default_ns = PodBuilder::new().request("logger:v2").build();
    assert_eq!(
        decide_on(&default_ns, "team-a", &set, &settings),
        Decision::Skip(SkipReason::OtherAnnotationNamespace {
            key: "injector/request".into(),
            ours: "injector.tumblr.com/request".into(),
        })
    );
}

#[test]
fn a_missing_sidecar_is_denied_with_the_known_versions() {
    let set = sidecars(&[LOGGER_V1, LOGGER_V2, METRICS]);
    let pod = PodBuilder::new().request("Logger:V9").build();
    let Decision::Deny(denial) = try_inject(&pod, &set) else {
        panic!()
    };
    assert_eq!(
        denial.to_string(),
        r#"sidecar "logger:v9" not found; known: logger:v1, logger:v2"#
    );
    let pod = PodBuilder::new().request("tracing").build();
    let Decision::Deny(denial) = try_inject(&pod, &set) else {
        panic!()
    };
    assert_eq!(
        denial.to_string(),
        r#"sidecar "tracing:latest" not found; known: logger:v1, logger:v2, metrics:v1"#
    );
    let Decision::Deny(denial) = try_inject(&pod, &SidecarSet::default()) else {
        panic!()
    };
    assert!(
        denial
            .to_string()
            .ends_with("known: (no sidecar configs are loaded)")
    );
}

#[test]
fn allow_policy_injects_what_exists_and_skips_when_nothing_does() {
    let set = sidecars(&[LOGGER_V1]);
    let settings = InjectionSettings {
        on_missing_sidecar: MissingSidecarPolicy::Allow,
        ..InjectionSettings::default()
    };
    let pod = PodBuilder::new().request("tracing:v1, logger:v1").build();
    let Decision::Inject(injection) = decide_on(&pod, "team-a", &set, &settings) else {
        panic!()
    };
    assert_eq!(injection.missing, ["tracing:v1".parse().unwrap()]);
    let result = apply(&pod, &injection.patch);
    assert!(
        result["metadata"]["annotations"]["injector/revision"]
            .as_str()
            .unwrap()
            .starts_with("logger:v1=")
    );
    let only_missing = PodBuilder::new().request("tracing:v1").build();
    assert_eq!(
        decide_on(&only_missing, "team-a", &set, &settings),
        Decision::Skip(SkipReason::NothingFound(vec![
            "tracing:v1".parse().unwrap()
        ]))
    );
    // A request that does not parse names nothing that could be found: let through as well,
    // as Tumblr's injector does, where the deny policy refuses it.
    let malformed = PodBuilder::new()
        .request("init-containers:extra:data:v3")
        .build();
    let Decision::Skip(SkipReason::InvalidRequest { annotation, error }) =
        decide_on(&malformed, "team-a", &set, &settings)
    else {
        panic!("not let through")
    };
    assert_eq!(annotation, "injector/request");
    assert!(error.to_string().contains("extra:data:v3"), "{error}");
    assert!(matches!(
        try_inject(&malformed, &set),
        Decision::Deny(Denial::InvalidRequest { .. })
    ));
}

#[test]
fn container_name_clashes_are_denied() {
    let set = sidecars(&[LOGGER_V1, LOGGER_V2]);
    let pod = PodBuilder::new()
        .request("logger:v1")
        .spec("initContainers", json!([{"name": "log-shipper"}]))
        .build();
    let Decision::Deny(denial) = try_inject(&pod, &set) else {
        panic!()
    };
    assert_eq!(
        denial.to_string(),
        r#"sidecar "logger:v1" cannot be injected: its container "log-shipper" has the same name as a container of the pod; rename one of them"#
    );
    let both = PodBuilder::new().request("logger:v1,logger:v2").build();
    let Decision::Deny(denial) = try_inject(&both, &set) else {
        panic!()
    };
    assert_eq!(
        denial.to_string(),
        r#"sidecar "logger:v2" cannot be injected: its container "log-shipper" has the same name as a container of sidecar "logger:v1", requested together; rename one of them"#
    );
}

#[test]
fn a_malformed_request_is_denied_naming_the_annotation() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new().request("logger:v1, a:b:c").build();
    let Decision::Deny(denial) = try_inject(&pod, &set) else {
        panic!()
    };
    assert_eq!(
        denial.to_string(),
        r#"annotation injector/request: sidecar name "a:b:c" has more than one ':' (expected name or name:version)"#
    );
}

#[test]
fn a_pod_without_spec_is_denied() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = json!({"metadata": {"annotations": {"injector/request": "logger:v1"}}});
    assert_eq!(try_inject(&pod, &set), Decision::Deny(Denial::NoPodSpec));
}

#[test]
fn repeated_requests_inject_once() {
    let set = sidecars(&[LOGGER_V1]);
    let pod = PodBuilder::new().request("logger:v1, LOGGER:v1").build();
    let result = inject(&pod, &set);
    assert_eq!(names(&result["spec"]["containers"]), ["app", "log-shipper"]);
}

#[test]
fn injection_is_idempotent() {
    let set = sidecars(&[LOGGER_V1, METRICS, SECRETS]);
    let pod = PodBuilder::new()
        .request("logger:v1,metrics:v1,secrets:v1")
        .build();
    let once = inject(&pod, &set);
    assert_eq!(
        try_inject(&once, &set),
        Decision::Skip(SkipReason::AlreadyInjected)
    );
}

mod native;
mod pod_resources;
