//! `explain`: gathers what [`crate::explain`] needs for one pod or workload (from the
//! cluster, or a manifest against the configs `inject` reads) and prints its answer.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::Selector;
use serde::Deserialize;
use serde_json::Value;

use super::args::ExplainArgs;
use super::configs::ConfigsUnread;
use super::connect::{OneShot, revisions_in_force};
use crate::annotations::AnnotationKeys;
use crate::cluster::drift_feed::ListError;
use crate::cluster::list::NamespaceReach;
use crate::config::SidecarSet;
use crate::render::{ExplanationDocument, ExplanationPage};

use crate::explain::{
    Explanation, InjectionExplanation, PodState, SidecarDrift, WorkloadAction, WorkloadPods,
    injection, sidecar_drift, without_configs, workload_action,
};
use crate::injection::manifest::{document_label, objects_with_pods};
use crate::injection::{InjectionSettings, PodView};
use crate::rollout::RolloutPlan;
use crate::workload::{PodWorkload, WorkloadKind, WorkloadRef, resource_name_and_group};

mod live;
use crate::cluster::owners::{Owner, Via, WorkloadSpec, pods_controlled};
use live::Live;

pub(crate) fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let explanations = match &args.file {
        Some(file) => explain_manifest(args, file)?,
        None => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            vec![runtime.block_on(explain_live(args))?]
        }
    };
    let mut out = std::io::stdout().lock();
    // One answer is the object itself; several are listed as kubectl lists several objects.
    #[derive(serde::Serialize)]
    struct Items<'a> {
        items: Vec<ExplanationDocument<'a>>,
    }
    let document = match explanations.as_slice() {
        [one] => args
            .cluster
            .output
            .document(&ExplanationDocument::of(one))?,
        items => args.cluster.output.document(&Items {
            items: items.iter().map(ExplanationDocument::of).collect(),
        })?,
    };
    match document {
        Some(document) => out.write_all(document.as_bytes())?,
        None => {
            for (position, explanation) in explanations.iter().enumerate() {
                if position > 0 {
                    writeln!(out)?;
                }
                write!(out, "{}", ExplanationPage(explanation))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The namespace filters the drift report and the engine apply, as the flags give them.
fn policy(args: &ExplainArgs) -> crate::drift::DriftPolicy {
    args.cluster
        .drift
        .policy(args.cluster.ignore_namespaces.namespaces())
}

fn settings(args: &ExplainArgs) -> InjectionSettings {
    InjectionSettings {
        keys: AnnotationKeys::new(&args.cluster.annotation_namespace),
        ignored_namespaces: args.cluster.ignore_namespaces.namespaces(),
        on_missing_sidecar: args.on_missing_sidecar.0,
    }
}

/// A manifest: the webhook's decision on each pod (or pod template) it holds, every document
/// and each item of a `List`, with the configs of the config directory (offline) or, outside
/// a checkout, those the cluster's injector serves.
fn explain_manifest(args: &ExplainArgs, file: &str) -> anyhow::Result<Vec<Explanation>> {
    let cluster = &args.cluster;
    let sidecars = super::connect::manifest_configs(
        &cluster.configs,
        &cluster.configmaps,
        &cluster.connection,
        &cluster.injector_namespace,
        cluster.published_max_age,
        "explain",
    )?;
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?
    };
    let mut explanations = Vec::new();
    let mut without_pods = Vec::new();
    for (position, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let document = Value::deserialize(document)
            .with_context(|| format!("{file}: document {} is not valid YAML", position + 1))?;
        if document.is_null() {
            continue;
        }
        let mut found = objects_with_pods(&document);
        // A document without a kind is read as a pod (a bare pod spec pasted in).
        if document.get("kind").is_none() {
            found.push((&document, &document));
        }
        if found.is_empty() {
            without_pods.push(document_label(&document));
        }
        for (object, template) in found {
            explanations.push(explain_object(args, file, &sidecars, object, template)?);
        }
    }
    anyhow::ensure!(
        !explanations.is_empty(),
        "{file}: no Pod and no object with a pod template to explain{}",
        if without_pods.is_empty() {
            String::new()
        } else {
            format!(" (it holds {})", without_pods.join(", "))
        }
    );
    Ok(explanations)
}

/// One object of a manifest with its pod (or template), judged against `sidecars` with no
/// further read of the cluster.
fn explain_object(
    args: &ExplainArgs,
    file: &str,
    sidecars: &SidecarSet,
    object: &Value,
    template: &Value,
) -> anyhow::Result<Explanation> {
    let kind = object["kind"].as_str().unwrap_or("Pod");
    let label = document_label(object);
    let pod = PodView::deserialize(template)
        .with_context(|| format!("{file}: {label}: its pod does not read as a pod"))?;
    let namespace = args
        .namespace
        .clone()
        .or_else(|| object["metadata"]["namespace"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned());
    let name = object["metadata"]["name"]
        .as_str()
        .or(object["metadata"]["generateName"].as_str())
        .unwrap_or("(no name)");
    Ok(Explanation {
        subject: format!("{kind} {namespace}/{name} (from {file})"),
        judged: if crate::workload::WorkloadKind::from_name(kind)
            == Some(crate::workload::WorkloadKind::Pod)
        {
            "this pod".to_owned()
        } else {
            format!("the pods of this {kind}")
        },
        injection: injection(&pod, Some(template), &namespace, sidecars, &settings(args)),
        workload_pods: None,
        pod: None,
        sidecars: Vec::new(),
        workload: None,
        rollout: None,
        foreign: Vec::new(),
    })
}

/// What `explain` can be asked about in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SubjectKind {
    /// A pod, or a workload the engine restarts.
    Workload(WorkloadKind),
    /// A Job or a CronJob: its template is judged and its pods counted, but the engine never
    /// restarts them (their pods run to completion).
    Batch(BatchKind),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchKind {
    Job,
    CronJob,
}

impl BatchKind {
    fn as_str(self) -> &'static str {
        match self {
            BatchKind::Job => "Job",
            BatchKind::CronJob => "CronJob",
        }
    }

    /// As kubectl reads it: `job`, `jobs`, `cj`, `cronjobs`, `CronJob`, with or without the
    /// `batch` group (`jobs.batch`, `cronjob.v1beta1.batch`).
    fn from_resource(resource: &str) -> Option<Self> {
        let (name, group) = resource_name_and_group(resource);
        let kind = match name.as_str() {
            "job" | "jobs" => BatchKind::Job,
            "cj" | "cronjob" | "cronjobs" => BatchKind::CronJob,
            _ => return None,
        };
        match group.as_deref() {
            None | Some("batch" | "v1.batch" | "v1beta1.batch") => Some(kind),
            Some(_) => None,
        }
    }

    /// Why the engine leaves it alone, and what its next pods get.
    fn never_restarted(self) -> &'static str {
        match self {
            BatchKind::Job => {
                "the engine never restarts a Job's pods: they run to completion (a new Job gets the revisions in force)"
            }
            BatchKind::CronJob => {
                "the engine never restarts a CronJob's pods: they run to completion, and its next Job gets the revisions in force"
            }
        }
    }
}

/// What `explain` was asked about in the cluster: a pod, or a workload by kubectl's
/// `KIND/NAME` (a bare `NAME` is a pod, as `kubectl get pod NAME` reads it).
fn subject(given: &str) -> anyhow::Result<(SubjectKind, &str)> {
    let Some((resource, name)) = given.split_once('/') else {
        return Ok((SubjectKind::Workload(WorkloadKind::Pod), given));
    };
    let kind = WorkloadKind::from_resource(resource)
        .map(SubjectKind::Workload)
        .or_else(|| BatchKind::from_resource(resource).map(SubjectKind::Batch))
        .with_context(|| {
            format!(
                "{given}: explain takes a pod (NAME or pod/NAME), a workload (deployment/NAME, statefulset/NAME or daemonset/NAME; deploy, sts, ds for short) or a job/NAME or cronjob/NAME, not {resource:?}"
            )
        })?;
    anyhow::ensure!(
        !name.is_empty() && !name.contains('/'),
        "{given}: expected KIND/NAME, with one name"
    );
    Ok((kind, name))
}

async fn explain_live(args: &ExplainArgs) -> anyhow::Result<Explanation> {
    let (kind, name) = subject(args.pod.as_deref().unwrap_or_default())?;
    let live = Live::read(args).await?;
    match kind {
        SubjectKind::Workload(WorkloadKind::Pod) => explain_pod(args, &live, name).await,
        SubjectKind::Workload(kind) => {
            explain_workload(args, &live, WorkloadRef::new(kind, &live.namespace, name)).await
        }
        SubjectKind::Batch(kind) => explain_batch(args, &live, kind, name).await,
    }
}

/// A live pod: the decision on what new pods of its workload get (its controller's template,
/// or the pod itself when bare), its own state and drift, and the engine's plan for its
/// workload.
async fn explain_pod(args: &ExplainArgs, live: &Live, name: &str) -> anyhow::Result<Explanation> {
    let namespace = &live.namespace;
    let pod = live.read_pod(name).await?;
    let evict_bare_pods = args.cluster.drift.evict_bare_pods;
    let owner = Owner::of(&live.client, namespace, &pod, evict_bare_pods, &live.keys).await?;
    let (judged, template) = match &owner.template {
        Some(template) => (
            format!(
                "new pods of {}",
                crate::render::controller(&owner.controller)
            ),
            serde_json::to_value(template)?,
        ),
        None => ("this pod".to_owned(), serde_json::to_value(&pod)?),
    };
    let owner_exclusion = owner
        .exclusion(&pod, evict_bare_pods)
        .map(|why| crate::render::exclusion(&why));
    let drift = live.drift(&pod.metadata, owner_exclusion.as_deref());
    let rollout = match &owner.workload {
        Some(workload) if !drift.is_empty() => Some(live.rollout(args, workload, &drift).await?),
        _ => None,
    };
    Ok(Explanation {
        subject: format!(
            "Pod {namespace}/{name} ({})",
            crate::render::controller(&owner.controller)
        ),
        judged,
        injection: live.injection(args, &template)?,
        workload_pods: None,
        pod: Some(live.pod_state(&pod)),
        sidecars: drift,
        workload: owner
            .workload
            .as_ref()
            .map(|w| format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name)),
        rollout,
        foreign: Vec::new(),
    })
}

