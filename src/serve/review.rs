//! The webhook's answer to one AdmissionReview: the core's, its warning or refusal worded at
//! this edge.

use crate::admission::{Answer, ReviewError};
use crate::config::SidecarSet;
use crate::injection::InjectionSettings;

/// Answers one AdmissionReview body as the webhook does.
pub fn review(
    body: &[u8],
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> Result<Answer, ReviewError> {
    crate::admission::review(body, sidecars, settings, crate::render::admission_message)
}

#[cfg(test)]
mod tests;
