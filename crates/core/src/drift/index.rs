//! The index itself: every requesting pod, ReplicaSet owner and workload entry, keyed by
//! interned strings; watches apply, delete and reset after a relist.

// A fast hasher with a per-process random seed: classification hashes a few strings per pod,
// and SipHash made up most of its time.
use foldhash::{HashMap, HashSet};
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::annotations::AnnotationKeys;
use crate::config::RevisionsInForce;
use crate::workload::{OwnerKind, WorkloadKind};

use super::entries::{PodEntry, PodOwner, PodToReplace, WorkloadEntry};
use super::interner::{Interner, Labels};
use super::reach::WebhookReach;
use super::{DriftPolicy, namespace_exclusion};

pub(super) type Key = (Arc<str>, Box<str>);

/// What changed in the index since the gauge last looked: the pods, the ReplicaSets whose
/// pods may have changed owner, or everything (a relist, a workload's opt-out changed).
#[derive(Debug, Default)]
pub(super) struct IndexChanges {
    pub(super) pods: HashSet<Key>,
    /// Namespace -> ReplicaSet names: looked up with a pod's strings, no key built.
    pub(super) replicasets: HashMap<Arc<str>, HashSet<Box<str>>>,
    pub(super) everything: bool,
}

impl IndexChanges {
    fn everything() -> Self {
        IndexChanges {
            everything: true,
            ..Default::default()
        }
    }
}

/// Namespace -> name -> value.
type ByNamespace<V> = HashMap<Arc<str>, HashMap<Box<str>, V>>;

/// Counts a pod in (`added`) or out of its ReplicaSet's pods, if a ReplicaSet owns it.
fn owned_by(counts: &mut ByNamespace<u32>, namespace: &Arc<str>, owner: &PodOwner, added: bool) {
    let PodOwner::ReplicaSet(replicaset) = owner else {
        return;
    };
    if added {
        let names = counts.entry(namespace.clone()).or_default();
        // Most pods join a ReplicaSet already counted: no name is built for them.
        match names.get_mut(replicaset.as_ref()) {
            Some(count) => *count += 1,
            None => {
                names.insert(replicaset.as_ref().into(), 1);
            }
        }
    } else if let Some(count) = counts
        .get_mut(namespace.as_ref())
        .and_then(|names| names.get_mut(replicaset.as_ref()))
    {
        *count -= 1;
        if *count == 0 {
            remove_named(counts, namespace, replicaset);
        }
    }
}

/// Removes `name` from `namespace`, and the namespace with its last name: namespaces come and
/// go (one per preview environment), and an empty one would be kept for ever, its name too.
fn remove_named<V>(map: &mut ByNamespace<V>, namespace: &str, name: &str) -> Option<V> {
    let names = map.get_mut(namespace)?;
    let removed = names.remove(name);
    if names.is_empty() {
        map.remove(namespace);
    }
    removed
}

#[derive(Debug, Default)]
pub struct DriftIndex {
    /// Namespaces, owner names, annotation values and labels, each stored once.
    pub(super) interned: Interner,
    deletes_since_prune: usize,
    pub(super) pods: HashMap<Key, PodEntry>,
    /// Namespace -> ReplicaSet -> the Deployment that controls it, if any. Nested so that a
    /// lookup borrows the pod's strings instead of building a key.
    pub(super) replicasets: ByNamespace<Option<Arc<str>>>,
    /// Namespace -> ReplicaSet -> how many indexed pods name it their owner. A ReplicaSet
    /// that comes, goes or changes Deployment while no pod names it (a rollout's new one
    /// before its pods, an old one after them) changes no pod's classification: the gauge is
    /// not sent to look for its pods (a scan of every pod, 4-14 ms at 50,000 pods under load).
    pods_per_replicaset: ByNamespace<u32>,
    /// Per kind (`WorkloadKind as usize`): namespace -> name -> entry. Bare pods have no
    /// entry; their slot stays empty.
    pub(super) workloads: [ByNamespace<WorkloadEntry>; 4],
    /// While a relist of pods is under way: the pods it listed so far (that request a
    /// sidecar), so that its end removes the others.
    relisted_pods: Option<HashSet<Key>>,
    /// The same for ReplicaSets.
    relisted_replicasets: Option<ByNamespace<()>>,
    /// Kept only once [`DriftIndex::track_changes`] was called (by the gauge's owner).
    changes: Option<IndexChanges>,
    /// What the webhook configuration's namespaceSelectors reach; `None` (not followed, or
    /// no such configuration): every namespace.
    reach: Option<WebhookReach>,
    /// Each namespace's labels, while the reach is followed.
    namespace_labels: HashMap<Box<str>, BTreeMap<String, String>>,
    /// The namespaces the webhook is never called for, with why: derived from the two above.
    unsent: HashMap<Box<str>, String>,
}