/// A workload: the decision on what its new pods get (its own template), how many of its pods
/// are in which state, the state and drift of the first in the worst state, and the engine's
/// plan for it.
async fn explain_workload(
    args: &ExplainArgs,
    live: &Live,
    workload: WorkloadRef,
) -> anyhow::Result<Explanation> {
    let spec = WorkloadSpec::read(&live.client, &workload, &live.keys).await?;
    let pods = spec.pods(&live.client, &workload).await?;
    let foreign = foreign_findings(args, live, &workload, &spec.template, &pods).await?;
    let owner_exclusion = spec
        .rollout_disabled
        .then(|| crate::render::exclusion(&crate::drift::Exclusion::RolloutDisabled));
    let (summary, pod, drift) = live.pods_of(pods, owner_exclusion.as_deref()).await?;
    let rollout = if summary.count == 0 {
        WorkloadAction::Nothing {
            why: "it has no pods to restart".to_owned(),
        }
    } else if drift.is_empty() {
        WorkloadAction::Nothing {
            why: "its pods ask for no sidecar".to_owned(),
        }
    } else {
        live.rollout(args, &workload, &drift).await?
    };
    let (kind, name) = (workload.kind.as_str(), &workload.name);
    Ok(Explanation {
        subject: format!("{kind} {}/{name}", workload.namespace),
        judged: format!("new pods of {kind} {name}"),
        injection: live.injection(args, &serde_json::to_value(&spec.template)?)?,
        workload_pods: Some(summary),
        pod,
        sidecars: drift,
        workload: Some(format!("{kind} {}/{name}", workload.namespace)),
        rollout: Some(rollout),
        foreign,
    })
}

