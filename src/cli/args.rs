//! Every subcommand's arguments (clap derive, with the environment variables of Tumblr's
//! entrypoint as fallbacks); groups shared between subcommands are one struct each.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::annotations::DEFAULT_ANNOTATION_NAMESPACE;
use crate::injection::{DEFAULT_IGNORED_NAMESPACES, MissingSidecarPolicy};
use crate::telemetry::{LogFormat, LogLevel};
use crate::token_bucket::RateLimit;

mod argv;
mod engine;
mod serve;
pub(crate) mod settings_file;
mod values;
pub(crate) use argv::*;
pub(crate) use engine::{DriftPolicyArgs, Purpose, RolloutSafetyArgs, engine_options};
pub(crate) use serve::*;

#[derive(Debug, Parser)]
#[command(
    name = "sidecar-injector",
    version = crate::VERSION,
    about = "Inject sidecars by pod annotation, and keep them current"
)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log level: error, warn, info, debug, trace, or a glog verbosity number (Tumblr's `-v`)
    /// [default: info for `serve`, warn for the one-shot commands, whose output is their
    /// report].
    #[arg(
        long = "log-level",
        short = 'v',
        visible_alias = "v",
        env = "LOG_LEVEL",
        global = true
    )]
    pub(crate) log_level: Option<LogLevel>,
    /// Log format on stderr.
    #[arg(long, env = "LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    #[command(flatten)]
    pub(crate) glog: GlogFlags,
    /// The defaults Tumblr's entrypoint script would have given, when run as `entrypoint.sh`.
    #[arg(skip)]
    pub(crate) entrypoint_defaults: Option<Vec<String>>,
}

/// The glog flags a Tumblr deployment passes. Logs always go to stderr here, so they are
/// accepted and mean nothing (one info line says so); `-v` is the log level above.
#[derive(Debug, Default, Args)]
pub(crate) struct GlogFlags {
    #[arg(long, global = true, hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) logtostderr: Option<String>,
    #[arg(long, global = true, hide = true, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) alsologtostderr: Option<String>,
    #[arg(long, global = true, hide = true)]
    pub(crate) stderrthreshold: Option<String>,
    #[arg(long = "log_dir", global = true, hide = true)]
    pub(crate) log_dir: Option<String>,
    #[arg(long, global = true, hide = true)]
    pub(crate) vmodule: Option<String>,
}

