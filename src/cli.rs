//! The command line: argument definitions (clap derive) and the offline commands' I/O shell.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde::Deserialize;
use serde_json::Value;

use crate::annotations::{AnnotationKeys, DEFAULT_ANNOTATION_NAMESPACE};
use crate::api_client::counted_client;
use crate::config::{LoadReport, SidecarSet, load_directory};
use crate::config_directory::{is_config_file_name, load_config_directory, read_config_directory};
use crate::injection::{
    DEFAULT_IGNORED_NAMESPACES, Decision, InjectionSettings, MissingSidecarPolicy, PodView, decide,
};
use crate::metrics::Metrics;
use crate::rollout_engine::EngineMode;
use crate::server::{self, ConfigMapOptions, RolloutOptions, ServeOptions};
use crate::telemetry::{self, LogFormat, LogLevel};
use crate::tls::{self, DevCertificates};

#[derive(Debug, Parser)]
#[command(
    name = "sidecar-injector",
    version,
    about = "Inject sidecars by pod annotation, and keep them current"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log level: error, warn, info, debug, trace, or a glog verbosity number (Tumblr's `-v`).
    #[arg(
        long = "log-level",
        short = 'v',
        visible_alias = "v",
        env = "LOG_LEVEL",
        global = true,
        default_value = "info"
    )]
    pub log_level: LogLevel,
    /// Log format on stderr.
    #[arg(long, env = "LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what the webhook would do to each document (Pod, or the pod template of a workload),
    /// offline. Prints the result as YAML; a denial goes to stderr with exit status 1.
    Inject(InjectArgs),
    /// Check sidecar configs and print each with its revision; exit status 1 on any error.
    Validate(ValidateArgs),
    /// Run the admission webhook (HTTPS) and its lifecycle endpoints.
    Serve(Box<ServeArgs>),
    /// Write a development CA and serving certificate, and print the caBundle.
    Certs(CertsArgs),
    /// Report, per sidecar and per workload, which pods run a stale sidecar (one-shot, from the
    /// cluster: the usual kubeconfig resolution, or --kubeconfig).
    Drift(DriftArgs),
    /// Restart the workloads whose pods run a stale sidecar, once: a dry-run plan by default,
    /// --confirm to act and wait until done (exit status 1 when any workload failed).
    Rollout(Box<RolloutArgs>),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Table,
    Json,
}

/// The ConfigMap config source, for `serve` and for `drift`, which reads configs as `serve` does.
#[derive(Debug, Args)]
pub struct ConfigMapArgs {
    /// Namespace of the sidecar ConfigMaps [default for `serve`: the injector's own namespace].
    #[arg(long, env = "CONFIGMAP_NAMESPACE")]
    pub configmap_namespace: Option<String>,
    /// Label selector (k=v[,k=v]) of ConfigMaps holding sidecar configs; turns that source on.
    #[arg(long, env = "CONFIGMAP_LABELS")]
    pub configmap_labels: Option<String>,
}

/// What drift counts as restartable and where it looks, the same for `serve` and `drift`.
#[derive(Debug, Args)]
pub struct DriftPolicyArgs {
    /// Drift: only these namespaces (repeatable).
    #[arg(long = "include-namespace")]
    pub include_namespaces: Vec<String>,
    /// Drift: not these namespaces (repeatable).
    #[arg(long = "exclude-namespace")]
    pub exclude_namespaces: Vec<String>,
    /// Drift: treat bare pods as restartable instead of excluded.
    #[arg(long)]
    pub evict_bare_pods: bool,
    /// Drift: treat pods injected without a revision as restartable.
    #[arg(long)]
    pub restart_unknown: bool,
}

impl DriftPolicyArgs {
    /// The policy, with `ignored` the namespaces never injected.
    pub fn policy(&self, ignored: BTreeSet<String>) -> crate::drift::DriftPolicy {
        crate::drift::DriftPolicy {
            include_namespaces: self.include_namespaces.iter().cloned().collect(),
            exclude_namespaces: self.exclude_namespaces.iter().cloned().collect(),
            ignore_namespaces: ignored,
            evict_bare_pods: self.evict_bare_pods,
            restart_unknown: self.restart_unknown,
        }
    }
}

