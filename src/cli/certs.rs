//! `certs`: a development CA and serving certificate, and the caBundle to paste.

use std::process::ExitCode;

use super::args::*;
use crate::serve::tls::DevCertificates;
use crate::telemetry::notice;
use tracing::Level;

pub fn run(args: &CertsArgs) -> anyhow::Result<ExitCode> {
    let certs = DevCertificates::generate_valid_for(&args.dns_names, args.validity)?;
    certs.write(&args.out_dir)?;
    notice(
        Level::INFO,
        &format!(
            "wrote {dir}/ca.crt, {dir}/tls.crt and {dir}/tls.key for {names}; the caBundle for the webhook configuration:",
            dir = args.out_dir.display(),
            names = args.dns_names.join(", ")
        ),
        &[],
    );
    println!("{}", certs.ca_bundle());
    Ok(ExitCode::SUCCESS)
}
