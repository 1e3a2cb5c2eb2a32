//! In-place upgrades: when a new revision of a sidecar differs from the one a pod runs only in
//! the images, CPU and memory of its injected containers, the live pod is patched (the kubelet
//! restarts just the containers whose image changed, and resizes the others as their
//! `resizePolicy` says) instead of restarting the workload. Pure: which revisions qualify, the
//! patches of one pod, and how an upgrade under way is going.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::history::RevisionHistory;
use crate::annotations::AnnotationKeys;
use crate::config::RevisionStamp;
use crate::config::revision::stamp_items;
use crate::drift::PodToReplace;
use crate::injection::json_patch::JsonPatch;

mod resize;

pub use resize::{Figure, QosClass, ResizeRefusal, qos_class};

/// Whether the engine may upgrade sidecars in place (`--in-place`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InPlaceMode {
    /// In place whenever only images, CPU and memory of injected containers change (and the sidecar's config
    /// does not say `rollout: {inPlace: false}`).
    #[default]
    Auto,
    /// Always restart the workload.
    Off,
}

/// Why a restart is not an in-place upgrade: the plan says it ("restarted, not upgraded in
/// place: ...") and the engine logs it when it evicts a pod it could not patch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotInPlace {
    #[error("a container's image was removed")]
    ImageRemoved,
    #[error("containers changed beyond their images, CPU and memory: {ONLY_IN_PLACE}")]
    BeyondImages,
    #[error("{} changed: {ONLY_IN_PLACE}", fields.join(", "))]
    FieldsChanged { fields: Vec<String> },
    #[error("the resources of {container} changed beyond requests and limits: {ONLY_IN_PLACE}")]
    ResourcesBeyondCpuMemory { container: String },
    #[error("{resource} of {container} changed: only CPU and memory are resized in place")]
    NotResizable { container: String, resource: String },
    #[error("{figure} of {container} is removed, which no resize can do")]
    ResourceRemoved { container: String, figure: String },
    #[error(
        "the pod sets pod-level resources, which a sidecar's resize would change and which are not resized in place"
    )]
    PodLevelResources,
    #[error("resizing {container} would change the pod's QoS class from {from} to {to}")]
    QosClassWouldChange {
        container: String,
        from: QosClass,
        to: QosClass,
    },
    #[error("nothing to change")]
    NothingToChange,
    #[error("revision {revision} of {sidecar} is not in the history")]
    NotInHistory { sidecar: String, revision: String },
    #[error("{sidecar}: {why}")]
    OfSidecar {
        sidecar: String,
        why: Box<NotInPlace>,
    },
    #[error("{sidecar}'s config says rollout: {{inPlace: false}}")]
    TurnedOff { sidecar: String },
    #[error("pods without a revision of {sidecar} are recreated")]
    PodsWithoutRevision { sidecar: String },
    #[error("{sidecar}: no revision to upgrade from")]
    NoRevisionToUpgradeFrom { sidecar: String },
    #[error("strategy Recreate")]
    Recreate,
    #[error("maxUnavailable 0 lets no pod be unavailable while its sidecar restarts")]
    NoPodMayBeUnavailable,
    #[error("the pod carries no revision")]
    PodWithoutRevision,
    #[error("the pod has no uid")]
    PodWithoutUid,
    #[error("the pod was never injected with {sidecar}")]
    NeverInjected { sidecar: String },
    #[error("the pod is current")]
    PodCurrent,
    #[error("the pod has no container {container}")]
    NoSuchContainer { container: String },
}

const ONLY_IN_PLACE: &str =
    "only a change of injected containers' images, CPU and memory is made in place";

/// The lists of the injected content whose containers may change in place.
const REGULAR: [&str; 2] = ["containers", "prependContainers"];

/// What changes in one injected container: its image, its CPU and memory figures, or both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerChange {
    pub image: Option<String>,
    pub resources: Vec<Figure>,
}

