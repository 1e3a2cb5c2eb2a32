//! Feeds the [`DriftIndex`] from metadata-only watches (pods, ReplicaSets, and the three
//! workload kinds; never specs, never a LIST on a timer: the watcher relists on its own, with
//! backoff) and keeps the `sidecar_injector_pods{sidecar,state}` gauge current whenever the
//! index or the config snapshot changes.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::info;

use super::watch::{Change, events_noting_failures, is_refusal, watch_noting_failures};
use crate::annotations::AnnotationKeys;
use crate::config::SidecarSet;
use crate::drift::{DriftGauge, DriftIndex, DriftPolicy, DriftReport, WebhookReach, WorkloadEntry};
use crate::metrics::Metrics;
use crate::workload::WorkloadKind;

/// What the watches feed: the index, a counter bumped on every change, whether every watch
/// has completed its first list (nothing is planned before), and the versions of the pods
/// someone follows.
#[derive(Clone)]
pub(crate) struct DriftFeed {
    pub(crate) index: Arc<Mutex<DriftIndex>>,
    pub(crate) changes: watch::Receiver<u64>,
    pub(crate) synced: watch::Receiver<bool>,
    /// The first refusal (401, 403, 404) of a list the index cannot go without (pods,
    /// ReplicaSets, workloads): `serve` retries on, a one-shot command gives up at once.
    pub(crate) refused: watch::Receiver<Option<String>>,
    pub(crate) followed: FollowedPods,
}

/// What the pod watch last saw of a followed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PodSeen {
    /// Nothing since it was followed.
    Nothing,
    /// Its resourceVersion.
    Version(String),
    Deleted,
}

/// What the engine read of a followed pod (its resourceVersion; `None`: not found) and what the
/// pod watch had seen of it just before: whether the watch has news of it since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodRead {
    pub(crate) read: Option<String>,
    pub(crate) seen_at_read: PodSeen,
}

impl PodRead {
    /// `pod` as the engine just read or wrote it (`None`: not found), with what the pod watch
    /// had seen of it just before (`None`: nothing).
    pub(crate) fn of(pod: Option<&Pod>, seen_before: Option<PodSeen>) -> Self {
        Self {
            read: pod.and_then(|p| p.metadata.resource_version.clone()),
            seen_at_read: seen_before.unwrap_or(PodSeen::Nothing),
        }
    }

    /// Whether the pod changed since it was read, as far as the pod watch knows: something the
    /// watch saw after that read other than the version read (the watch may lag behind a
    /// read), its deletion included. A pod the watch was not told to follow is read.
    pub(crate) fn changed(&self, seen: Option<&PodSeen>) -> bool {
        match seen {
            None => true,
            Some(PodSeen::Nothing) => false,
            Some(seen) => {
                *seen != self.seen_at_read
                    && !matches!(seen, PodSeen::Version(v) if Some(v) == self.read.as_ref())
            }
        }
    }
}

/// The pods the rollout engine follows (those it upgrades in place, those of a workload whose
/// health bake is down), by namespace and name, with what the pod watch last saw of each. Their
/// container states change with nothing the index keeps; this says when reading one again is
/// worth a request, without a second watch or a timer. Looked up without allocating: the pod
/// watch asks about every pod event. A pod followed twice (upgraded in place, then baked) is
/// followed until both forget it.
#[derive(Clone, Debug, Default)]
pub(crate) struct FollowedPods(Arc<Mutex<HashMap<String, HashMap<String, Followed>>>>);

#[derive(Debug)]
struct Followed {
    followers: usize,
    seen: PodSeen,
    /// A relist is under way that has not listed it (yet).
    unlisted: bool,
}

impl FollowedPods {
    pub(crate) fn follow(&self, namespace: &str, name: &str) {
        self.lock()
            .entry(namespace.to_owned())
            .or_default()
            .entry(name.to_owned())
            .or_insert(Followed {
                followers: 0,
                seen: PodSeen::Nothing,
                // Followed midway through a relist, it may have been listed already.
                unlisted: false,
            })
            .followers += 1;
    }

    pub(crate) fn forget(&self, namespace: &str, name: &str) {
        let mut followed = self.lock();
        let Some(pods) = followed.get_mut(namespace) else {
            return;
        };
        if let Some(pod) = pods.get_mut(name) {
            pod.followers = pod.followers.saturating_sub(1);
            if pod.followers == 0 {
                pods.remove(name);
            }
        }
        if pods.is_empty() {
            followed.remove(namespace);
        }
    }

