//! `rollout --promote SIDECAR --wave staging --wave prod-eu,prod-us`: a revision promoted
//! across clusters, wave by wave. Each wave's clusters are promoted (in each, the Lease holder
//! of `serve --promotion=gated` then runs the campaign), watched until complete and baked, and
//! only then does the next wave start. A failure anywhere stops the fleet with nothing further
//! promoted. The run keeps no state: each pass reads every cluster's campaign book, so a
//! second run goes on from where the first stopped and restarts nothing twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;

use crate::cluster::status::{self, ResumeError};
use crate::render as words;
use crate::rollout::CampaignBook;
use crate::rollout::waves::{
    RevisionUnknown, Standing, WaveStep, fleet_revision, progress, wave_step,
};

/// How long one read of a cluster's book may take.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the clusters of the running wave are read.
const POLL: Duration = Duration::from_secs(2);

/// A client of the cluster a kubeconfig context names, or why there is none.
pub(crate) type Connect = dyn Fn(String) -> BoxFuture<'static, Result<kube::Client, String>> + Sync;

/// What a fleet rollout promotes, and where.
pub(crate) struct FleetRollout {
    /// The waves, each a list of kubeconfig contexts.
    pub(crate) waves: Vec<Vec<String>>,
    pub(crate) sidecar: String,
    /// Who promotes, as the books record it.
    pub(crate) by: String,
    /// Where each cluster keeps its campaign book.
    pub(crate) namespace: String,
    /// How long a cluster's completed campaign bakes before it counts as done.
    pub(crate) bake: Duration,
    /// How long one wave may take, from its start to baked.
    pub(crate) timeout: Duration,
}

/// How a fleet run ended.
#[derive(Debug)]
pub(crate) enum FleetEnd {
    /// Every wave rolled out and baked.
    Done,
    /// A cluster of wave `wave` (from 0) failed: nothing further was promoted.
    Stopped {
        wave: usize,
        cluster: String,
        workload: Option<String>,
        reason: String,
    },
    /// Wave `wave` (from 0) did not finish within its timeout; where its clusters stand.
    TimedOut {
        wave: usize,
        progress: Vec<(String, Standing)>,
    },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum FleetError {
    #[error("{cluster}: cannot connect: {error}")]
    Connect { cluster: String, error: String },
    #[error("{cluster}: cannot write the promotion: {source}")]
    Promote {
        cluster: String,
        #[source]
        source: ResumeError,
    },
}

/// One cluster of the fleet, as the run reaches it.
struct Cluster {
    name: String,
    client: Option<kube::Client>,
}

impl Cluster {
    /// Its client, made at the first use that succeeds (a cluster not reachable at start is
    /// tried again at each pass).
    async fn client(&mut self, connect: &Connect) -> Result<kube::Client, String> {
        if self.client.is_none() {
            self.client = Some(connect(self.name.clone()).await?);
        }
        Ok(self.client.clone().expect("connected above"))
    }

    /// Its campaign book (empty when it has none yet).
    async fn book(&mut self, connect: &Connect, namespace: &str) -> Result<CampaignBook, String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client(connect).await?, namespace);
        status::read_book(&api, READ_TIMEOUT)
            .await
            .map(Option::unwrap_or_default)
            .map_err(|err| crate::cluster::api_errors_said(err.to_string(), &err))
    }

    /// Writes the approval of `revision` into its book, if its campaign still waits for it.
    async fn promote(
        &mut self,
        connect: &Connect,
        spec: &FleetRollout,
        revision: &str,
        by: &str,
    ) -> Result<bool, FleetError> {
        let client = self
            .client(connect)
            .await
            .map_err(|error| FleetError::Connect {
                cluster: self.name.clone(),
                error,
            })?;
        let api: Api<ConfigMap> = Api::namespaced(client, &spec.namespace);
        let written = status::edit_book(&api, &spec.namespace, false, |book| {
            (book.waits_for_promotion(&spec.sidecar, revision)
                && book.promote(&spec.sidecar, revision, by, Time(Timestamp::now())))
            .then_some(())
        })
        .await
        .map_err(|source| FleetError::Promote {
            cluster: self.name.clone(),
            source,
        })?;
        Ok(written.is_some())
    }
}

/// A fleet rollout of one revision, its clusters reached through `connect`.
pub(crate) struct Fleet<'c> {
    spec: FleetRollout,
    revision: String,
    clusters: Vec<Vec<Cluster>>,
    connect: &'c Connect,
}

