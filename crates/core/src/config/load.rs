//! Loading a source: a directory's files (with `inherits` resolved among them, never leaving
//! the directory) or ConfigMap items; one config's error never stops the others.

use std::collections::BTreeMap;

use super::catalog::{LoadReport, LoadedSidecar};
use super::origin::Origin;
use super::parse::Unreadable;
use super::parse::{
    ConfigError, ConfigErrorKind, MAX_INHERITS_DEPTH, ParsedConfig, parse_config,
    top_level_key_line,
};
use super::sidecar::SidecarConfig;
use crate::name::SidecarName;

/// Loads a directory's configs from the text of its files (file name -> text), resolving
/// `inherits` among them. One file's error never stops the others from loading.
///
/// `directory` only labels messages (`config/logger.yaml`).
pub fn load_directory(
    directory: &str,
    files: &BTreeMap<String, Result<String, Unreadable>>,
) -> LoadReport {
    let origin_of = |file: &str| {
        Origin::File(if directory.is_empty() {
            file.to_owned()
        } else {
            format!("{}/{}", directory.trim_end_matches('/'), file)
        })
    };
    let mut report = LoadReport::default();
    let parsed: BTreeMap<&str, Result<ParsedConfig, ConfigError>> = files
        .iter()
        .map(|(file, text)| {
            let origin = origin_of(file);
            let result = match text {
                Ok(text) => parse_config(origin.clone(), text),
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
fn admit_unique(report: &mut LoadReport, resolved: Vec<(Origin, SidecarConfig)>) {
    let mut holders_by_name: BTreeMap<SidecarName, Vec<Origin>> = BTreeMap::new();
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
                        .map(ToString::to_string)
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
pub fn configmap_origin(namespace: &str, name: &str, key: &str) -> Origin {
    Origin::configmap_item(namespace, name, key)
}

/// Loads the ConfigMap source: each `(origin, text)` is one data item. Items cannot inherit
/// (there is no directory to find a parent in); one item's error never stops the others.
pub fn load_configmap_items(items: &[(Origin, String)]) -> LoadReport {
    let mut report = LoadReport::default();
    let mut resolved = Vec::new();
    for (origin, text) in items {
        match parse_config(origin.clone(), text) {
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

/// Follows `inherits` from `file` to its root and merges down, rejecting escapes and cycles.
fn resolve_inheritance(
    file: &str,
    parsed: &BTreeMap<&str, Result<ParsedConfig, ConfigError>>,
    origin_of: &dyn Fn(&str) -> Origin,
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
                    .map(|f| origin_of(f).to_string())
                    .collect::<Vec<_>>()
                    .join(" -> "),
            ));
        }
        chain.push(parent_key);
        if chain.len() > MAX_INHERITS_DEPTH + 1 {
            return Err(ConfigErrorKind::InheritanceTooDeep(
                chain[..4]
                    .iter()
                    .map(|f| origin_of(f).to_string())
                    .collect::<Vec<_>>()
                    .join(" -> "),
            ));
        }
        current = parent_key;
    }
    // `lineage` runs child -> root and always holds at least the file itself.
    let mut from_root = lineage.into_iter().rev().cloned();
    let root = from_root
        .next()
        .expect("the lineage includes the file itself");
    Ok(from_root.fold(root, |parent, child| child.inherit_from(&parent)))
}