impl GlogFlags {
    /// The flags given, as `--name=value`, for the line that says they are ignored.
    pub(crate) fn given(&self) -> Vec<String> {
        [
            ("logtostderr", &self.logtostderr),
            ("alsologtostderr", &self.alsologtostderr),
            ("stderrthreshold", &self.stderrthreshold),
            ("log_dir", &self.log_dir),
            ("vmodule", &self.vmodule),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some(format!("--{name}={}", value.as_ref()?)))
        .collect()
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show what the webhook would do to each document (Pod, or the pod template of a workload),
    /// offline from a config directory, or with the configs the cluster's injector serves
    /// where there is none (or with --configmap-labels). Prints the result as YAML; a denial
    /// goes to stderr with exit status 1.
    Inject(InjectArgs),
    /// Check sidecar configs and print each with its revision; exit status 1 on any error.
    Validate(ValidateArgs),
    /// Print the MutatingAdmissionPolicy, ValidatingAdmissionPolicy and bindings (Kubernetes
    /// 1.36+) that inject the configs as the webhook does, with no webhook: `sidecar-injector
    /// policy | kubectl apply -f -`. A config they cannot express is refused with the reason
    /// (exit status 1), never injected differently.
    Policy(PolicyArgs),
    /// Run the admission webhook (HTTPS) and its lifecycle endpoints.
    Serve(Box<ServeArgs>),
    /// Write a development CA and serving certificate, and print the caBundle.
    Certs(CertsArgs),
    /// Report, per sidecar and per workload, which pods run a stale sidecar (one-shot, from the
    /// cluster: the usual kubeconfig resolution, or --kubeconfig).
    Drift(Box<DriftArgs>),
    /// Show what the running injectors publish (who, when, which revisions; replicas that
    /// disagree), who holds the rollout Lease, and every campaign with its counts and notes.
    Status(StatusArgs),
    /// Restart the workloads whose pods run a stale sidecar, once: a dry-run plan by default,
    /// --confirm to act and wait until done (exit status 1 when any workload failed).
    Rollout(Box<RolloutArgs>),
    /// Explain a pod or a workload (`deploy/NAME`, `sts/NAME`, `ds/NAME`, `job/NAME`,
    /// `cronjob/NAME`): why it was or was not injected (annotation, namespace, request,
    /// configs and revisions, clashes, policy), the drift state of each sidecar it asks for,
    /// and what the rollout engine plans for the workload and when. `-f` judges a manifest's
    /// pods and pod templates against the configs `inject` reads.
    Explain(Box<ExplainArgs>),
    /// Prove the injector works: ask the API server to create a pod that requests sidecars,
    /// as a server-side dry run (every webhook and admission policy runs; nothing is created),
    /// and say whether each was injected, with its revision; exit status 1 when one was not.
    /// The chart's `helm test` runs it.
    Check(CheckArgs),
    /// Print a shell completion script generated from these commands' definitions, e.g.
    /// `source <(sidecar-injector completion bash)`.
    Completion(CompletionArgs),
    /// Print the man page (roff) generated from these commands' definitions, or with --dir
    /// write one page per command there (`sidecar-injector.1`, `sidecar-injector-serve.1`...).
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// What to explain, read from the cluster (in -n): a pod (`NAME` or `pod/NAME`), a
    /// workload (`deployment/NAME`, `statefulset/NAME`, `daemonset/NAME`; `deploy`, `sts`,
    /// `ds` for short), or a `job/NAME` or `cronjob/NAME` (`cj`): its template, its pods'
    /// states, the first in the worst state.
    #[arg(
        value_name = "POD|KIND/NAME",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    pub(crate) pod: Option<String>,
    /// A manifest instead (`-` for standard input): each Pod and object with a pod template
    /// it holds (every document, each item of a List), judged against the configs `inject`
    /// reads: the config directory, offline, or outside a checkout (or with
    /// --configmap-labels) the sidecar ConfigMaps the cluster's injector serves.
    #[arg(short = 'f', long = "filename")]
    pub(crate) file: Option<String>,
    /// The namespace of the pod or workload [default: the kubeconfig context's, or the
    /// manifest's].
    #[arg(short = 'n', long = "namespace")]
    pub(crate) namespace: Option<String>,
    /// What the webhook does when a requested sidecar does not exist (as `serve` runs).
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(MissingSidecarPolicy::Deny))]
    pub(crate) on_missing_sidecar: crate::cli::args::values::Flag<MissingSidecarPolicy>,
    #[command(flatten)]
    pub(crate) cluster: OneShotArgs,
    #[command(flatten)]
    pub(crate) foreign: ForeignSidecarArgs,
    /// The engine's limits the plan is made with (as `rollout` takes them: pass those your
    /// `serve --rollout=auto` runs with).
    #[command(flatten)]
    pub(crate) safety: RolloutSafetyArgs,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write every page into this directory (created if missing) instead of printing the
    /// top-level page.
    #[arg(long, conflicts_with = "markdown")]
    pub(crate) dir: Option<PathBuf>,
    /// Print the reference of every command and flag as Markdown (docs/flags.md) instead.
    #[arg(long)]
    pub(crate) markdown: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    #[default]
    Table,
    Json,
    Yaml,
}

impl OutputFormat {
    /// The value as this format's document (ending in a newline), or `None` for the table,
    /// which each command draws its own way. YAML is the JSON document's data, as
    /// `kubectl -o yaml` is.
    pub(crate) fn document(self, value: &impl serde::Serialize) -> anyhow::Result<Option<String>> {
        Ok(match self {
            OutputFormat::Table => None,
            OutputFormat::Json => Some(serde_json::to_string_pretty(value)? + "\n"),
            OutputFormat::Yaml => Some(serde_yaml::to_string(value)?),
        })
    }
}

