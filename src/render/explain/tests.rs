use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::config::{LoadedSidecar, RevisionsInForce, SidecarSet, parse_config};
use crate::drift::DriftState;
use crate::explain::PodState;
use crate::explain::{injection, not_sent, sent, sidecar_drift, without_configs, workload_action};
use crate::injection::{InjectionSettings, PodView};
use crate::rollout::{Restart, RolloutPlan, WaitReason, Waiting};
use crate::test_fixtures::drift_of;
use crate::workload::{WorkloadKind, WorkloadRef};

fn sidecars() -> SidecarSet {
    let text = "name: logger:v1\ncontainers: [{name: log-shipper, image: shipper:1}]\n";
    let config = parse_config("config/logger-v1.yaml", text).unwrap().config;
    std::iter::once(LoadedSidecar::new(config, "config/logger-v1.yaml")).collect()
}

fn settings(policy: MissingSidecarPolicy) -> InjectionSettings {
    InjectionSettings {
        keys: AnnotationKeys::new("injector"),
        ignored_namespaces: ["kube-system".to_owned()].into(),
        on_missing_sidecar: policy,
    }
}

fn pod(annotations: Value) -> Value {
    json!({
        "kind": "Pod",
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    })
}

fn explain(pod: &Value, namespace: &str, policy: MissingSidecarPolicy) -> Said {
    let view = PodView::deserialize(pod).unwrap();
    said(&injection(
        &view,
        Some(pod),
        namespace,
        &sidecars(),
        &settings(policy),
    ))
}

/// The explanation as its reader sees it: the checks, the verdict and the message in words.
#[derive(Debug)]
struct Said {
    checks: Vec<CheckDocument>,
    verdict: Verdict,
    message: String,
}

fn said(explanation: &InjectionExplanation) -> Said {
    let document = injection_document(explanation);
    Said {
        checks: document.checks,
        verdict: document.verdict,
        message: document.message,
    }
}

fn failed(explanation: &Said) -> Vec<(&str, &str)> {
    explanation
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| (c.check.as_str(), c.detail.as_str()))
        .collect()
}

#[test]
fn an_injected_request_names_the_config_revision_and_origin() {
    let explained = explain(
        &pod(json!({"injector/request": "logger:v1"})),
        "team",
        MissingSidecarPolicy::Deny,
    );
    assert_eq!(explained.verdict, Verdict::Inject);
    let revision = sidecars().iter().next().unwrap().revision.to_string();
    assert_eq!(
        explained.message,
        format!("injects logger:v1 (revision {revision})")
    );
    let config = explained
        .checks
        .iter()
        .find(|c| c.check == "config logger:v1")
        .unwrap();
    assert!(config.passed);
    assert_eq!(
        config.detail,
        format!(
            "revision {revision} from config/logger-v1.yaml (containers: log-shipper; rollout: auto)"
        )
    );
    assert!(failed(&explained).is_empty(), "{explained:#?}");
}

#[test]
fn an_injection_says_what_the_webhook_warns_of_a_hold_or_a_gate() {
    let name: crate::name::SidecarName = "logger:v1".parse().unwrap();
    let warning = "sidecar logger:v1 is held at 876339fe41bc: its revision bd97243767c7 waits for promotion (promoted by `sidecar-injector rollout --promote logger:v1`)";
    let served = sidecars().with_warnings([(name, std::sync::Arc::from(warning))].into());
    let pod = pod(json!({"injector/request": "logger:v1"}));
    let view = PodView::deserialize(&pod).unwrap();
    let explained = said(&injection(
        &view,
        Some(&pod),
        "team",
        &served,
        &settings(MissingSidecarPolicy::Deny),
    ));
    let revision = sidecars().iter().next().unwrap().revision.to_string();
    assert_eq!(
        explained.message,
        format!("injects logger:v1 (revision {revision}); {warning}")
    );
}

