//! What `drift` says of a sidecar beside its counts: its campaign waits for promotion, is
//! held, paused or reverted, a pin serves in its place, its rollout policy is manual, the book
//! is full, the maintenance window is closed, or when its campaign ends. Data: the rendering
//! layer writes the sentence, with the flags and commands that act on it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::book::{CampaignBook, CampaignState, UpstreamWait};
use super::wait::BookOverflow;
use crate::drift::DriftReport;

/// What an operator should know of a sidecar, one note a row, the most pressing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SidecarNote {
    /// Its campaign of `revision` waits for promotion; new pods keep `held` meanwhile (or get
    /// it already, with none); `upstream` is what an automatic promotion waits for.
    Gated {
        revision: String,
        held: Option<String>,
        upstream: Option<UpstreamWait>,
    },
    /// Its campaign of `revision` paused, and new pods are held at `held`.
    Held {
        held: String,
        revision: String,
        reason: Option<String>,
    },
    /// Its campaign paused, for this reason.
    Paused { reason: String },
    /// Its campaign undoes the failed revision `from`.
    Reverted {
        from: String,
        reason: super::book::FailureReason,
    },
    /// `rollout --to` pinned it at `revision` over the config's `over`.
    Pinned {
        revision: String,
        by: String,
        over: String,
    },
    /// Its rollout policy is manual: the engine leaves its restarts to a person.
    Manual,
    /// The campaign book fills the status ConfigMap: nothing restarts until it shrinks.
    BookFull(BookOverflow),
    /// Outside the engine's maintenance windows; `opens` is `None` when none opens within a
    /// week.
    OutsideWindow {
        windows: String,
        opens: Option<Time>,
        now: Timestamp,
    },
    /// Its campaign ends at the earliest at `at`, by the restart budget.
    Ends { at: Time, pending: u32 },
}

/// The notes of a drift report's sidecars, by sidecar name.
pub type SidecarNotes = BTreeMap<String, SidecarNote>;

impl CampaignBook {
    /// Sets, on the drift report, each sidecar's campaign state and expected end, and returns
    /// what to note of each: its campaign, a pin serving in its place, a manual rollout policy
    /// (the last said winning); then, for one with pods to restart and nothing said yet, a
    /// full book or a closed maintenance window; then when its campaign ends.
    pub fn notes(
        &self,
        report: &mut DriftReport,
        manual: &BTreeSet<String>,
        now: Timestamp,
    ) -> SidecarNotes {
        let mut notes = SidecarNotes::new();
        self.note_campaigns(report, manual, &mut notes);
        self.note_overflow(report, &mut notes);
        self.note_window(report, now, &mut notes);
        notes
    }

    fn note_campaigns(
        &self,
        report: &mut DriftReport,
        manual: &BTreeSet<String>,
        notes: &mut SidecarNotes,
    ) {
        for row in &mut report.sidecars {
            let mut note = None;
            let campaign = self
                .campaigns
                .get(&row.name)
                .filter(|c| row.revision.as_deref() == Some(c.revision.as_str()));
            if let Some(campaign) = campaign {
                row.campaign = Some(campaign.state.as_str().to_owned());
                if campaign.state == CampaignState::Gated {
                    note = Some(SidecarNote::Gated {
                        revision: campaign.revision.clone(),
                        held: campaign.held.as_ref().map(|h| h.revision.clone()),
                        upstream: self
                            .upstream
                            .get(&row.name)
                            .filter(|u| u.revision == campaign.revision)
                            .cloned(),
                    });
                } else if let Some(hold) = campaign.holding() {
                    note = Some(SidecarNote::Held {
                        held: hold.revision.clone(),
                        revision: campaign.revision.clone(),
                        reason: campaign.pause_reason.clone(),
                    });
                } else if campaign.state == CampaignState::Paused {
                    note = campaign
                        .pause_reason
                        .clone()
                        .map(|reason| SidecarNote::Paused { reason });
                } else if let Some(reverted) = &campaign.reverted {
                    note = Some(SidecarNote::Reverted {
                        from: reverted.from.clone(),
                        reason: reverted.reason.clone(),
                    });
                }
                row.expected_end = campaign.expected_end.clone();
            }
            if let Some(pin) = self
                .pins
                .get(&row.name)
                .filter(|p| row.revision.as_deref() == Some(p.revision.as_str()))
            {
                note = Some(SidecarNote::Pinned {
                    revision: pin.revision.clone(),
                    by: pin.by.clone(),
                    over: pin.over.clone(),
                });
            }
            if manual.contains(&row.name) {
                note = Some(SidecarNote::Manual);
            }
            if let Some(note) = note {
                notes.insert(row.name.clone(), note);
            }
        }
    }

    /// On each sidecar with pods to restart and no note yet: the book is over its budget, so
    /// nothing is restarted until it shrinks.
    fn note_overflow(&self, report: &mut DriftReport, notes: &mut SidecarNotes) {
        let Some(overflow) = self.overflow() else {
            return;
        };
        for row in &mut report.sidecars {
            if !notes.contains_key(&row.name) && row.pods.stale + row.pods.uninjected > 0 {
                notes.insert(row.name.clone(), SidecarNote::BookFull(overflow.clone()));
                // Nothing restarts until the book has room: the budget's end does not hold.
                row.expected_end = None;
            }
        }
    }

    /// On sidecars with pods to restart and nothing else to say: the engine's maintenance
    /// window is closed, and when it opens; else when their campaign ends at the earliest.
    fn note_window(&self, report: &mut DriftReport, now: Timestamp, notes: &mut SidecarNotes) {
        if let Some(status) = self.maintenance.as_ref().filter(|m| !m.open) {
            for row in &mut report.sidecars {
                if !notes.contains_key(&row.name) && row.pods.stale + row.pods.uninjected > 0 {
                    notes.insert(
                        row.name.clone(),
                        SidecarNote::OutsideWindow {
                            windows: status.windows.clone(),
                            opens: status.until.clone(),
                            now,
                        },
                    );
                    // Restarts wait for the window: the budget's end does not hold.
                    row.expected_end = None;
                }
            }
        }
        // The last note: a row with nothing more pressing to say says when its campaign ends.
        for row in &report.sidecars {
            if notes.contains_key(&row.name) {
                continue;
            }
            let ends = self
                .campaigns
                .get(&row.name)
                .filter(|c| row.expected_end.is_some() && c.expected_end == row.expected_end)
                .and_then(|c| {
                    c.expected_end.clone().map(|at| SidecarNote::Ends {
                        at,
                        pending: c.counts.pending,
                    })
                });
            if let Some(ends) = ends {
                notes.insert(row.name.clone(), ends);
            }
        }
    }
}
