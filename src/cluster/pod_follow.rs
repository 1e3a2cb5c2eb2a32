//! One pod followed by a watch on its name, from the resourceVersion its follower last saw.
//!
//! A pod's container states change with no change to the metadata the drift index watches, so
//! the engine follows each pod it upgrades in place this way: one request for the whole
//! upgrade instead of a read every second, and the engine wakes the moment the pod changes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, WatchEvent, WatchParams};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::metrics::{EngineCall, Metrics};

/// How long the API server keeps one watch open before the follower asks again.
const WATCH_SECONDS: u32 = 290;
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// The pod as last seen.
#[derive(Clone, Debug)]
pub enum SeenPod {
    Present(Arc<Pod>),
    /// Deleted: nothing more will be seen of it.
    Gone,
}

/// A pod being followed; dropping it ends the watch.
#[derive(Debug)]
pub struct FollowedPod {
    latest: watch::Receiver<SeenPod>,
    task: JoinHandle<()>,
}

impl FollowedPod {
    /// Follows `pod` (as the API server last returned it: its namespace, name and
    /// resourceVersion are where the watch starts), notifying `changed` at every change seen.
    pub fn start(
        client: kube::Client,
        pod: Pod,
        changed: Arc<Notify>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let version = pod.metadata.resource_version.clone().unwrap_or_default();
        let (seen, latest) = watch::channel(SeenPod::Present(Arc::new(pod)));
        let follower = Follower {
            api: Api::namespaced(client, &namespace),
            name,
            version,
            seen,
            changed,
            metrics,
        };
        Self {
            latest,
            task: tokio::spawn(follower.run()),
        }
    }

    /// The pod as last seen (`None`: deleted).
    pub fn latest(&self) -> Option<Arc<Pod>> {
        match &*self.latest.borrow() {
            SeenPod::Present(pod) => Some(pod.clone()),
            SeenPod::Gone => None,
        }
    }
}

impl Drop for FollowedPod {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Follower {
    api: Api<Pod>,
    name: String,
    /// The resourceVersion of the last thing seen: where the next watch starts.
    version: String,
    seen: watch::Sender<SeenPod>,
    changed: Arc<Notify>,
    metrics: Arc<Metrics>,
}

/// How one watch ended.
enum WatchEnd {
    /// Closed by the API server (its timeout): watch again from the last version.
    Closed,
    /// The pod was deleted.
    Deleted,
    /// The last version is too old to watch from (410 Gone): read the pod again first.
    Expired,
    /// A request (the watch, or the read after a 410) or the stream failed: wait, then watch
    /// again.
    Failed(EngineCall, String),
}

impl Follower {
    async fn run(mut self) {
        let mut retry = FIRST_RETRY;
        loop {
            let end = match self.watch_once().await {
                WatchEnd::Expired => self.read_again().await,
                other => other,
            };
            match end {
                WatchEnd::Closed | WatchEnd::Expired => retry = FIRST_RETRY,
                WatchEnd::Deleted => {
                    self.tell(SeenPod::Gone);
                    return;
                }
                WatchEnd::Failed(call, why) => {
                    self.metrics.record_api_error(call);
                    warn!(
                        pod = self.name,
                        namespace = self.api.namespace(),
                        "following the pod failed, retrying in {retry:?}: {why}"
                    );
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(LAST_RETRY);
                }
            }
        }
    }

    fn tell(&self, seen: SeenPod) {
        self.seen.send_replace(seen);
        self.changed.notify_one();
    }

    fn saw(&mut self, pod: Pod) {
        if let Some(version) = &pod.metadata.resource_version {
            self.version.clone_from(version);
        }
        self.tell(SeenPod::Present(Arc::new(pod)));
    }

