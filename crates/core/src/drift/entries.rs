//! What the index keeps per pod and per workload: compact projections, stripped on arrival
//! (no spec, no managedFields).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use crate::annotations::{AnnotationKeys, STATUS_INJECTED};
use crate::config::RevisionsInForce;
use crate::config::revision::stamp_items;
use crate::maintenance::MaintenanceWindows;
use crate::name::SidecarName;
use crate::workload::{OwnerKind, UpdateStrategy, WorkloadKind};

use super::interner::{Interner, Labels};
use super::sidecar_state;

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
    pub(super) fn kind_tag(&self) -> usize {
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
    pub(super) fn controller(&self) -> Option<(&str, &str)> {
        match self {
            PodOwner::Bare => None,
            PodOwner::ReplicaSet(name) => Some((OwnerKind::ReplicaSet.as_str(), name)),
            PodOwner::StatefulSet(name) => Some((WorkloadKind::StatefulSet.as_str(), name)),
            PodOwner::DaemonSet(name) => Some((WorkloadKind::DaemonSet.as_str(), name)),
            PodOwner::Job(name) => Some((OwnerKind::Job.as_str(), name)),
            PodOwner::Other { kind, name } => Some((kind, name)),
        }
    }

    /// The owner's (interned) name; `None` for a bare pod.
    pub(super) fn name(&self) -> Option<&Arc<str>> {
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
    /// The sidecars the webhook injected natively (`NS/injected-native`), as written.
    pub native: Option<Arc<str>>,
    pub labels: Labels,
}

impl PodEntry {
    /// `None` for a pod that requests nothing or is terminating: such pods are not indexed.
    /// Strings and label sets go through `interner`, so that pods of one workload share them;
    /// `labels_before` are the labels the pod had, if it was indexed.
    pub fn project(
        meta: &ObjectMeta,
        keys: &AnnotationKeys,
        interner: &mut Interner,
        labels_before: Option<&Labels>,
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
                let name = interner.text(&o.name);
                match OwnerKind::parse(&o.kind) {
                    OwnerKind::ReplicaSet => PodOwner::ReplicaSet(name),
                    OwnerKind::Workload(WorkloadKind::StatefulSet) => PodOwner::StatefulSet(name),
                    OwnerKind::Workload(WorkloadKind::DaemonSet) => PodOwner::DaemonSet(name),
                    OwnerKind::Job => PodOwner::Job(name),
                    _ => PodOwner::Other {
                        kind: interner.text(&o.kind),
                        name,
                    },
                }
            })
            .unwrap_or(PodOwner::Bare);
        Some(PodEntry {
            owner,
            request: interner.text(request),
            injected: annotations.get(&keys.status).map(String::as_str) == Some(STATUS_INJECTED),
            revision: annotations.get(&keys.revision).map(|r| interner.text(r)),
            native: annotations
                .get(&keys.injected_native)
                .map(|n| interner.text(n)),
            labels: interner.labels(meta.labels.as_ref(), labels_before),
        })
    }
}

/// Why a restart of a workload means downtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Downtime {
    /// `strategy: Recreate`: every old pod goes before a new one starts.
    Recreate,
    /// One replica, and `maxUnavailable` lets it go before its replacement is ready.
    SingleReplicaMaxUnavailable,
}

/// A Deployment's `rollingUpdate.maxUnavailable` as a pod count (an int, or a percentage of
/// replicas rounded down as the Deployment controller does; absent: 25%); `None` for Recreate.
pub fn max_unavailable(spec: &k8s_openapi::api::apps::v1::DeploymentSpec) -> Option<i32> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let strategy = spec.strategy.as_ref();
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return None;
    }
    let replicas = spec.replicas.unwrap_or(1);
    let max_unavailable = strategy
        .and_then(|s| s.rolling_update.as_ref()?.max_unavailable.clone())
        .unwrap_or(IntOrString::String("25%".into()));
    Some(match max_unavailable {
        IntOrString::Int(n) => n,
        IntOrString::String(text) => text
            .trim_end_matches('%')
            .trim()
            .parse::<i32>()
            .map_or(0, |percent| percent * replicas / 100),
    })
}

