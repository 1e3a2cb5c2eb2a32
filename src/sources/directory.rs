//! Reads a config directory from disk for the pure loader in [`crate::config`].

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use crate::config::{LoadReport, load_directory};

/// The text of every `*.yaml` / `*.yml` file in `dir` (not recursive), by file name. Hidden
/// entries are skipped: a mounted ConfigMap keeps its real files under `..data/` and
/// timestamped `..2024_...` directories, and exposes them as symlinks beside them.
/// A file that cannot be read is kept with its error, so the report names it.
pub fn read_config_directory(dir: &Path) -> io::Result<BTreeMap<String, Result<String, String>>> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with('.') || !is_config_file_name(&file_name) {
            continue;
        }
        let path = entry.path();
        // Follows symlinks, which is how ConfigMap volumes present their files.
        if !path.is_file() {
            continue;
        }
        files.insert(
            file_name,
            fs::read_to_string(&path).map_err(|e| e.to_string()),
        );
    }
    Ok(files)
}

pub fn is_config_file_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Reads and loads a directory in one step.
pub fn load_config_directory(dir: &Path) -> io::Result<LoadReport> {
    let files = read_config_directory(dir)?;
    Ok(load_directory(&dir.display().to_string(), &files))
}