/// The rollout engine's safety limits, the same for `serve` and `rollout`.
#[derive(Debug, Args)]
pub struct RolloutSafetyArgs {
    /// Workloads rolling at once.
    #[arg(long, visible_alias = "parallel-rollouts", default_value_t = 5)]
    pub max_parallel: usize,
    /// Restarts started in any minute.
    #[arg(long, default_value_t = 30)]
    pub max_restarts_per_minute: usize,
    /// A workload is not restarted again within this time of its last restart.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub cooldown: Duration,
    /// Workloads in the canary wave, which must become healthy before the rest.
    #[arg(long, default_value_t = 1)]
    pub canary: usize,
    /// Failed or timed-out workloads after which a sidecar's campaign pauses.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_failures: u32,
    /// How long a restarted workload may take to roll out (kubectl's rollout-status rule).
    #[arg(long, visible_alias = "timeout", default_value = "5m", value_parser = humantime::parse_duration)]
    pub rollout_timeout: Duration,
}

impl RolloutSafetyArgs {
    pub fn settings(&self, settle: Duration) -> crate::rollout::RolloutSettings {
        crate::rollout::RolloutSettings {
            max_parallel: self.max_parallel,
            max_restarts_per_minute: self.max_restarts_per_minute,
            cooldown: self.cooldown,
            canary: self.canary,
            max_failures: self.max_failures as usize,
            rollout_timeout: self.rollout_timeout,
            settle,
            ..Default::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    pub configs: ConfigDirectoryArgs,
    /// Prefix of every annotation key.
    #[arg(long, visible_alias = "annotation-prefix", env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub annotation_namespace: String,
    #[command(flatten)]
    pub configmaps: ConfigMapArgs,
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or the in-cluster configuration].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub drift: DriftPolicyArgs,
    /// Namespaces never injected (repeatable), as `serve`'s --ignore-namespace.
    #[arg(long = "ignore-namespace", default_values = DEFAULT_IGNORED_NAMESPACES)]
    pub ignore_namespaces: Vec<String>,
    #[command(flatten)]
    pub safety: RolloutSafetyArgs,
    /// Act: restart the planned workloads and wait until they are done (`--confirm=false` only
    /// plans).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub confirm: bool,
    /// Clear paused campaigns (earlier failures stop counting) before planning.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub resume: bool,
    /// Act even while a `serve` in auto mode holds the rollout Lease.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub force: bool,
    /// Include StatefulSets.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub include_statefulset: bool,
    /// Include DaemonSets.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub include_daemonset: bool,
    /// Leave Deployments out.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub exclude_deployment: bool,
    /// Text put before the engine's reason in `NS/rollout-reason` and the change-cause.
    #[arg(long)]
    pub rollout_reason: Option<String>,
    /// Select by container name instead of by revision, for sidecars another system injected
    /// (repeatable, or comma-separated): restart the workloads whose pods run a container of
    /// that name. Lists pod specs once.
    #[arg(long, value_delimiter = ',')]
    pub sidecar_container_name: Vec<String>,
    /// With --sidecar-container-name: only pods started before this time, RFC 3339 or
    /// `2022-05-01 13:00` (UTC) [default: when the command starts].
    #[arg(long, requires = "sidecar_container_name")]
    pub only_started_before: Option<String>,
    /// Output format of the plan and the results.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Namespace of the running injector (its status ConfigMap and rollout Lease).
    #[arg(long, default_value = "injector-system")]
    pub injector_namespace: String,
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    #[command(flatten)]
    pub configs: ConfigDirectoryArgs,
    /// Prefix of every annotation key.
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub annotation_namespace: String,
    #[command(flatten)]
    pub configmaps: ConfigMapArgs,
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or the in-cluster configuration].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub drift: DriftPolicyArgs,
    /// Namespaces never injected (repeatable), as `serve`'s --ignore-namespace.
    #[arg(long = "ignore-namespace", default_values = DEFAULT_IGNORED_NAMESPACES)]
    pub ignore_namespaces: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Namespace of the running injector, whose status ConfigMap (when present) gives the
    /// revisions in force.
    #[arg(long, default_value = "injector-system")]
    pub injector_namespace: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub configs: ConfigDirectoryArgs,
    /// Prefix of every annotation key (a Tumblr deployment passes injector.tumblr.com).
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub annotation_namespace: String,
    /// HTTPS port of /mutate and /health.
    #[arg(long, env = "TLS_PORT", default_value_t = 9443)]
    pub tls_port: u16,
    /// Plain HTTP port of /health, /ready and /metrics.
    #[arg(long, env = "LIFECYCLE_PORT", default_value_t = 9000)]
    pub lifecycle_port: u16,
    /// Address both ports listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Serving certificate (PEM) [default: /var/lib/secrets/cert.crt; when that is missing, a
    /// development certificate is generated in certs/].
    #[arg(long, env = "TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM) [default: /var/lib/secrets/cert.key].
    #[arg(long, env = "TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Namespaces whose pods are never injected; repeat the flag for several. The injector's own
    /// namespace is always added when running in a cluster.
    #[arg(long = "ignore-namespace", default_values = DEFAULT_IGNORED_NAMESPACES)]
    pub ignore_namespaces: Vec<String>,
    /// What to do when a requested sidecar does not exist.
    #[arg(long, value_enum, default_value_t = MissingSidecarPolicy::Deny)]
    pub on_missing_sidecar: MissingSidecarPolicy,
    /// Largest AdmissionReview accepted; larger bodies get 413.
    #[arg(long, default_value_t = 6 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// How long a client may take to send its headers and body; slower ones get 408.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Duration,
    /// After SIGTERM, how long /ready fails before the listeners close, so that endpoints
    /// stop sending requests here first.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
    /// How long in-flight requests may take to finish once the listeners close.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
    /// Quiet time after a change in the config or certificate directory before reloading.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    pub reload_debounce: Duration,
    #[command(flatten)]
    pub configmaps: ConfigMapArgs,
    /// Kubeconfig file for the cluster connection. Without it (or --master-url) `serve` uses
    /// the in-cluster configuration, or runs with no cluster; it never reads ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// API server URL; overrides the server of --kubeconfig or of the in-cluster configuration.
    #[arg(long)]
    pub master_url: Option<String>,
    #[command(flatten)]
    pub drift: DriftPolicyArgs,
    /// The rollout engine: restart stale workloads (auto), only plan and report (dry-run), or
    /// not run (off). Needs a cluster connection.
    #[arg(long, env = "ROLLOUT", value_enum, default_value_t = EngineMode::Auto)]
    pub rollout: EngineMode,
    /// Quiet time after a revision change before its campaign starts, so a burst of edits is
    /// one campaign.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    #[command(flatten)]
    pub safety: RolloutSafetyArgs,
    /// Namespace of the status ConfigMap and the rollout Lease [default: the injector's own
    /// namespace in a cluster, else --configmap-namespace].
    #[arg(long, env = "POD_NAMESPACE")]
    pub injector_namespace: Option<String>,
    /// How long the rollout Lease lasts without renewal; the holder stops acting after two
    /// thirds of it.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, hide = true)]
    pub lease_duration: Duration,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key into (created when missing).
    #[arg(long)]
    pub out_dir: PathBuf,
    /// DNS name or IP address the serving certificate is for; repeat for several, e.g.
    /// sidecar-injector.injector-system.svc.
    #[arg(long = "dns-name", required = true)]
    pub dns_names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ConfigDirectoryArgs {
    /// Directory of sidecar configs (*.yaml, *.yml).
    #[arg(long, env = "CONFIG_DIR", default_value = "config/")]
    pub config_directory: PathBuf,
}

#[derive(Debug, Args)]
pub struct InjectArgs {
    #[command(flatten)]
    pub configs: ConfigDirectoryArgs,
    /// Prefix of every annotation key (a Tumblr deployment passes injector.tumblr.com).
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub annotation_namespace: String,
    /// Namespaces whose pods are never injected; repeat the flag for several.
    #[arg(long = "ignore-namespace", default_values = DEFAULT_IGNORED_NAMESPACES)]
    pub ignore_namespaces: Vec<String>,
    /// What to do when a requested sidecar does not exist.
    #[arg(long, value_enum, default_value_t = MissingSidecarPolicy::Deny)]
    pub on_missing_sidecar: MissingSidecarPolicy,
    /// Manifest to read (YAML or JSON, several documents allowed); `-` for standard input.
    #[arg(short = 'f', long = "filename")]
    pub file: String,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub configs: ConfigDirectoryArgs,
    /// Config files or directories to check; the config directory when none is given.
    pub paths: Vec<PathBuf>,
}

impl Cli {
    /// Parses the process arguments. An environment variable set to an empty value counts as
    /// unset, as in Tumblr's entrypoint (`TLS_PORT=` falls back to the default).
    pub fn parse_args() -> Self {
        fn unset_if_empty(arg: clap::Arg) -> clap::Arg {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|value| value.is_empty());
            if empty { arg.env(None) } else { arg }
        }
        let command = <Self as clap::CommandFactory>::command()
            .mut_args(unset_if_empty)
            .mut_subcommands(|sub| sub.mut_args(unset_if_empty));
        let matches = command.get_matches();
        <Self as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
    }
}

