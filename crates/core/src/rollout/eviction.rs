//! OnDelete pacing: the controller never replaces pods by itself, so stale pods are evicted
//! through the Eviction API (which honours PodDisruptionBudgets), one at a time.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::book::CampaignBook;
pub use super::in_place::NextPod;
use super::instant::after;
use crate::config::revision::stamp_items;
use crate::drift::PodToReplace;

/// The last eviction made in a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastEviction {
    pub pod: PodToReplace,
    pub at: Timestamp,
}

/// After an eviction, the next in the same workload waits at least this long, on top of the
/// workload being healthy again, so that a status that lags the eviction cannot let two go.
pub const EVICTION_SPACING: Duration = Duration::from_secs(2);

/// The next pod to evict of a rolling OnDelete workload (`stale` sorted), or none: once the last
/// evicted pod is gone from the stale ones, and not within [`EVICTION_SPACING`] of it; a pod
/// carrying a revision whose campaign failed (`broken`) first, whatever the workload's health
/// (see [`NextPod::heal`]), the others only while it is healthy. A replacement under the same
/// name that the webhook never saw (uninjected, where the evicted pod was injected) is another
/// pod: it is evicted in turn.
pub fn next_eviction<'p>(
    stale: &'p [PodToReplace],
    healthy: bool,
    last: Option<&LastEviction>,
    now: Timestamp,
    broken: impl Fn(&PodToReplace) -> bool,
) -> Option<NextPod<'p>> {
    if let Some(last) = last
        && (stale.contains(&last.pod) || after(last.at, EVICTION_SPACING) > now)
    {
        return None;
    }
    super::in_place::broken_first(stale, healthy, broken)
}

/// Whether `pod` carries a revision whose campaign failed (one of the book's `failedBefore`):
/// a pod such a revision of ours broke is replaced first.
pub fn carries_failed_revision(pod: &PodToReplace, book: &CampaignBook) -> bool {
    pod.revision.as_deref().is_some_and(|stamp| {
        stamp_items(stamp).any(|(sidecar, revision)| {
            book.campaigns
                .get(sidecar)
                .is_some_and(|c| c.failed_before.iter().any(|f| f == revision))
        })
    })
}

/// A workload whose evictions a PodDisruptionBudget refuses, since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedEviction {
    pub since: Timestamp,
    /// Said once it passed `--eviction-timeout`.
    pub reported: bool,
}

/// What to say about a refused eviction, and when to try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockNews {
    /// The first refusal: one info line.
    First,
    /// Refused again, within `--eviction-timeout`, or already reported: nothing.
    Quiet,
    /// Refused for longer than `--eviction-timeout`: one warning and a Warning Event.
    Overdue { blocked_for: Duration },
}

/// Retries while a budget refuses: every few seconds at first, then, once the refusal is
/// reported, at this pace: a budget that allows no disruption for minutes is not spun on.
pub const BLOCKED_RETRY: Duration = Duration::from_secs(5);
pub const OVERDUE_RETRY: Duration = Duration::from_secs(30);

