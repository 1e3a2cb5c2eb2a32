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
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tracing::{Instrument, debug, debug_span, field, info, warn};

use crate::admission::{self, AdmissionResult, Answer};
use crate::config::SidecarSet;
use crate::injection::InjectionSettings;
use crate::metrics::{Metrics, RequestResult};

/// Streams one HTTP/2 connection may have open at once (hyper's default is 200).
pub(crate) const MAX_CONCURRENT_STREAMS: u32 = 32;
/// What small bodies may hold at once: 128 bodies at the small-body size.
pub(crate) const SMALL_BODY_BUDGET: usize = 128 * INLINE_REVIEW_BYTES;
/// How much of a body an HTTP/2 client may send before the server reads it, per stream and
/// per connection.
pub(crate) const STREAM_WINDOW_BYTES: u32 = 256 * 1024;
pub(crate) const CONNECTION_WINDOW_BYTES: u32 = 512 * 1024;
/// The largest header block an HTTP/2 client may send.
pub(crate) const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;
/// Bodies up to this size are reviewed on the async worker that read them (well under a
/// millisecond); larger ones go to the blocking pool, so no request stalls the others.
pub(crate) const INLINE_REVIEW_BYTES: usize = 64 * 1024;

/// The bounds on what one request, and all of them together, may cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_body_bytes: usize,
    pub(crate) max_buffered_bytes: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) review_timeout: Duration,
}

/// Everything a request handler needs, shared by all connections.
pub(crate) struct WebhookState {
    pub(crate) sidecars: watch::Receiver<Arc<SidecarSet>>,
    pub(crate) settings: InjectionSettings,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) limits: Limits,
    /// One permit per byte of request body held in memory, over all connections: large
    /// bodies (over [`INLINE_REVIEW_BYTES`]) draw from `body_budget`, small ones from
    /// `small_body_budget`, so a flood of large bodies never starves ordinary pods.
    pub(crate) body_budget: Arc<Semaphore>,
    pub(crate) small_body_budget: Arc<Semaphore>,
    /// One permit per review running on the blocking pool.
    pub(crate) review_slots: Arc<Semaphore>,
    pub(crate) readiness: Arc<Readiness>,
}

impl WebhookState {
    pub(crate) fn new(
        sidecars: watch::Receiver<Arc<SidecarSet>>,
        settings: InjectionSettings,
        metrics: Arc<Metrics>,
        limits: Limits,
        readiness: Arc<Readiness>,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self {
            sidecars,
            settings,
            metrics,
            body_budget: Arc::new(Semaphore::new(limits.max_buffered_bytes)),
            small_body_budget: Arc::new(Semaphore::new(SMALL_BODY_BUDGET)),
            review_slots: Arc::new(Semaphore::new(cores)),
            limits,
            readiness,
        }
    }
}

/// `/ready` is the conjunction of these; shutting down turns it off first. They are set only
/// by [`Readiness::mark`], so that those who act only while ready ([`Readiness::watch`])
/// learn of it at once.
#[derive(Debug)]
pub(crate) struct Readiness {
    configs_loaded: AtomicBool,
    /// The first ConfigMap list is done (true from the start when that source is off).
    configmaps_listed: AtomicBool,
    tls_listening: AtomicBool,
    /// `--injection=policy`: the API server took the first apply of the admission policies
    /// (true from the start with the webhook).
    policies_written: AtomicBool,
    shutting_down: AtomicBool,
    /// Why `/ready` fails (`None`: ready), as of the last mark.
    reason: watch::Sender<Option<&'static str>>,
}

impl Default for Readiness {
    fn default() -> Self {
        let mut readiness = Self {
            configs_loaded: AtomicBool::new(false),
            configmaps_listed: AtomicBool::new(false),
            tls_listening: AtomicBool::new(false),
            policies_written: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            reason: watch::Sender::new(None),
        };
        readiness.reason = watch::Sender::new(readiness.not_ready_reason());
        readiness
    }
}

/// One of the steps [`Readiness`] waits for (or, for `ShuttingDown`, the end of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadinessStep {
    ConfigsLoaded,
    ConfigMapsListed,
    TlsListening,
    PoliciesWritten,
    ShuttingDown,
}

