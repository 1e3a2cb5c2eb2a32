//! Each serving replica's publication (what it injects, renewed on a heartbeat and withdrawn
//! at shutdown), the status ConfigMap watched, and the book applied to the configs served.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use tokio::sync::watch as signal;

use super::*;
use crate::config::RevisionsInForce;
use crate::rollout::CampaignBook;

/// What the configs become once the campaign book in the status ConfigMap (`status`, from
/// [`watch_status`]) is applied, as two signals: `pinned`, the configs with each pin of
/// `rollout --to` in force (what replicas publish as injected and the engine rolls out), and
/// `served`, that with each hold of a paused campaign in force and a warning on each sidecar
/// whose campaign is paused (what the webhook injects; kubectl shows the warnings).
pub(crate) fn apply_book(
    mut status: signal::Receiver<Option<ConfigMap>>,
    mut configs: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
) -> BookSignals {
    let (publish_pinned, pinned) = signal::channel(configs.borrow().clone());
    let (publish_served, served) = signal::channel(configs.borrow().clone());
    tokio::spawn(async move {
        let mut said: Vec<String> = Vec::new();
        let mut book = CampaignBook::default();
        let mut malformed = None;
        loop {
            if let Some(read) = book_or_warn(status.borrow_and_update().as_ref(), &mut malformed) {
                book = read.unwrap_or_default();
            }
            let set = configs.borrow_and_update().clone();
            let crate::rollout::NewPods {
                pinned: with_pins,
                served: with_holds,
                errors,
                ..
            } = crate::render::new_pods(&book, &set);
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
pub(crate) struct BookSignals {
    pub(crate) pinned: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
    pub(crate) served: signal::Receiver<std::sync::Arc<crate::config::SidecarSet>>,
}

/// Publishes what this replica injects under `identity`: once the configs are ready, on every
/// change of the set, and on a heartbeat (`every`), so that a gone replica's publication goes
/// stale. Each is written onto the `status` ConfigMap as watched ([`watch_status`]), read
/// only when that copy is stale: a heartbeat is then one request, not two. Runs until `stop`
/// turns true, then withdraws this replica's publication.
#[allow(clippy::too_many_arguments)] // a task's inputs, each its own signal or setting
pub(crate) async fn run_publisher(
    client: Client,
    namespace: String,
    identity: String,
    status: signal::Receiver<Option<ConfigMap>>,
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
            let watched = status.borrow().clone();
            match publish_once(&api, &namespace, &identity, watched, &injects, every).await {
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
                    let delay =
                        after_failure(&mut failures, crate::cluster::is_conflict(&err), every);
                    retry_in = Some(delay);
                    tracing::warn!(
                        "cannot publish the revisions in force, retrying in {delay:?}: {}",
                        crate::cluster::error_text(&err)
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
            crate::cluster::error_text(&err)
        );
    }
}

/// How long to wait after a failed publication, counting it in `failures`.
pub(super) fn after_failure(
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
pub(super) fn retry_delay(failures: u32, every: std::time::Duration) -> std::time::Duration {
    let doubled = std::time::Duration::from_secs(1)
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)));
    doubled.min(every.max(std::time::Duration::from_secs(1)))
}

/// One read-modify-write of this replica's publication (a replace at the version read, so a
/// concurrent writer is never overwritten; a conflict is left to the caller's retry).
async fn publish_once(
    api: &Api<ConfigMap>,
    namespace: &str,
    identity: &str,
    watched: Option<ConfigMap>,
    (revisions, manual): &(RevisionsInForce, BTreeSet<String>),
    every: std::time::Duration,
) -> Result<(), kube::Error> {
    let publication = Publication {
        revisions: revisions.clone(),
        manual: manual.clone(),
        at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ),
    };
    read_modify_write(api, namespace, watched, 1, |current| {
        let existing = current.and_then(|c| c.data.clone()).unwrap_or_default();
        let data = publish(&existing, identity, publication.clone(), every * 10);
        Ok::<_, std::convert::Infallible>(Some((data, ())))
    })
    .await
    .map(|_| ())
    .map_err(kube_error)
}

/// The API's error of an edit that cannot fail on its own.
fn kube_error(err: EditError<std::convert::Infallible>) -> kube::Error {
    match err {
        EditError::Read(e) | EditError::Write(e) => e,
        EditError::Edit(never) => match never {},
    }
}

/// This replica's publication removed (graceful shutdown).
async fn withdraw(
    api: &Api<ConfigMap>,
    namespace: &str,
    identity: &str,
) -> Result<(), kube::Error> {
    // Read, not watched: a watched copy from before this replica's last publication would
    // say there is nothing to withdraw.
    read_modify_write(api, namespace, None, 1, |current| {
        let Some(current) = current else {
            return Ok(None);
        };
        let mut data = current.data.clone().unwrap_or_default();
        let mut injectors = injectors_in(&data);
        if injectors.remove(identity).is_none() {
            return Ok(None);
        }
        set_injectors(&mut data, &injectors);
        Ok::<_, std::convert::Infallible>(Some((data, ())))
    })
    .await
    .map(|_| ())
    .map_err(kube_error)
}
