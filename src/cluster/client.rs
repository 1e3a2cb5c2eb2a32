//! The Kubernetes client of `serve` and the one-shot commands, with every request it sends
//! counted by verb, as client-go's `rest_client_requests_total` does, so that "no LIST after
//! the initial sync" is something an operator can read off `/metrics`.

use kube::client::ClientBuilder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::util::MapRequestLayer;

use crate::metrics::VerbLabels;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// Builds the client from `config`, counting each request into `requests`.
///
/// kube's default stack retries a 429 up to 15 times with backoff up to 1000 s. A 429 from an
/// eviction is a PodDisruptionBudget saying "not now", which the rollout engine must hear at
/// once (it tries again on its next plan), and every call here already has its own deadline
/// and retry (the next plan, the watchers' backoff), so that hidden retry is turned off.
pub(crate) fn counted_client(
    mut config: kube::Config,
    requests: Family<VerbLabels, Counter>,
) -> Result<kube::Client, ClientError> {
    config.default_retry = false;
    let count = MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        let verb = request_verb(
            request.method(),
            request.uri().path(),
            request.uri().query().unwrap_or(""),
        );
        requests.get_or_create(&VerbLabels { verb }).inc();
        request
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&count).build())
}

/// The API server's verb for a request, as its RequestInfo resolver names it: `get` and `list`
/// are told apart by whether the path names an object, `watch` by the query (or the old
/// `/watch/` path prefix).
pub(crate) fn request_verb(method: &http::Method, path: &str, query: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return other_verb(method),
    };
    let old_watch = rest.first() == Some(&"watch");
    let rest = if old_watch { &rest[1..] } else { rest };
    // `namespaces/NS/resource/...`, except `namespaces/NS` itself, which is the Namespace object.
    let resource_path = match rest {
        ["namespaces", _namespace, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let names_an_object = resource_path.len() >= 2;
    match *method {
        http::Method::GET if old_watch || watch_query(query) => "watch",
        http::Method::GET if names_an_object => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if names_an_object => "delete",
        http::Method::DELETE => "deletecollection",
        _ => other_verb(method),
    }
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

    #[test]
    fn verbs_are_named_as_the_api_server_names_them() {
        let cases = [
            (Method::GET, "/api/v1/pods", "", "list"),
            (
                Method::GET,
                "/api/v1/pods",
                "watch=true&resourceVersion=5",
                "watch",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods",
                "labelSelector=a",
                "list",
            ),
            (Method::GET, "/api/v1/namespaces/ns/pods/web-1", "", "get"),
            (Method::GET, "/api/v1/namespaces/ns", "", "get"),
            (Method::GET, "/api/v1/namespaces", "", "list"),
            (Method::GET, "/api/v1/watch/namespaces/ns/pods", "", "watch"),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/ns/deployments",
                "fieldSelector=x&watch=1",
                "watch",
            ),
            (
                Method::GET,
                "/apis/apps/v1/deployments",
                "limit=500",
                "list",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/ns/deployments/web",
                "",
                "patch",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/pods/web-1/eviction",
                "",
                "create",
            ),
            (Method::POST, "/api/v1/namespaces/ns/events", "", "create"),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                "",
                "update",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods/web-1",
                "",
                "delete",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods",
                "",
                "deletecollection",
            ),
            (Method::GET, "/version", "", "get"),
        ];
        for (method, path, query, verb) in cases {
            assert_eq!(
                request_verb(&method, path, query),
                verb,
                "{method} {path}?{query}"
            );
        }
    }
}
