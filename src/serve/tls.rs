//! TLS material: the rustls server configuration built from PEM files, and development
//! certificates (a CA and a serving certificate) for `certs` and for `serve` on a laptop.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::{self, PemObject};
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
    #[error("{path}: certificate {index} of the chain is not a valid X.509 certificate: {message}")]
    Certificate {
        path: String,
        index: usize,
        message: String,
    },
    #[error(
        "{path}: certificate {next} of the chain ({subject}) did not issue certificate {index} (issued by {issuer}); list the chain leaf first, each certificate followed by its issuer"
    )]
    ChainOrder {
        path: String,
        index: usize,
        next: usize,
        issuer: String,
        subject: String,
    },
    #[error("{path}: no usable private key: {message}")]
    PrivateKey { path: String, message: String },
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(rustls::Error),
    #[error("cannot generate certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: io::Error },
    #[error("{path}: cannot sign with this CA certificate: {message}")]
    CaCertificate { path: String, message: String },
    #[error("{present} is there but {missing} is not: a CA needs both")]
    CaIncomplete { present: String, missing: String },
    #[error("{key} is not the key of the CA in {cert}")]
    CaKeyMismatch { cert: String, key: String },
    #[error("{path}: cannot read the certificate's validity: {message}")]
    Validity { path: String, message: String },
}

/// A development CA is valid this long (or as long as its first certificate, if longer), so
/// that renewals of the serving certificate can keep it, as kubeadm's CA outlives its
/// certificates.
pub(crate) const DEV_CA_VALIDITY: std::time::Duration =
    std::time::Duration::from_secs(10 * 365 * 24 * 3600);

/// Development serving certificates are valid this long unless told otherwise.
pub(crate) const DEFAULT_DEV_VALIDITY: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);

/// When the first certificate of a PEM chain expires, as Unix seconds (what the expiry gauge
/// exports, as cert-manager's does).
pub fn not_after(cert_pem: &[u8], label: &str) -> Result<i64, TlsError> {
    let error = |message: String| TlsError::Validity {
        path: label.to_owned(),
        message,
    };
    first_certificate(cert_pem, error, |cert| {
        Ok(cert.validity().not_after.timestamp())
    })
}

/// The names a certificate is for, in its order: its subjectAltName DNS names and IP addresses
/// (what `certs --dns-name` put there), so that a renewal can keep them.
pub fn subject_names(cert_pem: &[u8], label: &str) -> Result<Vec<String>, TlsError> {
    use x509_parser::extensions::GeneralName;
    let error = |message: String| TlsError::CertificatePem {
        path: label.to_owned(),
        message,
    };
    first_certificate(cert_pem, error, |cert| {
        let names = cert
            .subject_alternative_name()
            .map_err(|e| error(e.to_string()))?
            .map(|extension| extension.value.general_names.clone())
            .unwrap_or_default();
        Ok(names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                GeneralName::IPAddress(octets) => <[u8; 4]>::try_from(*octets)
                    .map(std::net::IpAddr::from)
                    .or_else(|_| <[u8; 16]>::try_from(*octets).map(std::net::IpAddr::from))
                    .ok()
                    .map(|ip| ip.to_string()),
                _ => None,
            })
            .collect())
    })
}

/// What `read` takes from the first certificate of a PEM chain; `error` says what failed.
fn first_certificate<T>(
    cert_pem: &[u8],
    error: impl Fn(String) -> TlsError,
    read: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> Result<T, TlsError>,
) -> Result<T, TlsError> {
    let der = CertificateDer::pem_slice_iter(cert_pem)
        .next()
        .ok_or_else(|| error("no PEM certificate".into()))?
        .map_err(|e| error(pem_reason(&e)))?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| error(e.to_string()))?;
    read(&cert)
}

