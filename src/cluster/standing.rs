//! Who may act: the rollout Lease taken for the run, or the grant of a `serve` holding it.

use crate::cluster::lease::{LeaseDecision, LeaseSettings, MODE_ANNOTATION, decide, may_act};
use crate::cluster::status::InjectorState;
use crate::telemetry::notice;
use anyhow::Context;
use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, Instant};
use tracing::Level;

/// Whoever holds the rollout Lease, live, other than this run.
pub(crate) struct LeaseHolder {
    pub(crate) name: String,
    pub(crate) mode: Option<String>,
    pub(crate) until: Timestamp,
}

impl LeaseHolder {
    pub(crate) fn of(state: &InjectorState) -> anyhow::Result<Option<Self>> {
        let lease = state.lease().context("cannot read the rollout Lease")?;
        Ok(match decide(lease, "", Timestamp::now()) {
            LeaseDecision::HeldBy {
                holder,
                mode,
                until,
            } => Some(Self {
                name: holder,
                mode,
                until,
            }),
            _ => None,
        })
    }

    /// A `serve --rollout=auto` (or another `rollout --confirm`): it restarts workloads.
    pub(crate) fn restarts(&self) -> bool {
        matches!(self.mode.as_deref(), Some("auto" | CLI_MODE))
    }
}

/// The mode a `rollout --confirm` writes on the Lease it holds.
pub(crate) const CLI_MODE: &str = "cli";
/// How long the Lease this run holds lasts without renewal.
pub(crate) const CLI_LEASE_DURATION: Duration = Duration::from_secs(15);

/// How `--confirm` may act: holding the rollout Lease itself (so no `serve` replica acts
/// meanwhile), or beside a holder that never restarts anything (`serve --rollout=dry-run`).
pub(crate) enum Standing {
    Holding {
        grant: tokio::sync::watch::Receiver<Option<std::time::Instant>>,
        stop: tokio::sync::watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    },
    BesidePlanner,
}

impl Standing {
    /// Never beside a live holder that restarts workloads: two actors would restart (or
    /// evict) the same workloads at once.
    pub(crate) async fn take(
        client: &kube::Client,
        namespace: &str,
        identity: &str,
        holder: Option<&LeaseHolder>,
    ) -> anyhow::Result<Self> {
        if let Some(holder) = holder {
            if holder.restarts() {
                anyhow::bail!(
                    "refusing to act: {} holds the rollout Lease in {namespace} ({MODE_ANNOTATION}={}, until {}) and restarts \
                     stale workloads itself. `sidecar-injector rollout` (no --confirm) shows the plan; \
                     `sidecar-injector rollout --resume` resumes a paused campaign for it to act on",
                    holder.name,
                    holder.mode.as_deref().unwrap_or(""),
                    holder.until
                );
            }
            notice(
                Level::INFO,
                &format!(
                    "{} holds the rollout Lease in {} mode and restarts nothing; acting beside it",
                    holder.name,
                    holder.mode.as_deref().unwrap_or("an unknown")
                ),
                &[("holder", &holder.name)],
            );
            return Ok(Self::BesidePlanner);
        }
        let settings = LeaseSettings {
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            mode: CLI_MODE.to_owned(),
            duration: CLI_LEASE_DURATION,
            renew_every: CLI_LEASE_DURATION / 3,
        };
        let (grant_tx, mut grant) = tokio::sync::watch::channel(None);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(crate::cluster::lease::run(
            client.clone(),
            settings,
            // The command is ready from the start, and stays so.
            tokio::sync::watch::channel(None).1,
            grant_tx,
            stopping,
        ));
        let held = tokio::time::timeout(CLI_LEASE_DURATION, grant.wait_for(Option::is_some))
            .await
            .is_ok_and(|r| r.is_ok());
        if !held {
            let _ = stop.send(true);
            let _ = task.await;
            anyhow::bail!(
                "cannot take the rollout Lease in {namespace}: another process took it first; try again"
            );
        }
        Ok(Self::Holding { grant, stop, task })
    }

    pub(crate) fn may_act(&self) -> bool {
        match self {
            Self::Holding { grant, .. } => may_act(grant),
            Self::BesidePlanner => true,
        }
    }

    /// When the Lease held runs out unless renewed (beside a planner: never).
    pub(crate) fn grant_ends(&self) -> Option<Instant> {
        match self {
            Self::Holding { grant, .. } => *grant.borrow(),
            Self::BesidePlanner => None,
        }
    }

    /// The renewals of the Lease held, to wake on (beside a planner: none).
    pub(crate) fn grant(&self) -> Option<tokio::sync::watch::Receiver<Option<Instant>>> {
        match self {
            Self::Holding { grant, .. } => Some(grant.clone()),
            Self::BesidePlanner => None,
        }
    }

    /// Gives the Lease up (when held), so that a `serve` replica acts at once.
    pub(crate) async fn give_up(self) {
        if let Self::Holding { stop, task, .. } = self {
            let _ = stop.send(true);
            let _ = task.await;
        }
    }
}
