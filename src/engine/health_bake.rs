//! The health bake's reads. A baked workload's pods are read (GET, one per pod) when its health
//! drops, again each time the pod watch sees one of them change, or the index sees one come or
//! go, while it stays down, and once at the bake's end: never on a timer, and not at all while
//! nothing happens. The planner says when to read; this reads, and tells it before each plan
//! whether the pods changed since their last read.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use tracing::{debug, info};

use super::{Authority, Engine};
use crate::cluster::drift_feed::{DriftFeed, FollowedPods, PodRead};
use crate::rollout::{self, RolloutPlan};
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

    fn forget(&self, namespace: &str, followed: &FollowedPods) {
        for name in self.pods.keys() {
            followed.forget(namespace, name);
        }
    }
}

impl Engine {
    /// Tells each bake, for the plan about to be made, whether its pods changed since they
    /// were last read. The planner reads them again only then, and only while the workload's
    /// health is down: a healthy one is not asked about (nor the index scanned for its pods).
    pub(super) fn note_bake_changes(&mut self, feed: &DriftFeed) {
        let index = feed.index.lock().expect("drift index lock");
        for (workload, bake) in &mut self.baking {
            bake.pods_changed = false;
            let (Some(read), Some(kind)) =
                (self.bake_pods.get(workload), workload.controller_kind())
            else {
                continue;
            };
            let (namespace, name) = (workload.namespace.as_str(), workload.name.as_str());
            let healthy = index
                .workload(kind, namespace, name)
                .is_some_and(|entry| rollout::rolled_out(kind, entry));
            if !healthy {
                bake.pods_changed = read.changed(namespace, &feed.followed, || {
                    index.pod_names(kind, namespace, name)
                });
            }
        }
    }

    /// Bakes are followed by every process that plans, acting or not: the one-shot CLI
    /// watching a `serve` that acts must see them end too (reads are GETs, and rare).
    pub(super) async fn follow_bakes(
        &mut self,
        plan: &RolloutPlan,
        reads: Vec<(WorkloadRef, Vec<String>)>,
        now: Timestamp,
        followed: &FollowedPods,
        authority: Authority,
    ) {
        // Kept while rolling, and once passed while succeeded (so it is not baked again).
        self.baking.retain(|w, _| {
            plan.rolling.iter().any(|r| &r.workload == w) || plan.succeeded.contains(w)
        });
        self.upgraded
            .retain(|w, _| plan.rolling.iter().any(|r| &r.workload == w));
        for passed in &plan.succeeded {
            if let Some(bake) = self.baking.get_mut(passed) {
                bake.passed = true;
            }
        }
        for (started, target) in &plan.bakes_started {
            let bake = humantime::format_duration(self.options.settings.bake);
            // Said by the process that acts; one that only plans follows the bake quietly.
            if authority == Authority::Act {
                info!(workload = %started, "rolled out with every pod current: baking for {bake} before it counts as succeeded");
            } else {
                debug!(workload = %started, "rolled out with every pod current: baking for {bake}");
            }
            self.baking.insert(
                started.clone(),
                rollout::Bake {
                    target: target.clone(),
                    since: now,
                    ..Default::default()
                },
            );
            // What was read for a bake of another target says nothing of this one.
            if let Some(stale) = self.bake_pods.remove(started) {
                stale.forget(&started.namespace, followed);
            }
        }
        self.read_bakes(reads, followed).await;
        // A bake that passed or failed reads nothing more: its pods are no longer followed.
        let baking = &self.baking;
        self.bake_pods.retain(|workload, read| {
            let open = baking
                .get(workload)
                .is_some_and(|b| !b.passed && b.problem.is_none());
            if !open {
                read.forget(&workload.namespace, followed);
            }
            open
        });
    }

    /// Reads the pods of each workload whose bake the plan asks about, and remembers what
    /// their containers show for the next plan (which follows at once). A read that fails is
    /// asked again by a later plan.
    async fn read_bakes(
        &mut self,
        reads: Vec<(WorkloadRef, Vec<String>)>,
        followed: &FollowedPods,
    ) {
        for (workload, pods) in reads {
            let namespace = &workload.namespace;
            // Followed from before the reads, so that no change after one goes unseen.
            for pod in &pods {
                followed.follow(namespace, pod);
            }
            let mut problems = Vec::new();
            let mut read = BakeRead::default();
            let mut failure = None;
            for pod in &pods {
                let (found, pod_read) = match self.read_followed_pod(namespace, pod, followed).await
                {
                    Ok(found) => found,
                    Err(err) => {
                        failure = Some(err);
                        break;
                    }
                };
                if let Some(found) = &found {
                    let baseline = found.metadata.uid.as_ref().and_then(|uid| {
                        self.upgraded.get(&workload).and_then(|pods| pods.get(uid))
                    });
                    problems.extend(rollout::container_problems_since(found, baseline));
                }
                read.pods.insert(pod.clone(), pod_read);
            }
            if let Some(err) = failure {
                for pod in &pods {
                    followed.forget(namespace, pod);
                }
                self.failed(&err);
                self.retry_later();
                continue;
            }
            if let Some(earlier) = self.bake_pods.insert(workload.clone(), read) {
                earlier.forget(namespace, followed);
            }
            let read_at = Timestamp::now();
            if let Some(bake) = self.baking.get_mut(&workload) {
                bake.read_at = Some(read_at);
                if bake.problem.is_none() && !problems.is_empty() {
                    bake.problem = Some(problems.join("; "));
                }
                self.wake_at(read_at);
            }
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
