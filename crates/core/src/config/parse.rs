//! Parsing and validating one config document: unknown keys, YAML 1.1 forms, nested fields
//! the Kubernetes types would drop, every error with its origin and line.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

use super::origin::Origin;
use super::sidecar::{SidecarConfig, TOP_LEVEL_KEYS};
use crate::name::{NameError, SidecarName};

/// What is wrong with one config, and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct ConfigError {
    /// The file (or ConfigMap item) at fault.
    pub origin: Origin,
    /// 1-based line, where the parser could tell.
    pub line: Option<usize>,
    pub kind: ConfigErrorKind,
}

impl ConfigError {
    /// `origin`'s config, which `serve --injection=policy` cannot inject, and why.
    pub fn not_in_policy_mode(origin: Origin, reason: crate::policy::Unsupported) -> Self {
        ConfigError {
            origin,
            line: None,
            kind: ConfigErrorKind::NotInPolicyMode(reason),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.origin, line, self.kind),
            None => write!(f, "{}: {}", self.origin, self.kind),
        }
    }
}

/// Why a config file could not be read: what the shell found when it opened it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Unreadable {
    #[error("a symlink whose target does not exist")]
    DanglingSymlink,
    #[error("{0}, not a regular file")]
    NotARegularFile(&'static str),
    #[error("{0} bytes; a sidecar config is at most {MAX_CONFIG_BYTES} bytes")]
    TooLarge(u64),
    #[error("{0}")]
    Io(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigErrorKind {
    #[error("cannot read: {0}")]
    Read(Unreadable),
    /// Under `serve --injection=policy`: a rule the admission policies do not express.
    #[error("not in policy mode (--injection=policy): {0}")]
    NotInPolicyMode(crate::policy::Unsupported),
    #[error("invalid YAML: {0}")]
    Syntax(String),
    #[error("{0} bytes; a sidecar config is at most {MAX_CONFIG_BYTES} bytes")]
    TooLarge(usize),
    #[error(
        "`[` and `{{` nest more than {MAX_FLOW_DEPTH} levels deep (counted over the text, quoted strings included)"
    )]
    TooDeep,
    #[error("the document is empty; a sidecar config needs at least a `name`")]
    Empty,
    #[error("expected a mapping of config keys, found {0}")]
    NotAMapping(&'static str),
    #[error("unknown top-level key {key:?} (allowed: {allowed})")]
    UnknownKey { key: String, allowed: String },
    #[error("missing `name` (name or name:version)")]
    MissingName,
    #[error("`name` must be a string such as logger:v1, found {0}")]
    NameNotAString(&'static str),
    #[error("invalid `name`: {0}")]
    InvalidName(NameError),
    #[error("invalid `{path}`: {message}")]
    InvalidField { path: String, message: String },
    #[error(
        "`inherits: {0}` must name a file next to this one; it may not leave the config directory"
    )]
    InheritsOutsideDirectory(String),
    #[error("`inherits` is only for configs on disk; a ConfigMap item cannot inherit ({0:?})")]
    InheritsNotOnDisk(String),
    #[error("`inherits: {0}`: no such config file in the config directory")]
    MissingParent(String),
    #[error("`inherits: {parent}`: the parent is invalid: {reason}")]
    InvalidParent { parent: String, reason: String },
    #[error("`inherits` forms a cycle: {0}")]
    InheritanceCycle(String),
    #[error(
        "`inherits` chain is longer than {MAX_INHERITS_DEPTH} configs ({0} -> ...); flatten it"
    )]
    InheritanceTooDeep(String),
    #[error("sidecar {name} is defined more than once in this source (also in {others})")]
    DuplicateName { name: String, others: String },
}

/// Something a person should look at that does not stop the config from loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub origin: Origin,
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: warning: {}", self.origin, self.message)
    }
}

/// A single document parsed and checked, before inheritance.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedConfig {
    pub config: SidecarConfig,
    pub warnings: Vec<ConfigWarning>,
}

