//! `serve`: the HTTPS webhook, the plain lifecycle port, config and certificate hot reload, and
//! graceful shutdown. The I/O shell around [`crate::admission`].

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use tokio::sync::watch;
use tracing::{error, info, warn};

pub(crate) mod acceptor;
pub(crate) mod allocator;
mod certificates;
use certificates::{record_expiry, spawn_certificate_reloader, tls_files};
pub(crate) mod connection;
pub(crate) mod http;
mod review;
pub mod tls;

use crate::cluster::events::recorder;
use crate::config::SidecarSet;
use crate::injection::InjectionSettings;
use crate::metrics::{Metrics, Port};
use crate::sources::{
    ConfigSources, WatchedDirectory, reload_configs, spawn_config_reloader, watch_paths,
};
use acceptor::WrapAcceptor;
pub(crate) use http::{Readiness, ReadinessStep, WebhookState, lifecycle_router, webhook_router};
pub use review::review;
use tls::{DevCertificates, not_after, server_config_from_files};

/// What a flag that works on the cluster is told when `serve` has no connection to one.
pub(crate) const NEEDS_A_CLUSTER: &str =
    "needs a cluster connection: run in a cluster, or pass --kubeconfig or --master-url";

/// Where development certificates go when the default certificate files are missing.
pub(crate) const DEV_CERTS_DIR: &str = "certs";

/// How `serve` is configured; the CLI fills it from flags and environment.
#[derive(Clone)]
pub(crate) struct ServeOptions {
    pub(crate) bind_address: IpAddr,
    pub(crate) tls_port: u16,
    pub(crate) lifecycle_port: u16,
    /// `None`: the default path; missing defaults mean development certificates.
    pub(crate) tls_cert_file: Option<PathBuf>,
    pub(crate) tls_key_file: Option<PathBuf>,
    pub(crate) default_tls_cert_file: PathBuf,
    pub(crate) default_tls_key_file: PathBuf,
    pub(crate) config_directory: PathBuf,
    pub(crate) settings: InjectionSettings,
    pub(crate) max_body_bytes: usize,
    /// Request bodies held at once, over all connections.
    pub(crate) max_buffered_bytes: usize,
    /// How long one review may take.
    pub(crate) review_timeout: Duration,
    pub(crate) body_read_timeout: Duration,
    pub(crate) reload_debounce: Duration,
    pub(crate) shutdown_delay: Duration,
    pub(crate) shutdown_timeout: Duration,
    /// At most this many webhook connections open at once.
    pub(crate) max_connections: usize,
    /// A webhook connection with no traffic this long is closed.
    pub(crate) idle_timeout: Duration,
    /// The ConfigMap source, when `--configmap-labels` turned it on.
    pub(crate) configmaps: Option<ConfigMapOptions>,
    /// The cluster, when there is one: the drift index watches it.
    pub(crate) cluster: Option<kube::Client>,
    pub(crate) drift_policy: crate::drift::DriftPolicy,
    /// The rollout engine, when there is a cluster and `--rollout` is not `off`.
    pub(crate) rollout: Option<RolloutOptions>,
    /// Made before the cluster client, which counts its requests into it.
    pub(crate) metrics: Arc<Metrics>,
    /// `POD_NAME`, when it runs in a pod: the instance of its Events.
    pub(crate) pod_name: Option<String>,
    /// Where and as whom this replica publishes the revisions it injects.
    pub(crate) publication: Option<PublicationOptions>,
    /// The webhook configuration whose caBundle to keep, and the CA file it comes from.
    pub(crate) webhook_ca: Option<(String, PathBuf)>,
    /// `--injection=policy`: the API server injects, through admission policies this replica
    /// keeps equal to the configs in force; no TLS port, no `/mutate`.
    pub(crate) policy: Option<crate::cluster::policy_writer::PolicyWriterOptions>,
}

#[derive(Clone, Debug)]
pub(crate) struct PublicationOptions {
    /// The injector's namespace, where its status ConfigMap lives.
    pub(crate) namespace: String,
    pub(crate) identity: String,
    /// The heartbeat: a publication older than a few of these is stale.
    pub(crate) every: Duration,
}

