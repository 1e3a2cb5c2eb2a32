//! Campaigns: per sidecar, bringing every pod that requests it to one revision. The book is
//! persisted in the status ConfigMap, so a pause outlives the process.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::content::{ContentError, sidecar_with_content};
use crate::config::SidecarSet;
use crate::maintenance::MaintenanceWindows;
use crate::name::SidecarName;
use crate::workload::WorkloadRef;
use k8s_openapi::jiff::Timestamp;

mod failed;
pub use super::wait::BookOverflow;
pub use failed::FailedWorkloads;

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
    /// `serve --promotion=gated`: the revision waits to be promoted (`rollout --promote`); new
    /// pods keep the last good revision meanwhile, as during a hold.
    Gated,
}

impl CampaignState {
    pub const ALL: [CampaignState; 6] = [
        CampaignState::Settling,
        CampaignState::Running,
        CampaignState::Paused,
        CampaignState::Complete,
        CampaignState::Manual,
        CampaignState::Gated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CampaignState::Settling => "settling",
            CampaignState::Running => "running",
            CampaignState::Paused => "paused",
            CampaignState::Complete => "complete",
            CampaignState::Manual => "manual",
            CampaignState::Gated => "gated",
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

/// The metric checks of one baking workload, as the book keeps them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BakeChecks {
    pub workload: WorkloadRef,
    pub checks: Vec<super::analysis::CheckStanding>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub workload: WorkloadRef,
    pub reason: FailureReason,
    pub at: Time,
}

/// Why a restart failed: the cause as this process found it, or its words as the book keeps
/// them. The book stores words (what every release reads): the shell words a found cause
/// (`render::word_book`) right after the pass that found it, before the book is written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FailureReason {
    Said(String),
    Found(FailureCause),
}

/// What failed a restart, with the values that say it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "kebab-case")]
pub enum FailureCause {
    /// Not rolled out within the rollout timeout: how far it got.
    NotRolledOut {
        timeout: std::time::Duration,
        progress: String,
    },
    /// A container problem found within the health bake after it rolled out.
    Bake {
        bake: std::time::Duration,
        problem: String,
    },
    /// Finished rolling, twice, with `uninjected` of `total` pods created without `sidecar`:
    /// the webhook was bypassed.
    Bypassed {
        uninjected: u32,
        total: u32,
        sidecar: String,
    },
    /// Finished rolling with `not_current` of `total` pods not running `sidecar` `revision`.
    NotCurrent {
        not_current: u32,
        total: u32,
        sidecar: String,
        revision: String,
    },
    /// An in-place upgrade of one of its pods failed.
    InPlace { reason: String },
    /// A metric check of the bake failed more often than it tolerates: the last reading.
    Metric {
        /// `SIDECAR/CHECK`.
        check: String,
        query: String,
        threshold: super::analysis::Threshold,
        reading: super::analysis::Reading,
        failures: u32,
        tolerated: u32,
    },
    /// A campaign that failed with no failure kept to say why.
    CampaignFailed,
}

impl From<&str> for FailureReason {
    fn from(words: &str) -> Self {
        FailureReason::Said(words.to_owned())
    }
}

impl FailureReason {
    /// The words a book read from the cluster keeps (`None` for a cause found here).
    pub fn stored(&self) -> Option<&str> {
        match self {
            FailureReason::Said(words) => Some(words),
            FailureReason::Found(_) => None,
        }
    }
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
    /// The latest failures with their reasons, [`FAILURE_DETAILS`] at most: the workloads of
    /// older ones are still in `failed_workloads`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<Failure>,
    /// Every workload that failed under this revision (none is restarted again under it): by
    /// name only, so that a revision failing across thousands of workloads keeps the status
    /// ConfigMap far below its 1 MiB.
    #[serde(default, skip_serializing_if = "FailedWorkloads::is_empty")]
    pub failed_workloads: FailedWorkloads,
    /// Failures cleared by `rollout --resume`: only later ones count toward a pause.
    #[serde(default)]
    pub acknowledged_failures: usize,
    /// Why it paused, in the words the shell wrote for the plan's [`crate::rollout::pause::Pause`]
    /// (with what resumes or rolls it back): what `status`, `drift` and the history show.
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
    /// Where the metric checks of its workloads baking now stand (their queries left out:
    /// the plan and the log have them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<BakeChecks>,
    /// Revisions of this sidecar whose campaigns failed before this one (the last few): pods
    /// still carrying one are broken by it, so their workload's ill health is no reason to
    /// hold its restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_before: Vec<String>,
    /// Paused under `--on-campaign-failure=hold`: new pods get this last good revision instead
    /// of the one that failed, until the campaign resumes, a new revision arrives or the hold
    /// is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Hold>,
    /// While it runs or settles: the earliest it can end by the restart budget, once its
    /// pending workloads have all started at `--max-restarts-per-minute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_end: Option<Time>,
    /// Since when it has been complete (a bake downstream clusters wait out counts from
    /// here); none while it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Time>,
}

