//! How the core's choices are spelled on the command line: their flag values and the help of
//! each. The core's enums know nothing of clap; these impls are the CLI's, on [`Flag`].

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::cluster::status::RevisionsSource;
use crate::injection::MissingSidecarPolicy;
use crate::rollout::OnCampaignFailure;
use crate::rollout::in_place::InPlaceMode;
use crate::rollout::promotion::PromotionMode;
use crate::workload::RestartMethod;

/// A choice of the core's as a flag's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flag<T>(pub(crate) T);

impl<T> std::ops::Deref for Flag<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl ValueEnum for Flag<PromotionMode> {
    fn value_variants<'a>() -> &'a [Self] {
        &[Flag(PromotionMode::Auto), Flag(PromotionMode::Gated)]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self.0 {
            PromotionMode::Auto => {
                PossibleValue::new("auto").help("A new revision's campaign starts once it settled")
            }
            PromotionMode::Gated => {
                PossibleValue::new("gated").help("A new revision waits to be promoted")
            }
        })
    }
}

impl ValueEnum for Flag<RestartMethod> {
    fn value_variants<'a>() -> &'a [Self] {
        // In place is the engine's own choice when only images change: never a flag value.
        &[Flag(RestartMethod::Template), Flag(RestartMethod::Evict)]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self.0 {
            RestartMethod::Template => Some(PossibleValue::new("template")),
            RestartMethod::Evict => Some(PossibleValue::new("evict")),
            RestartMethod::InPlace => None,
        }
    }
}

impl ValueEnum for Flag<InPlaceMode> {
    fn value_variants<'a>() -> &'a [Self] {
        &[Flag(InPlaceMode::Auto), Flag(InPlaceMode::Off)]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self.0 {
            InPlaceMode::Auto => PossibleValue::new("auto").help(
                "In place whenever only images of injected containers change (and the sidecar's config does not say `rollout: {inPlace: false}`)",
            ),
            InPlaceMode::Off => PossibleValue::new("off").help("Always restart the workload"),
        })
    }
}

impl ValueEnum for Flag<RevisionsSource> {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Flag(RevisionsSource::Auto),
            Flag(RevisionsSource::Published),
            Flag(RevisionsSource::Configs),
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self.0 {
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

impl ValueEnum for Flag<OnCampaignFailure> {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Flag(OnCampaignFailure::Hold),
            Flag(OnCampaignFailure::Continue),
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self.0 {
            OnCampaignFailure::Hold => PossibleValue::new("hold").help(
                "The sidecar's last good revision (from its revision history), so that the failing one does not spread through scale-ups, drains and crashes",
            ),
            OnCampaignFailure::Continue => {
                PossibleValue::new("continue").help("The revision that failed, as configured")
            }
        })
    }
}

impl ValueEnum for Flag<MissingSidecarPolicy> {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Flag(MissingSidecarPolicy::Deny),
            Flag(MissingSidecarPolicy::Allow),
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self.0 {
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

/// The value of `--namespace-selector`: a label selector as kubectl spells it
/// (`team=a,env!=dev,tier in (web,api),!legacy`).
pub(crate) fn parse_label_selector(
    text: &str,
) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector, String> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let requirement = |key: &str, operator: &str, values: Option<Vec<String>>| {
        let key = key.trim();
        if key.is_empty() || key.contains([' ', '(', ')', '=', '!']) {
            return Err(format!("{key:?} is not a label key (in {text:?})"));
        }
        Ok(LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values,
        })
    };
    let mut expressions = Vec::new();
    for term in split_outside_parentheses(text) {
        let term = term.trim();
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("{term:?}: expected values in parentheses, as in (a,b)"))?;
            Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
        };
        let parsed = if let Some((key, value)) = term.split_once("!=") {
            requirement(key, "NotIn", Some(vec![value.trim().to_owned()]))
        } else if let Some((key, value)) = term.split_once('=') {
            let value = value.strip_prefix('=').unwrap_or(value);
            requirement(key, "In", Some(vec![value.trim().to_owned()]))
        } else if let Some((key, rest)) = term.split_once(" notin ") {
            requirement(key, "NotIn", Some(set(rest)?))
        } else if let Some((key, rest)) = term.split_once(" in ") {
            requirement(key, "In", Some(set(rest)?))
        } else if let Some(key) = term.strip_prefix('!') {
            requirement(key, "DoesNotExist", None)
        } else {
            requirement(term, "Exists", None)
        };
        expressions.push(parsed?);
    }
    if expressions.is_empty() {
        return Err("an empty selector: name at least one label (team=a)".to_owned());
    }
    Ok(LabelSelector {
        match_expressions: Some(expressions),
        match_labels: None,
    })
}

/// `text` split at the commas that are not inside a value set's parentheses.
fn split_outside_parentheses(text: &str) -> Vec<&str> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms.into_iter().filter(|t| !t.trim().is_empty()).collect()
}
