//! Which pods the API server calls the webhook for at all. The webhook configuration's
//! `namespaceSelector` leaves some namespaces out (deploy/'s: those labelled
//! `sidecar-injector.io/injection=disabled`), an `objectSelector` of an overlay some pods by
//! their labels (opt-in by label, as Istio's `sidecar.istio.io/inject`); those pods are never
//! injected, whatever they ask for, so a restart would only make another uninjected pod. Drift
//! counts them excluded.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube_core::{Selector, SelectorExt};

/// The pods a webhook configuration reaches: those of a namespace some webhook's
/// `namespaceSelector` selects whose labels the same webhook's `objectSelector` selects (a
/// webhook without one selects everything). `matchConditions` are not evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookReach {
    configuration: String,
    webhooks: Vec<WebhookSelectors>,
    /// Reached through the bindings of admission policies (`serve --injection=policy`), not
    /// a webhook configuration.
    policy: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct WebhookSelectors {
    namespaces: Selector,
    objects: Selector,
}

/// Why the API server never calls the webhook for some pods.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSent {
    #[error(
        "namespace {namespace} is not sent to the webhook (MutatingWebhookConfiguration {configuration}: {wanted})"
    )]
    Namespace {
        namespace: String,
        configuration: String,
        wanted: String,
    },
    #[error(
        "namespace {namespace} is left out by the admission policies (MutatingAdmissionPolicyBinding {binding}: {wanted})"
    )]
    PolicyNamespace {
        namespace: String,
        binding: String,
        wanted: String,
    },
    #[error(
        "the pods' labels leave them out of the webhook (MutatingWebhookConfiguration {configuration}: its objectSelector wants {wanted})"
    )]
    Labels {
        configuration: String,
        wanted: String,
    },
}

impl WebhookReach {
    pub fn of(configuration: &MutatingWebhookConfiguration) -> Self {
        // The API server validated them; one it could not have kept selects everything, as
        // no reach known at all does.
        let selector = |selector: &Option<_>| {
            selector
                .clone()
                .and_then(|s| Selector::try_from(s).ok())
                .unwrap_or_default()
        };
        let webhooks = configuration
            .webhooks
            .iter()
            .flatten()
            .map(|webhook| WebhookSelectors {
                namespaces: selector(&webhook.namespace_selector),
                objects: selector(&webhook.object_selector),
            })
            .collect();
        WebhookReach {
            configuration: configuration.metadata.name.clone().unwrap_or_default(),
            webhooks,
            policy: false,
        }
    }

