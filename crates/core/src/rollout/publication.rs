//! The publication rules: which revisions the one-shot commands judge pods by, and what a
//! preview made with the configs read here must warn of, from what the serving replicas
//! publish in the status ConfigMap. Pure: publications in, a choice and its reasons out.

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

/// Which revisions a one-shot command judges pods by, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionsChoice {
    /// The publication that judges (its revisions, and its sidecars of manual rollout).
    Published {
        publication: Publication,
        why: PublishedWhy,
    },
    Configs {
        why: ConfigsWhy,
        /// Chosen over a publication that is stale, which the caller could ask for anyway.
        over_stale: bool,
    },
    /// Nothing to judge pods by: no publication, and the configs cannot be read here.
    Neither { why: NeitherWhy },
}

/// Who published the newest publication, and how long ago.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub by: String,
    pub age: std::time::Duration,
}

/// Two fresh publications that differ: the first fresh one and the first that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    pub first: (String, RevisionsInForce),
    pub other: (String, RevisionsInForce),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishedWhy {
    /// `--revisions-from=published`: the newest.
    AsAsked(Published),
    /// The configs cannot be read here: the newest, though it is stale (older than
    /// `max_age`).
    UnreadableConfigsStale {
        newest: Published,
        max_age: std::time::Duration,
    },
    /// The configs cannot be read here: the newest of injectors that disagree.
    UnreadableConfigsDisagreeing {
        newest: Published,
        disagreement: Disagreement,
    },
    /// Fresh and in agreement: the injectors that published them, the newest `age` ago.
    Fresh {
        by: Vec<String>,
        age: std::time::Duration,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigsWhy {
    /// `--revisions-from=configs`.
    AsAsked,
    /// The newest publication is older than `max_age`.
    Stale {
        newest: Published,
        max_age: std::time::Duration,
    },
    Disagreeing(Disagreement),
    /// No injector has published, and the publication was asked for.
    NonePublishedAsked,
    NonePublished,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NeitherWhy {
    /// `--revisions-from=configs`, and they cannot be read here.
    ConfigsAsked,
    NonePublished,
}

/// Whether the one-shot command could read the sidecar configs itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigsHere {
    Read,
    /// Refused or unreachable (a team's rights stop at its namespace): every pod would read
    /// as orphaned by them.
    Unreadable,
}

fn disagreement([(first, one), (other, another)]: [(&String, &Publication); 2]) -> Disagreement {
    Disagreement {
        first: (first.clone(), one.revisions.clone()),
        other: (other.clone(), another.revisions.clone()),
    }
}

/// The rule of `--revisions-from`: a publication is fresh when renewed within `max_age`; fresh
/// publications that agree are what new pods get; when they disagree, or none is fresh, the
/// configs read here are the better guess, and the choice says so. Configs that cannot be
/// read here are no guess at all: the newest publication, however old, is the better one.
pub fn choose_revisions(
    injectors: &BTreeMap<String, Publication>,
    source: RevisionsSource,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
    configs: ConfigsHere,
) -> RevisionsChoice {
    let newest = injectors.iter().max_by_key(|(_, p)| p.at.0);
    let unreadable = configs == ConfigsHere::Unreadable;
    if source == RevisionsSource::Configs {
        return if unreadable {
            RevisionsChoice::Neither {
                why: NeitherWhy::ConfigsAsked,
            }
        } else {
            RevisionsChoice::Configs {
                why: ConfigsWhy::AsAsked,
                over_stale: false,
            }
        };
    }
    let Some((newest_by, newest_publication)) = newest else {
        return unpublished(source, configs);
    };
    let newest = Published {
        by: newest_by.clone(),
        age: newest_publication.age(now),
    };
    let fresh: Vec<(&String, &Publication)> = injectors
        .iter()
        .filter(|(_, p)| p.is_fresh(now, max_age))
        .collect();
    let published = |why| RevisionsChoice::Published {
        publication: newest_publication.clone(),
        why,
    };
    if source == RevisionsSource::Published {
        return published(PublishedWhy::AsAsked(newest));
    }
    if fresh.is_empty() && unreadable {
        return published(PublishedWhy::UnreadableConfigsStale { newest, max_age });
    }
    if fresh.is_empty() {
        return RevisionsChoice::Configs {
            why: ConfigsWhy::Stale { newest, max_age },
            over_stale: true,
        };
    }
    if let Some(pair) = disagreeing(injectors, now, max_age) {
        let disagreement = disagreement(pair);
        if unreadable {
            return published(PublishedWhy::UnreadableConfigsDisagreeing {
                newest,
                disagreement,
            });
        }
        return RevisionsChoice::Configs {
            why: ConfigsWhy::Disagreeing(disagreement),
            over_stale: false,
        };
    }
    RevisionsChoice::Published {
        publication: fresh[0].1.clone(),
        why: PublishedWhy::Fresh {
            by: fresh.iter().map(|(n, _)| (*n).clone()).collect(),
            age: newest.age,
        },
    }
}

/// [`choose_revisions`] when no injector has published its revisions.
fn unpublished(source: RevisionsSource, configs: ConfigsHere) -> RevisionsChoice {
    match (configs, source) {
        (ConfigsHere::Unreadable, _) => RevisionsChoice::Neither {
            why: NeitherWhy::NonePublished,
        },
        (ConfigsHere::Read, RevisionsSource::Published) => RevisionsChoice::Configs {
            why: ConfigsWhy::NonePublishedAsked,
            over_stale: false,
        },
        (ConfigsHere::Read, _) => RevisionsChoice::Configs {
            why: ConfigsWhy::NonePublished,
            over_stale: false,
        },
    }
}

/// What a preview made with the configs read here must warn of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreviewWarning {
    /// Fresh publications disagree: new pods get what the replica that answers serves.
    Disagreeing(Disagreement),
    /// The config read here is revision `here`, the injectors inject `injected`.
    OtherRevision {
        sidecar: String,
        here: String,
        injected: String,
        by: Injectors,
    },
    /// Read here, not injected by them.
    NotInjected {
        sidecar: String,
        here: String,
        by: Injectors,
    },
    /// Injected by them (sidecar, revision), with no config read here.
    NotReadHere {
        sidecars: Vec<(String, String)>,
        by: Injectors,
    },
    /// The status ConfigMap's publications cannot be read (its namespace, and why).
    Malformed { namespace: String, error: String },
}

/// The fresh injectors a preview is compared with, and how long ago the newest published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injectors {
    pub names: Vec<String>,
    pub age: std::time::Duration,
}