impl<'c> Fleet<'c> {
    /// The fleet rollout of `revision`, or when none is named, of the revision the first
    /// wave's campaigns agree on.
    pub(crate) async fn new(
        spec: FleetRollout,
        revision: Option<String>,
        connect: &'c Connect,
    ) -> Result<Self, RevisionUnknown> {
        let clusters = spec
            .waves
            .iter()
            .map(|wave| {
                wave.iter()
                    .map(|name| Cluster {
                        name: name.clone(),
                        client: None,
                    })
                    .collect()
            })
            .collect();
        let mut fleet = Self {
            spec,
            revision: revision.clone().unwrap_or_default(),
            clusters,
            connect,
        };
        if revision.is_none() {
            let first = fleet.read_wave(0).await;
            fleet.revision = fleet_revision(&fleet.spec.sidecar, &first)?;
        }
        Ok(fleet)
    }

    pub(crate) fn revision(&self) -> &str {
        &self.revision
    }

    pub(crate) fn spec(&self) -> &FleetRollout {
        &self.spec
    }

    /// `--dry-run`: where every cluster stands, nothing promoted.
    pub(crate) async fn show(&mut self) {
        for n in 0..self.clusters.len() {
            say(&self.heading(n));
            for (cluster, p) in self.progress(n).await {
                say(&format!("{cluster}: {}", crate::render::standing(&p)));
            }
        }
    }

    /// Every wave promoted and watched in turn, until one stops or times out.
    pub(crate) async fn run(&mut self) -> Result<FleetEnd, FleetError> {
        for n in 0..self.clusters.len() {
            let end = self.run_wave(n).await?;
            if !matches!(end, FleetEnd::Done) {
                return Ok(end);
            }
        }
        Ok(FleetEnd::Done)
    }

    fn heading(&self, n: usize) -> String {
        words::wave_heading(n, &self.spec.waves, &self.spec.sidecar, &self.revision)
    }

    async fn progress(&mut self, n: usize) -> Vec<(String, Standing)> {
        let now = Timestamp::now();
        let books = self.read_wave(n).await;
        books
            .into_iter()
            .map(|(cluster, book)| {
                let p = book.map(|book| {
                    progress(
                        &book,
                        &self.spec.sidecar,
                        &self.revision,
                        self.spec.bake,
                        now,
                    )
                });
                (cluster, p)
            })
            .collect()
    }

    /// Wave `n` promoted and watched until done, stopped or past its timeout.
    async fn run_wave(&mut self, n: usize) -> Result<FleetEnd, FleetError> {
        say(&self.heading(n));
        let deadline = Instant::now() + self.spec.timeout;
        let mut said: BTreeMap<String, String> = BTreeMap::new();
        loop {
            let progress = self.progress(n).await;
            for (cluster, p) in &progress {
                let text = crate::render::standing(p);
                if said.get(cluster) != Some(&text) {
                    say(&format!("{cluster}: {text}"));
                    said.insert(cluster.clone(), text);
                }
            }
            match wave_step(&progress) {
                WaveStep::Done => break,
                WaveStep::Stop {
                    cluster,
                    workload,
                    reason,
                } => {
                    return Ok(FleetEnd::Stopped {
                        wave: n,
                        cluster,
                        workload,
                        reason,
                    });
                }
                WaveStep::Promote(to_promote) => {
                    self.promote(n, &to_promote).await?;
                    continue;
                }
                WaveStep::Wait => {}
            }
            if Instant::now() >= deadline {
                return Ok(FleetEnd::TimedOut { wave: n, progress });
            }
            tokio::time::sleep(POLL).await;
        }
        say(&format!("wave {}/{} done", n + 1, self.spec.waves.len()));
        Ok(FleetEnd::Done)
    }

    /// The clusters of wave `n` named in `to_promote` promoted.
    async fn promote(&mut self, n: usize, to_promote: &[String]) -> Result<(), FleetError> {
        let by = format!(
            "{} (wave {}/{})",
            self.spec.by,
            n + 1,
            self.spec.waves.len()
        );
        for cluster in self.clusters[n]
            .iter_mut()
            .filter(|c| to_promote.contains(&c.name))
        {
            if cluster
                .promote(self.connect, &self.spec, &self.revision, &by)
                .await?
            {
                say(&format!("{}: promoted", cluster.name));
            }
        }
        Ok(())
    }

    /// Every cluster of wave `n` read at once.
    async fn read_wave(&mut self, n: usize) -> Vec<(String, Result<CampaignBook, String>)> {
        let (connect, namespace) = (self.connect, self.spec.namespace.as_str());
        let reads = self.clusters[n].iter_mut().map(|cluster| async move {
            let book = cluster.book(connect, namespace).await;
            (cluster.name.clone(), book)
        });
        futures::future::join_all(reads).await
    }
}

/// A line of the run's account, on stdout.
fn say(line: &str) {
    println!("{line}");
}
