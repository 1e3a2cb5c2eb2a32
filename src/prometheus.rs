//! `--prometheus-url`: the instant queries of the bakes' metric checks. What an answer means
//! is the core's to say ([`crate::rollout::analysis::reading_of`]); this only asks, within a
//! deadline, and says why when it got no answer.

use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HttpClient;
use k8s_openapi::jiff::Timestamp;

use crate::notifier::Connector;
use crate::rollout::analysis::{Reading, reading_of};

/// The most of an answer read: an instant query of one series answers in a few hundred bytes.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A Prometheus server's query API.
#[derive(Clone)]
pub(crate) struct Prometheus {
    base: String,
    timeout: Duration,
    client: HttpClient<Connector, Full<Bytes>>,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// `--prometheus-url`'s parser: an http or https URL, the server's root (or the path a proxy
/// serves it under).
pub(crate) fn parse_prometheus_url(text: &str) -> Result<http::Uri, String> {
    crate::notifier::parse_http_url(text, "queried")
}

impl Prometheus {
    pub(crate) fn new(url: &http::Uri, timeout: Duration) -> Self {
        Self {
            base: url.to_string().trim_end_matches('/').to_owned(),
            timeout,
            client: crate::notifier::client(),
        }
    }

    /// `promql` evaluated at `at`, as a reading: a value, or why there is none.
    pub(crate) async fn query(&self, promql: &str, at: Timestamp) -> Reading {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .append_pair("time", &at.as_second().to_string())
            .finish();
        let uri = format!("{}/api/v1/query?{query}", self.base);
        let request = match http::Request::get(uri.as_str())
            .header(
                http::header::USER_AGENT,
                concat!("sidecar-injector/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::new()))
        {
            Ok(request) => request,
            Err(err) => return Reading::Unknown(format!("cannot build the query: {err}")),
        };
        let answer = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|err| format!("Prometheus is unreachable: {}", error_chain(&err)))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|err| format!("Prometheus's answer could not be read: {err}"))?
                .to_bytes();
            // Prometheus answers a bad query with 400 and a JSON error: that error says why.
            serde_json::from_slice::<serde_json::Value>(&body).map_err(|_| {
                format!("Prometheus answered {status} with no JSON (is --prometheus-url its root?)")
            })
        };
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(answer)) => reading_of(&answer),
            Ok(Err(why)) => Reading::Unknown(why),
            Err(_) => Reading::Unknown(format!(
                "Prometheus did not answer within {}",
                humantime::format_duration(self.timeout)
            )),
        }
    }
}

/// An error with its causes: hyper's own text ("client error (Connect)") says little.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prometheus_url_is_http_or_https_with_a_host() {
        assert!(parse_prometheus_url("http://prometheus.monitoring:9090").is_ok());
        assert_eq!(
            parse_prometheus_url("ftp://prometheus").unwrap_err(),
            "only http and https URLs can be queried, not ftp"
        );
        assert_eq!(
            parse_prometheus_url("prometheus:9090").unwrap_err(),
            "the URL has no scheme (http:// or https://)"
        );
    }
}
