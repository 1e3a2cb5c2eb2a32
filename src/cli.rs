//! The command line: one file per subcommand, their arguments in [`args`]; what the one-shot
//! commands start from in [`connect`] (the cluster, the injector's state read once) and
//! [`configs`] (the configs judged by). This file only dispatches.

mod args;
mod certs;
mod check;
mod completion;
mod configs;
mod connect;
mod drift;
mod explain;
mod fleet;
mod inject;
mod policy;
mod rollout;
mod serve;
mod status;
mod validate;

use std::process::ExitCode;

use crate::serve::{allocator, tls};
use crate::telemetry;
pub use args::Cli;
pub(crate) use args::{Command, ProcessEnv};

pub fn run(cli: Cli) -> ExitCode {
    let allocator = match cli.command {
        Command::Serve(_) => allocator::fix_mmap_threshold(),
        _ => Ok(()),
    };
    tls::install_crypto_provider();
    let level = cli.log_level.unwrap_or(match cli.command {
        Command::Serve(_) => telemetry::LogLevel(tracing::Level::INFO),
        _ => telemetry::LogLevel(tracing::Level::WARN),
    });
    let _traces = match init_telemetry(&cli, level) {
        Ok(guard) => guard,
        Err(err) => {
            telemetry::error_notice(&err, &[]);
            return ExitCode::FAILURE;
        }
    };
    if let Some(defaults) = &cli.entrypoint_defaults {
        tracing::info!(
            "run as Tumblr's {}: {}",
            args::TUMBLR_ENTRYPOINT,
            defaults.join(" ")
        );
    }
    let glog = cli.glog.given();
    if !glog.is_empty() {
        tracing::info!(
            flags = glog.join(" "),
            "glog flags accepted and ignored: logs go to stderr, and -v is the log level"
        );
    }
    match allocator {
        Ok(()) => {}
        Err(allocator::Unfixed::UserTunables(given)) => tracing::info!(
            "GLIBC_TUNABLES={} is set, so the malloc tunables sidecar-injector sets ({}) are not: large request bodies may leave more memory resident",
            given.to_string_lossy(),
            allocator::TUNABLES
        ),
        Err(allocator::Unfixed::ExecFailed(err)) => tracing::warn!(
            "could not re-execute with GLIBC_TUNABLES={} ({err}): running with glibc's malloc defaults, so large request bodies may leave more memory resident",
            allocator::TUNABLES
        ),
    }
    let env = ProcessEnv::read();
    let result = match cli.command {
        Command::Inject(args) => inject::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Policy(args) => policy::run(&args),
        Command::Serve(args) => serve::run(*args, &env),
        Command::Certs(args) => certs::run(&args),
        Command::Drift(args) => drift::run(&args),
        Command::Rollout(args) => rollout::run(&args, &env),
        Command::Status(args) => status::run(&args),
        Command::Explain(args) => explain::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Completion(args) => completion::completion(&args),
        Command::Man(args) => completion::man(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            telemetry::error_notice(&one_line(&err), &[]);
            ExitCode::FAILURE
        }
    }
}

/// Logging, and the traces `serve --otlp-endpoint` sends: their guard sends the last batch
/// when the command is done.
#[cfg(feature = "otlp")]
fn init_telemetry(
    cli: &Cli,
    level: telemetry::LogLevel,
) -> Result<Option<telemetry::TracesGuard>, String> {
    let traces = match &cli.command {
        Command::Serve(args) => {
            args.otlp_endpoint
                .clone()
                .map(|endpoint| telemetry::TraceSettings {
                    endpoint,
                    sampling_ratio: args.otlp_sampling_ratio,
                    instance: std::env::var("POD_NAME").ok(),
                })
        }
        _ => None,
    };
    telemetry::init(level, cli.log_format, traces.as_ref()).map_err(|err| err.to_string())
}

#[cfg(not(feature = "otlp"))]
fn init_telemetry(cli: &Cli, level: telemetry::LogLevel) -> Result<Option<()>, String> {
    telemetry::init(level, cli.log_format);
    match &cli.command {
        Command::Serve(args) if args.otlp_endpoint.is_some() => Err(
            "--otlp-endpoint: this binary was built without traces (the otlp cargo feature)"
                .to_owned(),
        ),
        _ => Ok(None),
    }
}

/// The error and its causes in one line, each said once: many errors already include their
/// source in their own text, and `{:#}` would repeat it.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    crate::cluster::api_errors_said(line, err.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read x.crt: {source}")]
        struct Read {
            source: std::io::Error,
        }
        let err = anyhow::Error::new(Read { source: io }).context("cannot load the certificate");
        assert_eq!(
            one_line(&err),
            "cannot load the certificate: cannot read x.crt: No such file or directory"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&plain), "outer: inner");
    }

    #[test]
    fn an_api_error_is_what_the_api_server_said_not_a_dump() {
        let status = kube::core::Status {
            status: Some(kube::core::response::StatusSummary::Failure),
            code: 403,
            message: "pods is forbidden: User \"dev\" cannot list resource \"pods\" in API group \"\" at the cluster scope".into(),
            metadata: None,
            reason: "Forbidden".into(),
            details: None,
        };
        #[derive(Debug, thiserror::Error)]
        #[error("cannot list pods: {0}")]
        struct List(#[source] kube::Error);
        let err = anyhow::Error::new(List(kube::Error::Api(Box::new(status))))
            .context("cannot build the drift report");
        assert_eq!(
            one_line(&err),
            "cannot build the drift report: cannot list pods: pods is forbidden: User \"dev\" cannot list resource \"pods\" in API group \"\" at the cluster scope (Forbidden, 403)"
        );
    }
}
