//! `drift`: the one-shot drift report, as a table or JSON.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;

use super::args::{ConnectionArgs, DriftArgs};
use super::connect::{OneShot, revisions_in_force, status_of, status_refused};
use crate::drift::DriftReport;
use crate::render::{ClusterRead, fleet_document, write_drift_table};
use crate::telemetry::notice;

pub(crate) fn run(args: &DriftArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let connection = &args.cluster.connection;
    let fleet = super::fleet::contexts(connection, &args.fleet)?;
    runtime.block_on(async {
        let mut out = io::stdout().lock();
        let Some(contexts) = fleet else {
            let report = cluster_report(args, connection).await?;
            let (stale, empty) = (report.needs_restart(), report.workloads.is_empty());
            match args.cluster.output.document(&report)? {
                Some(document) => out.write_all(document.as_bytes())?,
                None => {
                    let one = [ClusterRead {
                        cluster: String::new(),
                        outcome: Ok(report),
                    }];
                    write_drift_table(&mut out, &one)?;
                    if empty {
                        writeln!(out, "{}", no_workload(args))?;
                    }
                }
            }
            return Ok(if args.exit_code && stale {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        };
        let reads = super::fleet::read_each(
            connection,
            &contexts,
            args.fleet.cluster_timeout,
            |one| async move { cluster_report(args, &one).await },
        )
        .await;
        match args.cluster.output.document(&fleet_document(&reads))? {
            Some(document) => out.write_all(document.as_bytes())?,
            None => write_drift_table(&mut out, &reads)?,
        }
        let stale = reads.iter().any(|r| {
            r.outcome
                .as_ref()
                .is_ok_and(|report| report.needs_restart())
        });
        let unread = reads.iter().any(|r| r.outcome.is_err());
        Ok(super::fleet::exit_status(args.exit_code && stale, unread))
    })
}

/// One cluster's drift report, as `drift` shows it.
async fn cluster_report(
    args: &DriftArgs,
    connection: &ConnectionArgs,
) -> anyhow::Result<DriftReport> {
    let OneShot {
        client,
        keys,
        sidecars,
        configs_unread,
        state,
    } = OneShot::connect_to(&args.cluster, connection, "drift").await?;
    let webhook_configuration = args.cluster.webhook_configuration();
    let index = crate::cluster::list::index(
        &client,
        &keys,
        &args.namespaces,
        webhook_configuration.as_deref(),
    )
    .await
    .context("cannot list pods, ReplicaSets and workloads")?;
    let policy = args
        .cluster
        .drift
        .policy(args.cluster.ignore_namespaces.namespaces());
    let readable = status_readable(&state, &args.cluster, &sidecars)?;
    // Paused campaigns and manual sidecars are flagged: a stale count alone would not say
    // that nothing is going to restart them.
    let book = match state.book() {
        Ok(book) => book.clone(),
        Err(err) => {
            if readable {
                notice(
                    tracing::Level::WARN,
                    &format!("{err}; campaigns not shown"),
                    &[],
                );
            }
            crate::rollout::CampaignBook::default()
        }
    };
    // A revision pinned by `rollout --to` is what pods are brought to while it lasts.
    let no_publication = std::collections::BTreeMap::new();
    let injectors = if readable {
        state.injectors()?
    } else {
        &no_publication
    };
    let published = revisions_in_force(injectors, &args.cluster, &configs_unread)?;
    let report = match &published {
        Some(publication) => index.classify_revisions(&publication.revisions, &policy),
        None => index.classify(&crate::render::new_pods(&book, &sidecars).pinned, &policy),
    };
    for name in report.unmatched_sidecars(&args.sidecars) {
        notice(
            tracing::Level::WARN,
            &format!("--sidecar {name}: no config defines it and no listed pod requests it"),
            &[],
        );
    }
    let mut report = report.filtered(&args.sidecars, &args.states);
    if !args.foreign.foreign_sidecars.is_empty() {
        let (sidecars, workloads) = foreign_rows(&client, args).await?;
        report.sidecars.extend(sidecars);
        report.workloads.extend(
            workloads
                .into_iter()
                .filter(|w| args.states.is_empty() || args.states.contains(&w.state)),
        );
    }
    let manual =
        sidecars.manual_rollouts_with(published.as_ref().map_or(&BTreeSet::new(), |p| &p.manual));
    let notes = book.notes(&mut report, &manual, k8s_openapi::jiff::Timestamp::now());
    for row in &mut report.sidecars {
        row.note = notes
            .get(&row.name)
            .map(|note| crate::render::sidecar_note(&row.name, note));
    }
    crate::render::word_drift(&mut report);
    Ok(report)
}

/// The rows of the sidecars other injectors add (`--foreign-sidecar`): each workload whose
/// pods run one, against what a dry-run create of its template gets now. A dry run that
/// fails leaves its workloads unknown and is said once.
async fn foreign_rows(
    client: &kube::Client,
    args: &DriftArgs,
) -> anyhow::Result<(
    Vec<crate::drift::SidecarDrift>,
    Vec<crate::drift::WorkloadDrift>,
)> {
    let names = args.foreign.names()?;
    let carriers = crate::cluster::foreign::carriers(client, &args.namespaces, &names)
        .await
        .context("cannot list the pods and workloads that run a --foreign-sidecar")?;
    let answers = crate::cluster::foreign::ask(client, &carriers, &names).await;
    let errors: Vec<Option<String>> = answers
        .iter()
        .map(|answer| answer.as_ref().err().map(dry_run_error))
        .collect();
    for error in errors.iter().flatten().collect::<BTreeSet<_>>() {
        notice(tracing::Level::WARN, error, &[]);
    }
    let workloads: Vec<crate::drift::ForeignWorkload<'_>> = carriers
        .iter()
        .zip(&answers)
        .zip(&errors)
        .map(|((carrier, answer), error)| crate::drift::ForeignWorkload {
            kind: carrier.kind,
            namespace: &carrier.namespace,
            name: &carrier.name,
            expected: match (answer, error) {
                (Ok(expected), _) => Ok(expected),
                (Err(_), error) => Err(error.as_deref().unwrap_or_default()),
            },
            pods: carrier.pods.iter().map(|p| &p.spec).collect(),
        })
        .collect();
    Ok(crate::drift::foreign_rows(&workloads, &names))
}

/// A failed dry run as `drift` says it: a refusal with what the account needs.
pub(crate) fn dry_run_error(err: &crate::cluster::foreign::DryRunError) -> String {
    match err {
        crate::cluster::foreign::DryRunError::Refused { .. } => format!(
            "{err}; --foreign-sidecar needs `create` on pods (a dry run stores nothing); its workloads are unknown"
        ),
        crate::cluster::foreign::DryRunError::Failed { .. } => {
            format!("{err}; its workloads are unknown")
        }
    }
}

/// What an empty workload list means, said as kubectl says "No resources found in X
/// namespace.": which namespaces were listed, and the filters that narrowed them.
fn no_workload(args: &DriftArgs) -> String {
    let place = match args.namespaces.as_slice() {
        [] => "in any namespace".to_owned(),
        [one] => format!("in namespace {one}"),
        many => format!("in namespaces {}", many.join(", ")),
    };
    let mut filters = Vec::new();
    if !args.sidecars.is_empty() {
        filters.push(format!("--sidecar {}", args.sidecars.join(", ")));
    }
    if !args.states.is_empty() {
        let states: Vec<&str> = args.states.iter().map(|s| s.as_str()).collect();
        filters.push(format!("--state {}", states.join(", ")));
    }
    if filters.is_empty() {
        format!("(none: no pod {place} asks for a sidecar)")
    } else {
        format!("(none {place} matches {})", filters.join(" and "))
    }
}

/// Whether the status ConfigMap of `state` is there to be read for the report. Judged by the
/// configs read here, the report needs it only for its campaign flags: a user refused it
/// still gets the report, unless no config was read either (every pod would read as
/// orphaned).
fn status_readable(
    state: &crate::cluster::status::InjectorState,
    args: &super::args::OneShotArgs,
    sidecars: &crate::config::SidecarSet,
) -> anyhow::Result<bool> {
    let judged_by_configs =
        args.revisions_from.0 == crate::cluster::status::RevisionsSource::Configs;
    match status_of(state) {
        Err(err) if judged_by_configs && status_refused(&err) => {
            if sidecars.is_empty() {
                return Err(err.context(
                    "no sidecar config was read here either (--config-directory, --configmap-labels): there is nothing to judge the pods by",
                ));
            }
            notice(
                tracing::Level::WARN,
                &format!("{}; campaigns not shown", crate::cli::one_line(&err)),
                &[],
            );
            Ok(false)
        }
        status => status.map(|_| true),
    }
}
