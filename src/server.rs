//! `serve`: the HTTPS webhook, the plain lifecycle port, config and certificate hot reload, and
//! graceful shutdown. The I/O shell around [`crate::admission`].

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::watch;
use tracing::{Instrument, debug, debug_span, error, field, info, warn};

use crate::admission::{self, AdmissionResult};
use crate::config::{SidecarSet, SourceState, merge_sources};
use crate::config_directory::load_config_directory;
use crate::injection::InjectionSettings;
use crate::metrics::Metrics;
use crate::reload::watch_paths;
use crate::tls::{DevCertificates, server_config_from_files};

/// Where development certificates go when the default certificate files are missing.
pub const DEV_CERTS_DIR: &str = "certs";
pub const CONFIG_SOURCE_DIRECTORY: &str = "directory";

/// Everything a request handler needs, shared by all connections.
pub struct WebhookState {
    pub sidecars: watch::Receiver<Arc<SidecarSet>>,
    pub settings: InjectionSettings,
    pub metrics: Arc<Metrics>,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub readiness: Arc<Readiness>,
}

/// `/ready` is the conjunction of these; shutting down turns it off first.
#[derive(Debug, Default)]
pub struct Readiness {
    pub configs_loaded: AtomicBool,
    /// The first ConfigMap list is done (true from the start when that source is off).
    pub configmaps_listed: AtomicBool,
    pub tls_listening: AtomicBool,
    pub shutting_down: AtomicBool,
}

impl Readiness {
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        if self.shutting_down.load(Ordering::Acquire) {
            Some("shutting down")
        } else if !self.configs_loaded.load(Ordering::Acquire) {
            Some("sidecar configs not loaded yet")
        } else if !self.configmaps_listed.load(Ordering::Acquire) {
            Some("the first list of sidecar ConfigMaps is not done yet")
        } else if !self.tls_listening.load(Ordering::Acquire) {
            Some("TLS listener not up yet")
        } else {
            None
        }
    }
}

/// The TLS port: `/mutate` and `/health`.
pub fn webhook_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/health", get(health))
        .with_state(state)
}

/// The plain lifecycle port: `/health`, `/ready`, `/metrics`.
pub fn lifecycle_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn health() -> &'static str {
    "ok\n"
}

