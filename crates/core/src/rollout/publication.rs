//! The publication rules: which revisions the one-shot commands judge pods by, and what a
//! preview made with the configs read here must warn of, from what the serving replicas
//! publish in the status ConfigMap. Pure: publications in, a choice and its words out.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::RevisionsInForce;

/// What one replica serving the webhook injects, and when it last said so (a heartbeat).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Publication {
    pub revisions: RevisionsInForce,
    /// The sidecars whose config leaves their restarts to a person, so that a reader who
    /// cannot read the configs (a team) still learns that nothing restarts their pods. Absent
    /// from the publications of releases before it.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub manual: BTreeSet<String>,
    pub at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

impl Publication {
    /// How long ago it was renewed (zero for a clock ahead of ours).
    pub fn age(&self, now: k8s_openapi::jiff::Timestamp) -> std::time::Duration {
        let seconds = (now.as_second() - self.at.0.as_second()).max(0);
        std::time::Duration::from_secs(seconds as u64)
    }

    /// Renewed within `max_age`: a replica still running publishes it.
    pub fn is_fresh(
        &self,
        now: k8s_openapi::jiff::Timestamp,
        max_age: std::time::Duration,
    ) -> bool {
        self.age(now) <= max_age
    }
}

/// Two fresh publications (renewed within `max_age`) with different revisions, the first
/// fresh one and the first that differs from it; `None` when the fresh ones agree.
pub fn disagreeing(
    injectors: &BTreeMap<String, Publication>,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Option<[(&String, &Publication); 2]> {
    let mut fresh = injectors.iter().filter(|(_, p)| p.is_fresh(now, max_age));
    let first = fresh.next()?;
    fresh
        .find(|(_, p)| p.revisions != first.1.revisions)
        .map(|other| [first, other])
}

/// Where the one-shot commands take the revisions in force from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RevisionsSource {
    /// The running injectors' publications when they are fresh and agree, else the configs
    /// read here.
    #[default]
    Auto,
    /// What the running injectors published (the newest, if they disagree or are stale).
    Published,
    /// The configs this command reads, whatever is published.
    Configs,
}

/// Which revisions a one-shot command judges pods by, and the one line that says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionsChoice {
    /// The publication that judges (its revisions, and its sidecars of manual rollout).
    Published {
        publication: Publication,
        why: String,
    },
    Configs {
        why: String,
        /// Chosen over a publication that is stale, which the caller could ask for anyway.
        over_stale: bool,
    },
    /// Nothing to judge pods by: no publication, and the configs cannot be read here.
    Neither { why: String },
}

/// Whether the one-shot command could read the sidecar configs itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigsHere {
    Read,
    /// Refused or unreachable (a team's rights stop at its namespace): every pod would read
    /// as orphaned by them.
    Unreadable,
}

/// The rule of `--revisions-from`: a publication is fresh when renewed within `max_age`; fresh
/// publications that agree are what new pods get; when they disagree, or none is fresh, the
/// configs read here are the better guess, and the line says so. Configs that cannot be read
/// here are no guess at all: the newest publication, however old, is the better one.
pub fn choose_revisions(
    injectors: &BTreeMap<String, Publication>,
    source: RevisionsSource,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
    configs: ConfigsHere,
) -> RevisionsChoice {
    let describe = |p: &Publication| humantime::format_duration(p.age(now)).to_string() + " ago";
    let newest = injectors.iter().max_by_key(|(_, p)| p.at.0);
    let unreadable = configs == ConfigsHere::Unreadable;
    if source == RevisionsSource::Configs {
        return if unreadable {
            RevisionsChoice::Neither {
                why: "the configs were asked for".into(),
            }
        } else {
            RevisionsChoice::Configs {
                why: "revisions from the configs read here, as asked".into(),
                over_stale: false,
            }
        };
    }
    let Some((newest_by, newest_publication)) = newest else {
        return unpublished(source, configs);
    };
    let fresh: Vec<(&String, &Publication)> = injectors
        .iter()
        .filter(|(_, p)| p.is_fresh(now, max_age))
        .collect();
    if source == RevisionsSource::Published {
        return RevisionsChoice::Published {
            publication: newest_publication.clone(),
            why: format!(
                "revisions as {newest_by} published them {}, as asked",
                describe(newest_publication)
            ),
        };
    }
    // Where the configs read here would stand in, but none could be read.
    let newest_instead = |though: String| RevisionsChoice::Published {
        publication: newest_publication.clone(),
        why: format!(
            "the sidecar configs cannot be read here: revisions as {newest_by} published them {}, {though}",
            describe(newest_publication)
        ),
    };
    if fresh.is_empty() && unreadable {
        return newest_instead(format!(
            "though stale (older than {}: is the injector running?)",
            humantime::format_duration(max_age)
        ));
    }
    if fresh.is_empty() {
        return RevisionsChoice::Configs {
            why: format!(
                "the injectors' publication is stale (last from {newest_by}, {}; older than {}): using the configs read here",
                describe(newest_publication),
                humantime::format_duration(max_age)
            ),
            over_stale: true,
        };
    }
    if let Some([(first, one), (other, another)]) = disagreeing(injectors, now, max_age) {
        let (one, another) = (summary(&one.revisions), summary(&another.revisions));
        if unreadable {
            return newest_instead(format!(
                "the newest of injectors that disagree ({first} publishes {one}, {other} publishes {another})"
            ));
        }
        return RevisionsChoice::Configs {
            why: format!(
                "running injectors disagree ({first} publishes {one}, {other} publishes {another}): using the configs read here"
            ),
            over_stale: false,
        };
    }
    let names: Vec<&str> = fresh.iter().map(|(n, _)| n.as_str()).collect();
    RevisionsChoice::Published {
        publication: fresh[0].1.clone(),
        why: format!(
            "revisions as the running injector(s) {} published them ({})",
            names.join(", "),
            describe(newest_publication)
        ),
    }
}

