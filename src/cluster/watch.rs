//! One way to consume a kube watcher: its relist buffering (`Init`, `InitApply`...,
//! `InitDone`) folded into a single [`Change::Listed`] with everything listed, each object cut
//! down on arrival, errors logged (the watcher relists on its own, with backoff).

use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tracing::warn;

/// What a watch delivers, after relist buffering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<T> {
    /// A (re)list finished: exactly these objects exist now.
    Listed(Vec<T>),
    Applied(T),
    Deleted(T),
}

/// The changes of `events`, each object projected by `project` (which may drop it). `what`
/// names the watch in the log line of a failure.
pub fn changes<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    what: &'static str,
    mut project: impl FnMut(K) -> Option<T>,
) -> impl Stream<Item = Change<T>> {
    let mut relist: Option<Vec<T>> = None;
    events.filter_map(move |event| {
        let change = match event {
            Ok(Event::Init) => {
                relist = Some(Vec::new());
                None
            }
            Ok(Event::InitApply(object)) => {
                if let Some(item) = project(object) {
                    relist.get_or_insert_with(Vec::new).push(item);
                }
                None
            }
            Ok(Event::InitDone) => Some(Change::Listed(relist.take().unwrap_or_default())),
            Ok(Event::Apply(object)) => project(object).map(Change::Applied),
            Ok(Event::Delete(object)) => project(object).map(Change::Deleted),
            Err(err) => {
                warn!("{what} watch failed, retrying: {}", super::error_text(&err));
                None
            }
        };
        std::future::ready(change)
    })
}

/// Watches `api` with `config` and the default backoff, as [`changes`].
pub fn watch<K, T>(
    api: kube::Api<K>,
    config: watcher::Config,
    what: &'static str,
    project: impl FnMut(K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Change<T>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    changes(
        watcher::watcher(api, config).default_backoff(),
        what,
        project,
    )
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::stream;

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
}
