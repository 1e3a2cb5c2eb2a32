//! `explain`'s answer as data, from values (no I/O, no sentences): why a pod, or the pods of
//! a workload's template, are or are not injected, the drift state of each sidecar a live pod
//! asks for, and what the rollout engine plans for its workload. The command gathers the
//! values (a file, or the cluster); the rendering layer words this.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::annotations::AnnotationKeys;
use crate::config::revision::stamp_items;
use crate::config::{RevisionsInForce, SidecarSet};
use crate::drift::{DriftState, sidecar_state};
use crate::injection::{
    Decision, Denial, InjectionSettings, MissingSidecarPolicy, PodView, SkipReason, decide,
};
use crate::name::SidecarName;
use crate::nodes::NativeSupport;
use crate::rollout::RolloutPlan;
use crate::workload::WorkloadRef;
pub use foreign::{ForeignFindings, ForeignPodFinding, foreign_findings};
pub use resources::{PodResourcesChange, RequestsChange};
use resources::{patched, pod_resources_change, requests_change};

mod foreign;
mod resources;

/// One check of the webhook's, in the order it makes them, with what it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub passed: bool,
    pub finding: Finding,
}

/// What one check looked at, as values; the rendering layer words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Whether the API server calls the webhook for the pod, and what selects it or leaves
    /// it out.
    WebhookCalled(String),
    /// The request annotation (`key`): its value, or the request annotation of another
    /// prefix set instead (`other`).
    Request {
        key: String,
        value: Option<String>,
        other: Option<String>,
    },
    /// The status annotation (`key`) and its value.
    NotInjectedYet {
        key: String,
        status: Option<String>,
    },
    Namespace {
        namespace: String,
        ignored: bool,
    },
    /// The sidecars the request names, or why it does not parse.
    RequestParses(Result<Vec<String>, String>),
    /// A requested sidecar's config.
    Config {
        name: String,
        found: ConfigFound,
    },
    /// The missing-sidecar policy, consulted when a requested sidecar is missing.
    Policy(MissingSidecarPolicy),
}

/// What stands behind a requested sidecar's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigFound {
    Loaded {
        revision: String,
        origin: String,
        containers: Vec<String>,
        manual: bool,
    },
    /// No config defines it; the names of those that exist.
    Missing { known: Vec<String> },
    /// The configs cannot be read here: the revision the running injectors publish of it.
    Published {
        revision: Option<String>,
        manual: bool,
    },
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

/// The webhook's outcome on the pod, with what it rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Inject(Injected),
    /// Skipped for `reason`, told with the annotations the webhook reads (`keys`).
    Skip {
        reason: SkipReason,
        keys: Box<AnnotationKeys>,
    },
    Deny(Denial),
    /// The API server never calls the webhook for these pods.
    NotCalled(NotCalled),
    /// The configs cannot be read here (`unread` says why): the sidecars the running
    /// injectors publish (name and revision), and those they do not.
    Unknown {
        unread: String,
        publishes: Vec<(String, String)>,
        missing: Vec<String>,
    },
}

impl Outcome {
    pub fn verdict(&self) -> Verdict {
        match self {
            Outcome::Inject(_) => Verdict::Inject,
            Outcome::Skip { .. } | Outcome::NotCalled(_) => Verdict::Skip,
            Outcome::Deny(_) => Verdict::Deny,
            Outcome::Unknown { .. } => Verdict::Unknown,
        }
    }
}

/// What an injection puts in the pod, and what it warns of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injected {
    pub sidecars: Vec<InjectedSidecar>,
    /// Sidecars that run as regular containers in a Job's pod and keep it from completing.
    pub keeping_the_job_running: Vec<String>,
    /// What the webhook warns the pod's creator of (a hold, a promotion gate).
    pub warnings: Vec<String>,
    /// Requested but not found, let through by the missing-sidecar policy.
    pub missing: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedSidecar {
    pub name: String,
    pub revision: String,
    pub native: bool,
    /// `nativeSidecars: auto` chose the form, by what the nodes run.
    pub auto: Option<NativeSupport>,
}

/// Whose pods the API server never sends to the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotCalled {
    Namespace(String),
    Labels,
}

/// What the webhook does with a pod: its checks up to the one that decides, and the outcome
/// (taken from the webhook's own decision, so the two cannot disagree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectionExplanation {
    pub checks: Vec<Check>,
    pub outcome: Outcome,
    /// The pod's effective requests before and after injection, when it is injected and
    /// requests anything.
    pub requests: Option<RequestsChange>,
    /// The pod-level resources (`spec.resources`) before and after injection, when the pod
    /// sets them.
    pub pod_resources: Option<PodResourcesChange>,
}

