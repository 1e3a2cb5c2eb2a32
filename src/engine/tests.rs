//! The executor's requests against a mock API (a `tower` service standing in for the
//! apiserver): the bodies it sends, and what it does with 409, 429 and 500 answers.

use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::drift::PodToReplace;
use crate::rollout::machine::Observed;
use crate::rollout::{Restart, SidecarChange};
use crate::test_fixtures::within;

/// One request the engine sent.
#[derive(Debug, Clone)]
struct Sent {
    method: String,
    path: String,
    content_type: String,
    body: Value,
}

/// How the mock answers a write: by method and a piece of the path.
type Answer = fn(&str, &str) -> (StatusCode, Value);

fn status(code: StatusCode, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "message": reason, "code": code.as_u16()})
}

/// Reads succeed with nothing; writes are answered by `answer`.
fn mock_client(answer: Answer) -> (Client, Arc<Mutex<Vec<Sent>>>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let log = sent.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let log = log.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let method = parts.method.to_string();
            let path = parts.uri.path().to_owned();
            let (code, reply) = if method == "GET" {
                let list = json!({"kind": "List", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": "1"}, "items": []});
                (StatusCode::OK, list)
            } else {
                log.lock().unwrap().push(Sent {
                    method: method.clone(),
                    path: path.clone(),
                    content_type: parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                });
                answer(&method, &path)
            };
            let response = Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    (Client::new(service, "default"), sent)
}

fn engine(client: Client) -> (Engine, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let options = EngineOptions {
        mode: EngineMode::Auto,
        settings: RolloutSettings::default(),
        keys: AnnotationKeys::default(),
        policy: DriftPolicy::default(),
        namespace: "injector-system".into(),
        replan_every: Duration::from_secs(5),
        ignore_manual_policy: false,
        kinds: None,
        reason_prefix: None,
        prometheus: None,
    };
    let recorder = crate::cluster::events::recorder(client.clone(), Some("injector-0".into()));
    (
        Engine::new(
            client.clone(),
            options.clone(),
            metrics.clone(),
            recorder,
            crate::cluster::status::watch_status(client, &options.namespace),
        ),
        metrics,
    )
}

fn restart_of_web() -> Restart {
    let web = WorkloadRef::new(WorkloadKind::Deployment, "team", "web");
    let change = SidecarChange {
        what: Some(r#"containers[shipper].image "1.0" -> "2.0""#.into()),
        ..crate::test_fixtures::stale_change("logger:v1", "aaaaaaaaaaaa", "bbbbbbbbbbbb")
    };
    let mut restart = Restart {
        target: Some(crate::config::RevisionStamp::sorted([(
            "logger:v1",
            "bbbbbbbbbbbb",
        )])),
        canary: true,
        pods: 2,
        ..crate::test_fixtures::restart(web, vec![change])
    };
    crate::render::word_restart(&mut restart);
    restart
}

fn answer_ok(method: &str, path: &str) -> (StatusCode, Value) {
    let object = if path.contains("/events") {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
               "eventTime": "2026-11-22T00:00:00.000000Z"})
    } else {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "team", "resourceVersion": "7"}})
    };
    let code = if method == "POST" {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (code, object)
}

/// Carries out one effect, as a step of the engine acting would.
async fn perform(engine: &mut Engine, effect: Effect, now: Timestamp) {
    engine
        .perform(
            effect,
            &FollowedPods::default(),
            Authority::Act,
            &SidecarSet::default(),
            now,
        )
        .await;
}

/// Evicts the pod the state picks of `pods`, if one may go now.
async fn evict_next(
    engine: &mut Engine,
    workload: &WorkloadRef,
    pods: &[PodToReplace],
    healthy: bool,
) {
    if let Ok(effect) = engine
        .state
        .next_eviction(workload, pods, healthy, Timestamp::now())
    {
        perform(engine, effect, Timestamp::now()).await;
    }
}

/// The engine acting on `plan` over an empty index: the state's transitions, then its effects.
async fn act(engine: &mut Engine, plan: RolloutPlan, now: Timestamp) {
    let index = crate::drift::DriftIndex::default();
    let report = crate::drift::DriftReport::default();
    let settings = RolloutSettings::default();
    let history = RevisionHistory::default();
    let observed = Observed {
        report: &report,
        index: &index,
        targets: &BTreeMap::new(),
        settings: &settings,
        history: &history,
        stale_pods: &|_| Vec::new(),
        restart_reason: None,
        bakes_changed: &BTreeSet::new(),
        served: None,
    };
    let mut step = engine
        .state
        .carry(plan, &observed, now, Conduct::Act { record: false });
    engine.word(&mut step, now);
    for effect in step.effects {
        perform(engine, effect, now).await;
    }
}

