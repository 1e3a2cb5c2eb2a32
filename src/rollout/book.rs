//! Campaigns: per sidecar, bringing every pod that requests it to one revision. The book is
//! persisted in the status ConfigMap, so a pause outlives the process.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::maintenance::MaintenanceWindows;
use crate::workload::WorkloadRef;
use k8s_openapi::jiff::Timestamp;

/// Where a sidecar's campaign stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CampaignState {
    /// The revision is newer than `--settle`: more edits may follow.
    Settling,
    Running,
    /// Failures reached `--max-failures`: nothing requesting the sidecar is restarted until a
    /// new revision arrives or `rollout --resume` clears it.
    Paused,
    Complete,
    /// `rollout: {policy: manual}`.
    Manual,
}

impl CampaignState {
    pub const ALL: [CampaignState; 5] = [
        CampaignState::Settling,
        CampaignState::Running,
        CampaignState::Paused,
        CampaignState::Complete,
        CampaignState::Manual,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CampaignState::Settling => "settling",
            CampaignState::Running => "running",
            CampaignState::Paused => "paused",
            CampaignState::Complete => "complete",
            CampaignState::Manual => "manual",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignCounts {
    /// Workloads still to restart (waiting or about to be patched).
    pub pending: u32,
    pub rolling: u32,
    pub succeeded: u32,
    pub failed: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub workload: WorkloadRef,
    pub reason: String,
    pub at: Time,
}

/// One sidecar's campaign: bringing every pod requesting it to `revision`. Persisted in the
/// status ConfigMap, so a pause outlives the process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Campaign {
    pub revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// When this revision came into force (the settle window runs from here).
    pub since: Time,
    pub state: CampaignState,
    #[serde(default)]
    pub counts: CampaignCounts,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<Failure>,
    /// Failures cleared by `rollout --resume`: only later ones count toward a pause.
    #[serde(default)]
    pub acknowledged_failures: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<String>,
    /// The last `rollout --resume` of this campaign: who asked and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumption>,
    /// This campaign brings pods back to the revision a failed campaign was leaving (the config
    /// was reverted): which revision failed, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted: Option<Reversion>,
    /// Revisions of this sidecar whose campaigns failed before this one (the last few): pods
    /// still carrying one are broken by it, so their workload's ill health is no reason to
    /// hold its restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_before: Vec<String>,
}

/// A campaign that undoes a failed one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reversion {
    /// The revision whose campaign failed.
    pub from: String,
    pub reason: String,
}

/// Who resumed a paused campaign, and when: written by `rollout --resume` into the status
/// ConfigMap, where the Lease holder adopts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumption {
    pub by: String,
    pub at: Time,
}

impl Campaign {
    pub(super) fn failed(&self, workload: &WorkloadRef) -> bool {
        self.failures.iter().any(|f| &f.workload == workload)
    }

    /// Its pause or a failure of one of its restarts.
    pub(super) fn has_failed(&self) -> bool {
        self.state == CampaignState::Paused || !self.failures.is_empty()
    }

    pub(super) fn unacknowledged_failures(&self) -> usize {
        self.failures
            .len()
            .saturating_sub(self.acknowledged_failures)
    }

    /// What `rollout --resume` does: failures so far no longer count, the campaign runs again.
    pub fn resume(&mut self) {
        self.acknowledged_failures = self.failures.len();
        self.pause_reason = None;
        if self.state == CampaignState::Paused {
            self.state = CampaignState::Running;
        }
    }
}

/// Every sidecar's campaign, by sidecar name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignBook {
    pub campaigns: BTreeMap<String, Campaign>,
    /// The engine's `--maintenance-window`s, for `drift` to show; none without any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceStatus>,
}

/// Whether the engine's maintenance windows are open, and when that changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceStatus {
    pub windows: String,
    pub open: bool,
    /// The next opening (closed) or closing (open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
}

