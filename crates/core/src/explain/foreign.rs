//! `explain --foreign-sidecar`: on one workload, what a new pod gets of each sidecar another
//! injector adds, the fields left out because they differ at each admission, and each pod
//! against it.

use k8s_openapi::api::core::v1::PodSpec;
use serde::Serialize;

use crate::drift::{DriftState, ForeignWorkload, foreign_rows};
use crate::foreign::{Expected, ForeignChange, ForeignSidecars};
use crate::workload::WorkloadKind;

/// One named sidecar on one workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ForeignFindings {
    pub container: String,
    /// The digest of what a new pod gets; `None` when the dry run failed.
    pub expected: Option<String>,
    /// Why the dry run said nothing, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
    /// The fields that differed between two answers for the template, left out on both sides.
    pub ignored: Vec<String>,
    pub pods: Vec<ForeignPodFinding>,
}

/// One pod against what a new pod gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ForeignPodFinding {
    pub pod: String,
    pub state: DriftState,
    /// The digest of its foreign part, the ignored fields left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// What differs; the shell words it.
    #[serde(skip)]
    pub changes: Vec<ForeignChange>,
}

/// The findings for each named sidecar a pod of the workload carries or a new pod gets, from
/// the dry run's answer (or its error) and the workload's pods by name.
pub fn foreign_findings(
    kind: WorkloadKind,
    (namespace, name): (&str, &str),
    expected: Result<&Expected, &str>,
    pods: &[(String, PodSpec)],
    names: &ForeignSidecars,
) -> Vec<ForeignFindings> {
    let (_, rows) = foreign_rows(
        &[ForeignWorkload {
            kind,
            namespace,
            name,
            expected,
            pods: pods.iter().map(|(_, spec)| spec).collect(),
        }],
        names,
    );
    rows.into_iter()
        .map(|row| {
            let container = row.sidecar;
            let judged = pods.iter().map(|(pod, spec)| {
                let Ok(expected) = expected else {
                    return ForeignPodFinding {
                        pod: pod.clone(),
                        state: DriftState::Unknown,
                        revision: None,
                        changes: Vec::new(),
                    };
                };
                let judgement = expected.judge(spec, names);
                let changes: Vec<ForeignChange> = judgement
                    .changes
                    .into_iter()
                    .filter(|c| c.concerns(&container))
                    .collect();
                ForeignPodFinding {
                    pod: pod.clone(),
                    state: crate::drift::foreign_pod_state(&changes, &container),
                    revision: Some(judgement.revision),
                    changes,
                }
            });
            ForeignFindings {
                expected: expected.ok().map(|e| e.revision().to_owned()),
                unknown: expected.err().map(str::to_owned),
                ignored: expected
                    .map(|e| {
                        e.ignored()
                            .iter()
                            .filter(|path| concerns_path(path, &container))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default(),
                pods: judged.collect(),
                container,
            }
        })
        .collect()
}

/// Whether an ignored field is the container's own or one of what was added beside it.
fn concerns_path(path: &str, container: &str) -> bool {
    path.strip_prefix(container)
        .is_some_and(|rest| rest.starts_with(['.', ':']))
        || path.starts_with("added")
}
