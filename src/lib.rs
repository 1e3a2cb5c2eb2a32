//! sidecar-injector: a mutating admission webhook that injects sidecars requested by a pod
//! annotation and stamps each with the content revision it was injected from.
//!
//! The modules here are the pure core: values in, values out, no I/O. The binary's shell
//! (`cli`) reads files and prints.
#![forbid(unsafe_code)]

pub mod admission;
pub mod annotations;
pub mod api_client;
pub mod cli;
pub mod config;
pub mod config_directory;
pub mod configmaps;
pub mod container_selection;
pub mod drift;
pub mod drift_snapshot;
pub mod drift_watch;
pub mod event_text;
pub mod injection;
pub mod lease;
pub mod metrics;
pub mod name;
pub mod patch;
pub mod reload;
pub mod revision;
pub mod rollout;
pub mod rollout_command;
pub mod rollout_engine;
pub mod server;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod test_fixtures;
pub mod tls;
