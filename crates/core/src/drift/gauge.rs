//! The per-sidecar pod counts behind the `sidecar_injector_pods` gauge, kept incrementally:
//! the index records which pods (and which ReplicaSets' pods) changed, and only those are
//! classified again, so one pod event costs microseconds instead of a pass over every pod. A
//! change of the revisions in force classifies again only the pods that request a sidecar
//! whose revision changed, once per group of pods classified alike. A relist, or a workload's
//! opt-out changing (which can reach many pods at once), recounts everything.

use foldhash::{HashMap, HashMapExt};
use std::collections::hash_map::Entry;
use std::sync::Arc;

use crate::config::RevisionsInForce;
use crate::name::SidecarName;

use super::classify::classified_alike;
use super::entries::{PodEntry, PodOwner, parse_revisions};
use super::index::{DriftIndex, IndexChanges, Key};
use super::{DriftPolicy, DriftState, SidecarDrift, StateCounts, sidecar_state};

/// What one pod adds to the counts: a state per sidecar it requests. Shared by the pods a
/// full count finds classified alike.
type Contribution = Arc<[(Arc<str>, DriftState)]>;

/// The counts per sidecar, and what each pod contributed to them.
#[derive(Debug)]
pub struct DriftGauge {
    policy: DriftPolicy,
    /// The revisions the counts were made against; `None` before the first count.
    counted_against: Option<RevisionsInForce>,
    per_pod: HashMap<Key, Contribution>,
    counts: HashMap<Arc<str>, StateCounts>,
    /// Parsed request annotations by text, each sidecar name shared.
    requests: HashMap<Arc<str>, Arc<[Arc<str>]>>,
    /// The size of `requests` at which the parses no pod uses any more are dropped.
    prune_requests_at: usize,
}

/// What an update of the gauge counted again: the label of its duration's histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GaugeUpdate {
    /// Only the pods (and the pods of the ReplicaSets) that changed: what a pod event costs.
    Pods,
    /// A revision in force changed: every pod requesting that sidecar, and the changed pods.
    Revision,
    /// Everything: the first count, after a relist, a change of the webhook's reach or of a
    /// workload's opt-out, or once a quarter of the pods changed at once.
    Recount,
}

impl GaugeUpdate {
    pub fn as_str(self) -> &'static str {
        match self {
            GaugeUpdate::Pods => "pods",
            GaugeUpdate::Revision => "revision",
            GaugeUpdate::Recount => "recount",
        }
    }
}

/// `requests` is pruned no sooner than at this size, and then each time it has doubled.
const REQUESTS_PRUNED_FROM: usize = 1024;

impl DriftGauge {
    pub fn new(policy: DriftPolicy) -> Self {
        Self {
            policy,
            counted_against: None,
            per_pod: HashMap::new(),
            counts: HashMap::new(),
            requests: HashMap::new(),
            prune_requests_at: REQUESTS_PRUNED_FROM,
        }
    }

    /// Brings the counts up to date with the index's changes since the last call (the index
    /// must track changes: [`DriftIndex::track_changes`]) and returns them as the drift
    /// report's sidecar rows: every sidecar in force, then every requested one no config
    /// defines, sorted by name.
    pub fn update(
        &mut self,
        index: &mut DriftIndex,
        wanted: &RevisionsInForce,
    ) -> Vec<SidecarDrift> {
        self.update_telling_how(index, wanted).0
    }

    /// As [`DriftGauge::update`], with what the update had to count again.
    pub fn update_telling_how(
        &mut self,
        index: &mut DriftIndex,
        wanted: &RevisionsInForce,
    ) -> (Vec<SidecarDrift>, GaugeUpdate) {
        let changes = index.take_changes();
        let changed = match &self.counted_against {
            Some(counted) if !changes.everything => changed_sidecars(counted, wanted),
            _ => {
                self.recount(index, wanted);
                return (self.rows(wanted), GaugeUpdate::Recount);
            }
        };
        self.apply(index, wanted, &changes);
        let how = if changed.is_empty() {
            GaugeUpdate::Pods
        } else {
            self.reclassify_requesting(index, wanted, &changed);
            self.counted_against = Some(wanted.clone());
            GaugeUpdate::Revision
        };
        self.prune_requests();
        (self.rows(wanted), how)
    }

