//! The Lease holder's copy of the campaign book in the status ConfigMap: whose book is there
//! (someone else's is adopted), and when ours is written: at once when a campaign's state,
//! failures or pause changed, at most every [`STATUS_COUNTS_EVERY`] when only its counts did
//! (a campaign would otherwise rewrite the ConfigMap at nearly every restart).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tokio::sync::watch as signal;

use super::*;
use crate::rollout::CampaignBook;

/// Progress counts alone are written at most this often. With the Lease renewals and the
/// heartbeat they are most of what a campaign costs the API server beside its restarts; at
/// 5 s, a campaign of 46 restarts a minute sent 0.64 requests a restart by time alone.
pub(crate) const STATUS_COUNTS_EVERY: Duration = Duration::from_secs(15);

/// What is known of the status ConfigMap as this process last read or wrote it.
pub(crate) struct BookWriter {
    status: signal::Receiver<Option<ConfigMap>>,
    /// The resourceVersion of the status ConfigMap our book corresponds to.
    known_version: Option<String>,
    written: Option<BTreeMap<String, String>>,
    /// The book last written, counts aside, and when.
    written_shape: Option<(String, Timestamp)>,
    /// The error of the malformed book last said, so that it is said once.
    malformed: Option<String>,
}

/// What a [`BookWriter::write`] did.
#[derive(Debug)]
pub(crate) enum BookWrite {
    /// Written: the campaigns item's size, for the book alert.
    Stored {
        bytes: usize,
    },
    /// Already as written: nothing sent.
    Unchanged {
        bytes: usize,
    },
    /// Only the counts changed, within [`STATUS_COUNTS_EVERY`] of the last write: due then.
    Later(Timestamp),
    /// Someone else wrote it since: the watch brings their copy, adopted before the next write.
    Conflict,
    Failed(kube::Error),
}

impl BookWriter {
    /// `status` watches the status ConfigMap ([`watch_status`]).
    pub(crate) fn new(status: signal::Receiver<Option<ConfigMap>>) -> Self {
        Self {
            status,
            known_version: None,
            written: None,
            written_shape: None,
            malformed: None,
        }
    }

    /// As if `book` had been written `at`.
    #[cfg(test)]
    pub(crate) fn wrote(&mut self, book: &CampaignBook, at: Timestamp) {
        self.written = Some(encode(None, book));
        self.written_shape = Some((book_shape(book), at));
    }

    /// Resolves when the status ConfigMap changes; `false` once its watch is gone.
    pub(crate) async fn changed(&mut self) -> bool {
        self.status.changed().await.is_ok()
    }

    /// Waits at most `deadline` for the first read of the status ConfigMap (present or not).
    pub(crate) async fn first_read(&mut self, deadline: Duration) {
        let _ = tokio::time::timeout(deadline, self.status.changed()).await;
    }

    /// The book someone else wrote (a previous leader, `rollout --resume`) since this process
    /// last read or wrote it; `None` when the campaigns item is ours, or malformed (said once).
    pub(crate) fn theirs(&mut self) -> Option<CampaignBook> {
        let configmap = self.status.borrow_and_update().clone()?;
        let version = configmap.metadata.resource_version.clone();
        if version.is_some() && version == self.known_version {
            return None;
        }
        // Only a change of the campaigns item is someone else's book; a publication or
        // heartbeat leaves ours as it is.
        let item = |data: Option<&BTreeMap<String, String>>| {
            data.and_then(|d| d.get(STATUS_CAMPAIGNS_KEY)).cloned()
        };
        let mut adopted = None;
        if item(configmap.data.as_ref()) != item(self.written.as_ref()) {
            // Theirs is in the ConfigMap now: whatever differs from it is written at once.
            self.written_shape = None;
            adopted = book_or_warn(Some(&configmap), &mut self.malformed).flatten();
        }
        self.written = configmap.data.clone().map(|d| d.into_iter().collect());
        self.known_version = version;
        adopted
    }

    /// Writes `book` when it changed (now, with `flush`, even if only its counts did).
    pub(crate) async fn write(
        &mut self,
        api: &Api<ConfigMap>,
        namespace: &str,
        book: &CampaignBook,
        flush: bool,
        now: Timestamp,
        timeout: Duration,
    ) -> BookWrite {
        let data = encode(self.written.as_ref(), book);
        let bytes = data.get(STATUS_CAMPAIGNS_KEY).map_or(0, String::len);
        if self.written.as_ref() == Some(&data) {
            return BookWrite::Unchanged { bytes };
        }
        let shape = book_shape(book);
        if !flush
            && let Some((written, at)) = &self.written_shape
            && *written == shape
        {
            let due = crate::rollout::after(*at, STATUS_COUNTS_EVERY);
            if due > now {
                return BookWrite::Later(due);
            }
        }
        let configmap = status_object(namespace, self.known_version.clone(), data.clone());
        match crate::cluster::with_timeout(timeout, write(api, &configmap)).await {
            Ok(written) => {
                self.known_version = written.metadata.resource_version;
                self.written = Some(data);
                self.written_shape = Some((shape, now));
                BookWrite::Stored { bytes }
            }
            Err(e) if crate::cluster::is_conflict(&e) => {
                if self.known_version.is_none() {
                    self.known_version = Some(String::new());
                }
                BookWrite::Conflict
            }
            Err(e) => BookWrite::Failed(e),
        }
    }
}
