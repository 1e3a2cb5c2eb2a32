//! `explain`'s answer, from values (no I/O): why a pod, or the pods of a workload's template,
//! are or are not injected, the drift state of each sidecar a live pod asks for, and what the
//! rollout engine plans for its workload. The command gathers the values (a file, or the
//! cluster) and prints this.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::annotations::AnnotationKeys;
use crate::config::revision::stamp_items;
use crate::config::{RevisionsInForce, SidecarSet};
use crate::drift::{DriftState, sidecar_state};
use crate::injection::{
    Decision, InjectionSettings, MissingSidecarPolicy, PodView, Spelling, decide,
};
use crate::name::SidecarName;
use crate::rollout::RolloutPlan;
use crate::workload::WorkloadRef;
pub use resources::{PodResourcesChange, RequestsChange};
use resources::{patched, pod_resources_change, requests_change};

mod resources;

/// One check of the webhook's, in the order it makes them, with what it found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Inject,
    Skip,
    Deny,
    /// The configs the decision turns on cannot be read here.
    Unknown,
}

/// What the webhook does with a pod: its checks up to the one that decides, and the outcome
/// (taken from the webhook's own decision, so the two cannot disagree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InjectionExplanation {
    pub checks: Vec<Check>,
    pub verdict: Verdict,
    pub message: String,
    /// The pod's effective requests before and after injection, when it is injected and
    /// requests anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestsChange>,
    /// The pod-level resources (`spec.resources`) before and after injection, when the pod
    /// sets them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_resources: Option<PodResourcesChange>,
}

