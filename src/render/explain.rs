//! `explain`'s answer in words: each check of the webhook's, its outcome, the pods' drift and
//! the engine's plan for the workload, as a page and as the JSON or YAML document.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::annotations::AnnotationKeys;
use crate::cluster::owners::Controller;
use crate::explain::{
    Check, ConfigFound, Explanation, Finding, ForeignFindings, InjectedSidecar,
    InjectionExplanation, NotCalled, Outcome, PodResourcesChange, PodState, RequestsChange,
    SidecarDrift, Verdict, WorkloadAction, WorkloadPods,
};
use crate::injection::{MissingSidecarPolicy, SkipReason};

pub(crate) const ON_MISSING_ALLOW: &str = "--on-missing-sidecar=allow";
const ON_MISSING_DENY: &str = "--on-missing-sidecar=deny";
const IGNORE_NAMESPACE: &str = "--ignore-namespace";
pub(crate) const ANNOTATION_NAMESPACE: &str = "--annotation-namespace";
const DRIFT_REPORT: &str = "`sidecar-injector drift`";

/// Why a pod that asks for sidecars (or looks as if it does) was let through unchanged; `None`
/// for a pod that asks for nothing.
pub(crate) fn skip_reason(reason: &SkipReason, keys: &AnnotationKeys) -> Option<String> {
    match reason {
        SkipReason::NoRequest => None,
        SkipReason::AlreadyInjected => Some(format!("already injected ({} is set)", keys.status)),
        SkipReason::IgnoredNamespace(namespace) => Some(format!(
            "namespace {namespace} is ignored ({IGNORE_NAMESPACE})"
        )),
        SkipReason::NothingFound(missing) => {
            let names: Vec<String> = missing
                .iter()
                .map(|n| format!("\"{}\"", crate::name::quoted(&n.to_string())))
                .collect();
            Some(format!(
                "no requested sidecar exists ({}); let through by {ON_MISSING_ALLOW}",
                names.join(", ")
            ))
        }
        SkipReason::InvalidRequest { annotation, error } => Some(format!(
            "annotation {annotation}: {error}; let through by {ON_MISSING_ALLOW}"
        )),
        SkipReason::OtherAnnotationNamespace { key, ours } => Some(format!(
            "no {ours} annotation, but {key} is set: is {ANNOTATION_NAMESPACE} right?"
        )),
    }
}

/// A pod's controller, and whether anything restarts it.
pub(crate) fn controller(controller: &Controller) -> String {
    match controller {
        Controller::BarePod { evicted: true } => {
            "a bare pod: --evict-bare-pods has the engine evict it".to_owned()
        }
        Controller::BarePod { evicted: false } => {
            "a bare pod: nothing restarts it but --evict-bare-pods".to_owned()
        }
        Controller::Workload { kind, name } => format!("{kind} {name}"),
        Controller::ReplicaSet {
            name,
            deployment: Some(deployment),
        } => format!("ReplicaSet {name} of Deployment {deployment}"),
        Controller::ReplicaSet {
            name,
            deployment: None,
        } => format!("ReplicaSet {name}, with no Deployment: nothing rolls it"),
        Controller::Other { kind, name } => {
            format!("{kind} {name}: the engine does not restart it")
        }
    }
}

/// The check's name, as the page's first column and the document's `check`.
fn check_name(finding: &Finding) -> String {
    match finding {
        Finding::WebhookCalled(_) => "webhook called".to_owned(),
        Finding::Request { .. } => "request annotation".to_owned(),
        Finding::NotInjectedYet { .. } => "not injected yet".to_owned(),
        Finding::Namespace { .. } => "namespace".to_owned(),
        Finding::RequestParses(_) => "request parses".to_owned(),
        Finding::Config { name, .. } => format!("config {name}"),
        Finding::Policy(_) => "policy".to_owned(),
    }
}

