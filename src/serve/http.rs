//! The HTTP side of `serve`: `/mutate` on the TLS port, `/health`, `/ready` and `/metrics` on
//! the lifecycle port. Routers are built from state and testable without sockets.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use tokio::sync::watch;
use tracing::{Instrument, debug, debug_span, field, info, warn};

use crate::admission::{self, AdmissionResult, Answer};
use crate::config::SidecarSet;
use crate::injection::InjectionSettings;
use crate::metrics::{Metrics, RequestResult};

/// Everything a request handler needs, shared by all connections.
pub struct WebhookState {
    pub sidecars: watch::Receiver<Arc<SidecarSet>>,
    pub settings: InjectionSettings,
    pub metrics: Arc<Metrics>,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub readiness: Arc<Readiness>,
}

/// `/ready` is the conjunction of these; shutting down turns it off first.
#[derive(Debug, Default)]
pub struct Readiness {
    pub configs_loaded: AtomicBool,
    /// The first ConfigMap list is done (true from the start when that source is off).
    pub configmaps_listed: AtomicBool,
    pub tls_listening: AtomicBool,
    pub shutting_down: AtomicBool,
}

impl Readiness {
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        if self.shutting_down.load(Ordering::Acquire) {
            Some("shutting down")
        } else if !self.configs_loaded.load(Ordering::Acquire) {
            Some("sidecar configs not loaded yet")
        } else if !self.configmaps_listed.load(Ordering::Acquire) {
            Some("the first list of sidecar ConfigMaps is not done yet")
        } else if !self.tls_listening.load(Ordering::Acquire) {
            Some("TLS listener not up yet")
        } else {
            None
        }
    }
}

/// The TLS port: `/mutate` and `/health`.
pub fn webhook_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/health", get(health))
        .with_state(state)
}

/// The plain lifecycle port: `/health`, `/ready`, `/metrics`.
pub fn lifecycle_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn health() -> &'static str {
    "ok\n"
}

async fn ready(State(state): State<Arc<WebhookState>>) -> Response {
    match state.readiness.not_ready_reason() {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<Arc<WebhookState>>) -> Response {
    let mut response = state.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Why `/mutate` answered with an HTTP error instead of a review: the status, the metric
/// result, and a short text body.
#[derive(Debug)]
pub struct Rejection {
    status: StatusCode,
    result: RequestResult,
    message: String,
}

impl Rejection {
    fn new(status: StatusCode, result: RequestResult, message: String) -> Self {
        Self {
            status,
            result,
            message,
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        (self.status, format!("{}\n", self.message)).into_response()
    }
}

async fn mutate(State(state): State<Arc<WebhookState>>, request: Request<Body>) -> Response {
    let started = Instant::now();
    // Debug level: creating and filling a span per request is not free at info.
    let span = debug_span!(
        "admission",
        uid = field::Empty,
        namespace = field::Empty,
        pod = field::Empty
    );
    async move {
        let (parts, mut body) = request.into_parts();
        match answer(&state, &parts.headers, &mut body).await {
            Ok(answer) => respond(&state, started, answer),
            Err(rejection) => {
                state
                    .metrics
                    .record_admission(rejection.result, started.elapsed().as_secs_f64());
                warn!(
                    status = rejection.status.as_u16(),
                    result = rejection.result.as_str(),
                    "{}",
                    rejection.message
                );
                if parts.version == axum::http::Version::HTTP_2 {
                    tokio::spawn(drain(body, state.body_read_timeout));
                }
                rejection.into_response()
            }
        }
    }
    .instrument(span)
    .await
}

/// At most this much of a rejected HTTP/2 body is read (and thrown away).
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// Reads the rest of a rejected HTTP/2 request body and throws it away, so that the stream
/// ends cleanly after the error response: dropping it unread resets the stream, and clients
/// still uploading (curl, for one) then report a stream error instead of the status. Past
/// `DRAIN_LIMIT` or `deadline` the stream is reset after all (RST_STREAM NO_ERROR, the
/// response already sent). HTTP/1.1 needs none of this: the connection is closed instead.
async fn drain(mut body: Body, deadline: Duration) {
    let discard = async {
        let mut read = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, |d| d.len());
            if read > DRAIN_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(deadline, discard).await;
}

/// Reads the body within the limits and answers the review in it. The body is read through
/// `body` so that a rejected one can still be drained.
async fn answer(
    state: &WebhookState,
    headers: &HeaderMap,
    body: &mut Body,
) -> Result<Answer, Rejection> {
    if !is_json(headers) {
        return Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RequestResult::UnsupportedMediaType,
            "Content-Type must be application/json".to_owned(),
        ));
    }
    let too_large = || {
        Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            RequestResult::PayloadTooLarge,
            format!(
                "the body exceeds --max-body-bytes ({} bytes)",
                state.max_body_bytes
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > state.max_body_bytes) {
        return Err(too_large());
    }
    let collected = tokio::time::timeout(
        state.body_read_timeout,
        read_limited(body, state.max_body_bytes),
    )
    .await;
    let bytes = match collected {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(BodyError::TooLarge)) => return Err(too_large()),
        Ok(Err(BodyError::Read(err))) => {
            return Err(Rejection::new(
                StatusCode::BAD_REQUEST,
                RequestResult::BadRequest,
                format!("cannot read the body: {err}"),
            ));
        }
        Err(_) => {
            return Err(Rejection::new(
                StatusCode::REQUEST_TIMEOUT,
                RequestResult::Timeout,
                format!(
                    "the body did not arrive within {:?}",
                    state.body_read_timeout
                ),
            ));
        }
    };
    let sidecars = state.sidecars.borrow().clone();
    admission::review(&bytes, &sidecars, &state.settings).map_err(|err| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            RequestResult::BadRequest,
            err.to_string(),
        )
    })
}

