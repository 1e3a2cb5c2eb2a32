//! `serve`: the flags and environment turned into [`crate::serve::ServeOptions`], and the
//! runtime started.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::args::{InjectionMode, ProcessEnv, ServeArgs};
use crate::annotations::AnnotationKeys;
use crate::cluster::client::{ClientMetrics, counted_client};
use crate::engine::EngineMode;
use crate::injection::InjectionSettings;
use crate::metrics::Metrics;
use crate::serve::{self, ConfigMapOptions, RolloutOptions, ServeOptions};

/// Tumblr's paths, so a deployment that mounts its Secret there keeps working.
pub(crate) const DEFAULT_TLS_CERT_FILE: &str = "/var/lib/secrets/cert.crt";
pub(crate) const DEFAULT_TLS_KEY_FILE: &str = "/var/lib/secrets/cert.key";

/// The namespace of the service account this process runs as, when it runs in a pod.
const IN_CLUSTER_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Every flag mapped onto ServeOptions, and the runtime started.
pub(crate) fn run(args: ServeArgs, env: &ProcessEnv) -> anyhow::Result<ExitCode> {
    let mut ignored: BTreeSet<String> = args.ignore_namespaces.namespaces();
    let own_namespace = std::fs::read_to_string(IN_CLUSTER_NAMESPACE_FILE)
        .ok()
        .map(|ns| ns.trim().to_owned());
    ignored.extend(own_namespace.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let metrics = Arc::new(if args.tumblr_metrics {
        Metrics::new().with_tumblr_names()
    } else {
        Metrics::new()
    });
    let cluster = cluster_client(&args, env, &runtime, &metrics)?;
    let configmaps = configmap_options(&args, cluster.clone(), own_namespace.as_deref())?;
    let injector_namespace = args
        .injector_namespace
        .clone()
        .or(own_namespace.clone())
        .or(args.configmaps.configmap_namespace.clone());
    let publication =
        publication_options(&args, cluster.is_some(), injector_namespace.as_deref(), env);
    let drift_policy = args.drift.policy(ignored.clone());
    anyhow::ensure!(
        args.promote_after.is_empty() || (cluster.is_some() && args.rollout != EngineMode::Off),
        "--promote-after promotes the rollout engine's gated campaigns: it needs a cluster and --rollout=auto or dry-run"
    );
    let rollout = rollout_options(
        &args,
        cluster.is_some(),
        injector_namespace,
        drift_policy.clone(),
        env,
        &runtime,
    )?;
    metrics.record_rollout_mode(match &rollout {
        Some(options) => options.engine.mode.as_str(),
        None => EngineMode::Off.as_str(),
    });
    let policy = policy_options(&args, &ignored)?;
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
            on_missing_sidecar: args.on_missing_sidecar.0,
        },
        max_body_bytes: args.max_body_bytes,
        max_buffered_bytes: args.max_buffered_bytes,
        review_timeout: args.review_timeout,
        body_read_timeout: args.body_read_timeout,
        reload_debounce: args.reload_debounce,
        shutdown_delay: args.shutdown_delay,
        shutdown_timeout: args.shutdown_timeout,
        max_connections: args.max_connections,
        idle_timeout: args.idle_timeout,
        configmaps,
        cluster,
        drift_policy,
        rollout,
        metrics,
        pod_name: env.pod_name.clone(),
        publication,
        webhook_ca: args.webhook_configuration.zip(args.ca_bundle_file),
        policy,
    };
    runtime.block_on(serve::run(options))?;
    Ok(ExitCode::SUCCESS)
}

/// The client of the cluster `serve` works in, when it has one, its requests counted.
fn cluster_client(
    args: &ServeArgs,
    env: &ProcessEnv,
    runtime: &tokio::runtime::Runtime,
    metrics: &Metrics,
) -> anyhow::Result<Option<kube::Client>> {
    let Some(config) = runtime.block_on(cluster_config(args, env))? else {
        return Ok(None);
    };
    let _guard = runtime.enter();
    Ok(Some(counted_client(
        config,
        "serve",
        args.kube_api_rate.limit(),
        ClientMetrics {
            requests: metrics.kube_requests.clone(),
            rate_limiter_wait: metrics.kube_rate_limiter_wait.clone(),
        },
    )?))
}