/// What the check found.
fn detail(finding: &Finding) -> String {
    match finding {
        Finding::WebhookCalled(why) => why.clone(),
        Finding::Request {
            key,
            value: Some(value),
            ..
        } => format!("{key}: {value:?}"),
        Finding::Request {
            key,
            value: None,
            other: Some(other),
        } => format!(
            "no {key} annotation; {other} is set, but this injector reads the {} prefix ({ANNOTATION_NAMESPACE})",
            key.trim_end_matches("/request"),
        ),
        Finding::Request {
            key,
            value: None,
            other: None,
        } => format!("no {key} annotation: the pod asks for no sidecar"),
        Finding::NotInjectedYet {
            key,
            status: Some(value),
        } => format!("{key}: {value:?}"),
        Finding::NotInjectedYet { key, status: None } => format!("{key} is not set"),
        Finding::Namespace {
            namespace,
            ignored: true,
        } => format!("{namespace} is ignored ({IGNORE_NAMESPACE})"),
        Finding::Namespace { namespace, .. } => format!("{namespace} is not ignored"),
        Finding::RequestParses(Ok(names)) => format!("asks for {}", names.join(", ")),
        Finding::RequestParses(Err(error)) => error.clone(),
        Finding::Config { found, .. } => config_detail(found),
        Finding::Policy(MissingSidecarPolicy::Deny) => {
            format!("{ON_MISSING_DENY}: a pod asking for what does not exist is refused")
        }
        Finding::Policy(MissingSidecarPolicy::Allow) => {
            format!("{ON_MISSING_ALLOW}: what exists is injected, the pod is let through")
        }
    }
}

fn config_detail(found: &ConfigFound) -> String {
    let manual = |manual: bool| if manual { "manual" } else { "auto" };
    match found {
        ConfigFound::Loaded {
            revision,
            origin,
            containers,
            manual: is_manual,
        } => format!(
            "revision {revision} from {origin} (containers: {}; rollout: {})",
            containers.join(", "),
            manual(*is_manual)
        ),
        ConfigFound::Missing { known } => format!(
            "no config defines it; known: {}",
            if known.is_empty() {
                "(none loaded)".to_owned()
            } else {
                known.join(", ")
            }
        ),
        ConfigFound::Published {
            revision: Some(revision),
            manual: is_manual,
        } => format!(
            "revision {revision}, as the running injectors publish it{}",
            if *is_manual { " (rollout: manual)" } else { "" }
        ),
        ConfigFound::Published { revision: None, .. } => {
            "the running injectors publish no revision of it".to_owned()
        }
    }
}

/// The outcome in a sentence, the page's `=>` line and the document's `message`.
fn message(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Inject(injected) => {
            let sidecars: Vec<String> = injected.sidecars.iter().map(injected_sidecar).collect();
            let mut message = format!("injects {}", sidecars.join(", "));
            if !injected.keeping_the_job_running.is_empty() {
                message.push_str(&format!(
                    "; {} run as regular containers and keep this Job from completing (`nativeSidecars: true` or `jobs` in the config makes them native sidecars)",
                    injected.keeping_the_job_running.join(", ")
                ));
            }
            for warning in &injected.warnings {
                message.push_str(&format!("; {warning}"));
            }
            if !injected.missing.is_empty() {
                let missing: Vec<String> = injected
                    .missing
                    .iter()
                    .map(|n| crate::name::quoted(n))
                    .collect();
                message.push_str(&format!(
                    "; {} not found, let through by {ON_MISSING_ALLOW}",
                    missing.join(", ")
                ));
            }
            message
        }
        Outcome::Skip { reason, keys } => skip_reason(reason, keys).map_or_else(
            || format!("not injected: it asks for no sidecar (no {})", keys.request),
            |why| format!("not injected: {why}"),
        ),
        Outcome::Deny(denial) => format!("denied: {denial}"),
        Outcome::NotCalled(whom) => format!(
            "not injected: the API server never calls the webhook for {}",
            match whom {
                NotCalled::Namespace(namespace) => format!("pods of namespace {namespace}"),
                NotCalled::Labels => "pods labelled as these".to_owned(),
            }
        ),
        Outcome::Unknown {
            unread,
            publishes,
            missing,
        } => {
            let mut parts = vec![format!(
                "unknown here: the sidecar configs cannot be read ({unread})"
            )];
            if !publishes.is_empty() {
                let publishes: Vec<String> = publishes
                    .iter()
                    .map(|(name, revision)| format!("{name} (revision {revision})"))
                    .collect();
                parts.push(format!(
                    "the running injectors publish {}, which the webhook injects unless the pod conflicts with its config",
                    publishes.join(", ")
                ));
            }
            if !missing.is_empty() {
                parts.push(format!(
                    "they publish no {}: the webhook denies the pod unless {ON_MISSING_ALLOW}",
                    missing.join(", ")
                ));
            }
            parts.join("; ")
        }
    }
}

