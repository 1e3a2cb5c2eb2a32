//! Pods replaced one at a time without touching the template: OnDelete workloads by eviction,
//! and sidecar images upgraded in place (a pod patch, after a dry-run eviction asks the
//! PodDisruptionBudgets). The plan says which workload; this says which pod, and when.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::{ActionError, Engine, with_timeout};
use crate::cluster::drift_feed::{FollowedPods, PodRead};
use crate::config::RevisionStamp;
use crate::drift::PodToReplace;
use crate::metrics::{EngineCall, RolloutResult};
use crate::rollout;
use crate::rollout::eviction::BlockNews;
use crate::rollout::in_place::{self, InPlaceUpgrade};
use crate::rollout::machine::{Effect, RolloutState, UpgradeNews};
use crate::workload::WorkloadRef;

/// What an in-place patch changes: `logger -> l:2, shipper resized to requests.memory 128Mi`.
fn described(patch: &in_place::InPlacePatch) -> String {
    let images = patch.upgraded.iter().map(|(c, i)| format!("{c} -> {i}"));
    let resized = patch.resized.iter().map(|(c, figures)| {
        let figures: Vec<String> = figures.iter().map(ToString::to_string).collect();
        format!("{c} resized to {}", figures.join(", "))
    });
    images.chain(resized).collect::<Vec<_>>().join(", ")
}

/// Whether a 404 is the API server's (it serves no `resize` subresource), not the pod's.
fn no_resize_subresource(e: &kube::core::Status) -> bool {
    e.message.contains("could not find the requested resource")
}

/// How a resize request went.
enum Resized {
    /// Accepted; the pod's generation after it.
    Yes(Option<i64>),
    /// Refused for what it asks.
    Refused(in_place::ResizeRefusal),
    /// Not now (the pod changed, or the request failed): a later plan tries again.
    Later,
}

impl Engine {
    /// Reads again each pod being upgraded in place once the pod watch saw it change (its
    /// container states are not in the index, but each change comes through the watch and
    /// wakes the engine) or once its minReadySeconds are up, and hands it to the state to
    /// judge ([`RolloutState::on_upgrade_read`]).
    pub(super) async fn follow_upgrades(&mut self, followed: &FollowedPods) {
        let workloads: Vec<WorkloadRef> = self.state.upgrades.keys().cloned().collect();
        for workload in workloads {
            let Some(under_way) = self.state.upgrades.get(&workload) else {
                continue;
            };
            let upgrade = under_way.upgrade.clone();
            let (namespace, name) = (upgrade.namespace.as_str(), upgrade.pod.as_str());
            let available = self.state.upgrade_available(&workload, Timestamp::now());
            let changed = self
                .upgrade_reads
                .get(&workload)
                .is_none_or(|read| read.changed(followed.seen(namespace, name).as_ref()));
            if !available && !changed {
                continue;
            }
            let (pod, read) = match self.read_followed_pod(namespace, name, followed).await {
                Ok(found) => found,
                Err(err) => {
                    self.failed(&err);
                    self.retry_later();
                    continue;
                }
            };
            self.upgrade_reads.insert(workload.clone(), read);
            let Some(news) = self
                .state
                .on_upgrade_read(&workload, pod.as_ref(), Timestamp::now())
            else {
                continue;
            };
            match news {
                UpgradeNews::Pending => continue,
                UpgradeNews::Ready { available_at } => {
                    info!(workload = %workload, pod = name, "{name} upgraded in place and Ready; the next pod waits until it is available at {available_at} (minReadySeconds)");
                    self.wake_at(available_at);
                    continue;
                }
                UpgradeNews::Done => {
                    info!(workload = %workload, pod = name, "upgraded in place: {} running and ready, the pod Ready, no other container restarted",
                        upgrade.containers().join(", "));
                }
                UpgradeNews::Failed(reason) => {
                    warn!(workload = %workload, pod = name, "in-place upgrade failed: {reason}");
                    self.metrics
                        .record_rollout(workload.kind, RolloutResult::InPlaceFailed);
                }
            }
            self.upgrade_reads.remove(&workload);
            followed.forget(namespace, name);
            self.wake_at(Timestamp::now());
        }
    }

