use axum::body::to_bytes;
use tower::ServiceExt;

use super::*;
use crate::config::{LoadedSidecar, parse_config};

fn state() -> Arc<WebhookState> {
    state_with(Limits {
        max_body_bytes: 64 * 1024,
        max_buffered_bytes: 64 * 1024,
        body_read_timeout: Duration::from_secs(5),
        review_timeout: Duration::from_secs(5),
    })
}

fn state_with(limits: Limits) -> Arc<WebhookState> {
    let logger = parse_config(
        "t.yaml",
        "name: logger:v1\ncontainers: [{name: s, image: 's:1'}]\n",
    )
    .unwrap()
    .config;
    let set: SidecarSet = [LoadedSidecar::new(logger, "t.yaml")].into_iter().collect();
    let (_publish, sidecars) = watch::channel(Arc::new(set));
    Arc::new(WebhookState::new(
        sidecars,
        // As `serve` builds them: the sentences name its flags.
        InjectionSettings {
            ..Default::default()
        },
        Arc::new(Metrics::new()),
        limits,
        Arc::new(Readiness::default()),
    ))
}

/// The AdmissionReview the API server sent for a bare pod.
fn bare_pod_review() -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/admission/bare-pod.json"
        ))
        .unwrap(),
    )
    .unwrap()
}

/// A review of `bare-pod.json` padded with an ignored field to `size` bytes.
fn review_of_size(size: usize) -> String {
    let mut review = bare_pod_review();
    let base = review.to_string().len();
    review["request"]["object"]["metadata"]["labels"] =
        serde_json::json!({"padding": "p".repeat(size.saturating_sub(base + 30))});
    review.to_string()
}