/// The webhook's decision on `pod` (in `namespace`), explained.
pub fn injection(
    pod: &PodView<'_>,
    json: Option<&serde_json::Value>,
    namespace: &str,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> InjectionExplanation {
    let keys = &settings.keys;
    let decision = decide(pod, namespace, sidecars, settings);
    let (verdict, message) = match &decision {
        Decision::Inject(injection) => {
            let native_for = crate::injection::NativeFor::of(pod, keys, sidecars.nodes());
            let form = |name: &crate::name::SidecarName| {
                sidecars.get(name).map_or(String::new(), |s| {
                    let native = native_for.native(&s.config);
                    let auto = s.config.native_sidecars() == crate::config::NativeSidecars::Auto
                        && !native_for.kept_classic;
                    match (native, auto) {
                        (true, false) => ", as native sidecars".to_owned(),
                        (true, true) => format!(", as native sidecars: auto, {}", native_for.nodes),
                        (false, true) => format!(", classic: auto, {}", native_for.nodes),
                        (false, false) => String::new(),
                    }
                })
            };
            let injected: Vec<String> = injection
                .injected
                .iter()
                .map(|(name, revision)| format!("{name} (revision {revision}{})", form(name)))
                .collect();
            let mut message = format!("injects {}", injected.join(", "));
            let classic = if native_for.job_pod {
                native_for.keeping_the_job_running(injection, sidecars)
            } else {
                Vec::new()
            };
            if !classic.is_empty() {
                message.push_str(&format!(
                    "; {} run as regular containers and keep this Job from completing (`nativeSidecars: true` or `jobs` in the config makes them native sidecars)",
                    classic.join(", ")
                ));
            }
            // A hold or a promotion gate: what the webhook warns the pod's creator of.
            for (name, _) in &injection.injected {
                if let Some(warning) = sidecars.warning(name) {
                    message.push_str(&format!("; {warning}"));
                }
            }
            if !injection.missing.is_empty() {
                let missing: Vec<String> = injection
                    .missing
                    .iter()
                    .map(|n| crate::name::quoted(&n.to_string()))
                    .collect();
                message.push_str(&format!(
                    "; {} not found, let through by {}",
                    missing.join(", "),
                    settings.spelling.on_missing_sidecar_allow
                ));
            }
            (Verdict::Inject, message)
        }
        Decision::Skip(reason) => (
            Verdict::Skip,
            reason.describe(settings).map_or_else(
                || format!("not injected: it asks for no sidecar (no {})", keys.request),
                |why| format!("not injected: {why}"),
            ),
        ),
        Decision::Deny(denial) => (Verdict::Deny, format!("denied: {denial}")),
    };
    let patched = match (&decision, json) {
        (Decision::Inject(injection), Some(json)) => patched(json, &injection.patch),
        _ => None,
    };
    let after = patched.as_ref().zip(json);
    InjectionExplanation {
        checks: checks(pod, namespace, sidecars, settings),
        verdict,
        message,
        requests: after.and_then(|(patched, pod)| requests_change(pod, patched)),
        pod_resources: after.and_then(|(patched, pod)| pod_resources_change(pod, patched)),
    }
}

/// What the webhook does with a pod of `namespace`, which the API server never sends to it
/// (`why`): nothing.
pub fn not_sent(namespace: &str, why: String) -> InjectionExplanation {
    not_called(format!("pods of namespace {namespace}"), why)
}

/// The webhook is never called for these pods: an objectSelector leaves out their labels
/// (`why`).
pub fn not_sent_by_labels(why: String) -> InjectionExplanation {
    not_called("pods labelled as these".to_owned(), why)
}

fn not_called(whom: String, why: String) -> InjectionExplanation {
    InjectionExplanation {
        checks: vec![Check {
            check: WEBHOOK_CALLED.to_owned(),
            passed: false,
            detail: why,
        }],
        verdict: Verdict::Skip,
        message: format!("not injected: the API server never calls the webhook for {whom}"),
        requests: None,
        pod_resources: None,
    }
}

/// `explanation`, first saying what has the API server call the webhook for the namespace.
pub fn sent(mut explanation: InjectionExplanation, selected_by: String) -> InjectionExplanation {
    explanation.checks.insert(
        0,
        Check {
            check: WEBHOOK_CALLED.to_owned(),
            passed: true,
            detail: selected_by,
        },
    );
    explanation
}

const WEBHOOK_CALLED: &str = "webhook called";
/// The check of a requested sidecar's config: this, then its name.
const CONFIG_CHECK: &str = "config ";
const POLICY_CHECK: &str = "policy";

/// `explanation`, judged against no config because the configs cannot be read here (`unread`
/// says why), told as what it is: the decision is unknown here, and each requested sidecar's
/// check says what the running injectors publish of it instead of "no config defines it",
/// and whether its rollout is left to a person (`manual`, as they publish it).
/// Unchanged when the decision came before the configs (no request, injected already...).
pub fn without_configs(
    mut explanation: InjectionExplanation,
    unread: &str,
    published: Option<&RevisionsInForce>,
    manual: &std::collections::BTreeSet<String>,
    spelling: &Spelling,
) -> InjectionExplanation {
    let mut publishes = Vec::new();
    let mut missing = Vec::new();
    for check in &mut explanation.checks {
        let Some(name) = check.check.strip_prefix(CONFIG_CHECK) else {
            continue;
        };
        let revision = published.and_then(|p| p.get(name));
        check.passed = revision.is_some();
        check.detail = match revision {
            Some(revision) => {
                publishes.push(format!("{name} (revision {revision})"));
                format!(
                    "revision {revision}, as the running injectors publish it{}",
                    if manual.contains(name) {
                        " (rollout: manual)"
                    } else {
                        ""
                    }
                )
            }
            None => {
                missing.push(name.to_owned());
                "the running injectors publish no revision of it".to_owned()
            }
        };
    }
    if publishes.is_empty() && missing.is_empty() {
        return explanation;
    }
    explanation.checks.retain(|c| c.check != POLICY_CHECK);
    let mut parts = vec![format!(
        "unknown here: the sidecar configs cannot be read ({unread})"
    )];
    if !publishes.is_empty() {
        parts.push(format!(
            "the running injectors publish {}, which the webhook injects unless the pod conflicts with its config",
            publishes.join(", ")
        ));
    }
    if !missing.is_empty() {
        parts.push(format!(
            "they publish no {}: the webhook denies the pod unless {}",
            missing.join(", "),
            spelling.on_missing_sidecar_allow
        ));
    }
    let message = parts.join("; ");
    explanation.verdict = Verdict::Unknown;
    explanation.message = message;
    explanation
}

/// The webhook's checks in its order, stopping at the first that ends the decision.
fn checks(
    pod: &PodView<'_>,
    namespace: &str,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> Vec<Check> {
    let keys = &settings.keys;
    let annotations = pod.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(AsRef::as_ref);
    let mut checks = Vec::new();
    let mut check = |check: &str, passed: bool, detail: String| {
        checks.push(Check {
            check: check.to_owned(),
            passed,
            detail,
        });
        passed
    };
    let Some(request) = annotation(&keys.request) else {
        check("request annotation", false, no_request(pod, settings));
        return checks;
    };
    check(
        "request annotation",
        true,
        format!("{}: {request:?}", keys.request),
    );
    let status = annotation(&keys.status);
    if !check(
        "not injected yet",
        status != Some(crate::annotations::STATUS_INJECTED),
        match status {
            Some(value) => format!("{}: {value:?}", keys.status),
            None => format!("{} is not set", keys.status),
        },
    ) {
        return checks;
    }
    let ignored = settings.ignored_namespaces.contains(namespace);
    if !check(
        "namespace",
        !ignored,
        if ignored {
            format!(
                "{namespace} is ignored ({})",
                settings.spelling.ignore_namespace
            )
        } else {
            format!("{namespace} is not ignored")
        },
    ) {
        return checks;
    }
    let parsed = SidecarName::parse_list(request);
    let mut settled = check(
        "request parses",
        parsed.is_ok(),
        match &parsed {
            Ok(names) => {
                let list: Vec<String> = names.iter().map(ToString::to_string).collect();
                format!("asks for {}", list.join(", "))
            }
            Err(error) => error.to_string(),
        },
    );
    for name in parsed.iter().flatten() {
        let found = sidecars.get(name).is_some();
        settled &= found;
        check(
            &format!("{CONFIG_CHECK}{name}"),
            found,
            config_detail(name, sidecars),
        );
    }
    if !settled {
        check(
            POLICY_CHECK,
            settings.on_missing_sidecar == MissingSidecarPolicy::Allow,
            policy_detail(settings),
        );
    }
    checks
}

/// Why there is no request: none at all, or one under another annotation namespace.
fn no_request(pod: &PodView<'_>, settings: &InjectionSettings) -> String {
    let keys = &settings.keys;
    let other = pod.metadata.annotations.as_ref().and_then(|a| {
        a.keys()
            .find(|k| k.ends_with("/request") && k.as_ref() != keys.request)
    });
    match other {
        Some(other) => format!(
            "no {} annotation; {other} is set, but this injector reads the {} prefix ({})",
            keys.request,
            keys.request.trim_end_matches("/request"),
            settings.spelling.annotation_namespace
        ),
        None => format!(
            "no {} annotation: the pod asks for no sidecar",
            keys.request
        ),
    }
}

/// What a requested sidecar's config is, or that none defines it.
fn config_detail(name: &SidecarName, sidecars: &SidecarSet) -> String {
    let Some(sidecar) = sidecars.get(name) else {
        let known: Vec<String> = sidecars.names().map(ToString::to_string).collect();
        return format!(
            "no config defines it; known: {}",
            if known.is_empty() {
                "(none loaded)".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    let containers: Vec<&str> = sidecar
        .config
        .injected_containers()
        .map(|c| c.name.as_str())
        .collect();
    format!(
        "revision {} from {} (containers: {}; rollout: {})",
        sidecar.revision,
        sidecar.origin,
        containers.join(", "),
        match sidecar.config.rollout_mode() {
            crate::config::RolloutMode::Auto => "auto",
            crate::config::RolloutMode::Manual => "manual",
        }
    )
}

fn policy_detail(settings: &InjectionSettings) -> String {
    let spelling = settings.spelling;
    match settings.on_missing_sidecar {
        MissingSidecarPolicy::Deny => format!(
            "{}: a pod asking for what does not exist is refused",
            spelling.on_missing_sidecar_deny
        ),
        MissingSidecarPolicy::Allow => format!(
            "{}: what exists is injected, the pod is let through",
            spelling.on_missing_sidecar_allow
        ),
    }
}

/// A live pod's own state: injected or not, and the revisions it carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodState {
    pub injected: bool,
    pub revisions: BTreeMap<String, String>,
    pub containers: Vec<String>,
    /// Its init containers with `restartPolicy: Always`: the sidecars it runs natively.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub native_sidecars: Vec<String>,
}

impl PodState {
    pub fn read(
        annotations: &BTreeMap<String, String>,
        keys: &AnnotationKeys,
        containers: Vec<String>,
    ) -> Self {
        Self {
            injected: annotations.get(&keys.status).map(String::as_str)
                == Some(crate::annotations::STATUS_INJECTED),
            revisions: annotations
                .get(&keys.revision)
                .map(|stamp| {
                    stamp_items(stamp)
                        .map(|(s, r)| (s.to_owned(), r.to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
            containers,
            native_sidecars: Vec::new(),
        }
    }
}

/// One sidecar a live pod asks for: what it carries, what is in force, and the drift state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SidecarDrift {
    pub sidecar: String,
    pub carried: Option<String>,
    pub wanted: Option<String>,
    pub state: DriftState,
    /// Why the pod is `excluded`, as `drift` says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
}

/// The drift state of each sidecar `request` names: `excluded`, for the reason `exclusion`
/// gives (the pod's namespace or owner, as `drift` judges them), else by the one staleness
/// rule; `wanted` gives the revision in force of a sidecar.
pub fn sidecar_drift(
    request: &str,
    pod: &PodState,
    wanted: impl Fn(&str) -> Option<String>,
    exclusion: Option<&str>,
) -> Vec<SidecarDrift> {
    let Ok(names) = SidecarName::parse_list(request) else {
        return Vec::new();
    };
    names
        .iter()
        .map(|name| {
            let sidecar = name.to_string();
            let carried = pod.revisions.get(&sidecar).cloned();
            let wanted = wanted(&sidecar);
            SidecarDrift {
                state: match exclusion {
                    Some(_) => DriftState::Excluded,
                    None => sidecar_state(pod.injected, carried.as_deref(), wanted.as_deref()),
                },
                excluded: exclusion.map(str::to_owned),
                sidecar,
                carried,
                wanted,
            }
        })
        .collect()
}

/// The pods of a workload asked about by kind and name: how many, how many in each state
/// (a pod counted once, in the worst state of the sidecars it asks for), and the one shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkloadPods {
    pub count: usize,
    /// Pods by their worst state; a pod that asks for no sidecar is in none.
    pub states: BTreeMap<DriftState, usize>,
    /// The pod the answer shows: the first in the worst state of all, or the first pod when
    /// none asks for a sidecar.
    pub shown: Option<String>,
}

impl WorkloadPods {
    /// `pods`, each with the drift of the sidecars it asks for, in the order to choose from:
    /// the summary, and the index of the pod to show.
    pub fn of(pods: &[(String, Vec<SidecarDrift>)]) -> (Self, Option<usize>) {
        let mut states = BTreeMap::new();
        let mut shown: Option<(usize, Option<u8>)> = None;
        for (index, (_, sidecars)) in pods.iter().enumerate() {
            let worst = sidecars
                .iter()
                .map(|s| s.state)
                .reduce(|a, b| if b.severity() > a.severity() { b } else { a });
            if let Some(state) = worst {
                *states.entry(state).or_default() += 1;
            }
            let severity = worst.map(DriftState::severity);
            if shown.is_none_or(|(_, best)| severity > best) {
                shown = Some((index, severity));
            }
        }
        let index = shown.map(|(index, _)| index);
        let summary = Self {
            count: pods.len(),
            states,
            shown: index.map(|i| pods[i].0.clone()),
        };
        (summary, index)
    }
}

/// What the engine plans for a workload now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum WorkloadAction {
    /// Restarted by the next plan.
    Restart {
        canary: bool,
        reason: String,
        pods: u32,
    },
    /// Restarted already, rolling out.
    Rolling { target: String },
    /// Stale, waiting (the message says for what, and until when).
    Waiting { message: String },
    /// Restarted and rolled out; current.
    Succeeded,
    /// Its restart failed.
    Failed { reason: String },
    /// Its restart failed earlier under the revision in force: not restarted again under it.
    FailedEarlier { message: String },
    /// Nothing to do.
    Nothing { why: String },
    /// Not planned here: what planning needs cannot be read.
    Unplanned { why: String },
}

pub fn workload_action(
    plan: &RolloutPlan,
    workload: &WorkloadRef,
    sidecars: &[SidecarDrift],
    spelling: &Spelling,
) -> WorkloadAction {
    if let Some(restart) = plan.restarts.iter().find(|r| &r.workload == workload) {
        return WorkloadAction::Restart {
            canary: restart.canary,
            reason: restart.reason.clone(),
            pods: restart.pods,
        };
    }
    if let Some(rolling) = plan.rolling.iter().find(|r| &r.workload == workload) {
        return WorkloadAction::Rolling {
            target: rolling.target.as_str().to_owned(),
        };
    }
    if let Some(waiting) = plan.waiting.iter().find(|w| &w.workload == workload) {
        return WorkloadAction::Waiting {
            message: waiting.message.clone(),
        };
    }
    if let Some(failure) = plan.failed.iter().find(|f| &f.workload == workload) {
        return WorkloadAction::Failed {
            reason: failure.reason.clone(),
        };
    }
    if let Some(earlier) = plan.failed_earlier.iter().find(|f| &f.workload == workload) {
        return WorkloadAction::FailedEarlier {
            message: earlier.message.clone(),
        };
    }
    if plan.succeeded.contains(workload) {
        return WorkloadAction::Succeeded;
    }
    if let Some(why) = sidecars.iter().find_map(|s| s.excluded.as_deref()) {
        return WorkloadAction::Nothing {
            why: format!("the engine leaves its pods out: {why}"),
        };
    }
    let needs = sidecars.iter().any(|s| s.state.needs_restart(false));
    WorkloadAction::Nothing {
        why: if needs {
            format!(
                "its pods are not current, but the engine plans nothing for it (excluded by its namespace, kind or the sidecar's manual rollout policy: see {})",
                spelling.drift
            )
        } else {
            "its pods run the revisions in force".to_owned()
        },
    }
}

impl WorkloadAction {
    /// The action in a line of the text form.
    fn describe(&self) -> String {
        match self {
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
            WorkloadAction::Rolling { target } => format!("restarted, rolling out to {target}"),
            WorkloadAction::Waiting { message } => format!("waits: {message}"),
            WorkloadAction::Succeeded => "restarted and rolled out".to_owned(),
            WorkloadAction::Failed { reason } => format!("its restart failed: {reason}"),
            WorkloadAction::FailedEarlier { message } => message.clone(),
            WorkloadAction::Nothing { why } => format!("nothing to do: {why}"),
            WorkloadAction::Unplanned { why } => format!("not planned here: {why}"),
        }
    }
}

/// `3 (1 stale, 2 current)`, or `none`.
impl fmt::Display for WorkloadPods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 0 {
            return f.write_str("none");
        }
        let mut states: Vec<String> = self
            .states
            .iter()
            .map(|(state, n)| format!("{n} {}", state.as_str()))
            .collect();
        let asking = self.states.values().sum::<usize>();
        if asking < self.count {
            states.push(format!("{} asking for no sidecar", self.count - asking));
        }
        write!(f, "{} ({})", self.count, states.join(", "))
    }
}

/// The whole answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// `Pod team-a/web-7d9f` or the file's object.
    pub subject: String,
    /// What the injection part judged: the pod itself, or its workload's pod template (what
    /// new pods get).
    pub judged: String,
    pub injection: InjectionExplanation,
    /// Asked about a workload: its pods, and which one `pod` and `sidecars` describe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_pods: Option<WorkloadPods>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodState>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<SidecarDrift>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<WorkloadAction>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.subject)?;
        writeln!(f, "\nInjection ({}):", self.judged)?;
        for check in &self.injection.checks {
            let mark = if check.passed { "ok " } else { "NO " };
            writeln!(f, "  {mark} {:<22} {}", check.check, check.detail)?;
        }
        writeln!(f, "  =>  {}", self.injection.message)?;
        if let Some(requests) = &self.injection.requests {
            writeln!(f, "      effective requests: {requests}")?;
        }
        if let Some(pod_level) = &self.injection.pod_resources {
            writeln!(f, "      pod-level resources: {pod_level}")?;
        }
        if let Some(pods) = &self.workload_pods {
            writeln!(f, "\nIts pods: {pods}")?;
        }
        if let Some(pod) = &self.pod {
            match self
                .workload_pods
                .as_ref()
                .and_then(|p| Some((p.count, p.shown.as_ref()?)))
            {
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
        }
        if !self.sidecars.is_empty() {
            writeln!(f, "\nDrift:")?;
            for sidecar in &self.sidecars {
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
        if let Some(workload) = &self.workload {
            writeln!(f, "\nRollout of {workload}:")?;
            let line = self
                .rollout
                .as_ref()
                .map_or_else(|| "not planned here".to_owned(), WorkloadAction::describe);
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