    /// What the watch last saw of a followed pod (`None`: not followed).
    pub(crate) fn seen(&self, namespace: &str, name: &str) -> Option<PodSeen> {
        Some(self.lock().get(namespace)?.get(name)?.seen.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Followed>>> {
        self.0.lock().expect("followed pods lock")
    }

    fn saw(&self, meta: &ObjectMeta, seen: impl FnOnce() -> PodSeen) {
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        if let Some(entry) = self
            .lock()
            .get_mut(namespace.as_str())
            .and_then(|pods| pods.get_mut(name.as_str()))
        {
            entry.seen = seen();
            entry.unlisted = false;
        }
    }

    /// The pod watch saw a pod created or changed.
    pub(crate) fn applied(&self, meta: &ObjectMeta) {
        if let Some(version) = &meta.resource_version {
            self.saw(meta, || PodSeen::Version(version.clone()));
        }
    }

    fn deleted(&self, meta: &ObjectMeta) {
        self.saw(meta, || PodSeen::Deleted);
    }

    /// A relist starts: what it lists comes as [`FollowedPods::applied`], then
    /// [`FollowedPods::relist_done`].
    fn relist_started(&self) {
        for pod in self.lock().values_mut().flat_map(HashMap::values_mut) {
            pod.unlisted = true;
        }
    }

    /// The relist is over: a followed pod it did not list is gone.
    fn relist_done(&self) {
        for pod in self.lock().values_mut().flat_map(HashMap::values_mut) {
            if std::mem::take(&mut pod.unlisted) {
                pod.seen = PodSeen::Deleted;
            }
        }
    }
}

/// Shared by the feeds: bumps the change counter and counts first lists.
struct Signals {
    changes: watch::Sender<u64>,
    synced: watch::Sender<bool>,
    refused: watch::Sender<Option<String>>,
    lists_done: AtomicUsize,
    /// How many feeds list before the index counts as synced.
    feeds: usize,
}

impl Signals {
    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    fn listed(&self, first: &mut bool) {
        if std::mem::take(first) {
            self.count_first_list();
        }
        self.changed();
    }

    /// Counts a feed's first list once, for a feed that may also give up on it.
    fn first_list_once(&self, counted: &AtomicBool) {
        if !counted.swap(true, Ordering::AcqRel) {
            self.count_first_list();
        }
    }

    /// A failed first list of a feed that [`Signals::first_list_once`] counts: a refusal
    /// stands for it (the index goes without what the feed would know), but a failure a retry
    /// may mend (an API server blip at start-up) holds the sync until the retry lists, so
    /// nothing is planned without it.
    fn first_list_failed(&self, counted: &AtomicBool, err: &watcher::Error) {
        if is_refusal(err) {
            self.first_list_once(counted);
        }
    }

    /// A failure of a feed the index cannot go without: its first refusal is said once.
    fn failed(&self, err: &watcher::Error) {
        if is_refusal(err) {
            self.refused.send_if_modified(|refused| {
                refused.is_none() && {
                    *refused = Some(super::error_text(err));
                    true
                }
            });
        }
    }

    fn count_first_list(&self) {
        let done = self.lists_done.fetch_add(1, Ordering::AcqRel) + 1;
        if done == self.feeds {
            self.synced.send_replace(true);
        }
    }
}

/// Quiet time before the gauge is recomputed after a change, so a burst of events costs one
/// classification.
const RECOMPUTE_DEBOUNCE: Duration = Duration::from_millis(500);

#[derive(Clone, Copy)]
enum Feed {
    Pods,
    ReplicaSets,
}

fn apply(index: &mut DriftIndex, feed: Feed, meta: &ObjectMeta, keys: &AnnotationKeys) {
    match feed {
        Feed::Pods => index.apply_pod(meta, keys),
        Feed::ReplicaSets => index.apply_replicaset(meta),
    }
}

fn delete(index: &mut DriftIndex, feed: Feed, meta: &ObjectMeta) {
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return;
    };
    match feed {
        Feed::Pods => index.delete_pod(namespace, name),
        Feed::ReplicaSets => index.delete_replicaset(namespace, name),
    }
}

fn start_relist(index: &mut DriftIndex, feed: Feed) {
    match feed {
        Feed::Pods => index.start_pod_relist(),
        Feed::ReplicaSets => index.start_replicaset_relist(),
    }
}

fn end_relist(index: &mut DriftIndex, feed: Feed) {
    match feed {
        Feed::Pods => index.end_pod_relist(),
        Feed::ReplicaSets => index.end_replicaset_relist(),
    }
}

/// Workloads are watched in full, for planning fields metadata lacks (strategy, partition,
/// paused, status), and stripped on arrival: only the [`WorkloadEntry`] stays.
async fn feed_workloads<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: WorkloadKind,
    strip: fn(&K, &AnnotationKeys) -> WorkloadEntry,
    index: Arc<Mutex<DriftIndex>>,
    keys: AnnotationKeys,
    signals: Arc<Signals>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let project_keys = keys.clone();
    let failed = signals.clone();
    let mut changes = watch_noting_failures(
        api,
        config,
        "workload",
        move |object: K| {
            let meta = object.meta();
            Some((
                meta.namespace.clone()?,
                meta.name.clone()?,
                strip(&object, &project_keys),
            ))
        },
        move |err| failed.failed(err),
    );
    let mut first = true;
    while let Some(change) = changes.next().await {
        let mut index = index.lock().expect("drift index lock");
        match change {
            Change::Listed(entries) => {
                index.reset_workload_entries(kind, entries);
                signals.listed(&mut first);
            }
            Change::Applied((namespace, name, entry)) => {
                index.apply_workload_entry(kind, &namespace, &name, entry);
                signals.changed();
            }
            Change::Deleted((namespace, name, _)) => {
                index.delete_workload(kind, &namespace, &name);
                signals.changed();
            }
        }
    }
}