#[derive(Clone, Debug)]
pub(crate) struct RolloutOptions {
    pub(crate) engine: crate::engine::EngineOptions,
    pub(crate) lease: crate::cluster::lease::LeaseSettings,
    /// How long this replica must have been ready before the engine acts.
    pub(crate) act_after_ready: Duration,
    /// `--notify-url`: where campaign notices go.
    pub(crate) notify: Option<crate::notifier::NotifierOptions>,
    /// `--promote-after`: the upstream clusters whose completed campaigns promote here.
    pub(crate) upstream: Option<crate::engine::upstream_gate::UpstreamGateOptions>,
}

#[derive(Clone)]
pub(crate) struct ConfigMapOptions {
    pub(crate) client: kube::Client,
    pub(crate) namespace: String,
    pub(crate) selector: String,
}

impl std::fmt::Debug for ConfigMapOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapOptions")
            .field("namespace", &self.namespace)
            .field("selector", &self.selector)
            .finish()
    }
}

/// Heads are timed by [`connection::HeadLayer`] from their first byte: hyper's own header
/// timer also ran between requests, and closed keep-alive connections the API server still
/// pooled.
fn heads_timed_by_the_acceptor(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(None);
}

/// Runs the webhook until SIGTERM or SIGINT, then shuts down gracefully.
///
/// Whatever can refuse to run (options that contradict each other, a missing config
/// directory, a certificate that does not load, a port in use) is found before anything is
/// started: a `serve` that cannot run, a second one started by mistake say, exits having sent
/// nothing to the cluster.
pub(crate) async fn run(options: ServeOptions) -> anyhow::Result<()> {
    let ready_to_serve = prepare(&options)?;
    // Said once nothing can refuse to run any more, not while the flags are read.
    if options.cluster.is_none() {
        info!(
            "no cluster connection (not in a cluster, no --kubeconfig or --master-url): serving directory configs only"
        );
    }
    // The certificate files and the config directory are watched before the cluster is
    // reached: a watch that cannot be set up also stops `serve` having sent nothing.
    let reloaded = match &ready_to_serve.webhook {
        Some(webhook) => Some(spawn_certificate_reloader(
            &options,
            (webhook.cert_file.clone(), webhook.key_file.clone()),
            webhook.tls.clone(),
            options.metrics.clone(),
        )?),
        None => None,
    };
    if options.policy.is_some()
        && let Some(client) = &options.cluster
    {
        crate::cluster::policy_writer::check_served(client).await?;
    }
    let readiness = Arc::new(Readiness::default());
    if options.policy.is_none() {
        readiness.mark(ReadinessStep::PoliciesWritten);
    }
    let sidecars = start_config_sources(&options, &readiness).await?;
    // Graceful shutdown: the Lease is given up first, so another replica acts at once.
    let (stop_tx, stop) = watch::channel(false);
    let cluster = start_cluster_parts(&options, &readiness, sidecars, stop);
    if let (Some(client), Some((name, ca_file)), Some(reloaded)) =
        (&options.cluster, &options.webhook_ca, reloaded)
    {
        tokio::spawn(crate::cluster::webhook_ca::run(
            client.clone(),
            name.clone(),
            ca_file.clone(),
            reloaded,
        ));
    }
    let state = Arc::new(WebhookState::new(
        cluster.served,
        options.settings.clone(),
        options.metrics.clone(),
        http::Limits {
            max_body_bytes: options.max_body_bytes,
            max_buffered_bytes: options.max_buffered_bytes,
            body_read_timeout: options.body_read_timeout,
            review_timeout: options.review_timeout,
        },
        readiness.clone(),
    ));
    let servers = start_servers(&options, ready_to_serve, state)?;
    readiness.mark(ReadinessStep::TlsListening);
    match servers.tls_addr {
        Some(tls) => info!(%tls, lifecycle = %servers.lifecycle_addr, "listening"),
        None => info!(lifecycle = %servers.lifecycle_addr, injection = "policy", "listening"),
    }

    let signal = shutdown_signal().await;
    readiness.mark(ReadinessStep::ShuttingDown);
    stop_tx.send_replace(true);
    for task in cluster.stopped_first.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    info!(signal, delay = %humantime::format_duration(options.shutdown_delay), "shutting down: /ready now fails; draining in-flight requests");
    tokio::time::sleep(options.shutdown_delay).await;
    servers.shut_down(options.shutdown_timeout).await
}

