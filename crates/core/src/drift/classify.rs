//! Classification: every indexed pod's state per requested sidecar, counted per sidecar and
//! per workload into the drift report. Distinct strings are parsed once and keyed by pointer.

// A fast hasher with a per-process random seed: classification hashes a few strings per pod,
// and SipHash made up most of its time.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::hash_map::Entry;
use std::sync::Arc;

use crate::config::{RevisionsInForce, SidecarSet};
use crate::name::SidecarName;
use crate::workload::{OwnerKind, PodWorkload, ReplicaSetOwner, WorkloadKind, resolve_pod_owner};

use super::entries::{PodEntry, parse_revisions};
use super::index::DriftIndex;
use super::interner::{Labels, intern};
use super::{
    DriftPolicy, DriftReport, DriftState, Exclusion, RowReason, SidecarDrift, SidecarForm,
    StateCounts, WorkloadDrift, sidecar_state,
};

/// A pod's workload (kind, name) and, when its owner excludes it, why.
type Resolution<'a> = (RowKind<'a>, &'a str, Option<Detail<'a>>);

/// The kind of a report row while the report is built: borrowed, and cheap to key by.
#[derive(Clone, Copy, Debug)]
enum RowKind<'a> {
    Workload(WorkloadKind),
    ReplicaSet,
    Job,
    Other(&'a str),
}

impl RowKind<'_> {
    /// Tells kinds apart in a hash key without comparing strings.
    fn key(self) -> usize {
        match self {
            RowKind::Workload(kind) => kind as usize,
            RowKind::ReplicaSet => 16,
            RowKind::Job => 17,
            RowKind::Other(kind) => kind.as_ptr() as usize,
        }
    }

    fn owner_kind(self) -> OwnerKind {
        match self {
            RowKind::Workload(kind) => OwnerKind::Workload(kind),
            RowKind::ReplicaSet => OwnerKind::ReplicaSet,
            RowKind::Job => OwnerKind::Job,
            RowKind::Other(kind) => OwnerKind::Other(kind.to_owned()),
        }
    }
}

impl DriftIndex {
    /// Classifies every indexed pod against `sidecars`. Parsing and formatting happen once per
    /// distinct request, revision stamp and namespace, not once per pod.
    pub fn classify(&self, sidecars: &SidecarSet, policy: &DriftPolicy) -> DriftReport {
        self.classify_revisions(&sidecars.revisions_in_force(), policy)
    }

    /// As [`DriftIndex::classify`], against current revisions by sidecar name (as a running
    /// injector publishes them in its status ConfigMap).
    pub fn classify_revisions(
        &self,
        wanted: &RevisionsInForce,
        policy: &DriftPolicy,
    ) -> DriftReport {
        let groups = self.pod_groups();
        let labels_matter = self.labels_matter();
        let distinct = Distinct::of(&groups, labels_matter, |namespace, labels| {
            self.pod_exclusion(namespace, labels, policy)
        });
        let current: HashMap<String, &str> = wanted
            .iter()
            .map(|(name, revision)| (name.to_owned(), revision))
            .collect();
        let tally = self.tally(&groups, &distinct, &current, policy, labels_matter);
        let mut workloads = workload_rows(tally.by_workload, policy);
        let denied = self.denied_rows(&current, policy, &workloads);
        if !denied.is_empty() {
            workloads.extend(denied);
            workloads.sort_unstable_by(|a, b| {
                (&a.name, &a.namespace, &a.kind, &a.sidecar).cmp(&(
                    &b.name,
                    &b.namespace,
                    &b.kind,
                    &b.sidecar,
                ))
            });
        }
        DriftReport {
            sidecars: sidecar_rows(&current, tally.by_sidecar),
            workloads,
        }
    }

