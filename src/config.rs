//! Sidecar configs in the Tumblr format (plus `prependContainers` and `rollout`): parsing,
//! validation and inheritance. Pure: the shell reads files and hands their text in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, Volume, VolumeMount};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::name::{NameError, SidecarName};
use crate::revision::Revision;

/// Every top-level key a config may carry. Anything else is an error naming the key, because a
/// typo such as `volumeMount:` would otherwise silently inject nothing.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "name",
    "inherits",
    "containers",
    "prependContainers",
    "initContainers",
    "volumes",
    "env",
    "volumeMounts",
    "hostAliases",
    "hostNetwork",
    "hostPID",
    "serviceAccountName",
    "rollout",
];

/// Whether the rollout engine may restart workloads for this sidecar on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutMode {
    #[default]
    Auto,
    Manual,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutPolicy {
    #[serde(default)]
    pub policy: RolloutMode,
}

/// One sidecar as it will be injected (after inheritance once resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarConfig {
    pub name: SidecarName,
    pub inherits: Option<String>,
    pub containers: Vec<Container>,
    pub prepend_containers: Vec<Container>,
    pub init_containers: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub env: Vec<EnvVar>,
    pub volume_mounts: Vec<VolumeMount>,
    pub host_aliases: Vec<HostAlias>,
    pub host_network: bool,
    pub host_pid: bool,
    pub service_account_name: Option<String>,
    pub rollout: Option<RolloutPolicy>,
}

impl SidecarConfig {
    /// A config that injects nothing yet; fields are public for the caller to fill.
    pub fn new(name: SidecarName) -> Self {
        Self {
            name,
            inherits: None,
            containers: Vec::new(),
            prepend_containers: Vec::new(),
            init_containers: Vec::new(),
            volumes: Vec::new(),
            env: Vec::new(),
            volume_mounts: Vec::new(),
            host_aliases: Vec::new(),
            host_network: false,
            host_pid: false,
            service_account_name: None,
            rollout: None,
        }
    }

    pub fn rollout_mode(&self) -> RolloutMode {
        self.rollout.map(|r| r.policy).unwrap_or_default()
    }

    /// Every container this config injects, in the order the pod will list them.
    pub fn injected_containers(&self) -> impl Iterator<Item = &Container> {
        self.prepend_containers
            .iter()
            .chain(&self.init_containers)
            .chain(&self.containers)
    }

    /// Applies Tumblr's inheritance: `self` is the child, `parent` the resolved parent.
    fn inherit_from(self, parent: &SidecarConfig) -> SidecarConfig {
        SidecarConfig {
            name: self.name,
            inherits: self.inherits,
            containers: merge_by_name(&parent.containers, self.containers, |c| &c.name),
            prepend_containers: merge_by_name(
                &parent.prepend_containers,
                self.prepend_containers,
                |c| &c.name,
            ),
            init_containers: merge_by_name(&parent.init_containers, self.init_containers, |c| {
                &c.name
            }),
            volumes: merge_by_name(&parent.volumes, self.volumes, |v| &v.name),
            env: merge_by_name(&parent.env, self.env, |e| &e.name),
            volume_mounts: merge_by_name(&parent.volume_mounts, self.volume_mounts, |m| &m.name),
            host_aliases: parent
                .host_aliases
                .iter()
                .cloned()
                .chain(self.host_aliases)
                .collect(),
            host_network: parent.host_network || self.host_network,
            host_pid: parent.host_pid || self.host_pid,
            service_account_name: self
                .service_account_name
                .or_else(|| parent.service_account_name.clone()),
            rollout: self.rollout.or(parent.rollout),
        }
    }
}

/// A child's item replaces the parent's item of the same name in place; new items are appended.
fn merge_by_name<T: Clone>(parent: &[T], child: Vec<T>, key: impl Fn(&T) -> &String) -> Vec<T> {
    let mut merged: Vec<T> = parent.to_vec();
    for item in child {
        match merged
            .iter()
            .position(|existing| key(existing) == key(&item))
        {
            Some(index) => merged[index] = item,
            None => merged.push(item),
        }
    }
    merged
}

/// A config that passed every check, with its revision and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSidecar {
    pub config: SidecarConfig,
    pub revision: Revision,
    pub origin: String,
    /// The config's items as JSON, rendered once at load so that a request only borrows them.
    pub rendered: RenderedSidecar,
    /// `name:version=REV`, this sidecar's item in the revision annotation.
    pub stamp: String,
}

impl LoadedSidecar {
    pub fn new(config: SidecarConfig, origin: impl Into<String>) -> Self {
        let revision = Revision::of(&config);
        Self {
            stamp: format!("{}={}", config.name, revision),
            revision,
            rendered: RenderedSidecar::of(&config),
            config,
            origin: origin.into(),
        }
    }
}

