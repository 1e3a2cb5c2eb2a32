//! Sidecar configs in the Tumblr format (plus `prependContainers` and `rollout`): parsing,
//! validation, inheritance, revisions, and the set in force. Pure: the shell reads files and
//! ConfigMaps and hands their text in.

mod catalog;
mod load;
mod origin;
mod parse;
pub(crate) mod revision;
mod sidecar;

#[cfg(test)]
pub(crate) use catalog::ReloadSummary;
pub use catalog::{LoadReport, LoadedSidecar, SidecarSet};
pub(crate) use catalog::{RenderedJson, SourceState, merge_sources};
pub use load::{configmap_origin, load_configmap_items, load_directory};
pub(crate) use origin::Origin;
#[cfg(test)]
pub(crate) use parse::ConfigErrorKind;
pub(crate) use parse::{ConfigError, MAX_CONFIG_BYTES};
pub use parse::{ParsedConfig, Unreadable, parse_config};
#[cfg(test)]
pub(crate) use revision::Revision;
pub(crate) use revision::RevisionStamp;
pub use revision::RevisionsInForce;
pub(crate) use sidecar::{
    NATIVE_RESTART_POLICY, NativePlacement, NativeSidecars, PodResourcesMode, RolloutMode,
    SidecarConfig, is_native_sidecar,
};

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
