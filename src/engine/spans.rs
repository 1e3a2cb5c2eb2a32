//! The spans of the engine's work, for `serve --otlp-endpoint` (debug level: with no traces
//! and no debug log, none is made). A plan is a trace of its own; each restart it starts, and
//! each pod a pod-by-pod restart replaces, is a span within it.

use tracing::Span;

use crate::rollout::RolloutPlan;
use crate::rollout::machine::Effect;

/// A pass of the engine, begun as a trace of its own.
pub(super) fn plan() -> Span {
    tracing::debug_span!(
        parent: None,
        "rollout plan",
        restarts = tracing::field::Empty,
        rolling = tracing::field::Empty,
        waiting = tracing::field::Empty,
    )
}

/// What the pass planned.
pub(super) fn record_plan(span: &Span, plan: &RolloutPlan) {
    span.record("restarts", plan.restarts.len() as u64);
    span.record("rolling", plan.rolling.len() as u64);
    span.record("waiting", plan.waiting.len() as u64);
}

/// The span an effect is carried out in: a restart's or a pod's, none for the rest.
pub(super) fn of_effect(effect: &Effect) -> Span {
    match effect {
        Effect::PatchTemplate(restart)
        | Effect::EvictBarePod(restart)
        | Effect::PodByPodStarted(restart) => tracing::debug_span!(
            "restart",
            workload = %restart.workload,
            method = ?restart.method,
            target = restart.target.as_ref().map(ToString::to_string),
            reason = %restart.reason,
            canary = restart.canary,
        ),
        Effect::UpgradePod { workload, pod, .. } => {
            tracing::debug_span!("upgrade pod in place", workload = %workload, pod = pod.name)
        }
        Effect::EvictPod { workload, pod, .. } => {
            tracing::debug_span!("evict pod", workload = %workload, pod = pod.name)
        }
        _ => Span::none(),
    }
}
