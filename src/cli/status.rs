//! `status`: the running injectors' publications, the rollout Lease and the campaigns, read
//! from one cluster or each of a fleet, and printed (`render::status_view`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::args::{ConnectionArgs, StatusArgs};
use super::connect::one_shot_client;
use crate::cluster::status::{InjectorState, StateError};
use crate::render::{StatusView, campaign_row, write_status_table};

pub(crate) fn run(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let fleet = super::fleet::contexts(&args.connection, &args.fleet)?;
    runtime.block_on(async {
        let namespace = &args.injector_namespace;
        let mut out = std::io::stdout().lock();
        let Some(contexts) = fleet else {
            let view = cluster_view(args, &args.connection).await?;
            match args.output.document(&view)? {
                Some(document) => out.write_all(document.as_bytes())?,
                None => write_status_table(&mut out, &view, namespace)?,
            }
            return Ok(ExitCode::SUCCESS);
        };
        let reads = super::fleet::read_each(
            &args.connection,
            &contexts,
            args.fleet.cluster_timeout,
            |one| async move { cluster_view(args, &one).await },
        )
        .await;
        let document = FleetStatus {
            clusters: reads
                .iter()
                .map(|read| FleetCluster {
                    state: read.state(),
                    view: read.outcome.as_ref().ok(),
                })
                .collect(),
        };
        match args.output.document(&document)? {
            Some(document) => out.write_all(document.as_bytes())?,
            None => write_fleet_table(&mut out, &reads, namespace)?,
        }
        let unread = reads.iter().any(|read| read.outcome.is_err());
        Ok(super::fleet::exit_status(false, unread))
    })
}

/// One cluster's status objects, read.
async fn cluster_view(
    args: &StatusArgs,
    connection: &ConnectionArgs,
) -> anyhow::Result<StatusView> {
    let client = one_shot_client(connection, "status").await?;
    let state = InjectorState::read(&client, &args.injector_namespace).await;
    view(&state, args, Timestamp::now())
}

/// `status` across clusters as `-o json` prints it: each cluster named, with its status or the
/// error that kept it out.
#[derive(Debug, Serialize)]
struct FleetStatus<'a> {
    clusters: Vec<FleetCluster<'a>>,
}

#[derive(Debug, Serialize)]
struct FleetCluster<'a> {
    #[serde(flatten)]
    state: super::fleet::ClusterState<'a>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    view: Option<&'a StatusView>,
}

/// Across clusters: who holds each cluster's Lease, then every campaign with its cluster
/// first; a cluster that could not be read is a row with its error.
fn write_fleet_table(
    out: &mut impl Write,
    reads: &[super::fleet::ClusterRead<StatusView>],
    namespace: &str,
) -> std::io::Result<()> {
    let width = super::fleet::cluster_width(reads);
    writeln!(
        out,
        "{:<width$} {:<9} ROLLOUT LEASE",
        "CLUSTER", "INJECTORS"
    )?;
    for read in reads {
        let cluster = &read.cluster;
        match &read.outcome {
            Err(err) => writeln!(out, "{cluster:<width$} (not read) {err}")?,
            Ok(view) => {
                let fresh = view.injectors.values().filter(|i| i.fresh).count();
                let lease = match &view.lease.holder {
                    Some(holder) => format!(
                        "held by {holder} (mode {}) until {}",
                        view.lease.mode.as_deref().unwrap_or("unknown"),
                        view.lease.until.as_deref().unwrap_or_default()
                    ),
                    None => "free (no engine acts now)".to_owned(),
                };
                let injectors = format!("{fresh}/{}", view.injectors.len());
                writeln!(out, "{cluster:<width$} {injectors:<9} {lease}")?;
                if let Some(disagreement) = &view.disagreement {
                    writeln!(out, "{cluster:<width$} warning: {disagreement}")?;
                }
            }
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<width$} {:<24} {:<12} {:<9} {:>7} {:>7} {:>9} {:>6}  SINCE                 NOTE",
        "CLUSTER", "SIDECAR", "REVISION", "STATE", "PENDING", "ROLLING", "SUCCEEDED", "FAILED"
    )?;
    let mut none = true;
    for read in reads {
        let Ok(view) = &read.outcome else { continue };
        for (sidecar, campaign) in &view.campaigns.campaigns {
            none = false;
            writeln!(
                out,
                "{:<width$} {}",
                read.cluster,
                campaign_row(sidecar, campaign, view)
            )?;
        }
    }
    if none {
        writeln!(
            out,
            "(no rollout campaign recorded in {namespace} of any cluster read)"
        )?;
    }
    Ok(())
}

/// `err`, and when the API server refused it (a user whose rights stop at a team's
/// namespaces), who can grant it and how.
fn refused_hint(err: StateError) -> anyhow::Error {
    let refused = err.refused();
    let err = anyhow::Error::new(err);
    if refused {
        err.context(StatusObjectsRefused)
    } else {
        err
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "the injector's status ConfigMap and rollout Lease are refused to you: a platform admin can let every user read them (deploy/components/status-readers)"
)]
struct StatusObjectsRefused;

/// The status view of `state`; the status ConfigMap or the Lease refused, who can grant them.
fn view(state: &InjectorState, args: &StatusArgs, now: Timestamp) -> anyhow::Result<StatusView> {
    state.status().map_err(refused_hint)?;
    state.lease().map_err(refused_hint)?;
    Ok(crate::render::status_view(
        state,
        args.published_max_age,
        now,
    )?)
}
