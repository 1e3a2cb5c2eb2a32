//! What the one-shot commands (`drift`, `explain`, `rollout`, `status`) start from: the
//! cluster connection, the configs as `serve` would load them, the injector's state read once,
//! the revisions in force and the cluster listed; and the configs a manifest is judged
//! against (`inject -f`, `explain -f`).

use std::path::Path;

use anyhow::Context;

use super::args::{
    ConfigDirectoryArgs, ConfigMapArgs, ConnectionArgs, DEFAULT_CONFIG_DIRECTORY, OneShotArgs,
};
use super::configs::{ConfigsUnread, one_shot_configs, print_config_problems};
use crate::cluster::client::counted_client;
use crate::cluster::status::{InjectorState, StateError};
use crate::config::SidecarSet;
use crate::sources::directory::load_config_directory;
use crate::telemetry::notice;
use tracing::Level;

/// The status ConfigMap of `state`, when there is one. Refused (a user whose rights stop at
/// a team's namespaces), the error says who can grant it and how.
pub(crate) fn status_of(
    state: &InjectorState,
) -> anyhow::Result<Option<&k8s_openapi::api::core::v1::ConfigMap>> {
    state
        .status()
        .map_err(|err| with_refusal_hint(err, StatusRefused))
}

/// `err`, with `hint` (who can grant it, and how) when the API server refused the read.
pub(crate) fn with_refusal_hint<H>(err: StateError, hint: H) -> anyhow::Error
where
    H: std::fmt::Display + std::fmt::Debug + Send + Sync + 'static,
{
    let refused = err.refused();
    let err = anyhow::Error::new(err);
    if refused { err.context(hint) } else { err }
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
pub(crate) fn book_of(state: &InjectorState) -> anyhow::Result<&crate::rollout::CampaignBook> {
    status_of(state)?;
    Ok(state.book()?)
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
            let why = crate::render::published_why(&why);
            notice(
                Level::INFO,
                &format!("{why}{asked}"),
                &[("revisions_from", "published")],
            );
            Some(publication)
        }
        RevisionsChoice::Configs { why, over_stale } => {
            let why = crate::render::configs_why(&why);
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
            "there is nothing to judge the pods by: {}{asked}, and the sidecar configs cannot be read here ({}); every pod would read as orphaned",
            crate::render::neither_why(&why),
            configs.0.as_deref().unwrap_or_default()
        ),
    })
}

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
        let new_pods = crate::render::new_pods(book_of(&state)?, &sidecars);
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
    for warning in crate::cluster::status::preview_warnings_of(
        configmap,
        &pinned.revisions_in_force(),
        k8s_openapi::jiff::Timestamp::now(),
        max_age,
    ) {
        notice(Level::WARN, &crate::render::preview_warning(&warning), &[]);
    }
}
