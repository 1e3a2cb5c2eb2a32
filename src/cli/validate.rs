//! `validate`: check configs and print each with its revision.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::args::ValidateArgs;
use crate::config::{LoadReport, Origin, configmap_origin, load_configmap_items, load_directory};
use crate::sources::directory::{
    is_config_file_name, load_config_directory, read_config_directory, read_config_file,
};
use crate::telemetry::error_notice;

pub(crate) fn run(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let targets: Vec<PathBuf> = if args.paths.is_empty() {
        vec![args.configs.config_directory.clone()]
    } else {
        args.paths.clone()
    };
    let mut failed = false;
    let mut stdout = io::stdout().lock();
    for target in &targets {
        let stdin = target.as_os_str() == "-";
        if !stdin && !target.exists() {
            error_notice(
                &format!("{}: no such file or directory", target.display()),
                &[],
            );
            failed = true;
            continue;
        }
        let report = if stdin {
            let mut text = String::new();
            io::stdin()
                .lock()
                .take(MAX_MANIFEST_BYTES)
                .read_to_string(&mut text)
                .context("cannot read standard input")?;
            match configmap_items(&text) {
                Some(items) => load_configmap_items(&items),
                // One config; `inherits` has no directory to look in.
                None => load_directory("", &[("-".to_owned(), Ok(text))].into()),
            }
        } else if target.is_dir() {
            load_config_directory(target)
                .with_context(|| format!("cannot read directory {}", target.display()))?
        } else {
            match read_manifest(target).as_deref().and_then(configmap_items) {
                Some(items) => load_configmap_items(&items),
                None => load_single_file(target)?,
            }
        };
        for sidecar in &report.sidecars {
            let policy = match sidecar.config.rollout_mode() {
                crate::config::RolloutMode::Auto => "",
                crate::config::RolloutMode::Manual => "  (rollout: manual)",
            };
            writeln!(
                stdout,
                "ok  {:<24} {}  {}{policy}",
                sidecar.config.name.to_string(),
                sidecar.revision,
                sidecar.origin
            )?;
            // `sidecar-injector policy` would refuse it: said here before anyone relies on it.
            for reason in crate::policy::unsupported(sidecar) {
                writeln!(stdout, "    not in policy mode: {reason}")?;
            }
        }
        for warning in &report.warnings {
            writeln!(stdout, "{warning}")?;
        }
        for error in &report.errors {
            error_notice(&error.to_string(), &[]);
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// How much of a manifest (`kubectl get configmaps -o yaml`) is read: a ConfigMap holds at
/// most 1 MiB, and a list of them more.
const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

/// The file's text, when it is small enough to be a manifest; a config file too large or
/// unreadable is left to the config loader, which says why.
fn read_manifest(file: &Path) -> Option<String> {
    // A FIFO or a device would block or never end: the config loader refuses them by name.
    if !std::fs::metadata(file).ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(file)
        .ok()?
        .take(MAX_MANIFEST_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The data items of the ConfigMaps in `text` (documents of `kind: ConfigMap`, or a `kind:
/// List` of them as `kubectl get -o yaml` prints it), named as the ConfigMap source names them:
/// each item is one config. `None` when the text holds no ConfigMap (it is a sidecar config, or
/// not YAML, which the config loader reports with its line).
fn configmap_items(text: &str) -> Option<Vec<(Origin, String)>> {
    use serde::Deserialize;
    let mut configmaps = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize(document).ok()?;
        match value.get("kind").and_then(serde_yaml::Value::as_str) {
            Some("ConfigMap") => configmaps.push(value),
            Some("List") => configmaps.extend(
                value
                    .get("items")
                    .and_then(serde_yaml::Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .filter(|item| item.get("kind").and_then(|k| k.as_str()) == Some("ConfigMap"))
                    .cloned(),
            ),
            _ => {}
        }
    }
    if configmaps.is_empty() {
        return None;
    }
    let mut items = Vec::new();
    for configmap in configmaps {
        let (namespace, name) = (
            metadata_text(&configmap, "namespace"),
            metadata_text(&configmap, "name"),
        );
        let data = configmap
            .get("data")
            .and_then(serde_yaml::Value::as_mapping);
        for (key, value) in data.into_iter().flatten() {
            let (Some(key), Some(value)) = (key.as_str(), value.as_str()) else {
                continue;
            };
            items.push((configmap_origin(namespace, name, key), value.to_owned()));
        }
    }
    Some(items)
}

fn metadata_text<'a>(object: &'a serde_yaml::Value, key: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(key))
        .and_then(serde_yaml::Value::as_str)
        .unwrap_or_default()
}

/// A single file is checked in the company of its directory, since `inherits` and duplicate
/// names depend on its neighbours; only what concerns the file itself is reported.
fn load_single_file(file: &Path) -> anyhow::Result<LoadReport> {
    let dir = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = file
        .file_name()
        .with_context(|| format!("{} is not a file", file.display()))?
        .to_string_lossy()
        .into_owned();
    let mut files = read_config_directory(&dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?;
    if !is_config_file_name(&file_name) || !files.contains_key(&file_name) {
        files.insert(file_name.clone(), read_config_file(file));
    }
    let dir_label = dir.display().to_string();
    let mut report = load_directory(&dir_label, &files);
    let origin = Origin::File(format!("{}/{}", dir_label.trim_end_matches('/'), file_name));
    report.sidecars.retain(|s| s.origin == origin);
    report.errors.retain(|e| e.origin == origin);
    report.warnings.retain(|w| w.origin == origin);
    Ok(report)
}
