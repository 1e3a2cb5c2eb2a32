//! Several clusters in one document or table (`drift` and `status` across a fleet): what was
//! read of each, each row naming its cluster, one that could not be read a row with its error.

use serde::Serialize;

/// What was read of one cluster, or why it was not.
#[derive(Debug)]
pub(crate) struct ClusterRead<T> {
    pub(crate) cluster: String,
    pub(crate) outcome: Result<T, String>,
}

/// A row of a cluster's report, with the cluster named first (`-o json`).
#[derive(Debug, Serialize)]
pub(crate) struct InCluster<'a, T> {
    pub(crate) cluster: &'a str,
    #[serde(flatten)]
    pub(crate) row: &'a T,
}

/// Each cluster of the report: read, or the error that kept it out.
#[derive(Debug, Serialize)]
pub(crate) struct ClusterState<'a> {
    pub(crate) cluster: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<&'a str>,
}

impl<T> ClusterRead<T> {
    pub(crate) fn state(&self) -> ClusterState<'_> {
        ClusterState {
            cluster: &self.cluster,
            error: self.outcome.as_ref().err().map(String::as_str),
        }
    }
}

/// The width of the CLUSTER column.
pub(crate) fn cluster_width<T>(reads: &[ClusterRead<T>]) -> usize {
    reads
        .iter()
        .map(|r| r.cluster.len())
        .chain(["CLUSTER".len()])
        .max()
        .unwrap_or_default()
}
