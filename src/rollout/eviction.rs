//! OnDelete pacing: the controller never replaces pods by itself, so stale pods are evicted
//! through the Eviction API (which honours PodDisruptionBudgets), one at a time.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::gates::after;

/// The last eviction made in a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastEviction {
    pub pod: String,
    pub at: Timestamp,
}

/// After an eviction, the next in the same workload waits at least this long, on top of the
/// workload being healthy again, so that a status that lags the eviction cannot let two go.
pub const EVICTION_SPACING: Duration = Duration::from_secs(2);

/// The next pod to evict of a rolling OnDelete workload (`stale` sorted), or none: only while
/// the workload is healthy, once the last evicted pod is gone from the stale ones, and not
/// within [`EVICTION_SPACING`] of it.
pub fn next_eviction<'p>(
    stale: &'p [String],
    healthy: bool,
    last: Option<&LastEviction>,
    now: Timestamp,
) -> Option<&'p str> {
    let pod = stale.last()?;
    if !healthy {
        return None;
    }
    if let Some(last) = last
        && (stale.contains(&last.pod) || after(last.at, EVICTION_SPACING) > now)
    {
        return None;
    }
    Some(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn one_pod_at_a_time_only_while_healthy() {
        let stale = ["db-0".to_owned(), "db-1".to_owned()];
        assert_eq!(next_eviction(&stale, true, None, at(0)), Some("db-1"));
        assert_eq!(next_eviction(&stale, false, None, at(0)), None);
        assert_eq!(next_eviction(&[], true, None, at(0)), None);
        let last = LastEviction {
            pod: "db-1".into(),
            at: at(0),
        };
        // The evicted pod is still stale (not yet gone): wait.
        assert_eq!(next_eviction(&stale, true, Some(&last), at(60)), None);
        // Gone, but within the spacing: wait; after it: the next one.
        let rest = ["db-0".to_owned()];
        assert_eq!(next_eviction(&rest, true, Some(&last), at(1)), None);
        assert_eq!(next_eviction(&rest, true, Some(&last), at(2)), Some("db-0"));
    }
}
