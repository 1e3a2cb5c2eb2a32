//! The status ConfigMap (`sidecar-injector-status` in the injector's namespace): the revisions
//! in force and the campaign book, which outlive any one process.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::watcher;
use tokio::sync::watch as signal;

use super::watch::{Change, watch};
use crate::config::RevisionsInForce;
use crate::rollout::CampaignBook;
use crate::rollout::history::RevisionHistory;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

/// Its data item holding the campaign book (JSON).
pub const STATUS_CAMPAIGNS_KEY: &str = "campaigns";
/// Its data item holding what each serving replica injects: `{"<identity>": Publication}`.
pub const STATUS_INJECTORS_KEY: &str = "injectors";

/// What one replica serving the webhook injects, and when it last said so (a heartbeat).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Publication {
    pub revisions: RevisionsInForce,
    /// The sidecars whose config leaves their restarts to a person, so that a reader who
    /// cannot read the configs (a team) still learns that nothing restarts their pods. Absent
    /// from the publications of releases before it.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub manual: BTreeSet<String>,
    pub at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

impl Publication {
    /// How long ago it was renewed (zero for a clock ahead of ours).
    pub fn age(&self, now: k8s_openapi::jiff::Timestamp) -> std::time::Duration {
        let seconds = (now.as_second() - self.at.0.as_second()).max(0);
        std::time::Duration::from_secs(seconds as u64)
    }

    /// Renewed within `max_age`: a replica still running publishes it.
    pub fn is_fresh(
        &self,
        now: k8s_openapi::jiff::Timestamp,
        max_age: std::time::Duration,
    ) -> bool {
        self.age(now) <= max_age
    }
}

/// Two fresh publications (renewed within `max_age`) with different revisions, the first
/// fresh one and the first that differs from it; `None` when the fresh ones agree.
pub fn disagreeing(
    injectors: &BTreeMap<String, Publication>,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Option<[(&String, &Publication); 2]> {
    let mut fresh = injectors.iter().filter(|(_, p)| p.is_fresh(now, max_age));
    let first = fresh.next()?;
    fresh
        .find(|(_, p)| p.revisions != first.1.revisions)
        .map(|other| [first, other])
}

/// Every replica's publication, by identity; `{}` when the item is absent.
pub fn decode_injectors(
    status: &ConfigMap,
) -> Result<BTreeMap<String, Publication>, serde_json::Error> {
    status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_INJECTORS_KEY))
        .map(|text| serde_json::from_str(text))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// `data` with `identity`'s publication set, and publications older than `forget_after`
/// dropped (replicas long gone).
pub fn publish(
    data: &BTreeMap<String, String>,
    identity: &str,
    publication: Publication,
    forget_after: std::time::Duration,
) -> BTreeMap<String, String> {
    let now = publication.at.0;
    let mut injectors = injectors_in(data);
    let horizon = now
        .checked_sub(k8s_openapi::jiff::SignedDuration::try_from(forget_after).unwrap_or_default())
        .unwrap_or(k8s_openapi::jiff::Timestamp::MIN);
    injectors.retain(|_, p| p.at.0 >= horizon);
    injectors.insert(identity.to_owned(), publication);
    let mut data = data.clone();
    set_injectors(&mut data, &injectors);
    data
}

/// The publications in `data` as a writer reads them: a malformed item is started afresh
/// (the readers report it; a writer must not be stopped by it).
fn injectors_in(data: &BTreeMap<String, String>) -> BTreeMap<String, Publication> {
    data.get(STATUS_INJECTORS_KEY)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

fn set_injectors(data: &mut BTreeMap<String, String>, injectors: &BTreeMap<String, Publication>) {
    data.insert(
        STATUS_INJECTORS_KEY.to_owned(),
        serde_json::to_string_pretty(injectors).expect("publications serialize"),
    );
}

/// Where the one-shot commands take the revisions in force from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RevisionsSource {
    /// The running injectors' publications when they are fresh and agree, else the configs
    /// read here.
    #[default]
    Auto,
    /// What the running injectors published (the newest, if they disagree or are stale).
    Published,
    /// The configs this command reads, whatever is published.
    Configs,
}

/// Which revisions a one-shot command judges pods by, and the one line that says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionsChoice {
    /// The publication that judges (its revisions, and its sidecars of manual rollout).
    Published {
        publication: Publication,
        why: String,
    },
    Configs {
        why: String,
    },
    /// Nothing to judge pods by: no publication, and the configs cannot be read here.
    Neither {
        why: String,
    },
}

/// Whether the one-shot command could read the sidecar configs itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigsHere {
    Read,
    /// Refused or unreachable (a team's rights stop at its namespace): every pod would read
    /// as orphaned by them.
    Unreadable,
}

