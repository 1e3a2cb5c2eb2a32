#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    sidecar_injector::cli::run(sidecar_injector::cli::Cli::parse_args())
}