    /// Workloads with no pod in the index whose template requests a sidecar no config defines
    /// (or a request that does not parse): the webhook denies their pods, so only the template
    /// says they exist. Other reasons for a denial (a clash with the pod's own containers)
    /// need the pod spec, which the index never keeps.
    fn denied_rows(
        &self,
        current: &HashMap<String, &str>,
        policy: &DriftPolicy,
        listed: &[WorkloadDrift],
    ) -> Vec<WorkloadDrift> {
        let with_pods: HashSet<(WorkloadKind, &str, &str)> = listed
            .iter()
            .filter_map(|w| Some((w.kind.workload()?, w.namespace.as_str(), w.name.as_str())))
            .collect();
        let mut rows = Vec::new();
        for kind in [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
        ] {
            for (namespace, names) in &self.workloads[kind as usize] {
                if self.namespace_exclusion(namespace, policy).is_some() {
                    continue;
                }
                for (name, entry) in names {
                    let Some(request) = entry.template_request.as_deref() else {
                        continue;
                    };
                    if entry.replicas == Some(0) || with_pods.contains(&(kind, namespace, name)) {
                        continue;
                    }
                    let row = |sidecar: String, why: RowReason| WorkloadDrift {
                        kind: OwnerKind::Workload(kind),
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                        sidecar,
                        state: DriftState::Denied,
                        reason: String::new(),
                        why,
                        pods: StateCounts::default(),
                        form: None,
                        native: 0,
                        needs_restart: false,
                    };
                    match SidecarName::parse_list(request) {
                        Err(err) => rows.push(row(
                            request.to_owned(),
                            RowReason::RequestUnparsed {
                                request: request.to_owned(),
                                error: err.to_string(),
                            },
                        )),
                        Ok(list) => rows.extend(
                            list.iter()
                                .map(ToString::to_string)
                                .filter(|sidecar| !current.contains_key(sidecar))
                                .map(|sidecar| row(sidecar, RowReason::NoConfig)),
                        ),
                    }
                }
            }
        }
        rows
    }

