//! The drift index: a compact, synchronous (no I/O) view of every pod that requests a sidecar,
//! the revision it carries and the workload that owns it, classified against the config
//! snapshot by the six drift states, first that applies. Watches feed it (apply / delete / reset after a relist);
//! the drift report, the gauge and the rollout planner read it.

mod classify;
mod entries;
mod foreign_rows;
mod gauge;
mod index;
mod interner;
mod reach;

pub use entries::WorkloadEntry;
pub use entries::{Downtime, PodToReplace, rollout_disabled};
pub use foreign_rows::{ForeignWorkload, foreign_pod_state, foreign_pods_to_replace, foreign_rows};
pub use gauge::DriftGauge;
pub use index::DriftIndex;
pub use reach::{NotSent, WebhookReach};

use std::collections::BTreeSet;

// A fast hasher with a per-process random seed: classification hashes a few strings per pod,
// and SipHash made up most of its time.

use serde::Serialize;

use crate::workload::{OwnerKind, PodWorkload};

/// The six pod states, in order of precedence: a pod-sidecar pair takes the first that
/// applies; and `denied`, for a workload that has no pod because the webhook denies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DriftState {
    Excluded,
    Orphaned,
    Uninjected,
    Unknown,
    Stale,
    Current,
    /// A workload whose template requests a sidecar no config defines (or a request that
    /// does not parse): the webhook denies its pods, so it has none to classify.
    Denied,
}

impl std::str::FromStr for DriftState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DriftState::ALL
            .into_iter()
            .find(|s| s.as_str() == text.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<&str> = DriftState::ALL.iter().map(|s| s.as_str()).collect();
                format!("{text:?} is not a drift state ({})", names.join(", "))
            })
    }
}

impl DriftState {
    /// The states a pod can be in: the columns of the report's counts and the gauge.
    pub const POD_STATES: [DriftState; 6] = [
        DriftState::Excluded,
        DriftState::Orphaned,
        DriftState::Uninjected,
        DriftState::Unknown,
        DriftState::Stale,
        DriftState::Current,
    ];

    pub const ALL: [DriftState; 7] = [
        DriftState::Excluded,
        DriftState::Orphaned,
        DriftState::Uninjected,
        DriftState::Unknown,
        DriftState::Stale,
        DriftState::Current,
        DriftState::Denied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DriftState::Excluded => "excluded",
            DriftState::Orphaned => "orphaned",
            DriftState::Uninjected => "uninjected",
            DriftState::Unknown => "unknown",
            DriftState::Stale => "stale",
            DriftState::Current => "current",
            DriftState::Denied => "denied",
        }
    }

    /// A workload is as bad as its worst pod; the states that call for a restart come first,
    /// so one stale pod among unknown ones still makes the workload stale.
    /// Whether the rollout engine restarts a workload in this state (unknown only when asked:
    /// a migration is a deliberate act).
    pub fn needs_restart(self, restart_unknown: bool) -> bool {
        match self {
            DriftState::Uninjected | DriftState::Stale => true,
            DriftState::Unknown => restart_unknown,
            _ => false,
        }
    }

    /// How bad a state is: a workload takes its worst pod's state, a pod its worst sidecar's.
    pub fn severity(self) -> u8 {
        match self {
            DriftState::Denied => 6,
            DriftState::Uninjected => 5,
            DriftState::Stale => 4,
            DriftState::Unknown => 3,
            DriftState::Orphaned => 2,
            DriftState::Excluded => 1,
            DriftState::Current => 0,
        }
    }
}

/// Pods per state; every count is always present in the JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    pub excluded: u32,
    pub orphaned: u32,
    pub uninjected: u32,
    pub unknown: u32,
    pub stale: u32,
    pub current: u32,
    /// Always 0: a denied pod does not exist. Not in the JSON.
    #[serde(skip)]
    pub denied: u32,
}

impl StateCounts {
    pub(crate) fn add_many(&mut self, state: DriftState, pods: u32) {
        *self.get_mut(state) += pods;
    }

    fn remove_many(&mut self, state: DriftState, pods: u32) {
        let count = self.get_mut(state);
        *count = count.saturating_sub(pods);
    }

    fn get_mut(&mut self, state: DriftState) -> &mut u32 {
        match state {
            DriftState::Excluded => &mut self.excluded,
            DriftState::Orphaned => &mut self.orphaned,
            DriftState::Uninjected => &mut self.uninjected,
            DriftState::Unknown => &mut self.unknown,
            DriftState::Stale => &mut self.stale,
            DriftState::Current => &mut self.current,
            DriftState::Denied => &mut self.denied,
        }
    }

