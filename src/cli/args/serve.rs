//! The flags of `serve` and `certs`.

use super::*;
use crate::annotations::DEFAULT_ANNOTATION_NAMESPACE;
use crate::engine::EngineMode;
use crate::injection::MissingSidecarPolicy;
use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Who injects the pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum InjectionMode {
    Webhook,
    Policy,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// A YAML file of these settings, each flag's long name without the dashes
    /// (`max-parallel: 10`; a list repeats a flag, `true` turns a switch on). A flag or its
    /// environment variable overrides the file.
    #[arg(long, env = "SETTINGS_FILE", value_name = "FILE")]
    pub(crate) settings: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) configs: ConfigDirectoryArgs,
    /// Prefix of every annotation key (a Tumblr deployment passes injector.tumblr.com).
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE, help_heading = "Sidecar configs")]
    pub(crate) annotation_namespace: String,
    /// HTTPS port of /mutate and /health.
    #[arg(
        long,
        env = "TLS_PORT",
        default_value_t = 9443,
        help_heading = "Webhook"
    )]
    pub(crate) tls_port: u16,
    /// Plain HTTP port of /health, /ready and /metrics.
    #[arg(
        long,
        env = "LIFECYCLE_PORT",
        default_value_t = 9000,
        help_heading = "Webhook"
    )]
    pub(crate) lifecycle_port: u16,
    /// Also export the series of Tumblr's k8s-sidecar-injector under their names and labels
    /// (injections, http_api_requests_total, http_request_duration_seconds,
    /// http_in_flight_requests, http_response_size_bytes), so that its dashboards and alerts
    /// keep working during a migration.
    #[arg(long, env = "TUMBLR_METRICS", help_heading = "Webhook")]
    pub(crate) tumblr_metrics: bool,
    /// Send traces to this OpenTelemetry collector, over OTLP/HTTP (protobuf): its base URL
    /// (`http://otel-collector.observability:4318`) or its `/v1/traces` URL. A span for each
    /// admission review (continuing the trace the API server sends when its tracing is on),
    /// each rollout plan and each restart; their trace ids become exemplars of the latency
    /// histograms. Needs a build with the `otlp` cargo feature (the default).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_parser = parse_otlp_endpoint, help_heading = "Traces")]
    pub(crate) otlp_endpoint: Option<http::Uri>,
    /// The share of the traces begun here (plans, restarts, reviews sent with no trace) that
    /// are kept, from 0 to 1; a review in a trace the API server began keeps its decision.
    #[arg(long, default_value_t = 1.0, value_parser = parse_ratio, help_heading = "Traces")]
    pub(crate) otlp_sampling_ratio: f64,
    /// Address both ports listen on.
    #[arg(long, default_value = "0.0.0.0", help_heading = "Webhook")]
    pub(crate) bind_address: IpAddr,
    /// Serving certificate (PEM) [default: /var/lib/secrets/cert.crt; when that is missing, a
    /// development certificate is generated in certs/].
    #[arg(long, env = "TLS_CERT_FILE", help_heading = "Webhook")]
    pub(crate) tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM) [default: /var/lib/secrets/cert.key].
    #[arg(long, env = "TLS_KEY_FILE", help_heading = "Webhook")]
    pub(crate) tls_key_file: Option<PathBuf>,
    /// The MutatingWebhookConfiguration whose caBundle this replica keeps trusting
    /// --ca-bundle-file (checked at start, whenever the configuration changes, and on
    /// certificate reload; other CAs still valid are kept beside it, three at most, so replicas
    /// mid-rotation never undo each other), so the manifests need no caBundle that a re-apply
    /// would reset. Its namespaceSelector is followed too: pods of namespaces it leaves out are
    /// never injected, so drift counts them excluded and the engine never restarts them.
    #[arg(
        long,
        env = "WEBHOOK_CONFIGURATION",
        requires = "ca_bundle_file",
        help_heading = "Webhook"
    )]
    pub(crate) webhook_configuration: Option<String>,
    /// The CA certificate (PEM) that signed the serving certificate: what the caBundle must trust.
    #[arg(
        long,
        env = "CA_BUNDLE_FILE",
        requires = "webhook_configuration",
        help_heading = "Webhook"
    )]
    pub(crate) ca_bundle_file: Option<PathBuf>,
    /// The injector's own namespace is always added when running in a cluster.
    #[command(flatten)]
    pub(crate) ignore_namespaces: IgnoredNamespaceArgs,
    /// What to do when a requested sidecar does not exist.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(MissingSidecarPolicy::Deny), help_heading = "Sidecar configs")]
    pub(crate) on_missing_sidecar: crate::cli::args::values::Flag<MissingSidecarPolicy>,
    /// Who injects: the webhook (`/mutate` over TLS, called through a
    /// MutatingWebhookConfiguration), or the API server itself through
    /// MutatingAdmissionPolicies this replica keeps equal to the configs in force, holds and
    /// pins included (Kubernetes 1.36+; no TLS port, no certificate, no webhook configuration;
    /// see `sidecar-injector policy` for what it cannot express).
    #[arg(long, env = "INJECTION", value_enum, default_value_t = InjectionMode::Webhook, help_heading = "Injection by admission policy")]
    pub(crate) injection: InjectionMode,
    /// With --injection=policy: the name of the policies and their bindings.
    #[arg(
        long,
        env = "POLICY_NAME",
        default_value = "sidecar-injector",
        help_heading = "Injection by admission policy"
    )]
    pub(crate) policy_name: String,
    /// With --injection=policy: the namespaces the policies' bindings reach, a label selector
    /// as kubectl spells it (deploy/ passes `sidecar-injector.io/injection!=disabled`, as its
    /// webhook configuration's namespaceSelector); the ignored namespaces are left out too.
    #[arg(long, env = "NAMESPACE_SELECTOR", value_parser = super::values::parse_label_selector, help_heading = "Injection by admission policy")]
    pub(crate) namespace_selector:
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// Largest AdmissionReview accepted; larger bodies get 413.
    #[arg(long, default_value_t = 6 * 1024 * 1024, help_heading = "Requests and shutdown")]
    pub(crate) max_body_bytes: usize,
    /// Request bodies held in memory at once, over all connections; a request that would
    /// pass it gets 503 (counted as result "busy"). At least --max-body-bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024, help_heading = "Requests and shutdown")]
    pub(crate) max_buffered_bytes: usize,
    /// How long the review of one body may take; past it the request gets 503 (counted as
    /// result "review_timeout"). Bodies over 64 KiB are reviewed off the async workers.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, help_heading = "Requests and shutdown")]
    pub(crate) review_timeout: Duration,
    /// How long a client may take to send a request's headers (from their first byte: a
    /// keep-alive connection may wait for its next request up to --idle-timeout) and its body;
    /// a slower body gets 408, a slower head has its connection closed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, help_heading = "Requests and shutdown")]
    pub(crate) body_read_timeout: Duration,
    /// After SIGTERM, how long /ready fails before the listeners close, so that endpoints
    /// stop sending requests here first.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, help_heading = "Requests and shutdown")]
    pub(crate) shutdown_delay: Duration,
    /// At most this many connections to the webhook port at once; one more is closed at
    /// accept (counted in sidecar_injector_connections_refused_total{port="webhook"}). The
    /// lifecycle port has a cap of its own, 64.
    #[arg(long, default_value_t = 1000, help_heading = "Requests and shutdown")]
    pub(crate) max_connections: usize,
    /// A connection (HTTP/1.1 or HTTP/2, to either port) with no traffic in either direction
    /// this long is closed. Keep it above the API server's own idle-connection timeout (90s): a
    /// connection closed from this side can cross a review the API server is sending on it,
    /// which then fails (and with failurePolicy Ignore, its pod is created uninjected).
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration, help_heading = "Requests and shutdown")]
    pub(crate) idle_timeout: Duration,
    /// How long in-flight requests may take to finish once the listeners close.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration, help_heading = "Requests and shutdown")]
    pub(crate) shutdown_timeout: Duration,
    /// Quiet time after a change in the config or certificate directory before reloading.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration, help_heading = "Requests and shutdown")]
    pub(crate) reload_debounce: Duration,
    #[command(flatten)]
    pub(crate) configmaps: ConfigMapArgs,
    /// Kubeconfig file for the cluster connection. Without it (or --master-url) `serve` uses
    /// the in-cluster configuration, or runs with no cluster; it never reads ~/.kube/config.
    #[arg(long, help_heading = "Cluster connection")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// API server URL; overrides the server of --kubeconfig or of the in-cluster configuration.
    #[arg(long, help_heading = "Cluster connection")]
    pub(crate) master_url: Option<String>,
    #[command(flatten)]
    pub(crate) kube_api_rate: super::KubeApiRateArgs,
    #[command(flatten)]
    pub(crate) drift: DriftPolicyArgs,
    /// The rollout engine: restart stale workloads (auto), only plan and report (dry-run), or
    /// not run (off). Needs a cluster connection.
    #[arg(long, env = "ROLLOUT", value_enum, default_value_t = EngineMode::Auto, help_heading = "Rollout engine")]
    pub(crate) rollout: EngineMode,
    /// Quiet time after a revision change before its campaign starts, so a burst of edits is
    /// one campaign.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, help_heading = "Rollout engine")]
    pub(crate) settle: Duration,
    /// `auto`: a new revision's campaign starts once it settled. `gated`: it waits to be
    /// promoted (`sidecar-injector rollout --promote SIDECAR`), new pods keeping the last good
    /// revision meanwhile, as during a hold (for clusters promoted after staging).
    #[arg(long, env = "PROMOTION", value_enum, default_value_t = crate::cli::args::values::Flag(crate::rollout::promotion::PromotionMode::Auto), help_heading = "Promotion")]
    pub(crate) promotion: crate::cli::args::values::Flag<crate::rollout::promotion::PromotionMode>,
    /// With --promotion=gated: promote a waiting revision here by itself once its campaign is
    /// complete and baked (--promote-bake) in each of these upstream clusters, contexts of
    /// --upstream-kubeconfig (repeatable, or comma-separated). `rollout --promote` still
    /// promotes by hand.
    #[arg(
        long,
        env = "PROMOTE_AFTER",
        value_delimiter = ',',
        value_name = "CONTEXT",
        help_heading = "Promotion"
    )]
    pub(crate) promote_after: Vec<String>,
    /// With --promote-after: how long a revision's campaign must have been complete in every
    /// upstream cluster before it is promoted here.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, help_heading = "Promotion")]
    pub(crate) promote_bake: Duration,
    /// With --promote-after: the kubeconfig that reaches the upstream clusters (a Secret
    /// mounted in the pod; it needs to read their status ConfigMap, nothing else).
    #[arg(
        long,
        env = "UPSTREAM_KUBECONFIG",
        default_value = "/etc/sidecar-injector/upstream/kubeconfig",
        help_heading = "Promotion"
    )]
    pub(crate) upstream_kubeconfig: PathBuf,
    /// With --promote-after: the injector's namespace in the upstream clusters [default:
    /// --injector-namespace].
    #[arg(long, help_heading = "Promotion")]
    pub(crate) upstream_injector_namespace: Option<String>,
    #[command(flatten)]
    pub(crate) safety: RolloutSafetyArgs,
    /// Namespace of the status ConfigMap and the rollout Lease [default: the injector's own
    /// namespace in a cluster, else --configmap-namespace].
    #[arg(long, env = "POD_NAMESPACE", help_heading = "Rollout engine")]
    pub(crate) injector_namespace: Option<String>,
    /// The rollout engine restarts nothing until this replica has been ready this long: the
    /// pods it restarts are created through the webhook, and until the Service sends the API
    /// server's calls to a ready replica they would come back without their sidecars.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, help_heading = "Rollout engine")]
    pub(crate) act_after_ready: Duration,
    /// How long the rollout Lease lasts without renewal; the holder stops acting after two
    /// thirds of it.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, hide = true, help_heading = "Rollout engine")]
    pub(crate) lease_duration: Duration,
    /// How often this replica renews its publication of the revisions it injects (the one-shot
    /// commands treat a publication older than a few of these as stale).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, help_heading = "Rollout engine")]
    pub(crate) publish_interval: Duration,
    /// POST a JSON notice to this URL when a campaign starts restarting, pauses (with the
    /// reason) or completes, with its counts; its `text` field makes it a Slack incoming-webhook
    /// message as it is. Sent by the Lease holder, retried, never in the rollout's way.
    #[arg(long, env = "NOTIFY_URL", value_parser = crate::notifier::parse_notify_url, hide_env_values = true, help_heading = "Notifications")]
    pub(crate) notify_url: Option<http::Uri>,
    /// How long one attempt to deliver a notice may take.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, help_heading = "Notifications")]
    pub(crate) notify_timeout: Duration,
    /// Attempts after the first failed one (the waits between them double from one second).
    #[arg(long, default_value_t = 3, help_heading = "Notifications")]
    pub(crate) notify_retries: u32,
}

#[derive(Debug, Args)]
pub(crate) struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key into (created when missing).
    #[arg(long)]
    pub(crate) out_dir: PathBuf,
    /// DNS name or IP address the serving certificate is for; repeat for several, e.g.
    /// sidecar-injector.injector-system.svc. Required the first time; without it a renewal
    /// keeps the names of the tls.crt in the out directory.
    #[arg(long = "dns-name")]
    pub(crate) dns_names: Vec<String>,
    /// How long the certificates are valid (e.g. 90d, 1y).
    #[arg(long, default_value = "365d", value_parser = humantime::parse_duration)]
    pub(crate) validity: Duration,
    /// Make a new CA even when the out directory holds one (ca.crt and ca.key); without it, a
    /// second run renews the serving certificate with the same CA, so the caBundle stays.
    #[arg(long)]
    pub(crate) new_ca: bool,
}

fn parse_otlp_endpoint(text: &str) -> Result<http::Uri, String> {
    crate::notifier::parse_http_url(text, "exported to")
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!(
            "{text:?} is not a ratio from 0 to 1 (0.1 keeps one trace in ten)"
        )),
    }
}
