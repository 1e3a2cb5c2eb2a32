use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    sidecar_injector::cli::run(sidecar_injector::cli::Cli::parse())
}
