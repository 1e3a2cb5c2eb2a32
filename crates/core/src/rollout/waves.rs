//! A revision promoted across clusters in waves (`rollout --promote SIDECAR --wave ...`): from
//! each cluster's campaign book, where its campaign of the revision stands, and what the wave
//! does next. No I/O, no clock: the books and the time come in, and the state lives in the
//! clusters, so a second run decides from where the first stopped.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::book::{CampaignBook, CampaignState};

/// Where one cluster's campaign of a sidecar's revision stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// No campaign of the sidecar: its config is not there, or no engine runs there.
    NoCampaign,
    /// Its campaign is of another revision: the config there is not (or no longer) this one.
    OtherRevision { revision: String },
    /// It waits for promotion; `promoted`: the approval is written, the Lease holder has not
    /// taken it up yet.
    Gated { promoted: bool },
    /// Settling or running.
    Rolling {
        state: CampaignState,
        pending: u32,
        rolling: u32,
    },
    /// `rollout: {policy: manual}`: it restarts only when someone runs `rollout --confirm`
    /// there.
    Manual,
    /// Paused, or a restart failed under it (failures cleared by `rollout --resume` do not
    /// count).
    Failed {
        workload: Option<String>,
        reason: String,
    },
    /// Complete, and baking until then.
    Baking { until: Timestamp },
    /// Complete and baked.
    Done,
}

impl Progress {
    pub fn is_done(&self) -> bool {
        *self == Progress::Done
    }
}

/// Where `book`'s campaign of `sidecar` stands toward `revision`, its bake counted from when
/// it completed.
pub fn progress(
    book: &CampaignBook,
    sidecar: &str,
    revision: &str,
    bake: Duration,
    now: Timestamp,
) -> Progress {
    let Some(campaign) = book.campaigns.get(sidecar) else {
        return Progress::NoCampaign;
    };
    if campaign.revision != revision {
        return Progress::OtherRevision {
            revision: campaign.revision.clone(),
        };
    }
    if campaign.state == CampaignState::Paused || campaign.unacknowledged_failures() > 0 {
        let failure = campaign.unacknowledged_details().last();
        // Read from the cluster, the book keeps its failures' words.
        let reason = failure
            .and_then(|f| f.reason.stored().map(str::to_owned))
            .or_else(|| campaign.pause_reason.clone())
            .unwrap_or_else(|| "the campaign is paused".to_owned());
        return Progress::Failed {
            workload: failure.map(|f| f.workload.to_string()),
            reason,
        };
    }
    match campaign.state {
        CampaignState::Gated => Progress::Gated {
            promoted: book.promoted(sidecar, revision),
        },
        CampaignState::Settling | CampaignState::Running => Progress::Rolling {
            state: campaign.state,
            pending: campaign.counts.pending,
            rolling: campaign.counts.rolling,
        },
        CampaignState::Manual => Progress::Manual,
        CampaignState::Complete | CampaignState::Paused => {
            let since = campaign.completed.as_ref().map_or(now, |t| t.0);
            let until = super::gates::after(since, bake);
            if until > now {
                Progress::Baking { until }
            } else {
                Progress::Done
            }
        }
    }
}

/// What a wave does next, from where each of its clusters stands (or why it was not read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaveStep {
    /// Promote the revision in these clusters (they wait for it).
    Promote(Vec<String>),
    /// Some cluster is still on its way (or could not be read this time).
    Wait,
    /// Every cluster completed and baked: the next wave may start.
    Done,
    /// A cluster failed: the fleet stops here and nothing further is promoted.
    Stop {
        cluster: String,
        workload: Option<String>,
        reason: String,
    },
}

