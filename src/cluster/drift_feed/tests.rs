use super::*;
use crate::test_fixtures::PodMeta;

fn meta(name: &str, version: &str) -> ObjectMeta {
    PodMeta::new("shop", name).version(version).0
}

fn signals(feeds: usize) -> (Signals, watch::Receiver<bool>) {
    let (changes, _) = watch::channel(0);
    let (synced, synced_rx) = watch::channel(false);
    let signals = Signals {
        changes,
        synced,
        refused: watch::channel(None).0,
        lists_done: AtomicUsize::new(0),
        feeds,
    };
    (signals, synced_rx)
}

fn api_error(code: u16, reason: &str) -> watcher::Error {
    let status = kube::core::Status::failure("namespaces", reason).with_code(code);
    watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
}

#[test]
fn a_refused_first_list_counts_toward_the_sync_once_and_a_failure_a_retry_may_mend_never() {
    for (failure, counts) in [
        (api_error(403, "Forbidden"), true),
        (api_error(401, "Unauthorized"), true),
        (api_error(404, "NotFound"), true),
        (api_error(500, "InternalError"), false),
        (api_error(503, "ServiceUnavailable"), false),
        (api_error(429, "TooManyRequests"), false),
        (
            watcher::Error::WatchError(Box::new(
                kube::core::Status::failure("too old", "Expired").with_code(410),
            )),
            false,
        ),
        (watcher::Error::NoResourceVersion, false),
    ] {
        let (signals, synced) = signals(2);
        let (namespaces, pods) = (AtomicBool::new(false), AtomicBool::new(false));
        signals.first_list_failed(&namespaces, &failure);
        signals.first_list_once(&pods);
        assert_eq!(*synced.borrow(), counts, "{failure}");
        // The retry that lists counts only if the failure did not.
        signals.first_list_once(&namespaces);
        assert!(*synced.borrow(), "{failure}: synced once listed");
        assert_eq!(signals.lists_done.load(Ordering::Acquire), 2, "{failure}");
    }
}

#[test]
fn the_first_refusal_of_a_feed_is_said_and_a_failure_a_retry_may_mend_is_not() {
    let (mut signals, _) = signals(5);
    let (refused_tx, refused) = watch::channel(None);
    signals.refused = refused_tx;
    signals.failed(&api_error(503, "ServiceUnavailable"));
    assert_eq!(*refused.borrow(), None);
    signals.failed(&api_error(403, "Forbidden"));
    signals.failed(&api_error(404, "NotFound"));
    assert_eq!(
        refused.borrow().as_deref(),
        Some("failed to perform initial object list: namespaces (Forbidden, 403)")
    );
}

#[test]
fn the_pod_watch_records_only_the_followed_pods_and_their_deletion() {
    let followed = FollowedPods::default();
    followed.applied(&meta("web-1", "4"));
    assert_eq!(followed.seen("shop", "web-1"), None, "not followed yet");

    followed.follow("shop", "web-1");
    assert_eq!(followed.seen("shop", "web-1"), Some(PodSeen::Nothing));
    followed.applied(&meta("web-1", "5"));
    followed.applied(&meta("web-2", "6"));
    assert_eq!(
        followed.seen("shop", "web-1"),
        Some(PodSeen::Version("5".into()))
    );
    assert_eq!(followed.seen("shop", "web-2"), None, "never followed");

    // A relist without it: it is gone, as a deletion says.
    followed.relist_started();
    followed.applied(&meta("web-2", "7"));
    assert_eq!(
        followed.seen("shop", "web-1"),
        Some(PodSeen::Version("5".into())),
        "not gone before the relist ends"
    );
    followed.relist_done();
    assert_eq!(followed.seen("shop", "web-1"), Some(PodSeen::Deleted));
    followed.relist_started();
    followed.applied(&meta("web-1", "8"));
    followed.relist_done();
    assert_eq!(
        followed.seen("shop", "web-1"),
        Some(PodSeen::Version("8".into()))
    );
    // Followed midway through a relist that may have listed it already: not judged by it.
    followed.relist_started();
    followed.follow("shop", "web-3");
    followed.relist_done();
    assert_eq!(followed.seen("shop", "web-3"), Some(PodSeen::Nothing));
    followed.forget("shop", "web-3");
    followed.deleted(&meta("web-1", "9"));
    assert_eq!(followed.seen("shop", "web-1"), Some(PodSeen::Deleted));

    followed.forget("shop", "web-1");
    assert_eq!(followed.seen("shop", "web-1"), None);
    assert!(followed.lock().is_empty(), "nothing left of the namespace");
}

fn version(v: &str) -> Option<PodSeen> {
    Some(PodSeen::Version(v.into()))
}

#[test]
fn a_pod_read_is_news_again_only_once_the_watch_saw_it_change() {
    // Just patched or read at version 2: the watch has seen nothing of it since followed.
    let pod_at = |version: &str| Pod {
        metadata: meta("web-1", version),
        ..Pod::default()
    };
    let patched = PodRead::of(Some(&pod_at("2")), None);
    assert!(!patched.changed(Some(&PodSeen::Nothing)));
    assert!(!patched.changed(version("2").as_ref()), "its own version");
    assert!(
        patched.changed(version("3").as_ref()),
        "the kubelet's report"
    );
    assert!(patched.changed(Some(&PodSeen::Deleted)));
    assert!(patched.changed(None), "not followed: read");

    // Read at 3 while the watch was still at 2: neither is news, 4 is.
    let read = PodRead::of(Some(&pod_at("3")), version("2"));
    assert!(!read.changed(version("2").as_ref()));
    assert!(!read.changed(version("3").as_ref()));
    assert!(read.changed(version("4").as_ref()));

    // Read gone after the watch said so: nothing more to learn of it.
    let gone = PodRead::of(None, Some(PodSeen::Deleted));
    assert_eq!(gone.read, None);
    assert!(!gone.changed(Some(&PodSeen::Deleted)));
}

#[test]
fn a_pod_followed_twice_is_followed_until_both_forget_it() {
    let followed = FollowedPods::default();
    followed.follow("shop", "web-1");
    followed.applied(&meta("web-1", "5"));
    // Its second follower finds what the watch saw already, not a blank.
    followed.follow("shop", "web-1");
    let seen = Some(PodSeen::Version("5".into()));
    assert_eq!(followed.seen("shop", "web-1"), seen);
    followed.forget("shop", "web-1");
    assert_eq!(followed.seen("shop", "web-1"), seen, "one follower left");
    followed.applied(&meta("web-1", "6"));
    assert_eq!(
        followed.seen("shop", "web-1"),
        Some(PodSeen::Version("6".into()))
    );
    followed.forget("shop", "web-1");
    assert_eq!(followed.seen("shop", "web-1"), None);
    followed.forget("shop", "web-1");
    assert!(followed.lock().is_empty());
}
