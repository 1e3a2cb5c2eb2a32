use super::*;
use crate::workload::WorkloadKind;

/// A pod summary, built up by the test.
struct PodBuilder(PodSummary);

fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder(PodSummary {
        namespace: namespace.into(),
        name: name.into(),
        uid: format!("uid-{namespace}-{name}"),
        controller: None,
        containers: vec!["app".into()],
        started: Some(at(100)),
    })
}

impl PodBuilder {
    fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.0.controller = Some((kind.into(), name.into()));
        self
    }
    fn with_container(mut self, name: &str) -> Self {
        self.0.containers.push(name.into());
        self
    }
    fn started(mut self, seconds: i64) -> Self {
        self.0.started = Some(at(seconds));
        self
    }
    fn build(self) -> PodSummary {
        self.0
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

fn deployment_of<'a>(namespace: &'a str, replicaset: &'a str) -> Option<&'a str> {
    (namespace != "orphans")
        .then(|| replicaset.rsplit_once('-').map(|(d, _)| d))
        .flatten()
}

fn choose(pods: &[PodSummary], policy: &DriftPolicy, before: i64) -> ContainerSelection {
    select(SelectionInput {
        pods,
        containers: &["istio-proxy".to_owned()],
        started_before: at(before),
        policy,
        deployment_of: &deployment_of,
    })
}

fn names(selection: &ContainerSelection) -> Vec<String> {
    selection.workloads.keys().map(|w| w.to_string()).collect()
}

#[test]
fn only_workloads_whose_pods_run_the_container_are_chosen_once_each() {
    let pods = [
        pod("shop", "web-5d9-a")
            .owned_by("ReplicaSet", "web-5d9")
            .with_container("istio-proxy")
            .build(),
        pod("shop", "web-5d9-b")
            .owned_by("ReplicaSet", "web-5d9")
            .with_container("istio-proxy")
            .build(),
        pod("shop", "plain-77f-a")
            .owned_by("ReplicaSet", "plain-77f")
            .build(),
        pod("shop", "db-0")
            .owned_by("StatefulSet", "db")
            .with_container("istio-proxy")
            .build(),
        pod("shop", "agent-x")
            .owned_by("DaemonSet", "agent")
            .with_container("istio-proxy")
            .build(),
    ];
    let selection = choose(&pods, &DriftPolicy::default(), 200);
    assert_eq!(
        names(&selection),
        [
            "DaemonSet/shop/agent",
            "Deployment/shop/web",
            "StatefulSet/shop/db"
        ]
    );
    assert_eq!(
        selection.workloads[&WorkloadRef::new(WorkloadKind::Deployment, "shop", "web")].len(),
        2
    );
    assert!(selection.skipped.is_empty());
}

#[test]
fn an_init_container_of_that_name_counts() {
    let mut summary = pod("shop", "db-0").owned_by("StatefulSet", "db").build();
    summary.containers = vec!["istio-proxy".into(), "app".into()];
    let selection = choose(&[summary], &DriftPolicy::default(), 200);
    assert_eq!(names(&selection), ["StatefulSet/shop/db"]);
}

#[test]
fn pods_started_at_or_after_the_time_are_left_alone() {
    let pods = [
        pod("shop", "db-0")
            .owned_by("StatefulSet", "db")
            .with_container("istio-proxy")
            .started(150)
            .build(),
        pod("shop", "old-0")
            .owned_by("StatefulSet", "old")
            .with_container("istio-proxy")
            .started(149)
            .build(),
    ];
    let selection = choose(&pods, &DriftPolicy::default(), 150);
    assert_eq!(names(&selection), ["StatefulSet/shop/old"]);
}

#[test]
fn namespaces_follow_the_policy() {
    let pods = [
        pod("shop", "db-0")
            .owned_by("StatefulSet", "db")
            .with_container("istio-proxy")
            .build(),
        pod("kube-system", "dns-0")
            .owned_by("StatefulSet", "dns")
            .with_container("istio-proxy")
            .build(),
    ];
    let policy = DriftPolicy {
        exclude_namespaces: ["kube-system".to_owned()].into(),
        ..Default::default()
    };
    assert_eq!(names(&choose(&pods, &policy, 200)), ["StatefulSet/shop/db"]);
    let policy = DriftPolicy {
        include_namespaces: ["kube-system".to_owned()].into(),
        ..Default::default()
    };
    assert_eq!(
        names(&choose(&pods, &policy, 200)),
        ["StatefulSet/kube-system/dns"]
    );
}

#[test]
fn pods_nothing_can_restart_are_reported_not_chosen() {
    let pods = [
        pod("shop", "bare").with_container("istio-proxy").build(),
        pod("shop", "job-x")
            .owned_by("Job", "job")
            .with_container("istio-proxy")
            .build(),
        pod("orphans", "rs-a")
            .owned_by("ReplicaSet", "rs-a")
            .with_container("istio-proxy")
            .build(),
    ];
    let selection = choose(&pods, &DriftPolicy::default(), 200);
    assert!(selection.workloads.is_empty());
    let reasons: Vec<String> = selection
        .skipped
        .iter()
        .map(|s| s.reason.to_string())
        .collect();
    assert_eq!(
        reasons,
        [
            "a bare pod",
            "owned by Job job, which is not restarted",
            "owned by ReplicaSet rs-a, which no Deployment controls",
        ]
    );
    let policy = DriftPolicy {
        evict_bare_pods: true,
        ..Default::default()
    };
    assert_eq!(names(&choose(&pods[..1], &policy, 200)), ["Pod/shop/bare"]);
}

#[test]
fn a_workload_is_stale_until_its_chosen_pods_are_gone() {
    let pods = [
        pod("shop", "db-0")
            .owned_by("StatefulSet", "db")
            .with_container("istio-proxy")
            .build(),
        pod("shop", "db-1")
            .owned_by("StatefulSet", "db")
            .with_container("istio-proxy")
            .build(),
    ];
    let selection = choose(&pods, &DriftPolicy::default(), 200);
    let db = WorkloadRef::new(WorkloadKind::StatefulSet, "shop", "db");
    let mut live: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();

    let report = selection.report(&live);
    assert_eq!(report.workloads.len(), 1);
    let row = &report.workloads[0];
    assert_eq!(row.sidecar, "container/istio-proxy");
    assert!(row.needs_restart);
    assert_eq!((row.pods.stale, row.pods.current), (2, 0));
    assert_eq!(
        selection.pods_needing_restart(&db, &live),
        [
            PodToReplace::injected("db-0"),
            PodToReplace::injected("db-1")
        ]
    );

    // db-1 was evicted and came back under the same name with a new uid.
    live.remove("uid-shop-db-1");
    live.insert("uid-shop-db-1-new".into());
    assert_eq!(
        selection.pods_needing_restart(&db, &live),
        [PodToReplace::injected("db-0")]
    );
    live.remove("uid-shop-db-0");
    let report = selection.report(&live);
    assert!(!report.workloads[0].needs_restart);
    assert_eq!(report.workloads[0].state, DriftState::Current);
    assert!(selection.pods_needing_restart(&db, &live).is_empty());
}

#[test]
fn the_target_is_the_time_so_a_later_run_restarts_again() {
    let selection = choose(&[], &DriftPolicy::default(), 0);
    let targets = selection.targets();
    assert_eq!(targets.len(), 1);
    assert_eq!(
        targets["container/istio-proxy"].revision,
        "2023-11-14T22:13:20Z"
    );
    let later = choose(&[], &DriftPolicy::default(), 60);
    assert_ne!(later.revision(), selection.revision());
}

#[test]
fn the_reason_names_the_container_the_pods_and_the_time() {
    let pods = [pod("shop", "db-0")
        .owned_by("StatefulSet", "db")
        .with_container("istio-proxy")
        .build()];
    let selection = choose(&pods, &DriftPolicy::default(), 200);
    assert_eq!(
        selection.selected(&WorkloadRef::new(WorkloadKind::StatefulSet, "shop", "db")),
        SelectedPods {
            containers: vec!["istio-proxy".into()],
            pods: 1,
            started_before: "2023-11-14T22:16:40Z".into()
        }
    );
}

#[test]
fn a_foreign_reason_words_the_row_instead_of_the_start_time() {
    let pods = [
        pod("shop", "web-5d9-a")
            .owned_by("ReplicaSet", "web-5d9")
            .with_container("istio-proxy")
            .build(),
        pod("shop", "db-0")
            .owned_by("StatefulSet", "db")
            .with_container("istio-proxy")
            .build(),
    ];
    let mut selection = choose(&pods, &DriftPolicy::default(), 200);
    let web = WorkloadRef::new(WorkloadKind::Deployment, "shop", "web");
    let foreign = crate::drift::RowReason::Foreign {
        from: "aaa".into(),
        to: "bbb".into(),
        changes: vec![crate::foreign::ForeignChange::Image {
            container: "istio-proxy".into(),
            running: "proxyv2:1.27.1".into(),
            expected: "proxyv2:1.28.0".into(),
        }],
    };
    selection
        .reasons
        .insert((web.clone(), "istio-proxy".into()), foreign.clone());
    let live: HashSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
    let report = selection.report(&live);
    let why = |name: &str| {
        report
            .workloads
            .iter()
            .find(|w| w.name == name)
            .map(|w| w.why.clone())
            .unwrap()
    };
    assert_eq!(why("web"), foreign);
    assert!(matches!(
        why("db"),
        crate::drift::RowReason::StartedBefore { .. }
    ));
}