fn metric(metrics: &Metrics, line: &str) -> bool {
    metrics.encode().lines().any(|l| l == line)
}

#[tokio::test]
async fn a_restart_is_one_merge_patch_of_the_template_stamps_and_one_event() {
    let (client, sent) = mock_client(answer_ok);
    let (mut engine, metrics) = engine(client);
    engine.keep_summary();
    let now: Timestamp = "2026-11-22T10:00:00Z".parse().unwrap();
    let restart = restart_of_web();
    perform(&mut engine, Effect::PatchTemplate(restart.clone()), now).await;

    let sent = sent.lock().unwrap().clone();
    let patches: Vec<&Sent> = sent.iter().filter(|s| s.method == "PATCH").collect();
    assert_eq!(patches.len(), 1, "{sent:#?}");
    let patch = patches[0];
    assert_eq!(patch.path, "/apis/apps/v1/namespaces/team/deployments/web");
    assert_eq!(patch.content_type, "application/merge-patch+json");
    let reason = restart.reason.clone();
    assert_eq!(
        patch.body,
        json!({
            "metadata": {"annotations": {
                "injector/rolled-at": "2026-11-22T10:00:00Z",
                "kubernetes.io/change-cause": format!("sidecar-injector: {reason}"),
            }},
            "spec": {"template": {"metadata": {"annotations": {
                "injector/rollout-revision": "logger:v1=bbbbbbbbbbbb",
                "injector/rollout-reason": reason,
                "injector/rollout-heal": null,
            }}}}
        })
    );
    let events: Vec<&Sent> = sent.iter().filter(|s| s.path.contains("/events")).collect();
    assert_eq!(events.len(), 1, "{sent:#?}");
    let event = &events[0].body;
    assert_eq!(event["reason"], "SidecarRestart");
    assert_eq!(event["type"], "Normal");
    assert_eq!(
        event["action"],
        "Restart logger:v1 aaaaaaaaaaaa->bbbbbbbbbbbb"
    );
    assert_eq!(event["regarding"]["kind"], "Deployment");
    assert_eq!(event["regarding"]["name"], "web");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .starts_with("restarted by sidecar-injector (canary): sidecar logger:v1")
    );
    assert!(metric(
        &metrics,
        r#"sidecar_injector_rollouts_total{kind="Deployment",result="restarted"} 1"#
    ));
    assert!(engine.summary().restarted.contains(&restart.workload));
}