/// The ConfigMap config source, for `serve` and for `drift`, which reads configs as `serve` does.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sidecar configs")]
pub(crate) struct ConfigMapArgs {
    /// Namespace of the sidecar ConfigMaps [default: the injector's own namespace
    /// (--injector-namespace)].
    #[arg(long, env = "CONFIGMAP_NAMESPACE")]
    pub(crate) configmap_namespace: Option<String>,
    /// Label selector (k=v[,k=v]) of ConfigMaps holding sidecar configs; turns that source on
    /// (`drift`, `rollout`, `explain` and `inject` run where config/ is not read deploy/'s:
    /// sidecar-injector.io/config=true).
    #[arg(long, env = "CONFIGMAP_LABELS")]
    pub(crate) configmap_labels: Option<String>,
}

/// Namespaces whose pods are never injected (nor restarted), the same for every command.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sidecar configs")]
pub(crate) struct IgnoredNamespaceArgs {
    /// A namespace whose pods are never injected, added to kube-system and kube-public
    /// (repeatable). An empty value (`--ignore-namespace=`) clears those defaults.
    #[arg(long = "ignore-namespace", value_name = "NAMESPACE")]
    pub(crate) ignore_namespaces: Vec<String>,
}

impl IgnoredNamespaceArgs {
    /// The defaults plus every namespace given; none of the defaults after an empty value.
    pub(crate) fn namespaces(&self) -> BTreeSet<String> {
        let clear = self.ignore_namespaces.iter().any(|n| n.trim().is_empty());
        let defaults = DEFAULT_IGNORED_NAMESPACES
            .iter()
            .filter(|_| !clear)
            .map(|n| (*n).to_owned());
        defaults
            .chain(
                self.ignore_namespaces
                    .iter()
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty()),
            )
            .collect()
    }
}

/// What the one-shot commands (`drift`, `rollout`) read from the cluster and how they print it:
/// one group, so the two commands cannot drift apart.
#[derive(Debug, Args)]
pub(crate) struct OneShotArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) output: OutputFormat,
    #[command(flatten)]
    pub(crate) configs: ConfigDirectoryArgs,
    /// Prefix of every annotation key.
    #[arg(long, visible_alias = "annotation-prefix", env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE, help_heading = "Sidecar configs")]
    pub(crate) annotation_namespace: String,
    #[command(flatten)]
    pub(crate) configmaps: ConfigMapArgs,
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,
    #[command(flatten)]
    pub(crate) drift: DriftPolicyArgs,
    #[command(flatten)]
    pub(crate) ignore_namespaces: IgnoredNamespaceArgs,
    /// Namespace of the running injector: its status ConfigMap (when present) gives the
    /// revisions in force, and `rollout` checks its Lease.
    #[arg(
        long,
        default_value = "injector-system",
        help_heading = "The injector in the cluster"
    )]
    pub(crate) injector_namespace: String,
    /// Which revisions pods are judged by: `auto` takes what the running injectors publish
    /// when it is fresh and they agree, else the configs read here.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(crate::cluster::status::RevisionsSource::Auto), help_heading = "The injector in the cluster")]
    pub(crate) revisions_from:
        crate::cli::args::values::Flag<crate::cluster::status::RevisionsSource>,
    /// A publication older than this is stale (the injectors renew theirs every 30s).
    #[arg(long, default_value = DEFAULT_PUBLISHED_MAX_AGE, value_parser = humantime::parse_duration, help_heading = "The injector in the cluster")]
    pub(crate) published_max_age: Duration,
    /// The MutatingWebhookConfiguration that calls the injector: pods of namespaces its
    /// namespaceSelector leaves out are never injected, so they count as excluded, not
    /// uninjected (when it cannot be read, every namespace counts as reached; "" not to read it).
    #[arg(
        long,
        default_value = "sidecar-injector",
        help_heading = "The injector in the cluster"
    )]
    pub(crate) webhook_configuration: String,
}

impl OneShotArgs {
    /// The webhook configuration to read, unless turned off.
    pub(crate) fn webhook_configuration(&self) -> Option<String> {
        Some(self.webhook_configuration.clone()).filter(|name| !name.is_empty())
    }
}

