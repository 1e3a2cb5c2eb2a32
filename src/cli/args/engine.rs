//! The flags of what drift counts and how the rollout engine paces and guards its restarts,
//! shared by `serve`, `drift` and `rollout`.

use super::*;

/// What drift counts as restartable and where it looks, the same for `serve` and `drift`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Drift")]
pub(crate) struct DriftPolicyArgs {
    /// Drift: only these namespaces (repeatable).
    #[arg(long = "include-namespace")]
    pub(crate) include_namespaces: Vec<String>,
    /// Drift: not these namespaces (repeatable).
    #[arg(long = "exclude-namespace")]
    pub(crate) exclude_namespaces: Vec<String>,
    /// Drift: treat bare pods as restartable instead of excluded.
    #[arg(long)]
    pub(crate) evict_bare_pods: bool,
    /// Drift: treat pods injected without a revision as restartable.
    #[arg(long)]
    pub(crate) restart_unknown: bool,
}

impl DriftPolicyArgs {
    /// The policy, with `ignored` the namespaces never injected.
    pub(crate) fn policy(&self, ignored: BTreeSet<String>) -> crate::drift::DriftPolicy {
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
#[command(next_help_heading = "Rollout safety")]
pub(crate) struct RolloutSafetyArgs {
    /// Workloads rolling at once.
    #[arg(long, visible_alias = "parallel-rollouts", default_value_t = 5)]
    pub(crate) max_parallel: usize,
    /// Restarts started in any minute.
    #[arg(long, default_value_t = 30)]
    pub(crate) max_restarts_per_minute: usize,
    /// A workload is not restarted again within this time of its last restart.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub(crate) cooldown: Duration,
    /// Workloads in the canary wave, which must become healthy before the rest.
    #[arg(long, default_value_t = 1)]
    pub(crate) canary: usize,
    /// Failed or timed-out workloads after which a sidecar's campaign pauses.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_failures: u32,
    /// How long a restarted workload may take to roll out (kubectl's rollout-status rule).
    #[arg(long, visible_alias = "timeout", default_value = "5m", value_parser = humantime::parse_duration)]
    pub(crate) rollout_timeout: Duration,
    /// Workloads rolling at once in any one namespace (0: only --max-parallel applies).
    #[arg(long, default_value_t = 0)]
    pub(crate) max_parallel_per_namespace: usize,
    /// Namespaces whose workloads are restarted first, so that the canary comes from them
    /// (repeatable; e.g. staging).
    #[arg(long = "canary-namespace")]
    pub(crate) canary_namespaces: Vec<String>,
    /// Restart workloads whose restart means downtime (a Recreate Deployment, or one replica
    /// with maxUnavailable >= 1); without it they wait, with the reason. Per workload:
    /// NS/allow-downtime: "true".
    #[arg(long)]
    pub(crate) allow_downtime: bool,
    /// After a restarted workload rolled out, how long it must stay healthy to succeed: its
    /// health dropping meanwhile, or a container of its pods restarted, crash-looping or
    /// OOM-killed when they are read at the end, fails the restart (and so stops a campaign
    /// at its canary). 0s: no bake.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) bake: Duration,
    /// How workloads are restarted: `template` stamps the pod template (the controller rolls
    /// it); `evict` evicts the stale pods one at a time within PodDisruptionBudgets, never
    /// writing the template (for GitOps-managed workloads). Per workload:
    /// NS/restart-method. A template stamp found reverted switches that workload to `evict`.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(crate::workload::RestartMethod::Template))]
    pub(crate) restart_method: crate::cli::args::values::Flag<crate::workload::RestartMethod>,
    /// How long a PodDisruptionBudget may refuse to let a pod go before that is reported (a
    /// warning and a Warning Event on the workload; retries then slow to every 30s). Never
    /// forced either way.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub(crate) eviction_timeout: Duration,
    /// Restarts start only inside these windows (repeatable, or `;`-separated):
    /// `[DAYS] HH:MM-HH:MM [ZONE]`, e.g. `Sat-Sun 00:00-04:00` or
    /// `Mon-Fri 22:00-06:00 Europe/Oslo` (days every day and the zone UTC when left out; a
    /// span past midnight belongs to the day it starts). A restart in progress is never cut
    /// off. Per workload: NS/maintenance-window, which replaces these.
    #[arg(
        long = "maintenance-window",
        env = "MAINTENANCE_WINDOW",
        value_delimiter = ';'
    )]
    pub(crate) maintenance_windows: Vec<crate::maintenance::MaintenanceWindow>,
    /// What new pods get while a sidecar's campaign is paused on failures: `hold` gives them
    /// the sidecar's last good revision (from its revision history) until the campaign
    /// resumes, the config changes or `rollout --release-hold`; `continue` gives them the
    /// revision that failed.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(crate::rollout::OnCampaignFailure::Hold))]
    pub(crate) on_campaign_failure:
        crate::cli::args::values::Flag<crate::rollout::OnCampaignFailure>,
    /// A revision served this long with no failure of its campaign counts as good (as does one
    /// whose campaign completed): what a hold falls back to.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub(crate) good_after: Duration,
    /// Revisions remembered per sidecar in the sidecar-injector-history ConfigMap.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub(crate) history_limit: u16,
    /// `auto`: when a new revision changes only the images of a sidecar's injected containers,
    /// patch them in the live pods (one pod of a workload at a time, within its maxUnavailable
    /// and PodDisruptionBudgets; the kubelet restarts just those containers) instead of
    /// restarting the workload; `off`: always restart. Per sidecar: `rollout: {inPlace: false}`.
    #[arg(long, value_enum, default_value_t = crate::cli::args::values::Flag(crate::rollout::in_place::InPlaceMode::Auto))]
    pub(crate) in_place: crate::cli::args::values::Flag<crate::rollout::in_place::InPlaceMode>,
    /// Prometheus's URL (its root), against which the bakes' metric checks (a sidecar
    /// config's `rollout.checks`) are evaluated. Without it a check has no value, and follows
    /// its `whenUnknown` (by default the bake waits, and says why).
    #[arg(long, value_parser = crate::prometheus::parse_prometheus_url)]
    pub(crate) prometheus_url: Option<http::Uri>,
    /// How long one metric check's query may take before it counts as unknown.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) prometheus_timeout: Duration,
}