    /// The pods the bindings `name` of `serve --injection=policy` reach: those of the
    /// namespaces `selector` selects (the ignored ones are excluded anyway).
    pub fn of_policy_binding(
        name: &str,
        selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> Self {
        WebhookReach {
            configuration: name.to_owned(),
            webhooks: vec![WebhookSelectors {
                namespaces: Selector::try_from(selector.clone()).unwrap_or_default(),
                objects: Selector::default(),
            }],
            policy: true,
        }
    }

    /// Why the webhook is never called for pods of `namespace`, labelled `labels`; `None` when
    /// it is for some.
    pub fn leaves_out(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<String> {
        self.reaches(namespace, labels).err().map(|e| e.to_string())
    }

    /// Whether the webhook is called for pods of `namespace`, labelled `labels` (for those
    /// its objectSelector selects): what selects it, or why it is left out.
    pub fn reaches(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, NotSent> {
        if self.webhooks.iter().any(|w| w.namespaces.matches(labels)) {
            let kind = if self.policy {
                "MutatingAdmissionPolicyBinding"
            } else {
                "MutatingWebhookConfiguration"
            };
            return Ok(format!(
                "{kind} {} selects namespace {namespace}",
                self.configuration
            ));
        }
        let wanted = if self.webhooks.is_empty() {
            "it has no webhook".to_owned()
        } else {
            let each: Vec<String> = self
                .webhooks
                .iter()
                .map(|w| w.namespaces.to_string())
                .collect();
            format!("its namespaceSelector wants {}", each.join(" or "))
        };
        if self.policy {
            return Err(NotSent::PolicyNamespace {
                namespace: namespace.to_owned(),
                binding: self.configuration.clone(),
                wanted,
            });
        }
        Err(NotSent::Namespace {
            namespace: namespace.to_owned(),
            configuration: self.configuration.clone(),
            wanted,
        })
    }

    /// Whether some webhook selects pods by their labels: only then do a pod's labels matter.
    pub fn selects_objects(&self) -> bool {
        self.webhooks.iter().any(|w| !w.objects.selects_all())
    }

    /// Why the webhook is never called for a pod labelled `pod_labels` in `namespace`,
    /// labelled `namespace_labels`; `None` when it is.
    pub fn leaves_out_pod(
        &self,
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        pod_labels: &BTreeMap<String, String>,
    ) -> Option<String> {
        self.reaches_pod(namespace, namespace_labels, pod_labels)
            .err()
            .map(|e| e.to_string())
    }

    /// Whether the webhook is called for a pod labelled `pod_labels` in `namespace`,
    /// labelled `namespace_labels`: what selects it, or why it is left out.
    pub fn reaches_pod(
        &self,
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<String, NotSent> {
        let selected = self.reaches(namespace, namespace_labels)?;
        let in_namespace: Vec<&WebhookSelectors> = self
            .webhooks
            .iter()
            .filter(|w| w.namespaces.matches(namespace_labels))
            .collect();
        if in_namespace.iter().any(|w| w.objects.selects_all()) {
            return Ok(selected);
        }
        if let Some(webhook) = in_namespace.iter().find(|w| w.objects.matches(pod_labels)) {
            return Ok(format!(
                "{selected} and, by its objectSelector {}, the pod's labels",
                webhook.objects
            ));
        }
        let each: Vec<String> = in_namespace.iter().map(|w| w.objects.to_string()).collect();
        Err(NotSent::Labels {
            configuration: self.configuration.clone(),
            wanted: each.join(" or "),
        })
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

    #[test]
    fn the_policy_bindings_reach_the_namespaces_of_their_selector() {
        let selector = serde_json::from_value(json!({"matchExpressions": [
            {"key": "sidecar-injector.io/injection", "operator": "NotIn", "values": ["disabled"]},
        ]}))
        .unwrap();
        let reach = WebhookReach::of_policy_binding("sidecar-injector", &selector);
        assert_eq!(reach.leaves_out("team-a", &labels(&[])), None);
        assert_eq!(
            reach
                .leaves_out(
                    "legacy",
                    &labels(&[("sidecar-injector.io/injection", "disabled")])
                )
                .unwrap(),
            "namespace legacy is left out by the admission policies (MutatingAdmissionPolicyBinding sidecar-injector: its namespaceSelector wants sidecar-injector.io/injection notin (disabled))"
        );
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

    #[test]
    fn a_pod_is_sent_when_a_webhook_selects_both_its_namespace_and_its_labels() {
        let mut opt_in = webhook(Some(json!({"matchLabels": {"team": "a"}})));
        opt_in["objectSelector"] = json!({"matchLabels": {"sidecars": "on"}});
        let reach = WebhookReach::of(&configuration(json!([
            opt_in,
            webhook(Some(json!({"matchLabels": {"team": "b"}}))),
        ])));
        assert!(reach.selects_objects());
        let team_a = labels(&[("team", "a")]);
        // In team a only pods labelled on are sent: a's webhook selects by label.
        assert_eq!(
            reach
                .reaches_pod("a", &team_a, &labels(&[("sidecars", "on"), ("app", "web")]))
                .as_deref(),
            Ok(
                "MutatingWebhookConfiguration sidecar-injector selects namespace a and, by its objectSelector sidecars=on, the pod's labels"
            )
        );
        assert_eq!(
            reach
                .leaves_out_pod("a", &team_a, &labels(&[("app", "web")]))
                .as_deref(),
            Some(
                "the pods' labels leave them out of the webhook (MutatingWebhookConfiguration sidecar-injector: its objectSelector wants sidecars=on)"
            )
        );
        // In team b every pod is: b's webhook selects no labels. The other webhook's
        // objectSelector does not apply there.
        assert_eq!(
            reach
                .reaches_pod("b", &labels(&[("team", "b")]), &labels(&[]))
                .as_deref(),
            Ok("MutatingWebhookConfiguration sidecar-injector selects namespace b")
        );
        // A namespace neither selects: its own reason, whatever the pod's labels.
        assert!(
            reach
                .leaves_out_pod("c", &labels(&[]), &labels(&[("sidecars", "on")]))
                .unwrap()
                .starts_with("namespace c is not sent to the webhook")
        );
        // Without objectSelectors, labels never matter.
        let namespaces_only =
            WebhookReach::of(&configuration(json!([webhook(Some(deploy_selector()))])));
        assert!(!namespaces_only.selects_objects());
        assert_eq!(
            namespaces_only.leaves_out_pod("team-a", &labels(&[]), &labels(&[("x", "y")])),
            None
        );
    }
}