    /// Whether the PodDisruptionBudgets would let `pod` go now, asked by a dry-run eviction;
    /// when they would not (or the API cannot say), a later plan asks again.
    async fn budget_allows(&mut self, workload: &WorkloadRef, pod: &str) -> bool {
        match self.evict_as(&workload.namespace, pod, true).await {
            Ok(true) => true,
            Ok(false) => {
                self.metrics
                    .record_rollout(workload.kind, RolloutResult::EvictionBlocked);
                info!(workload = %workload, pod, "in-place upgrade waits: a PodDisruptionBudget allows no disruption now");
                self.wake_at(RolloutState::blocked_retry(Timestamp::now()));
                false
            }
            Err(err) => {
                self.failed(&err);
                self.retry_later();
                false
            }
        }
    }

    /// Upgrades `next`, the pod the state picked of a workload upgraded in place, when a
    /// PodDisruptionBudget would let it go (a dry-run eviction asks); a pod whose own revision
    /// cannot be upgraded in place (several revisions behind) is evicted instead.
    #[allow(clippy::too_many_arguments)] // the fields of one effect
    pub(super) async fn upgrade_pod(
        &mut self,
        workload: &WorkloadRef,
        next: &PodToReplace,
        heal: bool,
        target: &RevisionStamp,
        healthy: bool,
        min_ready: Duration,
        followed: &FollowedPods,
    ) {
        let namespace = workload.namespace.as_str();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        // A heal touches a pod that is unavailable already: no budget to ask.
        if !heal && !self.budget_allows(workload, &next.name).await {
            return;
        }
        let Some(pod) = self.read_pod(namespace, &next.name).await else {
            return;
        };
        if heal && !in_place::unavailable(&pod) {
            // Ready after all: it waits for its workload's health like any other pod.
            return;
        }
        let patch = match in_place::pod_patch(&pod, &self.options.keys, target, &self.revisions) {
            Ok(patch) => patch,
            Err(why) => {
                info!(workload = %workload, pod = next.name, "not upgradable in place ({why}); evicting it instead");
                self.evict_instead(workload, next, healthy).await;
                return;
            }
        };
        if heal {
            info!(workload = %workload, pod = next.name, "healing first: {} carries a revision whose rollout failed and is not Ready; upgraded now, whatever the workload's health", next.name);
        }
        let upgrade = InPlaceUpgrade::of(&pod, &patch, min_ready);
        // Followed from before the patch, so that no change after it goes unseen (followed
        // already, by its workload's bake, what the watch saw of it then is no news either).
        followed.follow(namespace, &next.name);
        let seen_at_patch = followed.seen(namespace, &next.name);
        let resized = match &patch.resize {
            None => None,
            Some(resize) => match self.resize(&api, workload, next, resize, followed).await {
                Resized::Yes(generation) => generation,
                Resized::Refused(refusal) => {
                    followed.forget(namespace, &next.name);
                    let containers: Vec<&String> = patch.resized.keys().collect();
                    let failure = refusal.failure(&next.name, &containers);
                    self.resize_refused(workload, next, healthy, &refusal, failure)
                        .await;
                    return;
                }
                Resized::Later => return,
            },
        };
        self.metrics.record_api_request(EngineCall::PatchPod);
        match with_timeout(api.patch(
            &next.name,
            &PatchParams::default(),
            &Patch::<()>::Json(patch.patch.to_json_patch()),
        ))
        .await
        {
            Ok(patched) => {
                let changes = described(&patch);
                info!(workload = %workload, pod = next.name, revision = patch.revision, "upgrading in place: {changes}");
                self.metrics
                    .record_rollout(workload.kind, RolloutResult::UpgradedInPlace);
                // Read again once the watch sees a version other than the patch's own.
                self.upgrade_reads
                    .insert(workload.clone(), PodRead::of(Some(&patched), seen_at_patch));
                let upgrade = upgrade.patched(patched.metadata.generation.max(resized));
                self.state.on_upgrade_started(workload, upgrade);
            }
            // The pod changed since it was read (the test of its uid or a container failed):
            // read again at the next plan.
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 || e.code == 404 => {
                followed.forget(namespace, &next.name);
                self.wake_at(rollout::after(Timestamp::now(), Duration::from_secs(1)));
            }
            Err(source) => {
                followed.forget(namespace, &next.name);
                self.failed(&ActionError::PatchPod {
                    namespace: namespace.to_owned(),
                    pod: next.name.clone(),
                    source,
                });
                self.retry_later();
            }
        }
    }

