//! The content revision of a sidecar: what the pod is stamped with and what drift compares.
//!
//! `REV` = first 12 hex digits of SHA-256 over `sidecar-injector/rev1\n` followed by the RFC 8785
//! canonical JSON of the injected content. The version prefix lets a future format change be
//! deliberate: changing this function marks every pod in every cluster stale, so golden tests pin
//! its output.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::sidecar::SidecarConfig;

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
    /// Only when native: a classic config's revision is what it was before native sidecars
    /// existed, so upgrading the injector restarts nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    native_sidecars: Option<super::sidecar::NativeSidecars>,
    #[serde(skip_serializing_if = "Option::is_none")]
    native_sidecar_placement: Option<super::sidecar::NativePlacement>,
    /// Only when not the default (`add`), for the same reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pod_resources: Option<super::sidecar::PodResourcesMode>,
}

/// The injected content as the revision hashes it (empty values pruned): also what a rollout
/// Event compares to say what changed.
pub fn injected_content(config: &SidecarConfig) -> Value {
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
        native_sidecars: Some(config.native_sidecars())
            .filter(|n| *n != super::sidecar::NativeSidecars::Never),
        native_sidecar_placement: (config.native_sidecars()
            != super::sidecar::NativeSidecars::Never)
            .then(|| config.native_placement())
            .filter(|p| *p != super::sidecar::NativePlacement::First),
        pod_resources: Some(config.pod_resources())
            .filter(|m| *m != super::sidecar::PodResourcesMode::Add),
    };
    let mut value = serde_json::to_value(content).expect("Kubernetes types serialize to JSON");
    prune_empty(&mut value);
    value
}

impl Revision {
    pub fn of(config: &SidecarConfig) -> Self {
        let value = injected_content(config);
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
    #[cfg(any(test, feature = "test-fixtures"))]
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

/// The revision in force per sidecar (`name:version` -> `REV`): what the webhook stamps, what
/// drift judges pods by, and what `serve` publishes in its status ConfigMap (as this JSON map).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RevisionsInForce(BTreeMap<String, String>);

impl RevisionsInForce {
    /// The revision of a sidecar by its normalised name.
    pub fn get(&self, sidecar: &str) -> Option<&str> {
        self.0.get(sidecar).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(s, r)| (s.as_str(), r.as_str()))
    }
}

impl FromIterator<(String, String)> for RevisionsInForce {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// `name:version=REV,...`: the `NS/revision` annotation a pod is stamped with, and the
/// `NS/rollout-revision` target the engine writes on a workload template. The one place that
/// builds and reads that format.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RevisionStamp(String);

impl RevisionStamp {
    /// The items in the order given (the webhook keeps request order).
    pub fn in_order<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut text = String::new();
        for (sidecar, revision) in items {
            if !text.is_empty() {
                text.push(',');
            }
            text.push_str(sidecar);
            text.push('=');
            text.push_str(revision);
        }
        Self(text)
    }

    /// The items sorted by sidecar, so that one set of targets always writes the same stamp.
    pub fn sorted<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut items: Vec<(&str, &str)> = items.into_iter().collect();
        items.sort_unstable();
        Self::in_order(items)
    }