async fn ready(State(state): State<Arc<WebhookState>>) -> Response {
    match state.readiness.not_ready_reason() {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<Arc<WebhookState>>) -> Response {
    let mut response = state.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

fn http_error(
    state: &WebhookState,
    started: Instant,
    status: StatusCode,
    result: &'static str,
    message: String,
) -> Response {
    state
        .metrics
        .record_admission(result, started.elapsed().as_secs_f64());
    warn!(status = status.as_u16(), result, "{message}");
    (status, format!("{message}\n")).into_response()
}

async fn mutate(State(state): State<Arc<WebhookState>>, request: Request<Body>) -> Response {
    let started = Instant::now();
    // Debug level: creating and filling a span per request is not free at info.
    let span = debug_span!(
        "admission",
        uid = field::Empty,
        namespace = field::Empty,
        pod = field::Empty
    );
    async move {
        let (parts, body) = request.into_parts();
        if !is_json(&parts.headers) {
            return http_error(
                &state,
                started,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Content-Type must be application/json".to_owned(),
            );
        }
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let too_large = || {
            format!(
                "the body exceeds --max-body-bytes ({} bytes)",
                state.max_body_bytes
            )
        };
        if declared.is_some_and(|length| length > state.max_body_bytes) {
            return http_error(
                &state,
                started,
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                too_large(),
            );
        }
        let collected = tokio::time::timeout(
            state.body_read_timeout,
            Limited::new(body, state.max_body_bytes).collect(),
        )
        .await;
        let bytes = match collected {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
                return http_error(
                    &state,
                    started,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    too_large(),
                );
            }
            Ok(Err(err)) => {
                return http_error(
                    &state,
                    started,
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("cannot read the body: {err}"),
                );
            }
            Err(_) => {
                return http_error(
                    &state,
                    started,
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    format!(
                        "the body did not arrive within {:?}",
                        state.body_read_timeout
                    ),
                );
            }
        };
        let sidecars = state.sidecars.borrow().clone();
        let answer = match admission::review(&bytes, &sidecars, &state.settings) {
            Ok(answer) => answer,
            Err(err) => {
                return http_error(
                    &state,
                    started,
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    err.to_string(),
                );
            }
        };
        let span = tracing::Span::current();
        span.record("uid", answer.uid.as_str());
        span.record("namespace", answer.namespace.as_str());
        span.record("pod", answer.pod.as_str());
        for (sidecar, result) in &answer.sidecars {
            state.metrics.record_injection(sidecar, result.as_str());
        }
        state
            .metrics
            .record_admission(answer.result.as_str(), started.elapsed().as_secs_f64());
        let message = answer.message.as_deref().unwrap_or_default();
        let sidecars: Vec<&str> = answer.sidecars.iter().map(|(s, _)| s.as_str()).collect();
        let (uid, namespace, pod) = (&answer.uid, &answer.namespace, &answer.pod);
        let result = answer.result.as_str();
        match answer.result {
            AdmissionResult::Skipped => debug!(result, "skipped {message}"),
            // A line per injected pod would cost a third of the throughput; the injections
            // metric counts them by sidecar, and --log-level debug shows each one.
            AdmissionResult::Injected => debug!(result, sidecars = ?sidecars, "injected {message}"),
            AdmissionResult::Denied | AdmissionResult::InvalidPod => {
                info!(uid, namespace, pod, result, "denied: {message}");
            }
            AdmissionResult::NotAPod => warn!(uid, namespace, result, "{message}"),
        }
        let mut response = Response::new(Body::from(answer.body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
    .instrument(span)
    .await
}

/// How `serve` is configured; the CLI fills it from flags and environment.
#[derive(Clone)]
pub struct ServeOptions {
    pub bind_address: IpAddr,
    pub tls_port: u16,
    pub lifecycle_port: u16,
    /// `None`: the default path; missing defaults mean development certificates.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub default_tls_cert_file: PathBuf,
    pub default_tls_key_file: PathBuf,
    pub config_directory: PathBuf,
    pub settings: InjectionSettings,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub reload_debounce: Duration,
    pub shutdown_delay: Duration,
    pub shutdown_timeout: Duration,
    /// The ConfigMap source, when `--configmap-labels` turned it on.
    pub configmaps: Option<ConfigMapOptions>,
    /// The cluster, when there is one: the drift index watches it.
    pub cluster: Option<kube::Client>,
    pub drift_policy: crate::drift::DriftPolicy,
    /// The rollout engine, when there is a cluster and `--rollout` is not `off`.
    pub rollout: Option<RolloutOptions>,
    /// Made before the cluster client, which counts its requests into it.
    pub metrics: Arc<Metrics>,
}

#[derive(Clone, Debug)]
pub struct RolloutOptions {
    pub engine: crate::rollout_engine::EngineOptions,
    pub lease: crate::lease::LeaseSettings,
}

#[derive(Clone)]
pub struct ConfigMapOptions {
    pub client: kube::Client,
    pub namespace: String,
    pub selector: String,
}

impl std::fmt::Debug for ConfigMapOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapOptions")
            .field("namespace", &self.namespace)
            .field("selector", &self.selector)
            .finish()
    }
}

/// Picks the certificate files, generating development ones when the defaults are missing.
fn tls_files(options: &ServeOptions) -> anyhow::Result<(PathBuf, PathBuf)> {
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
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    if cert.exists() && key.exists() {
        info!(
            "{} not found; serving the development certificate from an earlier run in {DEV_CERTS_DIR}/ (CA: {DEV_CERTS_DIR}/ca.crt)",
            options.default_tls_cert_file.display()
        );
    } else {
        let names = ["localhost", "127.0.0.1", "::1"].map(String::from);
        DevCertificates::generate(&names)
            .and_then(|certs| certs.write(dir))
            .context("cannot generate development certificates")?;
        info!(
            "{} not found; generated a development CA and serving certificate for localhost in {DEV_CERTS_DIR}/ (CA: {DEV_CERTS_DIR}/ca.crt)",
            options.default_tls_cert_file.display()
        );
    }
    Ok((cert, key))
}

/// Both config sources and the snapshot they publish to every request and consumer.
pub struct ConfigSources {
    pub directory: SourceState,
    pub configmaps: SourceState,
    publish: watch::Sender<Arc<SidecarSet>>,
}

impl ConfigSources {
    pub fn new(publish: watch::Sender<Arc<SidecarSet>>) -> Self {
        Self {
            directory: SourceState::default(),
            configmaps: SourceState::default(),
            publish,
        }
    }

    /// Merges the sources (a ConfigMap config overrides a disk config of the same name) and
    /// publishes the result.
    pub fn publish(&self, changed_source: &'static str) {
        let (set, overridden) = merge_sources(&self.directory, &self.configmaps);
        for name in overridden {
            info!(sidecar = %name, "the ConfigMap config overrides the disk config of the same name");
        }
        let names: Vec<&str> = set.iter().map(|s| s.stamp.as_str()).collect();
        info!(source = changed_source, sidecars = ?names, "sidecar configs in force");
        self.publish.send_replace(Arc::new(set));
    }
}

/// Loads the config directory into the sources, publishes the result, and records it.
fn reload_configs(directory: &Path, sources: &Mutex<ConfigSources>, metrics: &Metrics) {
    let mut sources = sources.lock().expect("config sources lock");
    let state = &mut sources.directory;
    let report = match load_config_directory(directory) {
        Ok(report) => report,
        Err(err) => {
            error!(directory = %directory.display(), "cannot read the config directory; keeping the configs in force: {err}");
            metrics.record_config_reload(CONFIG_SOURCE_DIRECTORY, false, state.len());
            return;
        }
    };
    for warning in &report.warnings {
        warn!("{warning}");
    }
    for err in &report.errors {
        error!("config not loaded: {err}");
    }
    let summary = state.apply(&report);
    for origin in &summary.kept {
        warn!(origin = %origin, "keeping the last good version of this config until it is fixed");
    }
    metrics.record_config_reload(CONFIG_SOURCE_DIRECTORY, summary.errors == 0, summary.served);
    sources.publish(CONFIG_SOURCE_DIRECTORY);
}

/// Reloads the config directory after each (debounced) change in it.
fn spawn_config_reloader(
    options: &ServeOptions,
    sources: Arc<Mutex<ConfigSources>>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    let directory = options.config_directory.clone();
    let mut changes = watch_paths(std::slice::from_ref(&directory), options.reload_debounce)
        .with_context(|| format!("cannot watch {}", directory.display()))?;
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            reload_configs(&directory, &sources, &metrics);
        }
    });
    Ok(())
}

