//! `serve --promotion=gated --promote-after staging`: the Lease holder promotes a revision
//! waiting here by itself once its campaign is complete and baked in every upstream cluster.
//! It reads only the upstream clusters' status ConfigMaps (with the kubeconfig of a mounted
//! Secret) and writes a promotion into this cluster's book, as `rollout --promote` does; the
//! engine then adopts it. What it waits for is kept beside the promotions, for `drift`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tokio::sync::watch;
use tracing::Level;

use crate::cluster::status;
use crate::rollout::waves::{UpstreamVerdict, upstream_verdict};
use crate::rollout::{CampaignBook, CampaignState, UpstreamWait};
use crate::telemetry::notice;

/// How often the upstream clusters are read while a revision waits here.
const EVERY: Duration = Duration::from_secs(5);
/// How long one read of an upstream cluster may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The upstream clusters a gated revision waits for.
#[derive(Clone)]
pub(crate) struct UpstreamGateOptions {
    /// Each upstream cluster, by its context name.
    pub(crate) clusters: Vec<(String, kube::Client)>,
    /// The injector's namespace there.
    pub(crate) namespace: String,
    /// How long a campaign must have been complete there.
    pub(crate) bake: Duration,
}

impl std::fmt::Debug for UpstreamGateOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.clusters.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("UpstreamGateOptions")
            .field("clusters", &names)
            .field("namespace", &self.namespace)
            .field("bake", &self.bake)
            .finish()
    }
}

/// Runs the gate until the process stops: while this replica holds the rollout Lease, every
/// [`EVERY`], each campaign waiting for promotion here is judged from the upstream books.
pub(crate) async fn run(
    client: kube::Client,
    namespace: String,
    options: UpstreamGateOptions,
    grant: watch::Receiver<Option<Instant>>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut said: BTreeMap<String, String> = BTreeMap::new();
    loop {
        tokio::time::sleep(EVERY).await;
        if !crate::cluster::lease::may_act(&grant) {
            continue;
        }
        let Ok(Some(book)) = read_book(&api).await else {
            continue;
        };
        let waiting = waiting(&book);
        if waiting.is_empty() {
            continue;
        }
        // Read once a pass, whatever number of sidecars wait.
        let upstream = read_upstream(&options).await;
        for (sidecar, revision) in waiting {
            let verdict = upstream_verdict(
                &sidecar,
                &revision,
                &upstream,
                options.bake,
                Timestamp::now(),
            );
            let key = format!("{sidecar}={revision}");
            let text = crate::render::upstream_verdict(&verdict);
            if said.get(&key) != Some(&text) {
                notice(
                    Level::INFO,
                    &format!("{sidecar} revision {revision} {text}"),
                    &[("sidecar", &sidecar), ("revision", &revision)],
                );
                said.insert(key, text);
            }
            let names = options.clusters.iter().map(|(n, _)| n.clone()).collect();
            if let Err(err) = record(&api, &namespace, &sidecar, &revision, names, verdict).await {
                notice(
                    Level::WARN,
                    &format!("cannot write the upstream gate's decision on {sidecar}: {err}"),
                    &[("sidecar", &sidecar)],
                );
            }
        }
    }
}

/// The campaigns of `book` that wait for a promotion not yet written: (sidecar, revision).
fn waiting(book: &CampaignBook) -> Vec<(String, String)> {
    book.campaigns
        .iter()
        .filter(|(sidecar, c)| {
            c.state == CampaignState::Gated && !book.promoted(sidecar, &c.revision)
        })
        .map(|(sidecar, c)| (sidecar.clone(), c.revision.clone()))
        .collect()
}

async fn read_book(api: &Api<ConfigMap>) -> Result<Option<CampaignBook>, String> {
    status::read_book(api, READ_TIMEOUT)
        .await
        .map_err(|e| crate::cluster::error_text(&e))
}

async fn read_upstream(
    options: &UpstreamGateOptions,
) -> Vec<(String, Result<CampaignBook, String>)> {
    let reads = options.clusters.iter().map(|(name, client)| async move {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &options.namespace);
        let book = read_book(&api).await.map(Option::unwrap_or_default);
        (name.clone(), book)
    });
    futures::future::join_all(reads).await
}

/// Writes the verdict into this cluster's book: the promotion, or what the revision waits for
/// (only when that changed).
async fn record(
    api: &Api<ConfigMap>,
    namespace: &str,
    sidecar: &str,
    revision: &str,
    after: Vec<String>,
    verdict: UpstreamVerdict,
) -> Result<(), status::ResumeError> {
    status::edit_book(api, namespace, false, |book| {
        if !book.waits_for_promotion(sidecar, revision) {
            return None;
        }
        match &verdict {
            UpstreamVerdict::Promote { by } => {
                let by = crate::render::promoted_by(by);
                book.promote(sidecar, revision, &by, Time(Timestamp::now()));
                book.upstream.remove(sidecar);
            }
            UpstreamVerdict::Wait(why) => {
                let wait = UpstreamWait {
                    revision: revision.to_owned(),
                    after: after.clone(),
                    waiting: crate::render::upstream_waiting(why),
                };
                if book.upstream.get(sidecar) == Some(&wait) {
                    return None;
                }
                book.upstream.insert(sidecar.to_owned(), wait);
            }
        }
        Some(())
    })
    .await
    .map(|_| ())
}