    pub fn get(&self, state: DriftState) -> u32 {
        let mut copy = *self;
        *copy.get_mut(state)
    }

    pub fn total(&self) -> u32 {
        DriftState::ALL.iter().map(|s| self.get(*s)).sum()
    }
}

/// The one staleness rule: the state of one requested sidecar on a pod that is not excluded,
/// from whether the pod was injected, the revision it carries for the sidecar, and the
/// sidecar's revision in force (`None`: no config defines it).
pub fn sidecar_state(injected: bool, carried: Option<&str>, wanted: Option<&str>) -> DriftState {
    match (wanted, carried) {
        (None, _) => DriftState::Orphaned,
        (Some(_), _) if !injected => DriftState::Uninjected,
        (Some(_), None) => DriftState::Unknown,
        (Some(want), Some(have)) if have != want => DriftState::Stale,
        (Some(_), Some(_)) => DriftState::Current,
    }
}

/// Namespace filters and switches applied at classification, so every consumer sees the same.
#[derive(Clone, Debug, Default)]
pub struct DriftPolicy {
    /// When non-empty, only these namespaces.
    pub include_namespaces: BTreeSet<String>,
    pub exclude_namespaces: BTreeSet<String>,
    pub ignore_namespaces: BTreeSet<String>,
    pub evict_bare_pods: bool,
    pub restart_unknown: bool,
}

impl DriftPolicy {
    /// Why pods of `namespace` are left out, if they are.
    pub fn namespace_exclusion(&self, namespace: &str) -> Option<String> {
        namespace_exclusion(namespace, self)
    }
}

/// Why the engine leaves out the pods of `owner`; `None` for the pods of a workload it
/// restarts (unless the workload opted out: [`Exclusion::RolloutDisabled`]).
pub fn owner_exclusion(owner: &PodWorkload<'_>) -> Option<Exclusion> {
    match owner {
        PodWorkload::Workload(..) => None,
        PodWorkload::ReplicaSetWithoutDeployment(_) => Some(Exclusion::ReplicaSetWithoutDeployment),
        PodWorkload::ReplicaSetNotKnown(_) => Some(Exclusion::ReplicaSetNotKnown),
        PodWorkload::Job(_) => Some(Exclusion::JobPod),
        PodWorkload::Other { kind, .. } => Some(Exclusion::OwnedBy((*kind).to_owned())),
        PodWorkload::BarePod => Some(Exclusion::BarePod),
    }
}

/// Why the engine leaves a workload's pods out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusion {
    /// Their namespace or their labels, in the words of the namespace filters or of what the
    /// webhook selects.
    Namespace(String),
    ReplicaSetWithoutDeployment,
    /// Their ReplicaSet is not in the index yet.
    ReplicaSetNotKnown,
    /// A Job's pods run to completion.
    JobPod,
    /// No controller recreates them.
    BarePod,
    /// Owned by a controller of this kind, which the engine does not restart.
    OwnedBy(String),
    /// The workload is annotated `NS/rollout: disabled`.
    RolloutDisabled,
}

/// Why a workload row of the report is in its state, as data: the shell words it (with the
/// row's state, pod counts and sidecar).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RowReason {
    /// Its pods' counts in its state say it.
    #[default]
    Counts,
    Excluded(Exclusion),
    /// Its sidecar's config no longer exists.
    Orphaned,
    /// Its stale pods carry `from`; the revision in force is `to`.
    Stale {
        from: String,
        to: String,
    },
    /// No pods: its template's request does not parse (`error`), so the webhook denies them.
    RequestUnparsed {
        request: String,
        error: String,
    },
    /// No pods: its template requests a sidecar no config defines, so the webhook denies them.
    NoConfig,
    /// Chosen by container (`rollout --sidecar-container-name`): of its `total` pods started
    /// before `before`, the stale ones still run `container`.
    StartedBefore {
        container: String,
        before: String,
        total: usize,
    },
    /// A sidecar another injector adds (`--foreign-sidecar`): one of its pods (whose foreign
    /// part digests to `from`) differs from what a new pod gets (`to`) by `changes`.
    Foreign {
        from: String,
        to: String,
        changes: Vec<crate::foreign::ForeignChange>,
    },
    /// A sidecar another injector adds, whose workload's dry run failed with `error`: what a
    /// new pod gets is not known.
    ForeignNotAsked {
        error: String,
    },
}