/// An approval to start the campaign of `revision` (`rollout --promote`): written into the
/// status ConfigMap, where the Lease holder adopts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promotion {
    pub revision: String,
    pub by: String,
    pub at: Time,
}

/// The revision new pods get while a campaign is paused, with its content (every replica
/// serving the webhook injects it from here).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub revision: String,
    pub content: serde_json::Value,
    pub since: Time,
}

/// A revision served and rolled out in place of the config's (`rollout --to`), until the
/// config changes or `rollout --unpin`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub revision: String,
    pub content: serde_json::Value,
    /// The config's revision when it was pinned: a config change ends the pin.
    pub over: String,
    pub by: String,
    pub at: Time,
}

/// What new pods get ([`CampaignBook::new_pods`]).
#[derive(Clone, Debug)]
pub struct NewPods {
    /// The configs with each pin in force: what replicas publish as injected and the engine
    /// rolls out.
    pub pinned: SidecarSet,
    /// `pinned` with each hold in force: what the webhook injects.
    pub served: SidecarSet,
    /// What the webhook warns of, on each sidecar of `served` whose campaign is paused or
    /// waits for promotion (the rendering layer words it, and puts it on `served`).
    pub warnings: BTreeMap<SidecarName, HeldWarning>,
    /// Pins and holds whose remembered content no longer makes a sidecar under its revision:
    /// not served.
    pub errors: Vec<ContentError>,
}

/// Why a pod gets a revision other than its config's, or one that failed: what kubectl shows
/// the pod's creator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldWarning {
    /// New pods are held at `held` while `revision` waits for promotion.
    AwaitingPromotion { held: String, revision: String },
    /// New pods are held at the last good `held`: the rollout of `revision` failed.
    HeldAfterFailure { held: String, revision: String },
    /// New pods get `revision`, whose rollout paused after `failures` failed restarts.
    Paused { revision: String, failures: usize },
}

/// A campaign that undoes a failed one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reversion {
    /// The revision whose campaign failed.
    pub from: String,
    pub reason: FailureReason,
}

/// Who resumed a paused campaign, and when: written by `rollout --resume` into the status
/// ConfigMap, where the Lease holder adopts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumption {
    pub by: String,
    pub at: Time,
}

/// How many failures a campaign keeps the reasons of (the latest).
pub const FAILURE_DETAILS: usize = 20;

impl Campaign {
    pub(super) fn failed(&self, workload: &WorkloadRef) -> bool {
        self.failed_workloads.contains(workload)
    }

    /// Why `workload` failed under this revision, while the reason is still kept.
    pub(super) fn failure_reason(&self, workload: &WorkloadRef) -> Option<&FailureReason> {
        self.failures
            .iter()
            .rev()
            .find(|f| &f.workload == workload)
            .map(|f| &f.reason)
    }

    /// The revision new pods get instead of this one: its hold while it is paused or gated.
    pub fn holding(&self) -> Option<&Hold> {
        self.held
            .as_ref()
            .filter(|_| matches!(self.state, CampaignState::Paused | CampaignState::Gated))
    }

    /// What a workload requesting this campaign's sidecar waits for instead of a restart: its
    /// pause, or its promotion.
    pub(super) fn holds_restarts(&self, sidecar: &str) -> Option<super::wait::WaitReason> {
        let sidecar = sidecar.to_owned();
        match self.state {
            CampaignState::Paused => Some(super::wait::WaitReason::CampaignPaused { sidecar }),
            CampaignState::Gated => Some(super::wait::WaitReason::AwaitingPromotion { sidecar }),
            _ => None,
        }
    }

    /// Its pause or a failure of one of its restarts.
    pub(super) fn has_failed(&self) -> bool {
        self.state == CampaignState::Paused || !self.failed_workloads.is_empty()
    }

    /// A workload failed under this revision: counted once, its reason kept among the latest.
    pub fn record_failure(&mut self, failure: Failure) {
        if !self.failed_workloads.insert(failure.workload.clone()) {
            return;
        }
        self.failures.push(failure);
        self.keep_latest_details();
    }

    fn keep_latest_details(&mut self) {
        let excess = self.failures.len().saturating_sub(FAILURE_DETAILS);
        self.failures.drain(..excess);
    }

    /// Workloads that failed under this revision.
    pub fn failure_count(&self) -> usize {
        self.failed_workloads.len()
    }

    pub(super) fn unacknowledged_failures(&self) -> usize {
        self.failure_count()
            .saturating_sub(self.acknowledged_failures)
    }