/// What a preview made with the configs read here (`inject -f`, `explain -f` outside a
/// checkout) must warn of, one warning each: a sidecar whose revision here (pins applied) is
/// not the one the fresh, agreeing publications say the webhook injects (it has not loaded
/// the edit yet, or it refused the config and keeps the last good one), or fresh publications
/// that disagree. A preview cannot take a publication's revisions instead (it holds no
/// content), so it says where it may differ. Nothing when no publication is fresh: the
/// configs read here are then the best guess there is.
pub fn preview_warnings(
    here: &RevisionsInForce,
    injectors: &BTreeMap<String, Publication>,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Vec<PreviewWarning> {
    if let Some(pair) = disagreeing(injectors, now, max_age) {
        return vec![PreviewWarning::Disagreeing(disagreement(pair))];
    }
    let fresh: Vec<(&String, &Publication)> = injectors
        .iter()
        .filter(|(_, p)| p.is_fresh(now, max_age))
        .collect();
    let Some((_, published)) = fresh.iter().max_by_key(|(_, p)| p.at.0) else {
        return Vec::new();
    };
    let by = Injectors {
        names: fresh.iter().map(|(n, _)| (*n).clone()).collect(),
        age: published.age(now),
    };
    let names: BTreeSet<&str> = here
        .iter()
        .chain(published.revisions.iter())
        .map(|(name, _)| name)
        .collect();
    let mut warnings = Vec::new();
    // Sidecars no config here defines, in one warning: a preview of one Deployment is not to
    // be buried under every sidecar the cluster serves.
    let mut unread = Vec::new();
    for name in names {
        match (here.get(name), published.revisions.get(name)) {
            (Some(ours), Some(theirs)) if ours != theirs => {
                warnings.push(PreviewWarning::OtherRevision {
                    sidecar: name.to_owned(),
                    here: ours.to_owned(),
                    injected: theirs.to_owned(),
                    by: by.clone(),
                });
            }
            (Some(ours), None) => warnings.push(PreviewWarning::NotInjected {
                sidecar: name.to_owned(),
                here: ours.to_owned(),
                by: by.clone(),
            }),
            (None, Some(theirs)) => unread.push((name.to_owned(), theirs.to_owned())),
            _ => {}
        }
    }
    if !unread.is_empty() {
        warnings.push(PreviewWarning::NotReadHere {
            sidecars: unread,
            by,
        });
    }
    warnings
}