/// `logger:v1 (revision abc, as native sidecars)`.
fn injected_sidecar(sidecar: &InjectedSidecar) -> String {
    let form = match (&sidecar.auto, sidecar.native) {
        (None, true) => ", as native sidecars".to_owned(),
        (Some(nodes), true) => format!(", as native sidecars: auto, {nodes}"),
        (Some(nodes), false) => format!(", classic: auto, {nodes}"),
        (None, false) => String::new(),
    };
    format!("{} (revision {}{form})", sidecar.name, sidecar.revision)
}

/// What the engine does with the workload, in a line of the page.
fn action_line(action: &WorkloadAction) -> String {
    match action {
        WorkloadAction::Restart {
            canary,
            reason,
            pods,
        } => format!(
            "restarted by the next plan{} ({pods} pod(s)): {reason}",
            if *canary {
                ", as its campaign's canary"
            } else {
                ""
            }
        ),
        WorkloadAction::Rolling { target, checks } if checks.is_empty() => {
            format!("restarted, rolling out to {target}")
        }
        WorkloadAction::Rolling { target, checks } => format!(
            "restarted, rolled out to {target}, {}",
            super::checks_standing(checks)
        ),
        WorkloadAction::Waiting { message } => format!("waits: {message}"),
        WorkloadAction::Succeeded => "restarted and rolled out".to_owned(),
        WorkloadAction::Failed { reason } => {
            format!("its restart failed: {}", super::failure_reason(reason))
        }
        WorkloadAction::FailedEarlier { message } => message.clone(),
        WorkloadAction::Unplanned { why } => format!("not planned here: {why}"),
        WorkloadAction::Nothing { .. }
        | WorkloadAction::LeftOut { .. }
        | WorkloadAction::StaleUnplanned
        | WorkloadAction::Current => format!("nothing to do: {}", nothing_why(action)),
    }
}

/// Why there is nothing to do, for the actions that do nothing.
fn nothing_why(action: &WorkloadAction) -> String {
    match action {
        WorkloadAction::Nothing { why } => why.clone(),
        WorkloadAction::LeftOut { why } => format!("the engine leaves its pods out: {why}"),
        WorkloadAction::StaleUnplanned => format!(
            "its pods are not current, but the engine plans nothing for it (excluded by its namespace, kind or the sidecar's manual rollout policy: see {DRIFT_REPORT})"
        ),
        _ => "its pods run the revisions in force".to_owned(),
    }
}

/// `3 (1 stale, 2 current)`, or `none`.
fn pods_line(pods: &WorkloadPods) -> String {
    if pods.count == 0 {
        return "none".to_owned();
    }
    let mut states: Vec<String> = pods
        .states
        .iter()
        .map(|(state, n)| format!("{n} {}", state.as_str()))
        .collect();
    let asking = pods.states.values().sum::<usize>();
    if asking < pods.count {
        states.push(format!("{} asking for no sidecar", pods.count - asking));
    }
    format!("{} ({})", pods.count, states.join(", "))
}

/// The answer as `explain` prints it.
pub(crate) struct Page<'a>(pub(crate) &'a Explanation);