/// `--configmap-labels`: the ConfigMap source, in `--configmap-namespace` or the injector's own.
fn configmap_options(
    args: &ServeArgs,
    cluster: Option<kube::Client>,
    own_namespace: Option<&str>,
) -> anyhow::Result<Option<ConfigMapOptions>> {
    Ok(match (&args.configmaps.configmap_labels, cluster) {
        (None, _) => None,
        (Some(_), None) => anyhow::bail!("--configmap-labels {}", serve::NEEDS_A_CLUSTER),
        (Some(selector), Some(client)) => {
            let namespace = match &args.configmaps.configmap_namespace {
                Some(namespace) => namespace.clone(),
                None => own_namespace.map(str::to_owned).ok_or_else(|| {
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
    })
}

/// Every replica that serves the webhook publishes what it injects, whatever its rollout
/// mode, where the one-shot commands look: the injector's namespace.
fn publication_options(
    args: &ServeArgs,
    cluster: bool,
    injector_namespace: Option<&str>,
    env: &ProcessEnv,
) -> Option<crate::serve::PublicationOptions> {
    match (cluster, injector_namespace) {
        (true, Some(namespace)) => Some(crate::serve::PublicationOptions {
            namespace: namespace.to_owned(),
            identity: env.identity(),
            every: args.publish_interval,
        }),
        (true, None) => {
            tracing::warn!(
                "not publishing the revisions this replica injects: no --injector-namespace and not in a cluster"
            );
            None
        }
        (false, _) => None,
    }
}

/// The rollout engine's options, unless `--rollout=off` or there is no cluster.
fn rollout_options(
    args: &ServeArgs,
    cluster: bool,
    injector_namespace: Option<String>,
    drift_policy: crate::drift::DriftPolicy,
    env: &ProcessEnv,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Option<RolloutOptions>> {
    Ok(match (cluster, args.rollout) {
        (false, _) | (_, EngineMode::Off) => None,
        (true, mode) => {
            let namespace = injector_namespace.context(
                    "the rollout engine keeps its status ConfigMap and Lease in the injector's namespace: \
                     pass --injector-namespace (or --rollout=off)",
                )?;
            let keys = AnnotationKeys::new(&args.annotation_namespace);
            let upstream = upstream_gate(args, &namespace, runtime)?;
            Some(RolloutOptions {
                upstream,
                engine: crate::engine::EngineOptions {
                    mode,
                    settings: crate::rollout::RolloutSettings {
                        promotion: args.promotion.0,
                        ..args.safety.settings(args.settle)
                    },
                    keys,
                    policy: drift_policy,
                    namespace: namespace.clone(),
                    replan_every: Duration::from_secs(60),
                    ignore_manual_policy: false,
                    kinds: None,
                    reason_prefix: None,
                    prometheus: args.safety.prometheus(),
                },
                lease: crate::cluster::lease::LeaseSettings {
                    namespace,
                    identity: env.identity(),
                    mode: mode.as_str().to_owned(),
                    duration: args.lease_duration,
                    renew_every: args.lease_duration / 3,
                },
                act_after_ready: args.act_after_ready,
                notify: args
                    .notify_url
                    .clone()
                    .map(|url| crate::notifier::NotifierOptions {
                        url,
                        timeout: args.notify_timeout,
                        retries: args.notify_retries,
                    }),
            })
        }
    })
}

/// `--injection=policy`: what the policy writer compiles the configs with.
fn policy_options(
    args: &ServeArgs,
    ignored: &BTreeSet<String>,
) -> anyhow::Result<Option<crate::cluster::policy_writer::PolicyWriterOptions>> {
    anyhow::ensure!(
        args.injection == InjectionMode::Policy || args.namespace_selector.is_none(),
        "--namespace-selector is the policies' (--injection=policy); the webhook's is in its MutatingWebhookConfiguration"
    );
    Ok((args.injection == InjectionMode::Policy).then(|| {
        crate::cluster::policy_writer::PolicyWriterOptions {
            keys: AnnotationKeys::new(&args.annotation_namespace),
            ignored_namespaces: ignored.clone(),
            on_missing_sidecar: args.on_missing_sidecar.0,
            name: args.policy_name.clone(),
            namespace_selector: args.namespace_selector.clone(),
        }
    }))
}

/// The cluster connection of `serve`: in-cluster, or exactly what the flags name. Never an
/// implicit `~/.kube/config`, so `serve` on a laptop cannot touch whatever cluster it points at.
async fn cluster_config(
    args: &ServeArgs,
    env: &ProcessEnv,
) -> anyhow::Result<Option<kube::Config>> {
    let mut config = if let Some(path) = &args.kubeconfig {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .with_context(|| format!("cannot use --kubeconfig {}", path.display()))?
    } else if env.in_cluster {
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

/// `--promote-after`: a client of each upstream cluster, from `--upstream-kubeconfig`; a
/// missing kubeconfig or context stops `serve` at start, naming it.
fn upstream_gate(
    args: &ServeArgs,
    namespace: &str,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Option<crate::engine::upstream_gate::UpstreamGateOptions>> {
    if args.promote_after.is_empty() {
        return Ok(None);
    }
    anyhow::ensure!(
        args.promotion.0 == crate::rollout::promotion::PromotionMode::Gated,
        "--promote-after promotes revisions that wait under --promotion=gated: pass --promotion=gated too"
    );
    let path = &args.upstream_kubeconfig;
    let kubeconfig = kube::config::Kubeconfig::read_from(path).with_context(|| {
        format!(
            "--promote-after: cannot read --upstream-kubeconfig {} (mount the upstream clusters' kubeconfig Secret there)",
            path.display()
        )
    })?;
    let known: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let mut clusters = Vec::new();
    for context in &args.promote_after {
        anyhow::ensure!(
            known.contains(context),
            "--promote-after {context}: --upstream-kubeconfig {} has no such context (it has: {})",
            path.display(),
            known.join(", ")
        );
        let options = kube::config::KubeConfigOptions {
            context: Some(context.clone()),
            ..Default::default()
        };
        let config = runtime
            .block_on(kube::Config::from_custom_kubeconfig(
                kubeconfig.clone(),
                &options,
            ))
            .with_context(|| format!("--promote-after {context}: cannot use its context"))?;
        // The client's buffer spawns its worker on the runtime.
        let client = runtime.block_on(async {
            crate::cluster::client::counted_client(
                config,
                "serve upstream gate",
                args.kube_api_rate.limit(),
                Default::default(),
            )
        })?;
        clusters.push((context.clone(), client));
    }
    Ok(Some(crate::engine::upstream_gate::UpstreamGateOptions {
        clusters,
        namespace: args
            .upstream_injector_namespace
            .clone()
            .unwrap_or_else(|| namespace.to_owned()),
        bake: args.promote_bake,
    }))
}
