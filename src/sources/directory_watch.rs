//! Filesystem change notification for the config directory and the certificate files: one
//! tick when what is watched changed and its content is complete.
//!
//! Directories are watched, not files: Kubernetes updates a mounted ConfigMap or Secret by
//! swapping a `..data` symlink, which a watch on the old file would never see. Each directory's
//! parent is watched too, so that a directory deleted and recreated, or a symlinked directory
//! pointed at a new target (git-sync), is followed instead of going deaf.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

/// One watched directory and the entries in it that matter.
#[derive(Debug, Clone)]
pub(crate) struct WatchedDirectory {
    pub(crate) directory: PathBuf,
    /// Entry names that trigger a reload; others (a log file beside the certificates) do not.
    pub(crate) wanted: fn(&str, &[String]) -> bool,
    /// Names passed to `wanted` (the certificate and key file names).
    pub(crate) names: Vec<String>,
}

impl WatchedDirectory {
    /// Every non-hidden `*.yaml`/`*.yml` entry, and the `..data` swap of a ConfigMap volume.
    pub(crate) fn configs(directory: PathBuf) -> Self {
        Self {
            directory,
            wanted: |name, _| name == "..data" || super::directory::is_config_file_name(name),
            names: Vec::new(),
        }
    }

    /// The named files, and the `..data` swap of a Secret volume.
    pub(crate) fn files(directory: PathBuf, names: Vec<String>) -> Self {
        Self {
            directory,
            wanted: |name, names| name == "..data" || names.iter().any(|n| n == name),
            names,
        }
    }
}

/// What one filesystem event means for the reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FsChange {
    /// Data written to a file that is still open for writing.
    Written(PathBuf),
    /// A file opened for writing was closed: its content is complete.
    Closed(PathBuf),
    /// Anything else that changes what a reload reads (create, remove, rename, chmod).
    Changed,
}

/// Decides when a reload may run: after `debounce` without events and with no watched file
/// half-written, but never later than `max_wait` after the first unserved change (a file
/// written to without pause, or a writer that never closes, cannot postpone it forever).
/// Pure: time comes in as an argument.
#[derive(Debug)]
pub(crate) struct ReloadGate {
    debounce: Duration,
    max_wait: Duration,
    first_pending: Option<Instant>,
    last_event: Option<Instant>,
    writing: BTreeSet<PathBuf>,
}

impl ReloadGate {
    pub(crate) fn new(debounce: Duration) -> Self {
        Self {
            debounce,
            max_wait: (debounce * 10).max(Duration::from_secs(2)),
            first_pending: None,
            last_event: None,
            writing: BTreeSet::new(),
        }
    }

    pub(crate) fn record(&mut self, change: FsChange, now: Instant) {
        self.first_pending.get_or_insert(now);
        self.last_event = Some(now);
        match change {
            FsChange::Written(path) => {
                self.writing.insert(path);
            }
            FsChange::Closed(path) => {
                self.writing.remove(&path);
            }
            FsChange::Changed => {}
        }
    }

    /// When the reload is due, if a change is pending.
    pub(crate) fn due(&self) -> Option<Instant> {
        let first = self.first_pending?;
        let bound = first + self.max_wait;
        if !self.writing.is_empty() {
            return Some(bound);
        }
        let quiet = self.last_event.unwrap_or(first) + self.debounce;
        Some(quiet.min(bound))
    }

    /// True (and the gate reset) when a reload is due at `now`.
    pub(crate) fn fire(&mut self, now: Instant) -> bool {
        if self.due().is_some_and(|due| due <= now) {
            self.first_pending = None;
            self.last_event = None;
            self.writing.clear();
            true
        } else {
            false
        }
    }
}

/// Whether an event path concerns a watched directory: an entry it wants, or the directory
/// itself (seen from its parent's watch, or its own removal).
fn concerns(path: &Path, watched: &[WatchedDirectory]) -> bool {
    watched.iter().any(|spec| {
        path == spec.directory
            || (path.parent() == Some(spec.directory.as_path())
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|name| (spec.wanted)(name, &spec.names)))
    })
}

fn classify(event: &notify::Event, watched: &[WatchedDirectory]) -> Option<FsChange> {
    let path = event.paths.iter().find(|p| concerns(p, watched))?;
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {
            Some(FsChange::Closed(path.clone()))
        }
        EventKind::Access(_) => None,
        EventKind::Modify(ModifyKind::Data(_)) => Some(FsChange::Written(path.clone())),
        _ => Some(FsChange::Changed),
    }
}