impl DriftIndex {
    /// Starts recording what changes, for [`super::DriftGauge`]; until the first
    /// [`DriftIndex::take_changes`], everything counts as changed.
    pub fn track_changes(&mut self) {
        self.changes = Some(IndexChanges::everything());
    }

    /// What changed since the last call (everything when changes are not tracked).
    pub(super) fn take_changes(&mut self) -> IndexChanges {
        match &mut self.changes {
            Some(changes) => std::mem::take(changes),
            None => IndexChanges::everything(),
        }
    }

    fn changed_pod(&mut self, key: &Key) {
        let pods = self.pods.len();
        if let Some(changes) = &mut self.changes
            && !changes.everything
        {
            changes.pods.insert(key.clone());
            // Past a quarter of the index a recount is cheaper than the set.
            if changes.pods.len() > 1024 && changes.pods.len() > pods / 4 {
                *changes = IndexChanges::everything();
            }
        }
    }

    #[cfg(test)]
    pub(super) fn pending_changes(&self) -> Option<&IndexChanges> {
        self.changes.as_ref()
    }

    fn changed_replicaset(&mut self, key: Key) {
        let owns_pods = self
            .pods_per_replicaset
            .get(key.0.as_ref())
            .is_some_and(|names| names.contains_key(key.1.as_ref()));
        if let Some(changes) = &mut self.changes
            && !changes.everything
            && owns_pods
        {
            let (namespace, name) = key;
            changes
                .replicasets
                .entry(namespace)
                .or_default()
                .insert(name);
        }
    }

    fn changed_everything(&mut self) {
        if let Some(changes) = &mut self.changes {
            *changes = IndexChanges::everything();
        }
    }

    fn key(&mut self, namespace: &str, name: &str) -> Key {
        (self.interned.text(namespace), name.into())
    }

    fn meta_key(&mut self, meta: &ObjectMeta) -> Option<Key> {
        Some(self.key(meta.namespace.as_deref()?, meta.name.as_deref()?))
    }

