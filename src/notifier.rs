//! `--notify-url`: POSTs each campaign notice as JSON, in order, from a task of its own. A
//! notice is retried with backoff within `--notify-timeout` per attempt; one that cannot be
//! delivered is logged and counted, and nothing ever waits for it: the engine only queues
//! (a full queue drops the notice, counted).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::metrics::{Metrics, NotificationResult};
use crate::rollout::notice::Notice;

/// Notices waiting to be sent; past this, new ones are dropped.
const QUEUE: usize = 64;

#[derive(Clone, Debug)]
pub(crate) struct NotifierOptions {
    pub(crate) url: http::Uri,
    /// Per attempt.
    pub(crate) timeout: Duration,
    /// Attempts after the first; the waits between them double from one second.
    pub(crate) retries: u32,
}

/// The sending end, held by the engine.
#[derive(Clone)]
pub(crate) struct Notifier {
    queue: mpsc::Sender<Notice>,
    metrics: Arc<Metrics>,
}

/// `--notify-url`'s parser: an http or https URL. The URL itself is never quoted in errors
/// or logs: a Slack webhook's path is its secret.
pub(crate) fn parse_notify_url(text: &str) -> Result<http::Uri, String> {
    parse_http_url(text, "notified")
}

/// An http or https URL with a host; `done` says what is done with it in the refusal of
/// another scheme ("only http and https URLs can be {done}").
pub(crate) fn parse_http_url(text: &str, done: &str) -> Result<http::Uri, String> {
    let url: http::Uri = text.parse().map_err(|err| format!("not a URL ({err})"))?;
    match url.scheme_str() {
        Some("http" | "https") if url.host().is_some() => Ok(url),
        Some("http" | "https") => Err("the URL has no host".to_owned()),
        Some(other) => Err(format!(
            "only http and https URLs can be {done}, not {other}"
        )),
        None => Err("the URL has no scheme (http:// or https://)".to_owned()),
    }
}

impl Notifier {
    /// Starts the sending task.
    pub(crate) fn spawn(options: NotifierOptions, metrics: Arc<Metrics>) -> Self {
        let (queue, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(send_all(receiver, options, metrics.clone()));
        Self { queue, metrics }
    }

    /// Queues a notice; never waits.
    pub(crate) fn notify(&self, notice: Notice) {
        let event = notice.event;
        if let Err(err) = self.queue.try_send(notice) {
            warn!(
                event = event.as_str(),
                "notification dropped: {QUEUE} are already waiting to be sent ({err})"
            );
            self.metrics
                .record_notification(event, NotificationResult::Dropped);
        }
    }
}

pub(crate) type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// An HTTP(S) client that trusts the system's roots, else Mozilla's.
pub(crate) fn client() -> HttpClient<Connector, Full<Bytes>> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let connector = match builder.with_native_roots() {
        Ok(native) => native,
        Err(_) => hyper_rustls::HttpsConnectorBuilder::new().with_webpki_roots(),
    }
    .https_or_http()
    .enable_http1()
    .build();
    HttpClient::builder(TokioExecutor::new()).build(connector)
}

async fn send_all(
    mut receiver: mpsc::Receiver<Notice>,
    options: NotifierOptions,
    metrics: Arc<Metrics>,
) {
    let client = client();
    while let Some(notice) = receiver.recv().await {
        let result = deliver(&client, &options, &notice).await;
        metrics.record_notification(notice.event, result);
    }
}

async fn deliver(
    client: &HttpClient<Connector, Full<Bytes>>,
    options: &NotifierOptions,
    notice: &Notice,
) -> NotificationResult {
    let body = Bytes::from(
        serde_json::to_vec(&crate::render::NoticePayload::of(notice)).expect("a notice serializes"),
    );
    let mut wait = Duration::from_secs(1);
    for attempt in 0..=options.retries {
        let request = http::Request::post(options.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("sidecar-injector/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(body.clone()))
            .expect("a POST of a valid URI builds");
        let outcome = match tokio::time::timeout(options.timeout, client.request(request)).await {
            Ok(Ok(response)) if response.status().is_success() => {
                info!(
                    event = notice.event.as_str(),
                    sidecar = notice.sidecar,
                    "notification sent"
                );
                return NotificationResult::Sent;
            }
            Ok(Ok(response)) => format!("answered {}", response.status()),
            Ok(Err(err)) => format!("{err}"),
            Err(_) => format!("no answer within --notify-timeout ({:?})", options.timeout),
        };
        let last = attempt == options.retries;
        warn!(
            event = notice.event.as_str(),
            sidecar = notice.sidecar,
            attempt = attempt + 1,
            "notification to --notify-url not delivered: {outcome}{}",
            if last {
                "; giving up on it"
            } else {
                "; retrying"
            }
        );
        if !last {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    NotificationResult::Failed
}