async fn feed<K>(
    api: Api<PartialObjectMeta<K>>,
    config: watcher::Config,
    feed: Feed,
    index: Arc<Mutex<DriftIndex>>,
    keys: AnnotationKeys,
    signals: Arc<Signals>,
    followed: Option<FollowedPods>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    PartialObjectMeta<K>:
        Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let failed = signals.clone();
    // A relist is applied as it streams in: at 50,000 pods, holding it whole until its end
    // (as `Change::Listed` would) held ~90 MiB more after the first sync.
    let mut events = events_noting_failures(
        api,
        config,
        "drift",
        |object: PartialObjectMeta<K>| Some(without_managed_fields(object.metadata)),
        move |err| failed.failed(err),
    );
    let mut first = true;
    while let Some(event) = events.next().await {
        let mut index = index.lock().expect("drift index lock");
        match event {
            Event::Init => {
                start_relist(&mut index, feed);
                if let Some(followed) = &followed {
                    followed.relist_started();
                }
            }
            // Not a change to plan on yet: the relist's end is.
            Event::InitApply(meta) => {
                apply(&mut index, feed, &meta, &keys);
                if let Some(followed) = &followed {
                    followed.applied(&meta);
                }
            }
            Event::InitDone => {
                end_relist(&mut index, feed);
                if let Some(followed) = &followed {
                    followed.relist_done();
                }
                signals.listed(&mut first);
            }
            Event::Apply(meta) => {
                apply(&mut index, feed, &meta, &keys);
                if let Some(followed) = &followed {
                    followed.applied(&meta);
                }
                signals.changed();
            }
            Event::Delete(meta) => {
                delete(&mut index, feed, &meta);
                if let Some(followed) = &followed {
                    followed.deleted(&meta);
                }
                signals.changed();
            }
        }
    }
}

/// What decides which pods are sent to injection at all.
#[derive(Clone, Debug)]
pub(crate) enum Reach {
    /// The webhook configuration of that name, followed.
    WebhookConfiguration(String),
    /// The bindings of `serve --injection=policy`, whose selector is known from the start.
    PolicyBindings(crate::drift::WebhookReach),
}

/// How long the cluster may take to be listed by a one-shot command.
const SYNC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Why a one-shot command's feed was not listed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListError {
    #[error("the cluster was not listed within {SYNC_DEADLINE:?}")]
    NotInTime,
    #[error("the watches stopped")]
    Stopped,
    /// Listing the cluster's pods, ReplicaSets or workloads, which planning a rollout needs
    /// across every namespace, is refused (a user whose rights stop at a team's namespaces).
    #[error(
        "the rollout plan needs the pods, ReplicaSets and workloads of every namespace, and listing them is refused to you: {0}"
    )]
    Refused(String),
}

