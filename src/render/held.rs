//! What kubectl shows the creator of a pod whose sidecar is held at another revision, or
//! whose campaign paused: the webhook's admission warnings.

use std::sync::Arc;

use crate::config::SidecarSet;
use crate::name::SidecarName;
use crate::rollout::{CampaignBook, HeldWarning, NewPods};

use super::RESUME;

/// What new pods get (the core's one rule), with the webhook's warnings worded on `served`:
/// what the webhook, the policy writer and the one-shot commands use.
pub(crate) fn new_pods(book: &CampaignBook, config: &SidecarSet) -> NewPods {
    let mut new_pods = book.new_pods(config);
    let warnings = new_pods
        .warnings
        .iter()
        .map(|(name, warning)| (name.clone(), Arc::from(held_warning(name, warning))))
        .collect();
    new_pods.served = new_pods.served.with_warnings(warnings);
    new_pods
}

/// The warning on a pod injected with `name`.
pub(crate) fn held_warning(name: &SidecarName, warning: &HeldWarning) -> String {
    match warning {
        HeldWarning::AwaitingPromotion { held, revision } => format!(
            "sidecar {name} is held at {held}: its revision {revision} waits for promotion (promoted by {})",
            super::promote(&name.to_string()),
        ),
        HeldWarning::HeldAfterFailure { held, revision } => format!(
            "sidecar {name} is held at its last good revision {held}: the rollout of {revision} failed; new pods get {held} until the config changes, {} or {}",
            RESUME,
            super::release_hold(&name.to_string())
        ),
        HeldWarning::Paused { revision, failures } => format!(
            "the rollout of sidecar {name} (revision {revision}) is paused after {failures} failed restart(s); this pod gets that revision: fix or revert the config, or {}",
            RESUME
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_warning_says_what_the_pod_gets_and_fits_what_kubectl_shows_whole() {
        let name: SidecarName = "logger:v1".parse().unwrap();
        let (held, revision) = ("aaaaaaaaaaaa".to_owned(), "bbbbbbbbbbbb".to_owned());
        let warnings = [
            (
                HeldWarning::AwaitingPromotion {
                    held: held.clone(),
                    revision: revision.clone(),
                },
                format!(
                    "sidecar {name} is held at {held}: its revision {revision} waits for \
                     promotion (promoted by `sidecar-injector rollout --promote {name}`)"
                ),
            ),
            (
                HeldWarning::HeldAfterFailure {
                    held: held.clone(),
                    revision: revision.clone(),
                },
                format!(
                    "sidecar {name} is held at its last good revision {held}: the rollout of \
                     {revision} failed; new pods get {held} until the config changes, \
                     `sidecar-injector rollout --resume` or `sidecar-injector rollout \
                     --release-hold {name}`"
                ),
            ),
            (
                HeldWarning::Paused {
                    revision: revision.clone(),
                    failures: 3,
                },
                format!(
                    "the rollout of sidecar {name} (revision {revision}) is paused after 3 \
                     failed restart(s); this pod gets that revision: fix or revert the config, \
                     or `sidecar-injector rollout --resume`"
                ),
            ),
        ];
        for (warning, text) in warnings {
            let said = held_warning(&name, &warning);
            assert_eq!(said, text);
            assert!(said.len() <= 256, "kubectl shows it whole: {}", said.len());
        }
    }
}
