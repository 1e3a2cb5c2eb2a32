//! How the core's choices are spelled on the command line: their flag values and the help of
//! each. The core's enums know nothing of clap; these impls are the CLI's.

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::cluster::status::RevisionsSource;
use crate::injection::MissingSidecarPolicy;
use crate::rollout::OnCampaignFailure;
use crate::rollout::in_place::InPlaceMode;
use crate::workload::RestartMethod;

impl ValueEnum for RestartMethod {
    fn value_variants<'a>() -> &'a [Self] {
        // In place is the engine's own choice when only images change: never a flag value.
        &[RestartMethod::Template, RestartMethod::Evict]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            RestartMethod::Template => Some(PossibleValue::new("template")),
            RestartMethod::Evict => Some(PossibleValue::new("evict")),
            RestartMethod::InPlace => None,
        }
    }
}

impl ValueEnum for InPlaceMode {
    fn value_variants<'a>() -> &'a [Self] {
        &[InPlaceMode::Auto, InPlaceMode::Off]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            InPlaceMode::Auto => PossibleValue::new("auto").help(
                "In place whenever only images of injected containers change (and the sidecar's config does not say `rollout: {inPlace: false}`)",
            ),
            InPlaceMode::Off => PossibleValue::new("off").help("Always restart the workload"),
        })
    }
}

impl ValueEnum for RevisionsSource {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            RevisionsSource::Auto,
            RevisionsSource::Published,
            RevisionsSource::Configs,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            RevisionsSource::Auto => PossibleValue::new("auto").help(
                "The running injectors' publications when they are fresh and agree, else the configs read here",
            ),
            RevisionsSource::Published => PossibleValue::new("published").help(
                "What the running injectors published (the newest, if they disagree or are stale)",
            ),
            RevisionsSource::Configs => PossibleValue::new("configs")
                .help("The configs this command reads, whatever is published"),
        })
    }
}

impl ValueEnum for OnCampaignFailure {
    fn value_variants<'a>() -> &'a [Self] {
        &[OnCampaignFailure::Hold, OnCampaignFailure::Continue]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            OnCampaignFailure::Hold => PossibleValue::new("hold").help(
                "The sidecar's last good revision (from its revision history), so that the failing one does not spread through scale-ups, drains and crashes",
            ),
            OnCampaignFailure::Continue => {
                PossibleValue::new("continue").help("The revision that failed, as configured")
            }
        })
    }
}

impl ValueEnum for MissingSidecarPolicy {
    fn value_variants<'a>() -> &'a [Self] {
        &[MissingSidecarPolicy::Deny, MissingSidecarPolicy::Allow]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            MissingSidecarPolicy::Deny => PossibleValue::new("deny")
                .help("Deny the pod with a message naming the missing sidecar and the known ones"),
            MissingSidecarPolicy::Allow => PossibleValue::new("allow")
                .help("Inject what exists and let the pod through (Tumblr's behaviour)"),
        })
    }
}

/// The value of `--only-started-before` (clap's value parser, which names the flag): RFC 3339 (`2022-05-01T13:00:00Z`), or a date and time without a
/// zone (`2022-05-01 13:00`, as the k8s-sidecar-rollout script takes it), read as UTC.
pub(crate) fn parse_started_before(text: &str) -> Result<k8s_openapi::jiff::Timestamp, String> {
    if let Ok(timestamp) = text.parse::<k8s_openapi::jiff::Timestamp>() {
        return Ok(timestamp);
    }
    let civil = text
        .trim()
        .replacen(' ', "T", 1)
        .parse::<k8s_openapi::jiff::civil::DateTime>()
        .or_else(|_| {
            text.trim()
                .parse::<k8s_openapi::jiff::civil::Date>()
                .map(|d| d.to_datetime(k8s_openapi::jiff::civil::Time::midnight()))
        })
        .map_err(|_| {
            "expected a time like 2022-05-01T13:00:00Z, or 2022-05-01 13:00 (UTC)".to_owned()
        })?;
    civil
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp())
        .map_err(|e| e.to_string())
}
