//! The targets of a plan: the revision each sidecar's pods are brought to, whether its rollout
//! policy is manual, and what changed since the revision this process saw before.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::book::CampaignBook;
use super::change::describe_changes;
use super::plan::SidecarTarget;
use crate::config::revision::injected_content;
use crate::config::{RevisionsInForce, RolloutMode, SidecarSet};

/// What this process remembers of each sidecar's content, so that a new revision can be
/// described against the one before.
#[derive(Debug, Default)]
pub struct ContentHistory {
    seen: BTreeMap<String, SeenContent>,
    changes: BTreeMap<String, DescribedChange>,
    /// Per sidecar, the contents of the revisions seen before the current one, newest last.
    older: BTreeMap<String, Vec<SeenContent>>,
}

/// How many older contents are kept per sidecar, to describe pods several revisions behind.
const OLDER_CONTENTS: usize = 10;

/// The last revision of a sidecar seen, with its injected content.
#[derive(Debug)]
struct SeenContent {
    revision: String,
    content: Value,
}

/// What changed to reach `revision`.
#[derive(Debug)]
struct DescribedChange {
    revision: String,
    what: String,
}

impl ContentHistory {
    /// The targets for the configs in force, each with what changed when this process saw the
    /// previous content; notes each sidecar's content for the next revision.
    /// `honour_manual`: a `rollout: {policy: manual}` sidecar is held (`serve`), or not (the
    /// one-shot CLI, which a person runs on purpose).
    pub fn targets(
        &mut self,
        set: &SidecarSet,
        honour_manual: bool,
    ) -> BTreeMap<String, SidecarTarget> {
        let mut targets = BTreeMap::new();
        for sidecar in set.iter() {
            let name = sidecar.config.name.to_string();
            let revision = sidecar.revision.to_string();
            let content = injected_content(&sidecar.config);
            if let Some(seen) = self.seen.get(&name)
                && seen.revision != revision
            {
                let what = describe_changes(&seen.content, &content);
                self.changes.insert(
                    name.clone(),
                    DescribedChange {
                        revision: revision.clone(),
                        what,
                    },
                );
            }
            let changes_from = self.changes_from(&name, &revision, &content);
            let previous = self.seen.insert(
                name.clone(),
                SeenContent {
                    revision: revision.clone(),
                    content,
                },
            );
            if let Some(previous) = previous.filter(|p| p.revision != revision) {
                let older = self.older.entry(name.clone()).or_default();
                older.retain(|o| o.revision != previous.revision && o.revision != revision);
                older.push(previous);
                if older.len() > OLDER_CONTENTS {
                    older.remove(0);
                }
            }
            let changes = self
                .changes
                .get(&name)
                .filter(|c| c.revision == revision)
                .map(|c| c.what.clone());
            let manual = honour_manual && sidecar.config.rollout_mode() == RolloutMode::Manual;
            targets.insert(
                name,
                SidecarTarget {
                    revision,
                    manual,
                    in_place: sidecar.config.in_place_allowed(),
                    changes,
                    changes_from,
                    checks: sidecar.config.metric_checks().to_vec(),
                    containers: sidecar.config.container_names(),
                },
            );
        }
        targets
    }
}

impl ContentHistory {
    /// What changed to `revision` from each revision of `sidecar` seen before it.
    fn changes_from(
        &self,
        sidecar: &str,
        revision: &str,
        content: &Value,
    ) -> BTreeMap<String, String> {
        let last = self.seen.get(sidecar).into_iter();
        self.older
            .get(sidecar)
            .into_iter()
            .flatten()
            .chain(last)
            .filter(|old| old.revision != revision)
            .map(|old| {
                (
                    old.revision.clone(),
                    describe_changes(&old.content, content),
                )
            })
            .collect()
    }
}

/// The targets a running injector published: its revisions, the policy from the configs read
/// here, or, for a sidecar with none here, as published (`published_manual`); no change
/// description (the published content is not known here).
pub fn published_targets(
    published: &RevisionsInForce,
    published_manual: &BTreeSet<String>,
    set: &SidecarSet,
    honour_manual: bool,
) -> BTreeMap<String, SidecarTarget> {
    published
        .iter()
        .map(|(name, revision)| {
            let own = set.named(name);
            let manual = honour_manual && set.rollout_is_manual(name, published_manual);
            let target = SidecarTarget {
                revision: revision.to_owned(),
                manual,
                in_place: own.is_none_or(|s| s.config.in_place_allowed()),
                changes: None,
                changes_from: BTreeMap::new(),
                checks: own
                    .map(|s| s.config.metric_checks().to_vec())
                    .unwrap_or_default(),
                containers: own.map(|s| s.config.container_names()).unwrap_or_default(),
            };
            (name.to_owned(), target)
        })
        .collect()
}

/// The revisions a plan brings pods to: what a running injector published (`published`: its
/// revisions and manual sidecars), with the book's pins over them, or else those of `pinned`
/// (the configs read here, pins applied) with what changed since `content` last saw each.
pub fn plan_targets(
    published: Option<(&RevisionsInForce, &BTreeSet<String>)>,
    book: &CampaignBook,
    content: &mut ContentHistory,
    pinned: &SidecarSet,
    honour_manual: bool,
) -> BTreeMap<String, SidecarTarget> {
    let Some((revisions, manual)) = published else {
        return content.targets(pinned, honour_manual);
    };
    let mut targets = published_targets(revisions, manual, pinned, honour_manual);
    // Replicas publish the pinned revision once they have read the pin; until then they
    // publish the config's, which the pin replaces.
    for (sidecar, pin) in &book.pins {
        if let Some(target) = targets.get_mut(sidecar)
            && target.revision == pin.over
        {
            target.revision.clone_from(&pin.revision);
        }
    }
    targets
}

