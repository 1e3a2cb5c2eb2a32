//! Instants: a wait's end, and how instants and waits read to a person, for plans, the
//! campaign book and the journal.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `time + duration`, saturating.
pub fn after(time: Timestamp, duration: Duration) -> Timestamp {
    time.checked_add(SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

/// `in 8m`, `in 45s`, `in 2h 5m`, or `now`: coarse, as a person reads a wait.
pub fn from_now(until: Timestamp, now: Timestamp) -> String {
    let seconds = until.as_second() - now.as_second();
    if seconds <= 0 {
        return "now".to_owned();
    }
    let (hours, minutes) = (seconds / 3600, (seconds % 3600 + 59) / 60);
    match (hours, minutes) {
        (0, _) if seconds < 60 => format!("in {seconds}s"),
        (0, minutes) => format!("in {minutes}m"),
        (hours, 0) => format!("in {hours}h"),
        (hours, 60) => format!("in {}h", hours + 1),
        (hours, minutes) => format!("in {hours}h {minutes}m"),
    }
}

/// An instant to the second, RFC 3339 in UTC.
pub fn to_the_second(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
