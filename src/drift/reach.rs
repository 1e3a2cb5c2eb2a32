//! Which namespaces the API server calls the webhook for at all. The webhook configuration's
//! `namespaceSelector` leaves some out (deploy/'s: those labelled
//! `sidecar-injector.io/injection=disabled`); their pods are never injected, whatever they ask
//! for, so a restart would only make another uninjected pod. Drift counts them excluded.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::core::{Selector, SelectorExt};

/// The namespaces a webhook configuration reaches: those any of its webhooks'
/// `namespaceSelector`s selects (a webhook without one selects every namespace).
/// `objectSelector` and `matchConditions` are not evaluated (the index keeps no pod labels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookReach {
    configuration: String,
    selectors: Vec<Selector>,
}

impl WebhookReach {
    pub fn of(configuration: &MutatingWebhookConfiguration) -> Self {
        let selectors = configuration
            .webhooks
            .iter()
            .flatten()
            .map(|webhook| {
                // The API server validated it; one it could not have kept selects everything,
                // as no reach known at all does.
                webhook
                    .namespace_selector
                    .clone()
                    .and_then(|selector| Selector::try_from(selector).ok())
                    .unwrap_or_default()
            })
            .collect();
        WebhookReach {
            configuration: configuration.metadata.name.clone().unwrap_or_default(),
            selectors,
        }
    }

    /// Why the webhook is never called for pods of `namespace`, labelled `labels`; `None` when
    /// it is.
    pub fn leaves_out(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<String> {
        self.reaches(namespace, labels).err()
    }

    /// Whether the webhook is called for pods of `namespace`, labelled `labels`: what selects
    /// it, or why it is left out.
    pub fn reaches(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, String> {
        if self.selectors.iter().any(|s| s.matches(labels)) {
            return Ok(format!(
                "MutatingWebhookConfiguration {} selects namespace {namespace}",
                self.configuration
            ));
        }
        let wanted = if self.selectors.is_empty() {
            "it has no webhook".to_owned()
        } else {
            let each: Vec<String> = self.selectors.iter().map(ToString::to_string).collect();
            format!("its namespaceSelector wants {}", each.join(" or "))
        };
        Err(format!(
            "namespace {namespace} is not sent to the webhook (MutatingWebhookConfiguration {}: {wanted})",
            self.configuration
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configuration(webhooks: serde_json::Value) -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": "sidecar-injector"},
            "webhooks": webhooks,
        }))
        .unwrap()
    }

    fn webhook(namespace_selector: Option<serde_json::Value>) -> serde_json::Value {
        let mut webhook = json!({
            "name": "sidecar-injector.injector-system.svc",
            "clientConfig": {"url": "https://127.0.0.1/mutate"},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        if let Some(selector) = namespace_selector {
            webhook["namespaceSelector"] = selector;
        }
        webhook
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// deploy/base/webhook.yaml's selector.
    fn deploy_selector() -> serde_json::Value {
        json!({"matchExpressions": [
            {"key": "sidecar-injector.io/injection", "operator": "NotIn", "values": ["disabled"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["injector-system", "kube-system"]},
        ]})
    }

    #[test]
    fn deploys_selector_leaves_out_namespaces_labelled_disabled_and_its_own() {
        let reach = WebhookReach::of(&configuration(json!([webhook(Some(deploy_selector()))])));
        assert_eq!(
            reach.reaches("team-a", &labels(&[])).as_deref(),
            Ok("MutatingWebhookConfiguration sidecar-injector selects namespace team-a")
        );
        assert_eq!(
            reach.leaves_out(
                "team-a",
                &labels(&[("sidecar-injector.io/injection", "enabled")])
            ),
            None
        );
        assert_eq!(
            reach
                .leaves_out(
                    "legacy",
                    &labels(&[("sidecar-injector.io/injection", "disabled")])
                )
                .as_deref(),
            Some(
                "namespace legacy is not sent to the webhook (MutatingWebhookConfiguration sidecar-injector: \
                 its namespaceSelector wants sidecar-injector.io/injection notin (disabled),\
                 kubernetes.io/metadata.name notin (injector-system,kube-system))"
            )
        );
        // Kubernetes 1.21+ labels every namespace with its name.
        assert!(
            reach
                .leaves_out(
                    "kube-system",
                    &labels(&[("kubernetes.io/metadata.name", "kube-system")])
                )
                .is_some()
        );
    }

    #[test]
    fn an_opt_in_selector_reaches_only_the_labelled_namespaces() {
        let reach = WebhookReach::of(&configuration(json!([webhook(Some(
            json!({"matchLabels": {"sidecars": "enabled"}})
        ))])));
        assert!(reach.leaves_out("team-a", &labels(&[])).is_some());
        assert_eq!(
            reach.leaves_out("team-b", &labels(&[("sidecars", "enabled")])),
            None
        );
    }

    #[test]
    fn a_namespace_is_sent_when_any_webhook_selects_it() {
        let reach = WebhookReach::of(&configuration(json!([
            webhook(Some(json!({"matchLabels": {"a": "1"}}))),
            webhook(Some(json!({"matchLabels": {"b": "1"}}))),
        ])));
        assert_eq!(reach.leaves_out("x", &labels(&[("b", "1")])), None);
        let why = reach.leaves_out("y", &labels(&[])).unwrap();
        assert!(why.ends_with("wants a=1 or b=1)"), "{why}");
        // No selector: every namespace.
        let everything = WebhookReach::of(&configuration(json!([webhook(None)])));
        assert_eq!(everything.leaves_out("y", &labels(&[])), None);
        // No webhook at all: none.
        let nothing = WebhookReach::of(&configuration(json!([])));
        assert!(
            nothing
                .leaves_out("y", &labels(&[]))
                .unwrap()
                .ends_with("it has no webhook)")
        );
    }
}
