//! What the one-shot commands (`drift`, `rollout`) share: the cluster connection, the configs
//! as `serve` would load them, and the revisions in force.

use std::path::Path;

use anyhow::Context;

use super::args::*;
use crate::cluster::client::counted_client;
use crate::cluster::status::InjectorState;
use crate::config::{LoadReport, SidecarSet};
use crate::sources::directory::load_config_directory;
use crate::telemetry::notice;
use tracing::Level;

/// The longest the one-shot loop waits with nothing due.
pub(crate) const LOOP_SAFETY_NET: std::time::Duration = std::time::Duration::from_secs(60);

/// The status ConfigMap of `state`, when there is one. Refused (a user whose rights stop at
/// a team's namespaces), the error says who can grant it and how.
pub(crate) fn status_of(
    state: &InjectorState,
) -> anyhow::Result<Option<&k8s_openapi::api::core::v1::ConfigMap>> {
    state.status().map_err(|err| {
        let refused = err.refused();
        let err = anyhow::Error::new(err);
        if refused {
            err.context(StatusRefused)
        } else {
            err
        }
    })
}

/// The status ConfigMap was refused: what it is for, and how a platform admin lets every user
/// read it.
#[derive(Debug, thiserror::Error)]
#[error(
    "the injector's status ConfigMap, which says the revisions in force and the campaigns, is refused to you: a platform admin can let every user read it (deploy/components/status-readers), or `drift --revisions-from configs` judges by configs you can read (--config-directory)"
)]
pub(crate) struct StatusRefused;

/// Whether `err` is [`status_of`] refused.
pub(crate) fn status_refused(err: &anyhow::Error) -> bool {
    err.downcast_ref::<StatusRefused>().is_some()
}

/// Each running injector's publication in `state`; unread or malformed, an error.
pub(crate) fn injectors_of(
    state: &InjectorState,
) -> anyhow::Result<&std::collections::BTreeMap<String, crate::cluster::status::Publication>> {
    status_of(state)?;
    Ok(state.injectors()?)
}

/// The campaign book of `state` (empty: none yet); unread or malformed, an error.
pub(crate) fn book_of(state: &InjectorState) -> anyhow::Result<crate::rollout::CampaignBook> {
    status_of(state)?;
    Ok(state.book()?.clone())
}

/// The revisions pods are judged and restarted by, under the `--revisions-from` rule: what
/// the running injectors publish (`injectors`) when fresh and in agreement (what new pods
/// actually get: that publication, its manual sidecars too), else the configs read here
/// (`None`). Says on stderr, in one line, which and why.
pub(crate) fn revisions_in_force(
    injectors: &std::collections::BTreeMap<String, crate::cluster::status::Publication>,
    args: &OneShotArgs,
    configs: &ConfigsUnread,
) -> anyhow::Result<Option<crate::cluster::status::Publication>> {
    use crate::cluster::status::{self, RevisionsChoice};
    let choice = status::choose_revisions(
        injectors,
        args.revisions_from.0,
        k8s_openapi::jiff::Timestamp::now(),
        args.published_max_age,
        configs.here(),
    );
    // The flag that chose, or that would choose otherwise.
    let asked = match args.revisions_from.0 {
        status::RevisionsSource::Auto => "",
        status::RevisionsSource::Published => " (--revisions-from=published)",
        status::RevisionsSource::Configs => " (--revisions-from=configs)",
    };
    Ok(match choice {
        RevisionsChoice::Published { publication, why } => {
            notice(
                Level::INFO,
                &format!("{why}{asked}"),
                &[("revisions_from", "published")],
            );
            Some(publication)
        }
        RevisionsChoice::Configs { why, over_stale } => {
            let instead = if over_stale {
                " (--revisions-from=published to use it anyway)"
            } else {
                asked
            };
            notice(
                Level::INFO,
                &format!("{why}{instead}"),
                &[("revisions_from", "configs")],
            );
            None
        }
        RevisionsChoice::Neither { why } => anyhow::bail!(
            "there is nothing to judge the pods by: {why}{asked}, and the sidecar configs cannot be read here ({}); every pod would read as orphaned",
            configs.0.as_deref().unwrap_or_default()
        ),
    })
}

