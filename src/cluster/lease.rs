//! Leader election on a `coordination.k8s.io/v1` Lease: every replica serves the webhook, only
//! the holder of the Lease acts on workloads. The decision is a pure function of the Lease and
//! the time; the loop around it renews on a timer and publishes until when acting is safe,
//! which is earlier than the lease could expire for anyone else.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

pub(crate) const ROLLOUT_LEASE: &str = "sidecar-injector-rollout";
/// On the Lease: the holder's `--rollout` mode, so that `rollout` can refuse to compete with an
/// automatic engine.
pub(crate) const MODE_ANNOTATION: &str = "sidecar-injector/rollout-mode";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseDecision {
    /// No Lease yet: create it.
    Create,
    /// Ours: renew it.
    Renew,
    /// Someone else's, expired: take it over.
    TakeOver { previous: String },
    /// Someone else's, valid.
    HeldBy {
        holder: String,
        mode: Option<String>,
        until: Timestamp,
    },
}

/// Who may act, given the Lease as read and the time.
pub(crate) fn decide(lease: Option<&Lease>, identity: &str, now: Timestamp) -> LeaseDecision {
    let Some(lease) = lease else {
        return LeaseDecision::Create;
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    if holder == identity {
        return LeaseDecision::Renew;
    }
    let renewed = spec.and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()));
    let seconds = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0);
    let until = renewed
        .and_then(|t| {
            t.0.checked_add(SignedDuration::from_secs(i64::from(seconds)))
                .ok()
        })
        .unwrap_or(Timestamp::MIN);
    if holder.is_empty() || until <= now {
        LeaseDecision::TakeOver { previous: holder }
    } else {
        LeaseDecision::HeldBy {
            holder,
            mode: lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(MODE_ANNOTATION))
                .cloned(),
            until,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct LeaseSettings {
    pub(crate) namespace: String,
    pub(crate) identity: String,
    /// What the holder's `--rollout` mode is, written on the Lease.
    pub(crate) mode: String,
    pub(crate) duration: Duration,
    pub(crate) renew_every: Duration,
}

/// The Lease object this process writes.
fn lease_object(settings: &LeaseSettings, previous: Option<&Lease>, now: Timestamp) -> Lease {
    let mut lease = previous.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(ROLLOUT_LEASE.into()),
            namespace: Some(settings.namespace.clone()),
            ..Default::default()
        },
        spec: None,
    });
    let mut spec = lease.spec.take().unwrap_or_default();
    let ours = spec.holder_identity.as_deref() == Some(settings.identity.as_str());
    if !ours {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(settings.identity.clone());
    spec.lease_duration_seconds = Some(settings.duration.as_secs().max(1) as i32);
    spec.renew_time = Some(MicroTime(now));
    lease.spec = Some(spec);
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(MODE_ANNOTATION.into(), settings.mode.clone());
    lease
}

/// The Lease as this holder gives it up: no holder, so the next replica takes it over at once
/// instead of waiting for it to expire (as client-go's `ReleaseOnCancel`). `None` when the
/// Lease is not ours to release.
fn released_object(current: &Lease, identity: &str, now: Timestamp) -> Option<Lease> {
    let mut lease = current.clone();
    let spec = lease.spec.as_mut()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(now));
    Some(lease)
}

/// Gives the Lease up, when this process holds it. The replace carries the resourceVersion
/// read, so a Lease someone else took meanwhile is left alone.
pub(crate) async fn release(api: &Api<Lease>, identity: &str) -> Result<bool, kube::Error> {
    let Some(current) = api.get_opt(ROLLOUT_LEASE).await? else {
        return Ok(false);
    };
    let Some(released) = released_object(&current, identity, Timestamp::now()) else {
        return Ok(false);
    };
    api.replace(ROLLOUT_LEASE, &PostParams::default(), &released)
        .await?;
    Ok(true)
}

