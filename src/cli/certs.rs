//! `certs`: a development CA and serving certificate, and the caBundle to paste. Run again, it
//! renews the serving certificate with the CA it made the first time, so the caBundle stays.

use std::process::ExitCode;

use anyhow::bail;

use super::args::*;
use crate::serve::tls::{
    CA_CERT_FILE, CA_KEY_FILE, DevCa, DevCertificates, rfc3339 as date, validity_from_now,
};
use crate::telemetry::notice;
use tracing::Level;

pub fn run(args: &CertsArgs) -> anyhow::Result<ExitCode> {
    let dir = args.out_dir.display();
    let (not_before, not_after) = validity_from_now(args.validity);
    let (names, until) = (args.dns_names.join(", "), date(not_after));
    let kept = if args.new_ca {
        None
    } else {
        DevCa::read(&args.out_dir).map_err(|err| {
            anyhow::anyhow!(
                "{err}; --new-ca replaces the CA (the webhook's caBundle changes with it)"
            )
        })?
    };
    let (certs, said) = match kept {
        Some(ca) => {
            let ca_expires = ca.not_after()?;
            if ca_expires < not_after {
                bail!(
                    "the CA in {dir}/{CA_CERT_FILE} expires on {}, before the certificate would ({until}); give a shorter --validity, or --new-ca to replace the CA (the webhook's caBundle changes with it)",
                    date(ca_expires),
                );
            }
            let certs = DevCertificates::issue(&ca, &args.dns_names, not_before, not_after)?;
            let said = format!(
                "renewed the certificate for {names} in {dir}/tls.crt and {dir}/tls.key, valid until {until}, signed by the CA already in {dir}/{CA_CERT_FILE} (valid until {}); the caBundle is unchanged:",
                date(ca_expires)
            );
            (certs, said)
        }
        None => {
            let certs = DevCertificates::generate_valid_for(&args.dns_names, args.validity)?;
            let said = format!(
                "wrote a new CA in {dir}/{CA_CERT_FILE} (its key {dir}/{CA_KEY_FILE} stays out of the cluster) and a certificate for {names} valid until {until} in {dir}/tls.crt and {dir}/tls.key; the caBundle for the webhook configuration:"
            );
            (certs, said)
        }
    };
    certs.write(&args.out_dir)?;
    notice(Level::INFO, &said, &[]);
    println!("{}", certs.ca_bundle());
    Ok(ExitCode::SUCCESS)
}
