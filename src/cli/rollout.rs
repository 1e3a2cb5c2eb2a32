//! `sidecar-injector rollout`: the engine run once from a terminal or a pipeline. It watches the
//! cluster as `serve` does, plans with the same planner, prints the plan (dry run), or acts and
//! waits until every planned workload is done.

use std::collections::HashSet;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::args::{OutputFormat, ProcessEnv, Purpose, RolloutArgs, engine_options};
use super::connect::{OneShot, book_of, injectors_of, revisions_in_force, synced_feed};
use crate::engine::Aim;

use crate::cluster::drift_feed::DriftFeed;
use crate::cluster::list::list_paged;
use crate::cluster::status::InjectorState;
use crate::cluster::watch::{Change, watch};
use crate::engine::{ContainerRun, Engine, EngineOptions, RunSummary};
use crate::metrics::Metrics;
use crate::rollout::RolloutPlan;
use crate::rollout::selection::{PodSummary, SelectionInput, select};
use crate::telemetry::notice;
use tracing::Level;

mod until_done;
pub(crate) use super::args::LOOP_SAFETY_NET;
use until_done::act_until_done;

mod standing;
use standing::{CLI_LEASE_DURATION, LeaseHolder, Standing};

mod waves;

/// How long the watches may take to list the cluster.
const SYNC_DEADLINE: Duration = Duration::from_secs(120);