/// What `serve` holds once nothing stands in its way: the webhook's port and certificate
/// (none with `--injection=policy`) and the lifecycle port, bound.
struct ReadyToServe {
    webhook: Option<WebhookServing>,
    lifecycle_listener: std::net::TcpListener,
}

/// The serving certificate, loaded, and the webhook's port, bound.
struct WebhookServing {
    cert_file: PathBuf,
    key_file: PathBuf,
    tls: RustlsConfig,
    listener: std::net::TcpListener,
}

/// Checks what can be checked without the cluster, and takes the ports and the certificate.
fn prepare(options: &ServeOptions) -> anyhow::Result<ReadyToServe> {
    anyhow::ensure!(
        options.max_buffered_bytes >= options.max_body_bytes,
        "--max-buffered-bytes ({}) is less than --max-body-bytes ({}): the largest body would never be read",
        options.max_buffered_bytes,
        options.max_body_bytes
    );
    anyhow::ensure!(
        options.webhook_ca.is_none() || options.cluster.is_some(),
        "--webhook-configuration {NEEDS_A_CLUSTER}"
    );
    if options.policy.is_some() {
        anyhow::ensure!(
            options.cluster.is_some(),
            "--injection=policy {NEEDS_A_CLUSTER}"
        );
        anyhow::ensure!(
            options.webhook_ca.is_none(),
            "--webhook-configuration keeps a webhook's caBundle, and --injection=policy serves no webhook: pass one or the other"
        );
    }
    crate::sources::check_config_directory(&options.config_directory)?;
    // Bound here, not inside the servers' tasks: a port in use is then an error at startup
    // that names it. axum-server reports a failed bind to `Handle::listening` only to a waiter
    // already registered, so waiting on it after the task failed hung without a word. Bound
    // before the certificate, so a second `serve` in another directory leaves no `certs/`.
    let tls_listener = match options.policy {
        None => Some(listen(
            options.bind_address,
            options.tls_port,
            "--tls-port",
        )?),
        Some(_) => None,
    };
    let lifecycle_listener = listen(
        options.bind_address,
        options.lifecycle_port,
        "--lifecycle-port",
    )?;
    let webhook = match tls_listener {
        Some(listener) => {
            let (cert_file, key_file) = tls_files(options)?;
            let tls = RustlsConfig::from_config(
                server_config_from_files(&cert_file, &key_file)
                    .context("cannot load the serving certificate")?,
            );
            record_expiry(&cert_file, &options.metrics);
            Some(WebhookServing {
                cert_file,
                key_file,
                tls,
                listener,
            })
        }
        None => None,
    };
    Ok(ReadyToServe {
        webhook,
        lifecycle_listener,
    })
}

/// Loads the config directory and keeps watching it, and starts the ConfigMap source when
/// there is one; what they serve together, as it changes.
async fn start_config_sources(
    options: &ServeOptions,
    readiness: &Arc<Readiness>,
) -> anyhow::Result<watch::Receiver<Arc<SidecarSet>>> {
    let metrics = &options.metrics;
    let (publish, sidecars) = watch::channel(Arc::new(SidecarSet::default()));
    let mut sources = ConfigSources::new(publish);
    sources.policy_mode = options.policy.is_some();
    let sources = Arc::new(Mutex::new(sources));
    reload_configs(&options.config_directory, &sources, metrics).await;
    readiness.mark(ReadinessStep::ConfigsLoaded);
    spawn_config_reloader(
        options.config_directory.clone(),
        options.reload_debounce,
        sources.clone(),
        metrics.clone(),
    )?;
    match &options.configmaps {
        Some(source) => {
            let ready = readiness.clone();
            tokio::spawn(crate::sources::configmaps::run(
                source.client.clone(),
                recorder(source.client.clone(), options.pod_name.clone()),
                source.namespace.clone(),
                source.selector.clone(),
                sources,
                metrics.clone(),
                move || ready.mark(ReadinessStep::ConfigMapsListed),
            ));
        }
        None => readiness.mark(ReadinessStep::ConfigMapsListed),
    }
    Ok(sidecars)
}

