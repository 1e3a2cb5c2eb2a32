//! The sidecar configs a one-shot command judges by, read as `serve` loads them: the config
//! directory, then the cluster's sidecar ConfigMaps; outside a checkout, those deploy/'s
//! injector serves.

use std::path::Path;

use anyhow::Context;

use super::args::{
    ConfigDirectoryArgs, ConfigMapArgs, DEFAULT_CONFIG_DIRECTORY, DEPLOYED_CONFIGMAP_LABELS,
};
use crate::config::{LoadReport, SidecarSet};
use crate::sources::directory::load_config_directory;
use crate::telemetry::notice;
use tracing::Level;

/// The configs as `serve` would load them (directory, then ConfigMaps overriding), problems
/// printed on stderr. Run where the default directory is not (outside a checkout: a laptop, a
/// kubectl plugin), the ConfigMaps deploy/'s injector serves stand in for it, so that the
/// answers are about the configs the cluster's webhook injects; those refused, it says why.
pub(crate) async fn one_shot_configs(
    client: &kube::Client,
    configs: &ConfigDirectoryArgs,
    configmap_args: &ConfigMapArgs,
    injector_namespace: &str,
) -> anyhow::Result<(SidecarSet, ConfigsUnread)> {
    let mut sources = crate::config::SourceState::default();
    let dir = &configs.config_directory;
    let namespace = configmap_args
        .configmap_namespace
        .as_deref()
        .unwrap_or(injector_namespace);
    let labels = configmap_args.configmap_labels.as_deref();
    let directory = match load_config_directory(dir) {
        Ok(report) => report,
        Err(err) if labels.is_some() => {
            tracing::debug!("no config directory {}: {err}", dir.display());
            LoadReport::default()
        }
        Err(err)
            if err.kind() == std::io::ErrorKind::NotFound
                && dir == Path::new(DEFAULT_CONFIG_DIRECTORY) =>
        {
            return deployed_configs(client, dir, namespace).await;
        }
        Err(err) => {
            return Err(anyhow::anyhow!(
                "cannot read config directory {}: {err}",
                dir.display()
            ));
        }
    };
    print_config_problems(&directory);
    sources.apply(&directory);
    let mut configmaps = crate::config::SourceState::default();
    if let Some(selector) = labels {
        let report = crate::cluster::list::configmap_configs(client, namespace, selector)
            .await
            .with_context(|| {
                format!("cannot list the sidecar ConfigMaps of {namespace} labelled {selector}")
            })?;
        if report.sidecars.is_empty() && report.errors.is_empty() {
            notice(
                Level::WARN,
                &format!(
                    "no sidecar config in the ConfigMaps of {namespace} labelled {selector} (--configmap-namespace, --configmap-labels)"
                ),
                &[],
            );
        }
        print_config_problems(&report);
        configmaps.apply(&report);
    }
    Ok((
        crate::config::merge_sources(&sources, &configmaps).0,
        ConfigsUnread::default(),
    ))
}

/// The configs of the ConfigMaps deploy/'s injector serves (labelled
/// [`DEPLOYED_CONFIGMAP_LABELS`] in its namespace), read because the default directory `dir`
/// is not here. Not an error when they cannot be read (no such namespace, no right to list
/// it): the published revisions still judge the pods, and stderr says why no config is known.
async fn deployed_configs(
    client: &kube::Client,
    dir: &Path,
    namespace: &str,
) -> anyhow::Result<(SidecarSet, ConfigsUnread)> {
    let labels = DEPLOYED_CONFIGMAP_LABELS;
    let read = crate::cluster::list::configmap_configs(client, namespace, labels)
        .await
        .map_err(|err| crate::cluster::error_text(&err));
    let said = match &read {
        Ok(report) if !report.sidecars.is_empty() || !report.errors.is_empty() => format!(
            "no {} directory here: reading the sidecar ConfigMaps of {namespace} labelled {labels}, as deploy/'s injector does (--config-directory, --configmap-labels to read others)",
            dir.display()
        ),
        Ok(_) => format!(
            "no {} directory here, and no sidecar config in the ConfigMaps of {namespace} labelled {labels} (deploy/'s): no sidecar configs (--config-directory, --configmap-namespace, --configmap-labels to name them)",
            dir.display()
        ),
        Err(failure) => format!(
            "no {} directory here, and the ConfigMaps of {namespace} labelled {labels} (deploy/'s) cannot be listed ({failure}): no sidecar configs (--config-directory, --configmap-namespace, --configmap-labels to name them)",
            dir.display()
        ),
    };
    notice(Level::INFO, &said, &[]);
    let report = match read {
        Ok(report) => report,
        Err(failure) => {
            let unread = format!("the ConfigMaps of {namespace} labelled {labels}: {failure}");
            return Ok((SidecarSet::default(), ConfigsUnread(Some(unread))));
        }
    };
    print_config_problems(&report);
    let mut configmaps = crate::config::SourceState::default();
    configmaps.apply(&report);
    let none = crate::config::SourceState::default();
    Ok((
        crate::config::merge_sources(&none, &configmaps).0,
        ConfigsUnread::default(),
    ))
}

pub(crate) fn print_config_problems(report: &LoadReport) {
    for warning in &report.warnings {
        notice(Level::WARN, &warning.to_string(), &[]);
    }
    for error in &report.errors {
        crate::telemetry::error_notice(&error.to_string(), &[]);
    }
}

/// Why the sidecar configs could not be read here (`None`: they were, even if there are none).
#[derive(Clone, Debug, Default)]
pub(crate) struct ConfigsUnread(pub Option<String>);

impl ConfigsUnread {
    pub(crate) fn here(&self) -> crate::cluster::status::ConfigsHere {
        match self.0 {
            Some(_) => crate::cluster::status::ConfigsHere::Unreadable,
            None => crate::cluster::status::ConfigsHere::Read,
        }
    }
}
