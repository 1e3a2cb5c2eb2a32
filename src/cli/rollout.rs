//! `sidecar-injector rollout`: the engine run once from a terminal or a pipeline. It watches the
//! cluster as `serve` does, plans with the same planner, prints the plan (dry run), or acts and
//! waits until every planned workload is done.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;

use super::args::{OutputFormat, ProcessEnv, Purpose, RolloutArgs, engine_options};
use super::connect::{OneShot, book_of, injectors_of, revisions_in_force};
use crate::cluster::standing::{LeaseHolder, Standing};
use crate::engine::Aim;
use crate::engine::container_run::container_run;
use crate::engine::until_done::act_until_done;

use crate::cluster::drift_feed::DriftFeed;
use crate::cluster::status::InjectorState;
use crate::engine::{Engine, EngineOptions, RunSummary};
use crate::metrics::Metrics;
use crate::rollout::RolloutPlan;
use crate::telemetry::notice;
use tracing::Level;

mod waves;

mod book;
use book::{overrides, promotion_spec, resume_campaigns};

pub(crate) fn run(args: &RolloutArgs, env: &ProcessEnv) -> anyhow::Result<ExitCode> {
    if args.force {
        anyhow::bail!(
            "--force is gone: the CLI never acts beside a live `serve --rollout=auto`, which restarts \
             stale workloads itself. To resume a paused campaign, run `sidecar-injector rollout --resume` \
             (the Lease holder acts on it); to act from here, run serve with --rollout=dry-run or off"
        );
    }
    let by_container =
        !args.sidecar_container_name.is_empty() || !args.foreign.foreign_sidecars.is_empty();
    if !args.sidecar_container_name.is_empty() && !args.foreign.foreign_sidecars.is_empty() {
        anyhow::bail!(
            "--sidecar-container-name restarts every pod started before a time; --foreign-sidecar only those that differ from what a new pod gets: give one"
        );
    }
    if by_container
        && (args.to.is_some()
            || args.unpin.is_some()
            || args.release_hold.is_some()
            || args.promote.is_some())
    {
        anyhow::bail!(
            "--to, --unpin, --release-hold and --promote act on revisions; a --sidecar-container-name or --foreign-sidecar run keeps none"
        );
    }
    if by_container && args.resume {
        anyhow::bail!(
            "--resume clears paused revision campaigns; a --sidecar-container-name or --foreign-sidecar run keeps no campaign to resume"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run_async(args, env))
}

async fn run_async(args: &RolloutArgs, env: &ProcessEnv) -> anyhow::Result<ExitCode> {
    if !args.wave.is_empty() {
        return waves::run(args, &format!("fleet-rollout/{}", env.identity())).await;
    }
    let started_before = match &args.only_started_before {
        Some(time) => *time,
        None => Timestamp::now(),
    };
    let mut one_shot = OneShot::connect(&args.cluster, "rollout").await?;
    let namespace = &args.cluster.injector_namespace;
    let holder = LeaseHolder::of(&one_shot.state)?;
    let identity = format!("rollout-cli/{}", env.identity());
    if args.resume {
        resume_campaigns(&one_shot.client, namespace, &identity).await?;
        // Planned below with the book as resumed.
        one_shot.state = InjectorState::read(&one_shot.client, namespace).await;
        if let Some(holder) = holder.as_ref().filter(|h| h.restarts()) {
            notice(
                Level::INFO,
                &format!(
                    "{} holds the rollout Lease (serve --rollout=auto) and restarts what the resumed campaigns plan at its next plan; this run restarts nothing",
                    holder.name
                ),
                &[("holder", &holder.name)],
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    if let Some(done) = overrides(args, &one_shot, &identity, holder.as_ref()).await? {
        return Ok(done);
    }
    let OneShot {
        client,
        keys,
        sidecars,
        state,
        ..
    } = &one_shot;
    let standing = if args.confirm {
        Some(Standing::take(client, namespace, &identity, holder.as_ref()).await?)
    } else {
        None
    };
    let options = engine_options(&args.cluster, &args.safety, &Purpose::Rollout(args));
    let feed = crate::cluster::drift_feed::listed(
        client,
        keys.clone(),
        args.cluster.webhook_configuration(),
    )
    .await?;
    let aim = aim(args, &one_shot, &options, &feed, started_before).await?;
    let Some(standing) = standing else {
        let plan = crate::engine::plan_now(state, &options, &feed, sidecars, &aim);
        print_plan(
            args.cluster.output,
            &plan,
            &nothing_planned(args, started_before),
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    act(args, env, &one_shot, options, &feed, aim, standing).await
}

/// `--confirm`: the engine run until nothing is rolling, under `standing`, and its summary.
async fn act(
    args: &RolloutArgs,
    env: &ProcessEnv,
    one_shot: &OneShot,
    options: EngineOptions,
    feed: &DriftFeed,
    aim: Aim,
    standing: Standing,
) -> anyhow::Result<ExitCode> {
    let OneShot {
        client, sidecars, ..
    } = one_shot;
    let recorder = crate::cluster::events::recorder(client.clone(), env.pod_name.clone());
    let mut engine = Engine::new(
        client.clone(),
        options.clone(),
        Arc::new(Metrics::new()),
        recorder,
        crate::cluster::status::watch_status(client.clone(), &options.namespace),
    );
    engine.keep_summary();
    match aim {
        Aim::Containers(run) => engine.select_containers(run),
        Aim::Revisions(published) => {
            engine.load_status().await;
            if let Some(publication) = published {
                engine.use_publication(publication);
            }
        }
    }
    let acted = act_until_done(
        &mut engine,
        feed,
        sidecars,
        &standing,
        args.safety.rollout_timeout,
        args.cluster.output == OutputFormat::Table,
    )
    .await;
    standing.give_up().await;
    acted?;
    print_summary(args.cluster.output, engine.summary())?;
    Ok(exit_code(engine.summary()))
}

/// What the engine restarts towards: the chosen pods of `--sidecar-container-name`, or the
/// revisions in force.
async fn aim(
    args: &RolloutArgs,
    one_shot: &OneShot,
    options: &EngineOptions,
    feed: &DriftFeed,
    started_before: Timestamp,
) -> anyhow::Result<Aim> {
    let client = &one_shot.client;
    let foreign = foreign_choice(args, client, options).await?;
    if !args.sidecar_container_name.is_empty() || foreign.is_some() {
        let (containers, only) = match &foreign {
            Some((names, choice)) => (names.clone(), Some(&choice.pods)),
            None => (args.sidecar_container_name.clone(), None),
        };
        let mut run =
            container_run(client, &containers, options, feed, started_before, only).await?;
        if let Some((_, choice)) = foreign {
            run.selection.reasons = choice.reasons;
        }
        for skipped in &run.selection.skipped {
            let pod = format!("{}/{}", skipped.namespace, skipped.name);
            let reason = crate::render::skipped(&skipped.reason);
            notice(
                Level::INFO,
                &format!("skipping pod {pod}: {reason}"),
                &[("pod", &pod), ("reason", &reason)],
            );
        }
        return Ok(Aim::Containers(run));
    }
    // As `drift` does: pods are brought to what the running injector injects, which may
    // differ from this reading of the configs (another checkout, a pending edit).
    let injectors = injectors_of(&one_shot.state)?;
    let published = revisions_in_force(injectors, &args.cluster, &one_shot.configs_unread)?;
    Ok(Aim::Revisions(published))
}

/// `--foreign-sidecar`: the names given, and the pods that differ from what a new pod of
/// their workload gets (each failed dry run said: its workloads are left alone).
async fn foreign_choice(
    args: &RolloutArgs,
    client: &kube::Client,
    options: &EngineOptions,
) -> anyhow::Result<Option<(Vec<String>, crate::cluster::foreign::ForeignChoice)>> {
    let names = args.foreign.names()?;
    if names.is_empty() {
        return Ok(None);
    }
    // The namespaces the run restarts in (-n and --include-namespace), asked once.
    let namespaces: Vec<String> = options.policy.include_namespaces.iter().cloned().collect();
    let choice = crate::cluster::foreign::choose(client, &namespaces, &names)
        .await
        .context("cannot list the pods and workloads that run a --foreign-sidecar")?;
    for error in choice
        .errors
        .iter()
        .map(super::drift::dry_run_error)
        .collect::<std::collections::BTreeSet<_>>()
    {
        notice(Level::WARN, &error, &[]);
    }
    Ok(Some((names.names().map(str::to_owned).collect(), choice)))
}

fn nothing_planned(args: &RolloutArgs, started_before: Timestamp) -> String {
    if !args.foreign.foreign_sidecars.is_empty() {
        format!(
            "nothing to restart: every pod runs what a new pod gets of {}",
            args.foreign.foreign_sidecars.join(", ")
        )
    } else if args.sidecar_container_name.is_empty() {
        "nothing to restart: no workload runs a stale sidecar".to_owned()
    } else {
        format!(
            "nothing to restart: no pod started before {} runs container {}",
            started_before,
            args.sidecar_container_name.join(", ")
        )
    }
}

/// Exit status 3: what this run planned could not all be done now.
pub(crate) const EXIT_STILL_WAITING: u8 = 3;

/// 0: done; 1: a workload failed (in this run, or before it under the revision in force, and
/// so left stale); 3 ([`EXIT_STILL_WAITING`]): planned workloads still wait (cooldown, paused
/// campaign, manual policy, paused Deployment, partition), each with the flag or command that
/// would change it.
fn exit_code(summary: &RunSummary) -> ExitCode {
    if !summary.failed.is_empty() || !summary.failed_earlier.is_empty() {
        return ExitCode::FAILURE;
    }
    let waiting = summary
        .waiting
        .iter()
        .filter(|w| !w.reason.clears_by_itself())
        .count();
    if waiting == 0 {
        return ExitCode::SUCCESS;
    }
    notice(
        Level::WARN,
        &format!(
            "{waiting} planned workload(s) could not be restarted now (the `waiting` lines say why); exit status {EXIT_STILL_WAITING}"
        ),
        &[("waiting", &waiting.to_string())],
    );
    ExitCode::from(EXIT_STILL_WAITING)
}

fn print_summary(output: OutputFormat, summary: &RunSummary) -> anyhow::Result<()> {
    match output.document(summary)? {
        Some(document) => print!("{document}"),
        None => {
            let mut out = std::io::stdout().lock();
            for workload in &summary.succeeded {
                writeln!(out, "restarted  {workload}")?;
            }
            for failure in &summary.failed {
                writeln!(
                    out,
                    "failed     {}: {}",
                    failure.workload,
                    crate::render::failure_reason(&failure.reason)
                )?;
            }
            for earlier in &summary.failed_earlier {
                writeln!(out, "failed     {}: {}", earlier.workload, earlier.message)?;
            }
            for workload in &summary.gone {
                writeln!(
                    out,
                    "gone       {workload} (restarted, then deleted or evicted)"
                )?;
            }
            for waiting in &summary.waiting {
                writeln!(out, "waiting    {}: {}", waiting.workload, waiting.message)?;
            }
        }
    }
    Ok(())
}

fn print_plan(output: OutputFormat, plan: &RolloutPlan, nothing: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match output.document(plan)? {
        Some(document) => out.write_all(document.as_bytes())?,
        None => crate::render::write_plan_table(&mut out, plan, nothing)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests;