/// The state after one more refusal at `now`, what to say, and when to retry.
pub fn on_blocked(
    previous: Option<&BlockedEviction>,
    now: Timestamp,
    timeout: Duration,
) -> (BlockedEviction, BlockNews, Duration) {
    let Some(previous) = previous else {
        return (
            BlockedEviction {
                since: now,
                reported: false,
            },
            BlockNews::First,
            BLOCKED_RETRY,
        );
    };
    let blocked_for = Duration::try_from(now.duration_since(previous.since)).unwrap_or_default();
    if previous.reported {
        return (previous.clone(), BlockNews::Quiet, OVERDUE_RETRY);
    }
    if blocked_for >= timeout {
        return (
            BlockedEviction {
                since: previous.since,
                reported: true,
            },
            BlockNews::Overdue { blocked_for },
            OVERDUE_RETRY,
        );
    }
    (previous.clone(), BlockNews::Quiet, BLOCKED_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_said_once_then_reported_once_past_the_timeout_and_retried_slower() {
        let timeout = Duration::from_secs(120);
        let (first, news, retry) = on_blocked(None, at(0), timeout);
        assert_eq!(news, BlockNews::First);
        assert_eq!(retry, BLOCKED_RETRY);
        let (again, news, retry) = on_blocked(Some(&first), at(60), timeout);
        assert_eq!((news, retry), (BlockNews::Quiet, BLOCKED_RETRY));
        let (overdue, news, retry) = on_blocked(Some(&again), at(125), timeout);
        assert_eq!(
            news,
            BlockNews::Overdue {
                blocked_for: Duration::from_secs(125)
            }
        );
        assert_eq!(retry, OVERDUE_RETRY);
        assert!(overdue.reported);
        let (_, news, retry) = on_blocked(Some(&overdue), at(155), timeout);
        assert_eq!((news, retry), (BlockNews::Quiet, OVERDUE_RETRY));
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn one_pod_at_a_time_only_while_healthy() {
        let pod = PodToReplace::injected;
        let stale = [pod("db-0"), pod("db-1")];
        assert_eq!(
            next_eviction(&stale, true, None, at(0), |_| false).map(|n| n.pod),
            Some(&pod("db-1"))
        );
        assert_eq!(
            next_eviction(&stale, false, None, at(0), |_| false).map(|n| n.pod),
            None
        );
        assert_eq!(
            next_eviction(&[], true, None, at(0), |_| false).map(|n| n.pod),
            None
        );
        let last = LastEviction {
            pod: pod("db-1"),
            at: at(0),
        };
        // The evicted pod is still stale (not yet gone): wait.
        assert_eq!(
            next_eviction(&stale, true, Some(&last), at(60), |_| false).map(|n| n.pod),
            None
        );
        // Gone, but within the spacing: wait; after it: the next one.
        let rest = [pod("db-0")];
        assert_eq!(
            next_eviction(&rest, true, Some(&last), at(1), |_| false).map(|n| n.pod),
            None
        );
        assert_eq!(
            next_eviction(&rest, true, Some(&last), at(2), |_| false).map(|n| n.pod),
            Some(&pod("db-0"))
        );
    }

    #[test]
    fn a_same_named_replacement_that_missed_the_webhook_is_evicted_in_turn() {
        let last = LastEviction {
            pod: PodToReplace::injected("db-0"),
            at: at(0),
        };
        let missed = PodToReplace {
            name: "db-0".into(),
            injected: false,
            revision: None,
        };
        let stale = [missed.clone()];
        assert_eq!(
            next_eviction(&stale, true, Some(&last), at(1), |_| false).map(|n| n.pod),
            None,
            "spacing"
        );
        assert_eq!(
            next_eviction(&stale, true, Some(&last), at(5), |_| false).map(|n| n.pod),
            Some(&missed)
        );
        // A second miss is not chased: the rollout times out and says why.
        let again = LastEviction {
            pod: missed.clone(),
            at: at(5),
        };
        assert_eq!(
            next_eviction(&stale, true, Some(&again), at(60), |_| false).map(|n| n.pod),
            None
        );
    }

    #[test]
    fn a_pod_a_failed_revision_broke_is_evicted_first_even_while_unhealthy() {
        let broken = PodToReplace::at("db-0", "logger:v1=bbbbbbbbbbbb");
        let stale = [
            broken.clone(),
            PodToReplace::at("db-1", "logger:v1=aaaaaaaaaaaa"),
        ];
        let mut book = CampaignBook::default();
        let mut campaign = crate::test_fixtures::campaign(
            "cccccccccccc",
            crate::rollout::CampaignState::Running,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)),
        );
        campaign.failed_before = vec!["bbbbbbbbbbbb".into()];
        book.campaigns.insert("logger:v1".into(), campaign);
        let is_broken = |p: &PodToReplace| carries_failed_revision(p, &book);
        assert!(is_broken(&stale[0]) && !is_broken(&stale[1]));
        assert!(!is_broken(&PodToReplace::injected("db-2")), "no revision");
        let next = next_eviction(&stale, false, None, at(0), is_broken).unwrap();
        assert_eq!((next.pod, next.heal), (&broken, true));
        // The spacing holds for a heal too.
        let last = LastEviction {
            pod: PodToReplace::injected("db-9"),
            at: at(0),
        };
        assert_eq!(
            next_eviction(&stale, false, Some(&last), at(1), is_broken),
            None
        );
        // Once it is replaced, the rest waits for the workload's health.
        assert_eq!(
            next_eviction(&stale[1..], false, None, at(9), is_broken),
            None
        );
    }
}
