//! `check`: a dry-run pod that requests sidecars, created through the API server until they
//! are injected or `--wait` runs out, and the answer said (`render::check_lines`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::args::CheckArgs;
use super::connect::one_shot_client;
use crate::annotations::AnnotationKeys;
use crate::check::{judge, probe_pod};
use crate::cluster::dry_run;
use crate::name::SidecarName;
use crate::render::check_lines;

/// Between two asks while `--wait` lasts: a replica starting takes seconds.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(2);

pub(crate) fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let request = SidecarName::parse_list(&args.request)
        .with_context(|| format!("--request {:?}", args.request))?;
    anyhow::ensure!(!request.is_empty(), "--request names no sidecar");
    let keys = AnnotationKeys::new(&args.annotation_namespace);
    let probe = probe_pod(&request, &keys);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let client = one_shot_client(&args.connection, "check").await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let deadline = tokio::time::Instant::now() + args.wait;
        let report = loop {
            let answered = dry_run::create_pod(&client, &namespace, &probe).await;
            let out_of_time = tokio::time::Instant::now() >= deadline;
            match answered {
                Ok(pod) => {
                    let report = judge(&request, &pod, &keys);
                    if report.passed() || out_of_time {
                        break report;
                    }
                }
                Err(err) if out_of_time => {
                    return Err(anyhow::Error::new(err).context(format!(
                        "the API server refused the dry-run pod in namespace {namespace}"
                    )));
                }
                Err(err) => tracing::info!(
                    "the dry-run pod was refused ({}); asking again",
                    crate::cluster::error_text(&err)
                ),
            }
            tokio::time::sleep(
                ASK_AGAIN_AFTER
                    .min(deadline.saturating_duration_since(tokio::time::Instant::now())),
            )
            .await;
        };
        let lines = check_lines(&report, &namespace);
        if report.passed() {
            let mut out = std::io::stdout().lock();
            for line in lines {
                writeln!(out, "{line}")?;
            }
            Ok(ExitCode::SUCCESS)
        } else {
            let mut err = std::io::stderr().lock();
            for line in lines {
                writeln!(err, "{line}")?;
            }
            Ok(ExitCode::FAILURE)
        }
    })
}
