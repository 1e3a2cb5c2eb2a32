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
use crate::config::SidecarSet;
use crate::injection::{Decision, InjectionSettings, PodView, decide};
use crate::sources::directory::load_config_directory;

/// Where the pod template sits in each kind `inject` understands.
fn pod_template_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some(""),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => Some("/spec/template"),
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

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
        denied |= inject_object(&mut document, &sidecars, &settings)?;
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

/// Injects into one object (each item of a `List`, as `kubectl get -o yaml` prints); returns
/// whether it was denied. Kinds without a pod template pass through.
fn inject_object(
    object: &mut Value,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> anyhow::Result<bool> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if kind == "List" {
        let mut denied = false;
        for item in object
            .get_mut("items")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            denied |= inject_object(item, sidecars, settings)?;
        }
        return Ok(denied);
    }
    let label = document_label(object);
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    let Some(template) = pod_template_pointer(&kind).and_then(|p| object.pointer_mut(p)) else {
        return Ok(false);
    };
    let pod = PodView::deserialize(&*template)
        .with_context(|| format!("{label}: cannot read the pod"))?;
    match decide(&pod, &namespace, sidecars, settings) {
        Decision::Inject(injection) => {
            let patch = injection.patch.to_json_patch();
            json_patch::patch(template, &patch)
                .with_context(|| format!("{label}: the patch does not apply"))?;
            for name in &injection.missing {
                eprintln!("{label}: warning: sidecar \"{name}\" not found; injected the rest");
            }
            Ok(false)
        }
        Decision::Skip(_) => Ok(false),
        Decision::Deny(denial) => {
            eprintln!("{label}: denied: {denial}");
            Ok(true)
        }
    }
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

fn document_label(document: &Value) -> String {
    let kind = document
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = document.get("metadata");
    let name = meta
        .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    format!("{kind}/{name}")
}
