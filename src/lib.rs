//! sidecar-injector: a mutating admission webhook that injects sidecars requested by a pod
//! annotation, stamps each with the content revision it was injected from, and restarts the
//! workloads whose pods carry a stale revision.
//!
//! The modules fall in two layers, and data flows one way: watch events -> index -> plan ->
//! executor.
//!
//! - The pure core (values in, values out; no tokio, no kube client, no files, no clock):
//!   [`annotations`] and [`name`] (the vocabulary), [`workload`] (kinds and references),
//!   [`config`] (parse, load, revision, the set in force), [`injection`] (the decision and the
//!   JSON patch), [`admission`] (an AdmissionReview in, a reply out), [`drift`] (the index and
//!   its classification), [`nodes`] (what the nodes' kubelets run), [`token_bucket`] (the API rate limit), [`maintenance`] (when
//!   restarts may start), [`explain`] (the checks
//!   of `explain`) and [`rollout`] (the state machine, the planner, campaigns, health, change
//!   text, the publication rules).
//! - The I/O shell: [`cluster`] (client, watches, lists, the status and history ConfigMaps,
//!   Events, the Lease), [`sources`] (the directory and ConfigMap config sources behind one
//!   snapshot), [`engine`] (the rollout executor: performs the state machine's effects),
//!   [`notifier`] (campaign notices to `--notify-url`), `prometheus` (the metric checks'
//!   queries), [`serve`] (HTTPS, readiness,
//!   certificate reload), [`metrics`], [`telemetry`] and [`cli`] (arguments, one file per
//!   subcommand).
//! - The rendering layer, `render`: the sentences a person reads about what the core
//!   decided, and every flag or command they name.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

/// The crate version and the git commit it was built from (`0.2.0 (commit 650ebd9c1a2b)`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SIDECAR_INJECTOR_COMMIT"),
    ")"
);

/// The git commit the binary was built from, or `unknown`.
pub const COMMIT: &str = env!("SIDECAR_INJECTOR_COMMIT");

pub(crate) mod token_bucket;

pub use sidecar_injector_core::{
    admission, annotations, check, config, drift, explain, foreign, injection, maintenance, name,
    nodes, policy, rollout, workload,
};

pub mod cli;
pub mod cluster;
pub mod engine;
pub mod metrics;
pub mod notifier;
pub(crate) mod prometheus;
pub(crate) mod render;
pub mod serve;
pub mod sources;
pub mod telemetry;

#[cfg(test)]
pub(crate) mod test_fixtures;
