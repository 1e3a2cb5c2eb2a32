//! Two ways to consume a kube watcher, each object cut down on arrival and errors logged (the
//! watcher relists on its own, with backoff): its relist (`Init`, `InitApply`..., `InitDone`)
//! folded into a single [`Change::Listed`] with everything listed, for the small watches; or
//! its events as they come ([`events_noting_failures`]), for the large ones, whose consumer
//! applies a relist item by item so that no whole list is ever held.

use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use tracing::warn;

/// What a watch delivers, after relist buffering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change<T> {
    /// A (re)list finished: exactly these objects exist now.
    Listed(Vec<T>),
    Applied(T),
    Deleted(T),
}

/// The changes of `events`, each object projected by `project` (which may drop it). `what`
/// names the watch in the log line of a failure.
#[cfg(test)]
pub(crate) fn changes<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    what: &'static str,
    project: impl FnMut(K) -> Option<T>,
) -> impl Stream<Item = Change<T>> {
    folded_relists(projected(events, what, project, |_| {}))
}

/// `events` with each relist folded into one [`Change::Listed`].
fn folded_relists<T>(events: impl Stream<Item = Event<T>>) -> impl Stream<Item = Change<T>> {
    let mut relist: Option<Vec<T>> = None;
    events.filter_map(move |event| {
        let change = match event {
            Event::Init => {
                relist = Some(Vec::new());
                None
            }
            Event::InitApply(item) => {
                relist.get_or_insert_with(Vec::new).push(item);
                None
            }
            Event::InitDone => Some(Change::Listed(relist.take().unwrap_or_default())),
            Event::Apply(item) => Some(Change::Applied(item)),
            Event::Delete(item) => Some(Change::Deleted(item)),
        };
        std::future::ready(change)
    })
}

/// `events` with each object projected by `project` (which may drop it) and each failure
/// logged, then handed to `failed`.
fn projected<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    what: &'static str,
    mut project: impl FnMut(K) -> Option<T>,
    mut failed: impl FnMut(&watcher::Error),
) -> impl Stream<Item = Event<T>> {
    events.filter_map(move |event| {
        let event = match event {
            Ok(Event::Init) => Some(Event::Init),
            Ok(Event::InitApply(object)) => project(object).map(Event::InitApply),
            Ok(Event::InitDone) => Some(Event::InitDone),
            Ok(Event::Apply(object)) => project(object).map(Event::Apply),
            Ok(Event::Delete(object)) => project(object).map(Event::Delete),
            Err(err) => {
                warn!("{what} watch failed, retrying: {}", super::error_text(&err));
                failed(&err);
                None
            }
        };
        std::future::ready(event)
    })
}

/// Watches `api` with `config` and the default backoff, as [`changes`].
pub(crate) fn watch<K, T>(
    api: kube::Api<K>,
    config: watcher::Config,
    what: &'static str,
    project: impl FnMut(K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Change<T>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    watch_noting_failures(api, config, what, project, |_| {})
}

/// As [`watch`], calling `failed` with each failure (a list or watch that failed or that the
/// server refused).
pub(crate) fn watch_noting_failures<K, T>(
    api: kube::Api<K>,
    config: watcher::Config,
    what: &'static str,
    project: impl FnMut(K) -> Option<T> + Send + 'static,
    failed: impl FnMut(&watcher::Error) + Send + 'static,
) -> impl Stream<Item = Change<T>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    folded_relists(events_noting_failures(api, config, what, project, failed)).boxed()
}

/// As [`watch_noting_failures`], the events as they come: a relist is `Init`, then each
/// object listed as `InitApply`, then `InitDone` (after which what was not listed is gone). A
/// relist that fails midway starts again with `Init`.
pub(crate) fn events_noting_failures<K, T>(
    api: kube::Api<K>,
    config: watcher::Config,
    what: &'static str,
    project: impl FnMut(K) -> Option<T> + Send + 'static,
    failed: impl FnMut(&watcher::Error) + Send + 'static,
) -> impl Stream<Item = Event<T>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    projected(
        init_after_success(watcher::watcher(api, config)).backoff(DefaultBackoff::default()),
        what,
        project,
        failed,
    )
    .boxed()
}