/// [`choose_revisions`] when no injector has published its revisions.
fn unpublished(source: RevisionsSource, configs: ConfigsHere) -> RevisionsChoice {
    match (configs, source) {
        (ConfigsHere::Unreadable, _) => RevisionsChoice::Neither {
            why: "no running injector has published its revisions".into(),
        },
        (ConfigsHere::Read, RevisionsSource::Published) => RevisionsChoice::Configs {
            why: "no running injector has published its revisions; using the configs read here"
                .into(),
            over_stale: false,
        },
        (ConfigsHere::Read, _) => RevisionsChoice::Configs {
            why: "revisions from the configs read here (no running injector has published any)"
                .into(),
            over_stale: false,
        },
    }
}

/// What a preview made with the configs read here (`inject -f`, `explain -f` outside a
/// checkout) must warn of, one line each: a sidecar whose revision here (pins applied) is not
/// the one the fresh, agreeing publications say the webhook injects (it has not loaded the
/// edit yet, or it refused the config and keeps the last good one), or fresh publications
/// that disagree. A preview cannot take a publication's revisions instead (it holds no
/// content), so it says where it may differ. Nothing when no publication is fresh: the
/// configs read here are then the best guess there is.
pub fn preview_warnings(
    here: &RevisionsInForce,
    injectors: &BTreeMap<String, Publication>,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Vec<String> {
    if let Some([(first, one), (other, another)]) = disagreeing(injectors, now, max_age) {
        return vec![format!(
            "running injectors disagree ({first} publishes {}, {other} publishes {}): new pods get what the replica that answers serves; shown with the configs read here",
            summary(&one.revisions),
            summary(&another.revisions)
        )];
    }
    let fresh: Vec<(&String, &Publication)> = injectors
        .iter()
        .filter(|(_, p)| p.is_fresh(now, max_age))
        .collect();
    let Some((_, published)) = fresh.iter().max_by_key(|(_, p)| p.at.0) else {
        return Vec::new();
    };
    let by = format!(
        "the running injector(s) {} (published {} ago)",
        fresh
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        humantime::format_duration(published.age(now))
    );
    let names: BTreeSet<&str> = here
        .iter()
        .chain(published.revisions.iter())
        .map(|(name, _)| name)
        .collect();
    let mut warnings = Vec::new();
    // Sidecars no config here defines, said in one line: a preview of one Deployment is
    // not to be buried under every sidecar the cluster serves.
    let mut unread = Vec::new();
    for name in names {
        match (here.get(name), published.revisions.get(name)) {
            (Some(ours), Some(theirs)) if ours != theirs => warnings.push(format!(
                "{name}: the config read here is revision {ours}, but {by} inject revision {theirs}: the webhook has not loaded this config yet, or refused it and keeps its last good one (its log says why); shown with the config read here"
            )),
            (Some(ours), None) => warnings.push(format!(
                "{name}: revision {ours} is read here, but {by} do not inject it: the webhook has not loaded this config yet, or refused it (its log says why); shown with it all the same"
            )),
            (None, Some(theirs)) => unread.push(format!("{name} ({theirs})")),
            _ => {}
        }
    }
    if !unread.is_empty() {
        warnings.push(format!(
            "{by} also inject {}, but no config for them is read here: a pod that asks for one is shown without it",
            unread.join(", ")
        ));
    }
    warnings
}

fn summary(revisions: &RevisionsInForce) -> String {
    revisions
        .iter()
        .map(|(s, r)| format!("{s}={r}"))
        .collect::<Vec<_>>()
        .join(",")
}