/// Each list of a [`SidecarConfig`] as JSON values, index for index.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedSidecar {
    pub containers: Vec<Value>,
    pub prepend_containers: Vec<Value>,
    pub init_containers: Vec<Value>,
    pub volumes: Vec<Value>,
    pub env: Vec<Value>,
    pub volume_mounts: Vec<Value>,
    pub host_aliases: Vec<Value>,
}

impl RenderedSidecar {
    fn of(config: &SidecarConfig) -> Self {
        fn render<T: Serialize>(items: &[T]) -> Vec<Value> {
            items
                .iter()
                .map(|item| serde_json::to_value(item).expect("Kubernetes types serialize to JSON"))
                .collect()
        }
        Self {
            containers: render(&config.containers),
            prepend_containers: render(&config.prepend_containers),
            init_containers: render(&config.init_containers),
            volumes: render(&config.volumes),
            env: render(&config.env),
            volume_mounts: render(&config.volume_mounts),
            host_aliases: render(&config.host_aliases),
        }
    }
}

/// The configs in force, by normalised name. Cheap to clone and share between requests.
#[derive(Debug, Clone, Default)]
pub struct SidecarSet {
    by_name: BTreeMap<SidecarName, Arc<LoadedSidecar>>,
}

impl SidecarSet {
    pub fn get(&self, name: &SidecarName) -> Option<&Arc<LoadedSidecar>> {
        self.by_name.get(name)
    }

