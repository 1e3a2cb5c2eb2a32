//! `policy`: the configs compiled into admission policies, printed for `kubectl apply -f -`.

use std::io::Write;
use std::process::ExitCode;

use super::args::{ManifestFormat, PolicyArgs};
use crate::annotations::AnnotationKeys;
use crate::injection::yaml::to_yaml;
use crate::policy::{PolicySettings, render};

pub(crate) fn run(args: &PolicyArgs) -> anyhow::Result<ExitCode> {
    let sidecars = args.source.sidecars("policy")?;
    let keys = AnnotationKeys::new(&args.annotation_namespace);
    let ignored = args.ignore_namespaces.namespaces();
    let settings = PolicySettings {
        keys: &keys,
        ignored_namespaces: &ignored,
        on_missing_sidecar: args.on_missing_sidecar.0,
        name: &args.name,
        namespace_selector: args.namespace_selector.as_ref(),
    };
    let objects = match render(&sidecars, &settings) {
        Ok(objects) => objects,
        Err(crate::policy::PolicyError::Refused(refused)) => {
            let mut err = std::io::stderr().lock();
            for refusal in &refused {
                writeln!(err, "policy: cannot inject {refusal}")?;
            }
            writeln!(
                err,
                "policy: {} rule(s) of the configs are not expressed by the policies; nothing printed (the webhook injects these configs)",
                refused.len()
            )?;
            return Ok(ExitCode::FAILURE);
        }
        Err(too_large) => {
            writeln!(
                std::io::stderr().lock(),
                "policy: {too_large}; nothing printed"
            )?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut out = std::io::stdout().lock();
    match args.output {
        ManifestFormat::Yaml => {
            for object in &objects {
                write!(out, "---\n{}", to_yaml(object))?;
            }
        }
        ManifestFormat::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