/// Parses one config document. `origin` names it in every message.
/// The largest config read. Loading takes about 90 times a config's size in memory for a
/// moment (YAML events, JSON values, typed items, rendered items); real configs are a few
/// KiB.
pub const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// How deep `[` and `{` may nest. The YAML scanner's cost grows with the square of this depth
/// (100,000 levels took minutes); no config needs more than a handful.
pub const MAX_FLOW_DEPTH: usize = 64;

/// How many parents a config may have above it: every config of the chain is merged for
/// every file of the chain, so depth multiplies the cost of a reload.
pub const MAX_INHERITS_DEPTH: usize = 16;

pub fn parse_config(origin: impl Into<Origin>, text: &str) -> Result<ParsedConfig, ConfigError> {
    let origin = origin.into();
    let error = |line: Option<usize>, kind| ConfigError {
        origin: origin.clone(),
        line,
        kind,
    };
    let mut map = read_mapping(text).map_err(|(line, kind)| error(line, kind))?;
    let name = take_name(&mut map, text).map_err(|(line, kind)| error(line, kind))?;
    let mut fields = FieldReader {
        origin: &origin,
        text,
        map,
        warnings: Vec::new(),
    };
    let config = SidecarConfig {
        name,
        inherits: fields.take("inherits")?,
        containers: fields.take("containers")?.unwrap_or_default(),
        prepend_containers: fields.take("prependContainers")?.unwrap_or_default(),
        init_containers: fields.take("initContainers")?.unwrap_or_default(),
        volumes: fields.take("volumes")?.unwrap_or_default(),
        env: fields.take("env")?.unwrap_or_default(),
        volume_mounts: fields.take("volumeMounts")?.unwrap_or_default(),
        host_aliases: fields.take("hostAliases")?.unwrap_or_default(),
        host_network: fields.take("hostNetwork")?.unwrap_or(false),
        host_pid: fields.take("hostPID")?.unwrap_or(false),
        service_account_name: fields
            .take::<String>("serviceAccountName")?
            .filter(|s| !s.is_empty()),
        rollout: fields.take("rollout")?,
        native_sidecars: fields.take("nativeSidecars")?,
        native_placement: fields.take("nativeSidecarPlacement")?,
        pod_resources: fields.take("podResources")?,
    };
    check_container_names(&config, text).map_err(|(line, kind)| error(line, kind))?;
    if let Some(rollout) = &config.rollout {
        crate::rollout::analysis::validate(&rollout.checks).map_err(|err| {
            error(
                top_level_key_line(text, "rollout"),
                ConfigErrorKind::InvalidField {
                    path: "rollout.checks".to_owned(),
                    message: err.to_string(),
                },
            )
        })?;
    }
    let mut warnings = fields.warnings;
    let startup =
        check_restart_policies(&config, text).map_err(|(line, kind)| error(line, kind))?;
    warnings.extend(startup.into_iter().map(|message| ConfigWarning {
        origin: origin.clone(),
        message,
    }));
    Ok(ParsedConfig { config, warnings })
}

/// An error before the origin is attached: the line, when known, and what is wrong.
type Located = (Option<usize>, ConfigErrorKind);

/// The document as a mapping of known top-level keys.
fn read_mapping(text: &str) -> Result<serde_json::Map<String, Value>, Located> {
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err((None, ConfigErrorKind::TooLarge(text.len())));
    }
    if let Some(line) = flow_depth_exceeded(text) {
        return Err((Some(line), ConfigErrorKind::TooDeep));
    }
    let document: Value = serde_yaml::from_str(text).map_err(|e| {
        (
            e.location().map(|l| l.line()),
            ConfigErrorKind::Syntax(strip_location(&e.to_string())),
        )
    })?;
    let map = match document {
        Value::Object(map) => map,
        Value::Null => return Err((None, ConfigErrorKind::Empty)),
        other => return Err((Some(1), ConfigErrorKind::NotAMapping(kind_of(&other)))),
    };
    if let Some(key) = map.keys().find(|k| !TOP_LEVEL_KEYS.contains(&k.as_str())) {
        return Err((
            top_level_key_line(text, key),
            ConfigErrorKind::UnknownKey {
                key: key.clone(),
                allowed: TOP_LEVEL_KEYS.join(", "),
            },
        ));
    }
    Ok(map)
}