/// Why the sidecar configs could not be read here (`None`: they were, even if there are none).
#[derive(Clone, Debug, Default)]
pub(crate) struct ConfigsUnread(pub Option<String>);

impl ConfigsUnread {
    fn here(&self) -> crate::cluster::status::ConfigsHere {
        match self.0 {
            Some(_) => crate::cluster::status::ConfigsHere::Unreadable,
            None => crate::cluster::status::ConfigsHere::Read,
        }
    }
}

/// How long the cluster may take to be listed by a one-shot command.
const SYNC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// The drift feed (pods, ReplicaSets, workloads), once the cluster has been listed. A list
/// the API server refuses ends the wait at once ([`ClusterListRefused`]): no retry mends it.
pub(crate) async fn synced_feed(
    client: &kube::Client,
    keys: crate::annotations::AnnotationKeys,
    webhook_configuration: Option<String>,
) -> anyhow::Result<crate::cluster::drift_feed::DriftFeed> {
    let feed = crate::cluster::drift_feed::start(
        client.clone(),
        keys,
        webhook_configuration.map(crate::cluster::drift_feed::Reach::WebhookConfiguration),
    );
    let (mut synced, mut refused) = (feed.synced.clone(), feed.refused.clone());
    let listed = async {
        tokio::select! {
            synced = synced.wait_for(|s| *s) => synced.map(|_| None),
            refused = refused.wait_for(Option::is_some) => refused.map(|r| r.clone()),
        }
    };
    let refusal = tokio::time::timeout(SYNC_DEADLINE, listed)
        .await
        .context("the cluster was not listed in time")?
        .context("the watches stopped")?;
    match refusal {
        Some(refusal) => Err(anyhow::Error::new(ClusterListRefused(refusal))),
        None => Ok(feed),
    }
}

/// Listing the cluster's pods, ReplicaSets or workloads, which planning a rollout needs
/// across every namespace, is refused (a user whose rights stop at a team's namespaces).
#[derive(Debug, thiserror::Error)]
#[error(
    "the rollout plan needs the pods, ReplicaSets and workloads of every namespace, and listing them is refused to you: {0}"
)]
pub(crate) struct ClusterListRefused(pub String);

/// What every one-shot command starts from: the cluster, the annotation keys, and the
/// configs as `serve` would load them.
pub(crate) struct OneShot {
    pub(crate) client: kube::Client,
    pub(crate) keys: crate::annotations::AnnotationKeys,
    pub(crate) sidecars: SidecarSet,
    pub(crate) configs_unread: ConfigsUnread,
    /// The injector's status ConfigMap, history and Lease, read once.
    pub(crate) state: InjectorState,
}

impl OneShot {
    /// Connects for `command` (the user agent names it).
    pub(crate) async fn connect(args: &OneShotArgs, command: &str) -> anyhow::Result<Self> {
        Self::connect_to(args, &args.connection, command).await
    }

    /// As [`OneShot::connect`], to the cluster `connection` names instead of `args`'.
    pub(crate) async fn connect_to(
        args: &OneShotArgs,
        connection: &ConnectionArgs,
        command: &str,
    ) -> anyhow::Result<Self> {
        let client = one_shot_client(connection, command).await?;
        let (sidecars, configs_unread) = one_shot_configs(
            &client,
            &args.configs,
            &args.configmaps,
            &args.injector_namespace,
        )
        .await?;
        let state = InjectorState::read(&client, &args.injector_namespace).await;
        Ok(Self {
            client,
            keys: crate::annotations::AnnotationKeys::new(&args.annotation_namespace),
            sidecars,
            configs_unread,
            state,
        })
    }
}

/// `sidecars` for the cluster's nodes, when a config chooses its form by them
/// (`nativeSidecars: auto`): listed once; a refusal is said, and leaves them unknown (those
/// configs judged classic), as the webhook does while it cannot list them.
pub(crate) async fn for_the_nodes(client: &kube::Client, sidecars: SidecarSet) -> SidecarSet {
    let by_nodes = sidecars
        .iter()
        .any(|s| s.config.native_sidecars() == crate::config::NativeSidecars::Auto);
    if !by_nodes {
        return sidecars;
    }
    match crate::cluster::nodes::list_nodes(client).await {
        Ok(nodes) => sidecars.with_nodes(std::sync::Arc::new(nodes)),
        Err(err) => {
            notice(
                tracing::Level::WARN,
                &format!(
                    "cannot list the nodes, so `nativeSidecars: auto` configs are judged classic, as the webhook injects them while it cannot list nodes either: {}",
                    crate::cluster::error_text(&err)
                ),
                &[],
            );
            sidecars
        }
    }
}

