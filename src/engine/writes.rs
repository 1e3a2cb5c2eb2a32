//! The engine's writes to the API: the restart stamps merged into a workload's template, and
//! Events.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use serde_json::{Value, json};

use super::{ActionError, Engine, with_timeout};
use crate::cluster::events::{EVENT_ACTION_LIMIT, EVENT_NOTE_LIMIT, shortened};
use crate::metrics::EngineCall;
use crate::rollout;
use crate::workload::{WorkloadKind, WorkloadRef};

impl Engine {
    pub(super) async fn patch(
        &self,
        restart: &rollout::Restart,
        now: Timestamp,
    ) -> Result<(), ActionError> {
        let keys = &self.options.keys;
        let reason = match &self.options.reason_prefix {
            Some(prefix) => format!("{prefix}: {}", restart.reason),
            None => restart.reason.clone(),
        };
        let cause = format!("sidecar-injector: {reason}");
        // A first restart clears the mark, so a target the workload comes back to may be
        // healed again.
        let heal = restart.heal.then_some(restart.target.as_ref()).flatten();
        let body = json!({
            "metadata": {"annotations": {
                keys.rolled_at.as_str(): now.to_string(),
                "kubernetes.io/change-cause": cause,
            }},
            "spec": {"template": {"metadata": {"annotations": {
                keys.rollout_revision.as_str(): restart.target,
                keys.rollout_reason.as_str(): reason,
                keys.rollout_heal.as_str(): heal,
            }}}}
        });
        let (client, namespace, name) = (
            self.client.clone(),
            &restart.workload.namespace,
            &restart.workload.name,
        );
        self.metrics.record_api_request(EngineCall::Patch);
        let result = match restart.workload.controller_kind() {
            Some(WorkloadKind::Deployment) => {
                merge_patch::<Deployment>(client, namespace, name, &body).await
            }
            Some(WorkloadKind::StatefulSet) => {
                merge_patch::<StatefulSet>(client, namespace, name, &body).await
            }
            Some(WorkloadKind::DaemonSet) => {
                merge_patch::<DaemonSet>(client, namespace, name, &body).await
            }
            Some(WorkloadKind::Pod) | None => Ok(()),
        };
        result.map_err(|source| ActionError::Patch {
            workload: restart.workload.clone(),
            source,
        })
    }

    pub(super) async fn event(
        &self,
        workload: &WorkloadRef,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let reference = ObjectReference {
            api_version: Some(workload.kind.api_version().into()),
            kind: Some(workload.kind.as_str().into()),
            name: Some(workload.name.clone()),
            namespace: Some(workload.namespace.clone()),
            ..Default::default()
        };
        self.publish_event(&reference, type_, reason, action, note)
            .await;
    }

    pub(super) async fn publish_event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(shortened(note, EVENT_NOTE_LIMIT)),
            // The recorder folds repeats by (reason, action, object) for minutes, keeping the
            // first note: the revisions go into the action so each campaign is its own Event.
            action: shortened(action, EVENT_ACTION_LIMIT),
            secondary: None,
        };
        self.metrics.record_api_request(EngineCall::Event);
        if let Err(source) = with_timeout(self.recorder.publish(&event, reference)).await {
            self.failed(&ActionError::RecordEvent {
                object: format!(
                    "{}/{}",
                    reference.kind.as_deref().unwrap_or_default(),
                    reference.name.as_deref().unwrap_or_default()
                ),
                source,
            });
        }
    }
}

async fn merge_patch<K>(
    client: Client,
    namespace: &str,
    name: &str,
    body: &Value,
) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client, namespace);
    with_timeout(api.patch(name, &PatchParams::default(), &Patch::Merge(body)))
        .await
        .map(|_| ())
}