impl Readiness {
    fn flag(&self, step: ReadinessStep) -> &AtomicBool {
        match step {
            ReadinessStep::ConfigsLoaded => &self.configs_loaded,
            ReadinessStep::ConfigMapsListed => &self.configmaps_listed,
            ReadinessStep::TlsListening => &self.tls_listening,
            ReadinessStep::PoliciesWritten => &self.policies_written,
            ReadinessStep::ShuttingDown => &self.shutting_down,
        }
    }

    /// Whether `step` was marked.
    pub(crate) fn done(&self, step: ReadinessStep) -> bool {
        self.flag(step).load(Ordering::Acquire)
    }

    pub(crate) fn not_ready_reason(&self) -> Option<&'static str> {
        if self.done(ReadinessStep::ShuttingDown) {
            Some("shutting down")
        } else if !self.done(ReadinessStep::ConfigsLoaded) {
            Some("sidecar configs not loaded yet")
        } else if !self.done(ReadinessStep::ConfigMapsListed) {
            Some("the first list of sidecar ConfigMaps is not done yet")
        } else if !self.done(ReadinessStep::TlsListening) {
            Some("TLS listener not up yet")
        } else if !self.done(ReadinessStep::PoliciesWritten) {
            Some("the admission policies are not applied yet")
        } else {
            None
        }
    }

    /// Marks `step` done and tells the watchers when that changes why `/ready` fails.
    pub(crate) fn mark(&self, step: ReadinessStep) {
        self.flag(step).store(true, Ordering::Release);
        self.reason.send_if_modified(|reason| {
            let now = self.not_ready_reason();
            let changed = *reason != now;
            *reason = now;
            changed
        });
    }

    /// Why `/ready` fails (`None`: ready), updated at every mark that changes it.
    pub(crate) fn watch(&self) -> watch::Receiver<Option<&'static str>> {
        self.reason.subscribe()
    }
}

/// The TLS port: `/mutate` and `/health`.
pub(crate) fn webhook_router(state: Arc<WebhookState>) -> Router {
    let router = Router::new()
        .route("/mutate", post(mutate))
        .route("/health", get(health));
    with_tumblr_http_metrics(router, &state).with_state(state)
}

/// The plain lifecycle port: `/health`, `/ready`, `/metrics`.
pub(crate) fn lifecycle_router(state: Arc<WebhookState>) -> Router {
    let router = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics));
    with_tumblr_http_metrics(router, &state).with_state(state)
}

/// With `--tumblr-metrics`, every request is counted as Tumblr's handlers were (in flight,
/// by code and method, duration by handler, response size); without it, no layer at all.
fn with_tumblr_http_metrics(
    router: Router<Arc<WebhookState>>,
    state: &Arc<WebhookState>,
) -> Router<Arc<WebhookState>> {
    if state.metrics.tumblr.is_none() {
        return router;
    }
    router.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        tumblr_http_metrics,
    ))
}

