//! The content revision of a sidecar: what the pod is stamped with and what drift compares.
//!
//! `REV` = first 12 hex digits of SHA-256 over `sidecar-injector/rev1\n` followed by the RFC 8785
//! canonical JSON of the injected content. The version prefix lets a future format change be
//! deliberate: changing this function marks every pod in every cluster stale, so golden tests pin
//! its output.

use std::fmt;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::SidecarConfig;

const REVISION_INPUT_PREFIX: &[u8] = b"sidecar-injector/rev1\n";
const REVISION_HEX_DIGITS: usize = 12;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(String);

/// Exactly the parts of a config that reach a pod; `name`, `inherits` and `rollout` are not here
/// because changing them injects nothing different.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InjectedContent<'a> {
    containers: &'a [k8s_openapi::api::core::v1::Container],
    prepend_containers: &'a [k8s_openapi::api::core::v1::Container],
    init_containers: &'a [k8s_openapi::api::core::v1::Container],
    volumes: &'a [k8s_openapi::api::core::v1::Volume],
    env: &'a [k8s_openapi::api::core::v1::EnvVar],
    volume_mounts: &'a [k8s_openapi::api::core::v1::VolumeMount],
    host_aliases: &'a [k8s_openapi::api::core::v1::HostAlias],
    host_network: bool,
    #[serde(rename = "hostPID")]
    host_pid: bool,
    service_account_name: Option<&'a str>,
}

impl Revision {
    pub fn of(config: &SidecarConfig) -> Self {
        let content = InjectedContent {
            containers: &config.containers,
            prepend_containers: &config.prepend_containers,
            init_containers: &config.init_containers,
            volumes: &config.volumes,
            env: &config.env,
            volume_mounts: &config.volume_mounts,
            host_aliases: &config.host_aliases,
            host_network: config.host_network,
            host_pid: config.host_pid,
            service_account_name: config.service_account_name.as_deref(),
        };
        let mut value = serde_json::to_value(content).expect("Kubernetes types serialize to JSON");
        prune_empty(&mut value);
        let canonical = serde_json_canonicalizer::to_vec(&value)
            .expect("a JSON value without floats out of range canonicalizes");
        let mut hasher = Sha256::new();
        hasher.update(REVISION_INPUT_PREFIX);
        hasher.update(&canonical);
        let digest = hasher.finalize();
        let hex: String = digest
            .iter()
            .flat_map(|byte| [byte >> 4, byte & 0xf])
            .take(REVISION_HEX_DIGITS)
            .map(|nibble| char::from_digit(u32::from(nibble), 16).expect("a nibble is a hex digit"))
            .collect();
        Revision(hex)
    }

    /// Accepts a revision read back from an annotation; `None` when it is not one of ours.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == REVISION_HEX_DIGITS && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Revision(text.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Absent, null, false and empty values mean the same to Kubernetes, so they hash the same.
/// Only object members are pruned: an empty string inside a list (`args: ["-v", ""]`) is data.
fn prune_empty(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for member in map.values_mut() {
                prune_empty(member);
            }
            map.retain(|_, member| !is_empty(member));
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}
