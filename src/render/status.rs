//! `status`: what the status ConfigMap and the rollout Lease say (each replica's publication,
//! who acts, the campaigns), as a document and as a table.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{ClusterRead, ClusterState, cluster_width};
use crate::cluster::lease::{LeaseDecision, decide};
use crate::cluster::status::{InjectorState, Publication, StateError, disagreeing};
use crate::rollout::{BookOverflow, CampaignBook, to_the_second};

/// Everything `status` shows, as `-o json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct StatusView {
    pub(crate) injectors: BTreeMap<String, InjectorView>,
    /// Set when fresh publications differ: new pods get different revisions by replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) disagreement: Option<String>,
    pub(crate) lease: LeaseView,
    pub(crate) campaigns: CampaignBook,
    /// Set when the book is over its budget: no restart starts until it shrinks.
    #[serde(rename = "bookFull", skip_serializing_if = "Option::is_none")]
    pub(crate) book_full: Option<BookOverflow>,
}

#[derive(Debug, Serialize)]
pub(crate) struct InjectorView {
    #[serde(flatten)]
    pub(crate) publication: Publication,
    pub(crate) age_seconds: u64,
    pub(crate) fresh: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LeaseView {
    pub(crate) holder: Option<String>,
    pub(crate) mode: Option<String>,
    pub(crate) until: Option<String>,
}

/// What `status` shows of `state` at `now`: a publication older than `max_age` is stale.
pub(crate) fn status_view(
    state: &InjectorState,
    max_age: Duration,
    now: Timestamp,
) -> Result<StatusView, StateError> {
    let lease = state.lease()?;
    let injectors = state.injectors()?.clone();
    let campaigns = state.book()?.clone();
    let disagreement = disagreeing(&injectors, now, max_age).map(|[(first, _), (other, _)]| {
        format!("{first} and {other} publish different revisions: new pods get different sidecars depending on the replica that answers")
    });
    let injectors: BTreeMap<String, InjectorView> = injectors
        .into_iter()
        .map(|(identity, publication)| {
            let age = publication.age(now);
            let view = InjectorView {
                publication,
                age_seconds: age.as_secs(),
                fresh: age <= max_age,
            };
            (identity, view)
        })
        .collect();
    let lease = match decide(lease, "", now) {
        LeaseDecision::HeldBy {
            holder,
            mode,
            until,
        } => LeaseView {
            holder: Some(holder),
            mode,
            until: Some(to_the_second(until)),
        },
        _ => LeaseView {
            holder: None,
            mode: None,
            until: None,
        },
    };
    Ok(StatusView {
        injectors,
        disagreement,
        lease,
        book_full: campaigns.overflow(),
        campaigns,
    })
}

/// `status`'s table of `view`, the injectors of `namespace`.
pub(crate) fn write_status_table(
    out: &mut impl Write,
    view: &StatusView,
    namespace: &str,
) -> std::io::Result<()> {
    writeln!(out, "{:<40} {:<12} REVISIONS", "INJECTOR", "PUBLISHED")?;
    for (identity, injector) in &view.injectors {
        let revisions: Vec<String> = injector
            .publication
            .revisions
            .iter()
            .map(|(s, r)| format!("{s}={r}"))
            .collect();
        let mut revisions = revisions.join(",");
        let manual = &injector.publication.manual;
        if !manual.is_empty() {
            // The engine restarts nothing for these: said where their revisions are.
            let names: Vec<&str> = manual.iter().map(String::as_str).collect();
            revisions.push_str(&format!(" (rollout manual: {})", names.join(", ")));
        }
        let age = format!(
            "{}s ago{}",
            injector.age_seconds,
            if injector.fresh { "" } else { " (stale)" }
        );
        writeln!(out, "{identity:<40} {age:<12} {revisions}")?;
    }
    if view.injectors.is_empty() {
        writeln!(out, "(no injector publishes in {namespace})")?;
    }
    if let Some(disagreement) = &view.disagreement {
        writeln!(out, "warning: {disagreement}")?;
    }
    writeln!(out)?;
    match &view.lease.holder {
        Some(holder) => writeln!(
            out,
            "rollout Lease: held by {holder} (mode {}) until {}",
            view.lease.mode.as_deref().unwrap_or("unknown"),
            view.lease.until.as_deref().unwrap_or_default()
        )?,
        None => writeln!(out, "rollout Lease: free (no engine acts now)")?,
    }
    writeln!(out)?;
    if view.campaigns.campaigns.is_empty() {
        // An empty table would read as a failed query; say why there are no rows.
        writeln!(
            out,
            "(no rollout campaign recorded in {namespace}: neither the engine nor `rollout --confirm` has run)"
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:<12} {:<9} {:>7} {:>7} {:>9} {:>6}  SINCE                 NOTE",
        "SIDECAR", "REVISION", "STATE", "PENDING", "ROLLING", "SUCCEEDED", "FAILED"
    )?;
    for (sidecar, campaign) in &view.campaigns.campaigns {
        writeln!(out, "{}", campaign_row(sidecar, campaign, view))?;
        for line in super::campaign_checks(campaign) {
            writeln!(out, "{line}")?;
        }
    }
    if let Some(overflow) = &view.book_full {
        writeln!(out, "warning: {}", super::book_full(overflow))?;
    }
    Ok(())
}

/// A campaign's row of the table, from SIDECAR to NOTE.
pub(crate) fn campaign_row(
    sidecar: &str,
    c: &crate::rollout::Campaign,
    view: &StatusView,
) -> String {
    let window_closed = view.campaigns.maintenance.as_ref().is_some_and(|m| !m.open);
    let note = match (&c.pause_reason, &c.resumed) {
        (Some(reason), _) => reason.clone(),
        (None, Some(r)) => format!("resumed by {} at {}", r.by, to_the_second(r.at.0)),
        // Restarts wait for a closed window: the budget's end does not hold.
        (None, None) if window_closed || view.book_full.is_some() => String::new(),
        (None, None) => c
            .expected_end
            .as_ref()
            .map(|at| super::ends(at, c.counts.pending))
            .unwrap_or_default(),
    };
    format!(
        "{sidecar:<24} {:<12} {:<9} {:>7} {:>7} {:>9} {:>6}  {:<21} {note}",
        c.revision,
        c.state.as_str(),
        c.counts.pending,
        c.counts.rolling,
        c.counts.succeeded,
        c.counts.failed,
        to_the_second(c.since.0)
    )
}

/// `status` across clusters as `-o json` prints it: each cluster named, with its status or the
/// error that kept it out.
#[derive(Debug, Serialize)]
pub(crate) struct FleetStatus<'a> {
    pub(crate) clusters: Vec<FleetCluster<'a>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct FleetCluster<'a> {
    #[serde(flatten)]
    pub(crate) state: ClusterState<'a>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) view: Option<&'a StatusView>,
}

/// Across clusters: who holds each cluster's Lease, then every campaign with its cluster
/// first; a cluster that could not be read is a row with its error.
pub(crate) fn write_fleet_table(
    out: &mut impl Write,
    reads: &[ClusterRead<StatusView>],
    namespace: &str,
) -> std::io::Result<()> {
    let width = cluster_width(reads);
    writeln!(
        out,
        "{:<width$} {:<9} ROLLOUT LEASE",
        "CLUSTER", "INJECTORS"
    )?;
    for read in reads {
        let cluster = &read.cluster;
        match &read.outcome {
            Err(err) => writeln!(out, "{cluster:<width$} (not read) {err}")?,
            Ok(view) => {
                let fresh = view.injectors.values().filter(|i| i.fresh).count();
                let lease = match &view.lease.holder {
                    Some(holder) => format!(
                        "held by {holder} (mode {}) until {}",
                        view.lease.mode.as_deref().unwrap_or("unknown"),
                        view.lease.until.as_deref().unwrap_or_default()
                    ),
                    None => "free (no engine acts now)".to_owned(),
                };
                let injectors = format!("{fresh}/{}", view.injectors.len());
                writeln!(out, "{cluster:<width$} {injectors:<9} {lease}")?;
                if let Some(disagreement) = &view.disagreement {
                    writeln!(out, "{cluster:<width$} warning: {disagreement}")?;
                }
            }
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<width$} {:<24} {:<12} {:<9} {:>7} {:>7} {:>9} {:>6}  SINCE                 NOTE",
        "CLUSTER", "SIDECAR", "REVISION", "STATE", "PENDING", "ROLLING", "SUCCEEDED", "FAILED"
    )?;
    let mut none = true;
    for read in reads {
        let Ok(view) = &read.outcome else { continue };
        for (sidecar, campaign) in &view.campaigns.campaigns {
            none = false;
            writeln!(
                out,
                "{:<width$} {}",
                read.cluster,
                campaign_row(sidecar, campaign, view)
            )?;
        }
    }
    if none {
        writeln!(
            out,
            "(no rollout campaign recorded in {namespace} of any cluster read)"
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::status;
    use crate::rollout::CampaignBook;

    /// How old a publication may be and still count, as `status` takes it by default.
    const MAX_AGE: Duration = Duration::from_secs(90);

    /// The state of `status` read, with no history and no Lease.
    fn state_of(status: k8s_openapi::api::core::v1::ConfigMap) -> InjectorState {
        InjectorState::of("injector-system", Ok(Some(status)), Ok(None), Ok(None))
    }

    #[test]
    fn replicas_that_publish_different_revisions_are_called_out() {
        let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let injectors = serde_json::json!({
            "a-1": {"revisions": {"logger:v1": "aaaaaaaaaaaa"}, "at": "2027-01-15T08:00:00Z"},
            "b-2": {"revisions": {"logger:v1": "bbbbbbbbbbbb", "agent:v1": "dddddddddddd"},
                    "manual": ["agent:v1"], "at": "2027-01-15T08:00:10Z"},
            "gone": {"revisions": {"logger:v1": "cccccccccccc"}, "at": "2027-01-15T07:00:00Z"}
        });
        let configmap = k8s_openapi::api::core::v1::ConfigMap {
            data: Some(
                [(
                    status::STATUS_INJECTORS_KEY.to_owned(),
                    injectors.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let view = status_view(&state_of(configmap), MAX_AGE, at(30)).unwrap();
        assert_eq!(
            view.disagreement.as_deref(),
            Some(
                "a-1 and b-2 publish different revisions: new pods get different sidecars depending on the replica that answers"
            )
        );
        assert!(!view.injectors["gone"].fresh, "an hour old");
        assert_eq!(view.injectors["b-2"].age_seconds, 20);
        assert_eq!(view.lease.holder, None);
        let mut table = Vec::new();
        write_status_table(&mut table, &view, "injector-system").unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(table.contains("3630s ago (stale)"), "{table}");
        assert!(
            table.contains(
                "20s ago      agent:v1=dddddddddddd,logger:v1=bbbbbbbbbbbb (rollout manual: agent:v1)"
            ),
            "{table}"
        );
        assert_eq!(
            serde_json::to_value(&view).unwrap()["injectors"]["b-2"]["manual"],
            serde_json::json!(["agent:v1"])
        );
        assert!(table.contains("rollout Lease: free"), "{table}");
        assert!(
            table.contains("(no rollout campaign recorded in injector-system")
                && !table.contains("SUCCEEDED"),
            "no campaign: a line that says so, not an empty table: {table}"
        );
    }

    #[test]
    fn a_book_over_its_budget_is_called_out() {
        let mut book = CampaignBook::default();
        let mut campaign: crate::rollout::Campaign = serde_json::from_value(serde_json::json!({
            "revision": "aaaaaaaaaaaa", "since": "2027-01-15T08:00:00Z", "state": "paused"
        }))
        .unwrap();
        for i in 0..25_000 {
            campaign
                .failed_workloads
                .insert(crate::workload::WorkloadRef::new(
                    crate::workload::WorkloadKind::Deployment,
                    "team",
                    &format!("worker-{i:05}"),
                ));
        }
        book.campaigns.insert("logger:v1".into(), campaign);
        let configmap = status::status_object("injector-system", None, status::encode(None, &book));
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let full = status_view(&state_of(configmap.clone()), MAX_AGE, now).unwrap();
        let mut table = Vec::new();
        write_status_table(&mut table, &full, "injector-system").unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(
            table.contains("warning: the status ConfigMap is nearly full")
                && table.contains("most of it for logger:v1 (25000 failed workloads)"),
            "{table}"
        );
        let json = serde_json::to_value(&full).unwrap();
        assert_eq!(json["bookFull"]["failedWorkloads"], 25_000);

        // Under the budget: no warning.
        book.campaigns.clear();
        let configmap = status::status_object("injector-system", None, status::encode(None, &book));
        let fits = status_view(&state_of(configmap.clone()), MAX_AGE, now).unwrap();
        assert!(fits.book_full.is_none());
    }

    #[test]
    fn a_running_campaign_says_when_it_ends_unless_a_closed_window_holds_it() {
        let mut book = CampaignBook::default();
        let campaign: crate::rollout::Campaign = serde_json::from_value(serde_json::json!({
            "revision": "aaaaaaaaaaaa", "since": "2027-01-15T08:00:00Z", "state": "running",
            "counts": {"pending": 2400, "rolling": 5, "succeeded": 95, "failed": 0},
            "expectedEnd": "2027-01-15T09:20:00Z"
        }))
        .unwrap();
        book.campaigns.insert("logger:v1".into(), campaign);
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let table = |book: &CampaignBook| {
            let configmap =
                status::status_object("injector-system", None, status::encode(None, book));
            let view = status_view(&state_of(configmap.clone()), MAX_AGE, now).unwrap();
            let mut table = Vec::new();
            write_status_table(&mut table, &view, "injector-system").unwrap();
            String::from_utf8(table).unwrap()
        };
        let running = table(&book);
        assert!(
            running.contains(
                "ends at the earliest 2027-01-15T09:20:00Z (2400 to restart, by --max-restarts-per-minute)"
            ),
            "{running}"
        );
        book.maintenance = serde_json::from_value(serde_json::json!({
            "open": false, "windows": "Sat 02:00-04:00", "until": "2027-01-16T02:00:00Z"
        }))
        .ok();
        assert!(book.maintenance.is_some(), "the maintenance status parses");
        let held = table(&book);
        assert!(!held.contains("ends at the earliest"), "{held}");
    }
}