#[test]
fn each_reason_to_skip_or_deny_is_the_failing_check_and_the_verdict() {
    use MissingSidecarPolicy::{Allow, Deny};
    // (annotations, namespace, policy, verdict, failing check, its detail contains, message contains)
    let cases = [
        (
            json!({}),
            "team",
            Deny,
            Verdict::Skip,
            "request annotation",
            "no injector/request annotation: the pod asks for no sidecar",
            "it asks for no sidecar",
        ),
        (
            json!({"injector.tumblr.com/request": "logger:v1"}),
            "team",
            Deny,
            Verdict::Skip,
            "request annotation",
            "injector.tumblr.com/request is set, but this injector reads the injector prefix",
            "is --annotation-namespace right?",
        ),
        (
            json!({"injector/request": "logger:v1", "injector/status": "injected"}),
            "team",
            Deny,
            Verdict::Skip,
            "not injected yet",
            "injector/status: \"injected\"",
            "already injected",
        ),
        (
            json!({"injector/request": "logger:v1"}),
            "kube-system",
            Deny,
            Verdict::Skip,
            "namespace",
            "kube-system is ignored",
            "namespace kube-system is ignored",
        ),
        (
            json!({"injector/request": "logger:v1,,:x"}),
            "team",
            Deny,
            Verdict::Deny,
            "request parses",
            "",
            "denied: annotation injector/request:",
        ),
        (
            json!({"injector/request": "logger:v9"}),
            "team",
            Deny,
            Verdict::Deny,
            "config logger:v9",
            "no config defines it; known: logger:v1",
            "denied: sidecar \"logger:v9\" not found",
        ),
        (
            json!({"injector/request": "logger:v9"}),
            "team",
            Allow,
            Verdict::Skip,
            "config logger:v9",
            "known: logger:v1",
            "let through by --on-missing-sidecar=allow",
        ),
    ];
    for (annotations, namespace, policy, verdict, check, detail, message) in cases {
        let explained = explain(&pod(annotations.clone()), namespace, policy);
        assert_eq!(explained.verdict, verdict, "{annotations}: {explained:#?}");
        let failing = failed(&explained);
        assert!(
            failing
                .iter()
                .any(|(c, d)| *c == check && d.contains(detail)),
            "{annotations}: {failing:?}"
        );
        assert!(
            explained.message.contains(message),
            "{annotations}: {}",
            explained.message
        );
        // The checks stop at the one that decides, except the policy note after it.
        let last = explained.checks.last().unwrap();
        assert!(
            last.check == check || last.check == "policy",
            "{annotations}: {:#?}",
            explained.checks
        );
    }
}

#[test]
fn an_excluded_workload_is_said_to_be_left_out_for_its_reason_and_its_drift_lines_say_it() {
    let web = WorkloadRef::new(WorkloadKind::Deployment, "legacy", "web");
    let keys = AnnotationKeys::new("injector");
    let uninjected = PodState::read(&BTreeMap::new(), &keys, vec!["app".into()]);
    let why = "namespace legacy is not sent to the webhook";
    let wanted = |_: &str| Some("bbb".to_owned());
    let drift = sidecar_drift("logger:v1", &uninjected, wanted, Some(why));
    let action = workload_action(&RolloutPlan::default(), &web, &drift);
    assert_eq!(
        action,
        WorkloadAction::LeftOut {
            why: why.to_owned()
        }
    );
    assert_eq!(
        action_line(&action),
        format!("nothing to do: the engine leaves its pods out: {why}")
    );
    let (summary, _) = WorkloadPods::of(&[("web-1".into(), drift.clone())]);
    let explanation = Explanation {
        subject: "Deployment legacy/web".into(),
        judged: "new pods of Deployment web".into(),
        injection: not_sent("legacy", why.to_owned()),
        workload_pods: Some(summary),
        pod: Some(uninjected),
        sidecars: drift,
        workload: Some("Deployment legacy/web".into()),
        rollout: Some(WorkloadAction::Nothing {
            why: "the engine leaves its pods out".into(),
        }),
        foreign: Vec::new(),
    };
    let text = Page(&explanation).to_string();
    assert!(text.contains("Its pods: 1 (1 excluded)"), "{text}");
    assert!(
        text.contains(&format!(
            "logger:v1                excluded   carries -, in force bbb: {why}\n"
        )),
        "{text}"
    );
}

