//! Which revisions a one-shot command judges pods by and why, and what a preview made with
//! the configs read here warns of, in words.

use crate::cluster::status::{STATUS_CONFIGMAP, STATUS_INJECTORS_KEY};
use crate::config::RevisionsInForce;
use crate::rollout::publication::{
    ConfigsWhy, Disagreement, Injectors, NeitherWhy, PreviewWarning, Published, PublishedWhy,
};

fn ago(age: std::time::Duration) -> String {
    format!("{} ago", humantime::format_duration(age))
}

fn summary(revisions: &RevisionsInForce) -> String {
    revisions
        .iter()
        .map(|(s, r)| format!("{s}={r}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn disagreement(d: &Disagreement) -> String {
    format!(
        "{} publishes {}, {} publishes {}",
        d.first.0,
        summary(&d.first.1),
        d.other.0,
        summary(&d.other.1)
    )
}

fn newest_instead(newest: &Published, though: &str) -> String {
    format!(
        "the sidecar configs cannot be read here: revisions as {} published them {}, {though}",
        newest.by,
        ago(newest.age)
    )
}

pub(crate) fn published_why(why: &PublishedWhy) -> String {
    match why {
        PublishedWhy::AsAsked(newest) => format!(
            "revisions as {} published them {}, as asked",
            newest.by,
            ago(newest.age)
        ),
        PublishedWhy::UnreadableConfigsStale { newest, max_age } => newest_instead(
            newest,
            &format!(
                "though stale (older than {}: is the injector running?)",
                humantime::format_duration(*max_age)
            ),
        ),
        PublishedWhy::UnreadableConfigsDisagreeing {
            newest,
            disagreement: d,
        } => newest_instead(
            newest,
            &format!(
                "the newest of injectors that disagree ({})",
                disagreement(d)
            ),
        ),
        PublishedWhy::Fresh { by, age } => format!(
            "revisions as the running injector(s) {} published them ({})",
            by.join(", "),
            ago(*age)
        ),
    }
}

pub(crate) fn configs_why(why: &ConfigsWhy) -> String {
    match why {
        ConfigsWhy::AsAsked => "revisions from the configs read here, as asked".to_owned(),
        ConfigsWhy::Stale { newest, max_age } => format!(
            "the injectors' publication is stale (last from {}, {}; older than {}): using the configs read here",
            newest.by,
            ago(newest.age),
            humantime::format_duration(*max_age)
        ),
        ConfigsWhy::Disagreeing(d) => format!(
            "running injectors disagree ({}): using the configs read here",
            disagreement(d)
        ),
        ConfigsWhy::NonePublishedAsked => {
            "no running injector has published its revisions; using the configs read here"
                .to_owned()
        }
        ConfigsWhy::NonePublished => {
            "revisions from the configs read here (no running injector has published any)"
                .to_owned()
        }
    }
}

pub(crate) fn neither_why(why: &NeitherWhy) -> String {
    match why {
        NeitherWhy::ConfigsAsked => "the configs were asked for".to_owned(),
        NeitherWhy::NonePublished => "no running injector has published its revisions".to_owned(),
    }
}

fn injectors(by: &Injectors) -> String {
    format!(
        "the running injector(s) {} (published {})",
        by.names.join(", "),
        ago(by.age)
    )
}

pub(crate) fn preview_warning(warning: &PreviewWarning) -> String {
    match warning {
        PreviewWarning::Disagreeing(d) => format!(
            "running injectors disagree ({}): new pods get what the replica that answers serves; shown with the configs read here",
            disagreement(d)
        ),
        PreviewWarning::OtherRevision {
            sidecar,
            here,
            injected,
            by,
        } => format!(
            "{sidecar}: the config read here is revision {here}, but {} inject revision {injected}: the webhook has not loaded this config yet, or refused it and keeps its last good one (its log says why); shown with the config read here",
            injectors(by)
        ),
        PreviewWarning::NotInjected { sidecar, here, by } => format!(
            "{sidecar}: revision {here} is read here, but {} do not inject it: the webhook has not loaded this config yet, or refused it (its log says why); shown with it all the same",
            injectors(by)
        ),
        PreviewWarning::NotReadHere { sidecars, by } => {
            let named: Vec<String> = sidecars
                .iter()
                .map(|(name, revision)| format!("{name} ({revision})"))
                .collect();
            format!(
                "{} also inject {}, but no config for them is read here: a pod that asks for one is shown without it",
                injectors(by),
                named.join(", ")
            )
        }
        PreviewWarning::Malformed { namespace, error } => format!(
            "{namespace}/{STATUS_CONFIGMAP} item {STATUS_INJECTORS_KEY} is malformed ({error}): whether the running injectors inject these revisions is unknown"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
