//! In-place resize on a real kubelet: a sidecar's memory raised in the running pods through
//! their `resize` subresource (the same pods, the app never restarted, the new figure in the
//! container's status, the kubelet's `observedGeneration` caught up), a resize the node cannot
//! fit failing with its reason and pausing the campaign at its first pod with nothing evicted,
//! and a fix resizing both.

use super::*;

/// The `resizer:v1` sidecar, its memory requested and limited at `memory`.
fn resizer(memory: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": "resizer", "labels": {"sidecar-injector.io/config": "true"}},
        "data": {"resizer.yaml": format!(
            "name: resizer:v1\ncontainers:\n  - name: resizer\n    image: localhost/busybox:1.35\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"exec sleep 100000\"]\n    readinessProbe: {{exec: {{command: [\"true\"]}}, periodSeconds: 1}}\n    resources: {{requests: {{memory: {memory}}}, limits: {{memory: {memory}}}}}\n"
        )},
    }))
    .unwrap()
}

/// The memory limit the kubelet reports `resizer` running with, in bytes.
fn reported_limit(pod: &Pod) -> Option<i128> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "resizer")?;
    let limit = status.resources.as_ref()?.limits.as_ref()?.get("memory")?;
    sidecar_injector::injection::resources::milli(&limit.0).map(|m| m / 1000)
}

/// The memory limit `resizer` has in the pod's spec.
fn spec_limit(pod: &Pod) -> Option<&str> {
    let container = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "resizer")?;
    let limit = container
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")?;
    Some(limit.0.as_str())
}

const MI: i128 = 1024 * 1024;

/// Waits until both pods of `resize` are Ready at a revision other than `old`, the kubelet
/// reporting `resizer` at `limit` bytes.
async fn wait_resized(pods: &Api<Pod>, old: &str, limit: i128, what: &str) -> Vec<Pod> {
    eventually(Duration::from_secs(180), what, || async {
        let list = pods_of(pods, "resize").await;
        (list.len() == 2
            && list.iter().all(|p| {
                ready(p)
                    && stamp(p).is_some_and(|s| s.starts_with("resizer:v1=") && s != old)
                    && reported_limit(p) == Some(limit)
            }))
        .then_some(list)
    })
    .await
}

pub(crate) async fn resize_in_place(
    client: &kube::Client,
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    configmaps: &Api<ConfigMap>,
) {
    configmaps
        .create(&PostParams::default(), &resizer("32Mi"))
        .await
        .unwrap();
    wait_both_publish(configmaps, "resizer:v1").await;
    deployments
        .create(
            &PostParams::default(),
            &one_pod_at_a_time(deployment("resize", 2, Some("resizer:v1"))),
        )
        .await
        .unwrap();
    let before = wait_running(pods, "resize", 2, &["app", "resizer"], Some("resizer:v1=")).await;
    let uids: BTreeSet<String> = before
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert!(
        before.iter().all(|p| reported_limit(p) == Some(32 * MI)),
        "the kubelet reports each container's resources"
    );
    let first_stamp = stamp(&before[0]).unwrap().to_owned();

    // The memory raised: resized where the pods run.
    edit(configmaps, resizer("48Mi")).await;
    let resized = wait_resized(
        pods,
        &first_stamp,
        48 * MI,
        "resize: both pods resized in place to 48Mi",
    )
    .await;
    let after: BTreeSet<String> = resized
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(after, uids, "the same pods");
    for pod in &resized {
        let name = pod.metadata.name.as_deref().unwrap();
        assert_eq!(
            container_status(pod, "app").unwrap().0,
            0,
            "{name}: the app never restarted"
        );
        assert_eq!(
            container_status(pod, "resizer").unwrap().0,
            0,
            "{name}: resizePolicy NotRequired: the sidecar was not restarted"
        );
        let generation = pod.metadata.generation.unwrap_or_default();
        assert!(generation >= 2, "{name}: the resize raised the generation");
        assert_eq!(
            pod.status.as_ref().unwrap().observed_generation,
            Some(generation),
            "{name}: the kubelet observed the resize"
        );
    }
    assert_eq!(
        replicasets_of(client, "resize").await,
        1,
        "no new ReplicaSet"
    );
    let logs = injector_logs(&["--tail=-1"]);
    assert!(
        logs.contains("resizer resized to requests.memory 48Mi, limits.memory 48Mi")
            || logs.contains("resizer resized to limits.memory 48Mi, requests.memory 48Mi"),
        "the engine says what it resized:\n{logs}"
    );

    // More memory than the node has. The API server (1.35+) refuses such a resize itself,
    // checking the node's allocatable; a kubelet would say Infeasible. Either way the
    // upgrade fails with that reason, the campaign pauses at it, and nothing is evicted: the
    // same pods run on at 48Mi.
    let resized_stamp = stamp(&resized[0]).unwrap().to_owned();
    edit(configmaps, resizer("1000Gi")).await;
    let book = eventually(
        Duration::from_secs(120),
        "the campaign of resizer:v1 paused",
        || async {
            let status = configmaps.get("sidecar-injector-status").await.ok()?;
            let book: Value = serde_json::from_str(status.data.as_ref()?.get("campaigns")?).ok()?;
            (book["campaigns"]["resizer:v1"]["state"] == "paused").then_some(book)
        },
    )
    .await;
    let failures = book["campaigns"]["resizer:v1"]["failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(failures.len(), 1, "{book:#}");
    let reason = failures[0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains("the API server refused to resize resizer: ")
            && reason.contains("node didn't have enough allocatable resources: memory")
            || reason.contains("the kubelet did not resize resizer: PodResizePending Infeasible"),
        "{book:#}"
    );
    let list = pods_of(pods, "resize").await;
    let now: BTreeSet<String> = list.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert_eq!(now, uids, "no pod evicted or replaced");
    assert!(
        list.iter()
            .all(|p| ready(p) && reported_limit(p) == Some(48 * MI)),
        "both pods run on at 48Mi"
    );
    let moved: Vec<&Pod> = list
        .iter()
        .filter(|p| stamp(p) != Some(resized_stamp.as_str()))
        .collect();
    assert!(moved.len() <= 1, "no other pod touched after the failure");
    if let Some(pod) = moved.first() {
        assert_eq!(spec_limit(pod), Some("1000Gi"));
    }

    // A figure that fits: both pods resized in place, the one a kubelet left asking too much
    // (if any) first.
    edit(configmaps, resizer("64Mi")).await;
    let fixed = wait_resized(
        pods,
        &resized_stamp,
        64 * MI,
        "resize: both pods resized in place to 64Mi after the fix",
    )
    .await;
    let after: BTreeSet<String> = fixed
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(after, uids, "the same pods, resized in place again");
    if let Some(pod) = moved.first() {
        let broken = pod.metadata.name.clone().unwrap();
        let logs = injector_logs(&["--tail=-1"]);
        let first = logs
            .lines()
            .find(|l| l.contains("upgrading in place:") && l.contains("limits.memory 64Mi"))
            .unwrap_or_default();
        assert!(
            first.contains(&broken),
            "the pod left asking 1000Gi ({broken}) was resized first: {first}"
        );
    }

    deployments
        .delete("resize", &Default::default())
        .await
        .unwrap();
    eventually(DEADLINE, "resize's pods gone", || async {
        pods_of(pods, "resize").await.is_empty().then_some(())
    })
    .await;
    configmaps
        .delete("resizer", &Default::default())
        .await
        .unwrap();
}