/// With `--foreign-sidecar`: what a new pod of `workload` gets of each named sidecar (two
/// dry-run creates of its template) and each of its pods against it.
async fn foreign_findings(
    args: &ExplainArgs,
    live: &Live,
    workload: &WorkloadRef,
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    pods: &[ObjectMeta],
) -> anyhow::Result<Vec<crate::explain::ForeignFindings>> {
    let names = args.foreign.names()?;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let api: Api<Pod> = Api::namespaced(live.client.clone(), &workload.namespace);
    let mut specs = Vec::new();
    for name in pods.iter().filter_map(|p| p.name.as_deref()) {
        // A pod gone since it was listed is no longer the workload's.
        if let Some(pod) = api.get_opt(name).await? {
            specs.push((name.to_owned(), pod.spec.unwrap_or_default()));
        }
    }
    let answer = crate::cluster::foreign::expected(
        &live.client,
        &workload.namespace,
        &workload.name,
        template,
        &names,
    )
    .await;
    let error = answer.as_ref().err().map(super::drift::dry_run_error);
    Ok(crate::explain::foreign_findings(
        workload.kind,
        (&workload.namespace, &workload.name),
        answer
            .as_ref()
            .map_err(|_| error.as_deref().unwrap_or_default()),
        &specs,
        &names,
    ))
}

