//! `status`: the running injectors' publications, the rollout Lease and the campaigns, read
//! from one cluster or each of a fleet, and printed (`render::status_view`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;

use super::args::{ConnectionArgs, StatusArgs};
use super::connect::{one_shot_client, with_refusal_hint};
use crate::cluster::status::InjectorState;
use crate::render::{FleetCluster, FleetStatus, StatusView, write_fleet_table, write_status_table};

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

#[derive(Debug, thiserror::Error)]
#[error(
    "the injector's status ConfigMap and rollout Lease are refused to you: a platform admin can let every user read them (deploy/components/status-readers)"
)]
struct StatusObjectsRefused;

/// The status view of `state`; the status ConfigMap or the Lease refused, who can grant them.
fn view(state: &InjectorState, args: &StatusArgs, now: Timestamp) -> anyhow::Result<StatusView> {
    let refused = |err| with_refusal_hint(err, StatusObjectsRefused);
    state.status().map_err(refused)?;
    state.lease().map_err(refused)?;
    Ok(crate::render::status_view(
        state,
        args.published_max_age,
        now,
    )?)
}
