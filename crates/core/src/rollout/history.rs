//! The revision history of each sidecar: the injected content of its last revisions, when each
//! was first served and how its rollout went. It outlives the process (the Lease holder keeps
//! it in the `sidecar-injector-history` ConfigMap), so a revision that failed can be held back
//! to the last good one, and `rollout --to` can bring any remembered revision back.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::book::{CampaignBook, CampaignState};
use crate::config::SidecarSet;
use crate::config::revision::injected_content;

/// How a revision's rollout went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Served, its campaign neither completed nor failed yet.
    Pending,
    /// Its campaign completed, or it served for `--good-after` without a failure.
    Good,
    /// Its campaign paused on failures.
    Failed,
}

/// One revision of a sidecar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub revision: String,
    /// The injected content, as the revision hashes it.
    pub content: Value,
    pub first_served: Time,
    pub outcome: Outcome,
    /// Why it failed (the pause reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Every sidecar's last revisions, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RevisionHistory {
    pub sidecars: BTreeMap<String, Vec<HistoryEntry>>,
}

/// How many revisions each sidecar keeps unless told otherwise.
pub const DEFAULT_HISTORY_LIMIT: usize = 10;

/// What the history ConfigMap may hold in all: a ConfigMap is at most 1 MiB, and the rest is
/// left for its metadata and JSON framing.
pub const MAX_HISTORY_BYTES: usize = 900 * 1024;

/// Why a revision asked for by `rollout --to` cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    #[error("`{0}` is not SIDECAR=REVISION (e.g. logger:v1=3f2a9c1e7b0d, or logger:v1=previous)")]
    Spec(String),
    #[error("no revision history for sidecar {sidecar}; {}", known_sidecars(known))]
    UnknownSidecar { sidecar: String, known: String },
    #[error("sidecar {sidecar} has no revision {revision} in its history; known: {known}")]
    UnknownRevision {
        sidecar: String,
        revision: String,
        known: String,
    },
    #[error("sidecar {sidecar} has no revision before {current} that did not fail; known: {known}")]
    NoPrevious {
        sidecar: String,
        current: String,
        known: String,
    },
}

/// The sidecars a history knows, or why it knows none: on a new install, `--to` is tried
/// before any revision was recorded, and an empty "known:" said nothing of why.
fn known_sidecars(known: &str) -> String {
    if known.is_empty() {
        "the history holds no sidecar yet: the Lease holder of a rollout engine in auto mode \
         records each revision it serves, and a rollback can only go back to one it recorded"
            .to_owned()
    } else {
        format!("known: {known}")
    }
}

impl RevisionHistory {
    /// Notes what `served` serves now (a new revision starts as pending) and what the book says
    /// of each revision's campaign: paused -> failed, complete -> good, served for
    /// `good_after` without a failure -> good. Keeps the last `limit` revisions per sidecar.
    /// Returns whether anything changed.
    pub fn observe(
        &mut self,
        served: &SidecarSet,
        book: &CampaignBook,
        now: Timestamp,
        good_after: Duration,
        limit: usize,
    ) -> bool {
        let before = self.clone();
        for sidecar in served.iter() {
            let name = sidecar.config.name.to_string();
            let revision = sidecar.revision.as_str();
            let entries = self.sidecars.entry(name.clone()).or_default();
            if !entries.iter().any(|e| e.revision == revision) {
                entries.push(HistoryEntry {
                    revision: revision.to_owned(),
                    content: injected_content(&sidecar.config),
                    first_served: Time(now),
                    outcome: Outcome::Pending,
                    reason: None,
                });
            }
            let campaign = book.campaigns.get(&name);
            for entry in entries.iter_mut() {
                let ours = campaign.filter(|c| c.revision == entry.revision);
                match ours {
                    Some(c) if c.state == CampaignState::Paused => {
                        entry.outcome = Outcome::Failed;
                        entry.reason.clone_from(&c.pause_reason);
                    }
                    Some(c) if entry.outcome == Outcome::Pending => {
                        let served_long = SignedDuration::try_from(good_after)
                            .ok()
                            .and_then(|d| entry.first_served.0.checked_add(d).ok())
                            .is_some_and(|until| until <= now);
                        // A gated revision has not rolled out: time alone says nothing of it.
                        let judged_by_time =
                            served_long && !c.has_failed() && c.state != CampaignState::Gated;
                        if c.state == CampaignState::Complete || judged_by_time {
                            entry.outcome = Outcome::Good;
                        }
                    }
                    _ => {}
                }
            }
            let excess = entries.len().saturating_sub(limit.max(1));
            entries.drain(..excess);
        }
        self.fit(MAX_HISTORY_BYTES);
        *self != before
    }

