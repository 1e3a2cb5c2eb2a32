//! The drift index: a compact, synchronous (no I/O) view of every pod that requests a sidecar,
//! the revision it carries and the workload that owns it, classified against the config
//! snapshot by the six drift states, first that applies. Watches feed it (apply / delete / reset after a relist);
//! the drift report, the gauge and the rollout planner read it.

use std::collections::BTreeSet;

// A fast hasher with a per-process random seed: classification hashes a few strings per pod,
// and SipHash made up most of its time.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::{RevisionsInForce, SidecarSet};
use crate::name::SidecarName;
use crate::workload::{
    OwnerKind, PodWorkload, ReplicaSetOwner, UpdateStrategy, WorkloadKind, resolve_pod_owner,
};

/// The six states, in order of precedence: a pod-sidecar pair takes the first that applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DriftState {
    Excluded,
    Orphaned,
    Uninjected,
    Unknown,
    Stale,
    Current,
}

impl DriftState {
    pub const ALL: [DriftState; 6] = [
        DriftState::Excluded,
        DriftState::Orphaned,
        DriftState::Uninjected,
        DriftState::Unknown,
        DriftState::Stale,
        DriftState::Current,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DriftState::Excluded => "excluded",
            DriftState::Orphaned => "orphaned",
            DriftState::Uninjected => "uninjected",
            DriftState::Unknown => "unknown",
            DriftState::Stale => "stale",
            DriftState::Current => "current",
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

    fn severity(self) -> u8 {
        match self {
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
}

impl StateCounts {
    fn add(&mut self, state: DriftState) {
        *self.get_mut(state) += 1;
    }

    fn get_mut(&mut self, state: DriftState) -> &mut u32 {
        match state {
            DriftState::Excluded => &mut self.excluded,
            DriftState::Orphaned => &mut self.orphaned,
            DriftState::Uninjected => &mut self.uninjected,
            DriftState::Unknown => &mut self.unknown,
            DriftState::Stale => &mut self.stale,
            DriftState::Current => &mut self.current,
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

/// The controller of a pod, as its own metadata names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PodOwner {
    Bare,
    ReplicaSet(Arc<str>),
    StatefulSet(Arc<str>),
    DaemonSet(Arc<str>),
    Job(Arc<str>),
    Other { kind: Arc<str>, name: Arc<str> },
}

impl PodOwner {
    /// Tells owner kinds apart where names may be equal (a StatefulSet and a DaemonSet can
    /// share one).
    fn kind_tag(&self) -> usize {
        match self {
            PodOwner::Bare => 0,
            PodOwner::ReplicaSet(_) => 1,
            PodOwner::StatefulSet(_) => 2,
            PodOwner::DaemonSet(_) => 3,
            PodOwner::Job(_) => 4,
            PodOwner::Other { kind, .. } => Arc::as_ptr(kind) as *const u8 as usize,
        }
    }

    /// `(kind, name)` as the pod's controller reference says; `None` for a bare pod.
    fn controller(&self) -> Option<(&str, &str)> {
        match self {
            PodOwner::Bare => None,
            PodOwner::ReplicaSet(name) => Some(("ReplicaSet", name)),
            PodOwner::StatefulSet(name) => Some(("StatefulSet", name)),
            PodOwner::DaemonSet(name) => Some(("DaemonSet", name)),
            PodOwner::Job(name) => Some(("Job", name)),
            PodOwner::Other { kind, name } => Some((kind, name)),
        }
    }

    /// The owner's (interned) name; `None` for a bare pod.
    fn name(&self) -> Option<&Arc<str>> {
        match self {
            PodOwner::Bare => None,
            PodOwner::ReplicaSet(name)
            | PodOwner::StatefulSet(name)
            | PodOwner::DaemonSet(name)
            | PodOwner::Job(name)
            | PodOwner::Other { name, .. } => Some(name),
        }
    }
}

/// The compact projection of a pod: no spec, no managedFields, only what drift needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEntry {
    pub owner: PodOwner,
    pub request: Arc<str>,
    pub injected: bool,
    pub revision: Option<Arc<str>>,
}

impl PodEntry {
    /// `None` for a pod that requests nothing or is terminating: such pods are not indexed.
    /// Strings go through `intern`, so that pods of one workload share them.
    pub fn project(
        meta: &ObjectMeta,
        keys: &AnnotationKeys,
        intern: &mut impl FnMut(&str) -> Arc<str>,
    ) -> Option<Self> {
        if meta.deletion_timestamp.is_some() {
            return None;
        }
        let annotations = meta.annotations.as_ref()?;
        let request = annotations.get(&keys.request)?;
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| {
                let name = intern(&o.name);
                match o.kind.as_str() {
                    "ReplicaSet" => PodOwner::ReplicaSet(name),
                    "StatefulSet" => PodOwner::StatefulSet(name),
                    "DaemonSet" => PodOwner::DaemonSet(name),
                    "Job" => PodOwner::Job(name),
                    kind => PodOwner::Other {
                        kind: intern(kind),
                        name,
                    },
                }
            })
            .unwrap_or(PodOwner::Bare);
        Some(PodEntry {
            owner,
            request: intern(request),
            injected: annotations.get(&keys.status).map(String::as_str) == Some(STATUS_INJECTED),
            revision: annotations.get(&keys.revision).map(|r| intern(r)),
        })
    }
}

impl PodEntry {
    /// Whether this pod runs something other than `wanted` for a sidecar it requests.
    pub fn needs_restart(&self, wanted: &RevisionsInForce, restart_unknown: bool) -> bool {
        let Ok(requested) = SidecarName::parse_list(&self.request) else {
            return false;
        };
        let carried = self
            .revision
            .as_deref()
            .map(parse_revisions)
            .unwrap_or_default();
        requested.iter().any(|name| {
            let name = name.to_string();
            let have = carried.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
            sidecar_state(self.injected, have, wanted.get(&name)).needs_restart(restart_unknown)
        })
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

/// A workload stripped on arrival to what drift and rollout planning need: our annotations,
/// generations, the update strategy and the rollout status; never the pod template's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadEntry {
    /// `NS/rollout: disabled` on the workload.
    pub rollout_disabled: bool,
    /// `NS/rollout-revision` on the pod template: the target the engine last set.
    pub rollout_revision: Option<Box<str>>,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub update_strategy: UpdateStrategy,
    /// A StatefulSet's partition, which holds pods back on purpose.
    pub partition: Option<i32>,
    /// A paused Deployment.
    pub paused: bool,
    pub replicas: Option<i32>,
    pub updated_replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    /// A Deployment's `status.replicas` (old and new pods together).
    pub status_replicas: Option<i32>,
    /// A StatefulSet whose `updateRevision` differs from its `currentRevision`.
    pub update_revision_pending: bool,
    /// `NS/rolled-at` on the workload: when the engine last restarted it.
    pub rolled_at: Option<Timestamp>,
}

impl WorkloadEntry {
    /// From metadata alone (a metadata-only list): the opt-out only.
    pub fn project(meta: &ObjectMeta, keys: &AnnotationKeys) -> Self {
        WorkloadEntry {
            rollout_disabled: rollout_disabled(meta, keys),
            generation: meta.generation,
            rolled_at: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys.rolled_at))
                .and_then(|t| t.parse().ok()),
            ..Default::default()
        }
    }

    pub fn from_deployment(
        d: &k8s_openapi::api::apps::v1::Deployment,
        keys: &AnnotationKeys,
    ) -> Self {
        let spec = d.spec.as_ref();
        let status = d.status.as_ref();
        WorkloadEntry {
            rollout_revision: template_annotation(
                spec.and_then(|s| s.template.metadata.as_ref()),
                &keys.rollout_revision,
            ),
            update_strategy: UpdateStrategy::parse(
                spec.and_then(|s| s.strategy.as_ref()?.type_.as_deref()),
            ),
            paused: spec.and_then(|s| s.paused).unwrap_or(false),
            replicas: spec.and_then(|s| s.replicas),
            status_replicas: status.and_then(|s| s.replicas),
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_replicas),
            ready_replicas: status.and_then(|s| s.ready_replicas),
            available_replicas: status.and_then(|s| s.available_replicas),
            ..Self::project(&d.metadata, keys)
        }
    }

    pub fn from_statefulset(
        s: &k8s_openapi::api::apps::v1::StatefulSet,
        keys: &AnnotationKeys,
    ) -> Self {
        let spec = s.spec.as_ref();
        let status = s.status.as_ref();
        let strategy = spec.and_then(|s| s.update_strategy.as_ref());
        WorkloadEntry {
            rollout_revision: template_annotation(
                spec.and_then(|s| s.template.metadata.as_ref()),
                &keys.rollout_revision,
            ),
            update_strategy: UpdateStrategy::parse(strategy.and_then(|u| u.type_.as_deref())),
            partition: strategy.and_then(|u| u.rolling_update.as_ref()?.partition),
            replicas: spec.and_then(|s| s.replicas),
            update_revision_pending: status.is_some_and(|s| {
                s.update_revision.is_some() && s.update_revision != s.current_revision
            }),
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_replicas),
            ready_replicas: status.and_then(|s| s.ready_replicas),
            available_replicas: status.and_then(|s| s.available_replicas),
            ..Self::project(&s.metadata, keys)
        }
    }