    fn recount(&mut self, index: &DriftIndex, wanted: &RevisionsInForce) {
        self.per_pod.clear();
        self.counts.clear();
        // Cached parses of texts no pod uses any more go with a full count.
        self.requests.clear();
        // A workload's pods mostly classify alike: each group is classified once and its pods
        // counted together, as the report does.
        let mut groups: HashMap<super::classify::AlikeKey, (Contribution, u32)> = HashMap::new();
        self.per_pod.reserve(index.pods.len());
        let labels_matter = index.labels_matter();
        for (key, pod) in &index.pods {
            let alike = classified_alike(&key.0, &key.1, pod, labels_matter);
            let (contribution, pods) = match groups.entry(alike) {
                Entry::Occupied(group) => group.into_mut(),
                Entry::Vacant(group) => {
                    group.insert((self.contribution(index, key, pod, wanted), 0))
                }
            };
            *pods += 1;
            self.per_pod.insert(key.clone(), contribution.clone());
        }
        for (contribution, pods) in groups.into_values() {
            self.count(&contribution, pods);
        }
        self.counted_against = Some(wanted.clone());
    }

    fn apply(&mut self, index: &DriftIndex, wanted: &RevisionsInForce, changes: &IndexChanges) {
        let mut again: Vec<Key> = changes.pods.iter().cloned().collect();
        if !changes.replicasets.is_empty() {
            // Pods owned by a ReplicaSet that appeared, went or changed its Deployment: found
            // by a scan that compares two strings per pod, far less than classifying them.
            again.extend(
                index
                    .pods
                    .iter()
                    .filter(|((namespace, _), pod)| match &pod.owner {
                        PodOwner::ReplicaSet(rs) => changes
                            .replicasets
                            .get(namespace)
                            .is_some_and(|names| names.contains(rs.as_ref())),
                        _ => false,
                    })
                    .map(|(key, _)| key.clone()),
            );
        }
        // A rollout changes its workload's pods by the dozen, alike: each kind is classified
        // once (as in a recount), its pods given one record.
        let labels_matter = index.labels_matter();
        let mut alike: HashMap<super::classify::AlikeKey, Contribution> = HashMap::new();
        for key in again {
            self.remove(&key);
            if let Some(pod) = index.pods.get(&key) {
                let contribution =
                    match alike.entry(classified_alike(&key.0, &key.1, pod, labels_matter)) {
                        Entry::Occupied(group) => group.get().clone(),
                        Entry::Vacant(group) => group
                            .insert(self.contribution(index, &key, pod, wanted))
                            .clone(),
                    };
                self.add(key, contribution);
            }
        }
    }

    /// After a revision change: the pods whose records name a sidecar in `changed` are
    /// classified again, the rest keep theirs (a pod's states depend on the revisions of the
    /// sidecars it requests only). Pods that share a record were classified alike, and
    /// nothing since has set them apart (any event about one gives it a record of its own), so
    /// each shared record is classified again once, for the first of its pods met, and its
    /// pods move in the counts together.
    fn reclassify_requesting(
        &mut self,
        index: &DriftIndex,
        wanted: &RevisionsInForce,
        changed: &[String],
    ) {
        // Keyed by the old record's address; the old record is held in the value, so no
        // address is freed and reused while the map lives.
        let mut again: HashMap<usize, (Contribution, Contribution, u32)> = HashMap::new();
        let names_changed = |c: &Contribution| {
            c.iter()
                .any(|(sidecar, _)| changed.iter().any(|n| **n == **sidecar))
        };
        let mut per_pod = std::mem::take(&mut self.per_pod);
        for (key, record) in &mut per_pod {
            if !names_changed(record) {
                continue;
            }
            let (_, new, pods) = match again.entry(Arc::as_ptr(record).cast::<()>() as usize) {
                Entry::Occupied(group) => group.into_mut(),
                Entry::Vacant(group) => {
                    let Some(pod) = index.pods.get(key) else {
                        continue;
                    };
                    let new = self.contribution(index, key, pod, wanted);
                    group.insert((record.clone(), new, 0))
                }
            };
            *pods += 1;
            *record = new.clone();
        }
        self.per_pod = per_pod;
        for (old, new, pods) in again.into_values() {
            self.uncount(&old, pods);
            self.count(&new, pods);
        }
    }

    /// Between full counts, pods with requests written many ways come and go: the parse of a
    /// text no pod uses any more is dropped, so that it does not keep the index's copy alive
    /// either. The text is shared with the index's interner (one holder) and this cache (one):
    /// any further holder is a pod.
    fn prune_requests(&mut self) {
        if self.requests.len() < self.prune_requests_at {
            return;
        }
        self.requests.retain(|text, _| Arc::strong_count(text) > 2);
        self.prune_requests_at = (self.requests.len() * 2).max(REQUESTS_PRUNED_FROM);
    }