#[tokio::test]
async fn bodies_share_one_byte_budget_and_a_request_past_it_gets_503() {
    let state = state_with(Limits {
        max_body_bytes: 100 * 1024,
        max_buffered_bytes: 120 * 1024,
        body_read_timeout: Duration::from_secs(30),
        review_timeout: Duration::from_secs(5),
    });
    // A slow upload holds 80 KiB of the budget and does not finish yet.
    let review = review_of_size(80 * 1024);
    let (first_half, second_half) = review.split_at(review.len() / 2);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let slow = Request::post("/mutate")
        .header("content-type", "application/json")
        .header("content-length", review.len().to_string())
        .body(Body::from_stream(tokio_stream_from(rx)))
        .unwrap();
    let slow = tokio::spawn(call(webhook_router(state.clone()), slow));
    tx.send(Ok(first_half.as_bytes().to_vec())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while state.body_budget.available_permits() > 120 * 1024 - review.len() {
        assert!(
            Instant::now() < deadline,
            "the slow upload never took its budget"
        );
        tokio::task::yield_now().await;
    }
    // 70 KiB more does not fit beside it: 503, counted as busy.
    let (status, body) = call(
        webhook_router(state.clone()),
        post("application/json", &review_of_size(70 * 1024)),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body.contains("--max-buffered-bytes (122880 bytes)"),
        "{body}"
    );
    assert!(
        state
            .metrics
            .encode()
            .contains("sidecar_injector_admission_requests_total{result=\"busy\"} 1"),
        "{}",
        state.metrics.encode()
    );
    // An ordinary pod draws from its own budget and is answered meanwhile.
    let (status, _) = call(
        webhook_router(state.clone()),
        post("application/json", &review_of_size(30 * 1024)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "small bodies are never starved");
    // The slow upload finishes and is answered; its budget comes back.
    tx.send(Ok(second_half.as_bytes().to_vec())).await.unwrap();
    drop(tx);
    assert_eq!(slow.await.unwrap().0, StatusCode::OK);
    assert_eq!(state.body_budget.available_permits(), 120 * 1024);
    let (status, _) = call(
        webhook_router(state.clone()),
        post("application/json", &review_of_size(70 * 1024)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        state.small_body_budget.available_permits(),
        SMALL_BODY_BUDGET
    );
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_large_body_is_reviewed_off_the_workers_within_the_review_timeout() {
    let limits = Limits {
        max_body_bytes: 1024 * 1024,
        max_buffered_bytes: 1024 * 1024,
        body_read_timeout: Duration::from_secs(5),
        review_timeout: Duration::from_secs(5),
    };
    let large = review_of_size(INLINE_REVIEW_BYTES * 4);
    let (status, body) = call(
        webhook_router(state_with(limits)),
        post("application/json", &large),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("\"patchType\":\"JSONPatch\""), "{body}");
    // Every review slot busy for longer than the deadline: 503 naming the flag, counted.
    let state = state_with(Limits {
        review_timeout: Duration::from_millis(100),
        ..limits
    });
    let slots = state.review_slots.available_permits();
    let _busy = state
        .review_slots
        .clone()
        .acquire_many_owned(u32::try_from(slots).unwrap())
        .await
        .unwrap();
    let (status, body) = call(
        webhook_router(state.clone()),
        post("application/json", &large),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("--review-timeout"), "{body}");
    assert!(
        state
            .metrics
            .encode()
            .contains("result=\"review_timeout\"} 1"),
        "{}",
        state.metrics.encode()
    );
}

#[tokio::test]
async fn a_request_under_another_annotation_namespace_is_warned_about_and_counted() {
    let mut review = bare_pod_review();
    review["request"]["object"]["metadata"]["annotations"] =
        serde_json::json!({"injector.tumblr.com/request": "logger:v1"});
    let state = state();
    let (status, body) = call(
        webhook_router(state.clone()),
        post("application/json", &review.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["response"]["allowed"], true);
    assert!(reply["response"].get("patch").is_none(), "{reply}");
    assert_eq!(
        reply["response"]["warnings"][0],
        "not injected: the pod requests sidecars with injector.tumblr.com/request, but this injector reads injector/request; is --annotation-namespace right?"
    );
    assert!(
        state
            .metrics
            .encode()
            .lines()
            .any(|l| l == "sidecar_injector_requests_other_annotation_namespace_total 1"),
        "{}",
        state.metrics.encode()
    );
}

async fn call(router: Router, request: Request<Body>) -> (StatusCode, String) {
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn post(content_type: &str, body: &str) -> Request<Body> {
    Request::post("/mutate")
        .header("content-type", content_type)
        .body(Body::from(body.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn mutate_answers_a_review_and_rejects_other_media_types() {
    let review = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/admission/bare-pod.json"
    ))
    .unwrap();
    let (status, body) = call(
        webhook_router(state()),
        post("application/json; charset=utf-8", &review),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"patchType\":\"JSONPatch\""), "{body}");
    let (status, _) = call(webhook_router(state()), post("application/yaml", &review)).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, body) = call(webhook_router(state()), post("application/json", "[1]")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.starts_with("cannot read the body as an AdmissionReview"),
        "{body}"
    );
}

#[tokio::test]
async fn ready_follows_the_readiness_flags() {
    let state = state();
    let get = || Request::get("/ready").body(Body::empty()).unwrap();
    let (status, body) = call(lifecycle_router(state.clone()), get()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "not ready: sidecar configs not loaded yet\n");
    let readiness = &state.readiness;
    let mut reason = readiness.watch();
    readiness.mark(ReadinessStep::ConfigsLoaded);
    readiness.mark(ReadinessStep::TlsListening);
    assert_eq!(
        *reason.borrow_and_update(),
        Some("the first list of sidecar ConfigMaps is not done yet")
    );
    let (status, body) = call(lifecycle_router(state.clone()), get()).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the first list of sidecar ConfigMaps is not done yet\n"
        )
    );
    readiness.mark(ReadinessStep::ConfigMapsListed);
    assert_eq!(
        *reason.borrow_and_update(),
        Some("the admission policies are not applied yet")
    );
    readiness.mark(ReadinessStep::PoliciesWritten);
    assert!(reason.has_changed().unwrap(), "becoming ready is told");
    assert_eq!(*reason.borrow_and_update(), None);
    assert_eq!(
        call(lifecycle_router(state.clone()), get()).await.0,
        StatusCode::OK
    );
    readiness.mark(ReadinessStep::ShuttingDown);
    assert_eq!(*reason.borrow_and_update(), Some("shutting down"));
    let (status, body) = call(lifecycle_router(state.clone()), get()).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n"
        )
    );
    let metrics = Request::get("/metrics").body(Body::empty()).unwrap();
    let (status, body) = call(lifecycle_router(state), metrics).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("sidecar_injector_build_info"), "{body}");
}