    /// Every pod's state per requested sidecar (one group of pods classified alike at a time),
    /// counted per sidecar and per workload.
    fn tally<'d, 's: 'd>(
        &'s self,
        groups: &[PodGroup<'s>],
        distinct: &'d Distinct<'s>,
        current: &HashMap<String, &'d str>,
        policy: &DriftPolicy,
        labels_matter: bool,
    ) -> Tally<'d> {
        let mut tally = Tally::default();
        // Pods of one workload share their interned owner name: resolve each owner once.
        let mut owners: HashMap<(usize, usize, usize), Resolution<'_>> = HashMap::new();
        for &PodGroup {
            namespace,
            name,
            pod,
            pods,
        } in groups
        {
            let (kind, workload, owner_exclusion) = match pod.owner.name() {
                Some(owner) => owners
                    .entry((ptr(namespace), pod.owner.kind_tag(), ptr(owner)))
                    .or_insert_with(|| self.resolve(namespace, name, pod, policy))
                    .clone(),
                None => self.resolve(namespace, name, pod, policy),
            };
            let exclusion: Option<Detail<'_>> = distinct.exclusions
                [&exclusion_key(namespace, pod, labels_matter)]
                .as_deref()
                .map(Detail::Namespace)
                .or(owner_exclusion);
            let carried = pod.revision.as_ref().map(|r| &distinct.revisions[&ptr(r)]);
            let native = pod.native.as_ref().map(|n| &distinct.natives[&ptr(n)]);
            for sidecar in &distinct.requests[&ptr(&pod.request)] {
                let sidecar: &'d str = sidecar;
                let form = Form {
                    injected: if pod.injected { pods } else { 0 },
                    native: if pod.injected
                        && native.is_some_and(|n| n.iter().any(|n| n == sidecar))
                    {
                        pods
                    } else {
                        0
                    },
                };
                let (state, detail) = match &exclusion {
                    Some(reason) => (DriftState::Excluded, reason.clone()),
                    None => {
                        let have = carried.and_then(|items| {
                            items.iter().find(|(n, _)| n == sidecar).map(|(_, r)| *r)
                        });
                        let want = current.get(sidecar).copied();
                        let state = sidecar_state(pod.injected, have, want);
                        (state, Detail::of(state, have, want))
                    }
                };
                let row = tally
                    .by_sidecar
                    .entry(sidecar.as_ptr() as usize)
                    .or_insert((sidecar, StateCounts::default(), 0));
                row.1.add_many(state, pods);
                row.2 += form.native;
                let id = (
                    ptr(namespace),
                    kind.key(),
                    workload.as_ptr() as usize,
                    sidecar.as_ptr() as usize,
                );
                tally
                    .by_workload
                    .entry(id)
                    .or_insert_with(|| WorkloadTally {
                        names: (workload, namespace, kind, sidecar),
                        pods: StateCounts::default(),
                        form: Form::default(),
                        worst: None,
                        detail: Detail::None,
                    })
                    .add(state, detail, pods, form);
            }
        }
        tally
    }

    /// The indexed pods, those classified alike counted together: pods in one namespace with
    /// the same owner, request, revision stamp and injection (and labels, when a webhook
    /// selects pods by label) get the same state and detail. A workload's pods mostly share
    /// them all, so the classification that follows runs once per workload and revision
    /// instead of once per pod. Groups come in the order of their first pod, so a workload
    /// still takes the detail of the first of its pods in its worst state.
    fn pod_groups(&self) -> Vec<PodGroup<'_>> {
        let mut groups: Vec<PodGroup<'_>> = Vec::new();
        let mut slots: HashMap<AlikeKey, usize> = HashMap::new();
        let labels_matter = self.labels_matter();
        for ((namespace, name), pod) in &self.pods {
            match slots.entry(classified_alike(namespace, name, pod, labels_matter)) {
                Entry::Occupied(slot) => groups[*slot.get()].pods += 1,
                Entry::Vacant(slot) => {
                    slot.insert(groups.len());
                    groups.push(PodGroup {
                        namespace,
                        name,
                        pod,
                        pods: 1,
                    });
                }
            }
        }
        groups
    }

    /// The workload a pod belongs to (kind, name) and, when its owner excludes it, why.
    /// Whether a pod's owner leaves it out (a Job's, a bare pod, a workload that opted out...).
    pub(super) fn owner_excludes(
        &self,
        namespace: &Arc<str>,
        pod_name: &str,
        pod: &PodEntry,
        policy: &DriftPolicy,
    ) -> bool {
        self.resolve(namespace, pod_name, pod, policy).2.is_some()
    }

    fn resolve<'s>(
        &'s self,
        namespace: &Arc<str>,
        pod_name: &'s str,
        pod: &'s PodEntry,
        policy: &DriftPolicy,
    ) -> Resolution<'s> {
        let replicaset_owner = |rs: &'s str| match self
            .replicasets
            .get(namespace.as_ref())
            .and_then(|names| names.get(rs))
        {
            Some(Some(deployment)) => ReplicaSetOwner::Deployment(deployment),
            Some(None) => ReplicaSetOwner::NoDeployment,
            None => ReplicaSetOwner::NotKnown,
        };
        let owner = resolve_pod_owner(
            pod.owner.controller(),
            pod_name,
            policy.evict_bare_pods,
            replicaset_owner,
        );
        let (kind, name) = match owner {
            PodWorkload::Workload(WorkloadKind::Pod, name) => {
                return (RowKind::Workload(WorkloadKind::Pod), name, None);
            }
            PodWorkload::Workload(kind, name) => (kind, name),
            PodWorkload::ReplicaSetWithoutDeployment(rs) => {
                let why = Detail::Owner(Exclusion::ReplicaSetWithoutDeployment);
                return (RowKind::ReplicaSet, rs, Some(why));
            }
            PodWorkload::ReplicaSetNotKnown(rs) => {
                let why = Detail::Owner(Exclusion::ReplicaSetNotKnown);
                return (RowKind::ReplicaSet, rs, Some(why));
            }
            PodWorkload::Job(name) => {
                let why = Detail::Owner(Exclusion::JobPod);
                return (RowKind::Job, name, Some(why));
            }
            PodWorkload::Other { kind, name } => {
                return (RowKind::Other(kind), name, Some(Detail::OwnedBy(kind)));
            }
            PodWorkload::BarePod => {
                let why = Detail::Owner(Exclusion::BarePod);
                return (RowKind::Workload(WorkloadKind::Pod), pod_name, Some(why));
            }
        };
        let disabled = self.workloads[kind as usize]
            .get(namespace.as_ref())
            .and_then(|names| names.get(name))
            .is_some_and(|w| w.rollout_disabled);
        (
            RowKind::Workload(kind),
            name,
            disabled.then_some(Detail::Owner(Exclusion::RolloutDisabled)),
        )
    }
}

/// What a pod's classification depends on, as pointers of the index's interned strings: pods
/// with the same key get the same state and detail for every sidecar they request. Only
/// meaningful while the index is borrowed (a pointer is reused once its string is dropped).
/// Labels count only when they matter: a StatefulSet's pods each have their own.
pub(super) fn classified_alike(
    namespace: &Arc<str>,
    name: &str,
    pod: &PodEntry,
    labels_matter: bool,
) -> AlikeKey {
    // A bare pod is its own owner (`resolve` names it after the pod).
    let owner = pod.owner.name().map_or(name.as_ptr() as usize, ptr);
    let [namespace, labels] = exclusion_key(namespace, pod, labels_matter);
    [
        namespace,
        pod.owner.kind_tag(),
        owner,
        ptr(&pod.request),
        pod.revision.as_ref().map_or(0, ptr),
        usize::from(pod.injected),
        labels,
        pod.native.as_ref().map_or(0, ptr),
    ]
}

