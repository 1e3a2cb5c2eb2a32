//! `rollout --confirm`: plans and acts until nothing is rolling, with its progress on stderr.

use super::super::args::{OutputFormat, RolloutArgs};
use super::*;
use crate::cluster::drift_feed::DriftFeed;
use crate::config::SidecarSet;
use crate::engine::{Authority, Engine, RunSummary};
use crate::rollout::RolloutPlan;
use crate::telemetry::notice;
use crate::workload::WorkloadRef;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tracing::{Level, debug};

/// Plans and acts until nothing is rolling and nothing waits for what clears by itself.
pub(super) async fn act_until_done(
    engine: &mut Engine,
    feed: &DriftFeed,
    sidecars: &SidecarSet,
    args: &RolloutArgs,
    standing: &Standing,
) -> anyhow::Result<()> {
    // The bar is drawn only on a terminal, and only when stderr carries text.
    let terminal = std::io::stderr().is_terminal()
        && args.cluster.output == OutputFormat::Table
        && crate::telemetry::text_on_stderr();
    let mut changes = feed.changes.clone();
    let mut grant = standing.grant();
    let mut progress: Option<Progress> = None;
    let mut unheld_since: Option<Instant> = None;
    let mut settled_since: Option<Instant> = None;
    loop {
        let acting = standing.may_act();
        let authority = if acting {
            unheld_since = None;
            Authority::Act
        } else {
            // The Lease was not renewed in time: act no more until it is.
            let since = *unheld_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= CLI_LEASE_DURATION {
                anyhow::bail!(
                    "lost the rollout Lease for {CLI_LEASE_DURATION:?}; stopped acting (the summary would be partial)"
                );
            }
            Authority::PlanOnly
        };
        let plan = engine.tick(feed, sidecars, authority).await;
        let progress = progress.get_or_insert_with(|| {
            print_plan_summary(&plan);
            Progress::of(&plan)
        });
        progress.report(engine.summary(), terminal, &plan);
        let settled =
            plan.is_settled() && !plan.waiting.iter().any(|w| w.reason.clears_by_itself());
        // A restarted workload whose pods all went (scaled to zero, deleted) is in no plan
        // list, yet ends as succeeded or gone once its controller says so: wait for that too,
        // within the rollout timeout.
        let awaiting = engine.awaiting_outcomes() > 0;
        if !settled {
            settled_since = None;
        } else {
            let since = *settled_since.get_or_insert_with(Instant::now);
            if !awaiting || since.elapsed() >= args.safety.rollout_timeout {
                break;
            }
        }
        // As `serve` does: on a change (of the cluster, the status ConfigMap or the Lease), or
        // at the next moment the plan or this run's standing can change by time alone; no poll.
        let now = Instant::now();
        let wake = LoopWake {
            plan: engine.next_wake(now),
            grant_ends: acting.then(|| standing.grant_ends()).flatten(),
            lost_for_good: unheld_since.map(|since| since + CLI_LEASE_DURATION),
            outcomes_given_up: settled_since
                .filter(|_| awaiting)
                .map(|since| since + args.safety.rollout_timeout),
        }
        .next(now);
        debug!(
            rolling = plan.rolling.len(),
            waiting = plan.waiting.len(),
            "planned; next pass on a change or in {:?}",
            wake.saturating_duration_since(now)
        );
        let changed = tokio::select! {
            result = changes.changed() => if result.is_err() {
                anyhow::bail!("the cluster watches stopped");
            } else { true },
            watching = engine.status_changed() => if watching { true } else {
                anyhow::bail!("the watch of the status ConfigMap stopped");
            },
            () = grant_changed(&mut grant) => true,
            () = tokio::time::sleep_until(wake.into()) => false,
        };
        // A burst of watch events (a restart's pods come and go) costs one plan, as in `serve`.
        if changed {
            tokio::time::sleep(crate::engine::PLAN_DEBOUNCE).await;
            changes.borrow_and_update();
        }
    }
    engine.flush_status().await;
    if terminal {
        eprintln!();
    }
    Ok(())
}

/// Resolves when the Lease's grant changes; never without a Lease, or once its task is gone.
pub(super) async fn grant_changed(
    grant: &mut Option<tokio::sync::watch::Receiver<Option<Instant>>>,
) {
    let renewed = match grant {
        Some(receiver) => receiver.changed().await.is_ok(),
        None => false,
    };
    if !renewed {
        std::future::pending::<()>().await;
    }
}

/// The moments the one-shot loop must plan again though nothing it watches changed.
#[derive(Debug, Default)]
pub(super) struct LoopWake {
    /// The plan changes by time alone (a settle, a cooldown, a bake's end...).
    pub(super) plan: Option<Instant>,
    /// The Lease this run holds runs out unless renewed: it stops acting then.
    pub(super) grant_ends: Option<Instant>,
    /// The Lease was lost long enough ago to give up.
    pub(super) lost_for_good: Option<Instant>,
    /// Workloads left without pods had long enough to report their outcome.
    pub(super) outcomes_given_up: Option<Instant>,
}

impl LoopWake {
    /// The soonest of them, under the same safety net as `serve`'s engine.
    pub(super) fn next(&self, now: Instant) -> Instant {
        crate::engine::soonest_wake(
            now,
            LOOP_SAFETY_NET,
            [
                self.plan,
                self.grant_ends,
                self.lost_for_good,
                self.outcomes_given_up,
            ],
        )
    }
}

/// The longest the one-shot loop waits with nothing due.
pub(super) const LOOP_SAFETY_NET: Duration = Duration::from_secs(60);

/// What this run planned, and which of those workloads it has reported done.
pub(super) struct Progress {
    pub(super) planned: BTreeSet<WorkloadRef>,
    pub(super) reported: BTreeSet<WorkloadRef>,
}

impl Progress {
    pub(super) fn of(plan: &RolloutPlan) -> Self {
        // What this run restarts now or once its wait ends; a workload already rolling from
        // an earlier run is not this run's to count.
        let planned = plan
            .restarts
            .iter()
            .map(|r| r.workload.clone())
            .chain(plan.waiting.iter().map(|w| w.workload.clone()))
            .collect();
        Self {
            planned,
            reported: BTreeSet::new(),
        }
    }

    /// A `done KIND/ns/name (3/10)` line per workload of the plan as it ends (on a terminal or
    /// not), and on a terminal a bar that never runs past the plan.
    pub(super) fn report(&mut self, summary: &RunSummary, terminal: bool, plan: &RolloutPlan) {
        let total = self.planned.len();
        let ended = summary
            .succeeded
            .iter()
            .map(|w| (w, "done"))
            .chain(summary.failed.iter().map(|f| (&f.workload, "failed")))
            .chain(summary.gone.iter().map(|w| (w, "gone")));
        for (workload, outcome) in ended {
            if self.planned.contains(workload) && self.reported.insert(workload.clone()) {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                let (workload, done) = (workload.to_string(), self.reported.len().to_string());
                notice(
                    Level::INFO,
                    &format!("{outcome} {workload} ({done}/{total})"),
                    &[
                        ("workload", &workload),
                        ("outcome", outcome),
                        ("done", &done),
                        ("total", &total.to_string()),
                    ],
                );
            }
        }
        if terminal {
            let done = self.reported.len().min(total);
            let width = 30;
            let filled = (done * width).checked_div(total.max(1)).unwrap_or(0);
            eprint!(
                "\r[{}{}] {done}/{total} done, {} rolling, {} waiting ",
                "#".repeat(filled),
                "-".repeat(width - filled),
                plan.rolling.len(),
                plan.waiting.len()
            );
        }
    }
}
