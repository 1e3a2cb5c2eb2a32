//! The series Tumblr's k8s-sidecar-injector exports, under its names, labels and buckets, for
//! dashboards and alerts written against it (`serve --tumblr-metrics`). Exposed next to the
//! project's own series, unprefixed, as Tumblr's were.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct InjectionLabels {
    /// success, skipped or error.
    pub(crate) status: &'static str,
    /// all_groovy, no_annotation, already_injected, ignored_namespace, missing_config,
    /// unmarshal_error, patching_error.
    pub(crate) reason: &'static str,
    /// The requested sidecars when every one is a loaded config, else empty: a pod creator
    /// must not be able to mint series.
    pub(crate) requested: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerLabels {
    handler: &'static str,
    method: &'static str,
}

pub(crate) struct TumblrMetrics {
    pub(super) registry: Registry,
    /// Tumblr's `injections` counter. OpenMetrics requires a counter's samples to end in
    /// `_total`, which would rename the series; exposed as a gauge that only grows, the name
    /// stays `injections` and `rate()`/`increase()` over it work unchanged.
    injections: Family<InjectionLabels, Gauge>,
    requests: Family<RequestLabels, Counter>,
    duration: Family<HandlerLabels, Histogram>,
    in_flight: Gauge,
    response_size: Histogram,
}

impl TumblrMetrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let injections = Family::<InjectionLabels, Gauge>::default();
        registry.register(
            "injections",
            "Count of mutations/injections into a resource",
            injections.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "http_in_flight_requests",
            "A gauge of requests currently being served by the wrapped handler.",
            in_flight.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_api_requests",
            "A counter for requests to the wrapped handler.",
            requests.clone(),
        );
        let duration = Family::<HandlerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
        });
        registry.register(
            "http_request_duration_seconds",
            "A histogram of latencies for requests.",
            duration.clone(),
        );
        let response_size = Histogram::new([100.0, 200.0, 500.0, 900.0, 1500.0, 5000.0]);
        registry.register(
            "http_response_size_bytes",
            "A histogram of response sizes for requests.",
            response_size.clone(),
        );
        Self {
            registry,
            injections,
            requests,
            duration,
            in_flight,
            response_size,
        }
    }

    pub(crate) fn record_injection(&self, labels: InjectionLabels) {
        self.injections.get_or_create(&labels).inc();
    }

    /// A request to `handler` (mutate, health or metrics) begins.
    pub(crate) fn request_started(&self) {
        self.in_flight.inc();
    }

    /// It ended with `code` after `seconds`, its body `bytes` long when known.
    pub(crate) fn request_ended(
        &self,
        handler: &'static str,
        method: &'static str,
        code: u16,
        seconds: f64,
        bytes: Option<u64>,
    ) {
        self.in_flight.dec();
        self.requests
            .get_or_create(&RequestLabels {
                code: code.to_string(),
                method,
            })
            .inc();
        self.duration
            .get_or_create(&HandlerLabels { handler, method })
            .observe(seconds);
        if let Some(bytes) = bytes {
            self.response_size.observe(bytes as f64);
        }
    }
}

impl Default for TumblrMetrics {
    fn default() -> Self {
        Self::new()
    }
}
