//! What the webhook says to a pod's creator (a warning) or to the API server (a refusal),
//! worded at the webhook's edge.

use crate::admission::AdmissionMessage;
use crate::render::explain::{ANNOTATION_NAMESPACE, ON_MISSING_ALLOW};

/// The message in the words of the reply.
pub(crate) fn admission_message(message: &AdmissionMessage) -> String {
    match message {
        AdmissionMessage::ClassicInJob { sidecars, kind } => format!(
            "sidecar(s) {} would be injected into this {kind}'s pods as regular containers, which keep running after the Job's own containers exit: the Job never completes; `nativeSidecars: true` in the config injects them as native sidecars (Kubernetes 1.29+), which stop with the Job",
            sidecars.join(", ")
        ),
        AdmissionMessage::NotAPodRequest {
            group_version,
            kind,
        } => format!(
            "sidecar-injector only mutates Pods; this request is for {group_version} {kind}, let through unchanged"
        ),
        AdmissionMessage::NotAPod { kind } => format!(
            "sidecar-injector only mutates Pods; this object is a {}, let through unchanged",
            crate::name::quoted(kind)
        ),
        AdmissionMessage::Unreadable(Some(error)) => format!("cannot read the pod: {error}"),
        AdmissionMessage::Unreadable(None) => "the request carries no pod".to_owned(),
        AdmissionMessage::Missing(missing) => {
            let names: Vec<String> = missing
                .iter()
                .map(|n| format!("\"{}\"", crate::name::quoted(&n.to_string())))
                .collect();
            format!("sidecar(s) not found, not injected: {}", names.join(", "))
        }
        AdmissionMessage::InvalidRequest { annotation, error } => format!(
            "annotation {annotation}: {error}; not injected, let through by {ON_MISSING_ALLOW}"
        ),
        AdmissionMessage::OtherAnnotationNamespace { key, ours } => format!(
            "not injected: the pod requests sidecars with {key}, but this injector reads {ours}; is {ANNOTATION_NAMESPACE} right?"
        ),
        AdmissionMessage::Denied(denial) => denial.to_string(),
    }
}
