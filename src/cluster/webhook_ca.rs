//! Keeps the `caBundle` of the injector's own MutatingWebhookConfiguration trusting the CA
//! that signed its serving certificate (`serve --webhook-configuration NAME --ca-bundle-file
//! PATH`), as cert-manager's CA injector does. The manifests then carry no `caBundle` field,
//! so `kubectl apply -k deploy/` again (an upgrade) never resets it; and should anything blank
//! it, the watch sees the change and it is set again.
//!
//! Replicas read a rotated Secret at different times (the kubelet refreshes each pod's copy
//! within a minute or two): a bundle is left alone while it trusts this replica's CA, and a
//! replica that adds its CA keeps the others' that are still valid. Replicas on the old and
//! the new CA then never undo each other (each would set its own, on every change the other
//! made), and the API server trusts both while the rotation lasts.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::sync::watch as signal;
use tracing::{info, warn};

use super::watch::{Change, watch};

/// At most this many certificates in a bundle: this replica's CA, and the CAs of rotations
/// under way or recent.
pub(crate) const MAX_TRUSTED: usize = 3;

/// One certificate of a PEM bundle: its text as written (BEGIN to END line), and its DER.
struct PemCertificate<'a> {
    text: &'a str,
    der: CertificateDer<'static>,
}

/// The certificates of a PEM bundle; a block that does not read is left out.
fn certificates(pem: &[u8]) -> Vec<PemCertificate<'_>> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let Ok(mut rest) = std::str::from_utf8(pem) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    while let Some(start) = rest.find(BEGIN) {
        let Some(length) = rest[start..].find(END) else {
            break;
        };
        let text = &rest[start..start + length + END.len()];
        if let Ok(der) = CertificateDer::from_pem_slice(text.as_bytes()) {
            found.push(PemCertificate { text, der });
        }
        rest = &rest[start + length + END.len()..];
    }
    found
}

/// Whether a certificate is still valid at `now` (Unix seconds).
fn valid_at(der: &CertificateDer<'_>, now: i64) -> bool {
    x509_parser::parse_x509_certificate(der.as_ref())
        .is_ok_and(|(_, cert)| cert.validity().not_after.timestamp() > now)
}

/// The caBundle a webhook whose caBundle is `current` gets from a replica whose CA is `own`:
/// `None` when it trusts every certificate of `own` already; else `own`, then the certificates
/// `current` trusts that are still valid at `now` (Unix seconds), at most [`MAX_TRUSTED`] in
/// all: those listed last go first (each replica puts its own first, so they are the oldest).
pub(crate) fn trusted_bundle(current: &[u8], own: &[u8], now: i64) -> Option<Vec<u8>> {
    let mine = certificates(own);
    let trusted = certificates(current);
    if mine.is_empty() || mine.iter().all(|o| trusted.iter().any(|t| t.der == o.der)) {
        return None;
    }
    // `own` as its file has it: alone, the bundle is that file.
    let mut bundle = own.to_vec();
    let kept = trusted
        .iter()
        .filter(|t| !mine.iter().any(|o| o.der == t.der) && valid_at(&t.der, now))
        .take(MAX_TRUSTED.saturating_sub(mine.len()));
    for certificate in kept {
        if !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(certificate.text.as_bytes());
        bundle.push(b'\n');
    }
    Some(bundle)
}

/// A strategic merge patch (webhooks merge by name) of the caBundle of every webhook that does
/// not trust `own` yet ([`trusted_bundle`]); `None` when they all do.
pub(crate) fn ca_bundle_patch(
    config: &MutatingWebhookConfiguration,
    own: &[u8],
    now: i64,
) -> Option<Value> {
    let stale: Vec<Value> = config
        .webhooks
        .iter()
        .flatten()
        .filter_map(|w| {
            let current = w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice());
            let bundle = trusted_bundle(current.unwrap_or_default(), own, now)?;
            Some(json!({
                "name": w.name,
                "clientConfig": {"caBundle": k8s_openapi::ByteString(bundle)},
            }))
        })
        .collect();
    (!stale.is_empty()).then(|| json!({"webhooks": stale}))
}

