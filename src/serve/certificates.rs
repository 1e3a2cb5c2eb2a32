//! The serving certificate: which files, a development pair when none is given, its expiry
//! as a metric, its reload (a bad pair keeps the old one), and the caBundle trusted before
//! the webhook serves.

use super::*;

/// Picks the certificate files, generating development ones when the defaults are missing.
pub(super) fn tls_files(options: &ServeOptions) -> anyhow::Result<(PathBuf, PathBuf)> {
    if options.tls_cert_file.is_some() || options.tls_key_file.is_some() {
        return Ok((
            options
                .tls_cert_file
                .clone()
                .unwrap_or_else(|| options.default_tls_cert_file.clone()),
            options
                .tls_key_file
                .clone()
                .unwrap_or_else(|| options.default_tls_key_file.clone()),
        ));
    }
    if options.default_tls_cert_file.exists() {
        return Ok((
            options.default_tls_cert_file.clone(),
            options.default_tls_key_file.clone(),
        ));
    }
    let dir = Path::new(DEV_CERTS_DIR);
    let (cert, key) = (dir.join(tls::LEAF_CERT_FILE), dir.join(tls::LEAF_KEY_FILE));
    let missing = options.default_tls_cert_file.display();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let earlier = (cert.exists() && key.exists())
        .then(|| std::fs::read(&cert).map_err(|e| e.to_string()))
        .map(|pem| {
            pem.and_then(|pem| {
                not_after(&pem, &cert.display().to_string()).map_err(|e| e.to_string())
            })
        });
    match earlier {
        Some(Ok(expiry)) if expiry > now + DEV_RENEW_BEFORE_SECONDS => {
            info!(
                "{missing} not found; serving the development certificate from an earlier run in {DEV_CERTS_DIR}/ (CA: {DEV_CERTS_DIR}/ca.crt)"
            );
        }
        None => {
            let names = DEV_NAMES.map(String::from);
            DevCertificates::generate(&names)
                .and_then(|certs| certs.write(dir))
                .context("cannot generate development certificates")?;
            info!(
                "{missing} not found; generated a development CA and serving certificate for localhost in {DEV_CERTS_DIR}/ (CA: {DEV_CERTS_DIR}/ca.crt)"
            );
        }
        // A run a year later, or a pair cut short: serving it would fail every handshake.
        Some(stale) => {
            let why = match stale {
                Ok(expiry) if expiry <= now => format!("expired {}", tls::rfc3339(expiry)),
                Ok(expiry) => format!("expires {}", tls::rfc3339(expiry)),
                Err(err) => format!("does not read: {err}"),
            };
            let same_ca = renew_development_pair(dir)?;
            info!(
                "{missing} not found; the development certificate from an earlier run in {DEV_CERTS_DIR}/ {why}, so it was renewed, {} (CA: {DEV_CERTS_DIR}/ca.crt)",
                if same_ca {
                    "signed by the same CA"
                } else {
                    "with a new CA"
                }
            );
        }
    }
    Ok((cert, key))
}

/// What `serve`'s development certificate is for.
const DEV_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// A development certificate from an earlier run that expires sooner than this is renewed.
const DEV_RENEW_BEFORE_SECONDS: i64 = 24 * 3600;

/// A new development pair in `dir`, signed by the CA kept there when it can sign it (so a CA a
/// client trusts from the earlier run stays valid); otherwise a new CA. True: the same CA.
pub(super) fn renew_development_pair(dir: &Path) -> anyhow::Result<bool> {
    let names = DEV_NAMES.map(String::from);
    let (not_before, not_after) = tls::validity_from_now(tls::DEFAULT_DEV_VALIDITY);
    let kept = tls::DevCa::read(dir)
        .ok()
        .flatten()
        .filter(|ca| ca.not_after().is_ok_and(|expiry| expiry >= not_after));
    let certs = match &kept {
        Some(ca) => DevCertificates::issue(ca, &names, not_before, not_after),
        None => DevCertificates::generate(&names),
    };
    certs
        .and_then(|certs| certs.write(dir))
        .context("cannot renew the development certificate")?;
    Ok(kept.is_some())
}