#[test]
fn the_workload_action_is_what_the_plan_says_for_it() {
    let web = WorkloadRef::new(WorkloadKind::Deployment, "team", "web");
    let api = WorkloadRef::new(WorkloadKind::Deployment, "team", "api");
    let stale = [SidecarDrift {
        sidecar: "logger:v1".into(),
        carried: Some("aaa".into()),
        wanted: Some("bbb".into()),
        state: DriftState::Stale,
        excluded: None,
    }];
    let plan = RolloutPlan {
        restarts: vec![Restart {
            reason: "sidecar logger:v1 changed".into(),
            canary: true,
            pods: 2,
            ..crate::test_fixtures::restart(web.clone(), Vec::new())
        }],
        waiting: vec![Waiting {
            workload: api.clone(),
            sidecars: vec!["logger:v1".into()],
            reason: WaitReason::Canary {
                sidecar: "logger:v1".into(),
            },
            message: "waits for the canary of logger:v1".into(),
        }],
        ..RolloutPlan::default()
    };
    assert_eq!(
        workload_action(&plan, &web, &stale),
        WorkloadAction::Restart {
            canary: true,
            reason: "sidecar logger:v1 changed".into(),
            pods: 2
        }
    );
    assert_eq!(
        workload_action(&plan, &api, &stale),
        WorkloadAction::Waiting {
            message: "waits for the canary of logger:v1".into()
        }
    );
    let other = WorkloadRef::new(WorkloadKind::Deployment, "team", "other");
    let failed = WorkloadRef::new(WorkloadKind::Deployment, "team", "failed");
    let earlier = crate::rollout::FailedEarlier::new(
        failed.clone(),
        "logger:v1",
        "bbb",
        Some(&"not rolled out within 5m".into()),
    );
    let plan = RolloutPlan {
        failed_earlier: vec![earlier.clone()],
        ..plan
    };
    assert_eq!(
        workload_action(&plan, &failed, &stale),
        WorkloadAction::FailedEarlier {
            message: earlier.message
        },
        "a workload failed under the revision is not said to be excluded"
    );
    let stale_unplanned = workload_action(&plan, &other, &stale);
    assert_eq!(stale_unplanned, WorkloadAction::StaleUnplanned);
    let why = nothing_why(&stale_unplanned);
    assert!(why.contains("not current"), "{why}");
    assert!(why.ends_with("see `sidecar-injector drift`)"), "{why}");
    let current = workload_action(&plan, &other, &[]);
    assert_eq!(current, WorkloadAction::Current);
    assert_eq!(nothing_why(&current), "its pods run the revisions in force");
    let document = serde_json::to_value(action_document(&current)).unwrap();
    assert_eq!(
        document,
        json!({"action": "nothing", "why": "its pods run the revisions in force"})
    );
}

#[test]
fn a_workload_answer_names_its_pods_and_the_one_it_describes() {
    let template = pod(json!({"injector/request": "logger:v1"}));
    let view = PodView::deserialize(&template).unwrap();
    let pods = vec![
        ("web-a".to_owned(), drift_of(&[DriftState::Current])),
        ("web-b".to_owned(), drift_of(&[DriftState::Stale])),
        ("web-c".to_owned(), vec![]),
    ];
    let (summary, shown) = WorkloadPods::of(&pods);
    let keys = AnnotationKeys::new("injector");
    let mut answer = Explanation {
        subject: "Deployment team/web".to_owned(),
        judged: "new pods of Deployment web".to_owned(),
        injection: injection(
            &view,
            None,
            "team",
            &sidecars(),
            &settings(MissingSidecarPolicy::Deny),
        ),
        workload_pods: Some(summary),
        pod: Some(PodState::read(&BTreeMap::new(), &keys, vec!["app".into()])),
        sidecars: pods[shown.unwrap()].1.clone(),
        workload: Some("Deployment team/web".to_owned()),
        rollout: None,
        foreign: Vec::new(),
    };
    let page = Page(&answer).to_string();
    assert!(
        page.contains("Its pods: 3 (1 stale, 1 current, 1 asking for no sidecar)"),
        "{page}"
    );
    assert!(
        page.contains("Pod web-b, the first in the worst state:"),
        "{page}"
    );
    assert!(!page.contains("This pod"), "{page}");
    let json = serde_json::to_value(Document::of(&answer)).unwrap();
    assert_eq!(json["workload_pods"]["states"]["stale"], 1, "{json:#}");
    assert_eq!(json["workload_pods"]["shown"], "web-b", "{json:#}");

    answer.workload_pods = Some(WorkloadPods::of(&pods[..1]).0);
    assert!(
        Page(&answer)
            .to_string()
            .contains("Pod web-a, its only pod:")
    );
    assert!(!Page(&answer).to_string().contains("native sidecars:"));
    // A pod that runs a sidecar natively says so, in the page and the JSON.
    answer.pod.as_mut().unwrap().native_sidecars = vec!["proxy".into()];
    assert!(
        Page(&answer)
            .to_string()
            .contains("\n  native sidecars: proxy\n"),
        "{answer:?}"
    );
    assert_eq!(
        serde_json::to_value(Document::of(&answer)).unwrap()["pod"]["native_sidecars"],
        json!(["proxy"])
    );

    answer.workload_pods = Some(WorkloadPods::of(&[]).0);
    answer.pod = None;
    answer.sidecars.clear();
    let page = Page(&answer).to_string();
    assert!(page.contains("Its pods: none"), "{page}");
    assert!(!page.contains("Pod web"), "{page}");
}

