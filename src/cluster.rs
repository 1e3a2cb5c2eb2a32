//! The I/O shell's side of the cluster: the counted client, watches feeding the drift index,
//! paged lists, the status ConfigMap, Events and the rollout Lease.

pub mod client;
pub mod drift_feed;
pub mod events;
pub mod lease;
pub mod list;
pub mod status;
pub mod watch;
pub mod webhook_ca;