/// The drift feed (pods, ReplicaSets, workloads), once the cluster has been listed. A list
/// the API server refuses ends the wait at once ([`ListError::Refused`]): no retry mends it.
pub(crate) async fn listed(
    client: &Client,
    keys: AnnotationKeys,
    webhook_configuration: Option<String>,
) -> Result<DriftFeed, ListError> {
    let feed = start(
        client.clone(),
        keys,
        webhook_configuration.map(Reach::WebhookConfiguration),
    );
    let (mut synced, mut refused) = (feed.synced.clone(), feed.refused.clone());
    let listed = async {
        tokio::select! {
            synced = synced.wait_for(|s| *s) => synced.map(|_| None),
            refused = refused.wait_for(Option::is_some) => refused.map(|r| r.clone()),
        }
    };
    let refusal = tokio::time::timeout(SYNC_DEADLINE, listed)
        .await
        .map_err(|_| ListError::NotInTime)?
        .map_err(|_| ListError::Stopped)?;
    match refusal {
        Some(refusal) => Err(ListError::Refused(refusal)),
        None => Ok(feed),
    }
}

/// Starts the watches; they run until the process ends.
///
/// With `reach`, the namespaces (and a webhook configuration) are followed as well, so that
/// pods of namespaces its namespaceSelector leaves out count as excluded.
pub(crate) fn start(client: Client, keys: AnnotationKeys, reach: Option<Reach>) -> DriftFeed {
    let index = Arc::new(Mutex::new(DriftIndex::default()));
    let (changes_tx, changes) = watch::channel(0u64);
    let (synced_tx, synced) = watch::channel(false);
    let (refused_tx, refused) = watch::channel(None);
    let changed = Arc::new(Signals {
        changes: changes_tx,
        synced: synced_tx,
        refused: refused_tx,
        lists_done: AtomicUsize::new(0),
        feeds: 5 + match reach {
            Some(Reach::WebhookConfiguration(_)) => 2,
            Some(Reach::PolicyBindings(_)) => 1,
            None => 0,
        },
    });
    let followed = FollowedPods::default();
    {
        let (index, changed, followed) = (index.clone(), changed.clone(), followed.clone());
        tokio::spawn(async move {
            let config = super::watch::large_list_config(&client).await;
            if let Some(reach) = reach {
                follow_reach(&client, reach, &config, &index, &changed);
            }
            spawn_feeds(client, config, index, keys, changed, followed);
        });
    }
    info!("watching pods, ReplicaSets and workloads for drift");
    DriftFeed {
        index,
        changes,
        synced,
        refused,
        followed,
    }
}

/// The watches of pods, ReplicaSets and workloads, each making its first list as `config`
/// says.
fn spawn_feeds(
    client: Client,
    config: watcher::Config,
    index: Arc<Mutex<DriftIndex>>,
    keys: AnnotationKeys,
    changed: Arc<Signals>,
    followed: FollowedPods,
) {
    tokio::spawn(feed(
        Api::<PartialObjectMeta<Pod>>::all(client.clone()),
        config.clone(),
        Feed::Pods,
        index.clone(),
        keys.clone(),
        changed.clone(),
        Some(followed.clone()),
    ));
    tokio::spawn(feed(
        Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()),
        config.clone(),
        Feed::ReplicaSets,
        index.clone(),
        keys.clone(),
        changed.clone(),
        None,
    ));
    tokio::spawn(feed_workloads(
        Api::<Deployment>::all(client.clone()),
        config.clone(),
        WorkloadKind::Deployment,
        WorkloadEntry::from_deployment,
        index.clone(),
        keys.clone(),
        changed.clone(),
    ));
    tokio::spawn(feed_workloads(
        Api::<StatefulSet>::all(client.clone()),
        config.clone(),
        WorkloadKind::StatefulSet,
        WorkloadEntry::from_statefulset,
        index.clone(),
        keys.clone(),
        changed.clone(),
    ));
    tokio::spawn(feed_workloads(
        Api::<DaemonSet>::all(client),
        config,
        WorkloadKind::DaemonSet,
        WorkloadEntry::from_daemonset,
        index.clone(),
        keys,
        changed.clone(),
    ));
}