/// The line where `[`/`{` first nest past [`MAX_FLOW_DEPTH`], counting every bracket in the
/// text. Conservative: brackets inside strings count too, so a legitimate config is refused
/// only if it holds more than 64 unbalanced brackets, and the YAML parser never sees a deep
/// one.
fn flow_depth_exceeded(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut line = 1;
    for byte in text.bytes() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Some(line);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'\n' => line += 1,
            _ => {}
        }
    }
    None
}

fn take_name(map: &mut serde_json::Map<String, Value>, text: &str) -> Result<SidecarName, Located> {
    match map.remove("name") {
        None | Some(Value::Null) => Err((None, ConfigErrorKind::MissingName)),
        Some(Value::String(name)) => SidecarName::parse(&name).map_err(|e| {
            (
                top_level_key_line(text, "name"),
                ConfigErrorKind::InvalidName(e),
            )
        }),
        Some(other) => Err((
            top_level_key_line(text, "name"),
            ConfigErrorKind::NameNotAString(kind_of(&other)),
        )),
    }
}

/// Every injected container has a name, and no name appears twice in one config.
fn check_container_names(config: &SidecarConfig, text: &str) -> Result<(), Located> {
    for (kind, containers) in [
        ("containers", &config.containers),
        ("prependContainers", &config.prepend_containers),
        ("initContainers", &config.init_containers),
    ] {
        if let Some(index) = containers.iter().position(|c| c.name.is_empty()) {
            return Err((
                top_level_key_line(text, kind),
                ConfigErrorKind::InvalidField {
                    path: format!("{kind}[{index}].name"),
                    message: "every injected container needs a name".into(),
                },
            ));
        }
    }
    // Kubernetes refuses a pod whose containers and init containers share a name, so such a
    // config could never be injected: both places are named.
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    for (kind, containers) in [
        ("containers", &config.containers),
        ("prependContainers", &config.prepend_containers),
        ("initContainers", &config.init_containers),
    ] {
        for (index, container) in containers.iter().enumerate() {
            let place = format!("{kind}[{index}]");
            if let Some(first) = seen.insert(container.name.as_str(), place.clone()) {
                return Err((
                    top_level_key_line(text, kind),
                    ConfigErrorKind::InvalidField {
                        path: format!("{place}.name"),
                        message: format!(
                            "container name {:?} appears more than once in this config (also {first}); a pod's containers and init containers share one set of names",
                            container.name
                        ),
                    },
                ));
            }
        }
    }
    Ok(())
}

