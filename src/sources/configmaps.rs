//! The ConfigMap config source: a watch of the labelled ConfigMaps of one namespace, each data
//! item one config. Added, changed and deleted ConfigMaps take effect at once; an invalid item
//! is logged, counted and reported as a Warning Event on its ConfigMap, and its last good
//! version keeps serving.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::watcher;
use kube::{Client, Resource};
use tracing::{error, info, warn};

use crate::cluster::events::{EVENT_NOTE_LIMIT, prefix_within};
use crate::cluster::watch::{Change, watch};
use crate::config::{ConfigError, Origin, configmap_origin, load_configmap_items};
use crate::metrics::Metrics;
use crate::sources::ConfigSources;

pub(crate) const CONFIG_SOURCE_CONFIGMAP: &str = "configmap";

/// Watches until the process ends; the watcher relists on its own after errors, with backoff.
pub(crate) async fn run(
    client: Client,
    recorder: Recorder,
    namespace: String,
    selector: String,
    sources: Arc<Mutex<ConfigSources>>,
    metrics: Arc<Metrics>,
    // Called after every list or change is loaded: `/ready` waits for the first.
    listed: impl Fn() + Send + 'static,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut changes = watch(
        api,
        watcher::Config::default().labels(&selector),
        "ConfigMap",
        |configmap: ConfigMap| {
            Some((
                configmap.metadata.name.clone().unwrap_or_default(),
                configmap,
            ))
        },
    );
    let mut store: BTreeMap<String, ConfigMap> = BTreeMap::new();
    let mut reported: BTreeSet<(Origin, String)> = BTreeSet::new();
    info!(
        namespace,
        selector, "watching ConfigMaps for sidecar configs"
    );
    while let Some(change) = changes.next().await {
        match change {
            Change::Listed(configmaps) => store = configmaps.into_iter().collect(),
            Change::Applied((name, configmap)) => {
                store.insert(name, configmap);
            }
            Change::Deleted((name, _)) => {
                store.remove(&name);
            }
        }
        let problems = reload(&namespace, &store, &sources, &metrics).await;
        listed();
        report_new_problems(&recorder, &store, problems, &mut reported).await;
    }
}

/// Loads every item of every ConfigMap in `store` into the ConfigMap source and publishes.
/// Returns the errors (each names its ConfigMap in its origin).
async fn reload(
    namespace: &str,
    store: &BTreeMap<String, ConfigMap>,
    sources: &Mutex<ConfigSources>,
    metrics: &Metrics,
) -> Vec<ConfigError> {
    let mut items = Vec::new();
    for (name, configmap) in store {
        for (key, text) in configmap.data.iter().flatten() {
            items.push((configmap_origin(namespace, name, key), text.clone()));
        }
    }
    let Some(mut report) = super::load_off_workers(move || load_configmap_items(&items)).await
    else {
        error!(deadline = ?super::LOAD_DEADLINE, "parsing the sidecar ConfigMaps did not finish in time; keeping the configs in force");
        let served = sources
            .lock()
            .expect("config sources lock")
            .configmaps
            .len();
        metrics.record_config_reload(CONFIG_SOURCE_CONFIGMAP, false, served);
        return Vec::new();
    };
    if sources.lock().expect("config sources lock").policy_mode {
        crate::policy::screen(&mut report);
    }
    for warning in &report.warnings {
        warn!("{warning}");
    }
    for err in &report.errors {
        error!("config not loaded: {err}");
    }
    let mut sources = sources.lock().expect("config sources lock");
    let summary = sources.configmaps.apply(&report);
    for origin in &summary.kept {
        warn!(origin = %origin, "keeping the last good version of this config until it is fixed");
    }
    metrics.record_config_reload(CONFIG_SOURCE_CONFIGMAP, summary.errors == 0, summary.served);
    sources.publish(CONFIG_SOURCE_CONFIGMAP);
    report.errors
}

/// A Warning Event on the ConfigMap for each error not already reported; an error that goes
/// away and comes back is reported again.
async fn report_new_problems(
    recorder: &Recorder,
    store: &BTreeMap<String, ConfigMap>,
    problems: Vec<ConfigError>,
    reported: &mut BTreeSet<(Origin, String)>,
) {
    let current: BTreeSet<(Origin, String)> = problems
        .iter()
        .map(|err| (err.origin.clone(), err.to_string()))
        .collect();
    for err in problems {
        let message = err.to_string();
        if reported.contains(&(err.origin.clone(), message.clone())) {
            continue;
        }
        let Some(configmap) = err.origin.configmap().and_then(|name| store.get(name)) else {
            continue;
        };
        let note = format!("{message}; the last good version of this config keeps serving");
        let note = prefix_within(&note, EVENT_NOTE_LIMIT).to_owned();
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidSidecarConfig".into(),
            note: Some(note),
            action: "LoadConfig".into(),
            secondary: None,
        };
        if let Err(publish) = recorder.publish(&event, &configmap.object_ref(&())).await {
            warn!(
                origin = %err.origin,
                "cannot record the Warning Event: {}",
                crate::cluster::error_text(&publish)
            );
        }
    }
    *reported = current;
}