/// A PEM error in words: the library's own message gives the label or line it stopped at as a
/// list of byte values.
fn pem_reason(error: &pem::Error) -> String {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    match error {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "its {} block has no END line (is the file cut short?)",
            text(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => {
            format!("a malformed BEGIN line: {:?}", text(line))
        }
        other => other.to_string(),
    }
}

/// Installs the one crypto provider of this binary (ring). rustls panics when it has to pick
/// between two compiled-in providers, so this runs first thing, once; a second call is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds the server configuration from a certificate chain and key, both PEM. Fails, without
/// side effects, when either does not parse or the key does not match the certificate.
pub(crate) fn server_config(
    cert_pem: &[u8],
    cert_label: &str,
    key_pem: &[u8],
    key_label: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::CertificatePem {
            path: cert_label.to_owned(),
            message: pem_reason(&e),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_label.to_owned(),
        });
    }
    check_chain(&chain, cert_label)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::PrivateKey {
        path: key_label.to_owned(),
        message: pem_reason(&e),
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

/// Every certificate of the chain parses, and each is issued by the next: rustls checks only
/// that the key matches the first, and a chain with a broken block would be served, failing
/// every handshake, while the old pair could have kept serving.
fn check_chain(chain: &[CertificateDer<'_>], label: &str) -> Result<(), TlsError> {
    let parsed = chain
        .iter()
        .enumerate()
        .map(|(index, der)| {
            x509_parser::parse_x509_certificate(der.as_ref())
                .map(|(_, cert)| cert)
                .map_err(|e| TlsError::Certificate {
                    path: label.to_owned(),
                    index: index + 1,
                    message: e.to_string(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (index, pair) in parsed.windows(2).enumerate() {
        if pair[0].issuer() != pair[1].subject() {
            return Err(TlsError::ChainOrder {
                path: label.to_owned(),
                index: index + 1,
                next: index + 2,
                issuer: pair[0].issuer().to_string(),
                subject: pair[1].subject().to_string(),
            });
        }
    }
    Ok(())
}

/// The largest certificate or key file read.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// Reads a PEM file: only a regular file (a FIFO would block the reader forever) of at most
/// [`MAX_PEM_BYTES`].
fn read_pem_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    let error = |source: io::Error| TlsError::Read {
        path: path.display().to_string(),
        source,
    };
    let metadata = fs::metadata(path).map_err(error)?;
    if !metadata.is_file() {
        return Err(error(io::Error::other("not a regular file")));
    }
    if metadata.len() > MAX_PEM_BYTES {
        return Err(error(io::Error::other(format!(
            "{} bytes, more than {MAX_PEM_BYTES}",
            metadata.len()
        ))));
    }
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|file| {
            io::Read::read_to_end(&mut io::Read::take(file, MAX_PEM_BYTES), &mut bytes)
        })
        .map_err(error)?;
    Ok(bytes)
}

/// Reads both files and builds the configuration.
pub fn server_config_from_files(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let read = read_pem_file;
    server_config(
        &read(cert)?,
        &cert.display().to_string(),
        &read(key)?,
        &key.display().to_string(),
    )
}

/// A development CA: its certificate and key. `certs` keeps both beside the serving pair, so
/// that a renewal is signed by the same CA and the webhook's caBundle does not change.
pub struct DevCa {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    /// What signs: built once, when the CA is made or read and checked.
    issuer: Issuer<'static, KeyPair>,
}

/// Where [`DevCertificates::write`] puts the CA's certificate and key.
pub(crate) const CA_CERT_FILE: &str = "ca.crt";
pub(crate) const CA_KEY_FILE: &str = "ca.key";
/// Where [`DevCertificates::write`] puts the serving certificate and its key (the names of a
/// `kubernetes.io/tls` Secret's items).
pub(crate) const LEAF_CERT_FILE: &str = "tls.crt";
pub(crate) const LEAF_KEY_FILE: &str = "tls.key";

impl DevCa {
    /// A new self-signed CA valid from `not_before` to `not_after` (Unix seconds).
    pub fn generate(not_before: i64, not_after: i64) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.not_before = timestamp(not_before);
        params.not_after = timestamp(not_after);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name = distinguished_name("sidecar-injector development CA");
        let key = KeyPair::generate()?;
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Self {
            cert_pem,
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA kept in `dir` (`ca.crt` and `ca.key`); `None` when neither file is there. One
    /// without the other, or a key that is not the certificate's, is an error naming the files.
    pub fn read(dir: &Path) -> Result<Option<Self>, TlsError> {
        let (cert, key) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
        let label = |path: &Path| path.display().to_string();
        match (cert.exists(), key.exists()) {
            (false, false) => return Ok(None),
            (true, true) => {}
            (present, _) => {
                let (present, missing) = if present {
                    (&cert, &key)
                } else {
                    (&key, &cert)
                };
                return Err(TlsError::CaIncomplete {
                    present: label(present),
                    missing: label(missing),
                });
            }
        }
        let text = |path: &Path| {
            String::from_utf8(read_pem_file(path)?).map_err(|_| TlsError::CertificatePem {
                path: label(path),
                message: "not UTF-8 text".into(),
            })
        };
        let (cert_pem, key_pem) = (text(&cert)?, text(&key)?);
        let issuer = Self::issuer(&cert_pem, &label(&cert), &key_pem, &label(&key))?;
        Ok(Some(Self {
            cert_pem,
            key_pem,
            issuer,
        }))
    }

    /// When the CA expires, as Unix seconds.
    pub fn not_after(&self) -> Result<i64, TlsError> {
        not_after(self.cert_pem.as_bytes(), CA_CERT_FILE)
    }

    /// The CA as rcgen signs with it: the certificate must be a CA's and the key its own, or
    /// what it signs would not verify against the caBundle.
    fn issuer(
        cert_pem: &str,
        cert_label: &str,
        key_pem: &str,
        key_label: &str,
    ) -> Result<Issuer<'static, KeyPair>, TlsError> {
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| {
            TlsError::CertificatePem {
                path: cert_label.to_owned(),
                message: pem_reason(&e),
            }
        })?;
        let invalid = |message: String| TlsError::CaCertificate {
            path: cert_label.to_owned(),
            message,
        };
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
            .map_err(|e| invalid(e.to_string()))?;
        if !cert.is_ca() {
            return Err(invalid(
                "it is not a CA's (no basicConstraints CA:TRUE)".into(),
            ));
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| TlsError::PrivateKey {
            path: key_label.to_owned(),
            message: e.to_string(),
        })?;
        if cert.public_key().subject_public_key.data.as_ref() != key.der_bytes() {
            return Err(TlsError::CaKeyMismatch {
                cert: cert_label.to_owned(),
                key: key_label.to_owned(),
            });
        }
        Ok(Issuer::from_ca_cert_der(&der, key)?)
    }
}

/// A development CA and a serving certificate it signed.
pub struct DevCertificates {
    pub ca_pem: String,
    pub(crate) ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl DevCertificates {
    /// Names are DNS names or IP addresses (`127.0.0.1` becomes an IP SAN); valid for
    /// [`DEFAULT_DEV_VALIDITY`] from now.
    pub fn generate(names: &[String]) -> Result<Self, TlsError> {
        Self::generate_valid_for(names, DEFAULT_DEV_VALIDITY)
    }

    /// As [`DevCertificates::generate`], a new CA (valid for [`DEV_CA_VALIDITY`]) and the
    /// certificate valid from an hour ago (clock skew) for `validity`.
    pub(crate) fn generate_valid_for(
        names: &[String],
        validity: std::time::Duration,
    ) -> Result<Self, TlsError> {
        let (not_before, not_after) = validity_from_now(validity);
        let (_, ca_not_after) = validity_from_now(DEV_CA_VALIDITY.max(validity));
        let ca = DevCa::generate(not_before, ca_not_after)?;
        Self::issue(&ca, names, not_before, not_after)
    }

    /// A new serving key and certificate for `names`, signed by `ca`, valid from `not_before`
    /// to `not_after` (Unix seconds).
    pub fn issue(
        ca: &DevCa,
        names: &[String],
        not_before: i64,
        not_after: i64,
    ) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(names.to_vec())?;
        params.not_before = timestamp(not_before);
        params.not_after = timestamp(not_after);
        params.distinguished_name = distinguished_name(
            names
                .first()
                .map(String::as_str)
                .unwrap_or("sidecar-injector"),
        );
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca.issuer)?;
        Ok(Self {
            ca_pem: ca.cert_pem.clone(),
            ca_key_pem: ca.key_pem.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes `ca.crt`, `ca.key`, `tls.crt` and `tls.key` (the keys readable by the owner
    /// only) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), TlsError> {
        let write_error = |path: &Path| {
            let path = path.display().to_string();
            move |source| TlsError::Write { path, source }
        };
        fs::create_dir_all(dir).map_err(write_error(dir))?;
        for (name, text) in [
            (CA_CERT_FILE, &self.ca_pem),
            (LEAF_CERT_FILE, &self.cert_pem),
        ] {
            let path = dir.join(name);
            fs::write(&path, text).map_err(write_error(&path))?;
        }
        for (name, text) in [
            (CA_KEY_FILE, &self.ca_key_pem),
            (LEAF_KEY_FILE, &self.key_pem),
        ] {
            let path = dir.join(name);
            write_private(&path, text.as_bytes()).map_err(write_error(&path))?;
        }
        Ok(())
    }

    /// The `caBundle` of a webhook configuration: the CA's PEM, base64-encoded.
    pub fn ca_bundle(&self) -> String {
        ca_bundle(self.ca_pem.as_bytes())
    }
}

/// From an hour ago (clock skew) to `validity` from now, as Unix seconds.
pub(crate) fn validity_from_now(validity: std::time::Duration) -> (i64, i64) {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let span = i64::try_from(validity.as_secs()).unwrap_or(i64::MAX);
    (now - 3600, now.saturating_add(span))
}

/// A certificate's time (Unix seconds) as a log line says it.
pub(crate) fn rfc3339(unix_seconds: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_seconds.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

fn timestamp(unix_seconds: i64) -> time::OffsetDateTime {
    // X.509's GeneralizedTime ends at year 9999.
    const LAST: i64 = 253_402_300_799;
    time::OffsetDateTime::from_unix_timestamp(unix_seconds.min(LAST))
        .expect("a Unix time before year 10000")
}

pub(crate) fn ca_bundle(ca_pem: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(ca_pem)
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
        let days_left =
            |pem: &str| (not_after(pem.as_bytes(), "x").unwrap() - now) as f64 / 86_400.0;
        let year = DevCertificates::generate(&["x".into()]).unwrap();
        let days = days_left(&year.cert_pem);
        assert!((364.9..=365.1).contains(&days), "{days} days");
        // The CA outlives the certificate, so a renewal can keep it.
        let days = days_left(&year.ca_pem);
        assert!((3649.9..=3650.1).contains(&days), "{days} days");
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
        // Cut short (a disk filled mid-write): said in words, not as byte values.
        let half = &one.cert_pem.as_bytes()[..one.cert_pem.len() / 2];
        let err = server_config(half, "tls.crt", one.key_pem.as_bytes(), "k").unwrap_err();
        assert!(
            err.to_string()
                .ends_with("its CERTIFICATE block has no END line (is the file cut short?)"),
            "{err}"
        );
        let err = not_after(half, "tls.crt").unwrap_err();
        assert!(err.to_string().contains("no END line"), "{err}");
        let half_key = &one.key_pem.as_bytes()[..one.key_pem.len() / 2];
        let err = server_config(one.cert_pem.as_bytes(), "c", half_key, "tls.key").unwrap_err();
        assert!(
            err.to_string()
                .contains("PRIVATE KEY block has no END line"),
            "{err}"
        );
        let err = server_config(one.cert_pem.as_bytes(), "c", b"", "tls.key").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("tls.key: no usable private key"),
            "{err}"
        );
    }

    #[test]
    fn a_chain_with_a_broken_or_misordered_certificate_is_refused() {
        install_crypto_provider();
        let certs = DevCertificates::generate(&["a".into()]).unwrap();
        let key = certs.key_pem.as_bytes();
        // A PEM block whose base64 is fine but whose content is no certificate.
        let garbage = "-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n";
        let broken = format!("{}{garbage}", certs.cert_pem);
        let err = server_config(broken.as_bytes(), "tls.crt", key, "k").unwrap_err();
        assert!(
            err.to_string().starts_with(
                "tls.crt: certificate 2 of the chain is not a valid X.509 certificate"
            ),
            "{err}"
        );
        // Leaf followed by its CA: fine. Followed by an unrelated CA: refused.
        let full = format!("{}{}", certs.cert_pem, certs.ca_pem);
        server_config(full.as_bytes(), "tls.crt", key, "k").expect("leaf then issuer");
        let other = DevCertificates::generate(&["b".into()]).unwrap();
        let wrong = format!("{}{}", certs.cert_pem, other.cert_pem);
        let err = server_config(wrong.as_bytes(), "tls.crt", key, "k").unwrap_err();
        assert!(
            err.to_string()
                .contains("certificate 2 of the chain (CN=b) did not issue certificate 1"),
            "{err}"
        );
    }

    #[test]
    fn a_fifo_in_place_of_a_certificate_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("tls.crt");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let err = server_config_from_files(&fifo, &fifo).unwrap_err();
        assert!(err.to_string().ends_with("not a regular file"), "{err}");
    }

    /// Whether `certs.cert_pem` verifies for `name` against `certs.ca_pem` alone, as the API
    /// server checks it against the caBundle.
    fn verifies(certs: &DevCertificates, name: &str) -> Result<(), rustls::Error> {
        use rustls::client::danger::ServerCertVerifier;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(certs.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(certs.cert_pem.as_bytes()).unwrap();
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap(),
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .map(|_| ())
    }

    #[test]
    fn a_kept_ca_signs_renewals_that_verify_against_the_same_ca_bundle() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DevCa::read(dir.path()).unwrap().is_none());
        let first = DevCertificates::generate(&["a.svc".into()]).unwrap();
        first.write(dir.path()).unwrap();
        for key in [CA_KEY_FILE, "tls.key"] {
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &fs::metadata(dir.path().join(key)).unwrap().permissions(),
            );
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
        let ca = DevCa::read(dir.path()).unwrap().expect("the CA written");
        let (not_before, not_after) = validity_from_now(std::time::Duration::from_secs(86_400));
        let renewed =
            DevCertificates::issue(&ca, &["a.svc".into()], not_before, not_after).unwrap();
        assert_eq!(renewed.ca_bundle(), first.ca_bundle());
        assert_ne!(renewed.key_pem, first.key_pem);
        verifies(&first, "a.svc").expect("the first certificate");
        verifies(&renewed, "a.svc").expect("the renewal, against the same CA");
        assert!(verifies(&renewed, "b.svc").is_err());
        // Signed by another CA, the same names do not verify against this caBundle.
        let other = DevCertificates::generate(&["a.svc".into()]).unwrap();
        let crossed = DevCertificates {
            cert_pem: other.cert_pem,
            ..renewed
        };
        assert!(verifies(&crossed, "a.svc").is_err());
    }

    #[test]
    fn a_ca_missing_its_key_or_paired_with_another_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let certs = DevCertificates::generate(&["a.svc".into()]).unwrap();
        certs.write(dir.path()).unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        fs::rename(path(CA_KEY_FILE), path("saved.key")).unwrap();
        let err = DevCa::read(dir.path()).err().expect("an error");
        assert_eq!(
            err.to_string(),
            format!(
                "{} is there but {} is not: a CA needs both",
                path(CA_CERT_FILE),
                path(CA_KEY_FILE)
            )
        );
        fs::copy(path("tls.key"), path(CA_KEY_FILE)).unwrap();
        let err = DevCa::read(dir.path()).err().expect("an error");
        assert_eq!(
            err.to_string(),
            format!(
                "{} is not the key of the CA in {}",
                path(CA_KEY_FILE),
                path(CA_CERT_FILE)
            )
        );
        // The serving certificate with its own key is a pair, but no CA.
        fs::copy(path("tls.crt"), path(CA_CERT_FILE)).unwrap();
        let err = DevCa::read(dir.path()).err().expect("an error");
        assert!(err.to_string().contains("is not a CA's"), "{err}");
        fs::remove_file(path(CA_CERT_FILE)).unwrap();
        let err = DevCa::read(dir.path()).err().expect("an error");
        assert!(err.to_string().starts_with(&path(CA_KEY_FILE)), "{err}");
    }

    #[test]
    fn ca_bundle_is_base64_of_the_pem() {
        use base64::Engine as _;
        let certs = DevCertificates::generate(&["x".into()]).unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(certs.ca_bundle())
            .unwrap();
        assert_eq!(decoded, certs.ca_pem.as_bytes());
    }
}
