//! `certs`: a development CA and serving certificate, and the caBundle to paste. Run again, it
//! renews the serving certificate with the CA it made the first time, so the caBundle stays,
//! and for the names of the certificate it replaces unless told others.

use std::process::ExitCode;

use anyhow::bail;

use super::args::CertsArgs;
use crate::serve::tls::{
    CA_CERT_FILE, CA_KEY_FILE, DevCa, DevCertificates, LEAF_CERT_FILE, LEAF_KEY_FILE,
    rfc3339 as date, subject_names, validity_from_now,
};
use crate::telemetry::notice;
use tracing::Level;

pub(crate) fn run(args: &CertsArgs) -> anyhow::Result<ExitCode> {
    let dir = args.out_dir.display();
    let (not_before, not_after) = validity_from_now(args.validity);
    let (dns_names, renamed) = names_to_certify(args)?;
    let (names, until) = (dns_names.join(", "), date(not_after));
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
            let certs = DevCertificates::issue(&ca, &dns_names, not_before, not_after)?;
            let said = format!(
                "renewed the certificate for {names} in {dir}/{LEAF_CERT_FILE} and {dir}/{LEAF_KEY_FILE}, valid until {until}, signed by the CA already in {dir}/{CA_CERT_FILE} (valid until {}); the caBundle is unchanged:",
                date(ca_expires)
            );
            (certs, said)
        }
        None => {
            let certs = DevCertificates::generate_valid_for(&dns_names, args.validity)?;
            let said = format!(
                "wrote a new CA in {dir}/{CA_CERT_FILE} (its key {dir}/{CA_KEY_FILE} stays out of the cluster) and a certificate for {names} valid until {until} in {dir}/{LEAF_CERT_FILE} and {dir}/{LEAF_KEY_FILE}; the caBundle for the webhook configuration:"
            );
            (certs, said)
        }
    };
    certs.write(&args.out_dir)?;
    if let Some(warning) = renamed {
        notice(Level::WARN, &warning, &[]);
    }
    notice(Level::INFO, &said, &[]);
    println!("{}", certs.ca_bundle());
    Ok(ExitCode::SUCCESS)
}

/// The `--dns-name`s given, else those of the certificate in the out directory (a renewal is
/// the same command run again, and a name typed differently would break the webhook's TLS).
/// Names that differ from the replaced certificate's come with a warning to say once written,
/// as the Service must answer to one of them.
fn names_to_certify(args: &CertsArgs) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let leaf = args.out_dir.join(LEAF_CERT_FILE);
    let replaced = match std::fs::read(&leaf) {
        Ok(pem) => {
            Some(subject_names(&pem, &leaf.display().to_string()).map_err(|e| e.to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("cannot read {}: {e}", leaf.display()))),
    };
    if args.dns_names.is_empty() {
        return match replaced {
            Some(Ok(names)) if !names.is_empty() => Ok((names, None)),
            Some(Ok(_)) => bail!(
                "{} names no DNS name or IP address to renew it for; give --dns-name (e.g. --dns-name sidecar-injector.injector-system.svc)",
                leaf.display()
            ),
            Some(Err(err)) => bail!("{err}; give --dns-name to choose the names instead"),
            None => bail!(
                "--dns-name is required for the first certificate ({} is not there to take the names from), e.g. --dns-name sidecar-injector.injector-system.svc",
                leaf.display()
            ),
        };
    }
    let renamed = match replaced {
        Some(Ok(old)) if set_of(&old) != set_of(&args.dns_names) => Some(format!(
            "{} was for {}; the new certificate is for {}: the webhook's Service must be reached by one of these names (without --dns-name a renewal keeps the names)",
            leaf.display(),
            old.join(", "),
            args.dns_names.join(", ")
        )),
        _ => None,
    };
    Ok((args.dns_names.clone(), renamed))
}

fn set_of(names: &[String]) -> std::collections::BTreeSet<&str> {
    names.iter().map(String::as_str).collect()
}