enum BodyError {
    TooLarge,
    Read(axum::Error),
}

/// The whole body, or `TooLarge` as soon as it passes `limit` (the rest left unread).
async fn read_limited(body: &mut Body, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut buffer = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Some(data) = frame.data_ref() {
            if buffer.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            buffer.extend_from_slice(data);
        }
    }
    Ok(buffer)
}

/// Records and logs the answer, and sends its review back.
fn respond(state: &WebhookState, started: Instant, answer: Answer) -> Response {
    let span = tracing::Span::current();
    span.record("uid", answer.uid.as_str());
    span.record("namespace", answer.namespace.as_str());
    span.record("pod", answer.pod.as_str());
    for (sidecar, result) in &answer.sidecars {
        state.metrics.record_injection(sidecar, *result);
    }
    state.metrics.record_admission(
        RequestResult::Answered(answer.result),
        started.elapsed().as_secs_f64(),
    );
    let message = answer.message.as_deref().unwrap_or_default();
    let (uid, namespace, pod) = (&answer.uid, &answer.namespace, &answer.pod);
    let result = answer.result.as_str();
    match answer.result {
        AdmissionResult::Skipped => debug!(result, "skipped {message}"),
        // A line per injected pod would cost a third of the throughput; the injections
        // metric counts them by sidecar, and --log-level debug shows each one.
        // Fields are evaluated only when debug is on.
        AdmissionResult::Injected => debug!(
            result,
            sidecars = %answer
                .sidecars
                .iter()
                .map(|(s, _)| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
            "injected {message}"
        ),
        AdmissionResult::Denied | AdmissionResult::InvalidPod => {
            info!(uid, namespace, pod, result, "denied: {message}");
        }
        AdmissionResult::NotAPod => warn!(uid, namespace, result, "{message}"),
    }
    let mut response = Response::new(Body::from(answer.body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;
    use tower::ServiceExt;

    use super::*;
    use crate::config::{LoadedSidecar, parse_config};

    fn state() -> Arc<WebhookState> {
        let logger = parse_config(
            "t.yaml",
            "name: logger:v1\ncontainers: [{name: s, image: 's:1'}]\n",
        )
        .unwrap()
        .config;
        let set: SidecarSet = [LoadedSidecar::new(logger, "t.yaml")].into_iter().collect();
        let (_publish, sidecars) = watch::channel(Arc::new(set));
        Arc::new(WebhookState {
            sidecars,
            settings: InjectionSettings::default(),
            metrics: Arc::new(Metrics::new()),
            max_body_bytes: 64 * 1024,
            body_read_timeout: Duration::from_secs(5),
            readiness: Arc::new(Readiness::default()),
        })
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
        state
            .readiness
            .configs_loaded
            .store(true, Ordering::Release);
        state.readiness.tls_listening.store(true, Ordering::Release);
        let (status, body) = call(lifecycle_router(state.clone()), get()).await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the first list of sidecar ConfigMaps is not done yet\n"
            )
        );
        state
            .readiness
            .configmaps_listed
            .store(true, Ordering::Release);
        assert_eq!(
            call(lifecycle_router(state.clone()), get()).await.0,
            StatusCode::OK
        );
        state.readiness.shutting_down.store(true, Ordering::Release);
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
}
