//! Traces over OTLP (`serve --otlp-endpoint`, built with the `otlp` cargo feature): the spans
//! of admission reviews (continuing the `traceparent` the API server sends), rollout plans and
//! restarts, batched to an OpenTelemetry collector over OTLP/HTTP (protobuf).

use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{KeyValue, propagation::TextMapPropagator};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::{Level, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

use crate::notifier::Connector;

/// Where and how many traces go.
#[derive(Clone, Debug)]
pub(crate) struct TraceSettings {
    /// The collector's OTLP/HTTP base URL (`http://otel-collector:4318`); spans go to its
    /// `/v1/traces`.
    pub(crate) endpoint: http::Uri,
    /// The share of traces begun here that are kept; a trace the API server began keeps its
    /// decision.
    pub(crate) sampling_ratio: f64,
    /// `service.instance.id`: the pod's name.
    pub(crate) instance: Option<String>,
}

/// The traces' endpoint URL: the base URL's `/v1/traces`, or the URL as given when it names
/// that path already (as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` does).
pub(crate) fn traces_url(endpoint: &http::Uri) -> String {
    let text = endpoint.to_string();
    if text.trim_end_matches('/').ends_with("/v1/traces") {
        text
    } else {
        format!("{}/v1/traces", text.trim_end_matches('/'))
    }
}

/// Sends what is still batched when dropped (at the end of `serve`).
pub(crate) struct TracesGuard(SdkTracerProvider);

impl Drop for TracesGuard {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum TracesError {
    #[error("cannot start the OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
    #[error("cannot start the OTLP exporter's runtime: {0}")]
    Runtime(std::io::Error),
}

/// The layer that turns the project's spans into OpenTelemetry spans, and its guard. Only
/// spans (and warnings and errors, as span events) reach it: a debug line is no span event.
pub(crate) fn layer<S>(
    settings: &TraceSettings,
) -> Result<(impl Layer<S> + use<S>, TracesGuard), TracesError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let url = traces_url(&settings.endpoint);
    let client = ExportClient {
        client: crate::notifier::client(),
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(TracesError::Runtime)?,
        timeout: EXPORT_TIMEOUT,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(&url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|err| TracesError::Exporter {
            endpoint: url.clone(),
            reason: err.to_string(),
        })?;
    let mut resource = vec![KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))];
    if let Some(instance) = &settings.instance {
        resource.push(KeyValue::new("service.instance.id", instance.clone()));
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sampling_ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("sidecar-injector")
                .with_attributes(resource)
                .build(),
        )
        .build();
    let tracer = provider.tracer("sidecar-injector");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(|metadata| {
            metadata.target().starts_with("sidecar_injector")
                && (metadata.is_span() || *metadata.level() <= Level::WARN)
        }));
    Ok((layer, TracesGuard(provider)))
}

/// A request to the collector gets this long, reading its answer included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter's HTTP client: the notifier's (https with the system's roots, else Mozilla's).
/// The batch processor exports from a thread of its own, outside any async runtime, so its
/// requests run on a small runtime of their own, never on the webhook's workers.
#[derive(Debug)]
struct ExportClient {
    client: hyper_util::client::legacy::Client<Connector, Full<Bytes>>,
    runtime: tokio::runtime::Runtime,
    timeout: Duration,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Full::new(body));
        self.runtime.block_on(async {
            let exchange = async {
                let response = self.client.request(request).await?;
                let (parts, body) = response.into_parts();
                let body = body.collect().await?.to_bytes();
                Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
            };
            tokio::time::timeout(self.timeout, exchange)
                .await
                .map_err(|_| format!("no answer within {:?}", self.timeout))?
        })
    }
}

/// `span` continues the trace `headers` carry (W3C `traceparent`, as the API server sends it
/// to webhooks when its tracing is on); without one it begins a trace.
pub(crate) fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if headers.contains_key("traceparent") {
        let parent =
            TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
        let _ = span.set_parent(parent);
    }
}

/// The trace id of `span` when it is sampled: what an exemplar names.
pub(crate) fn sampled_trace_id(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    (span_context.is_valid() && span_context.is_sampled())
        .then(|| span_context.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_go_to_the_traces_path_of_the_endpoint() {
        let url = |text: &str| traces_url(&text.parse().unwrap());
        assert_eq!(
            url("http://collector:4318"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            url("https://otlp.example.com/v1/traces"),
            "https://otlp.example.com/v1/traces"
        );
        assert_eq!(url("http://gateway/otlp"), "http://gateway/otlp/v1/traces");
    }
}
