//! `rollout --promote SIDECAR --wave staging --wave prod-eu,prod-us`: a revision promoted
//! across clusters, wave by wave. Each wave's clusters are promoted (in each, the Lease holder
//! of `serve --promotion=gated` then runs the campaign), watched until complete and baked, and
//! only then does the next wave start. A failure anywhere stops the fleet with nothing further
//! promoted. The command keeps no state: each pass reads every cluster's campaign book, so a
//! second run goes on from where the first stopped and restarts nothing twice.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tracing::Level;

use super::super::args::{ConnectionArgs, RolloutArgs};
use super::EXIT_STILL_WAITING;
use crate::cluster::status;
use crate::rollout::CampaignBook;
use crate::rollout::waves::{Progress, WaveStep, fleet_revision, progress, wave_step};
use crate::telemetry::notice;

/// How long one read of a cluster's book may take.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the clusters of the running wave are read.
const POLL: Duration = Duration::from_secs(2);

/// The exit status when a cluster failed and the fleet stopped.
const EXIT_STOPPED: u8 = 1;

/// The waves of `--wave`, each a list of contexts, checked against the kubeconfig.
pub(super) fn waves(args: &RolloutArgs) -> anyhow::Result<Vec<Vec<String>>> {
    let connection = &args.cluster.connection;
    anyhow::ensure!(
        connection.context.is_empty(),
        "--wave names the clusters (kubeconfig contexts); --context has no place beside it"
    );
    let waves: Vec<Vec<String>> = args
        .wave
        .iter()
        .map(|wave| {
            wave.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect();
    let kubeconfig = match &connection.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?,
        None => kube::config::Kubeconfig::read()
            .context("--wave: cannot read the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
    };
    let known: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let mut seen = BTreeMap::new();
    for (n, wave) in waves.iter().enumerate() {
        anyhow::ensure!(
            !wave.is_empty(),
            "--wave {:?} (wave {}) names no context",
            args.wave[n],
            n + 1
        );
        for cluster in wave {
            anyhow::ensure!(
                known.contains(&cluster.as_str()),
                "--wave {:?}: the kubeconfig has no context {cluster:?} (it has: {})",
                args.wave[n],
                known.join(", ")
            );
            if let Some(earlier) = seen.insert(cluster.clone(), n + 1) {
                anyhow::bail!(
                    "--wave: {cluster} is in wave {earlier} and wave {}: a cluster is promoted once",
                    n + 1
                );
            }
        }
    }
    Ok(waves)
}

/// One cluster of the fleet, as the command reaches it.
struct Cluster {
    name: String,
    client: Option<kube::Client>,
}

impl Cluster {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            client: None,
        }
    }

    /// Its client, made at the first use that succeeds (a cluster not reachable at start is
    /// tried again at each pass).
    async fn client(&mut self, connection: &ConnectionArgs) -> anyhow::Result<kube::Client> {
        if self.client.is_none() {
            let mut one = connection.clone();
            one.context = vec![self.name.clone()];
            self.client = Some(super::super::connect::one_shot_client(&one, "rollout").await?);
        }
        Ok(self.client.clone().expect("connected above"))
    }

    /// Its campaign book (empty when it has none yet).
    async fn book(
        &mut self,
        connection: &ConnectionArgs,
        namespace: &str,
    ) -> Result<CampaignBook, String> {
        let client = self
            .client(connection)
            .await
            .map_err(|err| super::super::one_line(&err))?;
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        status::read_book(&api, READ_TIMEOUT)
            .await
            .map(Option::unwrap_or_default)
            .map_err(|err| super::super::one_line(&anyhow::Error::from(err)))
    }

    /// Writes the approval of `revision` into its book, if its campaign still waits for it.
    async fn promote(
        &mut self,
        connection: &ConnectionArgs,
        namespace: &str,
        sidecar: &str,
        revision: &str,
        by: &str,
    ) -> anyhow::Result<bool> {
        let client = self.client(connection).await?;
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let written = status::edit_book(&api, namespace, false, |book| {
            (book.waits_for_promotion(sidecar, revision)
                && book.promote(sidecar, revision, by, Time(Timestamp::now())))
            .then_some(())
        })
        .await
        .with_context(|| format!("{}: cannot write the promotion", self.name))?;
        Ok(written.is_some())
    }
}

/// Runs the fleet rollout of `--promote` across `--wave`.
pub(super) async fn run(args: &RolloutArgs, identity: &str) -> anyhow::Result<ExitCode> {
    let waves = waves(args)?;
    let (sidecar, named) = super::promotion_spec(args.promote.as_deref().unwrap_or_default())?;
    let connection = &args.cluster.connection;
    let namespace = &args.cluster.injector_namespace;
    let mut clusters: Vec<Vec<Cluster>> = waves
        .iter()
        .map(|wave| wave.iter().map(|name| Cluster::new(name)).collect())
        .collect();
    let revision = match named {
        Some(revision) => revision,
        None => {
            let first = read_wave(&mut clusters[0], connection, namespace).await;
            fleet_revision(&sidecar, &first).map_err(|why| {
                anyhow::anyhow!(
                    "cannot tell which revision of {sidecar} to promote from the first wave: {why}; name it with --promote {sidecar}=REVISION"
                )
            })?
        }
    };
    let fleet = Fleet {
        args,
        names: waves,
        sidecar,
        revision,
        by: identity.to_owned(),
    };
    if args.dry_run {
        fleet.show(&mut clusters).await;
        return Ok(ExitCode::SUCCESS);
    }
    for (n, wave) in clusters.iter_mut().enumerate() {
        if let Some(stopped) = fleet.run_wave(n, wave).await? {
            return Ok(stopped);
        }
    }
    say(&format!(
        "{} revision {} is rolled out and baked in every wave",
        fleet.sidecar, fleet.revision
    ));
    Ok(ExitCode::SUCCESS)
}

