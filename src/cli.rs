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
    telemetry::init(cli.log_level, cli.log_format);
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
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