    /// Drops the oldest entries (never a sidecar's newest) until the JSON fits in `bytes`.
    fn fit(&mut self, bytes: usize) {
        while serde_json::to_vec(self).map_or(0, |v| v.len()) > bytes {
            let oldest = self
                .sidecars
                .iter()
                .filter(|(_, entries)| entries.len() > 1)
                .min_by_key(|(_, entries)| entries[0].first_served.0)
                .map(|(name, _)| name.clone());
            let Some(name) = oldest else { return };
            self.sidecars.get_mut(&name).expect("just found").remove(0);
        }
    }

    pub fn entries(&self, sidecar: &str) -> &[HistoryEntry] {
        self.sidecars.get(sidecar).map_or(&[], Vec::as_slice)
    }

    /// The newest good revision of `sidecar` other than `except`.
    pub fn last_good(&self, sidecar: &str, except: &str) -> Option<&HistoryEntry> {
        self.entries(sidecar)
            .iter()
            .rev()
            .find(|e| e.outcome == Outcome::Good && e.revision != except)
    }

    /// The revision `spec` (`SIDECAR=REV`, or `SIDECAR=previous`: the newest revision before
    /// `current` that did not fail) names.
    pub fn resolve(
        &self,
        spec: &str,
        current: impl Fn(&str) -> Option<String>,
    ) -> Result<(String, &HistoryEntry), HistoryError> {
        let (sidecar, revision) = spec
            .split_once('=')
            .map(|(s, r)| (s.trim(), r.trim()))
            .filter(|(s, r)| !s.is_empty() && !r.is_empty())
            .ok_or_else(|| HistoryError::Spec(spec.to_owned()))?;
        let sidecar = crate::name::SidecarName::parse(sidecar)
            .map_err(|_| HistoryError::Spec(spec.to_owned()))?
            .to_string();
        let entries = self.entries(&sidecar);
        if entries.is_empty() {
            return Err(HistoryError::UnknownSidecar {
                known: self.sidecars.keys().cloned().collect::<Vec<_>>().join(", "),
                sidecar,
            });
        }
        let known = entries
            .iter()
            .map(|e| format!("{} ({})", e.revision, e.outcome.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let found = if revision == "previous" {
            let current = current(&sidecar).unwrap_or_default();
            let before = entries
                .iter()
                .position(|e| e.revision == current)
                .unwrap_or(entries.len());
            entries[..before]
                .iter()
                .rev()
                .find(|e| e.outcome != Outcome::Failed)
                .ok_or(HistoryError::NoPrevious {
                    sidecar: sidecar.clone(),
                    current,
                    known,
                })?
        } else {
            let revision = revision.to_ascii_lowercase();
            entries.iter().find(|e| e.revision == revision).ok_or(
                HistoryError::UnknownRevision {
                    sidecar: sidecar.clone(),
                    revision,
                    known,
                },
            )?
        };
        Ok((sidecar, found))
    }
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pending => "pending",
            Outcome::Good => "good",
            Outcome::Failed => "failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::{campaign, loaded};

    fn set(text: &str) -> SidecarSet {
        std::iter::once(loaded(text)).collect()
    }
    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    const V1: &str = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:1.0'}]\nvolumes: [{name: logs, emptyDir: {}}]\n";
    const V2: &str = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:2.0'}]\nvolumes: [{name: logs, emptyDir: {}}]\n";

    fn book_at(revision: &str, state: CampaignState) -> CampaignBook {
        let mut book = CampaignBook::default();
        book.campaigns
            .insert("logger:v1".into(), campaign(revision, state, Time(at(0))));
        book
    }

    #[test]
    fn a_revision_is_pending_then_good_when_its_campaign_completes_and_failed_when_it_pauses() {
        let mut history = RevisionHistory::default();
        let v1 = loaded(V1).revision.to_string();
        let v2 = loaded(V2).revision.to_string();
        let long = Duration::from_secs(3600);
        assert!(history.observe(
            &set(V1),
            &book_at(&v1, CampaignState::Running),
            at(0),
            long,
            10
        ));
        assert_eq!(history.entries("logger:v1")[0].outcome, Outcome::Pending);
        // Observing the same again changes nothing.
        assert!(!history.observe(
            &set(V1),
            &book_at(&v1, CampaignState::Running),
            at(1),
            long,
            10
        ));
        assert!(history.observe(
            &set(V1),
            &book_at(&v1, CampaignState::Complete),
            at(2),
            long,
            10
        ));
        assert_eq!(history.entries("logger:v1")[0].outcome, Outcome::Good);

        let mut paused = book_at(&v2, CampaignState::Paused);
        paused.campaigns.get_mut("logger:v1").unwrap().pause_reason = Some("canary broke".into());
        history.observe(&set(V2), &paused, at(3), long, 10);
        let entries = history.entries("logger:v1");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].revision, v2);
        assert_eq!(entries[1].outcome, Outcome::Failed);
        assert_eq!(entries[1].reason.as_deref(), Some("canary broke"));
        assert_eq!(entries[0].outcome, Outcome::Good, "the old outcome stays");
        assert_eq!(history.last_good("logger:v1", &v2).unwrap().revision, v1);
        assert!(history.last_good("logger:v1", &v1).is_none());
    }