/// What a fleet rollout promotes, and where.
struct Fleet<'a> {
    args: &'a RolloutArgs,
    names: Vec<Vec<String>>,
    sidecar: String,
    revision: String,
    by: String,
}

impl Fleet<'_> {
    fn connection(&self) -> &ConnectionArgs {
        &self.args.cluster.connection
    }

    fn namespace(&self) -> &str {
        &self.args.cluster.injector_namespace
    }

    fn heading(&self, n: usize) -> String {
        format!(
            "wave {}/{} ({}): {} revision {}",
            n + 1,
            self.names.len(),
            self.names[n].join(", "),
            self.sidecar,
            self.revision
        )
    }

    /// `--dry-run`: where every cluster stands, nothing promoted.
    async fn show(&self, clusters: &mut [Vec<Cluster>]) {
        for (n, wave) in clusters.iter_mut().enumerate() {
            say(&self.heading(n));
            for (cluster, p) in self.progress(wave).await {
                say(&format!("{cluster}: {}", describe(&p)));
            }
        }
    }

    async fn progress(&self, wave: &mut [Cluster]) -> Vec<(String, Result<Progress, String>)> {
        let now = Timestamp::now();
        read_wave(wave, self.connection(), self.namespace())
            .await
            .into_iter()
            .map(|(cluster, book)| {
                let p = book.map(|book| {
                    progress(
                        &book,
                        &self.sidecar,
                        &self.revision,
                        self.args.wave_bake,
                        now,
                    )
                });
                (cluster, p)
            })
            .collect()
    }

    /// Wave `n` promoted and watched until done (`None`), or the exit status it stopped with.
    async fn run_wave(&self, n: usize, wave: &mut [Cluster]) -> anyhow::Result<Option<ExitCode>> {
        say(&self.heading(n));
        let deadline = Instant::now() + self.args.wave_timeout;
        let mut said: BTreeMap<String, String> = BTreeMap::new();
        loop {
            let progress = self.progress(wave).await;
            for (cluster, p) in &progress {
                let text = describe(p);
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
                    self.stopped(n, &cluster, workload, &reason);
                    return Ok(Some(ExitCode::from(EXIT_STOPPED)));
                }
                WaveStep::Promote(to_promote) => {
                    for cluster in wave.iter_mut().filter(|c| to_promote.contains(&c.name)) {
                        let written = cluster
                            .promote(
                                self.connection(),
                                self.namespace(),
                                &self.sidecar,
                                &self.revision,
                                &format!("{} (wave {}/{})", self.by, n + 1, self.names.len()),
                            )
                            .await?;
                        if written {
                            say(&format!("{}: promoted", cluster.name));
                        }
                    }
                    continue;
                }
                WaveStep::Wait => {}
            }
            if Instant::now() >= deadline {
                self.timed_out(n, &progress);
                return Ok(Some(ExitCode::from(EXIT_STILL_WAITING)));
            }
            tokio::time::sleep(POLL).await;
        }
        say(&format!("wave {}/{} done", n + 1, self.names.len()));
        Ok(None)
    }

    fn stopped(&self, n: usize, cluster: &str, workload: Option<String>, reason: &str) {
        let left: Vec<String> = self.names[n + 1..].iter().map(|w| w.join(",")).collect();
        let workload = workload.map(|w| format!("{w}: ")).unwrap_or_default();
        let left = if left.is_empty() {
            String::new()
        } else {
            format!(" (waves not started: {})", left.join(" then "))
        };
        notice(
            Level::ERROR,
            &format!(
                "the fleet stops: {cluster}: {} revision {} failed: {workload}{reason}; nothing further is promoted{left}. Fix or resume it there, then run this again: it goes on from here",
                self.sidecar, self.revision
            ),
            &[("cluster", cluster), ("revision", &self.revision)],
        );
    }

    fn timed_out(&self, n: usize, progress: &[(String, Result<Progress, String>)]) {
        let waiting: Vec<String> = progress
            .iter()
            .filter(|(_, p)| !p.as_ref().is_ok_and(Progress::is_done))
            .map(|(cluster, p)| format!("{cluster}: {}", describe(p)))
            .collect();
        notice(
            Level::WARN,
            &format!(
                "wave {}/{} not done within --wave-timeout {}: {}; nothing further is promoted (run this again to go on watching); exit status {EXIT_STILL_WAITING}",
                n + 1,
                self.names.len(),
                humantime::format_duration(self.args.wave_timeout),
                waiting.join("; ")
            ),
            &[],
        );
    }
}

fn describe(progress: &Result<Progress, String>) -> String {
    crate::render::standing(progress)
}

/// Every cluster of the wave read at once.
async fn read_wave(
    wave: &mut [Cluster],
    connection: &ConnectionArgs,
    namespace: &str,
) -> Vec<(String, Result<CampaignBook, String>)> {
    let reads = wave.iter_mut().map(|cluster| async move {
        let book = cluster.book(connection, namespace).await;
        (cluster.name.clone(), book)
    });
    futures::future::join_all(reads).await
}

/// A line of the run's account, on stdout.
fn say(line: &str) {
    println!("{line}");
}
