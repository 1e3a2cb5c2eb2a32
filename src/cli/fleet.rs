//! Several clusters in one report (`drift` and `status` with `--context` repeated or
//! `--all-contexts`): each cluster read at the same time as the others, within
//! `--cluster-timeout`; one that cannot be read is a row with its error, never the end of the
//! report.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::args::{ConnectionArgs, FleetArgs};
use crate::render::ClusterRead;

/// The contexts to read, when the command reads several clusters (`None`: one, as before).
pub(crate) fn contexts(
    connection: &ConnectionArgs,
    fleet: &FleetArgs,
) -> anyhow::Result<Option<Vec<String>>> {
    if !fleet.all_contexts {
        return Ok((connection.context.len() > 1).then(|| connection.context.clone()));
    }
    let kubeconfig = match &connection.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?,
        None => kube::config::Kubeconfig::read().context(
            "--all-contexts: cannot read the kubeconfig ($KUBECONFIG or ~/.kube/config)",
        )?,
    };
    let names: Vec<String> = kubeconfig.contexts.into_iter().map(|c| c.name).collect();
    anyhow::ensure!(
        !names.is_empty(),
        "--all-contexts: the kubeconfig has no context"
    );
    Ok(Some(names))
}

/// Reads every context's cluster with `read` (given the connection to that context alone),
/// all at once, each within `timeout`; in the order given.
pub(crate) async fn read_each<T, F, Fut>(
    connection: &ConnectionArgs,
    contexts: &[String],
    timeout: Duration,
    read: F,
) -> Vec<ClusterRead<T>>
where
    F: Fn(ConnectionArgs) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let reads = contexts.iter().map(|context| {
        let mut one = connection.clone();
        one.context = vec![context.clone()];
        // What it says on stderr names its cluster.
        let reading = crate::telemetry::NOTICE_CLUSTER.scope(context.clone(), read(one));
        async move {
            let outcome = match tokio::time::timeout(timeout, reading).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(err)) => Err(super::one_line(&err)),
                Err(_) => Err(format!(
                    "not read within --cluster-timeout {}",
                    humantime::format_duration(timeout)
                )),
            };
            ClusterRead {
                cluster: context.clone(),
                outcome,
            }
        }
    });
    futures::future::join_all(reads).await
}

/// The exit status of a report across clusters: 0 when every cluster was read and nothing
/// calls for attention; 1 when something is stale (as one cluster's report says it, with
/// `--exit-code`); 3 when a cluster could not be read; 4 when both.
pub(crate) fn exit_status(stale: bool, unread: bool) -> ExitCode {
    ExitCode::from(exit_code(stale, unread))
}

fn exit_code(stale: bool, unread: bool) -> u8 {
    match (stale, unread) {
        (false, false) => 0,
        (true, false) => 1,
        (false, true) => 3,
        (true, true) => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(contexts: &[&str]) -> ConnectionArgs {
        ConnectionArgs {
            kubeconfig: None,
            context: contexts.iter().map(|c| (*c).to_owned()).collect(),
            rate: Default::default(),
        }
    }

    #[test]
    fn a_fleet_is_two_contexts_or_more_or_all_of_a_kubeconfig() {
        let one = FleetArgs {
            all_contexts: false,
            cluster_timeout: Duration::from_secs(30),
        };
        assert_eq!(contexts(&connection(&[]), &one).unwrap(), None);
        assert_eq!(contexts(&connection(&["a"]), &one).unwrap(), None);
        assert_eq!(
            contexts(&connection(&["a", "b"]), &one).unwrap(),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts:\n- {name: staging, context: {cluster: s, user: u}}\n- {name: prod-eu, context: {cluster: p, user: u}}\n",
        )
        .unwrap();
        let all = FleetArgs {
            all_contexts: true,
            ..one
        };
        let mut args = connection(&[]);
        args.kubeconfig = Some(path.clone());
        assert_eq!(
            contexts(&args, &all).unwrap(),
            Some(vec!["staging".to_owned(), "prod-eu".to_owned()])
        );
        std::fs::write(&path, "apiVersion: v1\nkind: Config\ncontexts: []\n").unwrap();
        let err = contexts(&args, &all).unwrap_err().to_string();
        assert!(err.contains("has no context"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn every_cluster_is_read_at_once_and_one_that_fails_or_hangs_is_a_row_with_its_error() {
        let started = tokio::time::Instant::now();
        let reads = read_each(
            &connection(&[]),
            &["staging".into(), "down".into(), "slow".into()],
            Duration::from_secs(30),
            |one| async move {
                let context = one.context[0].clone();
                assert_eq!(
                    crate::telemetry::NOTICE_CLUSTER.with(Clone::clone),
                    context,
                    "its notices name the cluster"
                );
                match context.as_str() {
                    "down" => anyhow::bail!("connection refused"),
                    "slow" => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(0)
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_secs(20)).await;
                        Ok(7)
                    }
                }
            },
        )
        .await;
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(30),
            "read at once, each within the timeout"
        );
        let outcomes: Vec<(&str, &Result<u32, String>)> = reads
            .iter()
            .map(|r| (r.cluster.as_str(), &r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("staging", &Ok(7)),
                ("down", &Err("connection refused".to_owned())),
                (
                    "slow",
                    &Err("not read within --cluster-timeout 30s".to_owned())
                ),
            ]
        );
    }

    #[test]
    fn the_exit_status_says_stale_and_unread_apart() {
        assert_eq!(exit_code(false, false), 0);
        assert_eq!(exit_code(true, false), 1);
        assert_eq!(exit_code(false, true), 3);
        assert_eq!(exit_code(true, true), 4);
    }
}