/// Exports when the serving certificate in `cert_file` expires.
pub(super) fn record_expiry(cert_file: &Path, metrics: &Metrics) {
    let label = cert_file.display().to_string();
    match std::fs::read(cert_file)
        .map_err(|e| e.to_string())
        .and_then(|pem| not_after(&pem, &label).map_err(|e| e.to_string()))
    {
        Ok(expiry) => {
            metrics.certificate_expiration.set(expiry);
        }
        Err(err) => warn!("cannot tell when the serving certificate expires: {err}"),
    }
}

/// Reloads the serving pair after each (debounced) change in the directories holding it, or
/// of `--ca-bundle-file` (whose keeper hears of each reload); a pair that does not load leaves
/// the current one serving. With `--webhook-configuration`, a pair is served only once the
/// caBundle trusts the CA beside it (or [`TRUST_TIMEOUT`] passed): from a new CA, it would
/// otherwise fail every handshake until the caBundle caught up. Returns what the caBundle's
/// keeper hears each reload by.
pub(super) fn spawn_certificate_reloader(
    options: &ServeOptions,
    (cert_file, key_file): (PathBuf, PathBuf),
    tls: RustlsConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<watch::Receiver<()>> {
    let (reloaded, heard) = watch::channel(());
    // Only the pair (and a Secret volume's `..data` swap) matters: anything else written
    // beside it, a log file say, must not reload the pair five times a second.
    let mut by_directory: Vec<WatchedDirectory> = Vec::new();
    let ca_file = options.webhook_ca.as_ref().map(|(_, ca)| ca);
    for file in [&cert_file, &key_file].into_iter().chain(ca_file) {
        let directory = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match by_directory.iter_mut().find(|w| w.directory == directory) {
            Some(watched) => watched.names.push(name),
            None => by_directory.push(WatchedDirectory::files(directory, vec![name])),
        }
    }
    let mut changes = watch_paths(by_directory, options.reload_debounce)
        .context("cannot watch the certificate files")?;
    let keeper = options.cluster.clone().zip(options.webhook_ca.clone());
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            let (cert, key, expiry_metrics) =
                (cert_file.clone(), key_file.clone(), metrics.clone());
            let loaded = crate::sources::load_off_workers(move || {
                let config = server_config_from_files(&cert, &key);
                if config.is_ok() {
                    record_expiry(&cert, &expiry_metrics);
                }
                config
            })
            .await;
            let Some(loaded) = loaded else {
                metrics.record_certificate_reload(false);
                error!(
                    "reading the serving certificate did not finish in time; the previous one keeps serving"
                );
                continue;
            };
            match loaded {
                Ok(config) => {
                    let trusted = match &keeper {
                        Some((client, (name, ca_file))) => {
                            trust_before_serving(client, name, ca_file).await
                        }
                        None => false,
                    };
                    tls.reload_from_config(config);
                    metrics.record_certificate_reload(true);
                    info!(cert = %cert_file.display(), "serving certificate reloaded");
                    // The caBundle's keeper checks again only what was not made sure of here:
                    // from its watch's view, which may not hold this reload's own patch yet.
                    if !trusted {
                        reloaded.send_replace(());
                    }
                }
                Err(err) => {
                    metrics.record_certificate_reload(false);
                    error!("certificate not reloaded, the previous one keeps serving: {err}");
                }
            }
        }
    });
    Ok(heard)
}

/// How long a reloaded pair waits for the caBundle to trust its CA before it is served anyway.
const TRUST_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the caBundle trusts the CA in `ca_file` (made to, if it did not) within
/// [`TRUST_TIMEOUT`].
pub(super) async fn trust_before_serving(
    client: &kube::Client,
    name: &str,
    ca_file: &Path,
) -> bool {
    let trusted = crate::cluster::webhook_ca::trust_before_serving(client.clone(), name, ca_file);
    match tokio::time::timeout(TRUST_TIMEOUT, trusted).await {
        Ok(Ok(())) => true,
        Ok(Err(err)) => {
            warn!("serving the reloaded certificate, its CA perhaps not trusted yet: {err}");
            false
        }
        Err(_) => {
            warn!(
                "serving the reloaded certificate, its CA perhaps not trusted yet: the webhook configuration {name} did not answer within {TRUST_TIMEOUT:?}"
            );
            false
        }
    }
}