    pub fn insert(&mut self, sidecar: LoadedSidecar) {
        self.by_name
            .insert(sidecar.config.name.clone(), Arc::new(sidecar));
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<LoadedSidecar>> {
        self.by_name.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &SidecarName> {
        self.by_name.keys()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

impl FromIterator<LoadedSidecar> for SidecarSet {
    fn from_iter<I: IntoIterator<Item = LoadedSidecar>>(iter: I) -> Self {
        let mut set = SidecarSet::default();
        for sidecar in iter {
            set.insert(sidecar);
        }
        set
    }
}

/// What is wrong with one config, and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct ConfigError {
    /// The file (or ConfigMap item) at fault.
    pub origin: String,
    /// 1-based line, where the parser could tell.
    pub line: Option<usize>,
    pub kind: ConfigErrorKind,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.origin, line, self.kind),
            None => write!(f, "{}: {}", self.origin, self.kind),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigErrorKind {
    #[error("cannot read: {0}")]
    Read(String),
    #[error("invalid YAML: {0}")]
    Syntax(String),
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
    #[error("sidecar {name} is defined more than once in this source (also in {others})")]
    DuplicateName { name: String, others: String },
}

/// Something a person should look at that does not stop the config from loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub origin: String,
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
pub fn parse_config(origin: &str, text: &str) -> Result<ParsedConfig, ConfigError> {
    let error = |line: Option<usize>, kind| ConfigError {
        origin: origin.to_owned(),
        line,
        kind,
    };
    let document: Value = serde_yaml::from_str(text).map_err(|e| {
        error(
            e.location().map(|l| l.line()),
            ConfigErrorKind::Syntax(strip_location(&e.to_string())),
        )
    })?;
    let mut map = match document {
        Value::Object(map) => map,
        Value::Null => return Err(error(None, ConfigErrorKind::Empty)),
        other => {
            return Err(error(
                Some(1),
                ConfigErrorKind::NotAMapping(kind_of(&other)),
            ));
        }
    };
    if let Some(key) = map.keys().find(|k| !TOP_LEVEL_KEYS.contains(&k.as_str())) {
        return Err(error(
            top_level_key_line(text, key),
            ConfigErrorKind::UnknownKey {
                key: key.clone(),
                allowed: TOP_LEVEL_KEYS.join(", "),
            },
        ));
    }
    let name = match map.remove("name") {
        None | Some(Value::Null) => {
            return Err(error(None, ConfigErrorKind::MissingName));
        }
        Some(Value::String(name)) => SidecarName::parse(&name).map_err(|e| {
            error(
                top_level_key_line(text, "name"),
                ConfigErrorKind::InvalidName(e),
            )
        })?,
        Some(other) => {
            return Err(error(
                top_level_key_line(text, "name"),
                ConfigErrorKind::NameNotAString(kind_of(&other)),
            ));
        }
    };

    let mut fields = FieldReader {
        origin,
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
    };
    let warnings = fields.warnings;
    for (kind, containers) in [
        ("containers", &config.containers),
        ("prependContainers", &config.prepend_containers),
        ("initContainers", &config.init_containers),
    ] {
        for (index, container) in containers.iter().enumerate() {
            if container.name.is_empty() {
                return Err(error(
                    top_level_key_line(text, kind),
                    ConfigErrorKind::InvalidField {
                        path: format!("{kind}[{index}].name"),
                        message: "every injected container needs a name".into(),
                    },
                ));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for container in config.injected_containers() {
        if !seen.insert(container.name.as_str()) {
            return Err(error(
                None,
                ConfigErrorKind::InvalidField {
                    path: "containers".into(),
                    message: format!(
                        "container name {:?} appears more than once in this config",
                        container.name
                    ),
                },
            ));
        }
    }
    Ok(ParsedConfig { config, warnings })
}

/// Takes typed top-level fields out of the document, collecting warnings as it goes.
struct FieldReader<'a> {
    origin: &'a str,
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
                origin: self.origin.to_owned(),
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
fn top_level_key_line(text: &str, key: &str) -> Option<usize> {
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
    origin: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<T, ConfigErrorKind> {
    loop {
        match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(typed) => {
                let kept = serde_json::to_value(&typed).unwrap_or(Value::Null);
                let mut dropped = Vec::new();
                dropped_fields(&value, &kept, key.to_owned(), &mut dropped);
                warnings.extend(dropped.into_iter().map(|path| ConfigWarning {
                    origin: origin.to_owned(),
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

/// The outcome of loading one source: what loaded, what failed, what to look at.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub sidecars: Vec<LoadedSidecar>,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigWarning>,
}

impl LoadReport {
    pub fn sidecar_set(&self) -> SidecarSet {
        self.sidecars.iter().cloned().collect()
    }
}

/// What one config source serves: each origin's (file's, or ConfigMap item's) last good
/// version. A reload takes what loaded, keeps the last good version of what failed, and drops
/// what vanished, so a broken edit never replaces a good config.
#[derive(Debug, Clone, Default)]
pub struct SourceState {
    by_origin: BTreeMap<String, LoadedSidecar>,
}

/// What a reload changed, for the log line and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    /// Origins that failed and keep serving their last good version.
    pub kept: Vec<String>,
    pub errors: usize,
    pub served: usize,
}

impl SourceState {
    pub fn apply(&mut self, report: &LoadReport) -> ReloadSummary {
        let mut next: BTreeMap<String, LoadedSidecar> = report
            .sidecars
            .iter()
            .map(|s| (s.origin.clone(), s.clone()))
            .collect();
        let fresh_names: BTreeSet<&SidecarName> =
            report.sidecars.iter().map(|s| &s.config.name).collect();
        let mut kept = Vec::new();
        for error in &report.errors {
            // A fresh, valid config of the same name elsewhere supersedes the stale one.
            if let Some(previous) = self.by_origin.get(&error.origin)
                && !fresh_names.contains(&previous.config.name)
                && !next.contains_key(&error.origin)
            {
                next.insert(error.origin.clone(), previous.clone());
                kept.push(error.origin.clone());
            }
        }
        self.by_origin = next;
        ReloadSummary {
            kept,
            errors: report.errors.len(),
            served: self.by_origin.len(),
        }
    }

    pub fn sidecars(&self) -> impl Iterator<Item = &LoadedSidecar> {
        self.by_origin.values()
    }

    pub fn len(&self) -> usize {
        self.by_origin.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_origin.is_empty()
    }
}

/// Loads a directory's configs from the text of its files (file name -> text), resolving
/// `inherits` among them. One file's error never stops the others from loading.
///
/// `directory` only labels messages (`config/logger.yaml`).
pub fn load_directory(
    directory: &str,
    files: &BTreeMap<String, Result<String, String>>,
) -> LoadReport {
    let origin_of = |file: &str| {
        if directory.is_empty() {
            file.to_owned()
        } else {
            format!("{}/{}", directory.trim_end_matches('/'), file)
        }
    };
    let mut report = LoadReport::default();
    let parsed: BTreeMap<&str, Result<ParsedConfig, ConfigError>> = files
        .iter()
        .map(|(file, text)| {
            let origin = origin_of(file);
            let result = match text {
                Ok(text) => parse_config(&origin, text),
                Err(io) => Err(ConfigError {
                    origin,
                    line: None,
                    kind: ConfigErrorKind::Read(io.clone()),
                }),
            };
            (file.as_str(), result)
        })
        .collect();

    let mut resolved: Vec<(&str, SidecarConfig)> = Vec::new();
    for (file, result) in &parsed {
        match result {
            Ok(parsed_config) => {
                report
                    .warnings
                    .extend(parsed_config.warnings.iter().cloned());
                match resolve_inheritance(file, &parsed, &origin_of) {
                    Ok(config) => resolved.push((file, config)),
                    Err(kind) => report.errors.push(ConfigError {
                        origin: origin_of(file),
                        line: top_level_key_line(
                            files[*file].as_deref().unwrap_or_default(),
                            "inherits",
                        ),
                        kind,
                    }),
                }
            }
            Err(err) => report.errors.push(err.clone()),
        }
    }

    let resolved = resolved
        .into_iter()
        .map(|(file, config)| (origin_of(file), config))
        .collect();
    admit_unique(&mut report, resolved);
    report
}

/// Adds each config to the report, except that a name held by more than one origin of the
/// same source is an error for every holder.
fn admit_unique(report: &mut LoadReport, resolved: Vec<(String, SidecarConfig)>) {
    let mut holders_by_name: BTreeMap<SidecarName, Vec<String>> = BTreeMap::new();
    for (origin, config) in &resolved {
        holders_by_name
            .entry(config.name.clone())
            .or_default()
            .push(origin.clone());
    }
    for (origin, config) in resolved {
        let holders = &holders_by_name[&config.name];
        if holders.len() > 1 {
            report.errors.push(ConfigError {
                kind: ConfigErrorKind::DuplicateName {
                    name: config.name.to_string(),
                    others: holders
                        .iter()
                        .filter(|other| **other != origin)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                },
                origin,
                line: None,
            });
            continue;
        }
        report.sidecars.push(LoadedSidecar::new(config, origin));
    }
}

/// How a ConfigMap item is named in messages and as the key of its last good version.
pub fn configmap_origin(namespace: &str, name: &str, key: &str) -> String {
    format!("ConfigMap {namespace}/{name} item {key}")
}

/// Loads the ConfigMap source: each `(origin, text)` is one data item. Items cannot inherit
/// (there is no directory to find a parent in); one item's error never stops the others.
pub fn load_configmap_items(items: &[(String, String)]) -> LoadReport {
    let mut report = LoadReport::default();
    let mut resolved = Vec::new();
    for (origin, text) in items {
        match parse_config(origin, text) {
            Ok(parsed) => {
                report.warnings.extend(parsed.warnings);
                if let Some(parent) = &parsed.config.inherits {
                    report.errors.push(ConfigError {
                        origin: origin.clone(),
                        line: top_level_key_line(text, "inherits"),
                        kind: ConfigErrorKind::InheritsNotOnDisk(parent.clone()),
                    });
                } else {
                    resolved.push((origin.clone(), parsed.config));
                }
            }
            Err(err) => report.errors.push(err),
        }
    }
    admit_unique(&mut report, resolved);
    report
}

/// The configs in force: the directory's, with a ConfigMap config of the same name taking its
/// place. Returns the names so overridden, for the log.
pub fn merge_sources(
    directory: &SourceState,
    configmaps: &SourceState,
) -> (SidecarSet, Vec<SidecarName>) {
    let mut set: SidecarSet = directory.sidecars().cloned().collect();
    let mut overridden = Vec::new();
    for sidecar in configmaps.sidecars() {
        if set.get(&sidecar.config.name).is_some() {
            overridden.push(sidecar.config.name.clone());
        }
        set.insert(sidecar.clone());
    }
    (set, overridden)
}

/// Follows `inherits` from `file` to its root and merges down, rejecting escapes and cycles.
fn resolve_inheritance(
    file: &str,
    parsed: &BTreeMap<&str, Result<ParsedConfig, ConfigError>>,
    origin_of: &dyn Fn(&str) -> String,
) -> Result<SidecarConfig, ConfigErrorKind> {
    let mut chain: Vec<&str> = vec![file];
    let mut lineage: Vec<&SidecarConfig> = Vec::new();
    let mut current = file;
    loop {
        let config = match &parsed[current] {
            Ok(parsed_config) => &parsed_config.config,
            Err(err) => {
                return Err(ConfigErrorKind::InvalidParent {
                    parent: current.to_owned(),
                    reason: err.kind.to_string(),
                });
            }
        };
        lineage.push(config);
        let Some(parent) = config.inherits.as_deref() else {
            break;
        };
        let parent_file = parent.strip_prefix("./").unwrap_or(parent);
        if parent_file.is_empty()
            || parent_file.contains('/')
            || parent_file.contains('\\')
            || parent_file == ".."
            || parent_file == "."
        {
            return Err(ConfigErrorKind::InheritsOutsideDirectory(parent.to_owned()));
        }
        let Some((parent_key, _)) = parsed.get_key_value(parent_file) else {
            return Err(ConfigErrorKind::MissingParent(parent.to_owned()));
        };
        if chain.contains(parent_key) {
            chain.push(parent_key);
            return Err(ConfigErrorKind::InheritanceCycle(
                chain
                    .iter()
                    .map(|f| origin_of(f))
                    .collect::<Vec<_>>()
                    .join(" -> "),
            ));
        }
        chain.push(parent_key);
        current = parent_key;
    }
    // `lineage` runs child -> root and always holds at least the file itself.
    let mut from_root = lineage.into_iter().rev().cloned();
    let root = from_root
        .next()
        .expect("the lineage includes the file itself");
    Ok(from_root.fold(root, |parent, child| child.inherit_from(&parent)))
}

#[cfg(test)]
mod tests;
