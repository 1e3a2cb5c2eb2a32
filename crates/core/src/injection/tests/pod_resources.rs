//! Pods with pod-level resources (`spec.resources`, Kubernetes 1.34+): the injected pod stays
//! one the API server accepts, by growing the pod-level figures or refusing the pod.

use serde_json::{Value, json};

use super::*;

const LOGGER: &str = r#"
name: logger:v1
containers:
  - name: log-shipper
    image: shipper:1
    resources: {requests: {cpu: 100m, memory: 64Mi}}
"#;

/// The pod of the bug report: the app leaves 50m and 56Mi of the pod-level requests free.
fn asks() -> Value {
    PodBuilder::new()
        .request("logger:v1")
        .spec(
            "resources",
            json!({"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}),
        )
        .spec(
            "containers",
            json!([{"name": "app", "image": "example.org/app:1",
                    "resources": {"requests": {"cpu": "450m", "memory": "200Mi"}}}]),
        )
        .build()
}

#[test]
fn by_default_the_pod_level_figures_grow_by_the_sidecars_own() {
    let pod = inject(&asks(), &sidecars(&[LOGGER]));
    assert_eq!(
        pod["spec"]["resources"],
        json!({"requests": {"cpu": "600m", "memory": "320Mi"}, "limits": {"cpu": "1100m", "memory": "576Mi"}})
    );
    // Injected again (reinvocation), nothing changes.
    assert!(matches!(
        try_inject(&pod, &sidecars(&[LOGGER])),
        Decision::Skip(SkipReason::AlreadyInjected)
    ));
}

#[test]
fn a_pod_without_pod_level_resources_keeps_none() {
    let pod = inject(
        &PodBuilder::new().request("logger:v1").build(),
        &sidecars(&[LOGGER]),
    );
    assert_eq!(pod["spec"].get("resources"), None);
}

#[test]
fn a_refusing_config_denies_a_pod_it_does_not_fit_naming_both_figures() {
    let refuse = format!("{LOGGER}podResources: refuse\n");
    let set = sidecars(&[&refuse]);
    let Decision::Deny(denial) = try_inject(&asks(), &set) else {
        panic!("expected a denial");
    };
    assert_eq!(
        denial.to_string(),
        "sidecar \"logger:v1\" does not fit the pod's resources (its config says podResources: \
         refuse): spec.resources.requests.cpu is 500m, and the containers would request 550m \
         with the sidecar; raise spec.resources.requests.cpu to 550m or more, or remove \
         spec.resources.requests.cpu"
    );
    // Raised, it fits, and the pod-level figures stay as written.
    let mut roomy = asks();
    roomy["spec"]["resources"]["requests"] = json!({"cpu": "550m", "memory": "264Mi"});
    let pod = inject(&roomy, &set);
    assert_eq!(pod["spec"]["resources"], roomy["spec"]["resources"]);
    // The setting is injected content: it has a revision of its own.
    let add = sidecars(&[LOGGER]);
    assert_ne!(
        set.get(&"logger:v1".parse().unwrap()).unwrap().revision,
        add.get(&"logger:v1".parse().unwrap()).unwrap().revision
    );
}

#[test]
fn a_manifest_with_numbers_and_limits_only_counts_as_the_api_server_defaults_it() {
    // `cpu: 1` is a number in YAML; requests left out default to the limits.
    let pod = PodBuilder::new()
        .request("logger:v1")
        .spec("resources", json!({"limits": {"cpu": 1}}))
        .spec(
            "containers",
            json!([{"name": "app", "image": "app:1", "resources": {"limits": {"cpu": 1}}}]),
        )
        .build();
    let injected = inject(&pod, &sidecars(&[LOGGER]));
    assert_eq!(
        injected["spec"]["resources"],
        json!({"limits": {"cpu": "1100m"}})
    );
    let refuse = format!("{LOGGER}podResources: refuse\n");
    let Decision::Deny(denial) = try_inject(&pod, &sidecars(&[&refuse])) else {
        panic!("a defaulted request of 1100m is above the limit of 1");
    };
    assert!(
        denial
            .to_string()
            .contains("spec.resources.limits.cpu is 1, and the containers would request 1100m"),
        "{denial}"
    );
}