    pub fn from_daemonset(
        d: &k8s_openapi::api::apps::v1::DaemonSet,
        keys: &AnnotationKeys,
    ) -> Self {
        let spec = d.spec.as_ref();
        let status = d.status.as_ref();
        WorkloadEntry {
            rollout_revision: template_annotation(
                spec.and_then(|s| s.template.metadata.as_ref()),
                &keys.rollout_revision,
            ),
            update_strategy: UpdateStrategy::parse(
                spec.and_then(|s| s.update_strategy.as_ref()?.type_.as_deref()),
            ),
            replicas: status.map(|s| s.desired_number_scheduled),
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_number_scheduled),
            ready_replicas: status.map(|s| s.number_ready),
            available_replicas: status.and_then(|s| s.number_available),
            ..Self::project(&d.metadata, keys)
        }
    }
}

fn rollout_disabled(meta: &ObjectMeta, keys: &AnnotationKeys) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(&keys.rollout))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("disabled"))
}

fn template_annotation(meta: Option<&ObjectMeta>, key: &str) -> Option<Box<str>> {
    meta?
        .annotations
        .as_ref()?
        .get(key)
        .map(|v| v.as_str().into())
}

type Key = (Arc<str>, Box<str>);

/// Namespace -> name -> value.
type ByNamespace<V> = HashMap<Arc<str>, HashMap<Box<str>, V>>;

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

