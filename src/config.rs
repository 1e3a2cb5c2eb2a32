//! Sidecar configs in the Tumblr format (plus `prependContainers` and `rollout`): parsing,
//! validation, inheritance, revisions, and the set in force. Pure: the shell reads files and
//! ConfigMaps and hands their text in.

mod catalog;
mod load;
mod origin;
mod parse;
pub mod revision;
mod sidecar;

pub use catalog::{
    ListEnd, LoadReport, LoadedSidecar, ReloadSummary, RenderedJson, RenderedSidecar, SidecarSet,
    SourceState, merge_sources,
};
pub use load::{configmap_origin, load_configmap_items, load_directory};
pub use origin::Origin;
pub use parse::{
    ConfigError, ConfigErrorKind, ConfigWarning, MAX_CONFIG_BYTES, MAX_FLOW_DEPTH,
    MAX_INHERITS_DEPTH, ParsedConfig, parse_config,
};
pub use revision::{Revision, RevisionStamp, RevisionsInForce};
pub use sidecar::{RolloutMode, RolloutPolicy, SidecarConfig, TOP_LEVEL_KEYS};

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