pub fn run(cli: Cli) -> ExitCode {
    tls::install_crypto_provider();
    telemetry::init(cli.log_level, cli.log_format);
    let result = match cli.command {
        Command::Inject(args) => inject(&args),
        Command::Validate(args) => validate(&args),
        Command::Serve(args) => serve(*args),
        Command::Certs(args) => certs(&args),
        Command::Drift(args) => drift(&args),
        Command::Rollout(args) => crate::rollout_command::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Tumblr's paths, so a deployment that mounts its Secret there keeps working.
pub const DEFAULT_TLS_CERT_FILE: &str = "/var/lib/secrets/cert.crt";
pub const DEFAULT_TLS_KEY_FILE: &str = "/var/lib/secrets/cert.key";

/// The namespace of the service account this process runs as, when it runs in a pod.
const IN_CLUSTER_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut ignored: BTreeSet<String> = args.ignore_namespaces.iter().cloned().collect();
    let own_namespace = std::fs::read_to_string(IN_CLUSTER_NAMESPACE_FILE)
        .ok()
        .map(|ns| ns.trim().to_owned());
    ignored.extend(own_namespace.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let metrics = Arc::new(Metrics::new());
    let cluster = match runtime.block_on(cluster_config(&args))? {
        Some(config) => {
            let _guard = runtime.enter();
            Some(counted_client(config, metrics.kube_requests.clone())?)
        }
        None => None,
    };
    let configmaps = match (&args.configmaps.configmap_labels, cluster.clone()) {
        (None, None) => {
            tracing::info!(
                "no cluster connection (not in a cluster, no --kubeconfig or --master-url): serving directory configs only"
            );
            None
        }
        (None, Some(_)) => None,
        (Some(_), None) => anyhow::bail!(
            "--configmap-labels needs a cluster connection: run in a cluster, or pass --kubeconfig or --master-url"
        ),
        (Some(selector), Some(client)) => {
            let namespace = match &args.configmaps.configmap_namespace {
                Some(namespace) => namespace.clone(),
                None => own_namespace.clone().ok_or_else(|| {
                        anyhow::anyhow!(
                            "--configmap-labels without --configmap-namespace needs the injector's own namespace, \
                             read from {IN_CLUSTER_NAMESPACE_FILE} in a cluster; outside one, pass --configmap-namespace"
                        )
                })?,
            };
            Some(ConfigMapOptions {
                client,
                namespace,
                selector: selector.clone(),
            })
        }
    };
    let ignored_for_drift = ignored.clone();
    let drift_policy = args.drift.policy(ignored_for_drift);
    let rollout = match (&cluster, args.rollout) {
        (None, _) | (_, EngineMode::Off) => None,
        (Some(_), mode) => {
            let namespace = args
                .injector_namespace
                .clone()
                .or(own_namespace.clone())
                .or(args.configmaps.configmap_namespace.clone())
                .context(
                    "the rollout engine keeps its status ConfigMap and Lease in the injector's namespace: \
                     pass --injector-namespace (or --rollout=off)",
                )?;
            let keys = AnnotationKeys::new(&args.annotation_namespace);
            Some(RolloutOptions {
                engine: crate::rollout_engine::EngineOptions {
                    mode,
                    settings: args.safety.settings(args.settle),
                    keys,
                    policy: drift_policy.clone(),
                    namespace: namespace.clone(),
                    replan_every: Duration::from_secs(5),
                    ignore_manual_policy: false,
                    kinds: None,
                    reason_prefix: None,
                },
                lease: crate::lease::LeaseSettings {
                    namespace,
                    identity: process_identity(),
                    mode: mode.as_str().to_owned(),
                    duration: args.lease_duration,
                    renew_every: args.lease_duration / 3,
                },
            })
        }
    };
    let options = ServeOptions {
        bind_address: args.bind_address,
        tls_port: args.tls_port,
        lifecycle_port: args.lifecycle_port,
        tls_cert_file: args.tls_cert_file,
        tls_key_file: args.tls_key_file,
        default_tls_cert_file: PathBuf::from(DEFAULT_TLS_CERT_FILE),
        default_tls_key_file: PathBuf::from(DEFAULT_TLS_KEY_FILE),
        config_directory: args.configs.config_directory,
        settings: InjectionSettings {
            keys: AnnotationKeys::new(&args.annotation_namespace),
            ignored_namespaces: ignored,
            on_missing_sidecar: args.on_missing_sidecar,
        },
        max_body_bytes: args.max_body_bytes,
        body_read_timeout: args.body_read_timeout,
        reload_debounce: args.reload_debounce,
        shutdown_delay: args.shutdown_delay,
        shutdown_timeout: args.shutdown_timeout,
        configmaps,
        cluster,
        drift_policy,
        rollout,
        metrics,
    };
    runtime.block_on(server::run(options))?;
    Ok(ExitCode::SUCCESS)
}

/// Who holds the Lease: the pod's name in a cluster, else host and process id.
fn process_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_else(|| "sidecar-injector".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// The cluster connection of `serve`: in-cluster, or exactly what the flags name. Never an
/// implicit `~/.kube/config`, so `serve` on a laptop cannot touch whatever cluster it points at.
async fn cluster_config(args: &ServeArgs) -> anyhow::Result<Option<kube::Config>> {
    let mut config = if let Some(path) = &args.kubeconfig {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .with_context(|| format!("cannot use --kubeconfig {}", path.display()))?
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        kube::Config::incluster().context("cannot use the in-cluster configuration")?
    } else if let Some(url) = &args.master_url {
        kube::Config::new(
            url.parse()
                .with_context(|| format!("--master-url {url:?} is not a URL"))?,
        )
    } else {
        return Ok(None);
    };
    if let Some(url) = &args.master_url {
        config.cluster_url = url
            .parse()
            .with_context(|| format!("--master-url {url:?} is not a URL"))?;
    }
    Ok(Some(config))
}

fn drift(args: &DriftArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let client = one_shot_client(args.kubeconfig.as_deref()).await?;
        let keys = AnnotationKeys::new(&args.annotation_namespace);
        let sidecars = one_shot_configs(&client, &args.configs, &args.configmaps).await?;
        let index = crate::drift_snapshot::index(&client, &keys)
            .await
            .context("cannot list pods, ReplicaSets and workloads")?;
        let policy = args
            .drift
            .policy(args.ignore_namespaces.iter().cloned().collect());
        let report = match revisions_in_force(&client, &args.injector_namespace).await? {
            Some(revisions) => index.classify_revisions(&revisions, &policy),
            None => index.classify(&sidecars, &policy),
        };
        let mut out = io::stdout().lock();
        match args.output {
            OutputFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
            OutputFormat::Table => write_drift_table(&mut out, &report)?,
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The revisions a running injector published in its status ConfigMap, which the one-shot
/// commands judge and restart by (what new pods actually get); `None` when there is none and
/// the configs' own revisions apply. Says on stderr which source it is.
pub(crate) async fn revisions_in_force(
    client: &kube::Client,
    injector_namespace: &str,
) -> anyhow::Result<Option<std::collections::BTreeMap<String, String>>> {
    let published = crate::drift_snapshot::published_revisions(client, injector_namespace)
        .await
        .context("cannot use the injector's status ConfigMap")?;
    match &published {
        Some(_) => eprintln!(
            "revisions from {injector_namespace}/{}, as the running injector published them",
            crate::drift_snapshot::STATUS_CONFIGMAP
        ),
        None => eprintln!(
            "revisions computed from the configs (no status ConfigMap in {injector_namespace})"
        ),
    }
    Ok(published)
}

/// The cluster for the one-shot commands: --kubeconfig, or the usual resolution.
pub(crate) async fn one_shot_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster: set KUBECONFIG, have ~/.kube/config, or pass --kubeconfig")?,
    };
    Ok(counted_client(config, Default::default())?)
}

/// The configs as `serve` would load them (directory, then ConfigMaps overriding), problems
/// printed on stderr.
pub(crate) async fn one_shot_configs(
    client: &kube::Client,
    configs: &ConfigDirectoryArgs,
    configmap_args: &ConfigMapArgs,
) -> anyhow::Result<SidecarSet> {
    let mut sources = crate::config::SourceState::default();
    let dir = &configs.config_directory;
    let directory = match load_config_directory(dir) {
        Ok(report) => report,
        Err(err) if configmap_args.configmap_labels.is_some() => {
            tracing::debug!("no config directory {}: {err}", dir.display());
            LoadReport::default()
        }
        Err(err) => {
            return Err(anyhow::anyhow!(
                "cannot read config directory {}: {err}",
                dir.display()
            ));
        }
    };
    print_config_problems(&directory);
    sources.apply(&directory);
    let mut configmaps = crate::config::SourceState::default();
    if let Some(selector) = &configmap_args.configmap_labels {
        let namespace = configmap_args
            .configmap_namespace
            .as_deref()
            .context("--configmap-labels needs --configmap-namespace")?;
        let report = crate::drift_snapshot::configmap_configs(client, namespace, selector)
            .await
            .context("cannot list the sidecar ConfigMaps")?;
        print_config_problems(&report);
        configmaps.apply(&report);
    }
    Ok(crate::config::merge_sources(&sources, &configmaps).0)
}

fn write_drift_table(out: &mut impl Write, report: &crate::drift::DriftReport) -> io::Result<()> {
    use crate::drift::DriftState;
    let counts = |pods: &crate::drift::StateCounts| {
        DriftState::ALL
            .map(|s| format!("{:>10}", pods.get(s)))
            .join(" ")
    };
    let header = DriftState::ALL
        .map(|s| format!("{:>10}", s.as_str().to_uppercase()))
        .join(" ");
    writeln!(out, "{:<24} {:<12} {header}", "SIDECAR", "REVISION")?;
    for sidecar in &report.sidecars {
        let revision = sidecar.revision.as_deref().unwrap_or("(none)");
        writeln!(
            out,
            "{:<24} {:<12} {}",
            sidecar.name,
            revision,
            counts(&sidecar.pods)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<48} {:<20} {:<10} {:>4}  REASON",
        "WORKLOAD", "SIDECAR", "STATE", "PODS"
    )?;
    for w in &report.workloads {
        let workload = format!("{}/{}/{}", w.kind, w.namespace, w.name);
        writeln!(
            out,
            "{workload:<48} {:<20} {:<10} {:>4}  {}",
            w.sidecar,
            w.state.as_str(),
            w.pods.total(),
            w.reason
        )?;
    }
    Ok(())
}

fn certs(args: &CertsArgs) -> anyhow::Result<ExitCode> {
    let certs = DevCertificates::generate(&args.dns_names)?;
    certs.write(&args.out_dir)?;
    eprintln!(
        "wrote {dir}/ca.crt, {dir}/tls.crt and {dir}/tls.key for {names}; the caBundle for the webhook configuration:",
        dir = args.out_dir.display(),
        names = args.dns_names.join(", ")
    );
    println!("{}", certs.ca_bundle());
    Ok(ExitCode::SUCCESS)
}

fn print_config_problems(report: &LoadReport) {
    for warning in &report.warnings {
        eprintln!("{warning}");
    }
    for error in &report.errors {
        eprintln!("error: {error}");
    }
}

/// Where the pod template sits in each kind `inject` understands.
fn pod_template_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some(""),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => Some("/spec/template"),
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

fn inject(args: &InjectArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.configs.config_directory;
    let report = load_config_directory(dir)
        .with_context(|| format!("cannot read config directory {}", dir.display()))?;
    print_config_problems(&report);
    let sidecars = report.sidecar_set();
    let settings = InjectionSettings {
        keys: AnnotationKeys::new(&args.annotation_namespace),
        ignored_namespaces: args
            .ignore_namespaces
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        on_missing_sidecar: args.on_missing_sidecar,
    };

    let text = read_input(&args.file)?;
    let mut denied = false;
    let mut out = String::new();
    for (position, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let mut document = Value::deserialize(document).with_context(|| {
            format!("{}: document {} is not valid YAML", args.file, position + 1)
        })?;
        if document.is_null() {
            continue;
        }
        denied |= inject_object(&mut document, &sidecars, &settings)?;
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&document).context("cannot print YAML")?);
    }
    io::stdout().write_all(out.as_bytes())?;
    Ok(if denied {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Injects into one object (each item of a `List`, as `kubectl get -o yaml` prints); returns
/// whether it was denied. Kinds without a pod template pass through.
fn inject_object(
    object: &mut Value,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> anyhow::Result<bool> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if kind == "List" {
        let mut denied = false;
        for item in object
            .get_mut("items")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            denied |= inject_object(item, sidecars, settings)?;
        }
        return Ok(denied);
    }
    let label = document_label(object);
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    let Some(template) = pod_template_pointer(&kind).and_then(|p| object.pointer_mut(p)) else {
        return Ok(false);
    };
    let pod = PodView::deserialize(&*template)
        .with_context(|| format!("{label}: cannot read the pod"))?;
    match decide(&pod, &namespace, sidecars, settings) {
        Decision::Inject(injection) => {
            let patch = injection.patch.to_json_patch();
            json_patch::patch(template, &patch)
                .with_context(|| format!("{label}: the patch does not apply"))?;
            for name in &injection.missing {
                eprintln!("{label}: warning: sidecar \"{name}\" not found; injected the rest");
            }
            Ok(false)
        }
        Decision::Skip(_) => Ok(false),
        Decision::Deny(denial) => {
            eprintln!("{label}: denied: {denial}");
            Ok(true)
        }
    }
}

fn read_input(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))
    }
}