/// The rule of `--revisions-from`: a publication is fresh when renewed within `max_age`; fresh
/// publications that agree are what new pods get; when they disagree, or none is fresh, the
/// configs read here are the better guess, and the line says so. Configs that cannot be read
/// here are no guess at all: the newest publication, however old, is the better one.
pub fn choose_revisions(
    injectors: &BTreeMap<String, Publication>,
    source: RevisionsSource,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
    configs: ConfigsHere,
) -> RevisionsChoice {
    let describe = |p: &Publication| humantime::format_duration(p.age(now)).to_string() + " ago";
    let newest = injectors.iter().max_by_key(|(_, p)| p.at.0);
    let unreadable = configs == ConfigsHere::Unreadable;
    if source == RevisionsSource::Configs {
        return if unreadable {
            RevisionsChoice::Neither {
                why: "--revisions-from=configs".into(),
            }
        } else {
            RevisionsChoice::Configs {
                why: "revisions from the configs read here (--revisions-from=configs)".into(),
            }
        };
    }
    let Some((newest_by, newest_publication)) = newest else {
        return unpublished(source, configs);
    };
    let fresh: Vec<(&String, &Publication)> = injectors
        .iter()
        .filter(|(_, p)| p.is_fresh(now, max_age))
        .collect();
    if source == RevisionsSource::Published {
        return RevisionsChoice::Published {
            publication: newest_publication.clone(),
            why: format!(
                "revisions as {newest_by} published them {} (--revisions-from=published)",
                describe(newest_publication)
            ),
        };
    }
    // Where the configs read here would stand in, but none could be read.
    let newest_instead = |though: String| RevisionsChoice::Published {
        publication: newest_publication.clone(),
        why: format!(
            "the sidecar configs cannot be read here: revisions as {newest_by} published them {}, {though}",
            describe(newest_publication)
        ),
    };
    if fresh.is_empty() && unreadable {
        return newest_instead(format!(
            "though stale (older than {}: is the injector running?)",
            humantime::format_duration(max_age)
        ));
    }
    if fresh.is_empty() {
        return RevisionsChoice::Configs {
            why: format!(
                "the injectors' publication is stale (last from {newest_by}, {}; older than {}): using the configs read here (--revisions-from=published to use it anyway)",
                describe(newest_publication),
                humantime::format_duration(max_age)
            ),
        };
    }
    if let Some([(first, one), (other, another)]) = disagreeing(injectors, now, max_age) {
        let (one, another) = (summary(&one.revisions), summary(&another.revisions));
        if unreadable {
            return newest_instead(format!(
                "the newest of injectors that disagree ({first} publishes {one}, {other} publishes {another})"
            ));
        }
        return RevisionsChoice::Configs {
            why: format!(
                "running injectors disagree ({first} publishes {one}, {other} publishes {another}): using the configs read here"
            ),
        };
    }
    let names: Vec<&str> = fresh.iter().map(|(n, _)| n.as_str()).collect();
    RevisionsChoice::Published {
        publication: fresh[0].1.clone(),
        why: format!(
            "revisions as the running injector(s) {} published them ({})",
            names.join(", "),
            describe(newest_publication)
        ),
    }
}

/// [`choose_revisions`] when no injector has published its revisions.
fn unpublished(source: RevisionsSource, configs: ConfigsHere) -> RevisionsChoice {
    match (configs, source) {
        (ConfigsHere::Unreadable, _) => RevisionsChoice::Neither {
            why: "no running injector has published its revisions".into(),
        },
        (ConfigsHere::Read, RevisionsSource::Published) => RevisionsChoice::Configs {
            why: "no running injector has published its revisions; using the configs read here"
                .into(),
        },
        (ConfigsHere::Read, _) => RevisionsChoice::Configs {
            why: "revisions from the configs read here (no running injector has published any)"
                .into(),
        },
    }
}

