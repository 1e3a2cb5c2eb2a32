//! The health bake's reads. A baked workload's pods are read (GET, one per pod) when its health
//! drops, again each time the pod watch sees one of them change, or the index sees one come or
//! go, while it stays down, and once at the bake's end: never on a timer, and not at all while
//! nothing happens. The planner says when to read; this reads, and tells it before each plan
//! whether the pods changed since their last read.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use tracing::{debug, info};

use super::{Authority, Engine};
use crate::cluster::drift_feed::{DriftFeed, FollowedPods, PodRead};
use crate::rollout;
use crate::rollout::analysis::{MetricQuery, Outcome, Reading};
use crate::workload::WorkloadRef;

/// A baked workload's pods as last read: those the index listed then, each as read. They stay
/// followed by the pod watch until the bake no longer needs them.
#[derive(Debug, Default)]
pub(super) struct BakeRead {
    pods: BTreeMap<String, PodRead>,
}

impl BakeRead {
    /// Whether a read now could find something the last one did not: a pod the pod watch saw
    /// change since, or one listed now that was not then (or the reverse). `listed` is asked
    /// only when no pod changed (it scans the index).
    fn changed(
        &self,
        namespace: &str,
        followed: &FollowedPods,
        listed: impl FnOnce() -> Vec<String>,
    ) -> bool {
        self.pods
            .iter()
            .any(|(name, read)| read.changed(followed.seen(namespace, name).as_ref()))
            || {
                let listed = listed();
                listed.len() != self.pods.len()
                    || listed.iter().any(|name| !self.pods.contains_key(name))
            }
    }

    pub(super) fn forget(&self, namespace: &str, followed: &FollowedPods) {
        for name in self.pods.keys() {
            followed.forget(namespace, name);
        }
    }
}

impl Engine {
    /// The bakes whose pods changed since they were last read, for the plan about to be made.
    /// The planner reads them again only then, and only while the workload's health is down:
    /// a healthy one is not asked about (nor the index scanned for its pods).
    pub(super) fn bakes_changed(&self, feed: &DriftFeed) -> BTreeSet<WorkloadRef> {
        let index = feed.index.lock().expect("drift index lock");
        self.state
            .baking
            .keys()
            .filter(|workload| {
                let (Some(read), Some(kind)) =
                    (self.bake_pods.get(*workload), workload.controller_kind())
                else {
                    return false;
                };
                let (namespace, name) = (workload.namespace.as_str(), workload.name.as_str());
                let healthy = index
                    .workload(kind, namespace, name)
                    .is_some_and(|entry| rollout::rolled_out(kind, entry));
                !healthy
                    && read.changed(namespace, &feed.followed, || {
                        index.pod_names(kind, namespace, name)
                    })
            })
            .cloned()
            .collect()
    }

    /// A bake began. Bakes are followed by every process that plans, acting or not: the
    /// one-shot CLI watching a `serve` that acts must see them end too (reads are GETs, and
    /// rare); the one that acts says so.
    pub(super) fn bake_started(
        &mut self,
        started: &WorkloadRef,
        followed: &FollowedPods,
        authority: Authority,
    ) {
        let bake = humantime::format_duration(self.options.settings.bake);
        if authority == Authority::Act {
            info!(workload = %started, "rolled out with every pod current: baking for {bake} before it counts as succeeded");
        } else {
            debug!(workload = %started, "rolled out with every pod current: baking for {bake}");
        }
        // What was read for a bake of another target says nothing of this one.
        if let Some(stale) = self.bake_pods.remove(started) {
            stale.forget(&started.namespace, followed);
        }
    }

