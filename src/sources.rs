//! The config sources (the directory and the labelled ConfigMaps) behind one snapshot: each
//! keeps its configs' last good versions, and every change publishes the merged set to the
//! webhook and the engine.

pub(crate) mod configmaps;
pub mod directory;
mod directory_watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::config::{SidecarSet, SourceState, merge_sources};
use crate::metrics::Metrics;
use directory::load_config_directory;
pub(crate) use directory_watch::{WatchedDirectory, watch_paths};

pub(crate) const CONFIG_SOURCE_DIRECTORY: &str = "directory";

#[derive(Debug, thiserror::Error)]
pub(crate) enum SourceError {
    #[error(
        "the config directory {} does not exist (--config-directory, CONFIG_DIR)",
        directory.display()
    )]
    Missing { directory: PathBuf },
    #[error("the config directory {} is not a directory (--config-directory, CONFIG_DIR)", directory.display())]
    NotADirectory { directory: PathBuf },
    #[error("cannot watch {}: {source}", directory.display())]
    Watch {
        directory: PathBuf,
        source: notify::Error,
    },
}

/// Both config sources and the snapshot they publish to every request and consumer.
pub(crate) struct ConfigSources {
    pub(crate) directory: SourceState,
    pub(crate) configmaps: SourceState,
    publish: watch::Sender<Arc<SidecarSet>>,
    /// `--injection=policy`: a config the policies cannot express is refused as a broken one.
    pub(crate) policy_mode: bool,
}

impl ConfigSources {
    pub(crate) fn new(publish: watch::Sender<Arc<SidecarSet>>) -> Self {
        Self {
            directory: SourceState::default(),
            configmaps: SourceState::default(),
            publish,
            policy_mode: false,
        }
    }

    /// Merges the sources (a ConfigMap config overrides a disk config of the same name) and
    /// publishes the result.
    pub(crate) fn publish(&self, changed_source: &'static str) {
        let (set, overridden) = merge_sources(&self.directory, &self.configmaps);
        for name in overridden {
            info!(sidecar = %name, "the ConfigMap config overrides the disk config of the same name");
        }
        let names: Vec<&str> = set.iter().map(|s| s.stamp.as_str()).collect();
        // A comma-separated string: a JSON log line carries it as one readable field.
        info!(source = changed_source, sidecars = %names.join(","), "sidecar configs in force");
        self.publish.send_replace(Arc::new(set));
    }
}

/// How long reading and parsing one source may take. Past it the reload is given up and the
/// configs in force stay; the work itself is bounded by the config limits.
pub(crate) const LOAD_DEADLINE: Duration = Duration::from_secs(10);

/// Runs `load` on the blocking pool within [`LOAD_DEADLINE`]: file reads and YAML parsing
/// never stall the async workers that answer `/mutate` and `/health`. `None` when it is late
/// (its result, when it comes, is dropped).
pub(crate) async fn load_off_workers<R: Send + 'static>(
    load: impl FnOnce() -> R + Send + 'static,
) -> Option<R> {
    match tokio::time::timeout(LOAD_DEADLINE, tokio::task::spawn_blocking(load)).await {
        Ok(Ok(result)) => Some(result),
        Ok(Err(join)) => {
            error!("loading configs failed: {join}");
            None
        }
        Err(_) => None,
    }
}

/// Loads the config directory into the sources, publishes the result, and records it. The
/// files are read and parsed without holding the sources, so a read that never returns
/// (a FIFO swapped in after the check) blocks nothing else.
pub(crate) async fn reload_configs(
    directory: &Path,
    sources: &Mutex<ConfigSources>,
    metrics: &Metrics,
) {
    let dir = directory.to_path_buf();
    let loaded = load_off_workers(move || load_config_directory(&dir)).await;
    let mut sources = sources.lock().expect("config sources lock");
    let policy_mode = sources.policy_mode;
    let state = &mut sources.directory;
    let mut report = match loaded {
        Some(Ok(report)) => report,
        Some(Err(err)) => {
            error!(directory = %directory.display(), "cannot read the config directory; keeping the configs in force: {err}");
            metrics.record_config_reload(CONFIG_SOURCE_DIRECTORY, false, state.len());
            return;
        }
        None => {
            error!(directory = %directory.display(), deadline = ?LOAD_DEADLINE, "reading the config directory did not finish in time; keeping the configs in force");
            metrics.record_config_reload(CONFIG_SOURCE_DIRECTORY, false, state.len());
            return;
        }
    };
    if policy_mode {
        crate::policy::screen(&mut report);
    }
    for warning in &report.warnings {
        warn!("{warning}");
    }
    for err in &report.errors {
        error!("config not loaded: {err}");
    }
    let summary = state.apply(&report);
    for origin in &summary.kept {
        warn!(origin = %origin, "keeping the last good version of this config until it is fixed");
    }
    metrics.record_config_reload(CONFIG_SOURCE_DIRECTORY, summary.errors == 0, summary.served);
    sources.publish(CONFIG_SOURCE_DIRECTORY);
}

/// The config directory is there to be read and watched: without it `serve` would start with
/// no directory configs and fail at the watch with notify's words for it.
pub(crate) fn check_config_directory(directory: &Path) -> Result<(), SourceError> {
    match std::fs::metadata(directory) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(SourceError::NotADirectory {
            directory: directory.to_path_buf(),
        }),
        // Another failure (no permission to look) is left to the read, which says which.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(SourceError::Missing {
            directory: directory.to_path_buf(),
        }),
        Err(_) => Ok(()),
    }
}

/// Reloads the config directory after each (debounced) change in it.
pub(crate) fn spawn_config_reloader(
    directory: PathBuf,
    debounce: Duration,
    sources: Arc<Mutex<ConfigSources>>,
    metrics: Arc<Metrics>,
) -> Result<(), SourceError> {
    let mut changes = watch_paths(vec![WatchedDirectory::configs(directory.clone())], debounce)
        .map_err(|source| SourceError::Watch {
            directory: directory.clone(),
            source,
        })?;
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            reload_configs(&directory, &sources, &metrics).await;
        }
    });
    Ok(())
}
