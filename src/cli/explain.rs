//! `explain`: gathers what [`crate::explain`] needs for one pod (from the cluster, or a
//! manifest offline) and prints its answer.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::Api;
use serde::Deserialize;
use serde_json::Value;

use super::args::{ExplainArgs, OutputFormat};
use super::one_shot::{OneShot, revisions_in_force, synced_feed};
use crate::annotations::AnnotationKeys;
use crate::config::SidecarSet;
use crate::engine::{Authority, Engine, EngineMode, EngineOptions};
use crate::explain::{Explanation, PodState, injection, sidecar_drift, workload_action};
use crate::injection::manifest::pod_template_pointer;
use crate::injection::{InjectionSettings, PodView};
use crate::metrics::Metrics;
use crate::rollout::RolloutPlan;
use crate::sources::directory::load_config_directory;
use crate::workload::{WorkloadKind, WorkloadRef};

pub fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let explanation = match &args.file {
        Some(file) => explain_manifest(args, file)?,
        None => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(explain_live(args))?
        }
    };
    let mut out = std::io::stdout().lock();
    match args.cluster.output {
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&explanation)?)?,
        OutputFormat::Table => write!(out, "{explanation}")?,
    }
    Ok(ExitCode::SUCCESS)
}

fn settings(args: &ExplainArgs) -> InjectionSettings {
    InjectionSettings {
        keys: AnnotationKeys::new(&args.cluster.annotation_namespace),
        ignored_namespaces: args.cluster.ignore_namespaces.namespaces(),
        on_missing_sidecar: args.on_missing_sidecar,
    }
}

/// A manifest, offline: the webhook's decision on its pod (or pod template) with the configs
/// of the config directory.
fn explain_manifest(args: &ExplainArgs, file: &str) -> anyhow::Result<Explanation> {
    let dir = &args.cluster.configs.config_directory;
    let report = load_config_directory(dir)
        .with_context(|| format!("cannot read config directory {}", dir.display()))?;
    let sidecars = report.sidecar_set();
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?
    };
    let document = serde_yaml::Deserializer::from_str(&text)
        .next()
        .with_context(|| format!("{file}: no document"))?;
    let document =
        Value::deserialize(document).with_context(|| format!("{file}: not valid YAML"))?;
    let kind = document["kind"].as_str().unwrap_or("Pod");
    let pointer = pod_template_pointer(kind)
        .with_context(|| format!("{file}: a {kind} has no pod to explain"))?;
    let template = document
        .pointer(pointer)
        .with_context(|| format!("{file}: the {kind} has no pod template at {pointer}"))?;
    let pod = PodView::deserialize(template)
        .with_context(|| format!("{file}: the {kind}'s pod does not read as a pod"))?;
    let namespace = args
        .namespace
        .clone()
        .or_else(|| {
            document["metadata"]["namespace"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "default".to_owned());
    let name = document["metadata"]["name"]
        .as_str()
        .or(document["metadata"]["generateName"].as_str())
        .unwrap_or("(no name)");
    Ok(Explanation {
        subject: format!("{kind} {namespace}/{name} (from {file})"),
        judged: if kind == "Pod" {
            "this pod".to_owned()
        } else {
            format!("the pods of this {kind}")
        },
        injection: injection(&pod, &namespace, &sidecars, &settings(args)),
        pod: None,
        sidecars: Vec::new(),
        workload: None,
        rollout: None,
    })
}

/// A live pod: the decision on what new pods of its workload get (its controller's template,
/// or the pod itself when bare), its own state and drift, and the engine's plan for its
/// workload.
async fn explain_live(args: &ExplainArgs) -> anyhow::Result<Explanation> {
    let OneShot {
        client,
        keys,
        sidecars,
    } = OneShot::connect(&args.cluster).await?;
    let given = args.pod.as_deref().unwrap_or_default();
    let name = given.strip_prefix("pod/").unwrap_or(given);
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod = pods
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read pod {namespace}/{name}"))?
        .with_context(|| format!("pod {namespace}/{name} not found"))?;
    let owner = Owner::of(&client, &namespace, &pod).await?;
    let (judged, template) = match &owner.template {
        Some(template) => (
            format!("new pods of {}", owner.controller),
            serde_json::to_value(template)?,
        ),
        None => ("this pod".to_owned(), serde_json::to_value(&pod)?),
    };
    let view = PodView::deserialize(&template).context("the pod template does not read")?;
    // What the webhook injects now: the configs with the pins and holds of the running
    // injector's campaign book.
    let status = super::one_shot::read_status(&client, &args.cluster).await?;
    let book = super::one_shot::book_of(status.as_ref())?;
    let served = book.served(&book.pinned(&sidecars).0).0;
    let explained = injection(&view, &namespace, &served, &settings(args));

    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let state = PodState::read(&annotations, &keys, containers);
    let published = revisions_in_force(&client, &args.cluster).await?;
    let wanted = |sidecar: &str| -> Option<String> {
        match &published {
            Some(revisions) => revisions.get(sidecar).map(str::to_owned),
            None => sidecar
                .parse()
                .ok()
                .and_then(|name| sidecars.get(&name))
                .map(|s| s.revision.to_string()),
        }
    };
    let drift = annotations
        .get(&keys.request)
        .map(|request| sidecar_drift(request, &state, wanted))
        .unwrap_or_default();

    let rollout = match &owner.workload {
        Some(workload) if !drift.is_empty() => {
            let plan = plan_now(&client, args, keys.clone(), &sidecars, published.clone()).await?;
            Some(workload_action(&plan, workload, &drift))
        }
        _ => None,
    };
    Ok(Explanation {
        subject: format!("Pod {namespace}/{name} ({})", owner.controller),
        judged,
        injection: explained,
        pod: Some(state),
        sidecars: drift,
        workload: owner
            .workload
            .as_ref()
            .map(|w| format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name)),
        rollout,
    })
}