/// What changes in each injected container whose image, CPU or memory differs from `from` to
/// `to`, when nothing else differs; else why not.
pub fn container_changes(
    from: &Value,
    to: &Value,
) -> Result<BTreeMap<String, ContainerChange>, NotInPlace> {
    let mut changes: BTreeMap<String, ContainerChange> = BTreeMap::new();
    let mut from = from.clone();
    for list in REGULAR {
        let Some(new) = to.get(list).and_then(Value::as_array) else {
            continue;
        };
        let Some(old) = from.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in new {
            let name = container.get("name").and_then(Value::as_str);
            let image = container.get("image");
            let Some(own) = old
                .iter_mut()
                .find(|c| c.get("name").and_then(Value::as_str) == name)
            else {
                continue;
            };
            let Some(name) = name else { continue };
            if own.get("image") != image {
                let Some(image) = image.and_then(Value::as_str) else {
                    return Err(NotInPlace::ImageRemoved);
                };
                changes.entry(name.to_owned()).or_default().image = Some(image.to_owned());
                own["image"] = Value::String(image.to_owned());
            }
            let resources = container.get("resources");
            if own.get("resources") != resources {
                let figures = resize::figures(name, own.get("resources"), resources)?;
                changes.entry(name.to_owned()).or_default().resources = figures;
                match resources {
                    Some(resources) => own["resources"] = resources.clone(),
                    None => {
                        own.as_object_mut().map(|o| o.remove("resources"));
                    }
                }
            }
        }
    }
    if &from != to {
        let mut differ: Vec<String> = Vec::new();
        let keys = |v: &Value| -> Vec<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        let mut all = keys(&from);
        all.extend(keys(to));
        all.sort();
        all.dedup();
        for key in &all {
            if from.get(key) != to.get(key) {
                differ.push(key.clone());
            }
        }
        return Err(if differ.iter().all(|k| REGULAR.contains(&k.as_str())) {
            NotInPlace::BeyondImages
        } else {
            NotInPlace::FieldsChanged { fields: differ }
        });
    }
    if changes.is_empty() {
        return Err(NotInPlace::NothingToChange);
    }
    Ok(changes)
}

/// Why `sidecar` cannot go from `from` to `to` in place, or what changes in each container.
pub fn sidecar_changes(
    history: &RevisionHistory,
    sidecar: &str,
    from: &str,
    to: &str,
) -> Result<BTreeMap<String, ContainerChange>, NotInPlace> {
    let content = |revision: &str| {
        history
            .entries(sidecar)
            .iter()
            .find(|e| e.revision == revision)
            .map(|e| &e.content)
            .ok_or_else(|| NotInPlace::NotInHistory {
                sidecar: sidecar.to_owned(),
                revision: revision.to_owned(),
            })
    };
    container_changes(content(from)?, content(to)?).map_err(|why| NotInPlace::OfSidecar {
        sidecar: sidecar.to_owned(),
        why: Box::new(why),
    })
}

/// The patches that upgrade one pod in place, and what they change.
#[derive(Clone, Debug, PartialEq)]
pub struct InPlacePatch {
    /// The pod's own patch: images and `NS/revision`.
    pub patch: JsonPatch<'static>,
    /// The patch of the pod's `resize` subresource, sent first, when CPU or memory changes: the
    /// API server takes container resources through it alone, and drops anything else it holds.
    pub resize: Option<JsonPatch<'static>>,
    /// The containers whose image it sets, with the image.
    pub upgraded: BTreeMap<String, String>,
    /// The containers it resizes, with the figures it sets.
    pub resized: BTreeMap<String, Vec<Figure>>,
    /// The pod's `NS/revision` after the patch.
    pub revision: String,
}

impl InPlacePatch {
    /// Every container the upgrade changes.
    pub fn containers(&self) -> impl Iterator<Item = &String> {
        let resized_only = self
            .resized
            .keys()
            .filter(|c| !self.upgraded.contains_key(*c));
        self.upgraded.keys().chain(resized_only)
    }
}