fn namespace_exclusion(namespace: &str, policy: &DriftPolicy) -> Option<String> {
    if policy.ignore_namespaces.contains(namespace) {
        Some(format!("namespace {namespace} is ignored"))
    } else if !policy.include_namespaces.is_empty()
        && !policy.include_namespaces.contains(namespace)
    {
        Some(format!("namespace {namespace} is not included"))
    } else if policy.exclude_namespaces.contains(namespace) {
        Some(format!("namespace {namespace} is excluded"))
    } else {
        None
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    pub sidecars: Vec<SidecarDrift>,
    pub workloads: Vec<WorkloadDrift>,
}

impl DriftReport {
    /// Only these sidecars (by normalised name) and, for workloads, these states; an empty
    /// list keeps everything.
    pub fn filtered(mut self, sidecars: &[String], states: &[DriftState]) -> Self {
        let wanted: Vec<String> = sidecars.iter().map(|s| canonical_sidecar(s)).collect();
        let keep = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
        self.sidecars.retain(|s| keep(&s.name));
        self.workloads
            .retain(|w| keep(&w.sidecar) && (states.is_empty() || states.contains(&w.state)));
        self
    }

    /// The `--sidecar` values that name no sidecar of the report (none configured, none
    /// requested by a listed pod): a misspelt name would otherwise give an empty report that
    /// reads as "nothing to do".
    pub fn unmatched_sidecars<'a>(&self, sidecars: &'a [String]) -> Vec<&'a str> {
        sidecars
            .iter()
            .filter(|wanted| {
                let wanted = canonical_sidecar(wanted);
                !self.sidecars.iter().any(|s| s.name == wanted)
            })
            .map(String::as_str)
            .collect()
    }

    /// Whether a workload in the report runs a stale sidecar or was never injected.
    pub fn needs_restart(&self) -> bool {
        self.workloads
            .iter()
            .any(|w| matches!(w.state, DriftState::Stale | DriftState::Uninjected))
    }
}

/// A sidecar name as the report spells it (`Logger` is `logger:latest`); text that does not
/// parse as a name is kept as it is, and matches nothing.
fn canonical_sidecar(text: &str) -> String {
    crate::name::SidecarName::parse(text).map_or_else(|_| text.to_owned(), |n| n.to_string())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SidecarDrift {
    pub name: String,
    /// `null` for a requested sidecar no config defines.
    pub revision: Option<String>,
    pub pods: StateCounts,
    /// Of its injected pods, those that run it as a native sidecar.
    pub native: u32,
    /// The state of the rollout engine's campaign for this revision (`paused`, `running`...),
    /// when the running injector keeps one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub campaign: Option<String>,
    /// While that campaign runs or settles: the earliest it can end by the restart budget.
    #[serde(rename = "expectedEnd", skip_serializing_if = "Option::is_none")]
    pub expected_end: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// What an operator should know: why the campaign is paused, or that the sidecar's rollout
    /// policy is manual.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A container another injector adds (`--foreign-sidecar`), named as the container is:
    /// what a new pod gets is read per workload from a dry-run create, so it has no one
    /// revision.
    #[serde(skip_serializing_if = "is_false")]
    pub foreign: bool,
}

fn is_false(value: &bool) -> bool {
    !value
}

/// How the injected pods of a workload run a sidecar: as a regular container, as a native
/// sidecar (an init container that keeps running), or some one way and some the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SidecarForm {
    Classic,
    Native,
    Mixed,
}

impl SidecarForm {
    pub fn as_str(self) -> &'static str {
        match self {
            SidecarForm::Classic => "classic",
            SidecarForm::Native => "native",
            SidecarForm::Mixed => "mixed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadDrift {
    pub kind: OwnerKind,
    pub namespace: String,
    pub name: String,
    pub sidecar: String,
    pub state: DriftState,
    /// `why` in words: written by the shell (`render::word_drift`).
    pub reason: String,
    #[serde(skip)]
    pub why: RowReason,
    pub pods: StateCounts,
    /// How its injected pods run the sidecar; absent when none was injected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<SidecarForm>,
    /// Of its injected pods, those that run the sidecar natively.
    pub native: u32,
    /// Whether the rollout engine should restart it (stale or uninjected, or unknown with
    /// `--restart-unknown`).
    #[serde(skip)]
    pub needs_restart: bool,
}

impl WorkloadDrift {
    /// For a stale workload, the revision its stale pods carry.
    pub fn from_revision(&self) -> Option<&str> {
        match &self.why {
            RowReason::Stale { from, .. } => Some(from),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