#[derive(Debug, Args)]
pub(crate) struct RolloutArgs {
    /// Act: restart the planned workloads and wait until they are done (`--confirm=false` only
    /// plans).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub(crate) confirm: bool,
    /// Only plan (the default; what everyone types).
    #[arg(long, conflicts_with = "confirm")]
    pub(crate) dry_run: bool,
    /// Text put before the engine's reason in `NS/rollout-reason` and the change-cause.
    #[arg(long)]
    pub(crate) rollout_reason: Option<String>,
    /// Gone: the CLI never acts beside a live `serve --rollout=auto`. Kept so that a script
    /// passing it gets a message saying what to do instead.
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) cluster: OneShotArgs,
    #[command(flatten)]
    pub(crate) foreign: ForeignSidecarArgs,
    #[command(flatten)]
    pub(crate) safety: RolloutSafetyArgs,
    /// Only these namespaces, as kubectl's -n (repeatable; the same as --include-namespace):
    /// planned, listed and restarted in them alone.
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NAMESPACE",
        help_heading = "Selection"
    )]
    pub(crate) namespaces: Vec<String>,
    /// Resume the paused campaigns (earlier failures stop counting): written into the status
    /// ConfigMap, where the Lease holder (`serve --rollout=auto`) acts on it; with no such
    /// holder, `--confirm` acts here.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set, help_heading = "Campaign book")]
    pub(crate) resume: bool,
    /// Roll back or forward to a remembered revision: `SIDECAR=REVISION` from its history
    /// (the sidecar-injector-history ConfigMap lists them; an unknown one is refused with the
    /// list), or `SIDECAR=previous`
    /// (the newest before the one in force that did not fail). Pinned in the status
    /// ConfigMap: every replica injects it and the engine rolls it out even though the config
    /// says otherwise, until the config changes or --unpin.
    #[arg(long, value_name = "SIDECAR=REVISION", conflicts_with_all = ["resume", "unpin", "release_hold"], help_heading = "Campaign book")]
    pub(crate) to: Option<String>,
    /// Ends the pin of this sidecar (`rollout --to`): its config's revision is served and
    /// rolled out again.
    #[arg(long, value_name = "SIDECAR", conflicts_with_all = ["resume", "release_hold"], help_heading = "Campaign book")]
    pub(crate) unpin: Option<String>,
    /// Ends the hold of this sidecar's paused campaign: new pods get the revision that failed
    /// again (the campaign stays paused).
    #[arg(
        long,
        value_name = "SIDECAR",
        conflicts_with = "resume",
        help_heading = "Campaign book"
    )]
    pub(crate) release_hold: Option<String>,
    /// Promotes a revision waiting under `serve --promotion=gated`: `SIDECAR` (the revision
    /// its campaign waits with) or `SIDECAR=REVISION` (also one not arrived yet, which then
    /// starts at once). Written into the status ConfigMap; the Lease holder starts its
    /// campaign.
    #[arg(long, value_name = "SIDECAR[=REVISION]", conflicts_with_all = ["resume", "unpin", "release_hold", "to"], help_heading = "Campaign book")]
    pub(crate) promote: Option<String>,
    /// With --promote: promote it across clusters, wave after wave (repeatable; a wave is
    /// kubeconfig contexts, comma-separated): `--wave staging --wave prod-eu,prod-us`. Each
    /// wave's clusters are promoted and watched until their campaigns are complete and baked
    /// (--wave-bake) before the next wave starts; a failure in any cluster stops the fleet
    /// with nothing further promoted. State lives in the clusters: run it again to go on.
    #[arg(
        long,
        value_name = "CONTEXT[,CONTEXT...]",
        requires = "promote",
        conflicts_with = "confirm",
        help_heading = "Fleet waves"
    )]
    pub(crate) wave: Vec<String>,
    /// With --wave: how long a cluster's campaign must have been complete before the next
    /// wave starts.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, requires = "wave", help_heading = "Fleet waves")]
    pub(crate) wave_bake: Duration,
    /// With --wave: how long one wave may take, from its start to baked; past it the command
    /// stops (exit status 3) and promotes nothing further.
    #[arg(long, default_value = "2h", value_parser = humantime::parse_duration, requires = "wave", help_heading = "Fleet waves")]
    pub(crate) wave_timeout: Duration,
    /// Include StatefulSets.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set, help_heading = "Selection")]
    pub(crate) include_statefulset: bool,
    /// Include DaemonSets.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set, help_heading = "Selection")]
    pub(crate) include_daemonset: bool,
    /// Leave Deployments out.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set, help_heading = "Selection")]
    pub(crate) exclude_deployment: bool,
    /// Select by container name instead of by revision, for sidecars another system injected
    /// (repeatable, or comma-separated): restart the workloads whose pods run a container of
    /// that name. Lists pod specs once.
    #[arg(long, value_delimiter = ',', help_heading = "Selection")]
    pub(crate) sidecar_container_name: Vec<String>,
    /// With --sidecar-container-name: only pods started before this time, RFC 3339 or
    /// `2022-05-01 13:00` (UTC) [default: when the command starts].
    #[arg(long, requires = "sidecar_container_name", value_name = "TIME", value_parser = values::parse_started_before, help_heading = "Selection")]
    pub(crate) only_started_before: Option<k8s_openapi::jiff::Timestamp>,
}