/// Who controls a pod: the words for it, the workload the engine restarts (if any), and the
/// template new pods are made from.
struct Owner {
    controller: String,
    workload: Option<WorkloadRef>,
    template: Option<PodTemplateSpec>,
}

impl Owner {
    async fn of(client: &kube::Client, namespace: &str, pod: &Pod) -> anyhow::Result<Self> {
        let controller = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let Some(controller) = controller else {
            return Ok(Self {
                controller: "a bare pod: nothing restarts it but --evict-bare-pods".to_owned(),
                workload: None,
                template: None,
            });
        };
        let name = controller.name.as_str();
        let workload = |kind| Some(WorkloadRef::new(kind, namespace, name));
        Ok(match controller.kind.as_str() {
            "ReplicaSet" => Self::of_replicaset(client, namespace, name).await?,
            "StatefulSet" => {
                let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
                let set = api
                    .get(name)
                    .await
                    .with_context(|| format!("cannot read StatefulSet {namespace}/{name}"))?;
                Self {
                    controller: format!("StatefulSet {name}"),
                    workload: workload(WorkloadKind::StatefulSet),
                    template: set.spec.map(|s| s.template),
                }
            }
            "DaemonSet" => {
                let api: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
                let set = api
                    .get(name)
                    .await
                    .with_context(|| format!("cannot read DaemonSet {namespace}/{name}"))?;
                Self {
                    controller: format!("DaemonSet {name}"),
                    workload: workload(WorkloadKind::DaemonSet),
                    template: set.spec.map(|s| s.template),
                }
            }
            kind => Self {
                controller: format!("{kind} {name}: the engine does not restart it"),
                workload: None,
                template: None,
            },
        })
    }
}

impl Owner {
    async fn of_replicaset(
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Self> {
        let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
        let replicaset = api
            .get(name)
            .await
            .with_context(|| format!("cannot read ReplicaSet {namespace}/{name}"))?;
        let deployment = replicaset
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true) && r.kind == "Deployment")
            .map(|r| r.name.clone());
        let template = replicaset.spec.and_then(|s| s.template);
        Ok(match deployment {
            Some(deployment) => Self {
                controller: format!("ReplicaSet {name} of Deployment {deployment}"),
                workload: Some(WorkloadRef::new(
                    WorkloadKind::Deployment,
                    namespace,
                    &deployment,
                )),
                template,
            },
            None => Self {
                controller: format!("ReplicaSet {name}, with no Deployment: nothing rolls it"),
                workload: None,
                template,
            },
        })
    }
}

/// The plan the engine would make now (as `rollout` plans it): the cluster listed once, the
/// campaigns of the status ConfigMap, the revisions in force.
async fn plan_now(
    client: &kube::Client,
    args: &ExplainArgs,
    keys: AnnotationKeys,
    sidecars: &SidecarSet,
    published: Option<crate::config::RevisionsInForce>,
) -> anyhow::Result<RolloutPlan> {
    let mut kinds: BTreeSet<WorkloadKind> = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
    ]
    .into();
    if args.cluster.drift.evict_bare_pods {
        kinds.insert(WorkloadKind::Pod);
    }
    let options = EngineOptions {
        mode: EngineMode::DryRun,
        settings: args.safety.settings(Duration::ZERO),
        keys: keys.clone(),
        policy: args
            .cluster
            .drift
            .policy(args.cluster.ignore_namespaces.namespaces()),
        namespace: args.cluster.injector_namespace.clone(),
        replan_every: Duration::from_secs(1),
        // As the engine of `serve` plans: manual sidecars wait for a person.
        ignore_manual_policy: false,
        kinds: Some(kinds),
        reason_prefix: None,
    };
    let feed = synced_feed(client, keys).await?;
    let recorder = crate::cluster::events::recorder(client.clone(), None);
    let status = crate::cluster::status::watch_status(client.clone(), &options.namespace);
    let mut engine = Engine::new(
        client.clone(),
        options,
        Arc::new(Metrics::new()),
        recorder,
        status,
    );
    engine.load_status().await;
    if let Some(revisions) = published {
        engine.use_published_revisions(revisions);
    }
    Ok(engine.tick(&feed, sidecars, Authority::PlanOnly).await)
}
