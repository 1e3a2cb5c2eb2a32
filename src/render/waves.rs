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
}