/// What [`classified_alike`] keys pods by.
pub(super) type AlikeKey = [usize; 8];

/// What the webhook's reach of a pod depends on: its namespace, and its labels when they
/// matter.
fn exclusion_key(namespace: &Arc<str>, pod: &PodEntry, labels_matter: bool) -> [usize; 2] {
    let labels = if labels_matter {
        Arc::as_ptr(&pod.labels) as *const u8 as usize
    } else {
        0
    };
    [ptr(namespace), labels]
}

/// An interned string's identity: equal pointers, equal text.
fn ptr(text: &Arc<str>) -> usize {
    Arc::as_ptr(text) as *const u8 as usize
}

/// Distinct request and revision annotations are few (one per config version in use) and
/// interned, so per-pod work is keyed by pointer: no string is parsed, hashed or compared per
/// pod beyond the sidecar name.
struct Distinct<'s> {
    /// Request annotation -> the sidecar names, one shared string per name so that its pointer
    /// identifies it across requests.
    requests: HashMap<usize, Vec<Arc<str>>>,
    revisions: HashMap<usize, Vec<(String, &'s str)>>,
    /// `NS/injected-native` annotation -> the sidecar names it lists, as the report spells them.
    natives: HashMap<usize, Vec<String>>,
    /// Namespace (and labels, when they matter) -> why its pods are excluded, if they are.
    exclusions: HashMap<[usize; 2], Option<String>>,
}

impl<'s> Distinct<'s> {
    fn of(
        groups: &[PodGroup<'s>],
        labels_matter: bool,
        exclusion: impl Fn(&str, &Labels) -> Option<String>,
    ) -> Self {
        let mut names: HashSet<Arc<str>> = HashSet::new();
        let mut distinct = Distinct {
            requests: HashMap::new(),
            revisions: HashMap::new(),
            natives: HashMap::new(),
            exclusions: HashMap::new(),
        };
        for &PodGroup { namespace, pod, .. } in groups {
            distinct
                .requests
                .entry(ptr(&pod.request))
                .or_insert_with(|| {
                    SidecarName::parse_list(&pod.request)
                        .map(|list| {
                            list.iter()
                                .map(|n| intern(&mut names, &n.to_string()))
                                .collect()
                        })
                        .unwrap_or_default()
                });
            if let Some(revision) = &pod.revision {
                distinct
                    .revisions
                    .entry(ptr(revision))
                    .or_insert_with(|| parse_revisions(revision));
            }
            if let Some(native) = &pod.native {
                distinct.natives.entry(ptr(native)).or_insert_with(|| {
                    SidecarName::parse_list(native)
                        .map(|list| list.iter().map(ToString::to_string).collect())
                        .unwrap_or_default()
                });
            }
            distinct
                .exclusions
                .entry(exclusion_key(namespace, pod, labels_matter))
                .or_insert_with(|| exclusion(namespace, &pod.labels));
        }
        distinct
    }
}

/// Pods classified alike: the first of them, and how many there are.
struct PodGroup<'s> {
    namespace: &'s Arc<str>,
    name: &'s str,
    pod: &'s PodEntry,
    pods: u32,
}

/// Counts per sidecar and per workload, keyed by the pointers of interned strings.
#[derive(Default)]
struct Tally<'a> {
    /// (name, counts, pods running it natively).
    by_sidecar: HashMap<usize, (&'a str, StateCounts, u32)>,
    /// Keyed by (namespace, kind, workload name, sidecar); the names are kept for the report.
    by_workload: HashMap<(usize, usize, usize, usize), WorkloadTally<'a>>,
}