/// A Job or CronJob: the decision on what its next pods get (its template), how many of its
/// pods (a CronJob's: those of the Jobs it made) are in which state, the first in the worst
/// state; the engine never restarts them.
async fn explain_batch(
    args: &ExplainArgs,
    live: &Live,
    kind: BatchKind,
    name: &str,
) -> anyhow::Result<Explanation> {
    let (client, namespace) = (&live.client, live.namespace.as_str());
    let label = format!("{} {namespace}/{name}", kind.as_str());
    let object = read_batch(client, kind, namespace, name)
        .await
        .with_context(|| format!("cannot read {label}"))?
        .with_context(|| format!("{label} not found"))?;
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let spec = &object.data["spec"];
    // A Job's pods carry its selector (its uid, set by the API server); a CronJob has none,
    // and nor do the Jobs it makes.
    let (template, selector, via) = match kind {
        BatchKind::Job => {
            let selector = LabelSelector::deserialize(&spec["selector"])
                .ok()
                .and_then(|selector| Selector::try_from(selector).ok())
                .with_context(|| {
                    format!("{label}: its selector cannot be used to list its pods")
                })?;
            (&spec["template"], selector, None)
        }
        BatchKind::CronJob => (
            &spec["jobTemplate"]["spec"]["template"],
            Selector::default(),
            Some(Via::Jobs),
        ),
    };
    // Its next pods are created by the Job controller, which owns them: judged so, a sidecar
    // injected native into Job pods only (`nativeSidecars: jobs`) is judged as it will be.
    let mut template = template.clone();
    template["metadata"]["ownerReferences"] = serde_json::json!([{
        "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": true,
    }]);
    let template = &template;
    let pods = pods_controlled(client, namespace, &selector, &uid, via, &label).await?;
    // A CronJob's pods are its Jobs' pods too.
    let job_pod = crate::drift::owner_exclusion(&PodWorkload::Job(name))
        .map(|why| crate::render::exclusion(&why));
    let (summary, pod, drift) = live.pods_of(pods, job_pod.as_deref()).await?;
    Ok(Explanation {
        subject: label.clone(),
        judged: format!("new pods of {} {name}", kind.as_str()),
        injection: live.injection(args, template)?,
        workload_pods: Some(summary),
        pod,
        sidecars: drift,
        workload: Some(label),
        rollout: Some(WorkloadAction::Nothing {
            why: kind.never_restarted().to_owned(),
        }),
        foreign: Vec::new(),
    })
}

/// A Job or CronJob as the cluster serves it (`batch/v1`), `None` when it does not exist.
async fn read_batch(
    client: &kube::Client,
    kind: BatchKind,
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    let gvk = GroupVersionKind::gvk("batch", "v1", kind.as_str());
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk));
    api.get_opt(name).await
}

/// The plan the engine would make now (as `rollout` plans it): the cluster listed once, the
/// campaigns of the status ConfigMap, the revisions in force.
async fn plan_now(
    client: &kube::Client,
    state: &crate::cluster::status::InjectorState,
    args: &ExplainArgs,
    keys: AnnotationKeys,
    sidecars: &SidecarSet,
    published: Option<crate::cluster::status::Publication>,
) -> anyhow::Result<RolloutPlan> {
    let options =
        super::args::engine_options(&args.cluster, &args.safety, &super::args::Purpose::Explain);
    let feed =
        crate::cluster::drift_feed::listed(client, keys, args.cluster.webhook_configuration())
            .await?;
    let aim = crate::engine::Aim::Revisions(published);
    Ok(crate::engine::plan_now(
        state, &options, &feed, sidecars, &aim,
    ))
}

#[cfg(test)]
mod tests;