/// What the cluster side of `serve` hands back: the configs the webhook serves, and the
/// tasks to wait for at shutdown before the ports close.
struct ClusterParts {
    /// What the sources serve with the campaign book's pins and holds applied (as they are
    /// without a cluster).
    served: watch::Receiver<Arc<SidecarSet>>,
    /// The Lease and the publisher, which give up what they hold once told to stop.
    stopped_first: [Option<tokio::task::JoinHandle<()>>; 2],
}

/// This replica's publication task ([`crate::cluster::status::run_publisher`]), publishing
/// once the configs, the ConfigMaps and the policies are ready.
fn spawn_publisher(
    client: &kube::Client,
    publication: &PublicationOptions,
    status: watch::Receiver<Option<k8s_openapi::api::core::v1::ConfigMap>>,
    published: watch::Receiver<Arc<SidecarSet>>,
    readiness: &Arc<Readiness>,
    stop: &watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let ready = readiness.clone();
    tokio::spawn(crate::cluster::status::run_publisher(
        client.clone(),
        publication.namespace.clone(),
        publication.identity.clone(),
        status,
        published,
        publication.every,
        move || {
            ready.done(ReadinessStep::ConfigsLoaded)
                && ready.done(ReadinessStep::ConfigMapsListed)
                && ready.done(ReadinessStep::PoliciesWritten)
        },
        stop.clone(),
    ))
}

/// Starts what watches and writes the cluster, when there is one: the status ConfigMap's
/// watch, the publisher, the drift gauge, and the Lease and engine when the engine runs.
fn start_cluster_parts(
    options: &ServeOptions,
    readiness: &Arc<Readiness>,
    sidecars: watch::Receiver<Arc<SidecarSet>>,
    stop: watch::Receiver<bool>,
) -> ClusterParts {
    let metrics = &options.metrics;
    let Some(client) = &options.cluster else {
        return ClusterParts {
            served: sidecars,
            stopped_first: [None, None],
        };
    };
    // One watch of the status ConfigMap (the injector's namespace, where the engine keeps it
    // too) for the engine, the pins and holds the webhook serves, and its warnings.
    let status = options.publication.as_ref().map(|publication| {
        crate::cluster::status::watch_status(client.clone(), &publication.namespace)
    });
    // With policies, what the API server enforces: the engine, the publisher and the gauge
    // follow it, so no restart runs ahead of the policies.
    let sidecars = match &options.policy {
        Some(policy) => crate::cluster::policy_writer::spawn(
            client.clone(),
            policy.clone(),
            sidecars,
            status.clone(),
            metrics.clone(),
            readiness.clone(),
        ),
        None => sidecars,
    };
    let book_signals = status
        .clone()
        .map(|status| crate::cluster::status::apply_book(status, sidecars.clone()));
    // What this replica injects with pins applied: a pinned revision is what new pods get, and
    // the one-shot commands judge pods by it.
    let published = book_signals
        .as_ref()
        .map_or_else(|| sidecars.clone(), |b| b.pinned.clone());
    let publisher_task =
        options
            .publication
            .as_ref()
            .zip(status.clone())
            .map(|(publication, status)| {
                spawn_publisher(
                    client,
                    publication,
                    status,
                    published.clone(),
                    readiness,
                    &stop,
                )
            });
    let reach = match (&options.policy, &options.webhook_ca) {
        (Some(policy), _) => policy.namespace_selector.as_ref().map(|selector| {
            crate::cluster::drift_feed::Reach::PolicyBindings(
                crate::drift::WebhookReach::of_policy_binding(&policy.name, selector),
            )
        }),
        (None, webhook) => webhook
            .as_ref()
            .map(|(name, _)| crate::cluster::drift_feed::Reach::WebhookConfiguration(name.clone())),
    };
    let feed =
        crate::cluster::drift_feed::start(client.clone(), options.settings.keys.clone(), reach);
    crate::cluster::drift_feed::spawn_gauge(
        feed.clone(),
        options.drift_policy.clone(),
        sidecars.clone(),
        metrics.clone(),
    );
    let lease_task = options.rollout.as_ref().map(|rollout| {
        start_rollout(
            options,
            rollout,
            client,
            readiness,
            feed,
            status,
            sidecars.clone(),
            stop,
        )
    });
    ClusterParts {
        served: served(client, book_signals, sidecars, options.policy.is_some()),
        stopped_first: [lease_task, publisher_task],
    }
}

