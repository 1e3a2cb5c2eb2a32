//! TLS material: the rustls server configuration built from PEM files, and development
//! certificates (a CA and a serving certificate) for `certs` and for `serve` on a laptop.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: String },
    #[error("{path}: invalid certificate PEM: {message}")]
    CertificatePem { path: String, message: String },
    #[error("{path}: no usable private key: {message}")]
    PrivateKey { path: String, message: String },
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(rustls::Error),
    #[error("cannot generate certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: io::Error },
    #[error("{path}: cannot read the certificate's validity: {message}")]
    Validity { path: String, message: String },
}

/// Development certificates are valid this long unless told otherwise.
pub const DEFAULT_DEV_VALIDITY: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);

/// When the first certificate of a PEM chain expires, as Unix seconds (what the expiry gauge
/// exports, as cert-manager's does).
pub fn not_after(cert_pem: &[u8], label: &str) -> Result<i64, TlsError> {
    let error = |message: String| TlsError::Validity {
        path: label.to_owned(),
        message,
    };
    let der = CertificateDer::pem_slice_iter(cert_pem)
        .next()
        .ok_or_else(|| error("no PEM certificate".into()))?
        .map_err(|e| error(e.to_string()))?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| error(e.to_string()))?;
    Ok(cert.validity().not_after.timestamp())
}

/// Installs the one crypto provider of this binary (ring). rustls panics when it has to pick
/// between two compiled-in providers, so this runs first thing, once; a second call is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds the server configuration from a certificate chain and key, both PEM. Fails, without
/// side effects, when either does not parse or the key does not match the certificate.
pub fn server_config(
    cert_pem: &[u8],
    cert_label: &str,
    key_pem: &[u8],
    key_label: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::CertificatePem {
            path: cert_label.to_owned(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_label.to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::PrivateKey {
        path: key_label.to_owned(),
        message: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Pair)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsError::Pair)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Reads both files and builds the configuration.
pub fn server_config_from_files(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let read = |path: &Path| {
        fs::read(path).map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    server_config(
        &read(cert)?,
        &cert.display().to_string(),
        &read(key)?,
        &key.display().to_string(),
    )
}

/// A development CA and a serving certificate it signed.
pub struct DevCertificates {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl DevCertificates {
    /// Names are DNS names or IP addresses (`127.0.0.1` becomes an IP SAN); valid for
    /// [`DEFAULT_DEV_VALIDITY`] from now.
    pub fn generate(names: &[String]) -> Result<Self, TlsError> {
        Self::generate_valid_for(names, DEFAULT_DEV_VALIDITY)
    }

    /// As [`DevCertificates::generate`], valid from an hour ago (clock skew) for `validity`.
    pub fn generate_valid_for(
        names: &[String],
        validity: std::time::Duration,
    ) -> Result<Self, TlsError> {
        let now = time::OffsetDateTime::now_utc();
        let not_before = now - time::Duration::hours(1);
        let not_after = now + time::Duration::try_from(validity).unwrap_or(time::Duration::MAX);
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.not_before = not_before;
        ca_params.not_after = not_after;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params.distinguished_name = distinguished_name("sidecar-injector development CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut params = CertificateParams::new(names.to_vec())?;
        params.not_before = not_before;
        params.not_after = not_after;
        params.distinguished_name = distinguished_name(
            names
                .first()
                .map(String::as_str)
                .unwrap_or("sidecar-injector"),
        );
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes `ca.crt`, `tls.crt` and `tls.key` (readable by the owner only) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), TlsError> {
        let write_error = |path: &Path| {
            let path = path.display().to_string();
            move |source| TlsError::Write { path, source }
        };
        fs::create_dir_all(dir).map_err(write_error(dir))?;
        for (name, text) in [("ca.crt", &self.ca_pem), ("tls.crt", &self.cert_pem)] {
            let path = dir.join(name);
            fs::write(&path, text).map_err(write_error(&path))?;
        }
        let key_path = dir.join("tls.key");
        write_private(&key_path, self.key_pem.as_bytes()).map_err(write_error(&key_path))?;
        Ok(())
    }

    /// The `caBundle` of a webhook configuration: the CA's PEM, base64-encoded.
    pub fn ca_bundle(&self) -> String {
        ca_bundle(self.ca_pem.as_bytes())
    }
}

pub fn ca_bundle(ca_pem: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca_pem)
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_certificates_are_valid_for_a_year_or_as_told() {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let year = DevCertificates::generate(&["x".into()]).unwrap();
        for pem in [&year.cert_pem, &year.ca_pem] {
            let expiry = not_after(pem.as_bytes(), "tls.crt").unwrap();
            let days = (expiry - now) as f64 / 86_400.0;
            assert!((364.9..=365.1).contains(&days), "{days} days");
        }
        let month = DevCertificates::generate_valid_for(
            &["x".into()],
            std::time::Duration::from_secs(30 * 86_400),
        )
        .unwrap();
        let days =
            (not_after(month.cert_pem.as_bytes(), "tls.crt").unwrap() - now) as f64 / 86_400.0;
        assert!((29.9..=30.1).contains(&days), "{days} days");
        assert!(not_after(b"not a certificate", "x").is_err());
    }

    #[test]
    fn generated_pair_builds_a_server_config() {
        install_crypto_provider();
        let certs = DevCertificates::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        assert!(certs.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        server_config(
            certs.cert_pem.as_bytes(),
            "tls.crt",
            certs.key_pem.as_bytes(),
            "tls.key",
        )
        .expect("a matching pair");
    }

    #[test]
    fn mismatched_or_garbled_pairs_are_refused_with_the_file_named() {
        install_crypto_provider();
        let one = DevCertificates::generate(&["a".into()]).unwrap();
        let other = DevCertificates::generate(&["b".into()]).unwrap();
        let err =
            server_config(one.cert_pem.as_bytes(), "c", other.key_pem.as_bytes(), "k").unwrap_err();
        assert!(matches!(err, TlsError::Pair(_)), "{err}");
        let err = server_config(b"not pem", "tls.crt", one.key_pem.as_bytes(), "k").unwrap_err();
        assert_eq!(err.to_string(), "tls.crt: no PEM certificate found");
        let err = server_config(one.cert_pem.as_bytes(), "c", b"", "tls.key").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("tls.key: no usable private key"),
            "{err}"
        );
    }

    #[test]
    fn ca_bundle_is_base64_of_the_pem() {
        let certs = DevCertificates::generate(&["x".into()]).unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(certs.ca_bundle())
            .unwrap();
        assert_eq!(decoded, certs.ca_pem.as_bytes());
    }
}