impl MaintenanceStatus {
    pub fn of(windows: &MaintenanceWindows, now: Timestamp) -> Option<Self> {
        let state = windows.state(now);
        (!windows.is_empty()).then(|| Self {
            windows: windows.text(),
            open: state.is_open(),
            until: state.changes_at().map(Time),
        })
    }
}

/// A campaign `rollout --resume` took out of its pause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    pub sidecar: String,
    pub revision: String,
}

impl CampaignBook {
    /// `rollout --resume`: every paused campaign runs again (its failures so far no longer
    /// count), marked with who resumed it and when.
    pub fn resume_paused(&mut self, by: &str, at: Time) -> Vec<Resumed> {
        let mut resumed = Vec::new();
        for (sidecar, campaign) in &mut self.campaigns {
            if campaign.state != CampaignState::Paused {
                continue;
            }
            campaign.resume();
            campaign.resumed = Some(Resumption {
                by: by.to_owned(),
                at: at.clone(),
            });
            resumed.push(Resumed {
                sidecar: sidecar.clone(),
                revision: campaign.revision.clone(),
            });
        }
        resumed
    }
}

impl CampaignBook {
    /// Flags, on the drift report, the campaign of each sidecar's revision in force (a
    /// paused one with its reason) and the sidecars whose rollout policy is manual.
    pub fn flag(
        &self,
        report: &mut crate::drift::DriftReport,
        manual: &std::collections::BTreeSet<String>,
    ) {
        for row in &mut report.sidecars {
            let campaign = self
                .campaigns
                .get(&row.name)
                .filter(|c| row.revision.as_deref() == Some(c.revision.as_str()));
            if let Some(campaign) = campaign {
                row.campaign = Some(campaign.state.as_str().to_owned());
                if campaign.state == CampaignState::Paused {
                    row.note = campaign.pause_reason.clone();
                } else if let Some(reverted) = &campaign.reverted {
                    row.note = Some(format!(
                        "reverted from {} ({})",
                        reverted.from, reverted.reason
                    ));
                }
            }
            if manual.contains(&row.name) {
                row.note = Some(
                    "rollout policy manual: the engine leaves its restarts to `sidecar-injector rollout`"
                        .to_owned(),
                );
            }
        }
    }

    /// What the webhook tells the creator of a pod injected with a sidecar whose campaign is
    /// paused at the revision `set` injects: the pod gets a revision that failed.
    pub fn admission_warnings(
        &self,
        set: &crate::config::SidecarSet,
    ) -> BTreeMap<crate::name::SidecarName, std::sync::Arc<str>> {
        set.iter()
            .filter_map(|sidecar| {
                let name = &sidecar.config.name;
                let campaign = self.campaigns.get(&name.to_string())?;
                (campaign.state == CampaignState::Paused
                    && campaign.revision == sidecar.revision.as_str())
                .then(|| {
                    let text = format!(
                        "the rollout of sidecar {name} (revision {}) is paused after {} failed restart(s); this pod gets that revision: fix or revert the config, or `sidecar-injector rollout --resume`",
                        campaign.revision,
                        campaign.failures.len()
                    );
                    (name.clone(), std::sync::Arc::from(text))
                })
            })
            .collect()
    }

    /// Notes, on sidecars with pods to restart and nothing else to say, that the engine's
    /// maintenance window is closed and when it opens.
    pub fn flag_window(&self, report: &mut crate::drift::DriftReport, now: Timestamp) {
        let Some(status) = self.maintenance.as_ref().filter(|m| !m.open) else {
            return;
        };
        let opens = match &status.until {
            Some(at) => format!(
                "opens {}, at {}",
                super::instant::from_now(at.0, now),
                super::instant::to_the_second(at.0)
            ),
            None => "none opens within a week".to_owned(),
        };
        for row in &mut report.sidecars {
            if row.note.is_none() && row.pods.stale + row.pods.uninjected > 0 {
                row.note = Some(format!(
                    "outside maintenance window ({opens}; {})",
                    status.windows
                ));
            }
        }
    }
}