/// How a one-shot command reaches the cluster, as kubectl does.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Cluster connection")]
pub(crate) struct ConnectionArgs {
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or the in-cluster configuration].
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use, as kubectl's --context (`drift` and `status`:
    /// repeatable, one report across those clusters).
    #[arg(long, value_name = "CONTEXT")]
    pub(crate) context: Vec<String>,
    #[command(flatten)]
    pub(crate) rate: KubeApiRateArgs,
}

/// The client-side limit on requests to the API server, as kube-controller-manager's flags of
/// the same names.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Cluster connection")]
pub(crate) struct KubeApiRateArgs {
    /// Requests a second to the Kubernetes API server, at most, after the burst (0: no limit).
    #[arg(long, default_value_t = RateLimit::DEFAULT.qps, value_parser = parse_qps)]
    pub(crate) kube_api_qps: f64,
    /// Requests to the Kubernetes API server that may go at once after a quiet spell.
    #[arg(long, default_value_t = RateLimit::DEFAULT.burst, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kube_api_burst: u32,
}

impl KubeApiRateArgs {
    pub(crate) fn limit(&self) -> RateLimit {
        RateLimit {
            qps: self.kube_api_qps,
            burst: self.kube_api_burst,
        }
    }
}

impl Default for KubeApiRateArgs {
    fn default() -> Self {
        Self {
            kube_api_qps: RateLimit::DEFAULT.qps,
            kube_api_burst: RateLimit::DEFAULT.burst,
        }
    }
}

fn parse_qps(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(qps) if qps.is_finite() && qps >= 0.0 => Ok(qps),
        _ => Err(format!(
            "expected a number of requests a second, 0 or more (0: no limit), found {text:?}"
        )),
    }
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Namespace of the running injector (its status ConfigMap and rollout Lease).
    #[arg(long, default_value = "injector-system")]
    pub(crate) injector_namespace: String,
    /// A publication older than this is stale (the injectors renew theirs every 30s).
    #[arg(long, default_value = DEFAULT_PUBLISHED_MAX_AGE, value_parser = humantime::parse_duration)]
    pub(crate) published_max_age: Duration,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) output: OutputFormat,
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
}

