//! `sidecar-injector rollout`: the engine run once from a terminal or a pipeline. It watches the
//! cluster as `serve` does, plans with the same planner, prints the plan (dry run), or acts and
//! waits until every planned workload is done.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;

use crate::annotations::AnnotationKeys;
use crate::cli::{OutputFormat, RolloutArgs, one_shot_client, one_shot_configs};
use crate::lease::{LeaseDecision, MODE_ANNOTATION, ROLLOUT_LEASE, decide};
use crate::metrics::Metrics;
use crate::rollout::RolloutPlan;
use crate::rollout_engine::{Engine, EngineMode, EngineOptions};

/// How long the watches may take to list the cluster.
const SYNC_DEADLINE: Duration = Duration::from_secs(120);

pub fn run(args: &RolloutArgs) -> anyhow::Result<ExitCode> {
    if args.sidecar_container_name.is_some() || args.only_started_before.is_some() {
        anyhow::bail!(
            "--sidecar-container-name and --only-started-before are not supported yet: select by revision (the default)"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &RolloutArgs) -> anyhow::Result<ExitCode> {
    let client = one_shot_client(args.kubeconfig.as_deref()).await?;
    let keys = AnnotationKeys::new(&args.annotation_namespace);
    let sidecars = one_shot_configs(&client, &args.configs, &args.configmaps).await?;

    if args.confirm {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &args.injector_namespace);
        let lease = leases
            .get_opt(ROLLOUT_LEASE)
            .await
            .context("cannot read the rollout Lease")?;
        if let LeaseDecision::HeldBy {
            holder,
            mode,
            until,
        } = decide(
            lease.as_ref(),
            "sidecar-injector-rollout-cli",
            Timestamp::now(),
        ) && mode.as_deref() == Some("auto")
        {
            if args.force {
                eprintln!(
                    "warning: {holder} (serve --rollout=auto) holds the rollout Lease; acting anyway (--force)"
                );
            } else {
                anyhow::bail!(
                    "refusing to act: {holder} holds the rollout Lease in {} ({MODE_ANNOTATION}=auto, until {until}); \
                     it restarts stale workloads itself. Pass --force to act anyway",
                    args.injector_namespace
                );
            }
        }
    }

    let mut kinds: BTreeSet<String> = BTreeSet::new();
    if !args.exclude_deployment {
        kinds.insert("Deployment".into());
    }
    if args.include_statefulset {
        kinds.insert("StatefulSet".into());
    }
    if args.include_daemonset {
        kinds.insert("DaemonSet".into());
    }
    if args.drift.evict_bare_pods {
        kinds.insert("Pod".into());
    }
    let options = EngineOptions {
        mode: if args.confirm {
            EngineMode::Auto
        } else {
            EngineMode::DryRun
        },
        // The operator asked for it now: no settle window.
        settings: args.safety.settings(Duration::ZERO),
        keys: keys.clone(),
        policy: args
            .drift
            .policy(args.ignore_namespaces.iter().cloned().collect()),
        namespace: args.injector_namespace.clone(),
        replan_every: Duration::from_secs(1),
        ignore_manual_policy: true,
        kinds: Some(kinds),
        reason_prefix: args.rollout_reason.clone(),
    };
    let feed = crate::drift_watch::start(client.clone(), keys);
    let mut synced = feed.synced.clone();
    tokio::time::timeout(SYNC_DEADLINE, synced.wait_for(|s| *s))
        .await
        .context("the cluster was not listed in time")?
        .context("the watches stopped")?;
    let mut engine = Engine::new(client, options, Arc::new(Metrics::new()));
    engine.load_status().await;
    if args.resume {
        let resumed = engine.resume();
        if resumed.is_empty() {
            eprintln!("no paused campaign to resume");
        } else {
            eprintln!("resuming the paused campaign of {}", resumed.join(", "));
        }
    }

    if !args.confirm {
        let plan = engine.tick(&feed, &sidecars, false).await;
        print_plan(args.output, &plan)?;
        return Ok(ExitCode::SUCCESS);
    }

    let progress = std::io::stderr().is_terminal() && args.output == OutputFormat::Table;
    let mut changes = feed.changes.clone();
    let mut first = None;
    loop {
        let plan = engine.tick(&feed, &sidecars, true).await;
        if first.is_none() {
            print_plan_summary(&plan);
            first = Some(plan.clone());
        }
        if progress {
            let done = engine.summary.succeeded.len() + engine.summary.failed.len();
            let total = engine.summary.restarted.len() + plan.waiting.len();
            let width = 30;
            let filled = (done * width).checked_div(total.max(1)).unwrap_or(0);
            eprint!(
                "\r[{}{}] {done}/{total} done, {} rolling, {} waiting ",
                "#".repeat(filled),
                "-".repeat(width - filled.min(width)),
                plan.rolling.len(),
                plan.waiting.len()
            );
        }
        let blocked = plan.waiting.iter().all(|w| {
            !matches!(
                w.reason,
                crate::rollout::WaitReason::MaxParallel { .. }
                    | crate::rollout::WaitReason::RateLimit { .. }
                    | crate::rollout::WaitReason::Canary { .. }
                    | crate::rollout::WaitReason::Settling { .. }
                    | crate::rollout::WaitReason::NotKnownYet
            )
        });
        if plan.is_settled() && blocked {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), changes.changed()).await;
    }
    if progress {
        eprintln!();
    }
    let summary = &engine.summary;
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(summary)?),
        OutputFormat::Table => {
            let mut out = std::io::stdout().lock();
            for workload in &summary.succeeded {
                writeln!(out, "restarted  {workload}")?;
            }
            for failure in &summary.failed {
                writeln!(out, "failed     {}: {}", failure.workload, failure.reason)?;
            }
            for waiting in &summary.waiting {
                writeln!(out, "waiting    {}: {}", waiting.workload, waiting.message)?;
            }
        }
    }
    Ok(if summary.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_plan_summary(plan: &RolloutPlan) {
    for restart in &plan.restarts {
        eprintln!("restarting {}: {}", restart.workload, restart.reason);
    }
}

fn print_plan(output: OutputFormat, plan: &RolloutPlan) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match output {
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(plan)?)?,
        OutputFormat::Table => {
            writeln!(out, "{:<56} {:<8} REASON", "WORKLOAD", "ACTION")?;
            for restart in &plan.restarts {
                let action = if restart.canary { "canary" } else { "restart" };
                writeln!(
                    out,
                    "{:<56} {action:<8} {}",
                    restart.workload.to_string(),
                    restart.reason
                )?;
            }
            for rolling in &plan.rolling {
                writeln!(out, "{:<56} {:<8}", rolling.workload.to_string(), "rolling")?;
            }
            for waiting in &plan.waiting {
                writeln!(
                    out,
                    "{:<56} {:<8} {}",
                    waiting.workload.to_string(),
                    "wait",
                    waiting.message
                )?;
            }
            if plan.restarts.is_empty() && plan.rolling.is_empty() && plan.waiting.is_empty() {
                writeln!(out, "nothing to restart: no workload runs a stale sidecar")?;
            } else {
                writeln!(out, "dry run: nothing changed; pass --confirm to restart")?;
            }
        }
    }
    Ok(())
}