impl fmt::Display for Page<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let answer = self.0;
        writeln!(f, "{}", answer.subject)?;
        writeln!(f, "\nInjection ({}):", answer.judged)?;
        for check in &answer.injection.checks {
            let mark = if check.passed { "ok " } else { "NO " };
            let name = check_name(&check.finding);
            writeln!(f, "  {mark} {name:<22} {}", detail(&check.finding))?;
        }
        writeln!(f, "  =>  {}", message(&answer.injection.outcome))?;
        if let Some(requests) = &answer.injection.requests {
            writeln!(f, "      effective requests: {requests}")?;
        }
        if let Some(pod_level) = &answer.injection.pod_resources {
            writeln!(f, "      pod-level resources: {pod_level}")?;
        }
        if let Some(pods) = &answer.workload_pods {
            writeln!(f, "\nIts pods: {}", pods_line(pods))?;
        }
        if let Some(pod) = &answer.pod {
            write_pod(f, pod, answer.workload_pods.as_ref())?;
        }
        if !answer.sidecars.is_empty() {
            writeln!(f, "\nDrift:")?;
            for sidecar in &answer.sidecars {
                write!(
                    f,
                    "  {:<24} {:<10} carries {}, in force {}",
                    sidecar.sidecar,
                    sidecar.state.as_str(),
                    sidecar.carried.as_deref().unwrap_or("-"),
                    sidecar.wanted.as_deref().unwrap_or("- (no config)")
                )?;
                match &sidecar.excluded {
                    Some(why) => writeln!(f, ": {why}")?,
                    None => writeln!(f)?,
                }
            }
        }
        write_foreign(f, &answer.foreign)?;
        if let Some(workload) = &answer.workload {
            writeln!(f, "\nRollout of {workload}:")?;
            let line = answer
                .rollout
                .as_ref()
                .map_or_else(|| "not planned here".to_owned(), action_line);
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// The sidecars other injectors add: what a new pod gets, the fields ignored, each pod.
fn write_foreign(f: &mut fmt::Formatter<'_>, foreign: &[ForeignFindings]) -> fmt::Result {
    if foreign.is_empty() {
        return Ok(());
    }
    writeln!(
        f,
        "\nSidecars other injectors add (a dry-run create of the template, asked twice):"
    )?;
    for sidecar in foreign {
        match (&sidecar.expected, &sidecar.unknown) {
            (Some(expected), _) => {
                writeln!(f, "  {}: a new pod gets {expected}", sidecar.container)?
            }
            (None, unknown) => writeln!(
                f,
                "  {}: what a new pod gets is not known: {}",
                sidecar.container,
                unknown.as_deref().unwrap_or_default()
            )?,
        }
        if !sidecar.ignored.is_empty() {
            writeln!(
                f,
                "    ignored (they differ at each admission): {}",
                sidecar.ignored.join(", ")
            )?;
        }
        for pod in &sidecar.pods {
            write!(f, "    {:<40} {:<10}", pod.pod, pod.state.as_str())?;
            if pod.changes.is_empty() {
                writeln!(f)?;
            } else {
                writeln!(f, " {}", super::foreign_changes(&pod.changes))?;
            }
        }
    }
    Ok(())
}

fn write_pod(f: &mut fmt::Formatter<'_>, pod: &PodState, of: Option<&WorkloadPods>) -> fmt::Result {
    match of.and_then(|p| Some((p.count, p.shown.as_ref()?))) {
        Some((1, name)) => writeln!(f, "\nPod {name}, its only pod:")?,
        Some((_, name)) => writeln!(f, "\nPod {name}, the first in the worst state:")?,
        None => writeln!(f, "\nThis pod:")?,
    }
    if pod.injected {
        let revisions: Vec<String> = pod
            .revisions
            .iter()
            .map(|(s, r)| format!("{s}={r}"))
            .collect();
        writeln!(
            f,
            "  injected: {}",
            if revisions.is_empty() {
                "yes (no revision recorded: injected by an older injector)".to_owned()
            } else {
                revisions.join(", ")
            }
        )?;
    } else {
        writeln!(f, "  not injected")?;
    }
    writeln!(f, "  containers: {}", pod.containers.join(", "))?;
    if !pod.native_sidecars.is_empty() {
        writeln!(f, "  native sidecars: {}", pod.native_sidecars.join(", "))?;
    }
    Ok(())
}

/// The answer as `explain -o json|yaml` prints it.
#[derive(Serialize)]
pub(crate) struct Document<'a> {
    subject: &'a str,
    judged: &'a str,
    injection: InjectionDocument<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workload_pods: Option<&'a WorkloadPods>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a PodState>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    sidecars: &'a [SidecarDrift],
    #[serde(skip_serializing_if = "Option::is_none")]
    workload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout: Option<ActionDocument<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    foreign: Vec<ForeignDocument<'a>>,
}