#[derive(Debug, Args)]
pub(crate) struct DriftArgs {
    /// Only these namespaces, listed in them alone (repeatable): what a user whose rights stop
    /// at some namespaces can run.
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    pub(crate) namespaces: Vec<String>,
    /// Every namespace (the default).
    #[arg(short = 'A', long)]
    pub(crate) all_namespaces: bool,
    /// Only these sidecars (repeatable; `logger` means `logger:latest`).
    #[arg(long = "sidecar", value_name = "NAME")]
    pub(crate) sidecars: Vec<String>,
    /// Only workloads in these states (repeatable): excluded, orphaned, uninjected, unknown,
    /// stale, current.
    #[arg(long = "state", value_name = "STATE")]
    pub(crate) states: Vec<crate::drift::DriftState>,
    #[command(flatten)]
    pub(crate) foreign: ForeignSidecarArgs,
    /// Exit with status 1 when a listed workload is stale or uninjected (for CI and cron;
    /// across several clusters, 4 when one could not be read as well).
    #[arg(long)]
    pub(crate) exit_code: bool,
    #[command(flatten)]
    pub(crate) cluster: OneShotArgs,
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
}

/// Sidecars other injectors add (`drift`, `explain`).
#[derive(Debug, Args)]
pub(crate) struct ForeignSidecarArgs {
    /// Sidecars other injectors add, by container name (repeatable or comma-separated:
    /// `istio-proxy`, `linkerd-proxy`, `vault-agent`): each workload whose pods run one is
    /// compared with what a dry-run create of its template gets now (needs `create` on pods).
    #[arg(
        long = "foreign-sidecar",
        value_name = "CONTAINER",
        value_delimiter = ',',
        env = "FOREIGN_SIDECARS",
        help_heading = "Other injectors"
    )]
    pub(crate) foreign_sidecars: Vec<String>,
}

impl ForeignSidecarArgs {
    /// The names given, checked; empty when none was.
    pub(crate) fn names(&self) -> anyhow::Result<crate::foreign::ForeignSidecars> {
        crate::foreign::ForeignSidecars::new(&self.foreign_sidecars)
            .map_err(|err| anyhow::anyhow!("--foreign-sidecar: {err}"))
    }
}

/// Several clusters in one report (`drift`, `status`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Fleet")]
pub(crate) struct FleetArgs {
    /// Every context of the kubeconfig: one report across their clusters, as --context given
    /// for each.
    #[arg(long, conflicts_with = "context")]
    pub(crate) all_contexts: bool,
    /// Across several clusters: how long each may take to be read; one that takes longer is
    /// reported as not read.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) cluster_timeout: Duration,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Sidecar configs")]
pub(crate) struct ConfigDirectoryArgs {
    /// Directory of sidecar configs (*.yaml, *.yml).
    #[arg(long, env = "CONFIG_DIR", default_value = DEFAULT_CONFIG_DIRECTORY)]
    pub(crate) config_directory: PathBuf,
}

/// Where configs are read from unless told otherwise (Tumblr's image uses /conf via CONFIG_DIR).
pub(crate) const DEFAULT_CONFIG_DIRECTORY: &str = "config/";

/// How old a publication may be and still count (`--published-max-age`): three of the
/// replicas' 30s renewals, so one missed renewal does not make it stale.
pub(crate) const DEFAULT_PUBLISHED_MAX_AGE: &str = "90s";

/// The label of the sidecar ConfigMaps deploy/ installs and its injector serves: what the
/// one-shot commands read when the default directory is not where they run.
pub(crate) const DEPLOYED_CONFIGMAP_LABELS: &str = "sidecar-injector.io/config=true";

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The sidecars the pod requests, as its annotation would (`logger:v1,tracer:v2`).
    #[arg(long, value_name = "NAME:VERSION,...")]
    pub(crate) request: String,
    /// The namespace the pod would be created in; injection must reach it (not the injector's
    /// own) [default: the kubeconfig context's].
    #[arg(short = 'n', long = "namespace")]
    pub(crate) namespace: Option<String>,
    /// Ask again until the sidecars are injected or this much time has passed (a replica
    /// still starting): `0s` asks once.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub(crate) wait: Duration,
    /// Prefix of every annotation key (a Tumblr deployment passes injector.tumblr.com).
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub(crate) annotation_namespace: String,
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,
}

