//! Filesystem change notification, debounced: one tick after a burst of events settles.
//!
//! Directories are watched, not files: Kubernetes updates a mounted ConfigMap or Secret by
//! swapping a `..data` symlink, which a watch on the old file would never see.

use std::path::PathBuf;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// A tick on the returned channel each time something under `dirs` changed and then stayed
/// quiet for `debounce`. The watcher lives as long as the receiver's task does.
pub fn watch_paths(dirs: &[PathBuf], debounce: Duration) -> notify::Result<mpsc::Receiver<()>> {
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher: RecommendedWatcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access()) {
                let _ = raw_tx.send(());
            }
        })?;
    let mut watched: Vec<&PathBuf> = Vec::new();
    for dir in dirs {
        if !watched.contains(&dir) {
            watcher.watch(dir, RecursiveMode::NonRecursive)?;
            watched.push(dir);
        }
    }
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let _watcher = watcher;
        while raw_rx.recv().await.is_some() {
            loop {
                match tokio::time::timeout(debounce, raw_rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            if tx.send(()).await.is_err() {
                return;
            }
        }
    });
    Ok(rx)
}