/// Every sidecar in force (with its counts, zero when no pod requests it), then every
/// requested sidecar no config defines, sorted by name.
fn sidecar_rows(
    current: &HashMap<String, &str>,
    by_sidecar: HashMap<usize, (&str, StateCounts, u32)>,
) -> Vec<SidecarDrift> {
    let by_sidecar: HashMap<&str, (StateCounts, u32)> = by_sidecar
        .into_values()
        .map(|(name, pods, native)| (name, (pods, native)))
        .collect();
    let mut rows: Vec<SidecarDrift> = current
        .iter()
        .map(|(name, revision)| SidecarDrift {
            name: name.clone(),
            revision: Some((*revision).to_owned()),
            pods: by_sidecar
                .get(name.as_str())
                .map(|c| c.0)
                .unwrap_or_default(),
            native: by_sidecar.get(name.as_str()).map_or(0, |c| c.1),
            campaign: None,
            expected_end: None,
            note: None,
            foreign: false,
        })
        .chain(
            by_sidecar
                .iter()
                .filter(|(name, _)| !current.contains_key(**name))
                .map(|(name, (pods, native))| SidecarDrift {
                    name: (*name).to_owned(),
                    revision: None,
                    pods: *pods,
                    native: *native,
                    campaign: None,
                    expected_end: None,
                    note: None,
                    foreign: false,
                }),
        )
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// One row per (workload, sidecar), in its worst pod's state, sorted by name.
fn workload_rows(
    by_workload: HashMap<(usize, usize, usize, usize), WorkloadTally<'_>>,
    policy: &DriftPolicy,
) -> Vec<WorkloadDrift> {
    let mut rows: Vec<WorkloadDrift> = by_workload
        .into_values()
        .map(|tally| {
            let (name, namespace, kind, sidecar) = tally.names;
            let state = tally.worst.unwrap_or(DriftState::Current);
            WorkloadDrift {
                kind: kind.owner_kind(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                sidecar: sidecar.to_owned(),
                state,
                reason: String::new(),
                why: reason(&tally.detail),
                pods: tally.pods,
                form: tally.form.kind(),
                native: tally.form.native,
                needs_restart: state.needs_restart(policy.restart_unknown),
            }
        })
        .collect();
    // One row per (workload, sidecar): no two rows compare equal, so the unstable sort gives
    // the one order, without the stable sort's buffer.
    rows.sort_unstable_by(|a, b| {
        (&a.name, &a.namespace, &a.kind, &a.sidecar).cmp(&(
            &b.name,
            &b.namespace,
            &b.kind,
            &b.sidecar,
        ))
    });
    rows
}

/// Why a workload has its state, kept borrowed until the report is written.
#[derive(Debug, Clone, Default)]
enum Detail<'a> {
    #[default]
    None,
    /// Left out by its namespace or labels, in these words.
    Namespace(&'a str),
    /// Left out by its owner (never `Namespace` or `OwnedBy`, which borrow here).
    Owner(Exclusion),
    OwnedBy(&'a str),
    Orphaned,
    Stale {
        from: &'a str,
        to: &'a str,
    },
}

impl<'a> Detail<'a> {
    /// What the report says about a state the staleness rule gave.
    fn of(state: DriftState, have: Option<&'a str>, want: Option<&'a str>) -> Self {
        match (state, have, want) {
            (DriftState::Orphaned, _, _) => Detail::Orphaned,
            (DriftState::Stale, Some(from), Some(to)) => Detail::Stale { from, to },
            _ => Detail::None,
        }
    }
}

fn reason(detail: &Detail<'_>) -> RowReason {
    match detail {
        Detail::None => RowReason::Counts,
        Detail::Namespace(words) => RowReason::Excluded(Exclusion::Namespace((*words).to_owned())),
        Detail::Owner(exclusion) => RowReason::Excluded(exclusion.clone()),
        Detail::OwnedBy(kind) => RowReason::Excluded(Exclusion::OwnedBy((*kind).to_owned())),
        Detail::Orphaned => RowReason::Orphaned,
        Detail::Stale { from, to } => RowReason::Stale {
            from: (*from).to_owned(),
            to: (*to).to_owned(),
        },
    }
}

impl<'a> WorkloadTally<'a> {
    /// More pods in one state; the workload takes its worst pod's state and that pod's detail.
    fn add(&mut self, state: DriftState, detail: Detail<'a>, pods: u32, form: Form) {
        self.pods.add_many(state, pods);
        self.form.injected += form.injected;
        self.form.native += form.native;
        if self
            .worst
            .is_none_or(|w: DriftState| state.severity() > w.severity())
        {
            self.worst = Some(state);
            self.detail = detail;
        }
    }
}

#[derive(Debug)]
struct WorkloadTally<'a> {
    /// (workload name, namespace, kind, sidecar).
    names: (&'a str, &'a str, RowKind<'a>, &'a str),
    pods: StateCounts,
    form: Form,
    worst: Option<DriftState>,
    detail: Detail<'a>,
}

/// Of some pods, how many were injected with a sidecar, and how many of those run it natively.
#[derive(Debug, Clone, Copy, Default)]
struct Form {
    injected: u32,
    native: u32,
}

impl Form {
    fn kind(self) -> Option<SidecarForm> {
        match (self.injected, self.native) {
            (0, _) => None,
            (_, 0) => Some(SidecarForm::Classic),
            (injected, native) if native == injected => Some(SidecarForm::Native),
            _ => Some(SidecarForm::Mixed),
        }
    }
}