    /// From items already in `name:version=REV` form (each loaded sidecar keeps its own).
    pub fn from_items<'a>(items: impl IntoIterator<Item = &'a str>) -> Self {
        // Room for two or three items: one allocation for a typical request.
        let mut text = String::with_capacity(128);
        for item in items {
            if !text.is_empty() {
                text.push(',');
            }
            text.push_str(item);
        }
        Self(text)
    }

    /// A stamp as read back from an annotation.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn from_annotation(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// `(sidecar as written, REV)` pairs; items without `=` are skipped.
    pub fn items(&self) -> impl Iterator<Item = (&str, &str)> {
        stamp_items(&self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The items of a stamp as written in an annotation, without copying it: `(sidecar as
/// written, REV)` pairs, trimmed; items without `=` are skipped.
pub fn stamp_items(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split(',').filter_map(|item| {
        let (name, revision) = item.trim().split_once('=')?;
        Some((name.trim(), revision.trim()))
    })
}

impl fmt::Display for RevisionStamp {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    fn revision(text: &str) -> String {
        let parsed = parse_config("test.yaml", text).unwrap_or_else(|e| panic!("{e}"));
        Revision::of(&parsed.config).to_string()
    }

    const LOGGER: &str = r#"
name: logger:v1
containers:
  - name: log-shipper
    image: fluent/fluent-bit:2.2.0
    args: ["--config", "/etc/fluent-bit.conf"]
volumes:
  - name: app-logs
    emptyDir: {}
  - name: shipper-config
    configMap: {name: log-shipper, defaultMode: 0644}
env:
  - name: LOG_SHIPPER_ENDPOINT
    value: http://collector:2020
volumeMounts:
  - name: app-logs
    mountPath: /var/log/app
"#;

    /// Pinned values: if one of these changes, every injected pod in every cluster would be
    /// marked stale by an upgrade. Change them only with a new `rev` prefix, deliberately.
    /// The values were computed independently (Python: json.dumps(sort_keys=True, compact) of
    /// the pruned content, which equals RFC 8785 for these ASCII, integer-only documents).
    #[test]
    fn golden_revisions() {
        assert_eq!(revision("name: empty"), "b057bf13e4b5");
        assert_eq!(revision(LOGGER), "b23c1e375260");
        assert_eq!(
            revision(
                "name: x\nhostNetwork: true\nserviceAccountName: agent\nhostAliases: [{ip: 10.0.0.1, hostnames: [a]}]\n"
            ),
            "b695b521005f"
        );
    }

    #[test]
    fn the_hash_input_is_versioned_canonical_json() {
        // Recompute by hand: prefix + RFC 8785 JSON of the pruned content.
        let canonical = r#"{"containers":[{"image":"a:1","name":"a"}]}"#;
        let mut hasher = Sha256::new();
        hasher.update(b"sidecar-injector/rev1\n");
        hasher.update(canonical.as_bytes());
        let expected: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            revision("name: a\ncontainers: [{name: a, image: 'a:1'}]"),
            expected[..12]
        );
    }

    #[test]
    fn presentation_does_not_change_the_revision() {
        let restyled = r#"
# a comment, keys reordered, flow style, other quoting, decimal mode
volumeMounts: [{mountPath: "/var/log/app", name: 'app-logs'}]
env: [{value: "http://collector:2020", name: LOG_SHIPPER_ENDPOINT}]   # trailing comment
volumes:
  - {emptyDir: {}, name: app-logs}
  - name: "shipper-config"
    configMap:
      defaultMode: 420
      name: log-shipper
containers:
  - image: "fluent/fluent-bit:2.2.0"
    name: log-shipper
    args:
      - --config
      - /etc/fluent-bit.conf
name: LOGGER:V1
"#;
        assert_eq!(revision(LOGGER), revision(restyled));
    }

    #[test]
    fn name_inherits_and_rollout_policy_do_not_change_the_revision() {
        let base = revision(LOGGER);
        assert_eq!(revision(&LOGGER.replace("logger:v1", "logger:v2")), base);
        assert_eq!(
            revision(&format!("{LOGGER}rollout: {{policy: manual}}\n")),
            base
        );
        assert_eq!(
            revision(&format!("{LOGGER}rollout: {{policy: auto}}\n")),
            base
        );
    }

    #[test]
    fn absent_null_false_and_empty_are_alike() {
        let base = revision("name: a\ncontainers: [{name: a, image: 'a:1'}]\n");
        for same in [
            "name: a\ncontainers: [{name: a, image: 'a:1'}]\nhostNetwork: false\nhostPID: false\n",
            "name: a\ncontainers: [{name: a, image: 'a:1', env: [], command: null}]\nenv: []\nvolumes: null\n",
            "name: a\ncontainers: [{name: a, image: 'a:1', workingDir: '', resources: {}}]\nserviceAccountName: ''\n",
            "name: a\ncontainers: [{name: a, image: 'a:1', stdin: false}]\n",
        ] {
            assert_eq!(revision(same), base, "{same}");
        }
    }

    #[test]
    fn any_change_to_what_is_injected_moves_the_revision() {
        let base = revision(LOGGER);
        for changed in [
            LOGGER.replace("fluent-bit:2.2.0", "fluent-bit:2.2.1"),
            LOGGER.replace("0644", "0600"),
            LOGGER.replace("/var/log/app", "/var/log/other"),
            LOGGER.replace("collector:2020", "collector:2021"),
            format!("{LOGGER}hostPID: true\n"),
            format!("{LOGGER}serviceAccountName: shipper\n"),
            // Order inside a list is meaningful (args, container order).
            LOGGER.replace(
                r#"args: ["--config", "/etc/fluent-bit.conf"]"#,
                r#"args: ["/etc/fluent-bit.conf", "--config"]"#,
            ),
            // An empty string inside a list is data, not absence.
            LOGGER.replace(
                r#"args: ["--config", "/etc/fluent-bit.conf"]"#,
                r#"args: ["--config", "/etc/fluent-bit.conf", ""]"#,
            ),
        ] {
            assert_ne!(revision(&changed), base, "{changed}");
        }
    }

    #[test]
    fn parse_accepts_only_our_format() {
        assert_eq!(
            Revision::parse("9E4CB7BA2C8C").unwrap().as_str(),
            "9e4cb7ba2c8c"
        );
        assert!(Revision::parse("9e4cb7ba2c8").is_none());
        assert!(Revision::parse("9e4cb7ba2c8g").is_none());
    }

    #[test]
    fn a_stamp_is_built_and_read_in_one_format() {
        let ordered =
            RevisionStamp::in_order([("tracer:v1", "bbbbbbbbbbbb"), ("logger:v1", "aaaaaaaaaaaa")]);
        assert_eq!(
            ordered.as_str(),
            "tracer:v1=bbbbbbbbbbbb,logger:v1=aaaaaaaaaaaa"
        );
        let sorted =
            RevisionStamp::sorted([("tracer:v1", "bbbbbbbbbbbb"), ("logger:v1", "aaaaaaaaaaaa")]);
        assert_eq!(
            sorted.as_str(),
            "logger:v1=aaaaaaaaaaaa,tracer:v1=bbbbbbbbbbbb"
        );
        let joined =
            RevisionStamp::from_items(["logger:v1=aaaaaaaaaaaa", "tracer:v1=bbbbbbbbbbbb"]);
        assert_eq!(joined, sorted);
        let read = RevisionStamp::from_annotation(
            " logger:v1 = aaaaaaaaaaaa ,junk, tracer:v1=bbbbbbbbbbbb",
        );
        let items: Vec<(&str, &str)> = read.items().collect();
        assert_eq!(
            items,
            [("logger:v1", "aaaaaaaaaaaa"), ("tracer:v1", "bbbbbbbbbbbb")]
        );
        assert!(RevisionStamp::default().is_empty());
        assert_eq!(serde_json::to_value(&sorted).unwrap(), sorted.as_str());
    }
}