#[test]
fn whether_the_api_server_calls_the_webhook_comes_first() {
    let asked = pod(json!({"injector/request": "logger:v1"}));
    let why = "namespace legacy is not sent to the webhook (MutatingWebhookConfiguration sidecar-injector: its namespaceSelector wants sidecar-injector.io/injection notin (disabled))";
    let left_out = said(&not_sent("legacy", why.to_owned()));
    assert_eq!(left_out.verdict, Verdict::Skip);
    assert_eq!(
        left_out.message,
        "not injected: the API server never calls the webhook for pods of namespace legacy"
    );
    assert_eq!(failed(&left_out), [("webhook called", why)]);
    assert_eq!(left_out.checks.len(), 1, "no check of the webhook's own");

    let view = PodView::deserialize(&asked).unwrap();
    let settings = settings(MissingSidecarPolicy::Deny);
    let decided = injection(&view, Some(&asked), "team", &sidecars(), &settings);
    let reached = said(&sent(
        decided.clone(),
        "MutatingWebhookConfiguration sidecar-injector selects namespace team".to_owned(),
    ));
    let decided = said(&decided);
    assert_eq!(reached.verdict, decided.verdict);
    assert_eq!(reached.message, decided.message);
    assert_eq!(reached.checks[0].check, "webhook called");
    assert!(reached.checks[0].passed);
    assert_eq!(reached.checks[1..], decided.checks[..]);
}

#[test]
fn configs_that_cannot_be_read_here_leave_the_decision_unknown_and_say_what_is_published() {
    let unread =
        "the ConfigMaps of injector-system labelled sidecar-injector.io/config=true: forbidden";
    let judged = |annotations: Value| {
        let pod = pod(annotations);
        let view = PodView::deserialize(&pod).unwrap();
        let explained = injection(
            &view,
            None,
            "team",
            &SidecarSet::default(),
            &settings(MissingSidecarPolicy::Deny),
        );
        let published: RevisionsInForce = [
            ("logger:v1".to_owned(), "876339fe41bc".to_owned()),
            ("metrics-agent:v1".to_owned(), "222e989f9b95".to_owned()),
        ]
        .into_iter()
        .collect();
        let manual = ["metrics-agent:v1".to_owned()].into();
        said(&without_configs(
            explained,
            unread,
            Some(&published),
            &manual,
        ))
    };
    let explained = judged(json!({"injector/request": "logger:v1,metrics-agent:v1,tracer:v1"}));
    assert_eq!(explained.verdict, Verdict::Unknown, "{explained:#?}");
    assert_eq!(
        explained.message,
        format!(
            "unknown here: the sidecar configs cannot be read ({unread}); the running injectors publish logger:v1 (revision 876339fe41bc), metrics-agent:v1 (revision 222e989f9b95), which the webhook injects unless the pod conflicts with its config; they publish no tracer:v1: the webhook denies the pod unless --on-missing-sidecar=allow"
        )
    );
    let checks: Vec<(&str, bool, &str)> = explained
        .checks
        .iter()
        .map(|c| (c.check.as_str(), c.passed, c.detail.as_str()))
        .collect();
    assert_eq!(
        checks[checks.len() - 3..],
        [
            (
                "config logger:v1",
                true,
                "revision 876339fe41bc, as the running injectors publish it"
            ),
            (
                "config metrics-agent:v1",
                true,
                "revision 222e989f9b95, as the running injectors publish it (rollout: manual)"
            ),
            (
                "config tracer:v1",
                false,
                "the running injectors publish no revision of it"
            ),
        ],
        "no policy check judged on configs never read"
    );
    // Decided before any config: unchanged.
    let injected = judged(json!({"injector/request": "logger:v1", "injector/status": "injected"}));
    assert_eq!(injected.verdict, Verdict::Skip);
    let none = judged(json!({}));
    assert_eq!(none.verdict, Verdict::Skip);
}