impl RolloutSafetyArgs {
    /// The Prometheus the metric checks ask, when there is one.
    pub(crate) fn prometheus(&self) -> Option<crate::prometheus::Prometheus> {
        self.prometheus_url
            .as_ref()
            .map(|url| crate::prometheus::Prometheus::new(url, self.prometheus_timeout))
    }

    pub(crate) fn settings(&self, settle: Duration) -> crate::rollout::RolloutSettings {
        crate::rollout::RolloutSettings {
            max_parallel: self.max_parallel,
            max_restarts_per_minute: self.max_restarts_per_minute,
            cooldown: self.cooldown,
            canary: self.canary,
            max_failures: self.max_failures as usize,
            rollout_timeout: self.rollout_timeout,
            settle,
            max_parallel_per_namespace: self.max_parallel_per_namespace,
            canary_namespaces: self.canary_namespaces.iter().cloned().collect(),
            allow_downtime: self.allow_downtime,
            eviction_timeout: self.eviction_timeout,
            restart_method: self.restart_method.0,
            bake: self.bake,
            maintenance_windows: crate::maintenance::MaintenanceWindows::new(
                self.maintenance_windows.clone(),
            ),
            on_campaign_failure: self.on_campaign_failure.0,
            good_after: self.good_after,
            history_limit: usize::from(self.history_limit),
            in_place: self.in_place.0,
            ..Default::default()
        }
    }
}

/// What a one-shot command plans for, the only way its engine options differ.
pub(crate) enum Purpose<'a> {
    /// `explain`: the plan `serve`'s engine would make now (manual sidecars wait for a
    /// person), over every kind it restarts.
    Explain,
    /// `rollout`: the operator's own run, over the kinds its flags name.
    Rollout(&'a RolloutArgs),
}

/// The engine options of `explain` and `rollout`, in one place: no settle window (the
/// operator asked now), the drift policy of the command's flags, and what `purpose` changes.
pub(crate) fn engine_options(
    cluster: &OneShotArgs,
    safety: &RolloutSafetyArgs,
    purpose: &Purpose<'_>,
) -> crate::engine::EngineOptions {
    use crate::workload::WorkloadKind;
    let mut policy = cluster.drift.policy(cluster.ignore_namespaces.namespaces());
    let mut kinds: std::collections::BTreeSet<WorkloadKind> = match purpose {
        Purpose::Explain => [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
        ]
        .into(),
        Purpose::Rollout(args) => {
            policy
                .include_namespaces
                .extend(args.namespaces.iter().cloned());
            [
                (!args.exclude_deployment).then_some(WorkloadKind::Deployment),
                args.include_statefulset
                    .then_some(WorkloadKind::StatefulSet),
                args.include_daemonset.then_some(WorkloadKind::DaemonSet),
            ]
            .into_iter()
            .flatten()
            .collect()
        }
    };
    if cluster.drift.evict_bare_pods {
        kinds.insert(WorkloadKind::Pod);
    }
    let confirm = matches!(purpose, Purpose::Rollout(args) if args.confirm);
    crate::engine::EngineOptions {
        mode: if confirm {
            crate::engine::EngineMode::Auto
        } else {
            crate::engine::EngineMode::DryRun
        },
        settings: safety.settings(std::time::Duration::ZERO),
        keys: crate::annotations::AnnotationKeys::new(&cluster.annotation_namespace),
        policy,
        namespace: cluster.injector_namespace.clone(),
        replan_every: crate::engine::LOOP_SAFETY_NET,
        // `rollout` is the person a manual policy waits for.
        ignore_manual_policy: matches!(purpose, Purpose::Rollout(_)),
        kinds: Some(kinds),
        reason_prefix: match purpose {
            Purpose::Explain => None,
            Purpose::Rollout(args) => args.rollout_reason.clone(),
        },
        prometheus: safety.prometheus(),
    }
}