fn document_label(document: &Value) -> String {
    let kind = document
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = document.get("metadata");
    let name = meta
        .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    format!("{kind}/{name}")
}

fn validate(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let targets: Vec<PathBuf> = if args.paths.is_empty() {
        vec![args.configs.config_directory.clone()]
    } else {
        args.paths.clone()
    };
    let mut failed = false;
    let mut stdout = io::stdout().lock();
    for target in &targets {
        if !target.exists() {
            eprintln!("error: {}: no such file or directory", target.display());
            failed = true;
            continue;
        }
        let report = if target.is_dir() {
            load_config_directory(target)
                .with_context(|| format!("cannot read directory {}", target.display()))?
        } else {
            load_single_file(target)?
        };
        for sidecar in &report.sidecars {
            let policy = match sidecar.config.rollout_mode() {
                crate::config::RolloutMode::Auto => "",
                crate::config::RolloutMode::Manual => "  (rollout: manual)",
            };
            writeln!(
                stdout,
                "ok  {:<24} {}  {}{policy}",
                sidecar.config.name.to_string(),
                sidecar.revision,
                sidecar.origin
            )?;
        }
        for warning in &report.warnings {
            writeln!(stdout, "{warning}")?;
        }
        for error in &report.errors {
            eprintln!("error: {error}");
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A single file is checked in the company of its directory, since `inherits` and duplicate
/// names depend on its neighbours; only what concerns the file itself is reported.
fn load_single_file(file: &Path) -> anyhow::Result<LoadReport> {
    let dir = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = file
        .file_name()
        .with_context(|| format!("{} is not a file", file.display()))?
        .to_string_lossy()
        .into_owned();
    let mut files = read_config_directory(&dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?;
    if !is_config_file_name(&file_name) || !files.contains_key(&file_name) {
        files.insert(
            file_name.clone(),
            std::fs::read_to_string(file).map_err(|e| e.to_string()),
        );
    }
    let dir_label = dir.display().to_string();
    let mut report = load_directory(&dir_label, &files);
    let origin = format!("{}/{}", dir_label.trim_end_matches('/'), file_name);
    report.sidecars.retain(|s| s.origin == origin);
    report.errors.retain(|e| e.origin == origin);
    report.warnings.retain(|w| w.origin == origin);
    Ok(report)
}
