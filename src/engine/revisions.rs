//! The revisions a plan brings pods to, and the revision history ConfigMap: read once, noted
//! at every plan, written when it changed (only by the Lease holder).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tracing::{info, warn};

use super::{ActionError, Engine, with_timeout};
use crate::cluster::status;
use crate::config::SidecarSet;
use crate::metrics::EngineCall;
use crate::rollout::targets::revision_targets;
use crate::rollout::{self, SidecarTarget};

impl Engine {
    /// The targets of a plan by revision: the cluster's book adopted, pins whose config changed
    /// dropped (when this process writes the book), the history read; and the configs in force
    /// ([`revision_targets`]).
    pub(super) async fn revision_targets(
        &mut self,
        set: &SidecarSet,
        may_write: bool,
    ) -> (BTreeMap<String, SidecarTarget>, SidecarSet) {
        self.adopt_cluster_book();
        if may_write && self.published.is_none() {
            for (sidecar, pin) in self.state.book.drop_stale_pins(set) {
                info!(
                    sidecar,
                    "the pin of {sidecar} at {} ends: its config changed since it was pinned over {}",
                    pin.revision,
                    pin.over
                );
            }
        }
        self.load_revisions().await;
        let published = self.published.as_ref().map(|p| (&p.revisions, &p.manual));
        let computed = revision_targets(
            &self.state.book,
            published,
            &mut self.history,
            &mut self.revisions,
            set,
            &self.options.settings,
            !self.options.ignore_manual_policy,
            Timestamp::now(),
        );
        self.say_overlay_errors(&computed.errors);
        self.revisions_dirty |= computed.history_changed;
        (computed.targets, computed.in_force)
    }

    /// Logs what a pin could not serve, once while it stays the same.
    fn say_overlay_errors(&mut self, errors: &[rollout::content::ContentError]) {
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if texts != self.overlay_errors {
            for text in &texts {
                warn!("a pinned revision is not served: {text}");
            }
            self.overlay_errors = texts;
        }
    }

    /// Reads the revision history ConfigMap until it has been read once; a failure is said and
    /// tried again at the next plan (the history is never written before it was read).
    async fn load_revisions(&mut self) {
        if self.revisions_version.is_some() {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.options.namespace);
        self.metrics.record_api_request(EngineCall::Status);
        match status::read_history(&api).await {
            Ok((history, version)) => {
                self.revisions = history;
                self.revisions_version = Some(version);
            }
            Err(err) => warn!(
                "{}; a paused campaign cannot hold new pods at a good revision until it is read",
                crate::cluster::error_text(&err)
            ),
        }
    }

    /// Notes the revisions served and their outcomes in the history, and writes it when that
    /// changed it (or it was never written).
    pub(super) async fn record_revisions(&mut self, served: &SidecarSet, now: Timestamp) {
        let Some(version) = self.revisions_version.clone() else {
            return;
        };
        self.revisions_dirty |= self.revisions.observe(
            served,
            &self.state.book,
            now,
            self.options.settings.good_after,
            self.options.settings.history_limit,
        );
        if !self.revisions_dirty && version.is_some() {
            return;
        }
        if self.revisions.sidecars.is_empty() {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.options.namespace);
        let object = status::history_object(&self.options.namespace, version, &self.revisions);
        self.metrics.record_api_request(EngineCall::Status);
        match with_timeout(status::write(&api, &object)).await {
            Ok(written) => {
                self.revisions_version = Some(written.metadata.resource_version);
                self.revisions_dirty = false;
            }
            // Another holder wrote it since: read it again and note this plan's view on it.
            Err(e) if crate::cluster::is_conflict(&e) => {
                info!("the revision history changed under us; re-reading it");
                self.revisions_version = None;
                self.retry_later();
            }
            Err(source) => {
                self.failed(&ActionError::WriteHistory { source });
                self.retry_later();
            }
        }
    }
}