    /// The failures since the last `rollout --resume` whose reasons are still kept, oldest
    /// first.
    pub fn unacknowledged_details(&self) -> &[Failure] {
        let kept = self.unacknowledged_failures().min(self.failures.len());
        &self.failures[self.failures.len() - kept..]
    }

    /// A campaign written before failed workloads were kept by name has them only in its
    /// failures.
    fn remember_failed_workloads(&mut self) {
        for failure in &self.failures {
            self.failed_workloads.insert(failure.workload.clone());
        }
        self.keep_latest_details();
    }

    /// What `rollout --resume` does: failures so far no longer count, the campaign runs again.
    pub fn resume(&mut self) {
        self.acknowledged_failures = self.failure_count();
        self.pause_reason = None;
        self.held = None;
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
    /// Revisions pinned by `rollout --to`, by sidecar.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pins: BTreeMap<String, Pin>,
    /// Revisions approved to roll out under `serve --promotion=gated`, by sidecar.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub promotions: BTreeMap<String, Promotion>,
    /// What each revision waiting for promotion waits for upstream (`serve --promote-after`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream: BTreeMap<String, UpstreamWait>,
}

/// A revision waiting for promotion under `serve --promote-after`: the upstream clusters it
/// waits for and, of those not done, where each stands (as the gate last read them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamWait {
    pub revision: String,
    pub after: Vec<String>,
    pub waiting: String,
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

/// The most the book may take in the status ConfigMap before no restart starts. A ConfigMap
/// holds at most 1 MiB of data: the rest is room for the failures of the restarts already
/// rolling when the book reaches this, and for the replicas' `injectors` item.
pub const BOOK_BUDGET_BYTES: usize = 896 * 1024;

/// Counts what a serializer writes, so the book's size is known without building its text.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0 += data.len();
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn encoded_len(value: &impl Serialize) -> usize {
    let mut count = ByteCount(0);
    serde_json::to_writer_pretty(&mut count, value).expect("the book serializes");
    count.0
}

impl CampaignBook {
    /// Where the metric checks of `workload`'s bake stand, as the engine last wrote them.
    pub fn bake_checks(&self, workload: &WorkloadRef) -> Vec<super::analysis::CheckStanding> {
        self.campaigns
            .values()
            .flat_map(|c| &c.checks)
            .filter(|bake| &bake.workload == workload)
            .flat_map(|bake| bake.checks.iter().cloned())
            .collect()
    }
}

impl CampaignBook {
    /// The book's text in the status ConfigMap.
    pub fn encode(&self) -> String {
        serde_json::to_string_pretty(self).expect("the book serializes")
    }

    /// When the book's text is over [`BOOK_BUDGET_BYTES`]: by how much, and whose campaign
    /// takes the most of it.
    pub fn overflow(&self) -> Option<BookOverflow> {
        let bytes = encoded_len(self);
        if bytes <= BOOK_BUDGET_BYTES {
            return None;
        }
        let mut by_sidecar: BTreeMap<&str, usize> = BTreeMap::new();
        for (sidecar, campaign) in &self.campaigns {
            *by_sidecar.entry(sidecar).or_default() += encoded_len(campaign);
        }
        for (sidecar, pin) in &self.pins {
            *by_sidecar.entry(sidecar).or_default() += encoded_len(pin);
        }
        let sidecar = by_sidecar
            .into_iter()
            .max_by_key(|(_, bytes)| *bytes)
            .map_or_else(String::new, |(sidecar, _)| sidecar.to_owned());
        let campaign = self.campaigns.get(&sidecar);
        let held = campaign
            .and_then(|c| c.held.as_ref())
            .map_or(0, |hold| encoded_len(&hold.content));
        let pinned = self.pins.get(&sidecar).map_or(0, encoded_len);
        Some(BookOverflow {
            bytes,
            budget: BOOK_BUDGET_BYTES,
            failed_workloads: campaign.map_or(0, |c| c.failed_workloads.len()),
            held_and_pinned_bytes: held + pinned,
            sidecar,
        })
    }

    /// The book as the status ConfigMap holds it, in any form an earlier version wrote.
    pub fn decode(text: &str) -> Result<Self, serde_json::Error> {
        let mut book: Self = serde_json::from_str(text)?;
        for campaign in book.campaigns.values_mut() {
            campaign.remember_failed_workloads();
        }
        Ok(book)
    }

    /// `rollout --resume`: every paused campaign runs again (its failures so far no longer
    /// count), marked with who resumed it and when.
    /// Approves `revision` of `sidecar` (`by`, at `at`); false when it already was.
    pub fn promote(&mut self, sidecar: &str, revision: &str, by: &str, at: Time) -> bool {
        if self.promoted(sidecar, revision) {
            return false;
        }
        self.promotions.insert(
            sidecar.to_owned(),
            Promotion {
                revision: revision.to_owned(),
                by: by.to_owned(),
                at,
            },
        );
        true
    }