/// The patches that bring `pod` to `target` in place: each of its sidecars whose revision
/// differs goes through [`sidecar_changes`]. Each patch is guarded by a test of the pod's uid
/// and of each container's name, so a pod changed or replaced since it was read is not
/// patched; `NS/revision` is set with the images, after the resize.
pub fn pod_patch(
    pod: &Pod,
    keys: &AnnotationKeys,
    target: &RevisionStamp,
    history: &RevisionHistory,
) -> Result<InPlacePatch, NotInPlace> {
    let annotations = pod.metadata.annotations.as_ref();
    let carried = annotations
        .and_then(|a| a.get(&keys.revision))
        .ok_or(NotInPlace::PodWithoutRevision)?;
    let uid = pod
        .metadata
        .uid
        .as_deref()
        .ok_or(NotInPlace::PodWithoutUid)?;
    let mut items: Vec<(String, String)> = stamp_items(carried)
        .map(|(s, r)| (s.to_owned(), r.to_owned()))
        .collect();
    let mut changes: BTreeMap<String, ContainerChange> = BTreeMap::new();
    for (sidecar, to) in target.items() {
        let Some(item) = items.iter_mut().find(|(s, _)| s == sidecar) else {
            return Err(NotInPlace::NeverInjected {
                sidecar: sidecar.to_owned(),
            });
        };
        if item.1 != to {
            changes.extend(sidecar_changes(history, sidecar, &item.1, to)?);
            item.1 = to.to_owned();
        }
    }
    if changes.is_empty() {
        return Err(NotInPlace::PodCurrent);
    }
    let mut spec = pod.spec.clone().unwrap_or_default();
    let mut patch = JsonPatch::default();
    patch.test(&["metadata", "uid"], json!(uid).into());
    let mut resize = JsonPatch::default();
    resize.test(&["metadata", "uid"], json!(uid).into());
    let (mut upgraded, mut resized) = (BTreeMap::new(), BTreeMap::new());
    let qos_before = qos_class(&spec);
    for (name, change) in changes {
        let (list, index) = container_position(&spec, &name)?;
        let at = index.to_string();
        if let Some(image) = change.image {
            patch.test(&["spec", list, &at, "name"], json!(name).into());
            patch.set(&["spec", list, &at, "image"], true, json!(image).into());
            upgraded.insert(name.clone(), image);
        }
        if change.resources.is_empty() {
            continue;
        }
        if resize::has_pod_level_resources(&spec) {
            return Err(NotInPlace::PodLevelResources);
        }
        let container = match list {
            "containers" => &mut spec.containers[index],
            _ => &mut spec.init_containers.get_or_insert_default()[index],
        };
        let resources = resize::resized(container, &change.resources);
        container.resources = serde_json::from_value(resources.clone()).ok();
        let qos_after = qos_class(&spec);
        if qos_after != qos_before {
            return Err(NotInPlace::QosClassWouldChange {
                container: name,
                from: qos_before,
                to: qos_after,
            });
        }
        resize.test(&["spec", list, &at, "name"], json!(name).into());
        resize.set(&["spec", list, &at, "resources"], true, resources.into());
        resized.insert(name, change.resources);
    }
    let revision = items
        .iter()
        .map(|(s, r)| format!("{s}={r}"))
        .collect::<Vec<_>>()
        .join(",");
    patch.set(
        &["metadata", "annotations", &keys.revision],
        true,
        json!(revision).into(),
    );
    Ok(InPlacePatch {
        patch,
        resize: (!resized.is_empty()).then_some(resize),
        upgraded,
        resized,
        revision,
    })
}

/// Where an injected container is in a pod: a regular container, or a native sidecar (an init
/// container, which the kubelet upgrades and resizes alone too).
fn container_position(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    name: &str,
) -> Result<(&'static str, usize), NotInPlace> {
    if let Some(index) = spec.containers.iter().position(|c| c.name == name) {
        return Ok(("containers", index));
    }
    spec.init_containers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .position(|c| c.name == name && crate::config::is_native_sidecar(c))
        .map(|index| ("initContainers", index))
        .ok_or_else(|| NotInPlace::NoSuchContainer {
            container: name.to_owned(),
        })
}

