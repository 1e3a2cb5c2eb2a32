//! The one control loop of the engine, for `serve` and for `rollout --confirm`: plans on every
//! change (of the cluster, the status ConfigMap, or what the caller watches) and whenever the
//! last plan said it would change by time alone, never polling. The two differ only in their
//! [`Conductor`]: when they may act, and when they stop.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{Instrument, debug, info};

use super::{Authority, Engine, PLAN_DEBOUNCE, PLAN_DEBOUNCE_MAX, PLAN_DUTY};
use crate::cluster::drift_feed::DriftFeed;
use crate::config::SidecarSet;
use crate::rollout::RolloutPlan;

/// When a planning loop must plan again though nothing it watches changed: the soonest of
/// `moments` (the plan's own next change, a grant's end...), and never later than
/// `safety_net` from `now`, a net should a watch miss a change, not what paces a campaign. A
/// moment already past is due at once.
pub(crate) fn soonest_wake(
    now: Instant,
    safety_net: Duration,
    moments: impl IntoIterator<Item = Option<Instant>>,
) -> Instant {
    moments
        .into_iter()
        .flatten()
        .fold(now + safety_net, Instant::min)
}

/// The quiet time after a change of the cluster before the next plan: the debounce, or
/// [`PLAN_DUTY`] times the last plan's time, so that planning takes at most a fifth of a core
/// however often the pods change (up to [`PLAN_DEBOUNCE_MAX`]).
fn quiet_after_cluster_change(last_plan: Duration) -> Duration {
    (last_plan * PLAN_DUTY).clamp(PLAN_DEBOUNCE, PLAN_DEBOUNCE_MAX)
}

/// Resolves when the status ConfigMap or something the conductor watches changes.
async fn other_change(
    engine: &mut Engine,
    conductor: &mut impl Conductor,
) -> Result<(), LoopStopped> {
    tokio::select! {
        watching = engine.status_changed() => if watching { Ok(()) } else {
            Err(LoopStopped::StatusWatch)
        },
        result = conductor.changed() => result,
    }
}

/// What ended a wait of the control loop.
enum Woke {
    /// The cluster's watches changed the index.
    Cluster,
    /// The status ConfigMap, or something the conductor watches (the configs, the grant).
    Other,
    /// A moment a plan or the conductor asked for.
    Time,
}

/// Why the loop ended before its conductor said it was done.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoopStopped {
    #[error("the cluster watches stopped")]
    ClusterWatches,
    #[error("the watch of the status ConfigMap stopped")]
    StatusWatch,
    #[error("{0}")]
    Conductor(String),
}

/// What sets one caller of [`control_loop`] apart from another.
pub(crate) trait Conductor {
    /// The sidecar set to plan with in the next pass.
    fn sidecars(&mut self) -> Arc<SidecarSet>;
    /// Before a pass: the authority it plans with, or `None` to skip it (not ready).
    fn before_pass(&mut self, engine: &mut Engine) -> Result<Option<Authority>, LoopStopped>;
    /// After a pass: whether the loop is done.
    fn after_pass(&mut self, engine: &Engine, plan: &RolloutPlan) -> ControlFlow<()>;
    /// The moments, besides the plan's own, at which it must pass again.
    fn wake_at(&self, now: Instant) -> Vec<Option<Instant>>;
    /// The longest the loop waits with nothing due.
    fn safety_net(&self) -> Duration;
    /// Resolves when something only this caller watches changes (its Lease's grant, the
    /// readiness of `serve`, the sidecar set); never, when it watches nothing.
    async fn changed(&mut self) -> Result<(), LoopStopped>;
}

/// Plans and acts until `conductor` says it is done, or a watch it needs ends.
pub(crate) async fn control_loop(
    engine: &mut Engine,
    feed: &DriftFeed,
    conductor: &mut impl Conductor,
) -> Result<(), LoopStopped> {
    let mut changes = feed.changes.clone();
    let mut synced = feed.synced.clone();
    if synced.wait_for(|s| *s).await.is_err() {
        return Err(LoopStopped::ClusterWatches);
    }
    loop {
        changes.borrow_and_update();
        if let Some(authority) = conductor.before_pass(engine)? {
            let set = conductor.sidecars();
            let span = super::spans::plan();
            let plan = engine
                .tick(feed, &set, authority)
                .instrument(span.clone())
                .await;
            super::spans::record_plan(&span, &plan);
            if conductor.after_pass(engine, &plan).is_break() {
                return Ok(());
            }
            debug!(
                rolling = plan.rolling.len(),
                waiting = plan.waiting.len(),
                "planned"
            );
        }
        let now = Instant::now();
        let mut moments = conductor.wake_at(now);
        moments.push(engine.next_wake(now));
        let wake = soonest_wake(now, conductor.safety_net(), moments);
        let woke = tokio::select! {
            result = changes.changed() => if result.is_err() {
                return Err(LoopStopped::ClusterWatches);
            } else { Woke::Cluster },
            result = other_change(engine, conductor) => { result?; Woke::Other },
            () = tokio::time::sleep_until(wake.into()) => Woke::Time,
        };
        // A burst of watch events (a restart's pods come and go) costs one plan; an edit of a
        // config, a change of the grant or a moment the plan asked for is planned on at once
        // even while the pods keep changing.
        let quiet = match woke {
            Woke::Time => Duration::ZERO,
            Woke::Other => PLAN_DEBOUNCE,
            Woke::Cluster => {
                let until = Instant::now() + quiet_after_cluster_change(engine.last_plan());
                tokio::select! {
                    () = tokio::time::sleep_until(until.min(wake).into()) => Duration::ZERO,
                    result = other_change(engine, conductor) => { result?; PLAN_DEBOUNCE },
                }
            }
        };
        if !quiet.is_zero() {
            tokio::time::sleep(quiet).await;
        }
    }
}