impl Downtime {
    /// A Deployment's, from its replicas and strategy (maxUnavailable an int or a percentage
    /// of replicas, rounded down as the Deployment controller does; absent: 25%).
    pub fn of_deployment(spec: &k8s_openapi::api::apps::v1::DeploymentSpec) -> Option<Self> {
        let Some(unavailable) = max_unavailable(spec) else {
            return Some(Downtime::Recreate);
        };
        (spec.replicas.unwrap_or(1) == 1 && unavailable >= 1)
            .then_some(Downtime::SingleReplicaMaxUnavailable)
    }
}

/// A pod an OnDelete workload still has to replace, and whether the webhook injected it: a
/// StatefulSet's replacement keeps its pod's name, and one created while the webhook was
/// bypassed is told from the pod evicted before it by this.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodToReplace {
    pub name: String,
    pub injected: bool,
    /// Its `NS/revision` stamp: a pod that a failed revision made unavailable is healed first.
    pub revision: Option<Arc<str>>,
}

impl PodToReplace {
    /// An injected pod of that name.
    pub fn injected(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            injected: true,
            revision: None,
        }
    }

    /// An injected pod of that name carrying `stamp`.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn at(name: &str, stamp: &str) -> Self {
        Self {
            revision: Some(Arc::from(stamp)),
            ..Self::injected(name)
        }
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

