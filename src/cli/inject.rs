//! `inject`: what the webhook would do to each document of a file, offline with a config
//! directory, or with the configs the cluster's injector serves.

use std::io::{self, Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::args::InjectArgs;
use crate::annotations::AnnotationKeys;
use crate::injection::InjectionSettings;
use crate::injection::SkipReason;
use crate::injection::manifest::{ObjectOutcome, inject_manifest};
use crate::injection::yaml::to_yaml;
use crate::telemetry::notice;
use tracing::Level;

pub(crate) fn run(args: &InjectArgs) -> anyhow::Result<ExitCode> {
    let sidecars = args.source.sidecars("inject")?;
    let settings = InjectionSettings {
        keys: AnnotationKeys::new(&args.annotation_namespace),
        ignored_namespaces: args.ignore_namespaces.namespaces(),
        on_missing_sidecar: args.on_missing_sidecar.0,
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
                        notice(
                            Level::WARN,
                            &format!(
                                "{label}: warning: sidecar \"{name}\" not found; injected the rest"
                            ),
                            &[("object", &label), ("sidecar", &name.to_string())],
                        );
                    }
                }
                ObjectOutcome::Skipped { label, reason } => {
                    if let Some(why) = skip_message(&reason, &document, &settings) {
                        notice(
                            Level::INFO,
                            &format!("{label}: not injected: {why}"),
                            &[("object", &label), ("reason", &why)],
                        );
                    }
                }
                ObjectOutcome::Denied { label, message } => {
                    notice(
                        Level::ERROR,
                        &format!("{label}: denied: {message}"),
                        &[("object", &label)],
                    );
                    denied = true;
                }
            }
        }
        out.push_str("---\n");
        out.push_str(&to_yaml(&document));
    }
    // A denial prints nothing: piped into `kubectl apply`, the unmodified objects must not be
    // applied as if they had been injected.
    if !denied {
        io::stdout().write_all(out.as_bytes())?;
    }
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

/// Why an object with a pod template was let through unchanged, when a person would wonder.
/// `None` for an object that requests nothing under our annotation namespace nor another.
fn skip_message(
    reason: &SkipReason,
    document: &Value,
    settings: &InjectionSettings,
) -> Option<String> {
    match reason {
        SkipReason::NoRequest => {
            let other = other_request_key(document, &settings.keys.request)?;
            let reason = SkipReason::OtherAnnotationNamespace {
                key: other,
                ours: settings.keys.request.clone(),
            };
            crate::render::skip_reason(&reason, &settings.keys)
        }
        _ => crate::render::skip_reason(reason, &settings.keys),
    }
}

/// A `*/request` annotation under another namespace, anywhere in the document.
fn other_request_key(value: &Value, ours: &str) -> Option<String> {
    match value {
        Value::Object(map) => map
            .get("annotations")
            .and_then(Value::as_object)
            .and_then(|annotations| {
                annotations
                    .keys()
                    .find(|k| k.ends_with("/request") && k.as_str() != ours)
                    .cloned()
            })
            .or_else(|| map.values().find_map(|v| other_request_key(v, ours))),
        Value::Array(items) => items.iter().find_map(|v| other_request_key(v, ours)),
        _ => None,
    }
}