/// [`preview_warnings`] of the publications a status ConfigMap holds. A malformed item is
/// said in their place: the preview needs only the configs, and goes on.
pub fn preview_warnings_of(
    status: &ConfigMap,
    here: &RevisionsInForce,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Vec<String> {
    match decode_injectors(status) {
        Ok(injectors) => preview_warnings(here, &injectors, now, max_age),
        Err(err) => vec![format!(
            "{}/{STATUS_CONFIGMAP} item {STATUS_INJECTORS_KEY} is malformed ({err}): whether the running injectors inject these revisions is unknown",
            status.metadata.namespace.as_deref().unwrap_or_default()
        )],
    }
}

/// What a preview made with the configs read here (`inject -f`, `explain -f` outside a
/// checkout) must warn of, one line each: a sidecar whose revision here (pins applied) is not
/// the one the fresh, agreeing publications say the webhook injects (it has not loaded the
/// edit yet, or it refused the config and keeps the last good one), or fresh publications
/// that disagree. A preview cannot take a publication's revisions instead (it holds no
/// content), so it says where it may differ. Nothing when no publication is fresh: the
/// configs read here are then the best guess there is.
pub fn preview_warnings(
    here: &RevisionsInForce,
    injectors: &BTreeMap<String, Publication>,
    now: k8s_openapi::jiff::Timestamp,
    max_age: std::time::Duration,
) -> Vec<String> {
    if let Some([(first, one), (other, another)]) = disagreeing(injectors, now, max_age) {
        return vec![format!(
            "running injectors disagree ({first} publishes {}, {other} publishes {}): new pods get what the replica that answers serves; shown with the configs read here",
            summary(&one.revisions),
            summary(&another.revisions)
        )];
    }
    let fresh: Vec<(&String, &Publication)> = injectors
        .iter()
        .filter(|(_, p)| p.is_fresh(now, max_age))
        .collect();
    let Some((_, published)) = fresh.iter().max_by_key(|(_, p)| p.at.0) else {
        return Vec::new();
    };
    let by = format!(
        "the running injector(s) {} (published {} ago)",
        fresh
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        humantime::format_duration(published.age(now))
    );
    let names: BTreeSet<&str> = here
        .iter()
        .chain(published.revisions.iter())
        .map(|(name, _)| name)
        .collect();
    let mut warnings = Vec::new();
    // Sidecars no config here defines, said in one line: a preview of one Deployment is
    // not to be buried under every sidecar the cluster serves.
    let mut unread = Vec::new();
    for name in names {
        match (here.get(name), published.revisions.get(name)) {
            (Some(ours), Some(theirs)) if ours != theirs => warnings.push(format!(
                "{name}: the config read here is revision {ours}, but {by} inject revision {theirs}: the webhook has not loaded this config yet, or refused it and keeps its last good one (its log says why); shown with the config read here"
            )),
            (Some(ours), None) => warnings.push(format!(
                "{name}: revision {ours} is read here, but {by} do not inject it: the webhook has not loaded this config yet, or refused it (its log says why); shown with it all the same"
            )),
            (None, Some(theirs)) => unread.push(format!("{name} ({theirs})")),
            _ => {}
        }
    }
    if !unread.is_empty() {
        warnings.push(format!(
            "{by} also inject {}, but no config for them is read here: a pod that asks for one is shown without it",
            unread.join(", ")
        ));
    }
    warnings
}

fn summary(revisions: &RevisionsInForce) -> String {
    revisions
        .iter()
        .map(|(s, r)| format!("{s}={r}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The status ConfigMap a running injector keeps in its namespace.
pub const STATUS_CONFIGMAP: &str = "sidecar-injector-status";
/// The campaign book item; `None` when the item is absent.
pub fn decode_book(status: &ConfigMap) -> Result<Option<CampaignBook>, serde_json::Error> {
    status
        .data
        .as_ref()
        .and_then(|d| d.get(STATUS_CAMPAIGNS_KEY))
        .map(|text| CampaignBook::decode(text))
        .transpose()
}

/// The data of the status ConfigMap: `existing` with the campaign book replaced; the
/// replicas' publications (and anything else) kept as they are.
pub fn encode(
    existing: Option<&BTreeMap<String, String>>,
    book: &CampaignBook,
) -> BTreeMap<String, String> {
    let mut data = existing.cloned().unwrap_or_default();
    data.insert(STATUS_CAMPAIGNS_KEY.to_owned(), book.encode());
    data
}

/// The book without its progress counts: what must reach the status ConfigMap at once.
pub fn book_shape(book: &CampaignBook) -> String {
    let mut shape = book.clone();
    for campaign in shape.campaigns.values_mut() {
        campaign.counts = Default::default();
    }
    serde_json::to_string(&shape).expect("the book serializes")
}

/// The status ConfigMap holding `data`; with the `resource_version` it was read at, a
/// replace of it fails (409) when someone wrote it since.
pub fn status_object(
    namespace: &str,
    resource_version: Option<String>,
    data: BTreeMap<String, String>,
) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(STATUS_CONFIGMAP.into()),
            namespace: Some(namespace.to_owned()),
            resource_version,
            labels: Some(
                [(
                    "app.kubernetes.io/name".to_owned(),
                    "sidecar-injector".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Creates the status (or history) ConfigMap when no version of it is known yet, or replaces
/// the version read.
pub async fn write(api: &Api<ConfigMap>, object: &ConfigMap) -> Result<ConfigMap, kube::Error> {
    match object.metadata.resource_version {
        None => api.create(&PostParams::default(), object).await,
        Some(_) => {
            let name = object.metadata.name.as_deref().unwrap_or(STATUS_CONFIGMAP);
            api.replace(name, &PostParams::default(), object).await
        }
    }
}

/// What the configs become once the campaign book in the status ConfigMap (`status`, from
/// [`watch_status`]) is applied, as two signals: `pinned`, the configs with each pin of
/// `rollout --to` in force (what replicas publish as injected and the engine rolls out), and
/// `served`, that with each hold of a paused campaign in force and a warning on each sidecar
/// whose campaign is paused (what the webhook injects; kubectl shows the warnings).
pub fn apply_book(
    mut status: signal::Receiver<Option<ConfigMap>>,
    mut configs: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
) -> BookSignals {
    let (publish_pinned, pinned) = signal::channel(configs.borrow().clone());
    let (publish_served, served) = signal::channel(configs.borrow().clone());
    tokio::spawn(async move {
        let mut said: Vec<String> = Vec::new();
        loop {
            let book = status
                .borrow_and_update()
                .as_ref()
                .and_then(|c| decode_book(c).ok().flatten())
                .unwrap_or_default();
            let set = configs.borrow_and_update().clone();
            let (with_pins, mut errors) = book.pinned(&set);
            let (with_holds, hold_errors) = book.served(&with_pins);
            errors.extend(hold_errors);
            let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
            if texts != said {
                for text in &texts {
                    tracing::warn!("a pinned or held revision is not served: {text}");
                }
                said = texts;
            }
            publish_pinned.send_if_modified(|current| {
                let changed = current.revisions_in_force() != with_pins.revisions_in_force();
                *current = std::sync::Arc::new(with_pins);
                changed
            });
            publish_served.send_replace(std::sync::Arc::new(with_holds));
            tokio::select! {
                changed = configs.changed() => if changed.is_err() { break },
                changed = status.changed() => if changed.is_err() { break },
            }
        }
    });
    BookSignals { pinned, served }
}

/// The signals of [`apply_book`].
pub struct BookSignals {
    pub pinned: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
    pub served: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
}

/// The status ConfigMap as it changes (`None` while it does not exist); the first value is
/// published once the first read is done, whether it exists or not.
pub fn watch_status(client: Client, namespace: &str) -> signal::Receiver<Option<ConfigMap>> {
    let (publish, receive) = signal::channel(None);
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={STATUS_CONFIGMAP}"));
    tokio::spawn(async move {
        let mut changes = watch(api, config, "status ConfigMap", Some);
        while let Some(change) = changes.next().await {
            match change {
                Change::Listed(mut listed) => {
                    publish.send_replace(listed.pop());
                }
                Change::Applied(configmap) => {
                    publish.send_replace(Some(configmap));
                }
                Change::Deleted(_) => {
                    publish.send_replace(None);
                }
            }
        }
    });
    receive
}

/// Publishes what this replica injects under `identity`: once the configs are ready, on every
/// change of the set, and on a heartbeat (`every`), so that a gone replica's publication goes
/// stale. Runs until `stop` turns true, then withdraws this replica's publication.
pub async fn run_publisher(
    client: Client,
    namespace: String,
    identity: String,
    mut sidecars: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
    every: std::time::Duration,
    ready: impl Fn() -> bool,
    mut stop: signal::Receiver<bool>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let injected =
        |set: &crate::config::SidecarSet| (set.revisions_in_force(), set.manual_rollouts());
    let mut published: Option<(RevisionsInForce, BTreeSet<String>)> = None;
    let mut last = tokio::time::Instant::now();
    // Failures in a row other than conflicts: a lasting failure (the namespace missing, no
    // rights, an outage) is retried ever less often, up to once a heartbeat.
    let mut failures: u32 = 0;
    let mut retry_in: Option<std::time::Duration> = None;
    loop {
        let due = published.is_none() || retry_in.is_some() || last.elapsed() >= every;
        let changed = published.as_ref() != Some(&injected(&sidecars.borrow()));
        if ready() && (due || changed) {
            let injects = injected(&sidecars.borrow_and_update());
            match publish_once(&api, &namespace, &identity, &injects, every).await {
                Ok(()) => {
                    if published.as_ref() != Some(&injects) {
                        tracing::info!(identity, "published the revisions this replica injects");
                    }
                    published = Some(injects);
                    last = tokio::time::Instant::now();
                    failures = 0;
                    retry_in = None;
                }
                Err(err) => {
                    let delay = after_failure(&mut failures, super::is_conflict(&err), every);
                    retry_in = Some(delay);
                    tracing::warn!(
                        "cannot publish the revisions in force, retrying in {delay:?}: {}",
                        super::error_text(&err)
                    );
                }
            }
        }
        let wait = if let Some(delay) = retry_in {
            delay
        } else if published.is_some() {
            every.saturating_sub(last.elapsed())
        } else {
            std::time::Duration::from_secs(1)
        };
        tokio::select! {
            _ = sidecars.changed() => {}
            () = tokio::time::sleep(wait.max(std::time::Duration::from_millis(200))) => {}
            _ = stop.wait_for(|stopping| *stopping) => break,
        }
    }
    if published.is_some()
        && let Err(err) = withdraw(&api, &namespace, &identity).await
    {
        tracing::warn!(
            "cannot withdraw this replica's publication; it goes stale: {}",
            super::error_text(&err)
        );
    }
}

/// How long to wait after a failed publication, counting it in `failures`.
fn after_failure(
    failures: &mut u32,
    conflict: bool,
    every: std::time::Duration,
) -> std::time::Duration {
    if conflict {
        // The engine or another replica wrote in between: the API server is there, and
        // waiting longer would leave the old revisions published that long.
        *failures = 0;
        return std::time::Duration::from_secs(1);
    }
    *failures = failures.saturating_add(1);
    retry_delay(*failures, every)
}

/// How long to wait after the `failures`-th failed publication in a row: 1 s, doubling, at
/// most `every` (the heartbeat).
fn retry_delay(failures: u32, every: std::time::Duration) -> std::time::Duration {
    let doubled = std::time::Duration::from_secs(1)
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)));
    doubled.min(every.max(std::time::Duration::from_secs(1)))
}

/// One read-modify-write of this replica's publication (a replace at the version read, so a
/// concurrent writer is never overwritten).
async fn publish_once(
    api: &Api<ConfigMap>,
    namespace: &str,
    identity: &str,
    (revisions, manual): &(RevisionsInForce, BTreeSet<String>),
    every: std::time::Duration,
) -> Result<(), kube::Error> {
    let current = api.get_opt(STATUS_CONFIGMAP).await?;
    let publication = Publication {
        revisions: revisions.clone(),
        manual: manual.clone(),
        at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ),
    };
    let existing = current
        .as_ref()
        .and_then(|c| c.data.clone())
        .unwrap_or_default();
    let data = publish(&existing, identity, publication, every * 10);
    let object = status_object(
        namespace,
        current.and_then(|c| c.metadata.resource_version),
        data,
    );
    write(api, &object).await.map(|_| ())
}

/// This replica's publication removed (graceful shutdown).
async fn withdraw(
    api: &Api<ConfigMap>,
    namespace: &str,
    identity: &str,
) -> Result<(), kube::Error> {
    let Some(current) = api.get_opt(STATUS_CONFIGMAP).await? else {
        return Ok(());
    };
    let mut data = current.data.clone().unwrap_or_default();
    let mut injectors = injectors_in(&data);
    if injectors.remove(identity).is_none() {
        return Ok(());
    }
    set_injectors(&mut data, &injectors);
    let object = status_object(namespace, current.metadata.resource_version.clone(), data);
    write(api, &object).await.map(|_| ())
}

/// The ConfigMap holding each sidecar's revision history, next to the status ConfigMap; only
/// the Lease holder writes it.
pub const HISTORY_CONFIGMAP: &str = "sidecar-injector-history";
/// Its data item (JSON).
pub const HISTORY_KEY: &str = "history";

/// The revision history in `configmap`; empty when the item is absent.
pub fn decode_history(configmap: &ConfigMap) -> Result<RevisionHistory, serde_json::Error> {
    configmap
        .data
        .as_ref()
        .and_then(|d| d.get(HISTORY_KEY))
        .map(|text| serde_json::from_str(text))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// The history ConfigMap holding `history`; with the `resource_version` it was read at, a
/// replace fails (409) when someone wrote it since.
pub fn history_object(
    namespace: &str,
    resource_version: Option<String>,
    history: &RevisionHistory,
) -> ConfigMap {
    let mut object = status_object(
        namespace,
        resource_version,
        [(
            HISTORY_KEY.to_owned(),
            serde_json::to_string_pretty(history).expect("the history serializes"),
        )]
        .into(),
    );
    object.metadata.name = Some(HISTORY_CONFIGMAP.into());
    object
}

/// The history in the cluster and the version read; `None` and an empty history when the
/// ConfigMap does not exist.
pub async fn read_history(
    api: &Api<ConfigMap>,
) -> Result<(RevisionHistory, Option<String>), HistoryReadError> {
    let Some(configmap) = api
        .get_opt(HISTORY_CONFIGMAP)
        .await
        .map_err(HistoryReadError::Read)?
    else {
        return Ok((RevisionHistory::default(), None));
    };
    let history = decode_history(&configmap).map_err(HistoryReadError::Decode)?;
    Ok((history, configmap.metadata.resource_version))
}

/// Why the revision history could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryReadError {
    #[error("cannot read the revision history ConfigMap {HISTORY_CONFIGMAP}: {0}")]
    Read(#[source] kube::Error),
    #[error("the {HISTORY_KEY} item of the ConfigMap {HISTORY_CONFIGMAP} is malformed: {0}")]
    Decode(#[source] serde_json::Error),
}

/// Why `rollout --resume` (or `--to`, `--unpin`, `--release-hold`) could not record its change.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("cannot read the status ConfigMap {STATUS_CONFIGMAP}: {0}")]
    Read(#[source] kube::Error),
    #[error(
        "the {STATUS_CAMPAIGNS_KEY} item of the status ConfigMap {STATUS_CONFIGMAP} is malformed: {0}"
    )]
    Decode(#[source] serde_json::Error),
    #[error("cannot write the status ConfigMap {STATUS_CONFIGMAP}: {0}")]
    Write(#[source] kube::Error),
    #[error("the status ConfigMap {STATUS_CONFIGMAP} kept changing under us; try again")]
    Contended,
}

/// `rollout --resume`: the paused campaigns of the book in the cluster resumed. The Lease
/// holder adopts the book at its next plan and acts on it; nobody else needs to.
pub async fn resume_paused(
    api: &Api<ConfigMap>,
    namespace: &str,
    by: &str,
) -> Result<Vec<crate::rollout::Resumed>, ResumeError> {
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let resumed = edit_book(api, namespace, false, |book| {
        let resumed = book.resume_paused(by, now.clone());
        (!resumed.is_empty()).then_some(resumed)
    })
    .await?;
    Ok(resumed.unwrap_or_default())
}

/// A read-modify-write of the campaign book in the cluster at the version read (retried when
/// someone wrote in between). `edit` returns `None` when it changed nothing (nothing is
/// written). With no status ConfigMap (or no book in it), `edit` gets an empty book when
/// `create` says so, else nothing happens.
pub async fn edit_book<T>(
    api: &Api<ConfigMap>,
    namespace: &str,
    create: bool,
    mut edit: impl FnMut(&mut CampaignBook) -> Option<T>,
) -> Result<Option<T>, ResumeError> {
    for _ in 0..5 {
        let current = api
            .get_opt(STATUS_CONFIGMAP)
            .await
            .map_err(ResumeError::Read)?;
        let book = match &current {
            Some(current) => decode_book(current).map_err(ResumeError::Decode)?,
            None => None,
        };
        let mut book = match book {
            Some(book) => book,
            None if create => CampaignBook::default(),
            None => return Ok(None),
        };
        let Some(result) = edit(&mut book) else {
            return Ok(None);
        };
        let data = encode(current.as_ref().and_then(|c| c.data.as_ref()), &book);
        let version = current.and_then(|c| c.metadata.resource_version);
        let object = status_object(namespace, version, data);
        match write(api, &object).await {
            Ok(_) => return Ok(Some(result)),
            Err(e) if super::is_conflict(&e) => {}
            Err(e) => return Err(ResumeError::Write(e)),
        }
    }
    Err(ResumeError::Contended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(item: Option<&str>) -> ConfigMap {
        ConfigMap {
            data: item.map(|text| {
                [(STATUS_INJECTORS_KEY.to_owned(), text.to_owned())]
                    .into_iter()
                    .collect()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_book_reads_back_what_is_encoded() {
        let mut book = CampaignBook::default();
        book.campaigns.insert(
            "logger:v1".into(),
            crate::rollout::Campaign {
                pause_reason: Some("broken".into()),
                ..crate::test_fixtures::campaign(
                    "aaaaaaaaaaaa",
                    crate::rollout::CampaignState::Paused,
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                )
            },
        );
        // The replicas' publications stay as they are; only the book is replaced.
        let published = publish(
            &BTreeMap::new(),
            "a",
            publication("aaaaaaaaaaaa", 0),
            std::time::Duration::from_secs(300),
        );
        let configmap = status_object("injector-system", None, encode(Some(&published), &book));
        let existing = configmap.data.clone().unwrap();
        assert_eq!(
            existing[STATUS_INJECTORS_KEY],
            published[STATUS_INJECTORS_KEY]
        );
        let kept = encode(Some(&existing), &CampaignBook::default());
        assert_eq!(kept[STATUS_INJECTORS_KEY], existing[STATUS_INJECTORS_KEY]);
        assert_ne!(kept[STATUS_CAMPAIGNS_KEY], existing[STATUS_CAMPAIGNS_KEY]);
        assert_eq!(configmap.metadata.name.as_deref(), Some(STATUS_CONFIGMAP));
        assert_eq!(decode_book(&configmap).unwrap(), Some(book));
        assert_eq!(decode_book(&status(None)).unwrap(), None);
    }

    fn publication(revision: &str, seconds_ago: i64) -> Publication {
        Publication {
            revisions: [("logger:v1".to_owned(), revision.to_owned())]
                .into_iter()
                .collect(),
            manual: BTreeSet::new(),
            at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 - seconds_ago).unwrap(),
            ),
        }
    }

    fn choose(injectors: &[(&str, Publication)], source: RevisionsSource) -> RevisionsChoice {
        choose_with(injectors, source, ConfigsHere::Read)
    }

    fn choose_with(
        injectors: &[(&str, Publication)],
        source: RevisionsSource,
        configs: ConfigsHere,
    ) -> RevisionsChoice {
        let injectors: BTreeMap<String, Publication> = injectors
            .iter()
            .map(|(n, p)| ((*n).to_owned(), p.clone()))
            .collect();
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        choose_revisions(
            &injectors,
            source,
            now,
            std::time::Duration::from_secs(90),
            configs,
        )
    }

    #[test]
    fn configs_that_cannot_be_read_here_give_way_to_any_publication() {
        let unread = |injectors: &[(&str, Publication)], source| {
            choose_with(injectors, source, ConfigsHere::Unreadable)
        };
        let revisions = |choice: &RevisionsChoice| match choice {
            RevisionsChoice::Published { publication, .. } => {
                publication.revisions.get("logger:v1").map(str::to_owned)
            }
            _ => None,
        };
        let stale = unread(
            &[("gone", publication("aaaaaaaaaaaa", 3600))],
            RevisionsSource::Auto,
        );
        assert_eq!(
            stale,
            RevisionsChoice::Published {
                publication: publication("aaaaaaaaaaaa", 3600),
                why: "the sidecar configs cannot be read here: revisions as gone published them 1h ago, though stale (older than 1m 30s: is the injector running?)".into()
            }
        );
        let split = unread(
            &[
                ("a", publication("aaaaaaaaaaaa", 5)),
                ("b", publication("bbbbbbbbbbbb", 2)),
            ],
            RevisionsSource::Auto,
        );
        assert_eq!(revisions(&split).as_deref(), Some("bbbbbbbbbbbb"));
        let RevisionsChoice::Published { why, .. } = &split else {
            panic!("{split:?}")
        };
        assert_eq!(
            why,
            "the sidecar configs cannot be read here: revisions as b published them 2s ago, the newest of injectors that disagree (a publishes logger:v1=aaaaaaaaaaaa, b publishes logger:v1=bbbbbbbbbbbb)"
        );
        // Fresh publications that agree: chosen as always.
        let agreeing = [
            ("a", publication("aaaaaaaaaaaa", 5)),
            ("old", publication("bbbbbbbbbbbb", 600)),
        ];
        let fresh = unread(&agreeing, RevisionsSource::Auto);
        assert_eq!(fresh, choose(&agreeing, RevisionsSource::Auto));
        assert_eq!(revisions(&fresh).as_deref(), Some("aaaaaaaaaaaa"));
        // Nothing published, or the configs asked for by name: nothing to judge by.
        assert_eq!(
            unread(&[], RevisionsSource::Auto),
            RevisionsChoice::Neither {
                why: "no running injector has published its revisions".into()
            }
        );
        assert!(matches!(
            unread(
                &[("a", publication("aaaaaaaaaaaa", 5))],
                RevisionsSource::Configs
            ),
            RevisionsChoice::Neither { .. }
        ));
        assert!(matches!(
            unread(&[], RevisionsSource::Published),
            RevisionsChoice::Neither { .. }
        ));
    }

    #[test]
    fn fresh_publications_that_agree_are_the_revisions_in_force() {
        let choice = choose(
            &[
                ("a", publication("aaaaaaaaaaaa", 10)),
                ("b", publication("aaaaaaaaaaaa", 40)),
            ],
            RevisionsSource::Auto,
        );
        let RevisionsChoice::Published { publication, why } = choice else {
            panic!("{choice:?}")
        };
        assert_eq!(publication.revisions.get("logger:v1"), Some("aaaaaaaaaaaa"));
        assert_eq!(
            why,
            "revisions as the running injector(s) a, b published them (10s ago)"
        );
    }

    #[test]
    fn a_preview_warns_where_its_configs_differ_from_what_the_running_injectors_inject() {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let max_age = std::time::Duration::from_secs(90);
        let warnings = |here: &[(&str, &str)], injectors: &[(&str, Publication)]| {
            let here: RevisionsInForce = here
                .iter()
                .map(|(s, r)| ((*s).to_owned(), (*r).to_owned()))
                .collect();
            let injectors: BTreeMap<String, Publication> = injectors
                .iter()
                .map(|(n, p)| ((*n).to_owned(), p.clone()))
                .collect();
            preview_warnings(&here, &injectors, now, max_age)
        };
        let logger_a = [("logger:v1", "aaaaaaaaaaaa")];
        // The same revision as published, or nothing fresh to compare with: nothing to say.
        assert!(warnings(&logger_a, &[("r1", publication("aaaaaaaaaaaa", 5))]).is_empty());
        assert!(warnings(&logger_a, &[("gone", publication("bbbbbbbbbbbb", 3600))]).is_empty());
        assert!(warnings(&logger_a, &[]).is_empty());
        // An edit the webhook has not taken: both revisions, and who injects theirs.
        assert_eq!(
            warnings(
                &logger_a,
                &[
                    ("r1", publication("bbbbbbbbbbbb", 5)),
                    ("r2", publication("bbbbbbbbbbbb", 20)),
                    ("gone", publication("cccccccccccc", 3600)),
                ]
            ),
            [
                "logger:v1: the config read here is revision aaaaaaaaaaaa, but the running injector(s) r1, r2 (published 5s ago) inject revision bbbbbbbbbbbb: the webhook has not loaded this config yet, or refused it and keeps its last good one (its log says why); shown with the config read here"
            ]
        );
        // A sidecar on one side only.
        let both = [("logger:v1", "aaaaaaaaaaaa"), ("tracer:v1", "dddddddddddd")];
        assert_eq!(
            warnings(&both, &[("r1", publication("aaaaaaaaaaaa", 5))]),
            [
                "tracer:v1: revision dddddddddddd is read here, but the running injector(s) r1 (published 5s ago) do not inject it: the webhook has not loaded this config yet, or refused it (its log says why); shown with it all the same"
            ]
        );
        let mut two = publication("aaaaaaaaaaaa", 5);
        two.revisions = [("logger:v1", "aaaaaaaaaaaa"), ("tracer:v1", "dddddddddddd")]
            .iter()
            .map(|(s, r)| ((*s).to_owned(), (*r).to_owned()))
            .collect();
        assert_eq!(
            warnings(&[], &[("r1", two)]),
            [
                "the running injector(s) r1 (published 5s ago) also inject logger:v1 (aaaaaaaaaaaa), tracer:v1 (dddddddddddd), but no config for them is read here: a pod that asks for one is shown without it"
            ]
        );
        // Replicas that disagree: one line, whatever is read here.
        assert_eq!(
            warnings(
                &logger_a,
                &[
                    ("r1", publication("aaaaaaaaaaaa", 5)),
                    ("r2", publication("bbbbbbbbbbbb", 5)),
                ]
            ),
            [
                "running injectors disagree (r1 publishes logger:v1=aaaaaaaaaaaa, r2 publishes logger:v1=bbbbbbbbbbbb): new pods get what the replica that answers serves; shown with the configs read here"
            ]
        );
        // Read from the status ConfigMap; a malformed item is said, not an error.
        let here: RevisionsInForce = [("logger:v1".to_owned(), "aaaaaaaaaaaa".to_owned())]
            .into_iter()
            .collect();
        let published = serde_json::json!({"r1": publication("bbbbbbbbbbbb", 5)}).to_string();
        let from_status = preview_warnings_of(&status(Some(&published)), &here, now, max_age);
        assert_eq!(from_status.len(), 1, "{from_status:?}");
        assert!(from_status[0].contains("inject revision bbbbbbbbbbbb"));
        assert!(preview_warnings_of(&status(None), &here, now, max_age).is_empty());
        let mut broken = status(Some("{not json"));
        broken.metadata.namespace = Some("injector-system".into());
        let said = preview_warnings_of(&broken, &here, now, max_age);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with(
                "injector-system/sidecar-injector-status item injectors is malformed ("
            ) && said[0]
                .ends_with("): whether the running injectors inject these revisions is unknown"),
            "{said:?}"
        );
    }

    #[test]
    fn stale_or_disagreeing_publications_give_way_to_the_configs_and_say_so() {
        let stale = choose(
            &[("gone", publication("aaaaaaaaaaaa", 3600))],
            RevisionsSource::Auto,
        );
        assert_eq!(
            stale,
            RevisionsChoice::Configs {
                why: "the injectors' publication is stale (last from gone, 1h ago; older than 1m 30s): using the configs read here (--revisions-from=published to use it anyway)".into()
            }
        );
        let split = choose(
            &[
                ("a", publication("aaaaaaaaaaaa", 5)),
                ("b", publication("bbbbbbbbbbbb", 5)),
            ],
            RevisionsSource::Auto,
        );
        assert_eq!(
            split,
            RevisionsChoice::Configs {
                why: "running injectors disagree (a publishes logger:v1=aaaaaaaaaaaa, b publishes logger:v1=bbbbbbbbbbbb): using the configs read here".into()
            }
        );
        // A stale replica does not count against fresh ones that agree.
        let mixed = choose(
            &[
                ("a", publication("aaaaaaaaaaaa", 5)),
                ("old", publication("bbbbbbbbbbbb", 600)),
            ],
            RevisionsSource::Auto,
        );
        assert!(
            matches!(mixed, RevisionsChoice::Published { .. }),
            "{mixed:?}"
        );
        assert!(matches!(
            choose(&[], RevisionsSource::Auto),
            RevisionsChoice::Configs { .. }
        ));
    }

    #[test]
    fn the_flag_chooses_the_source_explicitly() {
        let stale = [("gone", publication("aaaaaaaaaaaa", 3600))];
        assert!(matches!(
            choose(&stale, RevisionsSource::Published),
            RevisionsChoice::Published { .. }
        ));
        let fresh = [("a", publication("aaaaaaaaaaaa", 1))];
        assert!(matches!(
            choose(&fresh, RevisionsSource::Configs),
            RevisionsChoice::Configs { .. }
        ));
    }

    #[test]
    fn a_publication_replaces_its_own_entry_and_forgets_long_gone_replicas() {
        let data = publish(
            &BTreeMap::new(),
            "gone",
            publication("aaaaaaaaaaaa", 7200),
            std::time::Duration::from_secs(300),
        );
        let data = publish(
            &data,
            "a",
            publication("aaaaaaaaaaaa", 60),
            std::time::Duration::from_secs(300),
        );
        let data = publish(
            &data,
            "a",
            publication("bbbbbbbbbbbb", 0),
            std::time::Duration::from_secs(300),
        );
        let injectors = decode_injectors(&ConfigMap {
            data: Some(data),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(injectors.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            injectors["a"].revisions.get("logger:v1"),
            Some("bbbbbbbbbbbb")
        );
    }

    #[test]
    fn a_publication_names_its_manual_rollouts_and_reads_one_that_names_none() {
        let mut manual = publication("aaaaaaaaaaaa", 0);
        manual.manual = ["logger:v1".to_owned()].into();
        let data = publish(
            &BTreeMap::new(),
            "a",
            manual.clone(),
            std::time::Duration::from_secs(300),
        );
        let configmap = |data| ConfigMap {
            data: Some(data),
            ..Default::default()
        };
        assert_eq!(decode_injectors(&configmap(data)).unwrap()["a"], manual);
        // As an earlier release publishes (no manual item), and as this one publishes none.
        let earlier = BTreeMap::from([(
            STATUS_INJECTORS_KEY.to_owned(),
            r#"{"a": {"revisions": {"logger:v1": "aaaaaaaaaaaa"}, "at": "2027-01-15T08:00:00Z"}}"#
                .to_owned(),
        )]);
        assert!(
            decode_injectors(&configmap(earlier)).unwrap()["a"]
                .manual
                .is_empty()
        );
        let none = publish(
            &BTreeMap::new(),
            "a",
            publication("aaaaaaaaaaaa", 0),
            std::time::Duration::from_secs(300),
        );
        assert!(!none[STATUS_INJECTORS_KEY].contains("manual"), "{none:?}");
    }

    #[test]
    fn an_absent_item_is_none_and_a_malformed_one_an_error() {
        assert!(decode_injectors(&status(None)).unwrap().is_empty());
        assert!(decode_injectors(&status(Some("[1, 2]"))).is_err());
    }

    #[test]
    fn a_failing_publication_is_retried_ever_less_often_up_to_the_heartbeat() {
        let every = std::time::Duration::from_secs(30);
        let delays: Vec<u64> = (1..=8)
            .map(|failures| retry_delay(failures, every).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_delay(u32::MAX, every).as_secs(), 30);
        // A conflict is retried within a second, however often it comes, and ends a run of
        // lasting failures (the write reached the API server).
        let mut failures = 0;
        let delays: Vec<u64> = [false, false, false, true, true, false]
            .into_iter()
            .map(|conflict| after_failure(&mut failures, conflict, every).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 1, 1, 1]);
        // A heartbeat shorter than a second does not retry faster than once a second.
        assert_eq!(
            retry_delay(1, std::time::Duration::from_millis(100)).as_secs(),
            1
        );
    }
}