    fn add(&mut self, key: Key, contribution: Contribution) {
        self.count(&contribution, 1);
        self.per_pod.insert(key, contribution);
    }

    fn remove(&mut self, key: &Key) {
        if let Some(contribution) = self.per_pod.remove(key) {
            self.uncount(&contribution, 1);
        }
    }

    /// Adds what `pods` pods with this record contribute to the counts.
    fn count(&mut self, contribution: &Contribution, pods: u32) {
        for (sidecar, state) in contribution.iter() {
            self.counts
                .entry(sidecar.clone())
                .or_default()
                .add_many(*state, pods);
        }
    }

    /// Takes back what `pods` pods with this record contributed; a sidecar no pod counts in
    /// any more leaves the counts.
    fn uncount(&mut self, contribution: &Contribution, pods: u32) {
        for (sidecar, state) in contribution.iter() {
            if let Some(counts) = self.counts.get_mut(sidecar) {
                counts.remove_many(*state, pods);
                if counts.total() == 0 {
                    self.counts.remove(sidecar);
                }
            }
        }
    }

    /// The same rule as the report's: excluded by namespace, labels or owner first, else the
    /// state of each requested sidecar.
    fn contribution(
        &mut self,
        index: &DriftIndex,
        key: &Key,
        pod: &PodEntry,
        wanted: &RevisionsInForce,
    ) -> Contribution {
        let (namespace, name) = key;
        let excluded = index.owner_excludes(namespace, name, pod, &self.policy)
            || index
                .pod_exclusion(namespace, &pod.labels, &self.policy)
                .is_some();
        let sidecars = self
            .requests
            .entry(pod.request.clone())
            .or_insert_with(|| {
                SidecarName::parse_list(&pod.request)
                    .map(|list| list.iter().map(|n| Arc::from(n.to_string())).collect())
                    .unwrap_or_else(|_| Arc::from([]))
            })
            .clone();
        let carried = pod.revision.as_deref().map(parse_revisions);
        sidecars
            .iter()
            .map(|sidecar| {
                let state = if excluded {
                    DriftState::Excluded
                } else {
                    let have = carried.as_ref().and_then(|items| {
                        items
                            .iter()
                            .find(|(n, _)| n.as_str() == sidecar.as_ref())
                            .map(|(_, r)| *r)
                    });
                    sidecar_state(pod.injected, have, wanted.get(sidecar))
                };
                (sidecar.clone(), state)
            })
            .collect()
    }

    fn rows(&self, wanted: &RevisionsInForce) -> Vec<SidecarDrift> {
        let row = |name: &str, revision: Option<&str>| SidecarDrift {
            name: name.to_owned(),
            revision: revision.map(str::to_owned),
            pods: self.counts.get(name).copied().unwrap_or_default(),
            // The metrics these rows feed count states, not forms.
            native: 0,
            campaign: None,
            expected_end: None,
            note: None,
            foreign: false,
        };
        let mut rows: Vec<SidecarDrift> = wanted
            .iter()
            .map(|(name, revision)| row(name, Some(revision)))
            .chain(
                self.counts
                    .keys()
                    .filter(|name| wanted.get(name).is_none())
                    .map(|name| row(name, None)),
            )
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows
    }
}