pub(crate) fn run(args: &RolloutArgs, env: &ProcessEnv) -> anyhow::Result<ExitCode> {
    if args.force {
        anyhow::bail!(
            "--force is gone: the CLI never acts beside a live `serve --rollout=auto`, which restarts \
             stale workloads itself. To resume a paused campaign, run `sidecar-injector rollout --resume` \
             (the Lease holder acts on it); to act from here, run serve with --rollout=dry-run or off"
        );
    }
    if !args.sidecar_container_name.is_empty()
        && (args.to.is_some()
            || args.unpin.is_some()
            || args.release_hold.is_some()
            || args.promote.is_some())
    {
        anyhow::bail!(
            "--to, --unpin, --release-hold and --promote act on revisions; a --sidecar-container-name run keeps none"
        );
    }
    if !args.sidecar_container_name.is_empty() && args.resume {
        anyhow::bail!(
            "--resume clears paused revision campaigns; a --sidecar-container-name run keeps no campaign to resume"
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
    let feed = synced_feed(client, keys.clone(), args.cluster.webhook_configuration()).await?;
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
    let acted = act_until_done(&mut engine, &feed, sidecars, args, &standing).await;
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
    if !args.sidecar_container_name.is_empty() {
        let run = container_run(client, args, options, feed, started_before).await?;
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

fn nothing_planned(args: &RolloutArgs, started_before: Timestamp) -> String {
    if args.sidecar_container_name.is_empty() {
        "nothing to restart: no workload runs a stale sidecar".to_owned()
    } else {
        format!(
            "nothing to restart: no pod started before {} runs container {}",
            started_before,
            args.sidecar_container_name.join(", ")
        )
    }
}

/// `--resume`: the paused campaigns resumed in the status ConfigMap, one line each.
async fn resume_campaigns(
    client: &kube::Client,
    namespace: &str,
    identity: &str,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let resumed = crate::cluster::status::resume_paused(&api, namespace, identity).await?;
    if resumed.is_empty() {
        notice(Level::INFO, "no paused campaign to resume", &[]);
    }
    for campaign in &resumed {
        notice(
            Level::INFO,
            &format!(
                "resumed the campaign of {} (revision {}): its earlier failures no longer count",
                campaign.sidecar, campaign.revision
            ),
            &[
                ("sidecar", &campaign.sidecar),
                ("revision", &campaign.revision),
            ],
        );
    }
    Ok(())
}

/// `--unpin`, `--release-hold` and `--to`: written into the status ConfigMap. Returns the exit
/// status when nothing else is left to do here (a `serve --rollout=auto` acts on a pin).
async fn overrides(
    args: &RolloutArgs,
    one_shot: &OneShot,
    identity: &str,
    holder: Option<&LeaseHolder>,
) -> anyhow::Result<Option<ExitCode>> {
    let namespace = &args.cluster.injector_namespace;
    let client = &one_shot.client;
    if let Some(sidecar) = &args.unpin {
        edit_overrides(client, namespace, Override::Unpin(sidecar)).await?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(sidecar) = &args.release_hold {
        edit_overrides(client, namespace, Override::ReleaseHold(sidecar)).await?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(spec) = &args.promote {
        promote(client, namespace, spec, identity).await?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(spec) = &args.to {
        pin_revision(args, spec, one_shot, identity).await?;
        if let Some(holder) = holder.filter(|h| h.restarts()) {
            notice(
                Level::INFO,
                &format!(
                    "{} holds the rollout Lease (serve --rollout=auto): every replica injects the pinned revision and it rolls it out at its next plan (`sidecar-injector drift` follows it); this run restarts nothing",
                    holder.name
                ),
                &[("holder", &holder.name)],
            );
            return Ok(Some(ExitCode::SUCCESS));
        }
    }
    Ok(None)
}

/// `--promote SIDECAR[=REVISION]`: the sidecar, and the revision when one is named.
fn promotion_spec(spec: &str) -> anyhow::Result<(String, Option<String>)> {
    let (raw, named) = match spec.split_once('=') {
        Some((sidecar, revision)) => (sidecar, Some(revision.trim().to_owned())),
        None => (spec, None),
    };
    let sidecar = crate::name::SidecarName::parse(raw)
        .with_context(|| format!("--promote {spec:?}: invalid sidecar name {raw:?}"))?
        .to_string();
    anyhow::ensure!(
        named.as_deref() != Some(""),
        "--promote {spec:?}: no revision after '='"
    );
    Ok((sidecar, named))
}

/// `--promote SIDECAR[=REVISION]`: an approval written into the status ConfigMap, where the
/// Lease holder adopts it and starts the revision's campaign.
async fn promote(
    client: &kube::Client,
    namespace: &str,
    spec: &str,
    identity: &str,
) -> anyhow::Result<()> {
    use crate::rollout::book_commands::{PromoteRefusal, Promoted};
    let (sidecar, wanted) = promotion_spec(spec)?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    let mut refusal = None;
    let promoted = crate::cluster::status::edit_book(&api, namespace, wanted.is_some(), |book| {
        book.promote_command(&sidecar, wanted.as_deref(), identity, at.clone())
            .map_err(|why| refusal = Some(why))
            .ok()
    })
    .await?;
    match (promoted, refusal) {
        (Some(promoted), _) => {
            let (revision, done) = match &promoted {
                Promoted::Now { revision } => (revision, "promoted"),
                Promoted::Already { revision } => (revision, "was promoted already"),
            };
            notice(
                Level::INFO,
                &format!(
                    "{sidecar} revision {revision} {done}: the Lease holder starts its campaign at its next plan (`sidecar-injector drift` follows it)"
                ),
                &[("sidecar", &sidecar), ("revision", revision)],
            );
        }
        (None, Some(PromoteRefusal::NotGated { revision, state })) => anyhow::bail!(
            "{sidecar} does not wait for promotion: its campaign of {revision} is {} (name a revision with --promote {sidecar}=REVISION to approve one still to come)",
            state.as_str()
        ),
        (None, Some(PromoteRefusal::NoCampaign)) => anyhow::bail!(
            "{sidecar} has no campaign in the status ConfigMap of namespace {namespace} (is serve --rollout=auto --promotion=gated running there?)"
        ),
        (None, None) => anyhow::bail!(
            "no status ConfigMap sidecar-injector-status in namespace {namespace}: nothing waits for promotion there"
        ),
    }
    Ok(())
}

/// What `--unpin` and `--release-hold` end.
enum Override<'a> {
    Unpin(&'a str),
    ReleaseHold(&'a str),
}

/// `--unpin` and `--release-hold`: the pin or hold of one sidecar removed from the book in the
/// status ConfigMap (every replica stops serving it at once; the Lease holder plans from it).
async fn edit_overrides(
    client: &kube::Client,
    namespace: &str,
    what: Override<'_>,
) -> anyhow::Result<()> {
    let (raw, verb) = match &what {
        Override::Unpin(s) => (*s, "pinned"),
        Override::ReleaseHold(s) => (*s, "held"),
    };
    let sidecar = crate::name::SidecarName::parse(raw)
        .with_context(|| format!("invalid sidecar name {raw:?}"))?
        .to_string();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let ended = crate::cluster::status::edit_book(&api, namespace, false, |book| match &what {
        Override::Unpin(_) => book.unpin(&sidecar),
        Override::ReleaseHold(_) => book.release_hold(&sidecar),
    })
    .await?;
    match ended {
        Some(revision) => notice(
            Level::INFO,
            &format!(
                "{sidecar} is no longer {verb} at {revision}: new pods get its configured revision{}",
                match what {
                    Override::Unpin(_) => ", and the engine rolls it out",
                    Override::ReleaseHold(_) => " (its campaign stays paused)",
                }
            ),
            &[("sidecar", &sidecar), ("revision", &revision)],
        ),
        None => notice(
            Level::INFO,
            &format!("{sidecar} is not {verb}; nothing to do"),
            &[("sidecar", &sidecar)],
        ),
    }
    Ok(())
}

/// `--to SIDECAR=REVISION`: the revision looked up in the history ConfigMap and pinned in the
/// status ConfigMap over the revision in force.
async fn pin_revision(
    args: &RolloutArgs,
    spec: &str,
    one_shot: &OneShot,
    identity: &str,
) -> anyhow::Result<()> {
    let OneShot {
        client,
        sidecars,
        configs_unread,
        state,
        ..
    } = one_shot;
    let namespace = &args.cluster.injector_namespace;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let history = state.history()?;
    let book = book_of(state)?;
    let published = revisions_in_force(injectors_of(state)?, &args.cluster, configs_unread)?
        .map(|p| p.revisions);
    let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    let crate::rollout::book_commands::PinRequest {
        sidecar,
        entry,
        pin,
    } = crate::rollout::book_commands::pin_request(
        history,
        &book,
        spec,
        published.as_ref(),
        sidecars,
        identity,
        at,
    )?;
    let over = pin.over.clone();
    let pinned = entry.revision.clone();
    crate::cluster::status::edit_book(&api, namespace, true, |book| {
        book.pins.insert(sidecar.clone(), pin.clone());
        Some(())
    })
    .await?;
    notice(
        Level::INFO,
        &format!(
            "pinned {sidecar} at {pinned} ({}, first served {}) over its configured revision {over}: new pods get it and stale workloads are restarted to it, until the config changes or `sidecar-injector rollout --unpin {sidecar}`",
            entry.outcome.as_str(),
            crate::rollout::to_the_second(entry.first_served.0)
        ),
        &[("sidecar", &sidecar), ("revision", &pinned)],
    );
    Ok(())
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
                writeln!(out, "failed     {}: {}", failure.workload, failure.reason)?;
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

/// `--sidecar-container-name`: the pod specs listed once (page by page, per included namespace
/// when the run is limited to some), then a metadata watch that says which chosen pods remain.
async fn container_run(
    client: &kube::Client,
    args: &RolloutArgs,
    options: &EngineOptions,
    feed: &crate::cluster::drift_feed::DriftFeed,
    started_before: Timestamp,
) -> anyhow::Result<ContainerRun> {
    let scopes: Vec<Api<Pod>> = if options.policy.include_namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        options
            .policy
            .include_namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    let mut pods = Vec::new();
    for api in scopes {
        let summaries = list_paged(&api, |pod| PodSummary::from_pod(&pod))
            .await
            .context("cannot list pods (with their specs) to find the named containers")?;
        pods.extend(summaries);
    }
    let live = Arc::new(Mutex::new(HashSet::new()));
    let mut listed = watch_live_pods(client.clone(), live.clone());
    tokio::time::timeout(SYNC_DEADLINE, listed.wait_for(|l| *l))
        .await
        .context("the pods were not listed in time")?
        .context("the pod watch stopped")?;
    let selection = {
        let index = feed.index.lock().expect("drift index lock");
        let deployment_of = |ns: &str, rs: &str| index.deployment_of(ns, rs);
        select(SelectionInput {
            pods: &pods,
            containers: &args.sidecar_container_name,
            started_before,
            policy: &options.policy,
            deployment_of: &deployment_of,
        })
    };
    Ok(ContainerRun { selection, live })
}

/// Keeps `live` equal to the uids of the pods that exist and are not terminating; the
/// receiver turns true once the first list is in.
fn watch_live_pods(
    client: kube::Client,
    live: Arc<Mutex<HashSet<String>>>,
) -> tokio::sync::watch::Receiver<bool> {
    let (listed_tx, listed) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let api: Api<PartialObjectMeta<Pod>> = Api::all(client);
        // Terminating pods count as gone: they are on their way out.
        let mut changes = watch(
            api,
            watcher::Config::default(),
            "pod",
            |pod: PartialObjectMeta<Pod>| {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                Some((uid, pod.metadata.deletion_timestamp.is_none()))
            },
        );
        while let Some(change) = changes.next().await {
            let mut live = live.lock().expect("live pods lock");
            match change {
                Change::Listed(pods) => {
                    *live = pods
                        .into_iter()
                        .filter(|(_, running)| *running)
                        .map(|(uid, _)| uid)
                        .collect();
                    let _ = listed_tx.send(true);
                }
                Change::Applied((uid, true)) => {
                    live.insert(uid);
                }
                Change::Applied((uid, false)) | Change::Deleted((uid, _)) => {
                    live.remove(&uid);
                }
            }
        }
    });
    listed
}

fn print_plan_summary(plan: &RolloutPlan) {
    for restart in &plan.restarts {
        let workload = restart.workload.to_string();
        notice(
            Level::INFO,
            &format!("{} {workload}: {}", restart.action(), restart.reason),
            &[
                ("workload", &workload),
                ("action", restart.action()),
                ("reason", &restart.reason),
            ],
        );
    }
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
