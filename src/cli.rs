//! The command line: one file per subcommand, their arguments in [`args`], what the one-shot
//! commands share in [`one_shot`]. This file only dispatches.

mod args;
mod certs;
mod drift;
mod inject;
mod one_shot;
mod rollout;
mod serve;
mod validate;

use std::process::ExitCode;

use crate::serve::tls;
use crate::telemetry;
pub use args::{Cli, Command, OutputFormat, ProcessEnv};

pub fn run(cli: Cli) -> ExitCode {
    tls::install_crypto_provider();
    let level = cli.log_level.unwrap_or(match cli.command {
        Command::Serve(_) => telemetry::LogLevel(tracing::Level::INFO),
        _ => telemetry::LogLevel(tracing::Level::WARN),
    });
    telemetry::init(level, cli.log_format);
    let env = ProcessEnv::read();
    let result = match cli.command {
        Command::Inject(args) => inject::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Serve(args) => serve::run(*args, &env),
        Command::Certs(args) => certs::run(&args),
        Command::Drift(args) => drift::run(&args),
        Command::Rollout(args) => rollout::run(&args, &env),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            telemetry::error_notice(&one_line(&err), &[]);
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes in one line, each said once: many errors already include their
/// source in their own text, and `{:#}` would repeat it.
pub fn one_line(err: &anyhow::Error) -> String {
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
    line
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
}
