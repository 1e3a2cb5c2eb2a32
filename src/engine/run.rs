//! The engine's loop in `serve`: plans on every change and whenever the last plan said it
//! would change by time alone; acts only while this replica holds the Lease and is ready.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::info;

use super::{Authority, Engine, PLAN_DEBOUNCE};
use crate::cluster::drift_feed::DriftFeed;
use crate::config::SidecarSet;

/// When a planning loop (`serve`'s, `rollout --confirm`'s) must plan again though nothing it
/// watches changed: the soonest of `moments` (the plan's own next change, a grant's end...),
/// and never later than `safety_net` from `now`, a net should a watch miss a change, not what
/// paces a campaign. A moment already past is due at once.
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

/// Runs the engine for `serve` until the process ends: plans on every change and whenever the
/// last plan said it would change by time alone, acts only while `grant` allows, and only once
/// this replica has been ready (`not_ready` says why not, `None` when ready) for
/// `act_after_ready`: a pod the engine restarts is created through the webhook, and until the
/// Service sends the API server's calls to a ready replica, it would come back without its
/// sidecars (failurePolicy Ignore).
pub(crate) async fn run(
    mut engine: Engine,
    mut feed: DriftFeed,
    mut sidecars: watch::Receiver<Arc<SidecarSet>>,
    mut not_ready: watch::Receiver<Option<&'static str>>,
    mut grant: watch::Receiver<Option<Instant>>,
    act_after_ready: Duration,
) {
    let mut synced = feed.synced.clone();
    if synced.wait_for(|s| *s).await.is_err() {
        return;
    }
    let replan = engine.options.replan_every;
    info!(
        mode = engine.options.mode.as_str(),
        "rollout engine started"
    );
    let mut leading = false;
    let mut ready_since: Option<Instant> = None;
    loop {
        // Wake when something watched changes, or when the plan says it changes by time
        // alone, or when the warm-up ends. A grant that is not renewed only runs out: nothing
        // is sent when it does. Wake then too, so that a replica whose Lease was taken stops
        // reporting itself leader (and its book) at once, not at the next safety-net replan.
        // `leading` is never true after a pass that was not ready, so an expired grant cannot
        // wake a replica that is not ready again and again.
        let now = Instant::now();
        let wake = soonest_wake(
            now,
            replan,
            [
                engine.next_wake(now),
                ready_since
                    .map(|since| since + act_after_ready)
                    .filter(|&warm| warm > now),
                leading.then(|| *grant.borrow()).flatten(),
            ],
        );
        let changed = tokio::select! {
            result = feed.changes.changed() => if result.is_err() { return } else { true },
            result = sidecars.changed() => if result.is_err() { return } else { true },
            result = grant.changed() => if result.is_err() { return } else { true },
            changed = engine.book_writer.changed() => if changed { true } else { return },
            // Becoming ready, or no longer, is acted on at once: a leader that stops being
            // ready steps down now, not at its next planned pass.
            result = not_ready.changed() => if result.is_err() { return } else { true },
            () = tokio::time::sleep_until(wake.into()) => false,
        };
        if changed {
            tokio::time::sleep(PLAN_DEBOUNCE).await;
        }
        feed.changes.borrow_and_update();
        let was_ready = not_ready.borrow_and_update().is_none();
        if !was_ready {
            ready_since = None;
        }
        // A replica that is not ready does not act, and says so: it is not the leader.
        let warmed =
            was_ready && ready_since.get_or_insert_with(Instant::now).elapsed() >= act_after_ready;
        let may_act = warmed && crate::cluster::lease::may_act(&grant);
        if may_act != leading {
            engine.metrics.rollout_leader.set(i64::from(may_act));
            // The book is the leader's to report: an ex-leader's last figure would keep the
            // book alert firing after the new leader's book shrank.
            if !may_act {
                engine.metrics.rollout_book.set(0);
            }
            leading = may_act;
        }
        if !was_ready {
            continue;
        }
        let set = sidecars.borrow_and_update().clone();
        let authority = if may_act {
            Authority::Act
        } else {
            Authority::PlanOnly
        };
        engine.tick(&feed, &set, authority).await;
    }
}
