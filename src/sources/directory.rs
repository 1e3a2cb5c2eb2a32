//! Reads a config directory from disk for the pure loader in [`crate::config`].

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use crate::config::{LoadReport, MAX_CONFIG_BYTES, Unreadable, load_directory};

/// The text of every `*.yaml` / `*.yml` file in `dir` (not recursive), by file name. Hidden
/// entries are skipped: a mounted ConfigMap keeps its real files under `..data/` and
/// timestamped `..2024_...` directories, and exposes them as symlinks beside them.
/// A config name that cannot be read as a file (a dangling symlink, a directory, a FIFO...)
/// is kept with its error, so the report names it and its last good version stays: skipping
/// it would make the sidecar vanish without a word.
pub(crate) fn read_config_directory(
    dir: &Path,
) -> io::Result<BTreeMap<String, Result<String, Unreadable>>> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with('.') || !is_config_file_name(&file_name) {
            continue;
        }
        files.insert(file_name, read_config_file(&entry.path()));
    }
    Ok(files)
}

/// The text of one config file. Symlinks are followed (ConfigMap volumes present their files
/// that way); only a regular file of at most [`MAX_CONFIG_BYTES`] is opened, so a FIFO or a
/// device never blocks the reader.
pub(crate) fn read_config_file(path: &Path) -> Result<String, Unreadable> {
    let metadata = fs::metadata(path).map_err(|err| {
        let dangling = err.kind() == io::ErrorKind::NotFound
            && fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if dangling {
            Unreadable::DanglingSymlink
        } else {
            Unreadable::Io(err.to_string())
        }
    })?;
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        let kind = if file_type.is_dir() {
            "a directory"
        } else if file_type.is_fifo() {
            "a FIFO"
        } else if file_type.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(Unreadable::NotARegularFile(kind));
    }
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(Unreadable::TooLarge(metadata.len()));
    }
    let mut text = String::new();
    fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text))
        .map_err(|err| Unreadable::Io(err.to_string()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Unreadable::TooLarge(text.len() as u64));
    }
    Ok(text)
}

pub(crate) fn is_config_file_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Reads and loads a directory in one step.
pub fn load_config_directory(dir: &Path) -> io::Result<LoadReport> {
    let files = read_config_directory(dir)?;
    Ok(load_directory(&dir.display().to_string(), &files))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::config::SourceState;

    fn config(name: &str) -> String {
        format!("name: {name}:v1\ncontainers: [{{name: {name}, image: '{name}:1'}}]\n")
    }

    #[test]
    fn a_config_name_that_is_not_a_readable_file_is_an_error_and_its_last_good_version_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let names = ["dangling", "loop", "directory", "fifo", "huge", "deep"];
        for name in names.iter().chain(&["fine"]) {
            fs::write(path(&format!("{name}.yaml")), config(name)).unwrap();
        }
        let mut state = SourceState::default();
        let first = state.apply(&load_config_directory(dir.path()).unwrap());
        assert_eq!((first.errors, first.served), (0, 7));

        for name in names {
            fs::remove_file(path(&format!("{name}.yaml"))).unwrap();
        }
        symlink(path("nowhere.yaml"), path("dangling.yaml")).unwrap();
        symlink(path("loop.yaml"), path("loop.yaml")).unwrap();
        fs::create_dir(path("directory.yaml")).unwrap();
        let mkfifo = std::process::Command::new("mkfifo")
            .arg(path("fifo.yaml"))
            .status()
            .unwrap();
        assert!(mkfifo.success());
        let huge_len = usize::try_from(MAX_CONFIG_BYTES).unwrap() + 1;
        fs::write(
            path("huge.yaml"),
            format!("{}\n{}", config("huge"), "#".repeat(huge_len)),
        )
        .unwrap();
        fs::write(
            path("deep.yaml"),
            format!("{}rollout: {}\n", config("deep"), "[".repeat(100_000)),
        )
        .unwrap();

        let files = read_config_directory(dir.path()).unwrap();
        let error = |name: &str| files[&format!("{name}.yaml")].clone().unwrap_err();
        assert_eq!(error("dangling"), Unreadable::DanglingSymlink);
        assert!(
            error("loop").to_string().contains("symbolic links"),
            "{}",
            error("loop")
        );
        assert_eq!(
            error("directory").to_string(),
            "a directory, not a regular file"
        );
        assert_eq!(error("fifo").to_string(), "a FIFO, not a regular file");
        assert!(
            error("huge")
                .to_string()
                .contains("a sidecar config is at most 262144 bytes")
        );

        let label = dir.path().display().to_string();
        let report = load_directory(&label, &files);
        let deep = report
            .errors
            .iter()
            .find(|e| e.origin.to_string() == format!("{label}/deep.yaml"))
            .expect("the deep config is an error");
        assert_eq!(deep.line, Some(3), "{deep}");
        assert!(deep.to_string().contains("more than 64 levels"), "{deep}");
        let summary = state.apply(&report);
        assert_eq!(summary.errors, names.len(), "each fault counts as an error");
        assert_eq!(
            summary.served, 7,
            "every sidecar keeps its last good version: {:?}",
            summary.kept
        );
        assert_eq!(summary.kept.len(), names.len());
    }

    #[test]
    fn the_example_configs_all_load() {
        let report = load_config_directory(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config"
        )))
        .unwrap();
        assert_eq!(report.errors, []);
        assert_eq!(report.warnings, []);
        let names: Vec<String> = report
            .sidecar_set()
            .names()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "logger:v1",
                "logger:v2",
                "metrics-agent:v1",
                "secrets-agent:v1"
            ]
        );
        let v2 = &report
            .sidecars
            .iter()
            .find(|s| s.config.name.to_string() == "logger:v2")
            .expect("logger:v2 loaded")
            .config;
        assert_eq!(v2.volumes.len(), 2, "logger:v2 inherits v1's volumes");
        assert_eq!(
            v2.containers[0].image.as_deref(),
            Some("fluent/fluent-bit:3.0.7")
        );
    }
}
