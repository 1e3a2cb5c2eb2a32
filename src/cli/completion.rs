//! `completion` and `man`: both generated from the clap definitions in [`super::args`], so they
//! cannot drift from the commands they describe.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use super::args::{Cli, CompletionArgs, ManArgs};

/// The name the scripts complete: the binary's, whatever it was invoked as.
const BIN: &str = "sidecar-injector";

pub fn completion(args: &CompletionArgs) -> anyhow::Result<ExitCode> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, BIN, &mut script);
    if args.shell == clap_complete::Shell::Bash {
        script = bash_arms_fixed(&script);
    }
    std::io::stdout()
        .write_all(&script)
        .context("writing the completion script to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// clap_complete spells the bash script's case arms for a hyphenated binary name differently
/// from the state its loop builds (`sidecar__subcmd__injector__subcmd__rollout` against
/// `sidecar__injector__subcmd__rollout`, clap-rs/clap#6421), so no subcommand's options would
/// ever complete: spell the arms as the loop does.
fn bash_arms_fixed(script: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(script)
        .replace("sidecar__subcmd__injector", "sidecar__injector")
        .into_bytes()
}

pub fn man(args: &ManArgs) -> anyhow::Result<ExitCode> {
    let command = Cli::command();
    match &args.dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .context("rendering the man page")?;
            std::io::stdout()
                .write_all(&page)
                .context("writing the man page to stdout")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