/// The Lease, the engine and, with `--promote-after`, the upstream gate; the Lease's task.
#[allow(clippy::too_many_arguments)]
fn start_rollout(
    options: &ServeOptions,
    rollout: &RolloutOptions,
    client: &kube::Client,
    readiness: &Arc<Readiness>,
    feed: crate::cluster::drift_feed::DriftFeed,
    status: Option<watch::Receiver<Option<k8s_openapi::api::core::v1::ConfigMap>>>,
    sidecars: watch::Receiver<Arc<SidecarSet>>,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let metrics = &options.metrics;
    let (grant_tx, grant) = watch::channel(None);
    let lease_task = tokio::spawn(crate::cluster::lease::run(
        client.clone(),
        rollout.lease.clone(),
        readiness.watch(),
        grant_tx,
        stop,
    ));
    let mut engine = crate::engine::Engine::new(
        client.clone(),
        rollout.engine.clone(),
        metrics.clone(),
        recorder(client.clone(), options.pod_name.clone()),
        status.clone().unwrap_or_else(|| {
            crate::cluster::status::watch_status(client.clone(), &rollout.engine.namespace)
        }),
    );
    if let Some(notify) = &rollout.notify {
        engine.notify_with(crate::notifier::Notifier::spawn(
            notify.clone(),
            metrics.clone(),
        ));
    }
    if let Some(upstream) = &rollout.upstream {
        tokio::spawn(crate::engine::upstream_gate::run(
            client.clone(),
            rollout.engine.namespace.clone(),
            upstream.clone(),
            grant.clone(),
        ));
    }
    tokio::spawn(crate::engine::run(
        engine,
        feed,
        sidecars.clone(),
        readiness.watch(),
        grant,
        rollout.act_after_ready,
    ));
    lease_task
}

/// What the webhook injects: what the sources serve with the pins and holds of the campaign
/// book, and a warning on sidecars whose campaign is paused (known from the status
/// ConfigMap), for the nodes as they are (`nativeSidecars: auto`).
fn served(
    client: &kube::Client,
    book: Option<crate::cluster::status::BookSignals>,
    sidecars: watch::Receiver<Arc<SidecarSet>>,
    policy_mode: bool,
) -> watch::Receiver<Arc<SidecarSet>> {
    // With policies nothing serves `/mutate`: no Node watch for it.
    if policy_mode {
        return sidecars;
    }
    let served = book.map_or(sidecars, |signals| signals.served);
    crate::cluster::nodes::served_for_nodes(
        served,
        crate::cluster::nodes::watch_nodes(client.clone()),
    )
}

