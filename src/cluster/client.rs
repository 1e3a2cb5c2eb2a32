//! The Kubernetes client of `serve` and the one-shot commands, with every request it sends
//! counted by verb, as client-go's `rest_client_requests_total` does, so that "no LIST after
//! the initial sync" is something an operator can read off `/metrics`; held to a client-side
//! rate limit (`--kube-api-qps`, `--kube-api-burst`), as client-go's clients are and kube's
//! are not; and named by its user agent in the API server's logs and audit events.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::header::{HeaderValue, USER_AGENT};
use kube::client::ClientBuilder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tower::util::MapRequestLayer;
use tower::{Layer, Service};

use crate::metrics::{VerbLabels, rate_limiter_histogram};
use crate::token_bucket::{RateLimit, TokenBucket};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// What the client records of its requests.
#[derive(Clone, Debug)]
pub(crate) struct ClientMetrics {
    /// Requests by verb (`sidecar_injector_kube_requests_total`).
    pub(crate) requests: Family<VerbLabels, Counter>,
    /// Each request's wait for the rate limit
    /// (`sidecar_injector_kube_rate_limiter_duration_seconds`).
    pub(crate) rate_limiter_wait: Histogram,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            rate_limiter_wait: rate_limiter_histogram(),
        }
    }
}

/// Builds the client from `config` for `command` (`serve`, `drift`...: the user agent says
/// which), counting each request into `metrics` and holding them to `limit`.
///
/// kube's default stack retries a 429 up to 15 times with backoff up to 1000 s. A 429 from an
/// eviction is a PodDisruptionBudget saying "not now", which the rollout engine must hear at
/// once (it tries again on its next plan), and every call here already has its own deadline
/// and retry (the next plan, the watchers' backoff), so that hidden retry is turned off.
pub(crate) fn counted_client(
    mut config: kube::Config,
    command: &str,
    limit: RateLimit,
    metrics: ClientMetrics,
) -> Result<kube::Client, ClientError> {
    config.default_retry = false;
    if let Ok(agent) = HeaderValue::from_str(&user_agent(command)) {
        config.headers.retain(|(name, _)| name != USER_AGENT);
        config.headers.push((USER_AGENT, agent));
    }
    let requests = metrics.requests;
    let count = MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        let kind = request_kind(
            request.method(),
            request.uri().path(),
            request.uri().query().unwrap_or(""),
        );
        requests.get_or_create(&kind).inc();
        request
    });
    let limited = RateLimitLayer {
        limit,
        waited: metrics.rate_limiter_wait,
    };
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&count)
        .with_layer(&limited)
        .build())
}

/// `sidecar-injector/0.4.0 (serve)`: what `kubectl` and client-go send as
/// `kubectl/v1.36.3 (linux/amd64)`, for the API server's logs, audit events and an operator
/// looking for who sends what.
pub(crate) fn user_agent(command: &str) -> String {
    format!(
        "sidecar-injector/{} ({command}; {})",
        env!("CARGO_PKG_VERSION"),
        crate::COMMIT
    )
}

/// Holds a service's requests to a [`RateLimit`].
#[derive(Clone, Debug)]
pub(crate) struct RateLimitLayer {
    pub(crate) limit: RateLimit,
    pub(crate) waited: Histogram,
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: TokenBucket::new(self.limit, tokio::time::Instant::now().into_std()),
            waited: self.waited.clone(),
            reserved: false,
            sleep: None,
        }
    }
}

/// The service of [`RateLimitLayer`]. It waits in `poll_ready`, as tower's own rate limit
/// does: kube's client drives it from one buffer worker, so requests go out in the order they
/// were made, each when its token comes, and a token is taken only for a request that exists.
pub(crate) struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
    waited: Histogram,
    /// A token is reserved for the next call.
    reserved: bool,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.reserved {
            self.reserved = true;
            let wait = self.bucket.take(tokio::time::Instant::now().into_std());
            self.waited.observe(wait.as_secs_f64());
            if !wait.is_zero() {
                self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
            }
        }
        if let Some(sleep) = &mut self.sleep {
            ready!(sleep.as_mut().poll(cx));
            self.sleep = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.reserved = false;
        self.inner.call(request)
    }
}

