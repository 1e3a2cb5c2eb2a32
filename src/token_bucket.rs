//! The client-side rate limit of every request to the API server: a token bucket as client-go's
//! (`flowcontrol.NewTokenBucketRateLimiter`, golang.org/x/time/rate): `qps` tokens a second,
//! at most `burst` saved up, one per request. A request that finds no token reserves the next
//! one and waits for it, so requests go out in the order they asked and the rate over any
//! window of `w` seconds is at most `burst + qps * w`.

use std::time::{Duration, Instant};

/// The limit, as `--kube-api-qps` and `--kube-api-burst` give it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateLimit {
    /// Requests a second; 0 turns the limit off.
    pub(crate) qps: f64,
    /// Requests that may go at once after a quiet spell (at least 1).
    pub(crate) burst: u32,
}

impl RateLimit {
    /// kube-controller-manager's defaults (`--kube-api-qps 20 --kube-api-burst 30`).
    pub(crate) const DEFAULT: RateLimit = RateLimit {
        qps: 20.0,
        burst: 30,
    };
}

#[derive(Debug)]
pub(crate) struct TokenBucket {
    limit: RateLimit,
    /// Tokens saved at `at`; below zero when requests have reserved tokens not yet made.
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub(crate) fn new(limit: RateLimit, now: Instant) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.burst.max(1)),
            at: now,
        }
    }

    /// Takes a token for a request asking at `now`: how long it must wait before it goes
    /// (zero when a saved token was there).
    pub(crate) fn take(&mut self, now: Instant) -> Duration {
        if self.limit.qps <= 0.0 {
            return Duration::ZERO;
        }
        let burst = f64::from(self.limit.burst.max(1));
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limit.qps).min(burst);
        self.at = self.at.max(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.limit.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(qps: f64, burst: u32) -> RateLimit {
        RateLimit { qps, burst }
    }

    #[test]
    fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(limit(20.0, 30), start);
        let waits: Vec<Duration> = (0..40).map(|_| bucket.take(start)).collect();
        assert!(waits[..30].iter().all(Duration::is_zero), "{waits:?}");
        // The 31st waits for one token (50 ms), the 40th for ten.
        assert_eq!(waits[30], Duration::from_millis(50));
        assert_eq!(waits[39], Duration::from_millis(500));
    }

    #[test]
    fn tokens_come_back_with_time_up_to_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(limit(10.0, 5), start);
        for _ in 0..5 {
            assert!(bucket.take(start).is_zero());
        }
        // A second later ten tokens were made, of which five are kept.
        let later = start + Duration::from_secs(1);
        let waits: Vec<Duration> = (0..6).map(|_| bucket.take(later)).collect();
        assert!(waits[..5].iter().all(Duration::is_zero), "{waits:?}");
        assert_eq!(waits[5], Duration::from_millis(100));
    }

    #[test]
    fn no_window_carries_more_than_the_burst_plus_the_rate() {
        // 1,000 requests asking at once go out at their reserved times; count each 10 s
        // window of those times.
        let start = Instant::now();
        let mut bucket = TokenBucket::new(limit(20.0, 30), start);
        let sent: Vec<f64> = (0..1000)
            .map(|_| bucket.take(start).as_secs_f64())
            .collect();
        for from in sent.iter().copied() {
            let in_window = sent
                .iter()
                .filter(|t| **t >= from && **t < from + 10.0)
                .count();
            assert!(in_window <= 30 + 200, "{in_window} requests from {from} s");
        }
        assert!((sent[999] - (970.0 / 20.0)).abs() < 1e-6);
    }

    #[test]
    fn a_qps_of_zero_turns_the_limit_off() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(limit(0.0, 1), start);
        assert!((0..1000).all(|_| bucket.take(start).is_zero()));
    }
}