/// One port's server, serving.
struct Server {
    /// "TLS" or "lifecycle", for errors.
    name: &'static str,
    handle: Handle<SocketAddr>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The servers, serving: the webhook's (none with `--injection=policy`) and the lifecycle one.
struct Servers {
    tls_addr: Option<SocketAddr>,
    lifecycle_addr: SocketAddr,
    all: Vec<Server>,
}

impl Servers {
    /// Lets in-flight requests finish, for at most `timeout`, and closes the ports.
    async fn shut_down(self, timeout: Duration) -> anyhow::Result<()> {
        for server in &self.all {
            server.handle.graceful_shutdown(Some(timeout));
        }
        for server in self.all {
            let name = server.name;
            server
                .task
                .await
                .with_context(|| format!("{name} server task"))?
                .with_context(|| format!("{name} server"))?;
        }
        info!("stopped");
        Ok(())
    }
}

/// Serves the webhook over TLS (when it is served) and the probes and metrics in plain text,
/// each behind the connection bounds of its port.
fn start_servers(
    options: &ServeOptions,
    ready: ReadyToServe,
    state: Arc<WebhookState>,
) -> anyhow::Result<Servers> {
    let metrics = &options.metrics;
    // Probes and scrapes get the same bounds as the webhook, under a cap of their own so
    // that neither port can crowd out the other.
    let lifecycle_guard = WrapAcceptor::new(
        connection::GuardAcceptor::new(
            connection::LIFECYCLE_MAX_CONNECTIONS,
            options.idle_timeout,
            metrics.clone(),
            Port::Lifecycle,
        ),
        connection::HeadLayer::new(options.body_read_timeout),
    );
    let lifecycle_addr = ready.lifecycle_listener.local_addr()?;
    let lifecycle_handle: Handle<SocketAddr> = Handle::new();
    let mut lifecycle_server = axum_server::from_tcp(ready.lifecycle_listener)?
        .acceptor(lifecycle_guard)
        .handle(lifecycle_handle.clone());
    heads_timed_by_the_acceptor(lifecycle_server.http_builder());
    let lifecycle_task =
        tokio::spawn(lifecycle_server.serve(lifecycle_router(state.clone()).into_make_service()));
    let mut all = vec![Server {
        name: "lifecycle",
        handle: lifecycle_handle,
        task: lifecycle_task,
    }];
    let tls_addr = match ready.webhook {
        Some(webhook) => {
            let addr = webhook.listener.local_addr()?;
            all.insert(0, start_webhook_server(options, webhook, state)?);
            Some(addr)
        }
        None => None,
    };
    Ok(Servers {
        tls_addr,
        lifecycle_addr,
        all,
    })
}

/// Serves `/mutate` over TLS on the webhook's port.
fn start_webhook_server(
    options: &ServeOptions,
    webhook: WebhookServing,
    state: Arc<WebhookState>,
) -> anyhow::Result<Server> {
    let guard = connection::GuardAcceptor::new(
        options.max_connections,
        options.idle_timeout,
        options.metrics.clone(),
        Port::Webhook,
    );
    let handle: Handle<SocketAddr> = Handle::new();
    let mut tls_server = axum_server::from_tcp(webhook.listener)?
        .acceptor(WrapAcceptor::new(
            axum_server::tls_rustls::RustlsAcceptor::new(webhook.tls).acceptor(guard),
            connection::HeadLayer::new(options.body_read_timeout),
        ))
        .handle(handle.clone());
    heads_timed_by_the_acceptor(tls_server.http_builder());
    // Each stream may buffer a body: the byte budget bounds memory, this bounds how many
    // bodies one connection can have in flight.
    tls_server
        .http_builder()
        .http2()
        .max_concurrent_streams(http::MAX_CONCURRENT_STREAMS)
        .max_header_list_size(http::MAX_HEADER_LIST_BYTES)
        // What a client may send ahead of our reads sits outside the byte budget: hyper's
        // defaults (2 MiB a stream, 5 MiB a connection) times many connections would be
        // hundreds of MiB. Loopback and cluster networks refill small windows fast.
        .initial_stream_window_size(http::STREAM_WINDOW_BYTES)
        .initial_connection_window_size(http::CONNECTION_WINDOW_BYTES);
    let task = tokio::spawn(tls_server.serve(webhook_router(state).into_make_service()));
    Ok(Server {
        name: "TLS",
        handle,
        task,
    })
}

/// A listening socket on `address:port`, ready for the runtime.
fn listen(address: IpAddr, port: u16, flag: &str) -> anyhow::Result<std::net::TcpListener> {
    let at = SocketAddr::new(address, port);
    let listener = std::net::TcpListener::bind(at)
        .with_context(|| format!("cannot listen on {at} ({flag})"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}