/// The targets of a plan by revision, with what they are computed from.
pub struct RevisionTargets {
    pub targets: BTreeMap<String, SidecarTarget>,
    /// The configs in force (see [`in_force`]), already noted in the history.
    pub in_force: SidecarSet,
    /// What the book's pins could not serve.
    pub errors: Vec<super::content::ContentError>,
    /// Whether noting them changed the history.
    pub history_changed: bool,
}

/// The revisions pods are brought to: `set` with the book's pins applied, as [`plan_targets`]
/// makes them, and the content of each revision in force noted in `history` before the plan
/// compares it (an in-place upgrade needs both contents).
#[allow(clippy::too_many_arguments)] // the inputs of one rule, none derivable from another
pub fn revision_targets(
    book: &CampaignBook,
    published: Option<(&RevisionsInForce, &BTreeSet<String>)>,
    content: &mut ContentHistory,
    history: &mut super::history::RevisionHistory,
    set: &SidecarSet,
    settings: &super::plan::RolloutSettings,
    honour_manual: bool,
    now: k8s_openapi::jiff::Timestamp,
) -> RevisionTargets {
    let (pinned, errors) = book.pinned(set);
    let targets = plan_targets(published, book, content, &pinned, honour_manual);
    let in_force = in_force(&pinned, &targets);
    let history_changed = history.observe(
        &in_force,
        book,
        now,
        settings.good_after,
        settings.history_limit,
    );
    RevisionTargets {
        targets,
        in_force,
        errors,
        history_changed,
    }
}

/// The configs of `pinned` whose revision is the one pods are brought to (the one-shot CLI may
/// judge by published revisions): their content is that revision's.
pub fn in_force(pinned: &SidecarSet, targets: &BTreeMap<String, SidecarTarget>) -> SidecarSet {
    pinned
        .iter()
        .filter(|s| {
            targets
                .get(&s.config.name.to_string())
                .is_some_and(|t| t.revision == s.revision.as_str())
        })
        .map(|s| (**s).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadedSidecar, parse_config};

    fn set(text: &str) -> SidecarSet {
        let parsed = parse_config("test.yaml", text).unwrap();
        std::iter::once(LoadedSidecar::new(parsed.config, "test.yaml")).collect()
    }

    const V1: &str = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:1.0'}]\n";
    const V2: &str = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:2.0'}]\n";
    const MANUAL: &str = "name: logger:v1\nrollout: {policy: manual}\ncontainers: [{name: shipper, image: 'shipper:2.0'}]\n";

    #[test]
    fn a_new_revision_is_described_against_the_content_seen_before() {
        let mut history = ContentHistory::default();
        let first = history.targets(&set(V1), true);
        assert_eq!(first["logger:v1"].changes, None);
        let second = history.targets(&set(V2), true);
        assert_ne!(second["logger:v1"].revision, first["logger:v1"].revision);
        assert_eq!(
            second["logger:v1"].changes.as_deref(),
            Some(r#"containers[shipper].image "shipper:1.0" -> "shipper:2.0""#)
        );
        // The description stays with its revision on the next plan.
        let again = history.targets(&set(V2), true);
        assert_eq!(again["logger:v1"].changes, second["logger:v1"].changes);
    }

    const V3: &str =
        "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:3.0', args: [-q]}]\n";

    #[test]
    fn a_pod_several_revisions_behind_is_described_from_its_own_revision() {
        let mut history = ContentHistory::default();
        let v1 = history.targets(&set(V1), true)["logger:v1"]
            .revision
            .clone();
        let v2 = history.targets(&set(V2), true)["logger:v1"]
            .revision
            .clone();
        let v3 = history.targets(&set(V3), true);
        let target = &v3["logger:v1"];
        assert_eq!(
            target.changes_from[&v2],
            r#"containers[shipper].args (none) -> ["-q"], containers[shipper].image "shipper:2.0" -> "shipper:3.0""#
        );
        assert_eq!(
            target.changes_from[&v1],
            r#"containers[shipper].args (none) -> ["-q"], containers[shipper].image "shipper:1.0" -> "shipper:3.0""#
        );
        assert_eq!(target.changes, Some(target.changes_from[&v2].clone()));
    }

    #[test]
    fn manual_policy_holds_only_when_honoured() {
        let mut history = ContentHistory::default();
        assert!(history.targets(&set(MANUAL), true)["logger:v1"].manual);
        assert!(!history.targets(&set(MANUAL), false)["logger:v1"].manual);
        let published: RevisionsInForce = [("logger:v1".to_owned(), "aaaaaaaaaaaa".to_owned())]
            .into_iter()
            .collect();
        let none = BTreeSet::new();
        let targets = published_targets(&published, &none, &set(MANUAL), true);
        assert_eq!(targets["logger:v1"].revision, "aaaaaaaaaaaa");
        assert!(targets["logger:v1"].manual);
        assert_eq!(targets["logger:v1"].changes, None);
        // No config read here: the publication says which are manual.
        let manual = BTreeSet::from(["logger:v1".to_owned()]);
        let unread = SidecarSet::default();
        assert!(published_targets(&published, &manual, &unread, true)["logger:v1"].manual);
        assert!(!published_targets(&published, &none, &unread, true)["logger:v1"].manual);
        assert!(!published_targets(&published, &manual, &unread, false)["logger:v1"].manual);
        // A config read here decides over the publication.
        assert!(!published_targets(&published, &manual, &set(V1), true)["logger:v1"].manual);
    }
}