/// How `serve` conducts the loop: it acts only while `grant` allows, and only once this
/// replica has been ready (`not_ready` says why not, `None` when ready) for
/// `act_after_ready`: a pod the engine restarts is created through the webhook, and until the
/// Service sends the API server's calls to a ready replica, it would come back without its
/// sidecars (failurePolicy Ignore). It never stops by itself.
pub(crate) struct ServeConductor {
    sidecars: watch::Receiver<Arc<SidecarSet>>,
    not_ready: watch::Receiver<Option<&'static str>>,
    grant: watch::Receiver<Option<Instant>>,
    act_after_ready: Duration,
    replan_every: Duration,
    leading: bool,
    ready_since: Option<Instant>,
}

impl Conductor for ServeConductor {
    fn sidecars(&mut self) -> Arc<SidecarSet> {
        self.sidecars.borrow_and_update().clone()
    }

    fn before_pass(&mut self, engine: &mut Engine) -> Result<Option<Authority>, LoopStopped> {
        let ready = self.not_ready.borrow_and_update().is_none();
        if !ready {
            self.ready_since = None;
        }
        let warmed = ready
            && self.ready_since.get_or_insert_with(Instant::now).elapsed() >= self.act_after_ready;
        let may_act = warmed && crate::cluster::lease::may_act(&self.grant);
        if may_act != self.leading {
            engine.metrics.rollout_leader.set(i64::from(may_act));
            // The book is the leader's to report: an ex-leader's last figure would keep the
            // book alert firing after the new leader's book shrank.
            if !may_act {
                engine.metrics.rollout_book.set(0);
            }
            self.leading = may_act;
        }
        // A replica that is not ready does not plan either: it is not the leader.
        Ok(ready.then_some(if may_act {
            Authority::Act
        } else {
            Authority::PlanOnly
        }))
    }

    fn after_pass(&mut self, _: &Engine, _: &RolloutPlan) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    // A grant that is not renewed only runs out: nothing is sent when it does. Wake then too,
    // so that a replica whose Lease was taken stops reporting itself leader (and its book) at
    // once. `leading` is never true after a pass that was not ready, so an expired grant
    // cannot wake a replica that is not ready again and again.
    fn wake_at(&self, now: Instant) -> Vec<Option<Instant>> {
        vec![
            self.ready_since
                .map(|since| since + self.act_after_ready)
                .filter(|&warm| warm > now),
            self.leading.then(|| *self.grant.borrow()).flatten(),
        ]
    }

    fn safety_net(&self) -> Duration {
        self.replan_every
    }

    async fn changed(&mut self) -> Result<(), LoopStopped> {
        let gone = || LoopStopped::Conductor("serve is stopping".to_owned());
        // Becoming ready, or no longer, is acted on at once: a leader that stops being ready
        // steps down now, not at its next planned pass.
        tokio::select! {
            result = self.sidecars.changed() => result.map_err(|_| gone()),
            result = self.grant.changed() => result.map_err(|_| gone()),
            result = self.not_ready.changed() => result.map_err(|_| gone()),
        }
    }
}

/// Runs the engine for `serve` until the process ends (see [`ServeConductor`]).
pub(crate) async fn run(
    mut engine: Engine,
    feed: DriftFeed,
    sidecars: watch::Receiver<Arc<SidecarSet>>,
    not_ready: watch::Receiver<Option<&'static str>>,
    grant: watch::Receiver<Option<Instant>>,
    act_after_ready: Duration,
) {
    info!(
        mode = engine.options.mode.as_str(),
        "rollout engine started"
    );
    let mut conductor = ServeConductor {
        sidecars,
        not_ready,
        grant,
        act_after_ready,
        replan_every: engine.options.replan_every,
        leading: false,
        ready_since: None,
    };
    if let Err(stopped) = control_loop(&mut engine, &feed, &mut conductor).await {
        debug!("rollout engine stopped: {stopped}");
    }
}