fn parent_of(directory: &Path) -> PathBuf {
    directory
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// The identity of what a path resolves to now, to notice a recreated or re-pointed directory.
fn identity(directory: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(directory)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The watcher and what each directory resolved to when it was last watched.
struct Watches {
    watcher: RecommendedWatcher,
    directories: Vec<(PathBuf, Option<(u64, u64)>)>,
}

/// How often a watched directory that is gone is looked for again. Its parent's watch sees a
/// plain directory come back, but not a symlink's target recreated elsewhere.
const MISSING_RECHECK: Duration = Duration::from_secs(1);

impl Watches {
    fn any_missing(&self) -> bool {
        self.directories
            .iter()
            .any(|(_, watched)| watched.is_none())
    }

    /// Watches each directory again whose path now resolves to something else: the old watch
    /// follows a deleted directory or a symlink's old target, and would never fire again.
    /// True when some directory changed.
    fn follow(&mut self) -> bool {
        let mut changed = false;
        for (directory, watched) in &mut self.directories {
            let now = identity(directory);
            if now == *watched {
                continue;
            }
            changed = true;
            let _ = self.watcher.unwatch(directory);
            match now {
                Some(_) => match self.watcher.watch(directory, RecursiveMode::NonRecursive) {
                    Ok(()) => {
                        debug!(directory = %directory.display(), "watching the directory again");
                        *watched = now;
                    }
                    Err(err) => {
                        warn!(directory = %directory.display(), "cannot watch the directory again: {err}");
                        *watched = None;
                    }
                },
                None => *watched = None,
            }
        }
        changed
    }
}

/// A tick on the returned channel each time something `watched` changed and the gate opened
/// (see [`ReloadGate`]). The watcher lives as long as the receiver's task does.
pub(crate) fn watch_paths(
    watched: Vec<WatchedDirectory>,
    debounce: Duration,
) -> notify::Result<mpsc::Receiver<()>> {
    // notify reports events under the absolute path (a relative one joined to the working
    // directory), so a relative directory kept as given would match no event: `config/`, the
    // default, would never reload.
    let watched = watched
        .into_iter()
        .map(|mut spec| {
            spec.directory = std::path::absolute(&spec.directory)?;
            Ok(spec)
        })
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(notify::Error::io)?;
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<FsChange>();
    let filter = watched.clone();
    let mut watcher: RecommendedWatcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Some(change) = event.ok().and_then(|e| classify(&e, &filter)) {
                let _ = raw_tx.send(change);
            }
        })?;
    let mut directories: Vec<(PathBuf, Option<(u64, u64)>)> = Vec::new();
    let mut parents: Vec<PathBuf> = Vec::new();
    for spec in &watched {
        if directories.iter().any(|(d, _)| *d == spec.directory) {
            continue;
        }
        watcher.watch(&spec.directory, RecursiveMode::NonRecursive)?;
        directories.push((spec.directory.clone(), identity(&spec.directory)));
        let parent = parent_of(&spec.directory);
        if !parents.contains(&parent) {
            // Best effort: without it only recreation goes unseen.
            if let Err(err) = watcher.watch(&parent, RecursiveMode::NonRecursive) {
                warn!(directory = %parent.display(), "cannot watch the parent directory; a recreated directory will not be followed: {err}");
            }
            parents.push(parent);
        }
    }
    let mut watches = Watches {
        watcher,
        directories,
    };
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut gate = ReloadGate::new(debounce);
        loop {
            let recheck = watches
                .any_missing()
                .then(|| Instant::now() + MISSING_RECHECK);
            let wake = match (gate.due(), recheck) {
                (Some(due), Some(recheck)) => Some(due.min(recheck)),
                (due, recheck) => due.or(recheck),
            };
            let change = match wake {
                Some(wake) => match tokio::time::timeout_at(wake, raw_rx.recv()).await {
                    Ok(change) => change,
                    Err(_) => {
                        let now = Instant::now();
                        if gate.fire(now) {
                            watches.follow();
                            if tx.send(()).await.is_err() {
                                return;
                            }
                        } else if watches.follow() {
                            gate.record(FsChange::Changed, now);
                        }
                        continue;
                    }
                },
                None => raw_rx.recv().await,
            };
            match change {
                Some(change) => gate.record(change, Instant::now()),
                None => return,
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_burst_fires_once_after_the_quiet_time() {
        let start = Instant::now();
        let mut gate = ReloadGate::new(Duration::from_millis(200));
        assert_eq!(gate.due(), None, "nothing pending");
        gate.record(FsChange::Changed, at(start, 0));
        gate.record(FsChange::Changed, at(start, 100));
        assert_eq!(gate.due(), Some(at(start, 300)));
        assert!(!gate.fire(at(start, 299)));
        assert!(gate.fire(at(start, 300)));
        assert_eq!(gate.due(), None, "reset after firing");
    }

    #[test]
    fn a_half_written_file_waits_for_its_close() {
        let start = Instant::now();
        let file = PathBuf::from("config/logger.yaml");
        let mut gate = ReloadGate::new(Duration::from_millis(200));
        gate.record(FsChange::Written(file.clone()), at(start, 0));
        // The writer pauses longer than the quiet time between its two parts.
        assert!(!gate.fire(at(start, 1000)), "still open for writing");
        gate.record(FsChange::Written(file.clone()), at(start, 1100));
        gate.record(FsChange::Closed(file), at(start, 1150));
        assert_eq!(gate.due(), Some(at(start, 1350)));
        assert!(gate.fire(at(start, 1350)));
    }

    #[test]
    fn endless_edits_or_a_writer_that_never_closes_postpone_at_most_max_wait() {
        let start = Instant::now();
        let file = PathBuf::from("config/logger.yaml");
        let mut gate = ReloadGate::new(Duration::from_millis(200));
        // 352 complete edits in 10 s: one every 28 ms, never 200 ms of quiet.
        let mut fired = Vec::new();
        for i in 0..352u64 {
            let now = at(start, i * 28);
            if gate.fire(now) {
                fired.push(i * 28);
            }
            gate.record(FsChange::Written(file.clone()), now);
            gate.record(FsChange::Closed(file.clone()), now);
        }
        assert!(
            fired.len() >= 4 && fired.windows(2).all(|w| w[1] - w[0] <= 2028),
            "a reload at least every max_wait: {fired:?}"
        );
        let mut gate = ReloadGate::new(Duration::from_millis(200));
        gate.record(FsChange::Written(file), at(start, 0));
        assert!(!gate.fire(at(start, 1999)));
        assert!(
            gate.fire(at(start, 2000)),
            "an unclosed file waits at most max_wait"
        );
    }

    #[test]
    fn only_wanted_entries_and_the_directory_itself_matter() {
        let watched = vec![
            WatchedDirectory::files(
                PathBuf::from("/certs"),
                vec!["tls.crt".to_owned(), "tls.key".to_owned()],
            ),
            WatchedDirectory::configs(PathBuf::from("/etc/sidecars")),
        ];
        let event = |kind, path: &str| notify::Event::new(kind).add_path(PathBuf::from(path));
        let written = EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any));
        let created = EventKind::Create(notify::event::CreateKind::File);
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(
            classify(&event(written, "/certs/tls.crt"), &watched),
            Some(FsChange::Written(PathBuf::from("/certs/tls.crt")))
        );
        assert_eq!(
            classify(&event(closed, "/certs/tls.key"), &watched),
            Some(FsChange::Closed(PathBuf::from("/certs/tls.key")))
        );
        assert_eq!(
            classify(&event(created, "/certs/..data"), &watched),
            Some(FsChange::Changed)
        );
        assert_eq!(
            classify(&event(written, "/certs/server.log"), &watched),
            None
        );
        assert_eq!(
            classify(&event(created, "/certs/..2026_11_23"), &watched),
            None
        );
        assert_eq!(
            classify(&event(created, "/etc/sidecars/logger.yml"), &watched),
            Some(FsChange::Changed)
        );
        assert_eq!(
            classify(&event(created, "/etc/sidecars/notes.txt"), &watched),
            None
        );
        assert_eq!(classify(&event(created, "/etc/passwd"), &watched), None);
        assert_eq!(
            classify(&event(created, "/etc/sidecars"), &watched),
            Some(FsChange::Changed),
            "the directory recreated, seen from its parent"
        );
        let opened = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert_eq!(classify(&event(opened, "/certs/tls.crt"), &watched), None);
    }
}