    pub fn apply_pod(&mut self, meta: &ObjectMeta, keys: &AnnotationKeys) {
        let Some(key) = self.meta_key(meta) else {
            return;
        };
        let before = self.pods.get(&key).map(|pod| &pod.labels);
        let entry = PodEntry::project(meta, keys, &mut self.interned, before);
        if let (Some(relisted), Some(_)) = (&mut self.relisted_pods, &entry) {
            relisted.insert(key.clone());
        }
        match entry {
            // A status-only update (most pod events) changes nothing here.
            Some(entry) if self.pods.get(&key) != Some(&entry) => {
                self.changed_pod(&key);
                let (namespace, owner) = (key.0.clone(), entry.owner.clone());
                let previous = self.pods.insert(key, entry).map(|pod| pod.owner);
                // Most changes are of a pod's annotations; its owner stays.
                if previous.as_ref() != Some(&owner) {
                    let counts = &mut self.pods_per_replicaset;
                    if let Some(previous) = &previous {
                        owned_by(counts, &namespace, previous, false);
                    }
                    owned_by(counts, &namespace, &owner, true);
                }
            }
            Some(_) => {}
            None => self.remove_pod(&key),
        }
    }

    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let key = self.key(namespace, name);
        self.remove_pod(&key);
        self.deletes_since_prune += 1;
        // Amortised: strings of deleted pods' owners (a Job name, an old revision) go once no
        // entry refers to them, so churn does not grow the interner for ever.
        if self.deletes_since_prune >= self.pods.len().max(1024) {
            self.prune_interned();
        }
    }

    fn remove_pod(&mut self, key: &Key) {
        if let Some(pod) = self.pods.remove(key) {
            owned_by(&mut self.pods_per_replicaset, &key.0, &pod.owner, false);
            self.changed_pod(key);
        }
    }

    fn prune_interned(&mut self) {
        self.interned.prune();
        self.deletes_since_prune = 0;
    }

    /// After a relist: exactly these pods.
    pub fn reset_pods<'m>(
        &mut self,
        metas: impl IntoIterator<Item = &'m ObjectMeta>,
        keys: &AnnotationKeys,
    ) {
        self.start_pod_relist();
        for meta in metas {
            self.apply_pod(meta, keys);
        }
        self.end_pod_relist();
    }

    /// A relist of pods starts: each pod it lists is applied as it comes, and
    /// [`DriftIndex::end_pod_relist`] removes those it did not list. Until then the index
    /// holds what it held before and what was listed since, never a whole list at once. A
    /// relist that starts again forgets what the first listed.
    pub fn start_pod_relist(&mut self) {
        self.relisted_pods = Some(HashSet::default());
    }

    /// The relist is over: exactly the pods it listed (and those applied since it started).
    pub fn end_pod_relist(&mut self) {
        let Some(relisted) = self.relisted_pods.take() else {
            return;
        };
        let owners = &mut self.pods_per_replicaset;
        self.pods.retain(|key, pod| {
            let listed = relisted.contains(key);
            if !listed {
                owned_by(owners, &key.0, &pod.owner, false);
            }
            listed
        });
        self.prune_interned();
        self.changed_everything();
    }

    pub fn apply_replicaset(&mut self, meta: &ObjectMeta) {
        let Some((namespace, name)) = self.meta_key(meta) else {
            return;
        };
        let deployment = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| {
                o.controller == Some(true)
                    && OwnerKind::parse(&o.kind) == WorkloadKind::Deployment.into()
            })
            .map(|o| self.interned.text(&o.name));
        if let Some(relisted) = &mut self.relisted_replicasets {
            relisted
                .entry(namespace.clone())
                .or_default()
                .insert(name.clone(), ());
        }
        let previous = self
            .replicasets
            .entry(namespace.clone())
            .or_default()
            .insert(name.clone(), deployment.clone());
        if previous != Some(deployment) {
            self.changed_replicaset((namespace, name));
        }
    }

    /// Follows what the webhook configuration reaches (`None`: every namespace).
    pub fn set_webhook_reach(&mut self, reach: Option<WebhookReach>) {
        if self.reach != reach {
            self.reach = reach;
            self.recompute_unsent();
            // Its objectSelectors may have changed with no namespace's reach changing.
            self.changed_everything();
        }
    }

    pub fn apply_namespace(&mut self, meta: &ObjectMeta) {
        let Some(name) = meta.name.as_deref() else {
            return;
        };
        let labels = meta.labels.clone().unwrap_or_default();
        if self.namespace_labels.get(name) != Some(&labels) {
            self.namespace_labels.insert(name.into(), labels);
            self.recompute_unsent();
        }
    }

    pub fn delete_namespace(&mut self, name: &str) {
        if self.namespace_labels.remove(name).is_some() {
            self.recompute_unsent();
        }
    }

    pub fn reset_namespaces<'m>(&mut self, metas: impl IntoIterator<Item = &'m ObjectMeta>) {
        self.namespace_labels = metas
            .into_iter()
            .filter_map(|meta| {
                Some((
                    meta.name.as_deref()?.into(),
                    meta.labels.clone().unwrap_or_default(),
                ))
            })
            .collect();
        self.recompute_unsent();
    }

    /// Namespaces are few and their labels rarely change: each change recomputes them all,
    /// and a change of what is left out (or of any, when pods' labels matter) has every pod
    /// counted again.
    fn recompute_unsent(&mut self) {
        let unsent: HashMap<Box<str>, String> = match &self.reach {
            None => HashMap::default(),
            Some(reach) => self
                .namespace_labels
                .iter()
                .filter_map(|(namespace, labels)| {
                    Some((namespace.clone(), reach.leaves_out(namespace, labels)?))
                })
                .collect(),
        };
        // A namespace's labels also say which webhooks' objectSelectors apply to its pods.
        if unsent != self.unsent || self.labels_matter() {
            self.unsent = unsent;
            self.changed_everything();
        }
    }

    /// Why pods of `namespace` are left out, if they are: by `policy`, or because the webhook
    /// is never called for them (a namespace not listed yet counts as reached).
    pub fn namespace_exclusion(&self, namespace: &str, policy: &DriftPolicy) -> Option<String> {
        namespace_exclusion(namespace, policy).or_else(|| self.unsent.get(namespace).cloned())
    }

    /// Whether a pod's labels may leave it out: some webhook selects pods by label.
    pub(super) fn labels_matter(&self) -> bool {
        self.reach
            .as_ref()
            .is_some_and(WebhookReach::selects_objects)
    }

    /// Why a pod of `namespace` labelled `labels` is left out, if it is: its namespace (as
    /// [`DriftIndex::namespace_exclusion`]), or its labels, which no objectSelector of a
    /// webhook that selects the namespace selects (a namespace not listed yet counts as
    /// reached).
    pub(super) fn pod_exclusion(
        &self,
        namespace: &str,
        labels: &Labels,
        policy: &DriftPolicy,
    ) -> Option<String> {
        self.namespace_exclusion(namespace, policy)
            .or_else(|| self.labels_exclusion(namespace, labels))
    }

    /// Why a pod of `namespace` labelled `labels` is left out by its labels, if it is: no
    /// objectSelector of a webhook that selects the namespace selects them.
    fn labels_exclusion(&self, namespace: &str, labels: &Labels) -> Option<String> {
        let reach = self.reach.as_ref().filter(|r| r.selects_objects())?;
        let namespace_labels = self.namespace_labels.get(namespace)?;
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        reach.leaves_out_pod(namespace, namespace_labels, &labels)
    }

    pub fn delete_replicaset(&mut self, namespace: &str, name: &str) {
        if remove_named(&mut self.replicasets, namespace, name).is_some() {
            let key = self.key(namespace, name);
            self.changed_replicaset(key);
        }
    }

    pub fn reset_replicasets<'m>(&mut self, metas: impl IntoIterator<Item = &'m ObjectMeta>) {
        self.start_replicaset_relist();
        for meta in metas {
            self.apply_replicaset(meta);
        }
        self.end_replicaset_relist();
    }

    /// As [`DriftIndex::start_pod_relist`], for ReplicaSets.
    pub fn start_replicaset_relist(&mut self) {
        self.relisted_replicasets = Some(ByNamespace::default());
    }

    /// As [`DriftIndex::end_pod_relist`], for ReplicaSets.
    pub fn end_replicaset_relist(&mut self) {
        let Some(relisted) = self.relisted_replicasets.take() else {
            return;
        };
        self.replicasets.retain(|namespace, names| {
            let Some(listed) = relisted.get(namespace) else {
                return false;
            };
            names.retain(|name, _| listed.contains_key(name));
            !names.is_empty()
        });
        self.changed_everything();
    }

    #[cfg(any(test, feature = "test-fixtures"))]
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
        let disabled = entry.rollout_disabled;
        let previous = self.workloads[kind as usize]
            .entry(namespace)
            .or_default()
            .insert(name, entry);
        // Only the opt-out reaches the gauge (its pods become excluded or not).
        if previous.map_or(disabled, |p| p.rollout_disabled != disabled) {
            self.changed_everything();
        }
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
        self.changed_everything();
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
        let removed = remove_named(&mut self.workloads[kind as usize], namespace, name);
        if removed.is_some_and(|w| w.rollout_disabled) {
            self.changed_everything();
        }
    }

    /// The Deployment controlling a ReplicaSet, as the index knows it.
    pub fn deployment_of(&self, namespace: &str, replicaset: &str) -> Option<&str> {
        self.replicasets.get(namespace)?.get(replicaset)?.as_deref()
    }

    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The names of a workload's pods that run another revision than `wanted` of a sidecar
    /// they request (or were never injected; injected without a revision with
    /// `restart_unknown`), sorted. Pods the webhook's objectSelector leaves out are never
    /// among them: their replacements would not be injected either. A scan of the index:
    /// called per OnDelete workload in flight, not per event.
    pub fn pods_needing_restart(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        wanted: &RevisionsInForce,
        restart_unknown: bool,
    ) -> Vec<PodToReplace> {
        let mut pods: Vec<PodToReplace> = self
            .pods_of(kind, namespace, name)
            .filter(|(_, pod)| pod.needs_restart(wanted, restart_unknown))
            .filter(|(_, pod)| self.labels_exclusion(namespace, &pod.labels).is_none())
            .map(|((_, pod_name), pod)| PodToReplace {
                name: pod_name.to_string(),
                injected: pod.injected,
                revision: pod.revision.clone(),
            })
            .collect();
        pods.sort();
        pods
    }

    /// The names of a workload's pods (that request a sidecar), sorted.
    pub fn pod_names(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods_of(kind, namespace, name)
            .map(|((_, pod_name), _)| pod_name.to_string())
            .collect();
        names.sort();
        names
    }

    fn pods_of<'a>(
        &'a self,
        kind: WorkloadKind,
        namespace: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a Key, &'a PodEntry)> + 'a {
        let owned = move |owner: &PodOwner| match (kind, owner) {
            (WorkloadKind::StatefulSet, PodOwner::StatefulSet(n))
            | (WorkloadKind::DaemonSet, PodOwner::DaemonSet(n)) => n.as_ref() == name,
            (WorkloadKind::Deployment, PodOwner::ReplicaSet(rs)) => self
                .replicasets
                .get(namespace)
                .and_then(|names| names.get(rs.as_ref()))
                .is_some_and(|d| d.as_deref() == Some(name)),
            _ => false,
        };
        self.pods
            .iter()
            .filter(move |((ns, _), pod)| ns.as_ref() == namespace && owned(&pod.owner))
    }
}