/// Follows the webhook configuration `name` and every namespace's labels into the index.
/// Neither holds the sync back when the server refuses it (no rights to list namespaces,
/// say): the index then counts every namespace as reached, as it did before. A list that
/// failed otherwise holds the sync until its retry lists.
fn follow_reach(
    client: &Client,
    reach: Reach,
    config: &watcher::Config,
    index: &Arc<Mutex<DriftIndex>>,
    signals: &Arc<Signals>,
) {
    match reach {
        Reach::PolicyBindings(reach) => index
            .lock()
            .expect("drift index lock")
            .set_webhook_reach(Some(reach)),
        Reach::WebhookConfiguration(name) => {
            follow_webhook_configuration(client, name, index, signals)
        }
    }
    follow(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config.clone(),
        "namespace",
        |namespace: PartialObjectMeta<Namespace>| Some(without_managed_fields(namespace.metadata)),
        (index.clone(), signals.clone()),
        |index, change| match change {
            Change::Listed(metas) => index.reset_namespaces(&metas),
            Change::Applied(meta) => index.apply_namespace(&meta),
            Change::Deleted(meta) => index.delete_namespace(meta.name.as_deref().unwrap_or("")),
        },
    );
}

/// Follows the webhook configuration `name` (its namespaceSelector and objectSelector) into
/// the index.
fn follow_webhook_configuration(
    client: &Client,
    name: String,
    index: &Arc<Mutex<DriftIndex>>,
    signals: &Arc<Signals>,
) {
    follow(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
        "webhook configuration (its namespaceSelector and objectSelector)",
        |configuration| Some(WebhookReach::of(&configuration)),
        (index.clone(), signals.clone()),
        |index, change| {
            index.set_webhook_reach(match change {
                Change::Listed(mut listed) => listed.pop(),
                Change::Applied(reach) => Some(reach),
                Change::Deleted(_) => None,
            });
        },
    );
}

/// Feeds `api`'s changes into the index with `apply`: a feed whose first list counts towards
/// the sync whether it listed or was refused (401, 403, 404); any other failure waits for
/// the retry.
fn follow<K, T>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    project: impl FnMut(K) -> Option<T> + Send + 'static,
    (index, signals): (Arc<Mutex<DriftIndex>>, Arc<Signals>),
    mut apply: impl FnMut(&mut DriftIndex, Change<T>) + Send + 'static,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Send + 'static,
{
    let counted = Arc::new(AtomicBool::new(false));
    let failed = {
        let (signals, counted) = (signals.clone(), counted.clone());
        move |err: &watcher::Error| signals.first_list_failed(&counted, err)
    };
    let mut changes = watch_noting_failures(api, config, what, project, failed);
    tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            apply(&mut index.lock().expect("drift index lock"), change);
            signals.first_list_once(&counted);
            signals.changed();
        }
    });
}

/// Keeps the `sidecar_injector_pods` gauge current, counting again only the pods that changed
/// since the last count; runs until the process ends.
pub(crate) fn spawn_gauge(
    feed: DriftFeed,
    policy: DriftPolicy,
    mut sidecars: watch::Receiver<Arc<SidecarSet>>,
    metrics: Arc<Metrics>,
) {
    let DriftFeed {
        index, mut changes, ..
    } = feed;
    index.lock().expect("drift index lock").track_changes();
    let mut gauge = DriftGauge::new(policy);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                result = changes.changed() => if result.is_err() { return },
                result = sidecars.changed() => if result.is_err() { return },
            }
            tokio::time::sleep(RECOMPUTE_DEBOUNCE).await;
            changes.borrow_and_update();
            let wanted = sidecars.borrow_and_update().revisions_in_force();
            let mut index = index.lock().expect("drift index lock");
            // The update's own cost: the wait for the lock (a plan holding the index) is
            // the plan's, in its histogram.
            let updating = std::time::Instant::now();
            let (rows, how) = gauge.update_telling_how(&mut index, &wanted);
            drop(index);
            metrics
                .drift_gauge_update_duration
                .get_or_create(&crate::metrics::GaugeUpdateLabels {
                    update: how.as_str(),
                })
                .observe(updating.elapsed().as_secs_f64());
            metrics.record_drift(&DriftReport {
                sidecars: rows,
                workloads: Vec::new(),
            });
        }
    });
}

/// Metadata without its managedFields, which nothing here reads and which is most of a
/// controller-made pod's metadata (a list of 50,000 pods held it all until the list ended).
fn without_managed_fields(mut meta: ObjectMeta) -> ObjectMeta {
    meta.managed_fields = None;
    meta
}

#[cfg(test)]
mod tests;