impl InjectionExplanation {
    pub fn verdict(&self) -> Verdict {
        self.outcome.verdict()
    }
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
    let outcome = match &decision {
        Decision::Inject(injection) => Outcome::Inject(injected(pod, keys, injection, sidecars)),
        Decision::Skip(reason) => Outcome::Skip {
            reason: reason.clone(),
            keys: Box::new(keys.clone()),
        },
        Decision::Deny(denial) => Outcome::Deny(denial.clone()),
    };
    let patched = match (&decision, json) {
        (Decision::Inject(injection), Some(json)) => patched(json, &injection.patch),
        _ => None,
    };
    let after = patched.as_ref().zip(json);
    InjectionExplanation {
        checks: checks(pod, namespace, sidecars, settings),
        outcome,
        requests: after.and_then(|(patched, pod)| requests_change(pod, patched)),
        pod_resources: after.and_then(|(patched, pod)| pod_resources_change(pod, patched)),
    }
}

fn injected(
    pod: &PodView<'_>,
    keys: &AnnotationKeys,
    injection: &crate::injection::Injection<'_>,
    sidecars: &SidecarSet,
) -> Injected {
    let native_for = crate::injection::NativeFor::of(pod, keys, sidecars.nodes());
    let injected = injection
        .injected
        .iter()
        .map(|(name, revision)| {
            let config = sidecars.get(name).map(|s| &s.config);
            let auto = config.is_some_and(|c| {
                c.native_sidecars() == crate::config::NativeSidecars::Auto
                    && !native_for.kept_classic
            });
            InjectedSidecar {
                name: name.to_string(),
                revision: revision.to_string(),
                native: config.is_some_and(|c| native_for.native(c)),
                auto: auto.then(|| native_for.nodes.clone()),
            }
        })
        .collect();
    Injected {
        sidecars: injected,
        keeping_the_job_running: if native_for.job_pod {
            native_for.keeping_the_job_running(injection, sidecars)
        } else {
            Vec::new()
        },
        warnings: injection
            .injected
            .iter()
            .filter_map(|(name, _)| sidecars.warning(name).map(str::to_owned))
            .collect(),
        missing: injection.missing.iter().map(ToString::to_string).collect(),
    }
}

/// What the webhook does with a pod of `namespace`, which the API server never sends to it
/// (`why`): nothing.
pub fn not_sent(namespace: &str, why: String) -> InjectionExplanation {
    not_called(NotCalled::Namespace(namespace.to_owned()), why)
}

/// The webhook is never called for these pods: an objectSelector leaves out their labels
/// (`why`).
pub fn not_sent_by_labels(why: String) -> InjectionExplanation {
    not_called(NotCalled::Labels, why)
}

fn not_called(whom: NotCalled, why: String) -> InjectionExplanation {
    InjectionExplanation {
        checks: vec![Check {
            passed: false,
            finding: Finding::WebhookCalled(why),
        }],
        outcome: Outcome::NotCalled(whom),
        requests: None,
        pod_resources: None,
    }
}

/// `explanation`, first saying what has the API server call the webhook for the namespace.
pub fn sent(mut explanation: InjectionExplanation, selected_by: String) -> InjectionExplanation {
    explanation.checks.insert(
        0,
        Check {
            passed: true,
            finding: Finding::WebhookCalled(selected_by),
        },
    );
    explanation
}

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
) -> InjectionExplanation {
    let mut publishes = Vec::new();
    let mut missing = Vec::new();
    for check in &mut explanation.checks {
        let Finding::Config { name, found } = &mut check.finding else {
            continue;
        };
        let revision = published.and_then(|p| p.get(name));
        check.passed = revision.is_some();
        match revision {
            Some(revision) => publishes.push((name.clone(), revision.to_string())),
            None => missing.push(name.clone()),
        }
        *found = ConfigFound::Published {
            revision: revision.map(ToString::to_string),
            manual: manual.contains(name.as_str()),
        };
    }
    if publishes.is_empty() && missing.is_empty() {
        return explanation;
    }
    explanation
        .checks
        .retain(|c| !matches!(c.finding, Finding::Policy(_)));
    explanation.outcome = Outcome::Unknown {
        unread: unread.to_owned(),
        publishes,
        missing,
    };
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
    let mut check = |passed: bool, finding: Finding| {
        checks.push(Check { passed, finding });
        passed
    };
    let request = annotation(&keys.request);
    let other = annotations.and_then(|a| {
        a.keys()
            .find(|k| k.ends_with("/request") && k.as_ref() != keys.request)
    });
    let Some(request) = request else {
        check(
            false,
            Finding::Request {
                key: keys.request.clone(),
                value: None,
                other: other.map(|k| k.to_string()),
            },
        );
        return checks;
    };
    check(
        true,
        Finding::Request {
            key: keys.request.clone(),
            value: Some(request.to_owned()),
            other: None,
        },
    );
    let status = annotation(&keys.status);
    if !check(
        status != Some(crate::annotations::STATUS_INJECTED),
        Finding::NotInjectedYet {
            key: keys.status.clone(),
            status: status.map(str::to_owned),
        },
    ) {
        return checks;
    }
    let ignored = settings.ignored_namespaces.contains(namespace);
    if !check(
        !ignored,
        Finding::Namespace {
            namespace: namespace.to_owned(),
            ignored,
        },
    ) {
        return checks;
    }
    let parsed = SidecarName::parse_list(request);
    let mut settled = check(
        parsed.is_ok(),
        Finding::RequestParses(match &parsed {
            Ok(names) => Ok(names.iter().map(ToString::to_string).collect()),
            Err(error) => Err(error.to_string()),
        }),
    );
    for name in parsed.iter().flatten() {
        let found = config_found(name, sidecars);
        settled &= !matches!(found, ConfigFound::Missing { .. });
        check(
            !matches!(found, ConfigFound::Missing { .. }),
            Finding::Config {
                name: name.to_string(),
                found,
            },
        );
    }
    if !settled {
        check(
            settings.on_missing_sidecar == MissingSidecarPolicy::Allow,
            Finding::Policy(settings.on_missing_sidecar),
        );
    }
    checks
}