#[test]
fn a_jobs_pod_is_told_which_sidecars_keep_it_running_and_which_are_native() {
    let mut job_pod = pod(json!({"injector/request": "logger:v1"}));
    job_pod["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly", "uid": "u", "controller": true}
    ]);
    let explained = explain(&job_pod, "team", MissingSidecarPolicy::Deny);
    assert!(
        explained
            .message
            .ends_with("; logger:v1 run as regular containers and keep this Job from completing (`nativeSidecars: true` or `jobs` in the config makes them native sidecars)"),
        "{}",
        explained.message
    );
    // Not a Job's pod: nothing to say.
    let plain = explain(
        &pod(json!({"injector/request": "logger:v1"})),
        "team",
        MissingSidecarPolicy::Deny,
    );
    assert!(!plain.message.contains("Job"), "{}", plain.message);
    // Native in Jobs' pods: said, and no warning.
    let text = "name: logger:v1\nnativeSidecars: jobs\ncontainers: [{name: log-shipper, image: shipper:1}]\n";
    let native: SidecarSet = std::iter::once(LoadedSidecar::new(
        parse_config("config/logger-v1.yaml", text).unwrap().config,
        "config/logger-v1.yaml",
    ))
    .collect();
    let view = PodView::deserialize(&job_pod).unwrap();
    let explained = said(&injection(
        &view,
        None,
        "team",
        &native,
        &settings(MissingSidecarPolicy::Deny),
    ));
    assert!(
        explained.message.ends_with(", as native sidecars)"),
        "{}",
        explained.message
    );
    // Chosen by the nodes: which way, and why.
    let text = text.replace("nativeSidecars: jobs", "nativeSidecars: auto");
    let auto: SidecarSet = std::iter::once(LoadedSidecar::new(
        parse_config("config/logger-v1.yaml", &text).unwrap().config,
        "config/logger-v1.yaml",
    ))
    .collect();
    let plain_pod = pod(json!({"injector/request": "logger:v1"}));
    let plain = PodView::deserialize(&plain_pod).unwrap();
    let on = |nodes: &[(&str, &str)]| {
        let set = auto.with_nodes(std::sync::Arc::new(crate::nodes::NodeKubelets::listed(
            nodes.iter().copied(),
        )));
        said(&injection(
            &plain,
            None,
            "team",
            &set,
            &settings(MissingSidecarPolicy::Deny),
        ))
        .message
    };
    let native = on(&[("a", "v1.36.3")]);
    assert!(
        native.ends_with(
            ", as native sidecars: auto, every node's kubelet runs native sidecars (1.29+))"
        ),
        "{native}"
    );
    let classic = on(&[("a", "v1.36.3"), ("b", "v1.27.1")]);
    assert!(
        classic
            .ends_with(", classic: auto, node b runs kubelet 1.27, before native sidecars (1.29))"),
        "{classic}"
    );
    let unknown = on(&[]);
    assert!(
        unknown.ends_with(", classic: auto, the nodes' kubelet versions are not known)"),
        "{unknown}"
    );
}

#[test]
fn a_pods_controller_says_whether_anything_restarts_it() {
    use crate::cluster::owners::Controller;
    use crate::workload::OwnerKind;
    let cases = [
        (
            Controller::BarePod { evicted: false },
            "a bare pod: nothing restarts it but --evict-bare-pods",
        ),
        (
            Controller::BarePod { evicted: true },
            "a bare pod: --evict-bare-pods has the engine evict it",
        ),
        (
            Controller::ReplicaSet {
                name: "web-5d9".into(),
                deployment: Some("web".into()),
            },
            "ReplicaSet web-5d9 of Deployment web",
        ),
        (
            Controller::ReplicaSet {
                name: "plain-77f".into(),
                deployment: None,
            },
            "ReplicaSet plain-77f, with no Deployment: nothing rolls it",
        ),
        (
            Controller::Workload {
                kind: crate::workload::WorkloadKind::StatefulSet,
                name: "db".into(),
            },
            "StatefulSet db",
        ),
        (
            Controller::Workload {
                kind: crate::workload::WorkloadKind::DaemonSet,
                name: "agent".into(),
            },
            "DaemonSet agent",
        ),
        (
            Controller::Other {
                kind: OwnerKind::parse("Job"),
                name: "nightly".into(),
            },
            "Job nightly: the engine does not restart it",
        ),
    ];
    for (owner, words) in cases {
        assert_eq!(controller(&owner), words);
    }
}