/// The pod [`next_upgrade`] or [`super::eviction::next_eviction`] picks, and whether only because
/// a failed revision of ours broke it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextPod<'p> {
    pub pod: &'p PodToReplace,
    /// Picked while its workload is unhealthy, because it carries a revision whose campaign
    /// failed: it is replaced only if it is indeed unavailable (not Ready), which replacing it
    /// cannot make worse; a Ready one waits for the workload's health like any other.
    pub heal: bool,
}

/// The next pod of a workload upgraded in place (`stale` sorted, the last first), or none: one
/// pod at a time (none while one of its pods is `upgrading`), and none once an upgrade of one of
/// its pods `failed`: that fails its restart at the next plan, and until then no other pod is
/// touched. Pods that carry a revision whose campaign failed (`broken`) come first, whatever the
/// workload's health (see [`NextPod::heal`]); the others only while the workload is healthy.
pub fn next_upgrade<'p>(
    stale: &'p [PodToReplace],
    healthy: bool,
    upgrading: bool,
    failed: bool,
    broken: impl Fn(&PodToReplace) -> bool,
) -> Option<NextPod<'p>> {
    if upgrading || failed {
        return None;
    }
    broken_first(stale, healthy, broken)
}

/// Of `stale` (sorted, the last first), a pod carrying a failed revision (`broken`) whatever
/// the workload's health, else the next one while it is healthy.
pub(super) fn broken_first<'p>(
    stale: &'p [PodToReplace],
    healthy: bool,
    broken: impl Fn(&PodToReplace) -> bool,
) -> Option<NextPod<'p>> {
    if let Some(pod) = stale.iter().rev().find(|p| broken(p)) {
        return Some(NextPod {
            pod,
            heal: !healthy,
        });
    }
    stale
        .last()
        .filter(|_| healthy)
        .map(|pod| NextPod { pod, heal: false })
}

/// Whether a pod is unavailable: not Ready (pending, backing off, failing its probe).
pub fn unavailable(pod: &Pod) -> bool {
    ready_since(pod).is_none()
}

/// One pod being upgraded in place: what it was when patched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InPlaceUpgrade {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// The containers upgraded, with the image each was running (as its status said) and its
    /// restart count then.
    pub upgraded: BTreeMap<String, (String, i32)>,
    /// The image each upgraded container is patched to.
    pub images: BTreeMap<String, String>,
    /// The CPU and memory figures each resized container is patched to.
    pub resized: BTreeMap<String, Vec<Figure>>,
    /// Each upgraded container's id and waiting reason when read before the patch: a pod healed
    /// from a back-off reports that state until the kubelet acts on the new spec.
    pub before: BTreeMap<String, (Option<String>, Option<String>)>,
    /// Every other container's restart count: none may restart.
    pub others: BTreeMap<String, i32>,
    /// Its workload's `minReadySeconds`: how long the pod must be Ready again to count as
    /// available, as its controller counts it.
    pub min_ready: Duration,
    /// The pod's `metadata.generation` once patched: a kubelet that reports
    /// `status.observedGeneration` (1.35+) says when its status is of the patched spec.
    pub generation: Option<i64>,
}

/// How an in-place upgrade is going.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeProgress {
    Pending,
    /// Upgraded and Ready, not yet for its workload's `minReadySeconds`: available then.
    Ready {
        available_at: Timestamp,
    },
    /// Every upgraded container runs its new image and is ready, and the pod is Ready; the
    /// restart counts of the pod's containers then, for the bake to count restarts from.
    Done(BTreeMap<String, i32>),
    Failed(String),
}