/// The API server's verb and resource for a request, as its RequestInfo resolver names them:
/// `get` and `list` are told apart by whether the path names an object, `watch` by the query
/// (or the old `/watch/` path prefix); a subresource follows its resource (`pods/eviction`); a
/// path outside the resource APIs (`/version`) has resource "".
pub(crate) fn request_kind(method: &http::Method, path: &str, query: &str) -> VerbLabels {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => {
            return VerbLabels {
                verb: other_verb(method),
                resource: String::new(),
            };
        }
    };
    let old_watch = rest.first() == Some(&"watch");
    let rest = if old_watch { &rest[1..] } else { rest };
    // `namespaces/NS/resource/...`, except `namespaces/NS` itself, which is the Namespace object.
    let resource_path = match rest {
        ["namespaces", _namespace, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let names_an_object = resource_path.len() >= 2;
    let resource = match resource_path {
        [resource, _name, subresource, ..] => format!("{resource}/{subresource}"),
        [resource, ..] => (*resource).to_owned(),
        [] => String::new(),
    };
    let verb = match *method {
        http::Method::GET if old_watch || watch_query(query) => "watch",
        http::Method::GET if names_an_object => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if names_an_object => "delete",
        http::Method::DELETE => "deletecollection",
        _ => other_verb(method),
    };
    VerbLabels { verb, resource }
}

fn watch_query(query: &str) -> bool {
    query
        .split('&')
        .any(|pair| pair == "watch=true" || pair == "watch=1")
}

fn other_verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "get",
        http::Method::POST => "create",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tower::ServiceExt;

    /// The instants (since the start) at which a service behind a limit of 20 a second, burst
    /// 30, saw 60 requests made at once.
    async fn sent_at(limit: RateLimit) -> (Vec<Duration>, Histogram) {
        let start = tokio::time::Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let inner = tower::service_fn(move |_: ()| {
            record.lock().unwrap().push(start.elapsed());
            std::future::ready(Ok::<_, std::convert::Infallible>(()))
        });
        let waited = rate_limiter_histogram();
        let layer = RateLimitLayer {
            limit,
            waited: waited.clone(),
        };
        let mut service = tower::buffer::Buffer::new(layer.layer(inner), 1024);
        let calls: Vec<_> = (0..60)
            .map(|_| {
                let mut service = service.clone();
                tokio::spawn(async move { service.ready().await.unwrap().call(()).await })
            })
            .collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        service.ready().await.unwrap();
        let seen = seen.lock().unwrap().clone();
        (seen, waited)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_beyond_the_burst_go_at_the_rate() {
        let (seen, waited) = sent_at(RateLimit::DEFAULT).await;
        assert_eq!(seen.len(), 60);
        let at_once = seen.iter().filter(|t| t.is_zero()).count();
        assert_eq!(at_once, 30, "the burst goes at once: {seen:?}");
        // The other 30 come one every 50 ms: the last at 1.5 s.
        let last = *seen.last().unwrap();
        assert!(
            (last.as_secs_f64() - 1.5).abs() < 0.01,
            "the last request went at {last:?}"
        );
        for from in &seen {
            let in_a_second = seen
                .iter()
                .filter(|t| *t >= from && **t < *from + Duration::from_secs(1))
                .count();
            assert!(
                in_a_second <= 30 + 20,
                "{in_a_second} requests in the second from {from:?}"
            );
        }
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("wait", "", waited);
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("wait_count 60"), "{text}");
        assert!(
            !text.contains("wait_sum 0.0\n"),
            "the waits are recorded: {text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_qps_of_zero_sends_everything_at_once() {
        let (seen, _) = sent_at(RateLimit { qps: 0.0, burst: 1 }).await;
        assert!(seen.iter().all(Duration::is_zero), "{seen:?}");
    }

    #[test]
    fn the_user_agent_names_the_tool_its_version_and_the_command() {
        let agent = user_agent("serve");
        assert!(
            agent.starts_with(&format!(
                "sidecar-injector/{} (serve; ",
                env!("CARGO_PKG_VERSION")
            )),
            "{agent}"
        );
        assert!(HeaderValue::from_str(&agent).is_ok());
    }

    #[test]
    fn verbs_and_resources_are_named_as_the_api_server_names_them() {
        // method, path, query, verb, resource ("-": empty)
        let cases = "
            GET /api/v1/pods - list pods
            GET /api/v1/pods watch=true&resourceVersion=5 watch pods
            GET /api/v1/namespaces/ns/pods labelSelector=a list pods
            GET /api/v1/namespaces/ns/pods/web-1 - get pods
            GET /api/v1/namespaces/ns - get namespaces
            GET /api/v1/namespaces - list namespaces
            GET /api/v1/watch/namespaces/ns/pods - watch pods
            GET /apis/apps/v1/namespaces/ns/deployments fieldSelector=x&watch=1 watch deployments
            GET /apis/apps/v1/deployments limit=500 list deployments
            PATCH /apis/apps/v1/namespaces/ns/deployments/web - patch deployments
            POST /api/v1/namespaces/ns/pods/web-1/eviction - create pods/eviction
            POST /api/v1/namespaces/ns/events - create events
            PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/l - update leases
            DELETE /api/v1/namespaces/ns/pods/web-1 - delete pods
            DELETE /api/v1/namespaces/ns/pods - deletecollection pods
            GET /version - get -";
        let dash = |text: &'static str| if text == "-" { "" } else { text };
        for case in cases.lines().filter(|line| !line.trim().is_empty()) {
            let [method, path, query, verb, resource] = case
                .split_whitespace()
                .collect::<Vec<_>>()
                .try_into()
                .expect("five fields");
            let method: Method = method.parse().unwrap();
            assert_eq!(
                request_kind(&method, path, dash(query)),
                VerbLabels {
                    verb: dash(verb),
                    resource: dash(resource).to_owned()
                },
                "{case}"
            );
        }
    }
}