    /// Resizes `next` through its `resize` subresource (the first of its two patches): the
    /// pod's generation after it, or a refusal of the resize itself, or, when the pod changed
    /// since it was read (or the request failed), nothing until a later plan.
    async fn resize(
        &mut self,
        api: &Api<Pod>,
        workload: &WorkloadRef,
        next: &PodToReplace,
        resize: &crate::injection::json_patch::JsonPatch<'static>,
        followed: &FollowedPods,
    ) -> Resized {
        self.metrics.record_api_request(EngineCall::ResizePod);
        let patch = Patch::<()>::Json(resize.to_json_patch());
        match with_timeout(api.patch_subresource(
            "resize",
            &next.name,
            &PatchParams::default(),
            &patch,
        ))
        .await
        {
            Ok(resized) => Resized::Yes(resized.metadata.generation),
            // A failed test of the uid or a container's name: the pod changed since it was read
            // (or is gone).
            Err(kube::Error::Api(e))
                if e.code == 409
                    || (e.code == 404 && !no_resize_subresource(&e))
                    || e.message.contains("test failed") =>
            {
                followed.forget(&workload.namespace, &next.name);
                self.wake_at(rollout::after(Timestamp::now(), Duration::from_secs(1)));
                Resized::Later
            }
            // Invalid (a node without resize, a figure above its limit), not allowed (no
            // `patch` on `pods/resize`) or not served (an API server without resize): no later
            // try would be accepted either.
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 403 || e.code == 404 => {
                Resized::Refused(in_place::ResizeRefusal {
                    code: e.code,
                    message: e.message.clone(),
                    causes: e
                        .details
                        .iter()
                        .flat_map(|d| d.causes.iter())
                        .map(|c| c.reason.clone())
                        .collect(),
                })
            }
            Err(source) => {
                followed.forget(&workload.namespace, &next.name);
                self.failed(&ActionError::ResizePod {
                    namespace: workload.namespace.clone(),
                    pod: next.name.clone(),
                    source,
                });
                self.retry_later();
                Resized::Later
            }
        }
    }

    /// After the API server refused to resize `next`: its workload's restart fails where the
    /// node cannot fit the resize (`failure`), else the pod is evicted instead.
    async fn resize_refused(
        &mut self,
        workload: &WorkloadRef,
        next: &PodToReplace,
        healthy: bool,
        refusal: &in_place::ResizeRefusal,
        failure: Option<String>,
    ) {
        match failure {
            Some(reason) => {
                warn!(workload = %workload, pod = next.name, "in-place upgrade failed: {reason}");
                self.metrics
                    .record_rollout(workload.kind, RolloutResult::InPlaceFailed);
                self.state.on_upgrade_refused(workload, reason);
                self.wake_at(Timestamp::now());
            }
            None => {
                info!(workload = %workload, pod = next.name, "the API server refused to resize it ({} ({})); evicting it instead", refusal.message, refusal.code);
                self.evict_instead(workload, next, healthy).await;
            }
        }
    }

    /// Evicts `next` of a workload upgraded in place, when it cannot be: as its next eviction.
    async fn evict_instead(&mut self, workload: &WorkloadRef, next: &PodToReplace, healthy: bool) {
        let now = Timestamp::now();
        match self
            .state
            .next_eviction(workload, std::slice::from_ref(next), healthy, now)
        {
            Ok(Effect::EvictPod { pod, heal, .. }) => self.evict_pod(workload, pod, heal).await,
            Err(Some(spaced)) => self.wake_at(spaced),
            _ => {}
        }
    }

