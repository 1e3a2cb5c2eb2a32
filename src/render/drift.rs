//! `drift`'s report as a table and, across a fleet, as one document.

use std::io::{self, Write};

use serde::Serialize;

use super::{ClusterRead, ClusterState, InCluster, cluster_width};
use crate::drift::{DriftReport, DriftState, RowReason, SidecarDrift, WorkloadDrift};

/// The report's workload rows in words (`reason`).
pub(crate) fn word_drift(report: &mut DriftReport) {
    for row in &mut report.workloads {
        row.reason = row_reason(row);
    }
}

/// Why a workload row is in its state.
fn row_reason(row: &WorkloadDrift) -> String {
    let pods = &row.pods;
    let total = pods.total();
    match &row.why {
        RowReason::Excluded(why) => super::exclusion(why),
        RowReason::Orphaned => format!("sidecar {} no longer exists", row.sidecar),
        RowReason::Stale { from, to } => {
            format!("{} of {total} pods stale ({from} -> {to})", pods.stale)
        }
        RowReason::RequestUnparsed { request, error } => format!(
            "no pods: its template's request {request:?} does not parse ({error}); the webhook denies its pods"
        ),
        RowReason::NoConfig => format!(
            "no pods: its template requests {}, which no config defines; the webhook denies its pods",
            row.sidecar
        ),
        RowReason::StartedBefore {
            container,
            before,
            total,
        } => format!(
            "{} of {total} pods started before {before} still run container {container}",
            pods.stale
        ),
        RowReason::Foreign { changes, .. } => {
            let differing = pods.stale + pods.uninjected;
            format!(
                "{differing} of {total} pods differ from what a new pod gets: {}",
                super::foreign_changes(changes)
            )
        }
        RowReason::ForeignNotAsked { error } => {
            format!("what a new pod gets is not known: {error}")
        }
        RowReason::Counts => match row.state {
            DriftState::Uninjected => format!("{} of {total} pods never injected", pods.uninjected),
            DriftState::Unknown => {
                format!(
                    "{} of {total} pods injected without a revision",
                    pods.unknown
                )
            }
            DriftState::Current => format!("all {total} pods current"),
            state => format!("{} of {total} pods {}", pods.get(state), state.as_str()),
        },
    }
}

/// The report across clusters as `-o json` prints it: each cluster (with its error when it
/// could not be read), then every sidecar and workload row, each naming its cluster.
#[derive(Serialize)]
pub(crate) struct FleetDrift<'a> {
    clusters: Vec<ClusterState<'a>>,
    sidecars: Vec<InCluster<'a, SidecarDrift>>,
    workloads: Vec<InCluster<'a, WorkloadDrift>>,
}

pub(crate) fn fleet_document(reads: &[ClusterRead<DriftReport>]) -> FleetDrift<'_> {
    let read = || {
        reads
            .iter()
            .filter_map(|r| Some((r.cluster.as_str(), r.outcome.as_ref().ok()?)))
    };
    FleetDrift {
        clusters: reads.iter().map(ClusterRead::state).collect(),
        sidecars: read()
            .flat_map(|(cluster, report)| {
                report
                    .sidecars
                    .iter()
                    .map(move |row| InCluster { cluster, row })
            })
            .collect(),
        workloads: read()
            .flat_map(|(cluster, report)| {
                report
                    .workloads
                    .iter()
                    .map(move |row| InCluster { cluster, row })
            })
            .collect(),
    }
}