/// The sidecars whose revision differs between `before` and `after`, defined in one only
/// included.
fn changed_sidecars(before: &RevisionsInForce, after: &RevisionsInForce) -> Vec<String> {
    let mut changed: Vec<String> = after
        .iter()
        .filter(|(name, revision)| before.get(name) != Some(revision))
        .map(|(name, _)| name.to_owned())
        .collect();
    changed.extend(
        before
            .iter()
            .filter(|(name, _)| after.get(name).is_none())
            .map(|(name, _)| name.to_owned()),
    );
    changed
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::annotations::AnnotationKeys;
    use crate::drift::WorkloadEntry;
    use crate::test_fixtures::PodMeta;
    use crate::workload::WorkloadKind;

    #[derive(Clone, Debug)]
    enum Event {
        Pod {
            namespace: u8,
            pod: u8,
            owner: u8,
            request: u8,
            injected: bool,
            revision: u8,
        },
        DeletePod(u8, u8),
        ReplicaSet {
            namespace: u8,
            rs: u8,
            deployment: Option<u8>,
        },
        DeleteReplicaSet(u8, u8),
        Workload {
            namespace: u8,
            name: u8,
            disabled: bool,
        },
        DeleteWorkload(u8, u8),
        /// The revisions in force: bit 0 picks logger's, bit 1 drops tracer from the configs.
        Revisions(u8),
        /// The gauge brought up to date and compared with a full classification.
        Check,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            6 => (0..3u8, 0..12u8, 0..6u8, 0..3u8, any::<bool>(), 0..4u8).prop_map(
                |(namespace, pod, owner, request, injected, revision)| Event::Pod {
                    namespace, pod, owner, request, injected, revision,
                }
            ),
            2 => (0..3u8, 0..12u8).prop_map(|(n, p)| Event::DeletePod(n, p)),
            2 => (0..3u8, 0..3u8, proptest::option::of(0..2u8)).prop_map(
                |(namespace, rs, deployment)| Event::ReplicaSet { namespace, rs, deployment }
            ),
            1 => (0..3u8, 0..3u8).prop_map(|(n, r)| Event::DeleteReplicaSet(n, r)),
            1 => (0..3u8, 0..2u8, any::<bool>()).prop_map(
                |(namespace, name, disabled)| Event::Workload { namespace, name, disabled }
            ),
            1 => (0..3u8, 0..2u8).prop_map(|(n, w)| Event::DeleteWorkload(n, w)),
            1 => (0..4u8).prop_map(Event::Revisions),
            3 => Just(Event::Check),
        ]
    }

    fn wanted(revisions: u8) -> RevisionsInForce {
        let logger = if revisions & 1 == 1 {
            "bbbbbbbbbbbb"
        } else {
            "aaaaaaaaaaaa"
        };
        let tracer = (revisions & 2 == 0).then_some("cccccccccccc");
        [("logger:v1", Some(logger)), ("tracer:v1", tracer)]
            .into_iter()
            .filter_map(|(name, revision)| Some((name.to_owned(), revision?.to_owned())))
            .collect()
    }

    fn apply(index: &mut DriftIndex, event: &Event, keys: &AnnotationKeys) {
        let ns = |n: u8| format!("ns-{n}");
        match *event {
            Event::Pod {
                namespace,
                pod,
                owner,
                request,
                injected,
                revision,
            } => {
                let request = ["logger:v1", "logger:v1,tracer:v1", "orphan:v1"][request as usize];
                let mut meta = PodMeta::new(&ns(namespace), &format!("pod-{pod}")).request(request);
                meta = match owner {
                    0..=2 => meta.owner("ReplicaSet", &format!("rs-{owner}")),
                    3 => meta.owner("StatefulSet", "w-0"),
                    4 => meta.owner("Job", "job"),
                    _ => meta,
                };
                let stamp = [
                    None,
                    Some("logger:v1=aaaaaaaaaaaa"),
                    Some("logger:v1=bbbbbbbbbbbb"),
                    Some("logger:v1=aaaaaaaaaaaa,tracer:v1=cccccccccccc"),
                ][revision as usize];
                meta = match (injected, stamp) {
                    (true, Some(stamp)) => meta.injected(stamp),
                    (true, None) => meta.annotation("injector/status", "injected"),
                    (false, _) => meta,
                };
                index.apply_pod(&meta.0, keys);
            }
            Event::DeletePod(namespace, pod) => {
                index.delete_pod(&ns(namespace), &format!("pod-{pod}"))
            }
            Event::ReplicaSet {
                namespace,
                rs,
                deployment,
            } => {
                let mut meta = PodMeta::new(&ns(namespace), &format!("rs-{rs}"));
                if let Some(d) = deployment {
                    meta = meta.owner("Deployment", &format!("w-{d}"));
                }
                index.apply_replicaset(&meta.0);
            }
            Event::DeleteReplicaSet(namespace, rs) => {
                index.delete_replicaset(&ns(namespace), &format!("rs-{rs}"));
            }
            Event::Workload {
                namespace,
                name,
                disabled,
            } => {
                for kind in [WorkloadKind::Deployment, WorkloadKind::StatefulSet] {
                    let entry = WorkloadEntry {
                        rollout_disabled: disabled,
                        ..Default::default()
                    };
                    index.apply_workload_entry(kind, &ns(namespace), &format!("w-{name}"), entry);
                }
            }
            Event::DeleteWorkload(namespace, name) => {
                for kind in [WorkloadKind::Deployment, WorkloadKind::StatefulSet] {
                    index.delete_workload(kind, &ns(namespace), &format!("w-{name}"));
                }
            }
            Event::Revisions(_) | Event::Check => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// After any sequence of watch events and revision changes, the incremental counts
        /// are exactly those of a full classification.
        #[test]
        fn incremental_counts_equal_a_full_classification(events in proptest::collection::vec(event(), 1..80)) {
            let keys = AnnotationKeys::default();
            let policy = DriftPolicy {
                ignore_namespaces: ["ns-2".to_owned()].into(),
                ..Default::default()
            };
            let mut index = DriftIndex::default();
            index.track_changes();
            let mut gauge = DriftGauge::new(policy.clone());
            let mut revisions = 0;
            for event in events.iter().chain([&Event::Check]) {
                apply(&mut index, event, &keys);
                if let Event::Revisions(to) = event {
                    revisions = *to;
                }
                if matches!(event, Event::Check) {
                    let wanted = wanted(revisions);
                    let rows = gauge.update(&mut index, &wanted);
                    let full = index.classify_revisions(&wanted, &policy).sidecars;
                    prop_assert_eq!(rows, full);
                }
            }
        }
    }

    #[test]
    fn a_pod_event_recounts_that_pod_only() {
        let keys = AnnotationKeys::default();
        let mut index = DriftIndex::default();
        index.track_changes();
        for p in 0..100 {
            let meta = PodMeta::new("team", &format!("pod-{p}"))
                .request("logger:v1")
                .owner("StatefulSet", "db")
                .injected("logger:v1=aaaaaaaaaaaa");
            index.apply_pod(&meta.0, &keys);
        }
        let mut gauge = DriftGauge::new(DriftPolicy::default());
        let wanted = wanted(1);
        let rows = gauge.update(&mut index, &wanted);
        assert_eq!(rows[0].pods.stale, 100);
        let meta = PodMeta::new("team", "pod-7")
            .request("logger:v1")
            .owner("StatefulSet", "db")
            .injected("logger:v1=bbbbbbbbbbbb");
        index.apply_pod(&meta.0, &keys);
        let pending = index.pending_changes().unwrap();
        assert!(!pending.everything);
        assert_eq!(pending.pods.len(), 1);
        let rows = gauge.update(&mut index, &wanted);
        assert_eq!((rows[0].pods.stale, rows[0].pods.current), (99, 1));
        // A status-only update (same annotations) is no change at all.
        index.apply_pod(&meta.0, &keys);
        assert!(index.pending_changes().unwrap().pods.is_empty());
    }

    #[test]
    fn a_replicaset_sends_the_gauge_to_its_pods_only_when_some_are_indexed() {
        let keys = AnnotationKeys::default();
        let replicaset = |name: &str| PodMeta::new("team", name).owner("Deployment", "web").0;
        let pod = |name: &str, rs: &str| {
            PodMeta::new("team", name)
                .request("logger:v1")
                .owner("ReplicaSet", rs)
                .injected("logger:v1=aaaaaaaaaaaa")
                .0
        };
        let mut index = DriftIndex::default();
        index.track_changes();
        let mut gauge = DriftGauge::new(DriftPolicy::default());
        let wanted = wanted(0);
        gauge.update(&mut index, &wanted);
        // A rollout's new ReplicaSet comes before its pods: nothing to look for.
        index.apply_replicaset(&replicaset("web-1"));
        assert!(index.pending_changes().unwrap().replicasets.is_empty());
        index.apply_pod(&pod("web-1-a", "web-1"), &keys);
        // Pods seen before their ReplicaSet (another watch) were counted with no Deployment
        // known: its coming sends the gauge to them.
        index.apply_pod(&pod("web-2-a", "web-2"), &keys);
        index.apply_pod(&pod("web-2-b", "web-2"), &keys);
        gauge.update(&mut index, &wanted);
        index.apply_replicaset(&replicaset("web-2"));
        let pending = index.pending_changes().unwrap();
        assert_eq!(
            pending.replicasets.get("team").map(|names| names.len()),
            Some(1)
        );
        let rows = gauge.update(&mut index, &wanted);
        let full = index.classify_revisions(&wanted, &DriftPolicy::default());
        assert_eq!(rows, full.sidecars);
        assert_eq!(full.workloads.len(), 1, "{:#?}", full.workloads);
        // Its pods gone, an old ReplicaSet's deletion asks for nothing either.
        index.delete_pod("team", "web-2-a");
        index.delete_pod("team", "web-2-b");
        gauge.update(&mut index, &wanted);
        index.delete_replicaset("team", "web-2");
        assert!(index.pending_changes().unwrap().replicasets.is_empty());
        assert_eq!(
            gauge.update(&mut index, &wanted),
            index
                .classify_revisions(&wanted, &DriftPolicy::default())
                .sidecars
        );
    }

    #[test]
    fn a_revision_change_classifies_again_only_the_pods_that_request_the_sidecar() {
        let keys = AnnotationKeys::default();
        let mut index = DriftIndex::default();
        index.track_changes();
        let workloads = [
            ("db", 100, "logger:v1", "logger:v1=aaaaaaaaaaaa"),
            (
                "cache",
                50,
                "logger:v1,tracer:v1",
                "logger:v1=aaaaaaaaaaaa,tracer:v1=cccccccccccc",
            ),
        ];
        for (owner, pods, request, stamp) in workloads {
            for p in 0..pods {
                let meta = PodMeta::new("team", &format!("{owner}-{p}"))
                    .request(request)
                    .owner("StatefulSet", owner)
                    .injected(stamp);
                index.apply_pod(&meta.0, &keys);
            }
        }
        let policy = DriftPolicy::default();
        let mut gauge = DriftGauge::new(policy.clone());
        gauge.update(&mut index, &wanted(0));
        let record = |gauge: &DriftGauge, name: &str| {
            gauge.per_pod[&(Arc::from("team"), Box::from(name))].clone()
        };
        let (db_before, cache_before) = (record(&gauge, "db-0"), record(&gauge, "cache-0"));

        // tracer's config is removed; logger's revision stays.
        let rows = gauge.update(&mut index, &wanted(2));
        assert_eq!(rows, index.classify_revisions(&wanted(2), &policy).sidecars);
        let tracer = rows.iter().find(|row| row.name == "tracer:v1").unwrap();
        assert_eq!(
            (tracer.revision.as_deref(), tracer.pods.total()),
            (None, 50)
        );
        for p in 0..100 {
            assert!(
                Arc::ptr_eq(&record(&gauge, &format!("db-{p}")), &db_before),
                "db-{p} requests no changed sidecar and keeps its record"
            );
        }
        let cache_after = record(&gauge, "cache-0");
        assert!(!Arc::ptr_eq(&cache_after, &cache_before));
        for p in 0..50 {
            assert!(
                Arc::ptr_eq(&record(&gauge, &format!("cache-{p}")), &cache_after),
                "cache-{p} was classified with its group, once"
            );
        }
    }

    /// Requests written many ways (spacing, case, another sidecar each) by pods that come and
    /// go: the parses kept for them go too, and so do the texts the index keeps once, while
    /// the counts stay right.
    fn logger(rows: &[SidecarDrift]) -> StateCounts {
        rows.iter()
            .find(|row| row.name == "logger:v1")
            .unwrap()
            .pods
    }

    #[test]
    fn requests_of_deleted_pods_are_not_kept() {
        let keys = AnnotationKeys::default();
        let mut index = DriftIndex::default();
        index.track_changes();
        let mut gauge = DriftGauge::new(DriftPolicy::default());
        let wanted = wanted(1);
        let steady = PodMeta::new("team", "steady")
            .request("logger:v1")
            .owner("StatefulSet", "db")
            .injected("logger:v1=bbbbbbbbbbbb");
        index.apply_pod(&steady.0, &keys);
        gauge.update(&mut index, &wanted);
        for i in 0..5000 {
            let name = format!("job-{i}");
            let meta = PodMeta::new("batch", &name)
                .request(&format!("logger:v1, job-{i}:v1"))
                .owner("StatefulSet", "db");
            index.apply_pod(&meta.0, &keys);
            let rows = gauge.update(&mut index, &wanted);
            assert_eq!(logger(&rows).uninjected, 1, "job-{i} counted: {rows:?}");
            index.delete_pod("batch", &name);
            gauge.update(&mut index, &wanted);
        }
        let rows = gauge.update(&mut index, &wanted);
        assert_eq!(
            rows.len(),
            2,
            "only the sidecars in force are left: {rows:?}"
        );
        assert_eq!((logger(&rows).current, logger(&rows).uninjected), (1, 0));
        assert!(
            gauge.requests.len() < 2500,
            "{} parses kept",
            gauge.requests.len()
        );
        assert!(
            index.interned.len() < 2500,
            "{} strings kept",
            index.interned.len()
        );
    }
}