/// The cluster for the one-shot commands: --kubeconfig, or the usual resolution, in
/// --context when given (as kubectl).
pub(crate) async fn one_shot_client(
    connection: &ConnectionArgs,
    command: &str,
) -> anyhow::Result<kube::Client> {
    let context = match connection.context.as_slice() {
        [] => None,
        [one] => Some(one.as_str()),
        many => anyhow::bail!(
            "--context is given {} times: `{command}` reads one cluster (`drift` and `status` read several)",
            many.len()
        ),
    };
    let kubeconfig = connection.kubeconfig.as_deref();
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("cannot use --kubeconfig {}", path.display()))?
        }
        (None, Some(context)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("cannot use --context {context}"))?,
        (None, None) => kube::Config::infer()
            .await
            .context("no cluster: set KUBECONFIG, have ~/.kube/config, or pass --kubeconfig")?,
    };
    Ok(counted_client(
        config,
        command,
        connection.rate.limit(),
        Default::default(),
    )?)
}

impl super::args::ManifestConfigsArgs {
    /// The configs, as [`manifest_configs`] reads them, for `command`.
    pub(crate) fn sidecars(&self, command: &str) -> anyhow::Result<SidecarSet> {
        manifest_configs(
            &self.configs,
            &self.configmaps,
            &self.connection,
            &self.injector_namespace,
            self.published_max_age,
            command,
        )
    }
}

/// The configs a manifest is judged against (`inject -f`, `explain -f`): the config directory,
/// read offline; or, given --configmap-labels or where the default directory is absent
/// (outside a checkout), the cluster's sidecar ConfigMaps with the pins and holds of the status
/// ConfigMap, as its running webhook serves them.
pub(crate) fn manifest_configs(
    configs: &ConfigDirectoryArgs,
    configmaps: &ConfigMapArgs,
    connection: &ConnectionArgs,
    injector_namespace: &str,
    published_max_age: std::time::Duration,
    command: &str,
) -> anyhow::Result<SidecarSet> {
    let dir = &configs.config_directory;
    let outside_a_checkout = dir == Path::new(DEFAULT_CONFIG_DIRECTORY) && !dir.exists();
    if configmaps.configmap_labels.is_none() && !outside_a_checkout {
        let report = load_config_directory(dir)
            .with_context(|| format!("cannot read config directory {}", dir.display()))?;
        print_config_problems(&report);
        return Ok(report.sidecar_set());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let client = one_shot_client(connection, command).await.with_context(|| {
            if outside_a_checkout {
                format!(
                    "no {} directory here, and the cluster whose sidecar ConfigMaps would be read instead is not reachable (--config-directory DIR to read files)",
                    dir.display()
                )
            } else {
                "cannot reach the cluster to read its sidecar ConfigMaps".to_owned()
            }
        })?;
        let (sidecars, unread) =
            one_shot_configs(&client, configs, configmaps, injector_namespace).await?;
        if let ConfigsUnread(Some(why)) = unread {
            anyhow::bail!(
                "the sidecar configs cannot be read here ({why}) (--config-directory DIR to read files)"
            );
        }
        let state = InjectorState::read(&client, injector_namespace).await;
        let new_pods = crate::render::new_pods(&book_of(&state)?, &sidecars);
        warn_where_the_webhook_differs(status_of(&state)?, &new_pods.pinned, published_max_age);
        Ok(new_pods.served)
    })
}

/// Says on stderr where the configs read here (`pinned`: pins applied, as the replicas
/// publish theirs) differ from what the running injectors publish that they inject.
fn warn_where_the_webhook_differs(
    status: Option<&k8s_openapi::api::core::v1::ConfigMap>,
    pinned: &SidecarSet,
    max_age: std::time::Duration,
) {
    let Some(configmap) = status else {
        return;
    };
    for line in crate::cluster::status::preview_warnings_of(
        configmap,
        &pinned.revisions_in_force(),
        k8s_openapi::jiff::Timestamp::now(),
        max_age,
    ) {
        notice(Level::WARN, &line, &[]);
    }
}

