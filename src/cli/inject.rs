//! `inject`: what the webhook would do to each document of a file, offline.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::args::*;
use super::one_shot::*;
use crate::annotations::AnnotationKeys;
use crate::injection::InjectionSettings;
use crate::injection::manifest::{ObjectOutcome, inject_manifest};
use crate::sources::directory::load_config_directory;

pub fn run(args: &InjectArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.configs.config_directory;
    let report = load_config_directory(dir)
        .with_context(|| format!("cannot read config directory {}", dir.display()))?;
    print_config_problems(&report);
    let sidecars = report.sidecar_set();
    let settings = InjectionSettings {
        keys: AnnotationKeys::new(&args.annotation_namespace),
        ignored_namespaces: args
            .ignore_namespaces
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        on_missing_sidecar: args.on_missing_sidecar,
    };

    let text = read_input(&args.file)?;
    let mut denied = false;
    let mut out = String::new();
    for (position, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let mut document = Value::deserialize(document).with_context(|| {
            format!("{}: document {} is not valid YAML", args.file, position + 1)
        })?;
        if document.is_null() {
            continue;
        }
        for outcome in inject_manifest(&mut document, &sidecars, &settings)? {
            match outcome {
                ObjectOutcome::Injected { label, missing } => {
                    for name in missing {
                        eprintln!(
                            "{label}: warning: sidecar \"{name}\" not found; injected the rest"
                        );
                    }
                }
                ObjectOutcome::Skipped { .. } => {}
                ObjectOutcome::Denied { label, message } => {
                    eprintln!("{label}: denied: {message}");
                    denied = true;
                }
            }
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&document).context("cannot print YAML")?);
    }
    io::stdout().write_all(out.as_bytes())?;
    Ok(if denied {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn read_input(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))
    }
}