impl InPlaceUpgrade {
    /// The upgrade of `pod` (as read just before its patch) by `patch`, in a workload whose
    /// `minReadySeconds` is `min_ready`.
    pub fn of(pod: &Pod, patch: &InPlacePatch, min_ready: Duration) -> Self {
        let statuses = super::health::running_statuses(pod);
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            upgraded: patch
                .upgraded
                .keys()
                .map(|name| {
                    let before = statuses
                        .iter()
                        .find(|s| &s.name == name)
                        .map(|s| (s.image.clone(), s.restart_count))
                        .unwrap_or_default();
                    (name.clone(), before)
                })
                .collect(),
            images: patch.upgraded.clone(),
            resized: patch.resized.clone(),
            before: patch
                .containers()
                .filter_map(|name| {
                    let status = statuses.iter().find(|s| &s.name == name)?;
                    Some((
                        name.clone(),
                        (status.container_id.clone(), waiting_reason(status)),
                    ))
                })
                .collect(),
            others: statuses
                .iter()
                .filter(|s| {
                    !patch.upgraded.contains_key(&s.name) && !patch.resized.contains_key(&s.name)
                })
                .map(|s| (s.name.clone(), s.restart_count))
                .collect(),
            min_ready,
            generation: None,
        }
    }

    /// The upgrade once its patch is applied: the pod's generation as the patch left it.
    pub fn patched(self, generation: Option<i64>) -> Self {
        Self { generation, ..self }
    }

    /// Every container the upgrade changes.
    pub fn containers(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .images
            .keys()
            .chain(self.resized.keys())
            .cloned()
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// What the upgrade waits for, with the pod as last read (`None`: not read since the
    /// patch): each upgraded container to run its new image (or figures) and be ready, then
    /// the pod Ready. Said when the restart times out.
    pub fn awaiting(&self, pod: Option<&Pod>) -> String {
        let statuses = pod.map(super::health::running_statuses).unwrap_or_default();
        let containers: Vec<String> = self
            .containers()
            .iter()
            .map(|container| {
                let now = match statuses.iter().find(|s| &s.name == container) {
                    None => "no status yet".to_owned(),
                    Some(status) => container_state(status),
                };
                let mut goal: Vec<String> = Vec::new();
                if let Some(image) = self.images.get(container) {
                    goal.push(image.clone());
                }
                for figure in self.resized.get(container).into_iter().flatten() {
                    goal.push(figure.to_string());
                }
                format!(
                    "container {container} to run {} and be ready (it is {now})",
                    goal.join(", ")
                )
            })
            .collect();
        let pod_state = match pod {
            Some(pod) if !unavailable(pod) => "Ready",
            Some(_) => "not Ready",
            None => "not read since its patch",
        };
        format!(
            "pod {}: {}; the pod is {pod_state}",
            self.pod,
            containers.join(", ")
        )
    }

    /// Judges the pod as read at `now` (`None`: gone).
    pub fn progress(&self, pod: Option<&Pod>, now: Timestamp) -> UpgradeProgress {
        let Some(pod) = pod else {
            // Deleted (a scale-down, a drain): nothing left to upgrade or to fail.
            return UpgradeProgress::Done(BTreeMap::new());
        };
        let name = &self.pod;
        if pod.metadata.uid.as_deref() != Some(self.uid.as_str()) {
            return UpgradeProgress::Failed(format!(
                "pod {name} was replaced during its in-place upgrade"
            ));
        }
        let statuses = super::health::running_statuses(pod);
        for status in &statuses {
            if let Some(before) = self.others.get(&status.name)
                && status.restart_count > *before
            {
                return UpgradeProgress::Failed(format!(
                    "pod {name}: container {} restarted during the in-place upgrade of {}",
                    status.name,
                    self.containers().join(", ")
                ));
            }
        }
        // Where the kubelet reports the generation it observed, a status older than our patch
        // says nothing of the upgrade: neither done nor failed.
        let observed = self
            .generation
            .zip(pod.status.as_ref().and_then(|s| s.observed_generation))
            .map(|(patched, observed)| observed >= patched);
        if observed == Some(false) {
            return UpgradeProgress::Pending;
        }
        if !self.resized.is_empty()
            && let Some(refusal) = resize::refusal(pod)
        {
            let containers: Vec<&String> = self.resized.keys().collect();
            return UpgradeProgress::Failed(format!(
                "pod {name}: the kubelet did not resize {}: {refusal}",
                containers
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut done = true;
        // A kubelet that observed the resize and says no resize is pending or in progress has
        // made it (a runtime may report a CPU figure rounded through its cgroup's shares).
        let settled = observed == Some(true) && !resize::in_flight(pod);
        // A container resized alone runs on (or is restarted by the kubelet, as its
        // resizePolicy says): done once its status reports the new figures, running and ready.
        for (container, figures) in &self.resized {
            let Some(status) = statuses.iter().find(|s| &s.name == container) else {
                done = false;
                continue;
            };
            let (id_before, waiting_before) =
                self.before.get(container).cloned().unwrap_or_default();
            let waiting = waiting_reason(status)
                .filter(|r| r != "ContainerCreating" && r != "PodInitializing");
            let as_before = status.container_id == id_before && waiting == waiting_before;
            if let Some(reason) = waiting.as_ref().filter(|_| !as_before) {
                return UpgradeProgress::Failed(format!(
                    "pod {name}: resized container {container} is waiting ({reason})"
                ));
            }
            let running = status.state.as_ref().is_some_and(|s| s.running.is_some());
            done &= (settled || resize::applied(status, figures)) && running && status.ready;
        }
        for (container, (image_before, restarts_before)) in &self.upgraded {
            let Some(status) = statuses.iter().find(|s| &s.name == container) else {
                done = false;
                continue;
            };
            let state = status.state.as_ref();
            let (id_before, waiting_before) =
                self.before.get(container).cloned().unwrap_or_default();
            let waiting = waiting_reason(status)
                .filter(|r| r != "ContainerCreating" && r != "PodInitializing");
            // A pod healed from a back-off (an image it could not pull, a crash loop) says so
            // until the kubelet acts on the new spec: that state is the old revision's. (A
            // kubelet that observed our generation may not have acted on it yet: its first
            // status of the new generation still shows the old container.)
            let as_before = status.container_id == id_before
                && status.image == *image_before
                && waiting == waiting_before;
            if let Some(reason) = waiting.as_ref().filter(|_| !as_before) {
                return UpgradeProgress::Failed(format!(
                    "pod {name}: upgraded container {container} is waiting ({reason})"
                ));
            }
            // The kubelet restarted it with the new spec: its restart count went up, or another
            // container runs in its place (the image it reports may not change: a runtime
            // names an image by the first of its tags).
            let running = state.is_some_and(|s| s.running.is_some());
            let restarted = status.image != *image_before
                || status.restart_count > *restarts_before
                || (running && status.container_id != id_before);
            if !restarted || waiting.is_some() {
                done = false;
                continue;
            }
            if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
                return UpgradeProgress::Failed(format!(
                    "pod {name}: upgraded container {container} exited with code {}",
                    terminated.exit_code
                ));
            }
            done &= running && status.ready;
        }
        // Its containers ready is not yet the pod Ready (a readiness gate, another container),
        // nor available (minReadySeconds): until it is, the pod still counts against the
        // workload's maxUnavailable.
        let Some(ready_since) = ready_since(pod).filter(|_| done) else {
            return UpgradeProgress::Pending;
        };
        let available_at = super::after(ready_since, self.min_ready);
        if available_at > now {
            return UpgradeProgress::Ready { available_at };
        }
        UpgradeProgress::Done(
            statuses
                .iter()
                .map(|s| (s.name.clone(), s.restart_count))
                .collect(),
        )
    }
}

/// Why a container waits, as its status says.
fn waiting_reason(status: &k8s_openapi::api::core::v1::ContainerStatus) -> Option<String> {
    status.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

/// A container's state as a person reads it: `waiting (ImagePullBackOff)`, `running s:2, ready`.
fn container_state(status: &k8s_openapi::api::core::v1::ContainerStatus) -> String {
    let state = status.state.as_ref();
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        return format!(
            "waiting ({})",
            waiting.reason.as_deref().unwrap_or("no reason given")
        );
    }
    if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
        return format!("terminated with exit code {}", terminated.exit_code);
    }
    let ready = if status.ready { "ready" } else { "not ready" };
    format!(
        "running {}, {ready}, {} restart(s)",
        status.image, status.restart_count
    )
}

/// Since when the pod has been Ready (its Ready condition's last transition; without one, for
/// ever), or `None` when it is not Ready.
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(
        ready
            .last_transition_time
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
    )
}

#[cfg(test)]
mod tests;