    #[test]
    fn a_revision_served_for_good_after_without_failure_is_good() {
        let mut history = RevisionHistory::default();
        let v1 = loaded(V1).revision.to_string();
        let running = book_at(&v1, CampaignState::Running);
        let ten = Duration::from_secs(10);
        history.observe(&set(V1), &running, at(0), ten, 10);
        history.observe(&set(V1), &running, at(9), ten, 10);
        assert_eq!(history.entries("logger:v1")[0].outcome, Outcome::Pending);
        history.observe(&set(V1), &running, at(10), ten, 10);
        assert_eq!(history.entries("logger:v1")[0].outcome, Outcome::Good);
    }

    #[test]
    fn only_the_last_revisions_are_kept_within_the_configmap_size() {
        let mut history = RevisionHistory::default();
        let book = CampaignBook::default();
        for i in 0..15 {
            let text =
                format!("name: logger:v1\ncontainers: [{{name: s, image: 'shipper:{i}'}}]\n");
            history.observe(&set(&text), &book, at(i), Duration::from_secs(3600), 10);
        }
        let entries = history.entries("logger:v1");
        assert_eq!(entries.len(), 10);
        assert_eq!(entries[0].content["containers"][0]["image"], "shipper:5");
        // A history too large for a ConfigMap loses its oldest entries, never the newest.
        history.fit(1_000);
        let entries = history.entries("logger:v1");
        assert!(
            !entries.is_empty() && entries.len() < 10,
            "{}",
            entries.len()
        );
        assert_eq!(
            entries.last().unwrap().content["containers"][0]["image"],
            "shipper:14"
        );
        assert!(serde_json::to_vec(&history).unwrap().len() <= 1_000);
    }

    #[test]
    fn a_spec_names_a_revision_or_the_previous_one_that_did_not_fail() {
        let mut history = RevisionHistory::default();
        let texts: Vec<String> = (0..3)
            .map(|i| format!("name: logger:v1\ncontainers: [{{name: s, image: 'shipper:{i}'}}]\n"))
            .collect();
        let revs: Vec<String> = texts
            .iter()
            .map(|t| loaded(t).revision.to_string())
            .collect();
        history.observe(
            &set(&texts[0]),
            &book_at(&revs[0], CampaignState::Complete),
            at(0),
            Duration::from_secs(3600),
            10,
        );
        history.observe(
            &set(&texts[1]),
            &book_at(&revs[1], CampaignState::Paused),
            at(1),
            Duration::from_secs(3600),
            10,
        );
        history.observe(
            &set(&texts[2]),
            &book_at(&revs[2], CampaignState::Running),
            at(2),
            Duration::from_secs(3600),
            10,
        );
        let current = |_: &str| Some(revs[2].clone());
        let (sidecar, entry) = history.resolve("Logger:v1 = previous", current).unwrap();
        assert_eq!(sidecar, "logger:v1");
        assert_eq!(
            entry.revision, revs[0],
            "the failed one in between is skipped"
        );
        let (_, entry) = history
            .resolve(&format!("logger:v1={}", revs[1].to_uppercase()), current)
            .unwrap();
        assert_eq!(entry.revision, revs[1]);
        let err = history
            .resolve("logger:v1=bbbbbbbbbbbb", current)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("known: {} (good)", revs[0])),
            "{err}"
        );
        assert!(matches!(
            history.resolve("logger:v1", current),
            Err(HistoryError::Spec(_))
        ));
        let unknown = history.resolve("tracer:v1=previous", current).unwrap_err();
        assert!(
            matches!(unknown, HistoryError::UnknownSidecar { .. })
                && unknown.to_string().ends_with("; known: logger:v1"),
            "{unknown}"
        );
        let none_yet = RevisionHistory::default()
            .resolve("logger:v1=previous", current)
            .unwrap_err();
        assert_eq!(
            none_yet.to_string(),
            "no revision history for sidecar logger:v1; the history holds no sidecar yet: the \
             Lease holder of a rollout engine in auto mode records each revision it serves, and \
             a rollback can only go back to one it recorded"
        );
        let first = |_: &str| Some(revs[0].clone());
        assert!(matches!(
            history.resolve("logger:v1=previous", first),
            Err(HistoryError::NoPrevious { .. })
        ));
    }
}