    /// Reads a pod of a workload being replaced; `None` when it is gone, or the read failed
    /// (said, and tried again later).
    async fn read_pod(&mut self, namespace: &str, name: &str) -> Option<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        self.metrics.record_api_request(EngineCall::ReadPod);
        match with_timeout(api.get_opt(name)).await {
            Ok(pod) => pod,
            Err(source) => {
                self.failed(&ActionError::ReadPod {
                    namespace: namespace.to_owned(),
                    pod: name.to_owned(),
                    source,
                });
                self.retry_later();
                None
            }
        }
    }

    /// Evicts a pod; `Ok(false)` when a PodDisruptionBudget blocks it for now (429).
    pub(super) async fn evict(&self, namespace: &str, pod: &str) -> Result<bool, ActionError> {
        self.evict_as(namespace, pod, false).await
    }

    /// [`Engine::evict`], or with `dry_run` only asked (`?dryRun=All` on the eviction, a create
    /// of its subresource: the API server checks the budgets and evicts nothing).
    async fn evict_as(
        &self,
        namespace: &str,
        pod: &str,
        dry_run: bool,
    ) -> Result<bool, ActionError> {
        self.metrics.record_api_request(EngineCall::Evict);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = EvictParams {
            post_options: PostParams {
                dry_run,
                ..Default::default()
            },
            ..Default::default()
        };
        match with_timeout(api.evict(pod, &params)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 429 => Ok(false),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
            Err(source) => Err(ActionError::Evict {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
                source,
            }),
        }
    }

    /// Evicts `pod`, the stale pod the state picked of an OnDelete workload (or one that
    /// cannot be upgraded in place); a heal only if the pod is indeed not Ready.
    pub(super) async fn evict_pod(
        &mut self,
        workload: &WorkloadRef,
        pod: PodToReplace,
        heal: bool,
    ) {
        let now = Timestamp::now();
        let name = pod.name.clone();
        let name = name.as_str();
        if heal {
            let Some(read) = self.read_pod(&workload.namespace, name).await else {
                return;
            };
            if !in_place::unavailable(&read) {
                return;
            }
            info!(workload = %workload, pod = name, "healing first: {name} carries a revision whose rollout failed and is not Ready; evicted now, whatever the workload's health");
        }
        match self.evict(&workload.namespace, name).await {
            Ok(true) => {
                if pod.injected {
                    info!(workload = %workload, pod = name, "evicted a stale pod (OnDelete)");
                } else {
                    info!(workload = %workload, pod = name, "evicted a pod created without its sidecars (OnDelete; the webhook was bypassed)");
                }
                self.metrics
                    .record_rollout(workload.kind, RolloutResult::Evicted);
                let due = self.state.on_evicted(workload, pod, Timestamp::now());
                self.wake_at(due);
            }
            Ok(false) => {
                self.metrics
                    .record_rollout(workload.kind, RolloutResult::EvictionBlocked);
                let timeout = self.options.settings.eviction_timeout;
                let (news, retry) = self.state.on_eviction_blocked(workload, now, timeout);
                self.wake_at(retry);
                match news {
                    BlockNews::First => {
                        info!(workload = %workload, pod = name, "eviction blocked by a PodDisruptionBudget; retrying, never forcing");
                    }
                    BlockNews::Quiet => {}
                    BlockNews::Overdue { blocked_for } => {
                        let note = format!(
                            "a PodDisruptionBudget has refused to let {name} go for {} (--eviction-timeout {}): its rollout waits, retried every {}s and never forced, and fails at --rollout-timeout unless the budget allows a disruption",
                            humantime::format_duration(Duration::from_secs(blocked_for.as_secs())),
                            humantime::format_duration(timeout),
                            rollout::eviction::OVERDUE_RETRY.as_secs()
                        );
                        warn!(workload = %workload, pod = name, "{note}");
                        self.event(
                            workload,
                            EventType::Warning,
                            "EvictionBlocked",
                            "Evict",
                            &note,
                        )
                        .await;
                    }
                }
            }
            Err(err) => {
                self.failed(&err);
                self.retry_later();
            }
        }
    }
}