/// Why a CA bundle file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CaBundleError {
    #[error("cannot read --ca-bundle-file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--ca-bundle-file {path} holds no PEM certificate")]
    NotPem { path: String },
}

async fn read_bundle(path: &Path) -> Result<Vec<u8>, CaBundleError> {
    let display = path.display().to_string();
    let bundle = tokio::fs::read(path)
        .await
        .map_err(|source| CaBundleError::Read {
            path: display.clone(),
            source,
        })?;
    if !String::from_utf8_lossy(&bundle).contains("-----BEGIN CERTIFICATE-----") {
        return Err(CaBundleError::NotPem { path: display });
    }
    Ok(bundle)
}

/// Why the caBundle could not be made to trust this replica's CA before a reload.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrustError {
    #[error(transparent)]
    ReadCa(#[from] CaBundleError),
    #[error("cannot read the webhook configuration {name}: {reason}")]
    ReadConfiguration { name: String, reason: String },
    #[error("cannot set the caBundle of the webhook configuration {name}: {reason}")]
    Patch { name: String, reason: String },
}

/// Patches the configuration so that its caBundle trusts `bundle` (read from `--ca-bundle-file`)
/// when it does not; whether it did.
async fn make_trust(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
    config: &MutatingWebhookConfiguration,
    bundle: &[u8],
) -> Result<bool, TrustError> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let Some(patch) = ca_bundle_patch(config, bundle, now) else {
        return Ok(false);
    };
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(|err| TrustError::Patch {
            name: name.to_owned(),
            reason: super::error_text(&err),
        })?;
    info!(
        webhook_configuration = name,
        "the webhook configuration's caBundle now trusts this replica's CA"
    );
    Ok(true)
}

/// Makes the configuration `name` trust the CA in `ca_file` now, when it does not: called
/// before a reloaded certificate is served, so that a certificate from a new CA is trusted
/// before the API server meets it (the watch in [`run`] would add the CA only after).
pub(crate) async fn trust_before_serving(
    client: Client,
    name: &str,
    ca_file: &Path,
) -> Result<(), TrustError> {
    let bundle = read_bundle(ca_file).await?;
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let config = api
        .get_opt(name)
        .await
        .map_err(|err| TrustError::ReadConfiguration {
            name: name.to_owned(),
            reason: super::error_text(&err),
        })?;
    if let Some(config) = config {
        make_trust(&api, name, &config, &bundle).await?;
    }
    Ok(())
}

