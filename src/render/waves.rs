//! A fleet rollout in words: where each cluster's campaign stands, and what an upstream gate
//! waits for.

use crate::rollout::to_the_second;
use crate::rollout::waves::{Progress, Standing, UpstreamVerdict};

/// Where one cluster's campaign stands.
pub(crate) fn fleet_progress(progress: &Progress) -> String {
    match progress {
        Progress::NoCampaign => {
            "no campaign of the sidecar (is its config there, and serve --rollout=auto running?)"
                .to_owned()
        }
        Progress::OtherRevision { revision } => {
            format!("its campaign is of revision {revision} (the config there is another one)")
        }
        Progress::Gated { promoted: false } => "waits for promotion".to_owned(),
        Progress::Gated { promoted: true } => {
            "promotion written; the Lease holder starts the campaign at its next plan".to_owned()
        }
        Progress::Rolling {
            state,
            pending,
            rolling,
        } => format!(
            "{}: {pending} workload(s) to restart, {rolling} rolling",
            state.as_str()
        ),
        Progress::Manual => {
            "its rollout policy is manual: it restarts when `rollout --confirm` runs there"
                .to_owned()
        }
        Progress::Failed {
            workload: Some(workload),
            reason,
        } => format!("failed: {workload}: {reason}"),
        Progress::Failed {
            workload: None,
            reason,
        } => format!("failed: {reason}"),
        Progress::Baking { until } => {
            format!("complete, baking until {}", to_the_second(*until))
        }
        Progress::Done => "complete and baked".to_owned(),
    }
}

/// Where a cluster stands, or why it was not read.
pub(crate) fn standing(standing: &Standing) -> String {
    match standing {
        Ok(progress) => fleet_progress(progress),
        Err(err) => format!("not read: {err}"),
    }
}

/// An upstream gate's verdict, as its log line and the book say it: promoted `by` the upstream
/// clusters, or waiting for each that is not done.
pub(crate) fn upstream_verdict(verdict: &UpstreamVerdict) -> String {
    match verdict {
        UpstreamVerdict::Promote { by } => {
            format!("promoted: complete and baked in {}", promoted_by(by))
        }
        UpstreamVerdict::Wait(waiting) => format!("waits for {}", upstream_waiting(waiting)),
    }
}

/// Who promoted: the upstream clusters.
pub(crate) fn promoted_by(clusters: &[String]) -> String {
    format!("upstream {}", clusters.join(", "))
}