async fn tumblr_http_metrics(
    State(state): State<Arc<WebhookState>>,
    request: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let Some(tumblr) = &state.metrics.tumblr else {
        return next.run(request).await;
    };
    let handler = match request.uri().path() {
        "/mutate" => "mutate",
        "/health" => "health",
        "/metrics" => "metrics",
        _ => return next.run(request).await,
    };
    // promhttp's labels: the method in lower case, the status code as a number.
    let method = match *request.method() {
        axum::http::Method::GET => "get",
        axum::http::Method::POST => "post",
        _ => "other",
    };
    let started = Instant::now();
    tumblr.request_started();
    let response = next.run(request).await;
    let bytes = axum::body::HttpBody::size_hint(response.body()).exact();
    tumblr.request_ended(
        handler,
        method,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
        bytes,
    );
    response
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
pub(crate) struct Rejection {
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
    // Debug level: creating and filling a span per request is not free at info. With
    // `--otlp-endpoint` every review has it, in the trace the API server sent.
    let span = debug_span!(
        "admission review",
        otel.kind = "server",
        uid = field::Empty,
        namespace = field::Empty,
        pod = field::Empty,
        result = field::Empty,
    );
    crate::telemetry::continue_trace(&span, request.headers());
    async move {
        let (parts, mut body) = request.into_parts();
        match answer(state.clone(), &parts.headers, &mut body).await {
            Ok(answer) => respond(&state, started, answer),
            Err(rejection) => {
                let span = tracing::Span::current();
                span.record("result", rejection.result.as_str());
                state.metrics.record_admission(
                    rejection.result,
                    started.elapsed().as_secs_f64(),
                    crate::telemetry::sampled_trace_id(&span),
                );
                // Tumblr counted a body that is no review as an unmarshal error.
                if let Some(tumblr) = &state.metrics.tumblr
                    && rejection.status == StatusCode::BAD_REQUEST
                {
                    tumblr.record_injection(crate::metrics::tumblr::InjectionLabels {
                        status: "error",
                        reason: "unmarshal_error",
                        requested: String::new(),
                    });
                }
                warn!(
                    status = rejection.status.as_u16(),
                    result = rejection.result.as_str(),
                    "{}",
                    rejection.message
                );
                if parts.version == axum::http::Version::HTTP_2 {
                    tokio::spawn(drain(body, state.limits.body_read_timeout));
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
    state: Arc<WebhookState>,
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
    let limits = state.limits;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limits.max_body_bytes) {
        return Err(BodyError::TooLarge.rejection(&limits));
    }
    let collected = tokio::time::timeout(
        limits.body_read_timeout,
        read_limited(body, declared, limits.max_body_bytes, &state),
    )
    .await;
    let (bytes, _held) = match collected {
        Ok(Ok(read)) => read,
        Ok(Err(err)) => return Err(err.rejection(&limits)),
        Err(_) => {
            return Err(Rejection::new(
                StatusCode::REQUEST_TIMEOUT,
                RequestResult::Timeout,
                format!(
                    "the body did not arrive within {:?}",
                    limits.body_read_timeout
                ),
            ));
        }
    };
    let review = if bytes.len() <= INLINE_REVIEW_BYTES {
        let sidecars = state.sidecars.borrow().clone();
        super::review(&bytes, &sidecars, &state.settings)
    } else {
        review_off_workers(state.clone(), bytes).await?
    };
    review.map_err(|err| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            RequestResult::BadRequest,
            err.to_string(),
        )
    })
}

/// Reviews a large body on the blocking pool, at most one per core at once, within
/// `--review-timeout` (waiting for a slot included). A review past its deadline is answered
/// 503 and left to finish on its thread: its cost is bounded by the body limit.
async fn review_off_workers(
    state: Arc<WebhookState>,
    bytes: Vec<u8>,
) -> Result<Result<Answer, admission::ReviewError>, Rejection> {
    let timeout = state.limits.review_timeout;
    let late = || {
        Rejection::new(
            StatusCode::SERVICE_UNAVAILABLE,
            RequestResult::ReviewTimeout,
            format!("the review did not finish within --review-timeout ({timeout:?})"),
        )
    };
    let work = async {
        let slot = state
            .review_slots
            .clone()
            .acquire_owned()
            .await
            .expect("the review slots are never closed");
        let shared = state.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let sidecars = shared.sidecars.borrow().clone();
            super::review(&bytes, &sidecars, &shared.settings)
        })
        .await
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(review)) => Ok(review),
        Ok(Err(join)) => Err(Rejection::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            RequestResult::BadRequest,
            format!("the review failed: {join}"),
        )),
        Err(_) => Err(late()),
    }
}

enum BodyError {
    TooLarge,
    /// The byte budget shared by all requests is spent.
    OverBudget,
    Read(axum::Error),
}

impl BodyError {
    fn rejection(self, limits: &Limits) -> Rejection {
        match self {
            BodyError::TooLarge => Rejection::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                RequestResult::PayloadTooLarge,
                format!(
                    "the body exceeds --max-body-bytes ({} bytes)",
                    limits.max_body_bytes
                ),
            ),
            BodyError::OverBudget => Rejection::new(
                StatusCode::SERVICE_UNAVAILABLE,
                RequestResult::Busy,
                format!(
                    "the webhook already holds --max-buffered-bytes ({} bytes) of request bodies; retry",
                    limits.max_buffered_bytes
                ),
            ),
            BodyError::Read(err) => Rejection::new(
                StatusCode::BAD_REQUEST,
                RequestResult::BadRequest,
                format!("cannot read the body: {err}"),
            ),
        }
    }
}