/// The watcher config of the large watches (pods, ReplicaSets, workloads): the first list
/// streamed by the watch itself where the API server offers it (`sendInitialEvents`, the
/// WatchList feature: on by default in 1.32 and from 1.34), so that neither side builds a
/// whole list; else listed in pages of 500. One probe watch, of a pod name no pod has, tells
/// which (a server without the feature refuses it).
pub(crate) async fn large_list_config(client: &kube::Client) -> watcher::Config {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;
    const PROBE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
    let streaming = watcher::Config::default().streaming_lists();
    let api: kube::Api<PartialObjectMeta<Pod>> = kube::Api::all(client.clone());
    let probe = watcher::watcher(
        api,
        streaming
            .clone()
            .fields("metadata.name=sidecar-injector.streaming-list-probe"),
    )
    .try_filter(|event| std::future::ready(matches!(event, Event::InitDone)))
    .boxed();
    match tokio::time::timeout(PROBE_DEADLINE, probe.into_future()).await {
        Ok((Some(Ok(_)), _)) => {
            tracing::info!(
                "the API server streams initial lists (sendInitialEvents): watching with them"
            );
            streaming
        }
        Ok((Some(Err(err)), _)) => {
            tracing::info!(
                "the API server does not stream initial lists ({}): listing in pages",
                super::error_text(&err)
            );
            watcher::Config::default()
        }
        Ok((None, _)) | Err(_) => {
            tracing::info!("no answer to a streaming list in {PROBE_DEADLINE:?}: listing in pages");
            watcher::Config::default()
        }
    }
}

/// Whether the API server refused `err`'s request for as long as nothing changes on its side
/// (no rights: 401, 403; a resource it does not serve: 404), rather than failed it in a way a
/// retry may mend (a timeout, a 5xx, a 429, a dropped connection).
pub(crate) fn is_refusal(err: &watcher::Error) -> bool {
    let code = match err {
        watcher::Error::InitialListFailed(err)
        | watcher::Error::WatchStartFailed(err)
        | watcher::Error::WatchFailed(err) => match err {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        },
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::NoResourceVersion => None,
    };
    matches!(code, Some(401 | 403 | 404))
}