/// Reloads the serving pair after each (debounced) change in the directories holding it; a
/// pair that does not load leaves the current one serving.
fn spawn_certificate_reloader(
    options: &ServeOptions,
    cert_file: PathBuf,
    key_file: PathBuf,
    tls: RustlsConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    let directories: Vec<PathBuf> = [&cert_file, &key_file]
        .iter()
        .map(|f| {
            f.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        })
        .collect();
    let mut changes = watch_paths(&directories, options.reload_debounce)
        .context("cannot watch the certificate files")?;
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            match server_config_from_files(&cert_file, &key_file) {
                Ok(config) => {
                    tls.reload_from_config(config);
                    metrics.record_certificate_reload(true);
                    info!(cert = %cert_file.display(), "serving certificate reloaded");
                }
                Err(err) => {
                    metrics.record_certificate_reload(false);
                    error!("certificate not reloaded, the previous one keeps serving: {err}");
                }
            }
        }
    });
    Ok(())
}

/// Runs the webhook until SIGTERM or SIGINT, then shuts down gracefully.
pub async fn run(options: ServeOptions) -> anyhow::Result<()> {
    let metrics = options.metrics.clone();
    let readiness = Arc::new(Readiness::default());

    let (publish, sidecars) = watch::channel(Arc::new(SidecarSet::default()));
    let sources = Arc::new(Mutex::new(ConfigSources::new(publish)));
    reload_configs(&options.config_directory, &sources, &metrics);
    readiness.configs_loaded.store(true, Ordering::Release);
    spawn_config_reloader(&options, sources.clone(), metrics.clone())?;
    match &options.configmaps {
        Some(source) => {
            tokio::spawn(crate::configmaps::run(
                source.client.clone(),
                source.namespace.clone(),
                source.selector.clone(),
                sources.clone(),
                metrics.clone(),
                readiness.clone(),
            ));
        }
        None => readiness.configmaps_listed.store(true, Ordering::Release),
    }
    if let Some(client) = &options.cluster {
        let feed = crate::drift_watch::start(client.clone(), options.settings.keys.clone());
        crate::drift_watch::spawn_gauge(
            feed.clone(),
            options.drift_policy.clone(),
            sidecars.clone(),
            metrics.clone(),
        );
        if let Some(rollout) = &options.rollout {
            let (grant_tx, grant) = watch::channel(None);
            tokio::spawn(crate::lease::run(
                client.clone(),
                rollout.lease.clone(),
                grant_tx,
            ));
            let engine = crate::rollout_engine::Engine::new(
                client.clone(),
                rollout.engine.clone(),
                metrics.clone(),
            );
            let ready = readiness.clone();
            tokio::spawn(crate::rollout_engine::run(
                engine,
                feed,
                sidecars.clone(),
                move || {
                    ready.configs_loaded.load(Ordering::Acquire)
                        && ready.configmaps_listed.load(Ordering::Acquire)
                },
                grant,
            ));
        }
    }
    let (cert_file, key_file) = tls_files(&options)?;
    let tls = RustlsConfig::from_config(
        server_config_from_files(&cert_file, &key_file)
            .context("cannot load the serving certificate")?,
    );
    spawn_certificate_reloader(&options, cert_file, key_file, tls.clone(), metrics.clone())?;

    let state = Arc::new(WebhookState {
        sidecars,
        settings: options.settings.clone(),
        metrics: metrics.clone(),
        max_body_bytes: options.max_body_bytes,
        body_read_timeout: options.body_read_timeout,
        readiness: readiness.clone(),
    });

    let tls_handle: Handle<SocketAddr> = Handle::new();
    let lifecycle_handle: Handle<SocketAddr> = Handle::new();
    let mut tls_server =
        axum_server::bind_rustls(SocketAddr::new(options.bind_address, options.tls_port), tls)
            .handle(tls_handle.clone());
    tls_server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(options.body_read_timeout);
    let tls_task =
        tokio::spawn(tls_server.serve(webhook_router(state.clone()).into_make_service()));
    let lifecycle_task = tokio::spawn(
        axum_server::bind(SocketAddr::new(
            options.bind_address,
            options.lifecycle_port,
        ))
        .handle(lifecycle_handle.clone())
        .serve(lifecycle_router(state.clone()).into_make_service()),
    );
    let (Some(tls_addr), Some(lifecycle_addr)) = (
        tls_handle.listening().await,
        lifecycle_handle.listening().await,
    ) else {
        // A listener that never came up has already ended its task with the bind error.
        let tls_result = tls_task.await.context("TLS server task")?;
        let lifecycle_result = lifecycle_task.await.context("lifecycle server task")?;
        tls_result.context("cannot serve TLS")?;
        lifecycle_result.context("cannot serve the lifecycle port")?;
        anyhow::bail!("a listener stopped before it started");
    };
    readiness.tls_listening.store(true, Ordering::Release);
    info!(tls = %tls_addr, lifecycle = %lifecycle_addr, "listening");

    let signal = shutdown_signal().await;
    readiness.shutting_down.store(true, Ordering::Release);
    info!(signal, delay = ?options.shutdown_delay, "shutting down: /ready now fails; draining in-flight requests");
    tokio::time::sleep(options.shutdown_delay).await;
    tls_handle.graceful_shutdown(Some(options.shutdown_timeout));
    lifecycle_handle.graceful_shutdown(Some(options.shutdown_timeout));
    tls_task
        .await
        .context("TLS server task")?
        .context("TLS server")?;
    lifecycle_task
        .await
        .context("lifecycle server task")?
        .context("lifecycle server")?;
    info!("stopped");
    Ok(())
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;
    use tower::ServiceExt;

    use super::*;
    use crate::config::{LoadedSidecar, parse_config};

    fn state() -> Arc<WebhookState> {
        let logger = parse_config(
            "t.yaml",
            "name: logger:v1\ncontainers: [{name: s, image: 's:1'}]\n",
        )
        .unwrap()
        .config;
        let set: SidecarSet = [LoadedSidecar::new(logger, "t.yaml")].into_iter().collect();
        let (_publish, sidecars) = watch::channel(Arc::new(set));
        Arc::new(WebhookState {
            sidecars,
            settings: InjectionSettings::default(),
            metrics: Arc::new(Metrics::new()),
            max_body_bytes: 64 * 1024,
            body_read_timeout: Duration::from_secs(5),
            readiness: Arc::new(Readiness::default()),
        })
    }

    async fn call(router: Router, request: Request<Body>) -> (StatusCode, String) {
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn post(content_type: &str, body: &str) -> Request<Body> {
        Request::post("/mutate")
            .header("content-type", content_type)
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    #[tokio::test]
    async fn mutate_answers_a_review_and_rejects_other_media_types() {
        let review = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/admission/bare-pod.json"
        ))
        .unwrap();
        let (status, body) = call(
            webhook_router(state()),
            post("application/json; charset=utf-8", &review),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("\"patchType\":\"JSONPatch\""), "{body}");
        let (status, _) = call(webhook_router(state()), post("application/yaml", &review)).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let (status, body) = call(webhook_router(state()), post("application/json", "[1]")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.starts_with("cannot read the body as an AdmissionReview"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn ready_follows_the_readiness_flags() {
        let state = state();
        let get = || Request::get("/ready").body(Body::empty()).unwrap();
        let (status, body) = call(lifecycle_router(state.clone()), get()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: sidecar configs not loaded yet\n");
        state
            .readiness
            .configs_loaded
            .store(true, Ordering::Release);
        state.readiness.tls_listening.store(true, Ordering::Release);
        let (status, body) = call(lifecycle_router(state.clone()), get()).await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the first list of sidecar ConfigMaps is not done yet\n"
            )
        );
        state
            .readiness
            .configmaps_listed
            .store(true, Ordering::Release);
        assert_eq!(
            call(lifecycle_router(state.clone()), get()).await.0,
            StatusCode::OK
        );
        state.readiness.shutting_down.store(true, Ordering::Release);
        let (status, body) = call(lifecycle_router(state.clone()), get()).await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: shutting down\n"
            )
        );
        let metrics = Request::get("/metrics").body(Body::empty()).unwrap();
        let (status, body) = call(lifecycle_router(state), metrics).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("sidecar_injector_build_info"), "{body}");
    }
}
