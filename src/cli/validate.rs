//! `validate`: check configs and print each with its revision.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::args::*;
use crate::config::{LoadReport, Origin, load_directory};
use crate::sources::directory::{
    is_config_file_name, load_config_directory, read_config_directory, read_config_file,
};
use crate::telemetry::error_notice;

pub fn run(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let targets: Vec<PathBuf> = if args.paths.is_empty() {
        vec![args.configs.config_directory.clone()]
    } else {
        args.paths.clone()
    };
    let mut failed = false;
    let mut stdout = io::stdout().lock();
    for target in &targets {
        if !target.exists() {
            error_notice(
                &format!("{}: no such file or directory", target.display()),
                &[],
            );
            failed = true;
            continue;
        }
        let report = if target.is_dir() {
            load_config_directory(target)
                .with_context(|| format!("cannot read directory {}", target.display()))?
        } else {
            load_single_file(target)?
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