/// Watches the webhook configuration `name` and makes its caBundle trust the CA in `ca_file`
/// whenever it does not ([`trusted_bundle`]): at start, when the configuration changes, and
/// when `reloaded` says a certificate was reloaded without [`trust_before_serving`] having
/// made sure of it. A bad or missing file leaves the configuration as it is.
pub(crate) async fn run(
    client: Client,
    name: String,
    ca_file: PathBuf,
    mut reloaded: signal::Receiver<()>,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watch(api.clone(), config, "webhook configuration", Some);
    let mut current: Option<MutatingWebhookConfiguration> = None;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Change::Listed(mut listed)) => current = listed.pop(),
                Some(Change::Applied(config)) => current = Some(config),
                Some(Change::Deleted(_)) => current = None,
                None => return,
            },
            result = reloaded.changed() => if result.is_err() { return },
        }
        let Some(config) = &current else {
            continue;
        };
        let bundle = match read_bundle(&ca_file).await {
            Ok(bundle) => bundle,
            Err(err) => {
                warn!("the webhook configuration's caBundle is left as it is: {err}");
                continue;
            }
        };
        if let Err(err) = make_trust(&api, &name, config, &bundle).await {
            warn!(webhook_configuration = name, "{err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(bundles: &[Option<&[u8]>]) -> MutatingWebhookConfiguration {
        let webhooks: Vec<Value> = bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut client = json!({"service": {"name": "s", "namespace": "n"}});
                if let Some(b) = b {
                    client["caBundle"] =
                        serde_json::to_value(k8s_openapi::ByteString(b.to_vec())).unwrap();
                }
                json!({"name": format!("w{i}.example.org"), "clientConfig": client,
                       "sideEffects": "None", "admissionReviewVersions": ["v1"]})
            })
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "x"}, "webhooks": webhooks})).unwrap()
    }

    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 86_400;

    /// A CA certificate valid until `NOW + days` days.
    fn ca(days: i64) -> Vec<u8> {
        crate::serve::tls::DevCa::generate(NOW - 365 * DAY, NOW + days * DAY)
            .unwrap()
            .cert_pem
            .into_bytes()
    }

    fn bundle(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// The certificates of a bundle, each as the DER of one of `cas` (its index there).
    fn which(bundle: &[u8], cas: &[&[u8]]) -> Vec<usize> {
        certificates(bundle)
            .iter()
            .map(|c| {
                cas.iter()
                    .position(|ca| certificates(ca)[0].der == c.der)
                    .expect("a known CA")
            })
            .collect()
    }

    #[test]
    fn only_webhooks_that_do_not_trust_this_ca_are_patched_by_name() {
        let (own, other) = (ca(3650), ca(3650));
        assert_eq!(
            ca_bundle_patch(&config(&[Some(&own), Some(&own)]), &own, NOW),
            None
        );
        let both = bundle(&[&other, &own]);
        let patch = ca_bundle_patch(
            &config(&[Some(&both), None, Some(b"old"), Some(&other)]),
            &own,
            NOW,
        )
        .unwrap();
        let names: Vec<&str> = patch["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["w1.example.org", "w2.example.org", "w3.example.org"]
        );
        let set = |i: usize| {
            let encoded = patch["webhooks"][i]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap();
            let decoded: k8s_openapi::ByteString =
                serde_json::from_value(Value::String(encoded.to_owned())).unwrap();
            decoded.0
        };
        // Nothing trusted before (none, or no certificate): exactly the CA file.
        assert_eq!(set(0), own);
        assert_eq!(set(1), own);
        // Another replica's CA is kept after this one's.
        assert_eq!(which(&set(2), &[&own, &other]), [0, 1]);
    }

    /// Two replicas, one on the CA of a rotated Secret and one still on the old: each leaves
    /// the bundle the other wrote, which trusts both.
    #[test]
    fn replicas_on_the_old_and_the_new_ca_do_not_undo_each_other() {
        let (old, new) = (ca(3650), ca(3650));
        let after_new = trusted_bundle(&old, &new, NOW).expect("the new CA is added");
        assert_eq!(which(&after_new, &[&new, &old]), [0, 1]);
        assert_eq!(trusted_bundle(&after_new, &old, NOW), None);
        assert_eq!(trusted_bundle(&after_new, &new, NOW), None);
        // Blanked once every replica is on the new CA: the old one is gone for good.
        assert_eq!(trusted_bundle(b"", &new, NOW), Some(new.clone()));
    }

    #[test]
    fn expired_and_unreadable_certificates_go_and_at_most_three_are_kept() {
        let (own, expired, a, b, c) = (ca(3650), ca(-1), ca(30), ca(60), ca(90));
        let current = bundle(&[
            &expired,
            b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
            &a,
            &b,
            &c,
        ]);
        let set = trusted_bundle(&current, &own, NOW).unwrap();
        assert_eq!(which(&set, &[&own, &a, &b, &c]), [0, 1, 2]);
        // A bundle that is not text, and a CA file with no certificate in it.
        assert_eq!(trusted_bundle(&[0xff, 0xfe], &own, NOW), Some(own.clone()));
        assert_eq!(trusted_bundle(&a, b"no certificate", NOW), None);
    }
}