/// The configs as `serve` would load them (directory, then ConfigMaps overriding), problems
/// printed on stderr. Run where the default directory is not (outside a checkout: a laptop, a
/// kubectl plugin), the ConfigMaps deploy/'s injector serves stand in for it, so that the
/// answers are about the configs the cluster's webhook injects; those refused, it says why.
pub(crate) async fn one_shot_configs(
    client: &kube::Client,
    configs: &ConfigDirectoryArgs,
    configmap_args: &ConfigMapArgs,
    injector_namespace: &str,
) -> anyhow::Result<(SidecarSet, ConfigsUnread)> {
    let mut sources = crate::config::SourceState::default();
    let dir = &configs.config_directory;
    let namespace = configmap_args
        .configmap_namespace
        .as_deref()
        .unwrap_or(injector_namespace);
    let labels = configmap_args.configmap_labels.as_deref();
    let directory = match load_config_directory(dir) {
        Ok(report) => report,
        Err(err) if labels.is_some() => {
            tracing::debug!("no config directory {}: {err}", dir.display());
            LoadReport::default()
        }
        Err(err)
            if err.kind() == std::io::ErrorKind::NotFound
                && dir == Path::new(DEFAULT_CONFIG_DIRECTORY) =>
        {
            return deployed_configs(client, dir, namespace).await;
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
    if let Some(selector) = labels {
        let report = crate::cluster::list::configmap_configs(client, namespace, selector)
            .await
            .with_context(|| {
                format!("cannot list the sidecar ConfigMaps of {namespace} labelled {selector}")
            })?;
        if report.sidecars.is_empty() && report.errors.is_empty() {
            notice(
                Level::WARN,
                &format!(
                    "no sidecar config in the ConfigMaps of {namespace} labelled {selector} (--configmap-namespace, --configmap-labels)"
                ),
                &[],
            );
        }
        print_config_problems(&report);
        configmaps.apply(&report);
    }
    Ok((
        crate::config::merge_sources(&sources, &configmaps).0,
        ConfigsUnread::default(),
    ))
}

/// The configs of the ConfigMaps deploy/'s injector serves (labelled
/// [`DEPLOYED_CONFIGMAP_LABELS`] in its namespace), read because the default directory `dir`
/// is not here. Not an error when they cannot be read (no such namespace, no right to list
/// it): the published revisions still judge the pods, and stderr says why no config is known.
async fn deployed_configs(
    client: &kube::Client,
    dir: &Path,
    namespace: &str,
) -> anyhow::Result<(SidecarSet, ConfigsUnread)> {
    let labels = DEPLOYED_CONFIGMAP_LABELS;
    let read = crate::cluster::list::configmap_configs(client, namespace, labels)
        .await
        .map_err(|err| crate::cluster::error_text(&err));
    let said = match &read {
        Ok(report) if !report.sidecars.is_empty() || !report.errors.is_empty() => format!(
            "no {} directory here: reading the sidecar ConfigMaps of {namespace} labelled {labels}, as deploy/'s injector does (--config-directory, --configmap-labels to read others)",
            dir.display()
        ),
        Ok(_) => format!(
            "no {} directory here, and no sidecar config in the ConfigMaps of {namespace} labelled {labels} (deploy/'s): no sidecar configs (--config-directory, --configmap-namespace, --configmap-labels to name them)",
            dir.display()
        ),
        Err(failure) => format!(
            "no {} directory here, and the ConfigMaps of {namespace} labelled {labels} (deploy/'s) cannot be listed ({failure}): no sidecar configs (--config-directory, --configmap-namespace, --configmap-labels to name them)",
            dir.display()
        ),
    };
    notice(Level::INFO, &said, &[]);
    let report = match read {
        Ok(report) => report,
        Err(failure) => {
            let unread = format!("the ConfigMaps of {namespace} labelled {labels}: {failure}");
            return Ok((SidecarSet::default(), ConfigsUnread(Some(unread))));
        }
    };
    print_config_problems(&report);
    let mut configmaps = crate::config::SourceState::default();
    configmaps.apply(&report);
    let none = crate::config::SourceState::default();
    Ok((
        crate::config::merge_sources(&none, &configmaps).0,
        ConfigsUnread::default(),
    ))
}

pub(crate) fn print_config_problems(report: &LoadReport) {
    for warning in &report.warnings {
        notice(Level::WARN, &warning.to_string(), &[]);
    }
    for error in &report.errors {
        crate::telemetry::error_notice(&error.to_string(), &[]);
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
        replan_every: LOOP_SAFETY_NET,
        // `rollout` is the person a manual policy waits for.
        ignore_manual_policy: matches!(purpose, Purpose::Rollout(_)),
        kinds: Some(kinds),
        reason_prefix: match purpose {
            Purpose::Explain => None,
            Purpose::Rollout(args) => args.rollout_reason.clone(),
        },
        hints: &crate::render::HINTS,
    }
}

/// What a snapshot plan brings pods to.
pub(crate) enum Aim {
    /// The revisions in force: those a running injector published (`--revisions-from`), or
    /// the configs read here.
    Revisions(Option<crate::cluster::status::Publication>),
    /// `rollout --sidecar-container-name`: a selection of pods by container name.
    Containers(crate::engine::ContainerRun),
}

/// The plan the engine would make now, as one pure step of the rollout state machine on a
/// snapshot: the cluster as `feed` listed it, the campaign book and the revision history of
/// `state`. No executor: nothing is acted on, written or followed. What
/// cannot be read (a team's rights) is said, and planned without.
pub(crate) fn plan_snapshot(
    state: &InjectorState,
    options: &crate::engine::EngineOptions,
    feed: &crate::cluster::drift_feed::DriftFeed,
    set: &SidecarSet,
    aim: &Aim,
) -> crate::rollout::RolloutPlan {
    use crate::rollout::machine::{Conduct, OnIndex, RolloutState};
    use crate::rollout::targets::{ContentHistory, revision_targets};

    let now = k8s_openapi::jiff::Timestamp::now();
    let (targets, book, revisions, in_force) = match aim {
        Aim::Containers(run) => (
            run.selection.targets(),
            crate::rollout::CampaignBook::default(),
            crate::rollout::history::RevisionHistory::default(),
            SidecarSet::default(),
        ),
        Aim::Revisions(published) => {
            let book = book_of(state).unwrap_or_else(|err| {
                tracing::warn!("{err:#}; planning as if there were no campaigns");
                crate::rollout::CampaignBook::default()
            });
            let mut revisions = state.history().cloned().unwrap_or_else(|err| {
                tracing::warn!("{err}; planning without the revision history");
                crate::rollout::history::RevisionHistory::default()
            });
            let published = published.as_ref().map(|p| (&p.revisions, &p.manual));
            let computed = revision_targets(
                &book,
                published,
                &mut ContentHistory::default(),
                &mut revisions,
                set,
                &options.settings,
                !options.ignore_manual_policy,
                now,
            );
            for error in &computed.errors {
                tracing::warn!("a pinned revision is not served: {error}");
            }
            (computed.targets, book, revisions, computed.in_force)
        }
    };
    let injection = crate::injection::InjectionSettings::preflight(&options.keys);
    let index = feed.index.lock().expect("drift index lock");
    let live = match aim {
        Aim::Containers(run) => Some((&run.selection, run.live.lock().expect("live pods lock"))),
        Aim::Revisions(_) => None,
    };
    let input = OnIndex {
        index: &index,
        targets: &targets,
        settings: &options.settings,
        history: &revisions,
        policy: &options.policy,
        kinds: options.kinds.as_ref(),
        selection: live.as_ref().map(|(selection, live)| (*selection, &**live)),
        bakes_changed: &std::collections::BTreeSet::new(),
        hints: options.hints,
        served: Some(crate::rollout::Served {
            sidecars: &in_force,
            settings: &injection,
        }),
    };
    let mut plan = RolloutState::with_book(book)
        .step_on_index(
            &input,
            now,
            Conduct::Plan {
                follow_bakes: false,
            },
        )
        .plan;
    crate::render::hint_plan(&mut plan);
    plan
}
