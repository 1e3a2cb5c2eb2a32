//! Sidecar configs in the Tumblr format (plus `prependContainers` and `rollout`): parsing,
//! validation, inheritance, revisions, and the set in force. Pure: the shell reads files and
//! ConfigMaps and hands their text in.

mod catalog;
mod load;
mod origin;
mod parse;
pub mod revision;
mod sidecar;

#[cfg(any(test, feature = "test-fixtures"))]
pub use catalog::ReloadSummary;
pub use catalog::{LoadReport, LoadedSidecar, SidecarSet};
pub use catalog::{RenderedJson, SourceState, merge_sources};
pub use load::{configmap_origin, load_configmap_items, load_directory};
pub use origin::Origin;
#[cfg(any(test, feature = "test-fixtures"))]
pub use parse::ConfigErrorKind;
pub use parse::{ConfigError, MAX_CONFIG_BYTES};
pub use parse::{ParsedConfig, Unreadable, parse_config};
#[cfg(any(test, feature = "test-fixtures"))]
pub use revision::Revision;
pub use revision::RevisionStamp;
pub use revision::RevisionsInForce;
pub use sidecar::{
    NATIVE_RESTART_POLICY, NativePlacement, NativeSidecars, PodResourcesMode, RolloutMode,
    SidecarConfig, is_native_sidecar,
};

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