#[derive(Debug, Default)]
pub struct DriftIndex {
    /// Namespaces, owner names and annotation values, each stored once.
    interned: HashSet<Arc<str>>,
    deletes_since_prune: usize,
    pods: HashMap<Key, PodEntry>,
    /// Namespace -> ReplicaSet -> the Deployment that controls it, if any. Nested so that a
    /// lookup borrows the pod's strings instead of building a key.
    replicasets: ByNamespace<Option<Arc<str>>>,
    /// Per kind (`WorkloadKind as usize`): namespace -> name -> entry. Bare pods have no
    /// entry; their slot stays empty.
    workloads: [ByNamespace<WorkloadEntry>; 4],
}

impl DriftIndex {
    fn intern(interned: &mut HashSet<Arc<str>>, text: &str) -> Arc<str> {
        match interned.get(text) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Arc<str> = text.into();
                interned.insert(shared.clone());
                shared
            }
        }
    }

    fn key(&mut self, namespace: &str, name: &str) -> Key {
        (Self::intern(&mut self.interned, namespace), name.into())
    }

    fn meta_key(&mut self, meta: &ObjectMeta) -> Option<Key> {
        Some(self.key(meta.namespace.as_deref()?, meta.name.as_deref()?))
    }

    pub fn apply_pod(&mut self, meta: &ObjectMeta, keys: &AnnotationKeys) {
        let Some(key) = self.meta_key(meta) else {
            return;
        };
        let interned = &mut self.interned;
        match PodEntry::project(meta, keys, &mut |text| Self::intern(interned, text)) {
            Some(entry) => {
                self.pods.insert(key, entry);
            }
            None => {
                self.pods.remove(&key);
            }
        }
    }

    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let key = self.key(namespace, name);
        self.pods.remove(&key);
        self.deletes_since_prune += 1;
        // Amortised: strings of deleted pods' owners (a Job name, an old revision) go once no
        // entry refers to them, so churn does not grow the interner for ever.
        if self.deletes_since_prune >= self.pods.len().max(1024) {
            self.prune_interned();
        }
    }

    fn prune_interned(&mut self) {
        self.interned.retain(|text| Arc::strong_count(text) > 1);
        self.deletes_since_prune = 0;
    }

    /// After a relist: exactly these pods.
    pub fn reset_pods<'m>(
        &mut self,
        metas: impl IntoIterator<Item = &'m ObjectMeta>,
        keys: &AnnotationKeys,
    ) {
        self.pods.clear();
        for meta in metas {
            self.apply_pod(meta, keys);
        }
        self.prune_interned();
    }

    pub fn apply_replicaset(&mut self, meta: &ObjectMeta) {
        let Some((namespace, name)) = self.meta_key(meta) else {
            return;
        };
        let deployment = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "Deployment")
            .map(|o| Self::intern(&mut self.interned, &o.name));
        self.replicasets
            .entry(namespace)
            .or_default()
            .insert(name, deployment);
    }

    pub fn delete_replicaset(&mut self, namespace: &str, name: &str) {
        if let Some(names) = self.replicasets.get_mut(namespace) {
            names.remove(name);
        }
    }

    pub fn reset_replicasets<'m>(&mut self, metas: impl IntoIterator<Item = &'m ObjectMeta>) {
        self.replicasets.clear();
        for meta in metas {
            self.apply_replicaset(meta);
        }
    }

    pub fn apply_workload(&mut self, kind: WorkloadKind, meta: &ObjectMeta, keys: &AnnotationKeys) {
        let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref())
        else {
            return;
        };
        self.apply_workload_entry(kind, namespace, name, WorkloadEntry::project(meta, keys));
    }

    /// A workload already stripped to its entry (from a full watch).
    pub fn apply_workload_entry(
        &mut self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        entry: WorkloadEntry,
    ) {
        let (namespace, name) = self.key(namespace, name);
        self.workloads[kind as usize]
            .entry(namespace)
            .or_default()
            .insert(name, entry);
    }

    /// After a relist of one kind: exactly these (namespace, name, entry).
    pub fn reset_workload_entries(
        &mut self,
        kind: WorkloadKind,
        entries: impl IntoIterator<Item = (String, String, WorkloadEntry)>,
    ) {
        self.workloads[kind as usize].clear();
        for (namespace, name, entry) in entries {
            self.apply_workload_entry(kind, &namespace, &name, entry);
        }
    }

    pub fn workload(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Option<&WorkloadEntry> {
        self.workloads[kind as usize].get(namespace)?.get(name)
    }

    pub fn delete_workload(&mut self, kind: WorkloadKind, namespace: &str, name: &str) {
        if let Some(names) = self.workloads[kind as usize].get_mut(namespace) {
            names.remove(name);
        }
    }

    pub fn reset_workloads<'m>(
        &mut self,
        kind: WorkloadKind,
        metas: impl IntoIterator<Item = &'m ObjectMeta>,
        keys: &AnnotationKeys,
    ) {
        self.workloads[kind as usize].clear();
        for meta in metas {
            self.apply_workload(kind, meta, keys);
        }
    }

    /// The Deployment controlling a ReplicaSet, as the index knows it.
    pub fn deployment_of(&self, namespace: &str, replicaset: &str) -> Option<&str> {
        self.replicasets.get(namespace)?.get(replicaset)?.as_deref()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The names of a workload's pods that run another revision than `wanted` of a sidecar
    /// they request (or were never injected; injected without a revision with
    /// `restart_unknown`), sorted. A scan of the index: called per OnDelete workload in
    /// flight, not per event.
    pub fn pods_needing_restart(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        wanted: &RevisionsInForce,
        restart_unknown: bool,
    ) -> Vec<String> {
        let owned = |owner: &PodOwner| match (kind, owner) {
            (WorkloadKind::StatefulSet, PodOwner::StatefulSet(n))
            | (WorkloadKind::DaemonSet, PodOwner::DaemonSet(n)) => n.as_ref() == name,
            (WorkloadKind::Deployment, PodOwner::ReplicaSet(rs)) => self
                .replicasets
                .get(namespace)
                .and_then(|names| names.get(rs.as_ref()))
                .is_some_and(|d| d.as_deref() == Some(name)),
            _ => false,
        };
        let mut names: Vec<String> = self
            .pods
            .iter()
            .filter(|((ns, _), pod)| ns.as_ref() == namespace && owned(&pod.owner))
            .filter(|(_, pod)| pod.needs_restart(wanted, restart_unknown))
            .map(|((_, pod_name), _)| pod_name.to_string())
            .collect();
        names.sort();
        names
    }

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
        let distinct = Distinct::of(self, policy);
        let current: HashMap<String, &str> = wanted
            .iter()
            .map(|(name, revision)| (name.to_owned(), revision))
            .collect();
        let tally = self.tally(&distinct, &current, policy);
        DriftReport {
            sidecars: sidecar_rows(&current, tally.by_sidecar),
            workloads: workload_rows(tally.by_workload, policy),
        }
    }

    /// Every pod's state per requested sidecar, counted per sidecar and per workload.
    fn tally<'d, 's: 'd>(
        &'s self,
        distinct: &'d Distinct<'s>,
        current: &HashMap<String, &'d str>,
        policy: &DriftPolicy,
    ) -> Tally<'d> {
        let mut tally = Tally::default();
        // Pods of one workload share their interned owner name: resolve each owner once.
        let mut owners: HashMap<(usize, usize, usize), Resolution<'_>> = HashMap::new();
        for ((namespace, name), pod) in &self.pods {
            let (kind, workload, owner_exclusion) = match pod.owner.name() {
                Some(owner) => owners
                    .entry((ptr(namespace), pod.owner.kind_tag(), ptr(owner)))
                    .or_insert_with(|| self.resolve(namespace, name, pod, policy))
                    .clone(),
                None => self.resolve(namespace, name, pod, policy),
            };
            let exclusion: Option<Detail<'_>> = distinct.namespaces[&ptr(namespace)]
                .as_deref()
                .map(Detail::Text)
                .or(owner_exclusion);
            let carried = pod.revision.as_ref().map(|r| &distinct.revisions[&ptr(r)]);
            for sidecar in &distinct.requests[&ptr(&pod.request)] {
                let sidecar: &'d str = sidecar;
                let (state, detail) = match &exclusion {
                    Some(reason) => (DriftState::Excluded, reason.clone()),
                    None => {
                        let have = carried.and_then(|items| {
                            items.iter().find(|(n, _)| n == sidecar).map(|(_, r)| *r)
                        });
                        let want = current.get(sidecar).copied();
                        let state = sidecar_state(pod.injected, have, want);
                        (state, Detail::of(state, sidecar, have, want))
                    }
                };
                tally
                    .by_sidecar
                    .entry(sidecar.as_ptr() as usize)
                    .or_insert((sidecar, StateCounts::default()))
                    .1
                    .add(state);
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
                        worst: None,
                        detail: Detail::None,
                    })
                    .add(state, detail);
            }
        }
        tally
    }

    /// The workload a pod belongs to (kind, name) and, when its owner excludes it, why.
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
                let why = Detail::Text("owned by a ReplicaSet without a Deployment");
                return (RowKind::ReplicaSet, rs, Some(why));
            }
            PodWorkload::ReplicaSetNotKnown(rs) => {
                let why = Detail::Text("its ReplicaSet is not known yet");
                return (RowKind::ReplicaSet, rs, Some(why));
            }
            PodWorkload::Job(name) => {
                let why = Detail::Text("a Job's pod (runs to completion)");
                return (RowKind::Job, name, Some(why));
            }
            PodWorkload::Other { kind, name } => {
                return (RowKind::Other(kind), name, Some(Detail::OwnedBy(kind)));
            }
            PodWorkload::BarePod => {
                let why =
                    Detail::Text("a bare pod (no controller; --evict-bare-pods to restart it)");
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
            disabled.then_some(Detail::Text("rollout disabled by annotation")),
        )
    }
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
    /// Namespace -> why it is excluded, if it is.
    namespaces: HashMap<usize, Option<String>>,
}