/// A sidecar another injector adds, with each pod's changes in words.
#[derive(Serialize)]
struct ForeignDocument<'a> {
    #[serde(flatten)]
    findings: &'a ForeignFindings,
    reasons: BTreeMap<&'a str, String>,
}

#[derive(Debug, Serialize)]
struct InjectionDocument<'a> {
    checks: Vec<CheckDocument>,
    verdict: Verdict,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    requests: Option<&'a RequestsChange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod_resources: Option<&'a PodResourcesChange>,
}

#[derive(Debug, PartialEq, Serialize)]
struct CheckDocument {
    check: String,
    passed: bool,
    detail: String,
}

#[derive(Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
enum ActionDocument<'a> {
    Restart {
        canary: bool,
        reason: &'a str,
        pods: u32,
    },
    Rolling {
        target: &'a str,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        checks: &'a [crate::rollout::analysis::CheckStanding],
    },
    Waiting {
        message: &'a str,
    },
    Succeeded,
    Failed {
        reason: String,
    },
    FailedEarlier {
        message: &'a str,
    },
    Nothing {
        why: String,
    },
    Unplanned {
        why: &'a str,
    },
}

impl<'a> Document<'a> {
    pub(crate) fn of(answer: &'a Explanation) -> Self {
        Self {
            subject: &answer.subject,
            judged: &answer.judged,
            injection: injection_document(&answer.injection),
            workload_pods: answer.workload_pods.as_ref(),
            pod: answer.pod.as_ref(),
            sidecars: &answer.sidecars,
            workload: answer.workload.as_deref(),
            rollout: answer.rollout.as_ref().map(action_document),
            foreign: answer
                .foreign
                .iter()
                .map(|findings| ForeignDocument {
                    findings,
                    reasons: findings
                        .pods
                        .iter()
                        .filter(|p| !p.changes.is_empty())
                        .map(|p| (p.pod.as_str(), super::foreign_changes(&p.changes)))
                        .collect(),
                })
                .collect(),
        }
    }
}

fn injection_document(injection: &InjectionExplanation) -> InjectionDocument<'_> {
    InjectionDocument {
        checks: injection.checks.iter().map(check_document).collect(),
        verdict: injection.verdict(),
        message: message(&injection.outcome),
        requests: injection.requests.as_ref(),
        pod_resources: injection.pod_resources.as_ref(),
    }
}

fn check_document(check: &Check) -> CheckDocument {
    CheckDocument {
        check: check_name(&check.finding),
        passed: check.passed,
        detail: detail(&check.finding),
    }
}

fn action_document(action: &WorkloadAction) -> ActionDocument<'_> {
    match action {
        WorkloadAction::Restart {
            canary,
            reason,
            pods,
        } => ActionDocument::Restart {
            canary: *canary,
            reason,
            pods: *pods,
        },
        WorkloadAction::Rolling { target, checks } => ActionDocument::Rolling { target, checks },
        WorkloadAction::Waiting { message } => ActionDocument::Waiting { message },
        WorkloadAction::Succeeded => ActionDocument::Succeeded,
        WorkloadAction::Failed { reason } => ActionDocument::Failed {
            reason: super::failure_reason(reason),
        },
        WorkloadAction::FailedEarlier { message } => ActionDocument::FailedEarlier { message },
        WorkloadAction::Unplanned { why } => ActionDocument::Unplanned { why },
        WorkloadAction::Nothing { .. }
        | WorkloadAction::LeftOut { .. }
        | WorkloadAction::StaleUnplanned
        | WorkloadAction::Current => ActionDocument::Nothing {
            why: nothing_why(action),
        },
    }
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