/// What the API server would refuse in every pod, refused here with the line: a
/// `restartPolicy` other than `Always` on an init container (the only value it takes), a
/// `restartPolicy` on a regular container (`nativeSidecars: true` is how a config asks for
/// native sidecars), and probes on an init container that runs to completion. Returns the
/// warnings: a native sidecar whose startupProbe targets a port no container of the config
/// declares, which holds the app back until it times out.
fn check_restart_policies(config: &SidecarConfig, text: &str) -> Result<Vec<String>, Located> {
    let invalid = |kind: &str, path: String, message: String| {
        (
            top_level_key_line(text, kind),
            ConfigErrorKind::InvalidField { path, message },
        )
    };
    for (kind, containers) in [
        ("containers", &config.containers),
        ("prependContainers", &config.prepend_containers),
    ] {
        if let Some((index, c)) = containers
            .iter()
            .enumerate()
            .find(|(_, c)| c.restart_policy.is_some())
        {
            return Err(invalid(
                kind,
                format!("{kind}[{index}].restartPolicy"),
                format!(
                    "container {:?}: only init containers take a restartPolicy; write `nativeSidecars: true` to inject this config's containers as native sidecars",
                    c.name
                ),
            ));
        }
    }
    for (index, c) in config.init_containers.iter().enumerate() {
        match c.restart_policy.as_deref() {
            Some(super::NATIVE_RESTART_POLICY) => {}
            Some(other) => {
                return Err(invalid(
                    "initContainers",
                    format!("initContainers[{index}].restartPolicy"),
                    format!(
                        "init container {:?}: restartPolicy {other:?} is refused by the API server; an init container takes only Always (a native sidecar)",
                        c.name
                    ),
                ));
            }
            None => {
                let probe = [
                    ("livenessProbe", c.liveness_probe.is_some()),
                    ("readinessProbe", c.readiness_probe.is_some()),
                    ("startupProbe", c.startup_probe.is_some()),
                ]
                .into_iter()
                .find(|(_, set)| *set);
                if let Some((probe, _)) = probe {
                    return Err(invalid(
                        "initContainers",
                        format!("initContainers[{index}].{probe}"),
                        format!(
                            "init container {:?} runs to completion: the API server refuses probes on it (only a native sidecar, restartPolicy: Always, takes them)",
                            c.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(startup_probe_warnings(config))
}

/// A native sidecar whose startupProbe targets a port no container of the config declares:
/// the pod's app containers start only once it passes.
fn startup_probe_warnings(config: &SidecarConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    let ports: Vec<&k8s_openapi::api::core::v1::ContainerPort> = config
        .injected_containers()
        .flat_map(|c| c.ports.iter().flatten())
        .collect();
    let natives = config
        .init_containers
        .iter()
        .filter(|c| super::is_native_sidecar(c))
        .chain(
            (config.native_sidecars() != super::sidecar::NativeSidecars::Never)
                .then(|| config.prepend_containers.iter().chain(&config.containers))
                .into_iter()
                .flatten(),
        );
    for c in natives {
        let Some(target) = c.startup_probe.as_ref().and_then(probe_port) else {
            continue;
        };
        let declared = ports.iter().any(|p| match &target {
            IntOrString::Int(n) => p.container_port == *n,
            IntOrString::String(name) => p.name.as_deref() == Some(name.as_str()),
        });
        if !declared {
            let port = match &target {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(name) => format!("{name:?}"),
            };
            warnings.push(format!(
                "native sidecar {:?}: its startupProbe targets port {port}, which no container of this config declares; the pod's app containers wait until that probe passes, so a probe of the app's port would hold them back for good",
                c.name
            ));
        }
    }
    warnings
}

/// The port a probe connects to, when it connects to one.
fn probe_port(probe: &k8s_openapi::api::core::v1::Probe) -> Option<IntOrString> {
    probe
        .http_get
        .as_ref()
        .map(|h| h.port.clone())
        .or_else(|| probe.tcp_socket.as_ref().map(|t| t.port.clone()))
        .or_else(|| probe.grpc.as_ref().map(|g| IntOrString::Int(g.port)))
}

/// Takes typed top-level fields out of the document, collecting warnings as it goes.
struct FieldReader<'a> {
    origin: &'a Origin,
    text: &'a str,
    map: serde_json::Map<String, Value>,
    warnings: Vec<ConfigWarning>,
}

impl FieldReader<'_> {
    fn take<T: DeserializeOwned + Serialize>(
        &mut self,
        key: &str,
    ) -> Result<Option<T>, ConfigError> {
        let Some(value) = self.map.remove(key).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        typed_with_yaml11(key, value, self.origin, &mut self.warnings)
            .map(Some)
            .map_err(|kind| ConfigError {
                origin: self.origin.clone(),
                line: top_level_key_line(self.text, key),
                kind,
            })
    }
}

/// serde_yaml appends " at line N column M"; the line is reported separately.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(index) => message[..index].to_owned(),
        None => message.to_owned(),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Block-style top-level keys start in column 0; good enough to point a person at the line.
pub(super) fn top_level_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            let unquoted = line
                .strip_prefix('"')
                .or_else(|| line.strip_prefix('\''))
                .unwrap_or(line);
            unquoted.strip_prefix(key).is_some_and(|rest| {
                rest.starts_with(':') || rest.starts_with("\":") || rest.starts_with("':")
            })
        })
        .map(|index| index + 1)
}

/// Deserializes a Kubernetes-typed field the way Kubernetes reads YAML 1.1: where the type wants
/// a number or a boolean and the YAML 1.2 parser produced a string such as `0644` or `yes`, the
/// scalar is read as YAML 1.1 would (octal 420, true). Strings stay strings everywhere else.
/// Fields the Kubernetes types do not know are reported as warnings, since they would vanish.
fn typed_with_yaml11<T: DeserializeOwned + Serialize>(
    key: &str,
    mut value: Value,
    origin: &Origin,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<T, ConfigErrorKind> {
    loop {
        match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(typed) => {
                let kept = serde_json::to_value(&typed).unwrap_or(Value::Null);
                let mut dropped = Vec::new();
                dropped_fields(&value, &kept, key.to_owned(), &mut dropped);
                warnings.extend(dropped.into_iter().map(|path| ConfigWarning {
                    origin: origin.clone(),
                    message: format!(
                        "`{path}` is not a field Kubernetes knows here; it would be dropped (a typo?)"
                    ),
                }));
                return Ok(typed);
            }
            Err(err) => {
                let path: Vec<serde_path_to_error::Segment> = err.path().iter().cloned().collect();
                let coerced = scalar_at(&mut value, &path).is_some_and(coerce_yaml11_scalar);
                if !coerced {
                    return Err(ConfigErrorKind::InvalidField {
                        path: format!("{key}{}", display_path(&path)),
                        message: err.into_inner().to_string(),
                    });
                }
            }
        }
    }
}

fn display_path(path: &[serde_path_to_error::Segment]) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Enum { variant } => {
                out.push('.');
                out.push_str(variant);
            }
            Segment::Unknown => out.push_str(".?"),
        }
    }
    out
}