/// What the gate waits for: each upstream cluster not done.
pub(crate) fn upstream_waiting(waiting: &[(String, Standing)]) -> String {
    if waiting.is_empty() {
        return "no upstream cluster".to_owned();
    }
    waiting
        .iter()
        .map(|(cluster, s)| format!("{cluster}: {}", standing(s)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The heading of wave `n` (from 0) of `waves`.
pub(crate) fn wave_heading(
    n: usize,
    waves: &[Vec<String>],
    sidecar: &str,
    revision: &str,
) -> String {
    format!(
        "wave {}/{} ({}): {sidecar} revision {revision}",
        n + 1,
        waves.len(),
        waves[n].join(", "),
    )
}

/// The fleet stopped at `cluster`'s failure, with the waves `left` unstarted.
pub(crate) fn fleet_stopped(
    left: &[Vec<String>],
    cluster: &str,
    sidecar: &str,
    revision: &str,
    workload: Option<&str>,
    reason: &str,
) -> String {
    let workload = workload.map(|w| format!("{w}: ")).unwrap_or_default();
    let left = if left.is_empty() {
        String::new()
    } else {
        let waves: Vec<String> = left.iter().map(|w| w.join(",")).collect();
        format!(" (waves not started: {})", waves.join(" then "))
    };
    format!(
        "the fleet stops: {cluster}: {sidecar} revision {revision} failed: {workload}{reason}; nothing further is promoted{left}. Fix or resume it there, then run this again: it goes on from here"
    )
}

/// Wave `n` (from 0) of `count` past `timeout`, with each cluster not done.
pub(crate) fn wave_timed_out(
    n: usize,
    count: usize,
    timeout: std::time::Duration,
    progress: &[(String, Standing)],
    exit: u8,
) -> String {
    let waiting: Vec<String> = progress
        .iter()
        .filter(|(_, p)| !p.as_ref().is_ok_and(Progress::is_done))
        .map(|(cluster, p)| format!("{cluster}: {}", standing(p)))
        .collect();
    format!(
        "wave {}/{count} not done within --wave-timeout {}: {}; nothing further is promoted (run this again to go on watching); exit status {exit}",
        n + 1,
        humantime::format_duration(timeout),
        waiting.join("; "),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::rollout::CampaignState;

    #[test]
    fn each_cluster_says_where_its_campaign_stands_and_the_gate_what_it_waits_for() {
        let cases = [
            (
                Progress::NoCampaign,
                "no campaign of the sidecar (is its config there, and serve --rollout=auto running?)",
            ),
            (
                Progress::Manual,
                "its rollout policy is manual: it restarts when `rollout --confirm` runs there",
            ),
            (
                Progress::Rolling {
                    state: CampaignState::Running,
                    pending: 2,
                    rolling: 0,
                },
                "running: 2 workload(s) to restart, 0 rolling",
            ),
            (
                Progress::Baking {
                    until: Timestamp::from_second(600).unwrap(),
                },
                "complete, baking until 1970-01-01T00:10:00Z",
            ),
            (
                Progress::Failed {
                    workload: None,
                    reason: "the maintenance window closed".into(),
                },
                "failed: the maintenance window closed",
            ),
        ];
        for (progress, words) in cases {
            assert_eq!(fleet_progress(&progress), words);
        }
        let waiting = UpstreamVerdict::Wait(vec![
            (
                "qa".into(),
                Ok(Progress::OtherRevision {
                    revision: "bbbbbbbbbbbb".into(),
                }),
            ),
            ("staging".into(), Err("forbidden".into())),
        ]);
        assert_eq!(
            upstream_verdict(&waiting),
            "waits for qa: its campaign is of revision bbbbbbbbbbbb (the config there is another one); staging: not read: forbidden"
        );
        assert_eq!(upstream_waiting(&[]), "no upstream cluster");
        let promoted = UpstreamVerdict::Promote {
            by: vec!["staging".into(), "qa".into()],
        };
        assert_eq!(
            upstream_verdict(&promoted),
            "promoted: complete and baked in upstream staging, qa"
        );
    }

    #[test]
    fn a_fleet_run_says_its_wave_where_it_stopped_and_what_it_still_waits_for() {
        let waves = vec![
            vec!["staging".to_owned()],
            vec!["prod-eu".to_owned(), "prod-us".to_owned()],
            vec!["prod-ap".to_owned()],
        ];
        assert_eq!(
            wave_heading(1, &waves, "tracer:v1", "aaaaaaaaaaaa"),
            "wave 2/3 (prod-eu, prod-us): tracer:v1 revision aaaaaaaaaaaa"
        );
        assert_eq!(
            fleet_stopped(
                &waves[1..],
                "staging",
                "tracer:v1",
                "aaaaaaaaaaaa",
                Some("Deployment/team/web"),
                "not rolled out"
            ),
            "the fleet stops: staging: tracer:v1 revision aaaaaaaaaaaa failed: Deployment/team/web: not rolled out; nothing further is promoted (waves not started: prod-eu,prod-us then prod-ap). Fix or resume it there, then run this again: it goes on from here"
        );
        assert!(
            fleet_stopped(&[], "prod-ap", "tracer:v1", "aaaaaaaaaaaa", None, "x")
                .contains("failed: x; nothing further is promoted. Fix")
        );
        let progress = vec![
            ("prod-eu".to_owned(), Ok(Progress::Done)),
            ("prod-us".to_owned(), Err("forbidden".to_owned())),
        ];
        assert_eq!(
            wave_timed_out(1, 3, std::time::Duration::from_secs(600), &progress, 3),
            "wave 2/3 not done within --wave-timeout 10m: prod-us: not read: forbidden; nothing further is promoted (run this again to go on watching); exit status 3"
        );
    }
}
