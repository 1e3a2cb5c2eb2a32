//! The pure core of sidecar-injector: values in, values out. No async runtime, no Kubernetes
//! client, no files, no clock (time comes in as an argument), no logging: the shell
//! (`sidecar-injector`) does the I/O and says what the core decided.
//!
//! [`annotations`] and [`name`] (the vocabulary), [`workload`] (kinds and references),
//! [`config`] (parse, load, revision, the set in force), [`injection`] (the decision and the
//! JSON patch), [`admission`] (an AdmissionReview in, a reply out), [`drift`] (the index and
//! its classification), [`nodes`] (what the nodes' kubelets run), [`maintenance`] (when
//! restarts may start), [`policy`] (the configs as admission policies), [`explain`] (the checks
//! of `explain`), [`check`] (the proof an injector injects) and [`rollout`] (the state machine, the planner, campaigns, health, change
//! text, the publication rules).
#![forbid(unsafe_code)]

pub mod admission;
pub mod annotations;
pub mod check;
pub mod config;
pub mod drift;
pub mod explain;
pub mod foreign;
pub mod injection;
pub mod maintenance;
pub mod name;
pub mod nodes;
pub mod policy;
pub mod rollout;
pub mod workload;

#[cfg(any(test, feature = "test-fixtures"))]
pub mod test_fixtures;
