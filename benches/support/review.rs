//! The review the benches send: the DaemonSet pod the real apiserver sent (managedFields
//! included), asking for two sidecars, grown to about 8 KB with the env a production pod
//! carries.

use serde_json::{Value, json};

/// The AdmissionReview body.
pub fn review_body() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/admission/daemonset-pod.json"
    );
    let mut review: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    review["request"]["object"]["metadata"]["annotations"]["injector/request"] =
        json!("logger:v1, metrics-agent:v1");
    while serde_json::to_vec(&review).unwrap().len() < 8 * 1024 {
        let env = review["request"]["object"]["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap();
        let n = env.len();
        env.push(
            json!({"name": format!("FEATURE_FLAG_{n}"), "value": "enabled-for-canary-cohort"}),
        );
    }
    serde_json::to_vec(&review).unwrap()
}

/// The example configs shipped in `config/`.
pub fn sidecars() -> sidecar_injector::config::SidecarSet {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config");
    sidecar_injector::sources::directory::load_config_directory(std::path::Path::new(dir))
        .expect("example configs")
        .sidecar_set()
}