/// The whole body, or `TooLarge` as soon as it passes `limit` (the rest left unread). Every
/// byte of buffer is paid for from `budget` before it is allocated (the declared length up
/// front, else each growth of the buffer's capacity), and the permit returned holds it until
/// the caller is done with the body.
async fn read_limited(
    body: &mut Body,
    declared: Option<usize>,
    limit: usize,
    state: &WebhookState,
) -> Result<(Vec<u8>, Option<OwnedSemaphorePermit>), BodyError> {
    let mut held: Option<OwnedSemaphorePermit> = None;
    let reserve = |held: &mut Option<OwnedSemaphorePermit>, total: usize| {
        let small = total <= INLINE_REVIEW_BYTES;
        let budget = if small {
            &state.small_body_budget
        } else {
            &state.body_budget
        };
        // Crossing into the large budget: what the small one lent is given back.
        let have = match held {
            Some(permit) if !small && permit.num_permits() <= INLINE_REVIEW_BYTES => {
                *held = None;
                0
            }
            Some(permit) => permit.num_permits(),
            None => 0,
        };
        if total <= have {
            return Ok(());
        }
        let more = u32::try_from(total - have).map_err(|_| BodyError::TooLarge)?;
        let permit = budget
            .clone()
            .try_acquire_many_owned(more)
            .map_err(|_| BodyError::OverBudget)?;
        match held {
            Some(held) => held.merge(permit),
            None => *held = Some(permit),
        }
        Ok(())
    };
    let mut buffer = Vec::new();
    if let Some(length) = declared {
        reserve(&mut held, length)?;
        buffer.reserve_exact(length);
    }
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Some(data) = frame.data_ref() {
            let total = buffer.len() + data.len();
            if total > limit {
                return Err(BodyError::TooLarge);
            }
            if total > buffer.capacity() {
                let capacity = total.max(buffer.capacity() * 2).min(limit);
                reserve(&mut held, capacity)?;
                buffer.reserve_exact(capacity - buffer.len());
            }
            buffer.extend_from_slice(data);
        }
    }
    Ok((buffer, held))
}

/// Records and logs the answer, and sends its review back.
fn respond(state: &WebhookState, started: Instant, answer: Answer) -> Response {
    let span = tracing::Span::current();
    span.record("uid", answer.uid.as_str());
    span.record("namespace", answer.namespace.as_str());
    span.record("pod", answer.pod.as_str());
    span.record("result", answer.result.as_str());
    for (sidecar, result) in &answer.sidecars {
        state.metrics.record_injection(sidecar, *result);
    }
    if let Some(tumblr) = &state.metrics.tumblr {
        tumblr.record_injection(tumblr_injection(&answer));
    }
    state.metrics.record_admission(
        RequestResult::Answered(answer.result),
        started.elapsed().as_secs_f64(),
        crate::telemetry::sampled_trace_id(&span),
    );
    let message = answer
        .message
        .as_ref()
        .map(crate::render::admission_message)
        .unwrap_or_default();
    let (uid, namespace, pod) = (&answer.uid, &answer.namespace, &answer.pod);
    let result = answer.result.as_str();
    match answer.result {
        // The sign of a swapped-in image whose annotation namespace was not carried over:
        // said at warn, and counted, since every such pod misses its sidecars.
        AdmissionResult::Skipped if answer.other_annotation_namespace => {
            state.metrics.record_other_annotation_namespace();
            warn!(uid, namespace, pod, result, "{message}");
        }
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

/// Tumblr's `injections` labels for an answer: success when injected, skipped when let
/// through, error when refused. `requested` names only loaded sidecars (what was injected).
fn tumblr_injection(answer: &Answer) -> crate::metrics::tumblr::InjectionLabels {
    let status = match answer.result {
        AdmissionResult::Injected => "success",
        AdmissionResult::Skipped | AdmissionResult::NotAPod => "skipped",
        AdmissionResult::Denied | AdmissionResult::InvalidPod => "error",
    };
    let requested = answer
        .sidecars
        .iter()
        .filter(|(_, result)| *result == crate::admission::SidecarResult::Injected)
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(",");
    crate::metrics::tumblr::InjectionLabels {
        status,
        reason: answer.tumblr_reason,
        requested,
    }
}

#[cfg(test)]
mod tests;