#[derive(Debug, Args)]
pub(crate) struct InjectArgs {
    /// Prefix of every annotation key (a Tumblr deployment passes injector.tumblr.com).
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub(crate) annotation_namespace: String,
    /// What to do when a requested sidecar does not exist.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(MissingSidecarPolicy::Deny))]
    pub(crate) on_missing_sidecar: crate::cli::args::values::Flag<MissingSidecarPolicy>,
    /// Manifest to read (YAML or JSON, several documents allowed); `-` for standard input.
    #[arg(short = 'f', long = "filename")]
    pub(crate) file: String,
    #[command(flatten)]
    pub(crate) source: ManifestConfigsArgs,
    #[command(flatten)]
    pub(crate) ignore_namespaces: IgnoredNamespaceArgs,
}

/// Where `inject` and `policy` read the configs: the config directory offline, or the
/// cluster's sidecar ConfigMaps as its running webhook serves them.
#[derive(Debug, Args)]
pub(crate) struct ManifestConfigsArgs {
    /// Namespace of the running injector: where deploy/'s sidecar ConfigMaps are, and its
    /// status ConfigMap, whose pins and holds the webhook serves.
    #[arg(long, default_value = "injector-system")]
    pub(crate) injector_namespace: String,
    /// With the cluster's configs: the running injectors' publications renewed within this
    /// say what the webhook injects, and a sidecar read here at another revision is warned of.
    #[arg(long, default_value = DEFAULT_PUBLISHED_MAX_AGE, value_parser = humantime::parse_duration)]
    pub(crate) published_max_age: Duration,
    #[command(flatten)]
    pub(crate) configs: ConfigDirectoryArgs,
    // The cluster's ConfigMaps so labelled, as `serve` reads them; also read, with deploy/'s
    // label, where there is no config/ directory.
    #[command(flatten)]
    pub(crate) configmaps: ConfigMapArgs,
    // Reached only when the configs come from the cluster.
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// Prefix of every annotation key.
    #[arg(long, env = "ANNOTATION_NAMESPACE", default_value = DEFAULT_ANNOTATION_NAMESPACE)]
    pub(crate) annotation_namespace: String,
    /// What to do when a requested sidecar does not exist: deny the pod, or inject the rest.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(MissingSidecarPolicy::Deny))]
    pub(crate) on_missing_sidecar: crate::cli::args::values::Flag<MissingSidecarPolicy>,
    /// The name of the policies and their bindings.
    #[arg(long, default_value = "sidecar-injector")]
    pub(crate) name: String,
    /// The namespaces the bindings reach, a label selector as kubectl spells it
    /// (`sidecar-injector.io/injection!=disabled`); the ignored namespaces are left out too.
    #[arg(long, value_parser = values::parse_label_selector)]
    pub(crate) namespace_selector:
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// Output format: YAML documents, or a JSON List.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ManifestFormat::Yaml)]
    pub(crate) output: ManifestFormat,
    #[command(flatten)]
    pub(crate) source: ManifestConfigsArgs,
    #[command(flatten)]
    pub(crate) ignore_namespaces: IgnoredNamespaceArgs,
}

/// How a command prints Kubernetes objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ManifestFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Config files or directories to check (`-`: standard input); the config directory when
    /// none is given. A file holding ConfigMaps (`kubectl get configmaps -o yaml`) is checked
    /// item by item, as the ConfigMap source reads it.
    pub(crate) paths: Vec<PathBuf>,
    #[command(flatten)]
    pub(crate) configs: ConfigDirectoryArgs,
}

/// What the process learns from its environment beyond the flags, read once at start.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessEnv {
    /// `POD_NAME` (the downward API): the Lease identity and the Events' instance.
    pub(crate) pod_name: Option<String>,
    /// `KUBERNETES_SERVICE_HOST` is set: `serve` uses the in-cluster configuration.
    pub(crate) in_cluster: bool,
}

impl ProcessEnv {
    pub(crate) fn read() -> Self {
        Self {
            pod_name: std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()),
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        }
    }

    /// Who this process is, on a Lease or a publication: the pod's name in a cluster, else
    /// host and process id.
    pub(crate) fn identity(&self) -> String {
        let host = self
            .pod_name
            .clone()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .unwrap_or_else(|| "sidecar-injector".into());
        format!("{}-{}", host.trim(), std::process::id())
    }
}

#[cfg(test)]
mod tests;