/// One attempt to hold the Lease. `Ok(true)` when held; the caller may act until the instant
/// the attempt started plus the duration minus a margin.
///
/// `ours` is the Lease as this holder last wrote it: renewed from it without reading it
/// first (as client-go's leader election does), one request a renewal instead of two. If
/// someone wrote it since, that replace fails (409) and the Lease is read as when not held.
pub(crate) async fn try_hold(
    api: &Api<Lease>,
    settings: &LeaseSettings,
    ours: &mut Option<Lease>,
) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    if let Some(last) = ours.take() {
        match api
            .replace(
                ROLLOUT_LEASE,
                &PostParams::default(),
                &lease_object(settings, Some(&last), now),
            )
            .await
        {
            Ok(renewed) => {
                *ours = Some(renewed);
                return Ok(true);
            }
            Err(e) if super::is_conflict(&e) || super::is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let current = api.get_opt(ROLLOUT_LEASE).await?;
    let decision = decide(current.as_ref(), &settings.identity, now);
    let result = match &decision {
        LeaseDecision::HeldBy { .. } => return Ok(false),
        LeaseDecision::Create => {
            api.create(&PostParams::default(), &lease_object(settings, None, now))
                .await
        }
        // A replace carries the resourceVersion read above: if another replica wrote the Lease
        // since, this fails with 409 and nobody holds it twice.
        LeaseDecision::Renew | LeaseDecision::TakeOver { .. } => {
            api.replace(
                ROLLOUT_LEASE,
                &PostParams::default(),
                &lease_object(settings, current.as_ref(), now),
            )
            .await
        }
    };
    match result {
        Ok(written) => {
            if let LeaseDecision::TakeOver { previous } = decision {
                info!(previous, "took over the expired rollout Lease");
            }
            *ours = Some(written);
            Ok(true)
        }
        Err(e) if super::is_conflict(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Keeps trying to hold the Lease while this replica is ready (`not_ready` says why not, and
/// wakes the loop when that changes); publishes until when this process may act (`None`: not
/// the holder). A holder that stops being ready stops acting and gives the Lease up, so that a
/// ready replica acts instead of one that would hold the Lease for nobody. When `stop` turns
/// true (graceful shutdown), stops acting at once, gives the Lease up if held, and returns.
pub(crate) async fn run(
    client: Client,
    settings: LeaseSettings,
    mut not_ready: watch::Receiver<Option<&'static str>>,
    publish: watch::Sender<Option<Instant>>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    // Act only in the first two thirds of the lease, so that a slow renewal stops the holder
    // well before another replica could take over.
    let safe = settings.duration * 2 / 3;
    let mut leading = false;
    // The Lease as last written while held, to renew from.
    let mut ours = None;
    // Why this replica last stayed out of the competition, so that it is said once.
    let mut waiting: Option<&'static str> = None;
    // Until its sender is gone, readiness can still change.
    let mut readiness_open = true;
    loop {
        let started = Instant::now();
        let unready = *not_ready.borrow_and_update();
        let held = match unready {
            Some(reason) => {
                if leading {
                    publish.send_replace(None);
                    info!(identity = %settings.identity, reason, "not ready: stopped acting; giving the rollout Lease up");
                    give_up(&api, &settings).await;
                    ours = None;
                    leading = false;
                } else if waiting != Some(reason) {
                    info!(identity = %settings.identity, reason, "not competing for the rollout Lease until this replica is ready");
                }
                waiting = Some(reason);
                false
            }
            None => {
                waiting = None;
                let attempt = try_hold(&api, &settings, &mut ours);
                match tokio::time::timeout(settings.renew_every, attempt).await {
                    Ok(Ok(held)) => held,
                    Ok(Err(err)) => {
                        warn!(
                            "cannot renew the rollout Lease: {}",
                            super::error_text(&err)
                        );
                        false
                    }
                    Err(_) => {
                        warn!("renewing the rollout Lease timed out");
                        false
                    }
                }
            }
        };
        if held != leading {
            if held {
                info!(identity = %settings.identity, "holding the rollout Lease: this replica acts");
            } else {
                info!(identity = %settings.identity, "not holding the rollout Lease: this replica only reports");
            }
            leading = held;
        }
        // When not renewed, an earlier grant runs out on its own: no other replica can take
        // the Lease before it expires, and the grant ends well before that.
        if held {
            publish.send_replace(Some(started + safe));
        }
        let next = started + settings.renew_every;
        let stopping = loop {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => break false,
                _ = stop.wait_for(|stopping| *stopping) => break true,
                // Becoming ready (or no longer) is acted on at once, not at the next renewal.
                changed = not_ready.changed(), if readiness_open => match changed {
                    Ok(()) => break false,
                    Err(_) => readiness_open = false,
                },
            }
        };
        if stopping {
            break;
        }
    }
    publish.send_replace(None);
    if leading {
        give_up(&api, &settings).await;
    }
}

/// Releases the Lease this replica holds, within one renewal period; on failure it expires
/// on its own.
async fn give_up(api: &Api<Lease>, settings: &LeaseSettings) {
    match tokio::time::timeout(settings.renew_every, release(api, &settings.identity)).await {
        Ok(Ok(true)) => info!(identity = %settings.identity, "released the rollout Lease"),
        Ok(Ok(false)) => {}
        Ok(Err(err)) => warn!(
            "cannot release the rollout Lease; it expires on its own: {}",
            super::error_text(&err)
        ),
        Err(_) => warn!("releasing the rollout Lease timed out; it expires on its own"),
    }
}

/// Whether the grant published by [`run`] still allows acting.
pub(crate) fn may_act(grant: &watch::Receiver<Option<Instant>>) -> bool {
    grant.borrow().is_some_and(|until| Instant::now() < until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::within;
    use http_body_util::BodyExt;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_released_lease_has_no_holder_and_is_taken_over_at_once() {
        let t = Timestamp::from_second(1_800_000_000).unwrap();
        let ours = lease("a", t, 15);
        let released = released_object(&ours, "a", t).unwrap();
        let spec = released.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity, None);
        assert_eq!(
            decide(Some(&released), "b", t),
            LeaseDecision::TakeOver {
                previous: String::new()
            }
        );
        assert_eq!(released_object(&ours, "b", t), None, "not ours to release");
    }

    fn lease(holder: &str, renewed: Timestamp, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: Some([(MODE_ANNOTATION.to_owned(), "auto".to_owned())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_lease_is_created_renewed_respected_and_taken_over_when_expired() {
        let t = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(decide(None, "a", t), LeaseDecision::Create);
        assert_eq!(
            decide(Some(&lease("a", t, 15)), "a", t),
            LeaseDecision::Renew
        );
        let later = t.checked_add(SignedDuration::from_secs(14)).unwrap();
        assert_eq!(
            decide(Some(&lease("b", t, 15)), "a", later),
            LeaseDecision::HeldBy {
                holder: "b".into(),
                mode: Some("auto".into()),
                until: t.checked_add(SignedDuration::from_secs(15)).unwrap(),
            }
        );
        let expired = t.checked_add(SignedDuration::from_secs(15)).unwrap();
        assert_eq!(
            decide(Some(&lease("b", t, 15)), "a", expired),
            LeaseDecision::TakeOver {
                previous: "b".into()
            }
        );
    }

    type Shared<T> = Arc<Mutex<T>>;

    /// A mock API holding one Lease: GET, create and replace (409 on a stale
    /// resourceVersion), as the apiserver does for this object. Also returns the Lease as
    /// stored, and how many requests were made.
    fn lease_api() -> (Client, Shared<Option<Lease>>, Shared<usize>) {
        let stored: Shared<Option<Lease>> = Arc::default();
        let requests: Shared<usize> = Arc::default();
        let (state, count) = (stored.clone(), requests.clone());
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (state, count) = (state.clone(), count.clone());
            async move {
                *count.lock().unwrap() += 1;
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let mut stored = state.lock().unwrap();
                let version = |lease: &Lease| lease.metadata.resource_version.clone();
                let (code, reply) = match parts.method.as_str() {
                    "GET" => match stored.as_ref() {
                        Some(lease) => (200, serde_json::to_value(lease).unwrap()),
                        None => (404, status(404, "NotFound")),
                    },
                    method => {
                        let mut lease: Lease = serde_json::from_slice(&bytes).unwrap();
                        let exists = stored.is_some();
                        let stale = stored.as_ref().map(version)
                            != Some(lease.metadata.resource_version.clone());
                        if (method == "POST" && exists) || (method == "PUT" && stale) {
                            (409, status(409, "Conflict"))
                        } else {
                            let next = stored
                                .as_ref()
                                .and_then(version)
                                .map_or(1, |v| v.parse::<u64>().unwrap() + 1);
                            lease.metadata.resource_version = Some(next.to_string());
                            *stored = Some(lease.clone());
                            (200, serde_json::to_value(&lease).unwrap())
                        }
                    }
                };
                let response = http::Response::builder()
                    .status(code)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&reply).unwrap(),
                    ))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (Client::new(service, "default"), stored, requests)
    }

    fn status(code: u16, reason: &str) -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": reason, "message": reason, "code": code})
    }

    /// A 15 s Lease renewed every 5 s, in namespace `ns`.
    fn settings(identity: &str, mode: &str) -> LeaseSettings {
        LeaseSettings {
            namespace: "ns".into(),
            identity: identity.into(),
            mode: mode.into(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_replica_competes_for_the_lease_only_while_ready_and_gives_it_up_when_it_stops_being()
    {
        let (client, stored, requests) = lease_api();
        // A renewal every 5 s: what makes the replica take the Lease, or give it up, sooner is
        // the change of its readiness.
        let settings = settings("a", "auto");
        let (readiness, not_ready) = watch::channel(Some("sidecar configs not loaded yet"));
        let (publish, grant) = watch::channel(None);
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(run(client, settings, not_ready, publish, stopping));
        let holder = || {
            stored
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
        };

        // Not ready: the Lease is not even read. Not a wait for something to happen: nothing
        // may happen in this window, which holds the loop's first pass.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            *requests.lock().unwrap(),
            0,
            "a replica that is not ready went for the Lease"
        );
        assert!(grant.borrow().is_none());

        readiness.send_replace(None);
        assert!(
            within(Duration::from_secs(2), || holder().as_deref() == Some("a"))
                .await
                .is_some(),
            "once ready, the replica takes the Lease at once, not at its next renewal"
        );
        assert!(may_act(&grant));

        // The holder stops being ready: it stops acting and releases the Lease for a ready
        // replica, instead of renewing it for nobody.
        readiness.send_replace(Some("shutting down"));
        assert!(
            within(Duration::from_secs(2), || stored.lock().unwrap().is_some()
                && holder().is_none())
            .await
            .is_some(),
            "a holder that stopped being ready released the Lease at once: holder {:?}",
            holder()
        );
        assert!(grant.borrow().is_none(), "it stopped acting");
        assert_eq!(
            decide(stored.lock().unwrap().as_ref(), "b", Timestamp::now()),
            LeaseDecision::TakeOver {
                previous: String::new()
            },
            "another replica takes the released Lease at once"
        );

        stop.send_replace(true);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_readiness_that_can_no_longer_change_does_not_spin_the_loop() {
        let (client, stored, requests) = lease_api();
        let settings = settings("cli", "cli");
        // As the `rollout` command passes it: ready, its sender gone at once.
        let (publish, grant) = watch::channel(None);
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(run(
            client,
            settings,
            watch::channel(None).1,
            publish,
            stopping,
        ));
        assert!(
            within(Duration::from_secs(2), || may_act(&grant))
                .await
                .is_some()
        );
        // The window in which a loop woken by the closed channel would renew over and over.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            *requests.lock().unwrap() <= 2,
            "{} requests in 1 s with a renewal every 5 s",
            requests.lock().unwrap()
        );
        assert!(stored.lock().unwrap().is_some());
        stop.send_replace(true);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_holder_renews_in_one_request_and_reads_the_lease_when_someone_else_wrote_it() {
        let (client, stored, requests) = lease_api();
        let api: Api<Lease> = Api::namespaced(client, "ns");
        let a = settings("a", "auto");
        let mut ours = None;
        assert!(try_hold(&api, &a, &mut ours).await.unwrap(), "created");
        assert_eq!(*requests.lock().unwrap(), 2, "read, then created");
        for renewal in 1..=3 {
            assert!(try_hold(&api, &a, &mut ours).await.unwrap());
            assert_eq!(
                *requests.lock().unwrap(),
                2 + renewal,
                "renewal {renewal}: one replace, no read"
            );
        }
        // Another replica takes the Lease over (it expired, say): the renewal from what `a`
        // last wrote is refused, and `a` reads the Lease and leaves it to its holder.
        let taken = lease_object(
            &settings("b", "auto"),
            stored.lock().unwrap().as_ref(),
            Timestamp::now(),
        );
        let taken_version = {
            let mut taken = taken;
            let next: u64 = taken
                .metadata
                .resource_version
                .as_deref()
                .unwrap()
                .parse()
                .unwrap();
            taken.metadata.resource_version = Some((next + 1).to_string());
            *stored.lock().unwrap() = Some(taken.clone());
            taken.metadata.resource_version
        };
        let before = *requests.lock().unwrap();
        assert!(!try_hold(&api, &a, &mut ours).await.unwrap(), "b holds it");
        assert_eq!(
            *requests.lock().unwrap(),
            before + 2,
            "a refused replace, a read"
        );
        let lease = stored.lock().unwrap().clone().unwrap();
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("b"));
        assert_eq!(lease.metadata.resource_version, taken_version, "left alone");
        assert!(ours.is_none(), "nothing of a's to renew from");
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_keeps_the_acquire_time() {
        let settings = settings("a", "auto");
        let t = Timestamp::from_second(1_800_000_000).unwrap();
        let taken = lease_object(&settings, Some(&lease("b", t, 15)), t);
        let spec = taken.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(t)));
        let later = t.checked_add(SignedDuration::from_secs(5)).unwrap();
        let renewed = lease_object(&settings, Some(&taken), later);
        let spec = renewed.spec.as_ref().unwrap();
        assert_eq!(spec.acquire_time, Some(MicroTime(t)));
        assert_eq!(spec.renew_time, Some(MicroTime(later)));
        assert_eq!(spec.lease_transitions, Some(1));
    }
}