    /// Reads the pods of a workload whose bake the plan asks about, and hands what their
    /// containers show to the state for the next plan (which follows at once). A read that
    /// fails is asked again by a later plan.
    pub(super) async fn read_bake(
        &mut self,
        workload: WorkloadRef,
        pods: Vec<String>,
        followed: &FollowedPods,
    ) {
        let namespace = &workload.namespace;
        // Followed from before the reads, so that no change after one goes unseen.
        for pod in &pods {
            followed.follow(namespace, pod);
        }
        let mut problems = Vec::new();
        let mut read = BakeRead::default();
        for pod in &pods {
            let (found, pod_read) = match self.read_followed_pod(namespace, pod, followed).await {
                Ok(found) => found,
                Err(err) => {
                    for pod in &pods {
                        followed.forget(namespace, pod);
                    }
                    self.failed(&err);
                    self.retry_later();
                    return;
                }
            };
            if let Some(found) = &found {
                let baseline = found
                    .metadata
                    .uid
                    .as_ref()
                    .and_then(|uid| self.state.upgraded_baseline(&workload, uid));
                problems.extend(rollout::container_problems_since(found, baseline));
            }
            read.pods.insert(pod.clone(), pod_read);
        }
        if let Some(earlier) = self.bake_pods.insert(workload.clone(), read) {
            earlier.forget(namespace, followed);
        }
        if let Some(wake) = self
            .state
            .on_bake_read(&workload, &problems, Timestamp::now())
        {
            self.wake_at(wake);
        }
    }
}

impl Engine {
    /// Evaluates a metric check of a bake against `--prometheus-url` and hands the reading to
    /// the state for the next plan (which follows at once); without a Prometheus to ask, the
    /// check has no value, and says so.
    pub(super) async fn evaluate_check(&mut self, query: MetricQuery) {
        let now = Timestamp::now();
        let reading = match &self.options.prometheus {
            Some(prometheus) => prometheus.query(&query.query, now).await,
            None => {
                Reading::Unknown("no --prometheus-url is given to evaluate it against".to_owned())
            }
        };
        let outcome = query.check.judge(&reading);
        self.metrics.record_check(&query.key, outcome);
        let said = crate::render::check_reading(&query.check, &reading);
        let key = &query.key;
        match outcome {
            Outcome::Pass => {
                debug!(workload = %query.workload, check = %key, "metric check {key}: {said}");
            }
            Outcome::Fail | Outcome::Unknown => {
                info!(workload = %query.workload, check = %key, query = %query.query, "metric check {key}: {said}");
            }
        }
        if let Some(wake) = self.state.on_check_read(&query, reading, now) {
            self.wake_at(wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::cluster::drift_feed::PodSeen;
    use crate::test_fixtures::PodMeta;

    fn read_at(pods: &[(&str, &str)], followed: &FollowedPods) -> BakeRead {
        let mut read = BakeRead::default();
        for (name, version) in pods {
            followed.follow("shop", name);
            read.pods.insert(
                (*name).to_owned(),
                PodRead {
                    read: Some((*version).to_owned()),
                    seen_at_read: PodSeen::Nothing,
                },
            );
        }
        read
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_bake_read_is_out_of_date_once_a_pod_changed_came_or_went() {
        let followed = FollowedPods::default();
        let read = read_at(&[("web-1", "4"), ("web-2", "5")], &followed);
        let listed = || names(&["web-1", "web-2"]);
        assert!(!read.changed("shop", &followed, listed), "nothing since");
        assert!(
            read.changed("shop", &followed, || names(&["web-1", "web-2", "web-3"])),
            "a pod came"
        );
        assert!(
            read.changed("shop", &followed, || names(&["web-1"])),
            "a pod went"
        );
        assert!(
            read.changed("shop", &followed, || names(&["web-1", "web-3"])),
            "one replaced by another"
        );

        // What the pod watch sees of a pod read: its own version is no news, a later one is,
        // and then the index is not scanned for the list.
        followed.applied(&meta("web-2", "5"));
        assert!(!read.changed("shop", &followed, listed));
        followed.applied(&meta("web-2", "6"));
        assert!(read.changed("shop", &followed, || unreachable!("no scan needed")));

        // Forgotten once the bake is over: nothing of them is left followed.
        read.forget("shop", &followed);
        assert_eq!(followed.seen("shop", "web-1"), None);
        assert_eq!(followed.seen("shop", "web-2"), None);
    }

    fn meta(name: &str, version: &str) -> ObjectMeta {
        PodMeta::new("shop", name).version(version).0
    }
}
