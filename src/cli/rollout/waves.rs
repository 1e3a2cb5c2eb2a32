//! `rollout --promote SIDECAR --wave staging --wave prod-eu,prod-us`: the waves checked
//! against the kubeconfig, the fleet run ([`crate::engine::fleet`]) and its end said.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use futures::FutureExt;
use tracing::Level;

use super::super::args::RolloutArgs;
use super::EXIT_STILL_WAITING;
use crate::engine::fleet::{Connect, Fleet, FleetEnd, FleetRollout};
use crate::telemetry::notice;

/// The exit status when a cluster failed and the fleet stopped.
const EXIT_STOPPED: u8 = 1;

/// The waves of `--wave`, each a list of contexts, checked against the kubeconfig.
pub(super) fn waves(args: &RolloutArgs) -> anyhow::Result<Vec<Vec<String>>> {
    let connection = &args.cluster.connection;
    anyhow::ensure!(
        connection.context.is_empty(),
        "--wave names the clusters (kubeconfig contexts); --context has no place beside it"
    );
    let waves: Vec<Vec<String>> = args
        .wave
        .iter()
        .map(|wave| {
            wave.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect();
    let kubeconfig = match &connection.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?,
        None => kube::config::Kubeconfig::read()
            .context("--wave: cannot read the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
    };
    let known: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let mut seen = BTreeMap::new();
    for (n, wave) in waves.iter().enumerate() {
        anyhow::ensure!(
            !wave.is_empty(),
            "--wave {:?} (wave {}) names no context",
            args.wave[n],
            n + 1
        );
        for cluster in wave {
            anyhow::ensure!(
                known.contains(&cluster.as_str()),
                "--wave {:?}: the kubeconfig has no context {cluster:?} (it has: {})",
                args.wave[n],
                known.join(", ")
            );
            if let Some(earlier) = seen.insert(cluster.clone(), n + 1) {
                anyhow::bail!(
                    "--wave: {cluster} is in wave {earlier} and wave {}: a cluster is promoted once",
                    n + 1
                );
            }
        }
    }
    Ok(waves)
}

/// Runs the fleet rollout of `--promote` across `--wave`.
pub(super) async fn run(args: &RolloutArgs, identity: &str) -> anyhow::Result<ExitCode> {
    let waves = waves(args)?;
    let (sidecar, named) = super::promotion_spec(args.promote.as_deref().unwrap_or_default())?;
    let connection = args.cluster.connection.clone();
    let connect: Box<Connect> = Box::new(move |context| {
        let mut one = connection.clone();
        one.context = vec![context];
        async move {
            super::super::connect::one_shot_client(&one, "rollout")
                .await
                .map_err(|err| super::super::one_line(&err))
        }
        .boxed()
    });
    let spec = FleetRollout {
        waves,
        sidecar: sidecar.clone(),
        by: identity.to_owned(),
        namespace: args.cluster.injector_namespace.clone(),
        bake: args.wave_bake,
        timeout: args.wave_timeout,
    };
    let mut fleet = Fleet::new(spec, named, connect.as_ref()).await.map_err(|why| {
        anyhow::anyhow!(
            "cannot tell which revision of {sidecar} to promote from the first wave: {why}; name it with --promote {sidecar}=REVISION"
        )
    })?;
    if args.dry_run {
        fleet.show().await;
        return Ok(ExitCode::SUCCESS);
    }
    let end = fleet.run().await?;
    let (spec, revision) = (fleet.spec(), fleet.revision());
    Ok(match end {
        FleetEnd::Done => {
            println!("{sidecar} revision {revision} is rolled out and baked in every wave");
            ExitCode::SUCCESS
        }
        FleetEnd::Stopped {
            wave,
            cluster,
            workload,
            reason,
        } => {
            let line = crate::render::fleet_stopped(
                &spec.waves[wave + 1..],
                &cluster,
                &sidecar,
                revision,
                workload.as_deref(),
                &reason,
            );
            notice(
                Level::ERROR,
                &line,
                &[("cluster", &cluster), ("revision", revision)],
            );
            ExitCode::from(EXIT_STOPPED)
        }
        FleetEnd::TimedOut { wave, progress } => {
            let line = crate::render::wave_timed_out(
                wave,
                spec.waves.len(),
                spec.timeout,
                &progress,
                EXIT_STILL_WAITING,
            );
            notice(Level::WARN, &line, &[]);
            ExitCode::from(EXIT_STILL_WAITING)
        }
    })
}
