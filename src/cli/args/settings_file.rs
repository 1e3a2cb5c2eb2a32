//! `serve --settings FILE`: serve's flags as a YAML mapping, so that a Deployment mounts one
//! ConfigMap instead of carrying a wall of arguments. A key is a flag's long name without the
//! dashes (`max-parallel: 10`); a list repeats the flag; `true` turns a switch on. A flag on
//! the command line, or its environment variable, overrides the file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;

/// The flag that names the file.
pub(crate) const SETTINGS_FLAG: &str = "settings";

#[derive(Debug, thiserror::Error)]
pub(crate) enum SettingsError {
    #[error("the settings file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the settings file {} is not YAML: {source}", path.display())]
    Yaml {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error(
        "the settings file {} must be a mapping of serve's flags to values (max-parallel: 10)",
        path.display()
    )]
    NotAMapping { path: PathBuf },
    #[error(
        "the settings file {}: {key:?} is not a flag of serve (`sidecar-injector serve --help` lists them, spelled as here without the dashes)",
        path.display()
    )]
    UnknownFlag { path: PathBuf, key: String },
    #[error("the settings file {}: {key:?} names the settings file itself", path.display())]
    Nested { path: PathBuf, key: String },
    #[error(
        "the settings file {}: {key}: {what} (a flag takes a value, a list of values, or true/false for a switch)",
        path.display()
    )]
    BadValue {
        path: PathBuf,
        key: String,
        what: &'static str,
    },
}

/// The arguments the file at `path` adds to a `serve` whose command line and environment
/// gave `given`: one `--flag=value` per value of each setting neither of them set.
pub(crate) fn arguments_from_file(
    path: &Path,
    serve: &clap::Command,
    given: &clap::ArgMatches,
) -> Result<Vec<OsString>, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
        path: path.to_owned(),
        source,
    })?;
    arguments(path, &text, serve, given)
}

/// [`arguments_from_file`] on the file's `text`.
pub(crate) fn arguments(
    path: &Path,
    text: &str,
    serve: &clap::Command,
    given: &clap::ArgMatches,
) -> Result<Vec<OsString>, SettingsError> {
    let document: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|source| SettingsError::Yaml {
            path: path.to_owned(),
            source,
        })?;
    let mapping = match document {
        serde_yaml::Value::Mapping(mapping) => mapping,
        // An empty file (or one of comments only) sets nothing.
        serde_yaml::Value::Null => return Ok(Vec::new()),
        _ => {
            return Err(SettingsError::NotAMapping {
                path: path.to_owned(),
            });
        }
    };
    let mut out = Vec::new();
    for (key, value) in mapping {
        let bad = |what| SettingsError::BadValue {
            path: path.to_owned(),
            key: scalar_text(&key).unwrap_or_default(),
            what,
        };
        let key = scalar_text(&key).ok_or_else(|| bad("the key is not a flag name"))?;
        let Some(arg) = serve
            .get_arguments()
            .find(|arg| arg.get_long() == Some(key.as_str()) && !arg.is_hide_set())
        else {
            return Err(SettingsError::UnknownFlag {
                path: path.to_owned(),
                key,
            });
        };
        if key == SETTINGS_FLAG {
            return Err(SettingsError::Nested {
                path: path.to_owned(),
                key,
            });
        }
        if matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let switch = !arg.get_action().takes_values();
        let values = match value {
            serde_yaml::Value::Sequence(items) => items,
            serde_yaml::Value::Null => continue,
            scalar => vec![scalar],
        };
        for item in values {
            if switch {
                match item {
                    serde_yaml::Value::Bool(true) => out.push(format!("--{key}").into()),
                    serde_yaml::Value::Bool(false) => {}
                    _ => return Err(bad("a switch takes true or false")),
                }
                continue;
            }
            let text = scalar_text(&item).ok_or_else(|| bad("a mapping is not a flag's value"))?;
            out.push(format!("--{key}={text}").into());
        }
    }
    Ok(out)
}

/// A scalar as the command line would spell it.
fn scalar_text(value: &serde_yaml::Value) -> Option<String> {
    match value {
        serde_yaml::Value::String(text) => Some(text.clone()),
        serde_yaml::Value::Number(number) => Some(number.to_string()),
        serde_yaml::Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}