    /// Whether the campaign of `sidecar` waits for promotion of `revision`.
    pub fn waits_for_promotion(&self, sidecar: &str, revision: &str) -> bool {
        self.campaigns
            .get(sidecar)
            .is_some_and(|c| c.state == CampaignState::Gated && c.revision == revision)
    }

    /// Whether `revision` of `sidecar` is approved.
    pub fn promoted(&self, sidecar: &str, revision: &str) -> bool {
        self.promotions
            .get(sidecar)
            .is_some_and(|p| p.revision == revision)
    }

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
    /// What new pods get, the one rule every part follows (the webhook, the policy writer,
    /// the engine and the one-shot commands): the configs, then each pin of `rollout --to`,
    /// then each hold of a paused or gated campaign.
    pub fn new_pods(&self, config: &SidecarSet) -> NewPods {
        let (pinned, mut errors) = self.pinned(config);
        let (served, hold_errors) = self.served(&pinned);
        errors.extend(hold_errors);
        let warnings = self.admission_warnings(&served);
        NewPods {
            pinned,
            served,
            warnings,
            errors,
        }
    }

    /// `config` with each pin in force (the config still at the revision it was pinned over)
    /// serving its revision: what the engine rolls out and the replicas publish.
    pub(crate) fn pinned(&self, config: &SidecarSet) -> (SidecarSet, Vec<ContentError>) {
        let mut set = config.clone();
        let mut errors = Vec::new();
        for (sidecar, pin) in &self.pins {
            let Some(own) = config.named(sidecar) else {
                continue;
            };
            if own.revision.as_str() != pin.over {
                continue;
            }
            match sidecar_with_content(own, &pin.revision, &pin.content) {
                Ok(pinned) => set.insert(pinned),
                Err(err) => errors.push(err),
            }
        }
        (set, errors)
    }

    /// Pins whose config changed since: a config change ends a pin.
    pub fn drop_stale_pins(&mut self, config: &SidecarSet) -> Vec<(String, Pin)> {
        let stale: Vec<String> = self
            .pins
            .iter()
            .filter(|(sidecar, pin)| {
                config
                    .named(sidecar)
                    .is_none_or(|s| s.revision.as_str() != pin.over)
            })
            .map(|(sidecar, _)| sidecar.clone())
            .collect();
        stale
            .into_iter()
            .filter_map(|sidecar| self.pins.remove_entry(&sidecar))
            .collect()
    }

    /// What the webhook injects: `pinned` (from [`CampaignBook::pinned`]) with each hold in
    /// force (its campaign paused at the revision `pinned` serves) serving the held revision,
    /// and the warnings kubectl shows the creator of such a pod.
    pub(crate) fn served(&self, pinned: &SidecarSet) -> (SidecarSet, Vec<ContentError>) {
        let mut set = pinned.clone();
        let mut errors = Vec::new();
        for sidecar in pinned.iter() {
            let name = sidecar.config.name.to_string();
            let Some(campaign) = self.campaigns.get(&name) else {
                continue;
            };
            let Some(hold) = campaign
                .holding()
                .filter(|_| campaign.revision == sidecar.revision.as_str())
            else {
                continue;
            };
            match sidecar_with_content(sidecar, &hold.revision, &hold.content) {
                Ok(held) => set.insert(held),
                Err(err) => errors.push(err),
            }
        }
        (set, errors)
    }

    /// What the webhook tells the creator of a pod injected with a sidecar whose campaign
    /// waits for promotion or is paused: the pod gets a revision that failed, or the last good
    /// one it is held at. The rendering layer words it.
    pub fn admission_warnings(&self, set: &SidecarSet) -> BTreeMap<SidecarName, HeldWarning> {
        set.iter()
            .filter_map(|sidecar| {
                let name = &sidecar.config.name;
                let campaign = self.campaigns.get(&name.to_string())?;
                let revision = campaign.revision.clone();
                if campaign.state == CampaignState::Gated {
                    let hold = campaign
                        .holding()
                        .filter(|h| h.revision == sidecar.revision.as_str())?;
                    let held = hold.revision.clone();
                    return Some((
                        name.clone(),
                        HeldWarning::AwaitingPromotion { held, revision },
                    ));
                }
                if campaign.state != CampaignState::Paused {
                    return None;
                }
                if let Some(hold) = campaign
                    .held
                    .as_ref()
                    .filter(|h| h.revision == sidecar.revision.as_str())
                {
                    let held = hold.revision.clone();
                    return Some((
                        name.clone(),
                        HeldWarning::HeldAfterFailure { held, revision },
                    ));
                }
                (campaign.revision == sidecar.revision.as_str()).then(|| {
                    let failures = campaign.failure_count();
                    (name.clone(), HeldWarning::Paused { revision, failures })
                })
            })
            .collect()
    }
}