/// A workload stripped on arrival to what drift and rollout planning need: our annotations,
/// generations, the update strategy and the rollout status; never the pod template's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadEntry {
    /// `NS/rollout: disabled` on the workload.
    pub rollout_disabled: bool,
    /// `NS/rollout-revision` on the pod template: the target the engine last set.
    pub rollout_revision: Option<Box<str>>,
    /// `NS/rollout-heal` on the pod template: the target already restarted again for pods
    /// the webhook never saw.
    pub rollout_heal: Option<Box<str>>,
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
    /// `NS/rollout-priority` on the workload: lower is restarted first; not an integer: none.
    pub rollout_priority: Option<i32>,
    /// Why restarting it takes its service down (a Deployment that is Recreate, or of one
    /// replica whose rollingUpdate.maxUnavailable is at least one), unless accepted.
    pub downtime: Option<Downtime>,
    /// `NS/allow-downtime: "true"` on the workload.
    pub allow_downtime: bool,
    /// `NS/maintenance-window` on the workload, parsed (or why it does not parse).
    pub maintenance_window: Option<Result<MaintenanceWindows, crate::maintenance::WindowError>>,
    /// `NS/restart-method` on the workload, when it names one.
    pub restart_method: Option<crate::workload::RestartMethod>,
    /// `NS/request` on the pod template: what its pods would request, so that a workload
    /// whose pods are all denied still shows in the report.
    pub template_request: Option<Box<str>>,
    /// A Deployment's maxUnavailable as a pod count (see [`max_unavailable`]); `None` for other
    /// kinds (one at a time) and a Recreate Deployment.
    pub max_unavailable: Option<i32>,
    /// `minReadySeconds`: how long a pod must have been Ready to count as available.
    pub min_ready_seconds: Option<i32>,
    /// The pod template as JSON, kept only when it sets pod-level resources (rare): the
    /// engine checks that the webhook would accept its pods before restarting it.
    pub template: Option<Arc<str>>,
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
            rollout_priority: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys.rollout_priority))
                .and_then(|p| p.trim().parse().ok()),
            allow_downtime: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys.allow_downtime))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
            maintenance_window: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys.maintenance_window))
                .map(|text| MaintenanceWindows::parse_list(text)),
            restart_method: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys.restart_method))
                .and_then(|m| crate::workload::RestartMethod::parse(m)),
            ..Default::default()
        }
    }

    /// From a workload's metadata and its pod template's: [`Self::project`], and what the
    /// engine and the webhook left on the template.
    fn project_with_template(
        meta: &ObjectMeta,
        template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
        keys: &AnnotationKeys,
    ) -> Self {
        let kept = template.filter(|t| t.spec.as_ref().is_some_and(|s| s.resources.is_some()));
        let template_json = kept
            .and_then(|t| serde_json::to_string(t).ok())
            .map(Arc::from);
        let template = template.and_then(|t| t.metadata.as_ref());
        WorkloadEntry {
            template: template_json,
            rollout_revision: template_annotation(template, &keys.rollout_revision),
            rollout_heal: template_annotation(template, &keys.rollout_heal),
            template_request: template_annotation(template, &keys.request),
            ..Self::project(meta, keys)
        }
    }

    pub fn from_deployment(
        d: &k8s_openapi::api::apps::v1::Deployment,
        keys: &AnnotationKeys,
    ) -> Self {
        let spec = d.spec.as_ref();
        let status = d.status.as_ref();
        WorkloadEntry {
            update_strategy: UpdateStrategy::parse(
                spec.and_then(|s| s.strategy.as_ref()?.type_.as_deref()),
            ),
            downtime: spec.and_then(Downtime::of_deployment),
            max_unavailable: spec.and_then(max_unavailable),
            paused: spec.and_then(|s| s.paused).unwrap_or(false),
            min_ready_seconds: spec.and_then(|s| s.min_ready_seconds),
            replicas: spec.and_then(|s| s.replicas),
            status_replicas: status.and_then(|s| s.replicas),
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_replicas),
            ready_replicas: status.and_then(|s| s.ready_replicas),
            available_replicas: status.and_then(|s| s.available_replicas),
            ..Self::project_with_template(&d.metadata, spec.map(|s| &s.template), keys)
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
            update_strategy: UpdateStrategy::parse(strategy.and_then(|u| u.type_.as_deref())),
            partition: strategy.and_then(|u| u.rolling_update.as_ref()?.partition),
            min_ready_seconds: spec.and_then(|s| s.min_ready_seconds),
            replicas: spec.and_then(|s| s.replicas),
            update_revision_pending: status.is_some_and(|s| {
                s.update_revision.is_some() && s.update_revision != s.current_revision
            }),
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_replicas),
            ready_replicas: status.and_then(|s| s.ready_replicas),
            available_replicas: status.and_then(|s| s.available_replicas),
            ..Self::project_with_template(&s.metadata, spec.map(|s| &s.template), keys)
        }
    }

    pub fn from_daemonset(
        d: &k8s_openapi::api::apps::v1::DaemonSet,
        keys: &AnnotationKeys,
    ) -> Self {
        let spec = d.spec.as_ref();
        let status = d.status.as_ref();
        WorkloadEntry {
            update_strategy: UpdateStrategy::parse(
                spec.and_then(|s| s.update_strategy.as_ref()?.type_.as_deref()),
            ),
            min_ready_seconds: spec.and_then(|s| s.min_ready_seconds),
            replicas: status.map(|s| s.desired_number_scheduled),
            observed_generation: status.and_then(|s| s.observed_generation),
            updated_replicas: status.and_then(|s| s.updated_number_scheduled),
            ready_replicas: status.map(|s| s.number_ready),
            available_replicas: status.and_then(|s| s.number_available),
            ..Self::project_with_template(&d.metadata, spec.map(|s| &s.template), keys)
        }
    }
}

/// Whether a workload opted out of the engine's restarts (`NS/rollout: disabled`).
pub fn rollout_disabled(meta: &ObjectMeta, keys: &AnnotationKeys) -> bool {
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

/// `name:version=REV,...` as (normalised name, REV) pairs.
pub(super) fn parse_revisions(annotation: &str) -> Vec<(String, &str)> {
    stamp_items(annotation)
        .filter_map(|(name, revision)| Some((SidecarName::parse(name).ok()?.to_string(), revision)))
        .collect()
}