    async fn watch_once(&mut self) -> WatchEnd {
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(WATCH_SECONDS);
        self.metrics.record_api_request(EngineCall::WatchPod);
        let events = match self.api.watch(&params, &self.version).await {
            Ok(events) => events,
            Err(err) => return WatchEnd::Failed(EngineCall::WatchPod, super::error_text(&err)),
        };
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => self.saw(pod),
                Ok(WatchEvent::Deleted(_)) => return WatchEnd::Deleted,
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    self.version = bookmark.metadata.resource_version;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => return WatchEnd::Expired,
                Ok(WatchEvent::Error(status)) => {
                    return WatchEnd::Failed(
                        EngineCall::WatchPod,
                        format!("{} ({})", status.message, status.code),
                    );
                }
                Err(err) => return WatchEnd::Failed(EngineCall::WatchPod, super::error_text(&err)),
            }
        }
        WatchEnd::Closed
    }

    /// After a 410, the pod as it is now, so that the next watch starts from a version the API
    /// server still has.
    async fn read_again(&mut self) -> WatchEnd {
        self.metrics.record_api_request(EngineCall::ReadPod);
        match self.api.get_opt(&self.name).await {
            Ok(Some(pod)) => {
                self.saw(pod);
                WatchEnd::Closed
            }
            Ok(None) => WatchEnd::Deleted,
            Err(err) => WatchEnd::Failed(EngineCall::ReadPod, super::error_text(&err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http_body_util::BodyExt;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use kube::Client;
    use serde_json::{Value, json};

    use super::*;
    use crate::test_fixtures::within;

    fn pod(version: &str, restarts: i32) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.name = Some("web-1".into());
        pod.metadata.uid = Some("uid-1".into());
        pod.metadata.resource_version = Some(version.into());
        pod.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "tracer".into(),
                restart_count: restarts,
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    fn event(kind: &str, object: Value) -> String {
        format!("{}\n", json!({"type": kind, "object": object}))
    }

    /// An API server that answers each request with the next of `answers` (a GET's pod, or a
    /// watch's body of events, which then ends as a server-side timeout ends it), recording
    /// each request's method, path and query.
    fn api_server(answers: Vec<String>) -> (Client, Arc<Mutex<Vec<String>>>) {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        let log = seen.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (log, answers) = (log.clone(), answers.clone());
            async move {
                let (parts, body) = request.into_parts();
                body.collect().await.unwrap();
                log.lock().unwrap().push(format!(
                    "{} {}?{}",
                    parts.method,
                    parts.uri.path(),
                    parts.uri.query().unwrap_or("")
                ));
                let next = answers.lock().unwrap().next();
                // Past the script: a watch that stays open (a real one would, until its timeout).
                let Some(answer) = next else {
                    std::future::pending::<()>().await;
                    unreachable!()
                };
                let response = http::Response::builder()
                    .status(200)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(kube::client::Body::from(answer.into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (Client::new(service, "default"), seen)
    }

    fn restarts(pod: Option<Arc<Pod>>) -> Option<i32> {
        pod?.status.as_ref()?.container_statuses.as_ref()?[0]
            .restart_count
            .into()
    }

    #[tokio::test]
    async fn a_followed_pod_is_watched_from_the_last_version_seen_and_ends_when_deleted() {
        let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": "Expired", "message": "too old resource version", "code": 410});
        let (client, requests) = api_server(vec![
            // The first watch sees the container restart, then the server closes it.
            event("MODIFIED", serde_json::to_value(pod("6", 1)).unwrap()),
            // Watched again from 6, which the API server no longer has.
            event("ERROR", gone),
            // Read again...
            serde_json::to_string(&pod("9", 1)).unwrap(),
            // ...and watched from there, until the pod is deleted.
            event("MODIFIED", serde_json::to_value(pod("10", 2)).unwrap())
                + &event("DELETED", serde_json::to_value(pod("11", 2)).unwrap()),
        ]);
        let metrics = Arc::new(Metrics::new());
        let changed = Arc::new(Notify::new());
        let followed = FollowedPod::start(client, pod("5", 0), changed.clone(), metrics.clone());
        assert_eq!(
            restarts(followed.latest()),
            Some(0),
            "the pod it starts from"
        );

        let ended = within(Duration::from_secs(5), || followed.task.is_finished()).await;
        assert!(
            ended.is_some(),
            "the follower ended with the pod's deletion"
        );
        assert!(followed.latest().is_none(), "the pod is seen gone");
        let watch = "GET /api/v1/namespaces/shop/pods?&watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dweb-1&allowWatchBookmarks=true&resourceVersion=";
        assert_eq!(
            *requests.lock().unwrap(),
            [
                format!("{watch}5"),
                format!("{watch}6"),
                "GET /api/v1/namespaces/shop/pods/web-1?".to_owned(),
                format!("{watch}9"),
            ],
            "each watch starts where the last thing seen left off"
        );
        let encoded = metrics.encode();
        for line in [
            "sidecar_injector_rollout_api_requests_total{verb=\"watch_pod\"} 3",
            "sidecar_injector_rollout_api_requests_total{verb=\"read_pod\"} 1",
        ] {
            assert!(encoded.contains(line), "{line} in\n{encoded}");
        }
        assert!(
            tokio::time::timeout(Duration::ZERO, changed.notified())
                .await
                .is_ok(),
            "whoever follows it was told"
        );
    }

    #[tokio::test]
    async fn a_pod_followed_no_longer_is_not_watched_any_more() {
        let (client, requests) = api_server(vec![]);
        let followed = FollowedPod::start(
            client,
            pod("5", 0),
            Arc::new(Notify::new()),
            Arc::new(Metrics::new()),
        );
        let watching = within(Duration::from_secs(5), || {
            !requests.lock().unwrap().is_empty()
        })
        .await;
        assert!(watching.is_some(), "the pod is watched");
        let task = followed.task.abort_handle();
        drop(followed);
        let stopped = within(Duration::from_secs(5), || task.is_finished()).await;
        assert!(stopped.is_some(), "dropping the follower ends its watch");
    }
}