/// `events` with each `Event::Init` held back until the (re)list it starts delivers something.
/// kube's watcher sends `Init` before it tries to list, and its backoff is reset by any item
/// that is not an error: a list that kept failing (no rights, an API the server does not
/// serve) reset it every time and was retried about every second, forever. Held back, only a
/// list that works resets the backoff, and a failing one is retried after 0.8 s, 1.6 s, ... up
/// to 30 s.
pub(crate) fn init_after_success<K>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> {
    events
        .scan(false, |init_held, event| {
            let out = match event {
                Ok(Event::Init) => {
                    *init_held = true;
                    Vec::new()
                }
                Err(err) => vec![Err(err)],
                Ok(event) if std::mem::take(init_held) => vec![Ok(Event::Init), Ok(event)],
                Ok(event) => vec![Ok(event)],
            };
            std::future::ready(Some(futures::stream::iter(out)))
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::stream;

    /// A client whose every request is answered `status` with `body`; the request URIs it saw.
    fn answering(
        status: u16,
        body: &'static str,
    ) -> (kube::Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            record.lock().unwrap().push(request.uri().to_string());
            std::future::ready(Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(kube::client::Body::from(body.as_bytes().to_vec()))
                    .unwrap(),
            ))
        });
        (kube::Client::new(service, "default"), seen)
    }

    #[tokio::test]
    async fn a_server_that_streams_initial_lists_is_watched_with_them() {
        let (client, seen) = answering(
            200,
            r#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}
"#,
        );
        let config = large_list_config(&client).await;
        assert_eq!(
            config.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        let seen = seen.lock().unwrap();
        assert!(
            seen[0].contains("sendInitialEvents=true") && seen[0].contains("watch=true"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_server_without_streaming_lists_is_listed_in_pages() {
        let (client, _) = answering(
            422,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#,
        );
        let config = large_list_config(&client).await;
        assert_eq!(
            config.initial_list_strategy,
            watcher::InitialListStrategy::ListWatch
        );
        assert_eq!(config.page_size, Some(500));
    }

    fn collect(events: Vec<Result<Event<u32>, watcher::Error>>) -> Vec<Change<u32>> {
        // Odd numbers stand for objects the projection drops.
        let project = |n: u32| n.is_multiple_of(2).then_some(n * 10);
        block_on(changes(stream::iter(events), "test", project).collect())
    }

    #[test]
    fn a_relist_is_one_change_with_everything_listed() {
        let got = collect(vec![
            Ok(Event::Apply(2)),
            Ok(Event::Init),
            Ok(Event::InitApply(4)),
            Ok(Event::InitApply(5)),
            Ok(Event::InitApply(6)),
            Ok(Event::InitDone),
            Ok(Event::Delete(4)),
            Ok(Event::Apply(7)),
        ]);
        assert_eq!(
            got,
            [
                Change::Applied(20),
                Change::Listed(vec![40, 60]),
                Change::Deleted(40)
            ]
        );
    }

    #[test]
    fn an_empty_list_is_still_a_list_and_a_relist_starts_afresh() {
        let got = collect(vec![
            Ok(Event::Init),
            Ok(Event::InitDone),
            Ok(Event::Init),
            Ok(Event::InitApply(2)),
            Ok(Event::Init),
            Ok(Event::InitApply(8)),
            Ok(Event::InitDone),
        ]);
        assert_eq!(got, [Change::Listed(vec![]), Change::Listed(vec![80])]);
    }

    #[test]
    fn init_is_held_back_until_the_list_it_starts_delivers_something() {
        let failed = || Err(watcher::Error::NoResourceVersion);
        let events = stream::iter(vec![
            Ok(Event::Init),
            failed(),
            Ok(Event::Init),
            failed(),
            Ok(Event::Init),
            Ok(Event::InitApply(2)),
            Ok(Event::InitDone),
            Ok(Event::Apply(4)),
        ]);
        let got: Vec<String> = block_on(init_after_success(events).collect::<Vec<_>>())
            .into_iter()
            .map(|event| match event {
                Ok(Event::Init) => "init".to_owned(),
                Ok(Event::InitApply(n)) => format!("init-apply {n}"),
                Ok(Event::InitDone) => "init-done".to_owned(),
                Ok(Event::Apply(n)) => format!("apply {n}"),
                Ok(Event::Delete(n)) => format!("delete {n}"),
                Err(_) => "error".to_owned(),
            })
            .collect();
        assert_eq!(
            got,
            [
                "error",
                "error",
                "init",
                "init-apply 2",
                "init-done",
                "apply 4"
            ]
        );
    }

    /// A list that keeps failing, as kube's watcher reports it (`Init`, then the error), is
    /// retried ever less often: 0.8 s doubling (with jitter) up to 30 s.
    #[tokio::test(start_paused = true)]
    async fn a_list_that_keeps_failing_is_retried_ever_less_often() {
        let failing = stream::iter(std::iter::repeat_with(|| {
            [
                Ok(Event::<u32>::Init),
                Err(watcher::Error::NoResourceVersion),
            ]
        }))
        .flat_map(stream::iter);
        let start = tokio::time::Instant::now();
        let at: Vec<std::time::Duration> = init_after_success(failing)
            .backoff(DefaultBackoff::default())
            .take(8)
            .map(|_| start.elapsed())
            .collect()
            .await;
        // Retried every second instead (the backoff reset by each `Init`), the eighth failure
        // came after about 6-11 s.
        assert!(
            at[7] >= std::time::Duration::from_secs(40),
            "eight failures within {:?}: {at:?}",
            at[7]
        );
    }
}
