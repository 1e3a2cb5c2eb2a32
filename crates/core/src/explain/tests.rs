use serde::Deserialize;
use serde_json::json;

use super::*;
use crate::config::{LoadedSidecar, parse_config};
use crate::test_fixtures::drift_of;

fn settings(policy: MissingSidecarPolicy) -> InjectionSettings {
    InjectionSettings {
        keys: AnnotationKeys::new("injector"),
        ignored_namespaces: ["kube-system".to_owned()].into(),
        on_missing_sidecar: policy,
    }
}

#[test]
fn drift_of_a_live_pod_follows_the_one_staleness_rule() {
    let keys = AnnotationKeys::new("injector");
    let annotations: BTreeMap<String, String> = [
        ("injector/status", "injected"),
        ("injector/revision", "logger:v1=aaa,tracer:v1=bbb"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let pod = PodState::read(&annotations, &keys, vec!["app".into()]);
    assert!(pod.injected);
    let wanted = |sidecar: &str| match sidecar {
        "logger:v1" => Some("aaa".to_owned()),
        "tracer:v1" => Some("ccc".to_owned()),
        _ => None,
    };
    let drift = sidecar_drift("logger:v1, tracer:v1, gone:v1", &pod, wanted, None);
    let states: Vec<(&str, DriftState)> = drift
        .iter()
        .map(|d| (d.sidecar.as_str(), d.state))
        .collect();
    assert_eq!(
        states,
        [
            ("logger:v1", DriftState::Current),
            ("tracer:v1", DriftState::Stale),
            ("gone:v1", DriftState::Orphaned)
        ]
    );
    let uninjected = PodState::read(&BTreeMap::new(), &keys, vec!["app".into()]);
    let drift = sidecar_drift("logger:v1", &uninjected, wanted, None);
    assert_eq!(drift[0].state, DriftState::Uninjected);
    assert_eq!(drift[0].excluded, None);

    // Left out by its namespace or owner, as `drift` says: excluded whatever it carries.
    let why = "namespace legacy is not sent to the webhook (MutatingWebhookConfiguration x: it has no webhook)";
    for pod in [&pod, &uninjected] {
        let drift = sidecar_drift("logger:v1, tracer:v1", pod, wanted, Some(why));
        for sidecar in &drift {
            assert_eq!(sidecar.state, DriftState::Excluded, "{sidecar:?}");
            assert_eq!(sidecar.excluded.as_deref(), Some(why));
        }
    }
}

#[test]
fn a_workload_shows_the_first_of_its_pods_in_the_worst_state_and_counts_each_pod_once() {
    use DriftState::{Current, Excluded, Stale, Uninjected, Unknown};
    let pods: Vec<(String, Vec<SidecarDrift>)> = [
        ("web-a", vec![Current]),
        ("web-b", vec![Current, Stale]),
        ("web-c", vec![]),
        ("web-d", vec![Unknown, Stale]),
        ("web-e", vec![Excluded]),
    ]
    .into_iter()
    .map(|(name, states)| (name.to_owned(), drift_of(&states)))
    .collect();
    let (summary, shown) = WorkloadPods::of(&pods);
    assert_eq!(shown, Some(1), "web-b is the first stale pod");
    assert_eq!(summary.shown.as_deref(), Some("web-b"));
    assert_eq!(summary.count, 5);
    assert_eq!(
        summary.states,
        [(Excluded, 1), (Stale, 2), (Current, 1)].into(),
        "a pod counts once, in its worst state; web-c asks for nothing"
    );

    // An uninjected pod is worse than a stale one, wherever it comes.
    let mut pods = pods;
    pods.push(("web-f".to_owned(), drift_of(&[Uninjected])));
    assert_eq!(WorkloadPods::of(&pods).1, Some(5));

    // No pod asks for a sidecar: the first is shown; no pod at all: none is.
    let asking_none = vec![("a".to_owned(), vec![]), ("b".to_owned(), vec![])];
    let (summary, shown) = WorkloadPods::of(&asking_none);
    assert_eq!((shown, summary.states.len()), (Some(0), 0));
    let (summary, shown) = WorkloadPods::of(&[]);
    assert_eq!((shown, summary.count, summary.shown), (None, 0, None));
}

#[test]
fn the_effective_requests_before_and_after_are_counted_as_the_kubelet_does() {
    let text = "name: proxy:v1\nnativeSidecars: true\ncontainers:\n  - {name: proxy, image: p:1, resources: {requests: {cpu: 100m, memory: 64Mi}}}\n";
    let set: SidecarSet = std::iter::once(LoadedSidecar::new(
        parse_config("config/proxy.yaml", text).unwrap().config,
        "config/proxy.yaml",
    ))
    .collect();
    let pod = json!({
        "kind": "Pod",
        "metadata": {"name": "web", "annotations": {"injector/request": "proxy:v1"}},
        "spec": {
            "initContainers": [{"name": "migrate", "image": "m:1", "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}],
            "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}}]
        }
    });
    let view = PodView::deserialize(&pod).unwrap();
    let explained = injection(
        &view,
        Some(&pod),
        "team",
        &set,
        &settings(MissingSidecarPolicy::Deny),
    );
    let requests = explained.requests.expect("it requests resources");
    // The native proxy runs beside migrate, which now peaks at 1100m and 320Mi.
    assert_eq!(
        requests.to_string(),
        "cpu 1 -> 1100m, memory 256Mi -> 320Mi"
    );
    // Classic, the proxy only adds to the app containers, below migrate's peak.
    let classic_text = text.replace("nativeSidecars: true\n", "");
    let classic: SidecarSet = std::iter::once(LoadedSidecar::new(
        parse_config("config/proxy.yaml", &classic_text)
            .unwrap()
            .config,
        "config/proxy.yaml",
    ))
    .collect();
    let explained = injection(
        &view,
        Some(&pod),
        "team",
        &classic,
        &settings(MissingSidecarPolicy::Deny),
    );
    assert_eq!(
        explained.requests.unwrap().to_string(),
        "cpu 1 -> 1, memory 256Mi -> 256Mi"
    );
}