/// The next step of a wave: a failure anywhere stops it; else the clusters waiting for
/// promotion are promoted; it is done when every cluster is.
pub fn wave_step(clusters: &[(String, Result<Progress, String>)]) -> WaveStep {
    for (cluster, progress) in clusters {
        if let Ok(Progress::Failed { workload, reason }) = progress {
            return WaveStep::Stop {
                cluster: cluster.clone(),
                workload: workload.clone(),
                reason: reason.clone(),
            };
        }
    }
    let to_promote: Vec<String> = clusters
        .iter()
        .filter(|(_, p)| matches!(p, Ok(Progress::Gated { promoted: false })))
        .map(|(cluster, _)| cluster.clone())
        .collect();
    if !to_promote.is_empty() {
        return WaveStep::Promote(to_promote);
    }
    if clusters
        .iter()
        .all(|(_, p)| p.as_ref().is_ok_and(Progress::is_done))
    {
        WaveStep::Done
    } else {
        WaveStep::Wait
    }
}

/// Why the revision to promote cannot be told from the first wave's clusters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RevisionUnknown {
    #[error("{cluster} could not be read: {error}")]
    Unread { cluster: String, error: String },
    #[error("{cluster} has no campaign of {sidecar}")]
    NoCampaign { cluster: String, sidecar: String },
    #[error("its campaigns disagree: {0}")]
    Disagree(String),
}

/// The revision a fleet rollout promotes when none is named: the one the first wave's
/// campaigns of `sidecar` are of, when they agree (a second run finds it there too, waiting,
/// running or done).
pub fn fleet_revision(
    sidecar: &str,
    first_wave: &[(String, Result<CampaignBook, String>)],
) -> Result<String, RevisionUnknown> {
    let mut revisions = Vec::new();
    for (cluster, book) in first_wave {
        let book = book.as_ref().map_err(|error| RevisionUnknown::Unread {
            cluster: cluster.clone(),
            error: error.clone(),
        })?;
        let campaign = book
            .campaigns
            .get(sidecar)
            .ok_or_else(|| RevisionUnknown::NoCampaign {
                cluster: cluster.clone(),
                sidecar: sidecar.to_owned(),
            })?;
        revisions.push((cluster.as_str(), campaign.revision.as_str()));
    }
    let first = revisions.first().map(|(_, r)| *r).unwrap_or_default();
    if revisions.iter().all(|(_, r)| *r == first) {
        return Ok(first.to_owned());
    }
    let each: Vec<String> = revisions
        .iter()
        .map(|(cluster, revision)| format!("{cluster} {revision}"))
        .collect();
    Err(RevisionUnknown::Disagree(each.join(", ")))
}

/// What an automatic gate (`serve --promote-after`) does with a revision waiting in its own
/// cluster, from the books of the upstream clusters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamVerdict {
    /// Every upstream cluster completed and baked the revision: promote it, `by` them.
    Promote { by: Vec<String> },
    /// Not yet: each upstream cluster not done, with where it stands or why it was not read
    /// (none: there is no upstream cluster).
    Wait(Vec<(String, Standing)>),
}

/// Where a cluster's campaign stands, or why its book could not be read.
pub type Standing = Result<Progress, String>;

/// Whether `revision` of `sidecar` may be promoted here: only once every upstream cluster was
/// read and its campaign of that same revision is complete and baked. A cluster not read, or
/// one that failed, keeps the gate shut.
pub fn upstream_verdict(
    sidecar: &str,
    revision: &str,
    upstream: &[(String, Result<CampaignBook, String>)],
    bake: Duration,
    now: Timestamp,
) -> UpstreamVerdict {
    let mut waiting = Vec::new();
    for (cluster, book) in upstream {
        match book {
            Ok(book) => {
                let p = progress(book, sidecar, revision, bake, now);
                if !p.is_done() {
                    waiting.push((cluster.clone(), Ok(p)));
                }
            }
            Err(err) => waiting.push((cluster.clone(), Err(err.clone()))),
        }
    }
    if waiting.is_empty() && !upstream.is_empty() {
        UpstreamVerdict::Promote {
            by: upstream.iter().map(|(c, _)| c.clone()).collect(),
        }
    } else {
        UpstreamVerdict::Wait(waiting)
    }
}

#[cfg(test)]
mod tests;