/// What a requested sidecar's config is, or that none defines it.
fn config_found(name: &SidecarName, sidecars: &SidecarSet) -> ConfigFound {
    let Some(sidecar) = sidecars.get(name) else {
        return ConfigFound::Missing {
            known: sidecars.names().map(ToString::to_string).collect(),
        };
    };
    ConfigFound::Loaded {
        revision: sidecar.revision.to_string(),
        origin: sidecar.origin.to_string(),
        containers: sidecar
            .config
            .injected_containers()
            .map(|c| c.name.clone())
            .collect(),
        manual: sidecar.config.rollout_mode() == crate::config::RolloutMode::Manual,
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadAction {
    /// Restarted by the next plan.
    Restart {
        canary: bool,
        reason: String,
        pods: u32,
    },
    /// Restarted already, rolling out (or baking, with where its metric checks stand).
    Rolling {
        target: String,
        checks: Vec<crate::rollout::analysis::CheckStanding>,
    },
    /// Stale, waiting (the message says for what, and until when).
    Waiting { message: String },
    /// Restarted and rolled out; current.
    Succeeded,
    /// Its restart failed.
    Failed {
        reason: crate::rollout::FailureReason,
    },
    /// Its restart failed earlier under the revision in force: not restarted again under it.
    FailedEarlier { message: String },
    /// Nothing to do, for what the command found (no pods, no sidecar asked for...).
    Nothing { why: String },
    /// Nothing to do: the engine leaves its pods out, for this reason.
    LeftOut { why: String },
    /// Its pods are not current, yet the engine plans nothing for it: its namespace, kind or
    /// its sidecar's manual rollout policy leaves it out.
    StaleUnplanned,
    /// Nothing to do: its pods run the revisions in force.
    Current,
    /// Not planned here: what planning needs cannot be read.
    Unplanned { why: String },
}

pub fn workload_action(
    plan: &RolloutPlan,
    workload: &WorkloadRef,
    sidecars: &[SidecarDrift],
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
            checks: rolling.checks.clone(),
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
        return WorkloadAction::LeftOut {
            why: why.to_owned(),
        };
    }
    if sidecars.iter().any(|s| s.state.needs_restart(false)) {
        WorkloadAction::StaleUnplanned
    } else {
        WorkloadAction::Current
    }
}

/// The whole answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// `Pod team-a/web-7d9f` or the file's object.
    pub subject: String,
    /// What the injection part judged: the pod itself, or its workload's pod template (what
    /// new pods get).
    pub judged: String,
    pub injection: InjectionExplanation,
    /// Asked about a workload: its pods, and which one `pod` and `sidecars` describe.
    pub workload_pods: Option<WorkloadPods>,
    pub pod: Option<PodState>,
    pub sidecars: Vec<SidecarDrift>,
    pub workload: Option<String>,
    pub rollout: Option<WorkloadAction>,
    /// Asked with `--foreign-sidecar` about a workload: the sidecars other injectors add.
    pub foreign: Vec<ForeignFindings>,
}

#[cfg(test)]
#[allow(clippy::too_many_lines)] // a test reads as one scenario
mod tests;