fn scalar_at<'v>(
    value: &'v mut Value,
    path: &[serde_path_to_error::Segment],
) -> Option<&'v mut Value> {
    use serde_path_to_error::Segment;
    let mut current = value;
    for segment in path {
        current = match segment {
            Segment::Seq { index } => current.get_mut(*index)?,
            Segment::Map { key } => current.get_mut(key.as_str())?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    Some(current)
}

/// Returns whether the scalar was rewritten; only YAML 1.1 forms a 1.2 parser leaves as strings.
fn coerce_yaml11_scalar(value: &mut Value) -> bool {
    let Value::String(text) = value else {
        return false;
    };
    let replacement = match text.as_str() {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Value::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Value::Bool(false)
        }
        octal
            if octal.len() > 1
                && octal.starts_with('0')
                && octal.bytes().all(|b| (b'0'..=b'7').contains(&b)) =>
        {
            match i64::from_str_radix(octal, 8) {
                Ok(number) => Value::from(number),
                Err(_) => return false,
            }
        }
        _ => return false,
    };
    *value = replacement;
    true
}

/// Paths present (non-null) in what the user wrote but absent after a round trip through the
/// Kubernetes types.
fn dropped_fields(written: &Value, kept: &Value, path: String, out: &mut Vec<String>) {
    match (written, kept) {
        (Value::Object(written), Value::Object(kept)) => {
            for (key, value) in written {
                if value.is_null() {
                    continue;
                }
                let child = format!("{path}.{key}");
                match kept.get(key) {
                    Some(kept_value) => dropped_fields(value, kept_value, child, out),
                    None => out.push(child),
                }
            }
        }
        (Value::Array(written), Value::Array(kept)) => {
            for (index, (value, kept_value)) in written.iter().zip(kept).enumerate() {
                dropped_fields(value, kept_value, format!("{path}[{index}]"), out);
            }
        }
        _ => {}
    }
}