/// The report as a table: with a CLUSTER column first when `reads` are several clusters'
/// (one that could not be read is a row with its error), without it for one cluster's.
pub(crate) fn write_drift_table(
    out: &mut impl Write,
    reads: &[ClusterRead<DriftReport>],
) -> io::Result<()> {
    let fleet = reads.len() > 1 || reads.iter().any(|r| !r.cluster.is_empty());
    let width = cluster_width(reads);
    let cluster = |name: &str| {
        if fleet {
            format!("{name:<width$} ")
        } else {
            String::new()
        }
    };
    let counts = |pods: &crate::drift::StateCounts| {
        DriftState::POD_STATES
            .map(|s| format!("{:>10}", pods.get(s)))
            .join(" ")
    };
    let header = DriftState::POD_STATES
        .map(|s| format!("{:>10}", s.as_str().to_uppercase()))
        .join(" ");
    writeln!(
        out,
        "{}{:<24} {:<12} {header} {:>10} {:<9} NOTE",
        cluster("CLUSTER"),
        "SIDECAR",
        "REVISION",
        "NATIVE",
        "CAMPAIGN"
    )?;
    for read in reads {
        let report = match &read.outcome {
            Ok(report) => report,
            Err(err) => {
                writeln!(out, "{}(not read) {err}", cluster(&read.cluster))?;
                continue;
            }
        };
        for sidecar in &report.sidecars {
            let revision = sidecar.revision.as_deref().unwrap_or("(none)");
            writeln!(
                out,
                "{}{:<24} {:<12} {} {:>10} {:<9} {}",
                cluster(&read.cluster),
                sidecar.name,
                revision,
                counts(&sidecar.pods),
                sidecar.native,
                sidecar.campaign.as_deref().unwrap_or("-"),
                sidecar.note.as_deref().unwrap_or_default()
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{}{:<48} {:<20} {:<10} {:>4}  {:<7}  REASON",
        cluster("CLUSTER"),
        "WORKLOAD",
        "SIDECAR",
        "STATE",
        "PODS",
        "FORM"
    )?;
    for read in reads {
        let Ok(report) = &read.outcome else { continue };
        for w in &report.workloads {
            let workload = format!("{}/{}/{}", w.kind, w.namespace, w.name);
            writeln!(
                out,
                "{}{workload:<48} {:<20} {:<10} {:>4}  {:<7}  {}",
                cluster(&read.cluster),
                w.sidecar,
                w.state.as_str(),
                w.pods.total(),
                w.form.map_or("-", crate::drift::SidecarForm::as_str),
                w.reason
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::too_many_lines)] // one case a reason
    fn each_row_reason_is_said_with_the_rows_counts_and_sidecar() {
        use crate::drift::{Exclusion, StateCounts};
        let said = |state: DriftState, pods: StateCounts, why: RowReason| {
            row_reason(&WorkloadDrift {
                kind: crate::workload::OwnerKind::Workload(
                    crate::workload::WorkloadKind::Deployment,
                ),
                namespace: "team".into(),
                name: "web".into(),
                sidecar: "logger:v9".into(),
                state,
                reason: String::new(),
                why,
                pods,
                form: None,
                native: 0,
                needs_restart: false,
            })
        };
        let none = StateCounts::default;
        let stale = StateCounts {
            stale: 2,
            current: 3,
            ..StateCounts::default()
        };
        let stale_from = RowReason::Stale {
            from: "000000000000".into(),
            to: "876339fe41bc".into(),
        };
        let cases = [
            (
                said(DriftState::Stale, stale, stale_from),
                "2 of 5 pods stale (000000000000 -> 876339fe41bc)",
            ),
            (
                said(
                    DriftState::Excluded,
                    none(),
                    RowReason::Excluded(Exclusion::BarePod),
                ),
                "a bare pod (no controller; --evict-bare-pods to restart it)",
            ),
            (
                said(
                    DriftState::Excluded,
                    none(),
                    RowReason::Excluded(Exclusion::ReplicaSetNotKnown),
                ),
                "its ReplicaSet is not known yet",
            ),
            (
                said(
                    DriftState::Excluded,
                    none(),
                    RowReason::Excluded(Exclusion::RolloutDisabled),
                ),
                "rollout disabled by annotation",
            ),
            (
                said(DriftState::Denied, none(), RowReason::NoConfig),
                "no pods: its template requests logger:v9, which no config defines; the webhook denies its pods",
            ),
            (
                said(
                    DriftState::Uninjected,
                    StateCounts {
                        uninjected: 1,
                        ..StateCounts::default()
                    },
                    RowReason::Counts,
                ),
                "1 of 1 pods never injected",
            ),
            (
                said(
                    DriftState::Stale,
                    stale,
                    RowReason::StartedBefore {
                        container: "istio-proxy".into(),
                        before: "2026-12-01T00:00:00Z".into(),
                        total: 5,
                    },
                ),
                "2 of 5 pods started before 2026-12-01T00:00:00Z still run container istio-proxy",
            ),
        ];
        for (words, expected) in cases {
            assert_eq!(words, expected);
        }
    }

    fn table(reads: &[ClusterRead<DriftReport>]) -> String {
        let mut out = Vec::new();
        write_drift_table(&mut out, reads).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn one_clusters_table_has_no_cluster_column_and_a_fleets_names_each_and_its_error() {
        let one = table(&[ClusterRead {
            cluster: String::new(),
            outcome: Ok(DriftReport::default()),
        }]);
        assert!(one.starts_with("SIDECAR "), "{one}");
        let fleet = table(&[
            ClusterRead {
                cluster: "prod-eu".into(),
                outcome: Ok(DriftReport::default()),
            },
            ClusterRead {
                cluster: "prod-us".into(),
                outcome: Err("the cluster was not read within 30s".into()),
            },
        ]);
        assert!(fleet.starts_with("CLUSTER SIDECAR "), "{fleet}");
        assert!(
            fleet.contains("prod-us (not read) the cluster was not read within 30s"),
            "{fleet}"
        );
        let document = serde_json::to_value(fleet_document(&[ClusterRead {
            cluster: "prod-us".into(),
            outcome: Err("refused".into()),
        }]))
        .unwrap();
        assert_eq!(
            document["clusters"],
            serde_json::json!([{"cluster": "prod-us", "error": "refused"}])
        );
    }
}