impl<'s> Distinct<'s> {
    fn of(index: &'s DriftIndex, policy: &DriftPolicy) -> Self {
        let mut names: HashSet<Arc<str>> = HashSet::new();
        let mut distinct = Distinct {
            requests: HashMap::new(),
            revisions: HashMap::new(),
            namespaces: HashMap::new(),
        };
        for ((namespace, _), pod) in &index.pods {
            distinct
                .requests
                .entry(ptr(&pod.request))
                .or_insert_with(|| {
                    SidecarName::parse_list(&pod.request)
                        .map(|list| {
                            list.iter()
                                .map(|n| DriftIndex::intern(&mut names, &n.to_string()))
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
            distinct
                .namespaces
                .entry(ptr(namespace))
                .or_insert_with(|| namespace_exclusion(namespace, policy));
        }
        distinct
    }
}

/// Counts per sidecar and per workload, keyed by the pointers of interned strings.
#[derive(Default)]
struct Tally<'a> {
    by_sidecar: HashMap<usize, (&'a str, StateCounts)>,
    /// Keyed by (namespace, kind, workload name, sidecar); the names are kept for the report.
    by_workload: HashMap<(usize, usize, usize, usize), WorkloadTally<'a>>,
}

/// Every sidecar in force (with its counts, zero when no pod requests it), then every
/// requested sidecar no config defines, sorted by name.
fn sidecar_rows(
    current: &HashMap<String, &str>,
    by_sidecar: HashMap<usize, (&str, StateCounts)>,
) -> Vec<SidecarDrift> {
    let by_sidecar: HashMap<&str, StateCounts> = by_sidecar.into_values().collect();
    let mut rows: Vec<SidecarDrift> = current
        .iter()
        .map(|(name, revision)| SidecarDrift {
            name: name.clone(),
            revision: Some((*revision).to_owned()),
            pods: by_sidecar.get(name.as_str()).copied().unwrap_or_default(),
        })
        .chain(
            by_sidecar
                .iter()
                .filter(|(name, _)| !current.contains_key(**name))
                .map(|(name, pods)| SidecarDrift {
                    name: (*name).to_owned(),
                    revision: None,
                    pods: *pods,
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
            let from_revision = match &tally.detail {
                Detail::Stale { from, .. } => Some((*from).to_owned()),
                _ => None,
            };
            WorkloadDrift {
                from_revision,
                kind: kind.owner_kind(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                sidecar: sidecar.to_owned(),
                state,
                reason: reason(state, &tally.pods, &tally.detail),
                pods: tally.pods,
                needs_restart: state.needs_restart(policy.restart_unknown),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.name, &a.namespace, &a.kind, &a.sidecar).cmp(&(
            &b.name,
            &b.namespace,
            &b.kind,
            &b.sidecar,
        ))
    });
    rows
}

/// `name:version=REV,...` as (normalised name, REV) pairs.
fn parse_revisions(annotation: &str) -> Vec<(String, &str)> {
    annotation
        .split(',')
        .filter_map(|item| {
            let (name, revision) = item.trim().split_once('=')?;
            Some((SidecarName::parse(name).ok()?.to_string(), revision.trim()))
        })
        .collect()
}

/// Why a workload has its state, kept borrowed until the report is written.
#[derive(Debug, Clone, Default)]
enum Detail<'a> {
    #[default]
    None,
    Text(&'a str),
    OwnedBy(&'a str),
    Orphaned(&'a str),
    Stale {
        from: &'a str,
        to: &'a str,
    },
}

impl<'a> Detail<'a> {
    /// What the report says about a state the staleness rule gave.
    fn of(
        state: DriftState,
        sidecar: &'a str,
        have: Option<&'a str>,
        want: Option<&'a str>,
    ) -> Self {
        match (state, have, want) {
            (DriftState::Orphaned, _, _) => Detail::Orphaned(sidecar),
            (DriftState::Stale, Some(from), Some(to)) => Detail::Stale { from, to },
            _ => Detail::None,
        }
    }
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

fn reason(state: DriftState, pods: &StateCounts, detail: &Detail<'_>) -> String {
    let total = pods.total();
    match (state, detail) {
        (_, Detail::Text(text)) => (*text).to_owned(),
        (_, Detail::OwnedBy(kind)) => format!("owned by a {kind}"),
        (_, Detail::Orphaned(sidecar)) => format!("sidecar {sidecar} no longer exists"),
        (DriftState::Stale, Detail::Stale { from, to }) => {
            format!("{} of {total} pods stale ({from} -> {to})", pods.stale)
        }
        (DriftState::Uninjected, _) => {
            format!("{} of {total} pods never injected", pods.uninjected)
        }
        (DriftState::Unknown, _) => format!(
            "{} of {total} pods injected without a revision",
            pods.unknown
        ),
        (DriftState::Current, _) => format!("all {total} pods current"),
        (state, _) => format!("{} of {total} pods {}", pods.get(state), state.as_str()),
    }
}

impl<'a> WorkloadTally<'a> {
    /// One more pod; the workload takes its worst pod's state and that pod's detail.
    fn add(&mut self, state: DriftState, detail: Detail<'a>) {
        self.pods.add(state);
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
    worst: Option<DriftState>,
    detail: Detail<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    pub sidecars: Vec<SidecarDrift>,
    pub workloads: Vec<WorkloadDrift>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SidecarDrift {
    pub name: String,
    /// `null` for a requested sidecar no config defines.
    pub revision: Option<String>,
    pub pods: StateCounts,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadDrift {
    pub kind: OwnerKind,
    pub namespace: String,
    pub name: String,
    pub sidecar: String,
    pub state: DriftState,
    pub reason: String,
    pub pods: StateCounts,
    /// Whether the rollout engine should restart it (stale or uninjected, or unknown with
    /// `--restart-unknown`).
    #[serde(skip)]
    pub needs_restart: bool,
    /// For a stale workload, the revision its stale pods carry.
    #[serde(skip)]
    pub from_revision: Option<String>,
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
