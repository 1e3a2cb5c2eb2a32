//! `rollout --confirm`: plans and acts until nothing is rolling, with its progress on stderr.

use crate::cluster::drift_feed::DriftFeed;
use crate::cluster::standing::{CLI_LEASE_DURATION, Standing};
use crate::config::SidecarSet;
use crate::engine::{Authority, Conductor, Engine, LoopStopped, RunSummary};
use crate::rollout::RolloutPlan;
use crate::telemetry::notice;
use crate::workload::WorkloadRef;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Level;

/// Plans and acts until nothing is rolling and nothing waits for what clears by itself.
/// The progress bar is drawn when `bar` says so (a table for output), and then only on a
/// terminal that carries text.
pub(crate) async fn act_until_done(
    engine: &mut Engine,
    feed: &DriftFeed,
    sidecars: &SidecarSet,
    standing: &Standing,
    rollout_timeout: Duration,
    bar: bool,
) -> Result<(), LoopStopped> {
    let terminal = bar && std::io::stderr().is_terminal() && crate::telemetry::text_on_stderr();
    let mut conductor = UntilDone {
        sidecars: Arc::new(sidecars.clone()),
        standing,
        grant: standing.grant(),
        rollout_timeout,
        terminal,
        progress: None,
        acting: false,
        unheld_since: None,
        settled_since: None,
        awaiting: false,
    };
    crate::engine::control_loop(engine, feed, &mut conductor).await?;
    engine.flush_status().await;
    if terminal {
        eprintln!();
    }
    Ok(())
}

/// How `rollout --confirm` conducts the engine's loop: it acts while it holds the Lease (and
/// gives up once it lost it for a Lease's duration), reports progress after each pass, and
/// stops once the plan is settled.
struct UntilDone<'s> {
    sidecars: Arc<SidecarSet>,
    standing: &'s Standing,
    grant: Option<tokio::sync::watch::Receiver<Option<Instant>>>,
    rollout_timeout: Duration,
    terminal: bool,
    progress: Option<Progress>,
    acting: bool,
    unheld_since: Option<Instant>,
    settled_since: Option<Instant>,
    /// Restarted workloads without pods whose outcome is still to come.
    awaiting: bool,
}

impl Conductor for UntilDone<'_> {
    fn sidecars(&mut self) -> Arc<SidecarSet> {
        self.sidecars.clone()
    }

    fn before_pass(&mut self, _: &mut Engine) -> Result<Option<Authority>, LoopStopped> {
        self.acting = self.standing.may_act();
        if self.acting {
            self.unheld_since = None;
            return Ok(Some(Authority::Act));
        }
        // The Lease was not renewed in time: act no more until it is.
        let since = *self.unheld_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= CLI_LEASE_DURATION {
            return Err(LoopStopped::Conductor(format!(
                "lost the rollout Lease for {CLI_LEASE_DURATION:?}; stopped acting (the summary would be partial)"
            )));
        }
        Ok(Some(Authority::PlanOnly))
    }

    fn after_pass(&mut self, engine: &Engine, plan: &RolloutPlan) -> ControlFlow<()> {
        let progress = self.progress.get_or_insert_with(|| {
            print_plan_summary(plan);
            Progress::of(plan)
        });
        progress.report(engine.summary(), self.terminal, plan);
        let settled =
            plan.is_settled() && !plan.waiting.iter().any(|w| w.reason.clears_by_itself());
        // A restarted workload whose pods all went (scaled to zero, deleted) is in no plan
        // list, yet ends as succeeded or gone once its controller says so: wait for that too,
        // within the rollout timeout.
        self.awaiting = engine.awaiting_outcomes() > 0;
        if !settled {
            self.settled_since = None;
            return ControlFlow::Continue(());
        }
        let since = *self.settled_since.get_or_insert_with(Instant::now);
        if !self.awaiting || since.elapsed() >= self.rollout_timeout {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn wake_at(&self, _: Instant) -> Vec<Option<Instant>> {
        vec![
            // The Lease this run holds runs out unless renewed: it stops acting then.
            self.acting.then(|| self.standing.grant_ends()).flatten(),
            // The Lease was lost long enough ago to give up.
            self.unheld_since.map(|since| since + CLI_LEASE_DURATION),
            // Workloads left without pods had long enough to report their outcome.
            self.settled_since
                .filter(|_| self.awaiting)
                .map(|since| since + self.rollout_timeout),
        ]
    }

    fn safety_net(&self) -> Duration {
        crate::engine::LOOP_SAFETY_NET
    }

    async fn changed(&mut self) -> Result<(), LoopStopped> {
        grant_changed(&mut self.grant).await;
        Ok(())
    }
}

/// Resolves when the Lease's grant changes; never without a Lease, or once its task is gone.
pub(crate) async fn grant_changed(
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

/// What this run planned, and which of those workloads it has reported done.
pub(crate) struct Progress {
    pub(crate) planned: BTreeSet<WorkloadRef>,
    pub(crate) reported: BTreeSet<WorkloadRef>,
}

impl Progress {
    pub(crate) fn of(plan: &RolloutPlan) -> Self {
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
    pub(crate) fn report(&mut self, summary: &RunSummary, terminal: bool, plan: &RolloutPlan) {
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