#[tokio::test]
async fn a_pause_is_announced_on_the_workloads_that_caused_it() {
    let (client, sent) = mock_client(answer_ok);
    let (mut engine, _metrics) = engine(client);
    let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-22T10:00:00Z".parse().unwrap(),
    );
    let mut campaign = crate::test_fixtures::campaign(
        "bbbbbbbbbbbb",
        crate::rollout::CampaignState::Paused,
        at.clone(),
    );
    let fail = |name: &str| crate::rollout::Failure {
        workload: WorkloadRef::new(WorkloadKind::Deployment, "team", name),
        reason: "not rolled out within 5m".into(),
        at: at.clone(),
    };
    campaign.record_failure(fail("canary"));
    campaign.resume();
    campaign.record_failure(fail("web"));
    campaign.record_failure(fail("api"));
    engine
        .state
        .book
        .campaigns
        .insert("logger:v1".into(), campaign);
    let pause = crate::rollout::pause::Pause {
        revision: "bbbbbbbbbbbb".into(),
        failed: 2,
        named: vec![
            (
                WorkloadRef::new(WorkloadKind::Deployment, "team", "web"),
                "not rolled out within 5m".into(),
            ),
            (
                WorkloadRef::new(WorkloadKind::Deployment, "team", "api"),
                "not rolled out within 5m".into(),
            ),
        ],
        new_pods: crate::rollout::pause::WhilePaused::NotHeld,
    };
    let plan = RolloutPlan {
        pauses: vec![("logger:v1".into(), pause.clone())],
        book: engine.state.book.clone(),
        ..RolloutPlan::default()
    };
    act(&mut engine, plan, Timestamp::now()).await;

    let sent = sent.lock().unwrap().clone();
    let regarding: Vec<(&str, &str)> = sent
        .iter()
        .filter(|s| s.path.contains("/events") && s.body["reason"] == "SidecarRolloutPaused")
        .map(|s| {
            (
                s.body["regarding"]["kind"].as_str().unwrap(),
                s.body["regarding"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        regarding,
        [
            ("Deployment", "web"),
            ("Deployment", "api"),
            ("ConfigMap", "sidecar-injector-status")
        ],
        "the canary's failure was resumed: its pause was announced then"
    );
    // Each in the words of the pause, which the engine keeps in the book it writes.
    let words = crate::render::pause_reason("logger:v1", &pause);
    assert!(
        sent.iter()
            .filter(|s| s.body["reason"] == "SidecarRolloutPaused")
            .all(|s| s.body["note"] == words.as_str()),
        "{sent:#?}"
    );
    assert_eq!(
        engine.state.book.campaigns["logger:v1"]
            .pause_reason
            .as_deref(),
        Some(words.as_str())
    );
}

#[tokio::test]
async fn a_heal_marks_the_template_with_its_target() {
    let (client, sent) = mock_client(answer_ok);
    let (mut engine, _metrics) = engine(client);
    let restart = Restart {
        heal: true,
        ..restart_of_web()
    };
    perform(
        &mut engine,
        Effect::PatchTemplate(restart),
        Timestamp::now(),
    )
    .await;
    let sent = sent.lock().unwrap().clone();
    let patch = sent.iter().find(|s| s.method == "PATCH").unwrap();
    let annotations = &patch.body["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        annotations["injector/rollout-heal"],
        "logger:v1=bbbbbbbbbbbb"
    );
    assert_eq!(
        annotations["injector/rollout-revision"],
        "logger:v1=bbbbbbbbbbbb"
    );
}

#[tokio::test]
async fn a_refused_patch_is_counted_as_an_error_and_announces_nothing() {
    fn refuse(_: &str, _: &str) -> (StatusCode, Value) {
        let code = StatusCode::INTERNAL_SERVER_ERROR;
        (code, status(code, "InternalError"))
    }
    let (client, sent) = mock_client(refuse);
    let (mut engine, metrics) = engine(client);
    engine.keep_summary();
    perform(
        &mut engine,
        Effect::PatchTemplate(restart_of_web()),
        Timestamp::now(),
    )
    .await;
    let sent = sent.lock().unwrap().clone();
    assert!(
        sent.iter().all(|s| !s.path.contains("/events")),
        "{sent:#?}"
    );
    assert!(metric(
        &metrics,
        r#"sidecar_injector_rollouts_total{kind="Deployment",result="error"} 1"#
    ));
    assert!(metric(
        &metrics,
        r#"sidecar_injector_rollout_api_errors_total{verb="patch"} 1"#
    ));
    assert!(engine.summary().restarted.is_empty());
}

#[tokio::test]
async fn an_eviction_refused_by_a_budget_is_retried_later_never_forced() {
    fn budget(_: &str, path: &str) -> (StatusCode, Value) {
        assert!(path.ends_with("/pods/db-1/eviction"), "{path}");
        let code = StatusCode::TOO_MANY_REQUESTS;
        (code, status(code, "TooManyRequests"))
    }
    let (client, sent) = mock_client(budget);
    let (mut engine, metrics) = engine(client);
    let db = WorkloadRef::new(WorkloadKind::StatefulSet, "team", "db");
    let pods = [
        crate::drift::PodToReplace::injected("db-0"),
        crate::drift::PodToReplace::injected("db-1"),
    ];
    evict_next(&mut engine, &db, &pods, true).await;
    // Not healthy: no eviction at all.
    evict_next(&mut engine, &db, &pods, false).await;
    evict_next(&mut engine, &db, &pods, true).await;
    let sent = sent.lock().unwrap().clone();
    let evictions: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.path.ends_with("/eviction"))
        .collect();
    assert_eq!(evictions.len(), 2, "one per healthy plan: {sent:#?}");
    assert_eq!(evictions[0].method, "POST");
    assert_eq!(evictions[0].body["metadata"]["name"], "db-1");
    // An Eviction, never a DELETE.
    assert!(sent.iter().all(|s| s.method != "DELETE"));
    assert!(metric(
        &metrics,
        r#"sidecar_injector_rollouts_total{kind="StatefulSet",result="eviction_blocked"} 2"#
    ));
    assert!(!metrics.encode().contains(r#"result="evicted""#));
}

/// Every workload the engine holds any state about.
fn remembered(engine: &Engine) -> BTreeSet<String> {
    let summary = engine.summary.iter().flat_map(|s| {
        s.restarted
            .iter()
            .chain(&s.succeeded)
            .chain(&s.gone)
            .chain(s.failed.iter().map(|f| &f.workload))
    });
    let state = &engine.state;
    state
        .finished_since
        .keys()
        .chain(state.evictions.keys())
        .chain(state.stamped.keys())
        .chain(state.evicting.keys())
        .chain(state.baking.keys())
        .chain(state.upgrades.keys())
        .chain(state.upgraded.keys())
        .chain(state.blocked.keys())
        .chain(&state.awaiting_success)
        .chain(summary)
        .map(ToString::to_string)
        .collect()
}

fn answer_evicted(method: &str, path: &str) -> (StatusCode, Value) {
    if path.ends_with("/eviction") {
        let success = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success", "code": 201});
        return (StatusCode::CREATED, success);
    }
    answer_ok(method, path)
}

/// `serve`'s engine runs for months: whatever it holds about a workload goes once the
/// workload's rollout ends (succeeded, evicted through, or gone), or it would grow with every
/// workload it ever restarted.
#[tokio::test]
async fn a_long_running_engine_lets_go_of_each_workload_once_its_rollout_ends() {
    let (client, _sent) = mock_client(answer_evicted);
    let (mut engine, _metrics) = engine(client);
    let web = restart_of_web();
    let now = Timestamp::now();

    perform(&mut engine, Effect::PatchTemplate(web.clone()), now).await;
    assert_eq!(
        remembered(&engine),
        BTreeSet::from(["Deployment/team/web".to_owned()])
    );
    let succeeded = RolloutPlan {
        succeeded: vec![web.workload.clone()],
        ..RolloutPlan::default()
    };
    act(&mut engine, succeeded, now).await;
    assert_eq!(remembered(&engine), BTreeSet::new(), "after its success");

    let db = WorkloadRef::new(WorkloadKind::StatefulSet, "team", "db");
    let stale = [crate::drift::PodToReplace::injected("db-0")];
    evict_next(&mut engine, &db, &stale, true).await;
    assert_eq!(
        remembered(&engine),
        BTreeSet::from(["StatefulSet/team/db".to_owned()])
    );
    act(&mut engine, RolloutPlan::default(), now).await;
    assert_eq!(
        remembered(&engine),
        BTreeSet::new(),
        "once it no longer rolls"
    );

    perform(&mut engine, Effect::PatchTemplate(web.clone()), now).await;
    // Gone with no pods left: the index no longer has it.
    act(&mut engine, RolloutPlan::default(), now).await;
    assert_eq!(remembered(&engine), BTreeSet::new(), "once it is gone");
}

/// The one-shot command asks for the summary it prints.
#[tokio::test]
async fn a_kept_summary_says_what_was_restarted_and_how_it_ended() {
    let (client, _sent) = mock_client(answer_ok);
    let (mut engine, _metrics) = engine(client);
    engine.keep_summary();
    let web = restart_of_web();
    perform(
        &mut engine,
        Effect::PatchTemplate(web.clone()),
        Timestamp::now(),
    )
    .await;
    let succeeded = RolloutPlan {
        succeeded: vec![web.workload.clone()],
        ..RolloutPlan::default()
    };
    act(&mut engine, succeeded, Timestamp::now()).await;
    assert!(engine.summary().restarted.contains(&web.workload));
    assert!(engine.summary().succeeded.contains(&web.workload));
}

#[tokio::test]
async fn a_status_write_that_conflicts_is_replaced_next_time() {
    fn conflict(method: &str, _: &str) -> (StatusCode, Value) {
        match method {
            "POST" => {
                let code = StatusCode::CONFLICT;
                (code, status(code, "AlreadyExists"))
            }
            _ => (
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": STATUS_CONFIGMAP, "resourceVersion": "9"}}),
            ),
        }
    }
    let (client, sent) = mock_client(conflict);
    let (mut engine, _) = engine(client);
    engine.write_status().await;
    engine.write_status().await;
    // Written: a third call with the same content sends nothing.
    engine.write_status().await;
    let sent = sent.lock().unwrap().clone();
    let writes: Vec<(&str, &str)> = sent
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        writes,
        [
            ("POST", "/api/v1/namespaces/injector-system/configmaps"),
            (
                "PUT",
                "/api/v1/namespaces/injector-system/configmaps/sidecar-injector-status"
            ),
        ]
    );
    assert!(sent[1].body["data"]["campaigns"].is_string());
    assert!(
        sent[1].body["data"].get("revisions").is_none(),
        "the engine publishes no revisions"
    );
}

/// What the book alert reads: the size of the campaigns item as written.
#[tokio::test]
async fn the_book_gauge_is_the_size_of_the_campaigns_item_written() {
    fn created(_: &str, _: &str) -> (StatusCode, Value) {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": STATUS_CONFIGMAP, "resourceVersion": "3"}});
        (StatusCode::CREATED, object)
    }
    let (client, sent) = mock_client(created);
    let (mut engine, metrics) = engine(client);
    let since = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-27T08:00:00Z".parse().unwrap(),
    );
    engine.state.book.campaigns.insert(
        "logger:v1".into(),
        crate::test_fixtures::campaign(
            "aaaaaaaaaaaa",
            crate::rollout::CampaignState::Paused,
            since,
        ),
    );
    assert!(metric(&metrics, "sidecar_injector_rollout_book_bytes 0"));
    assert!(metric(
        &metrics,
        "sidecar_injector_rollout_book_budget_bytes 917504"
    ));
    engine.write_status().await;
    let sent = sent.lock().unwrap().clone();
    let written = sent
        .iter()
        .find_map(|s| s.body["data"]["campaigns"].as_str())
        .expect("the campaigns item written");
    assert!(written.contains("logger:v1"), "{written}");
    let line = format!("sidecar_injector_rollout_book_bytes {}", written.len());
    assert!(metric(&metrics, &line), "{}", metrics.encode());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_follows_the_grant_and_readiness_at_once() {
    let (client, _) = mock_client(answer_ok);
    // The safety-net replan is 5 s here: what ends leadership sooner is the grant's end or
    // a change of readiness, each woken on.
    let (engine, metrics) = engine(client);
    let (_changes_tx, changes) = watch::channel(0u64);
    let (_synced_tx, synced) = watch::channel(true);
    let feed = DriftFeed {
        index: Arc::new(Mutex::new(crate::drift::DriftIndex::default())),
        changes,
        synced,
        refused: watch::channel(None).1,
        followed: Default::default(),
    };
    let (_sidecars_tx, sidecars) = watch::channel(Arc::new(SidecarSet::default()));
    let (grant_tx, grant) = watch::channel(None);
    let (not_ready_tx, not_ready) = watch::channel(None);
    let engine = tokio::spawn(run(
        engine,
        feed,
        sidecars,
        not_ready,
        grant,
        Duration::ZERO,
    ));
    let leader = |value: i64| {
        let line = format!("sidecar_injector_rollout_leader {value}");
        let metrics = metrics.clone();
        move || metric(&metrics, &line)
    };

    grant_tx.send_replace(Some(Instant::now() + Duration::from_millis(600)));
    assert!(within(Duration::from_secs(3), leader(1)).await.is_some());
    // Not renewed: nothing is sent when the grant ends, and nothing else changes.
    let ended = within(Duration::from_secs(4), leader(0)).await;
    assert!(
        ended.is_some_and(|after| after < Duration::from_secs(2)),
        "leadership ended {ended:?} after it was seen, the grant lasting 600 ms"
    );

    // A leader that stops being ready steps down at once: not at its grant's end (10 s) nor
    // at the next safety-net replan (5 s).
    grant_tx.send_replace(Some(Instant::now() + Duration::from_secs(10)));
    assert!(within(Duration::from_secs(3), leader(1)).await.is_some());
    not_ready_tx.send_replace(Some("shutting down"));
    let stepped_down = within(Duration::from_secs(4), leader(0)).await;
    assert!(
        stepped_down.is_some_and(|after| after < Duration::from_secs(2)),
        "a leader that stopped being ready stepped down {stepped_down:?} later"
    );
    // A grant renewed while not ready does not make it the leader. Not a wait for something
    // to happen: a window in which the renewal is seen (100 ms debounce) and must change
    // nothing.
    grant_tx.send_replace(Some(Instant::now() + Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        leader(0)(),
        "a grant does not make a replica that is not ready the leader"
    );
    // Ready again, with its grant: the leader again at once, without waiting for a poll.
    not_ready_tx.send_replace(None);
    let back = within(Duration::from_secs(4), leader(1)).await;
    assert!(
        back.is_some_and(|after| after < Duration::from_secs(2)),
        "a ready replica holding the grant became the leader {back:?} later"
    );
    // A readiness that can no longer change (its server is gone) ends the engine, as each of
    // its other inputs does, instead of waking it over and over.
    drop(not_ready_tx);
    let finished = within(Duration::from_secs(3), || engine.is_finished()).await;
    assert!(finished.is_some(), "the engine outlived its readiness");
}

/// Conducts the loop for the pacing tests: plans only, and makes each plan wait `hold` for the
/// index (held by another thread, as a long plan at 50,000 pods holds it), noting when each
/// pass began.
struct SlowPlans {
    sidecars: watch::Receiver<Arc<SidecarSet>>,
    index: Arc<Mutex<crate::drift::DriftIndex>>,
    hold: Duration,
    passes: Arc<Mutex<Vec<Instant>>>,
    ended: Arc<Mutex<usize>>,
    until: Instant,
    /// After each pass, the next moment a plan asks to be woken at, this long after.
    due_after: Option<Duration>,
    due: Option<Instant>,
}

impl Conductor for SlowPlans {
    fn sidecars(&mut self) -> Arc<SidecarSet> {
        self.sidecars.borrow_and_update().clone()
    }

    fn before_pass(&mut self, _: &mut Engine) -> Result<Option<Authority>, LoopStopped> {
        self.passes.lock().unwrap().push(Instant::now());
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (index, hold) = (self.index.clone(), self.hold);
        std::thread::spawn(move || {
            let _index = index.lock().unwrap();
            held_tx.send(()).unwrap();
            std::thread::sleep(hold);
        });
        held_rx.recv().unwrap();
        Ok(Some(Authority::PlanOnly))
    }

    fn after_pass(&mut self, _: &Engine, _: &RolloutPlan) -> std::ops::ControlFlow<()> {
        *self.ended.lock().unwrap() += 1;
        self.due = self.due_after.map(|after| Instant::now() + after);
        if Instant::now() >= self.until {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    }

    fn wake_at(&self, _: Instant) -> Vec<Option<Instant>> {
        vec![self.due]
    }

    fn safety_net(&self) -> Duration {
        Duration::from_secs(60)
    }

    async fn changed(&mut self) -> Result<(), LoopStopped> {
        self.sidecars
            .changed()
            .await
            .map_err(|_| LoopStopped::Conductor("gone".into()))
    }
}

/// A control loop whose plans each wait `hold` for the index, while the cluster changes every
/// 10 ms for `churn`.
struct Churning {
    looping: tokio::task::JoinHandle<()>,
    /// When each pass began.
    passes: Arc<Mutex<Vec<Instant>>>,
    /// How many passes ended.
    ended: Arc<Mutex<usize>>,
    sidecars: watch::Sender<Arc<SidecarSet>>,
}

async fn churning_loop(hold: Duration, churn: Duration, due_after: Option<Duration>) -> Churning {
    let (client, _) = mock_client(answer_ok);
    let (mut engine, _) = engine(client);
    let (changes_tx, changes) = watch::channel(0u64);
    let feed = DriftFeed {
        index: Arc::new(Mutex::new(crate::drift::DriftIndex::default())),
        changes,
        synced: watch::channel(true).1,
        refused: watch::channel(None).1,
        followed: Default::default(),
    };
    let (sidecars_tx, sidecars) = watch::channel(Arc::new(SidecarSet::default()));
    let passes = Arc::new(Mutex::new(Vec::new()));
    let ended = Arc::new(Mutex::new(0));
    let until = Instant::now() + churn;
    let mut conductor = SlowPlans {
        sidecars,
        index: feed.index.clone(),
        hold,
        passes: passes.clone(),
        ended: ended.clone(),
        until,
        due_after,
        due: None,
    };
    tokio::spawn(async move {
        while Instant::now() < until {
            changes_tx.send_modify(|n| *n += 1);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let looping = tokio::spawn(async move {
        if let Err(stopped) = control_loop(&mut engine, &feed, &mut conductor).await {
            panic!("the loop stopped: {stopped}");
        }
    });
    Churning {
        looping,
        passes,
        ended,
        sidecars: sidecars_tx,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_that_take_long_are_spaced_out_while_the_cluster_keeps_changing() {
    // Each plan waits 250 ms: back to back behind the 100 ms debounce that is a pass every
    // 350 ms, about 8 in 3 s; paced, a pass every 1.25 s (the quiet time capped at 1 s).
    let Churning {
        looping,
        passes,
        sidecars: _sidecars,
        ..
    } = churning_loop(Duration::from_millis(250), Duration::from_secs(3), None).await;
    let ended = within(Duration::from_secs(10), || looping.is_finished()).await;
    assert!(ended.is_some(), "the loop did not end");
    let passes = passes.lock().unwrap().clone();
    assert!(
        passes.len() <= 4,
        "{} plans in 3 s of pod churn, each taking 250 ms: {:?}",
        passes.len(),
        passes.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>()
    );
    assert!(passes.len() >= 2, "the cluster's changes were planned on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_configs_is_planned_at_once_while_plans_are_spaced_out() {
    let Churning {
        looping,
        passes,
        ended,
        sidecars,
    } = churning_loop(Duration::from_millis(250), Duration::from_secs(10), None).await;
    // Each edit as a pass ends, when the loop has a second's quiet ahead of it (the
    // cluster's changes, pending too, may be taken first).
    for _ in 0..6 {
        let count = *ended.lock().unwrap();
        let pass_ended = within(Duration::from_secs(5), || *ended.lock().unwrap() > count).await;
        assert!(pass_ended.is_some(), "no pass ended");
        let count = passes.lock().unwrap().len();
        let edited = Instant::now();
        sidecars.send_modify(|_| {});
        let planned = within(Duration::from_secs(5), || {
            passes.lock().unwrap().len() > count
        })
        .await;
        let after = edited.elapsed();
        assert!(planned.is_some(), "the edit was never planned on");
        assert!(
            after < Duration::from_millis(600),
            "an edit was planned on {after:?} after it, behind the pacing of pod churn"
        );
    }
    looping.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moment_a_plan_asked_for_is_kept_while_plans_are_spaced_out() {
    // Each plan asks to be woken 200 ms after it (a settle window's end, a rate limit's):
    // that, not the second of quiet the pod churn would get, is when the next plan comes.
    let Churning {
        looping,
        passes,
        sidecars: _sidecars,
        ..
    } = churning_loop(
        Duration::from_millis(250),
        Duration::from_secs(3),
        Some(Duration::from_millis(200)),
    )
    .await;
    let ended = within(Duration::from_secs(10), || looping.is_finished()).await;
    assert!(ended.is_some(), "the loop did not end");
    let passes = passes.lock().unwrap().clone();
    let gaps: Vec<Duration> = passes.windows(2).map(|w| w[1] - w[0]).collect();
    // 250 ms of plan and 200 ms to the moment asked for: 450 ms; paced, 1.25 s.
    assert!(
        gaps.len() >= 3 && gaps.iter().all(|gap| *gap < Duration::from_millis(800)),
        "passes {gaps:?} apart, each asking for the next 200 ms after it"
    );
}

#[test]
fn the_loop_wakes_at_the_soonest_moment_due_and_polls_nothing() {
    let now = std::time::Instant::now();
    let at = |s: u64| now + std::time::Duration::from_secs(s);
    let wake = |moments: [Option<std::time::Instant>; 3]| {
        soonest_wake(now, crate::engine::LOOP_SAFETY_NET, moments)
    };
    assert_eq!(
        wake([None, None, None]),
        now + crate::engine::LOOP_SAFETY_NET,
        "nothing due: only the safety net"
    );
    assert_eq!(
        wake([Some(at(15)), Some(at(7)), Some(at(300))]),
        at(7),
        "the soonest"
    );
    assert_eq!(wake([Some(at(15)), None, None]), at(15));
    assert_eq!(
        wake([Some(at(3_600)), None, None]),
        now + crate::engine::LOOP_SAFETY_NET,
        "never past the net"
    );
    assert_eq!(wake([None, Some(now), None]), now, "due now: at once");
}
