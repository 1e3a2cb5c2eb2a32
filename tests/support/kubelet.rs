//! A test kubelet: nothing runs containers here, so this keeps fake Nodes Ready and marks pods
//! Running and Ready (with containerStatuses) a moment after they appear, driven by a watch.
//! Pods with an image tagged `:broken` run but never become Ready, for failed-rollout tests.
//! A container whose image is changed in a running pod (an in-place upgrade) is restarted as a
//! kubelet would: its restart count goes up and its status takes the new image (a `:broken`
//! one backs off and the pod turns not Ready).
//! A container whose CPU or memory is resized (the pod's `resize` subresource) reports its new
//! figures, and restarts if its `resizePolicy` says so, unless it asks more than a node has:
//! then the resize stays pending, `Infeasible`, as a kubelet says it.
//! A pod annotated `e2e.kubelet/unready` is reported running but not Ready, as a failing
//! readiness probe makes it, and a pod with a container backing off (CrashLoopBackOff, as a test
//! reports it) is left as it is: neither is made Ready again.
//! Pods are never bound to a node: bound pods would wait forever for a kubelet to confirm
//! their deletion.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

pub const NODES: &[&str] = &["e2e-node-1", "e2e-node-2"];
/// The version the fake Nodes report: the release of the testbed's control plane.
pub const KUBELET_VERSION: &str = "v1.36.3";
const BROKEN_TAG: &str = ":broken";
/// The annotation that makes a running pod not Ready (its containers keep running).
pub const UNREADY: &str = "e2e.kubelet/unready";

/// Starts the kubelet on a thread of its own, with its own runtime and client, for the life of
/// the test binary.
pub fn start(kubeconfig: &Path, delay: Duration) {
    let kubeconfig = kubeconfig.to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the kubelet runtime");
        runtime.block_on(async move {
            let config = kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .expect("client config");
            let client = kube::Client::try_from(config).expect("client");
            register_nodes(&client).await;
            let _ = ready_tx.send(());
            tokio::spawn(heartbeat(client.clone()));
            run_pods(client, delay).await;
        });
    });
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the test kubelet registered its nodes");
}

fn node_status() -> Value {
    let now = now();
    json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test kubelet",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "architecture": "amd64", "operatingSystem": "linux",
                     "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                     "containerRuntimeVersion": "", "kubeProxyVersion": ""}
    }})
}

async fn register_nodes(client: &kube::Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    for name in NODES {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
        )
        .unwrap();
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("cannot register node {name}: {e}"),
        }
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(node_status()))
            .await
            .expect("node status");
    }
}

/// The node lifecycle controller marks a silent node Unknown after about 40 s.
async fn heartbeat(client: kube::Client) {
    let nodes: Api<Node> = Api::all(client);
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        for name in NODES {
            let _ = nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(node_status()))
                .await;
        }
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn is_broken(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .any(|c| c.image.as_deref().is_some_and(|i| i.ends_with(BROKEN_TAG)))
    })
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// A running pod's conditions, Ready or not.
fn conditions(ready: bool) -> Value {
    let now = now();
    let ready = if ready { "True" } else { "False" };
    json!([
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
        {"type": "Ready", "status": ready, "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
    ])
}

/// The containers whose spec differs from what their status reports, as `differs` judges.
fn changed_containers(
    pod: &Pod,
    differs: impl Fn(&ContainerStatus, &k8s_openapi::api::core::v1::Container) -> bool,
) -> Vec<String> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter(|c| statuses.iter().any(|s| s.name == c.name && differs(s, c)))
        .map(|c| c.name.clone())
        .collect()
}

/// The containers whose spec image differs from the image their status reports.
fn changed_images(pod: &Pod) -> Vec<String> {
    changed_containers(pod, |s, c| Some(&s.image) != c.image.as_ref())
}

/// An in-place image change: the changed containers restart with their new image.
async fn restart_changed(client: kube::Client, pod: Pod, delay: Duration) {
    tokio::time::sleep(delay).await;
    let (Some(name), Some(namespace)) = (pod.metadata.name.clone(), pod.metadata.namespace.clone())
    else {
        return;
    };
    let changed = changed_images(&pod);
    let images: std::collections::BTreeMap<&str, &str> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c.name.as_str(), c.image.as_deref().unwrap_or_default()))
        .collect();
    let mut broken = false;
    let statuses = container_statuses(&pod, |s, status| {
        if changed.contains(&s.name) {
            let image = images.get(s.name.as_str()).copied().unwrap_or_default();
            let bad = image.ends_with(BROKEN_TAG);
            broken |= bad;
            status["image"] = json!(image);
            status["restartCount"] = json!(s.restart_count + 1);
            status["ready"] = json!(!bad);
            status["state"] = container_state(bad, &now());
        }
    });
    let status = json!({"status": {
        "conditions": conditions(!broken),
        "containerStatuses": statuses,
    }});
    patch_status(client, &namespace, &name, status).await;
}

fn unready(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(UNREADY))
}

fn backing_off(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|statuses| {
            statuses.iter().any(|s| {
                s.state
                    .as_ref()
                    .and_then(|state| state.waiting.as_ref())
                    .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
            })
        })
}

/// A readiness probe failing: the pod and its containers turn not Ready, nothing restarts.
async fn turn_unready(client: kube::Client, pod: Pod) {
    let (Some(name), Some(namespace)) = (pod.metadata.name.clone(), pod.metadata.namespace.clone())
    else {
        return;
    };
    let statuses = container_statuses(&pod, |_, status| status["ready"] = json!(false));
    let status = json!({"status": {
        "conditions": conditions(false),
        "containerStatuses": statuses,
    }});
    patch_status(client, &namespace, &name, status).await;
}

/// The pod's container statuses as JSON, each as `edit` leaves it.
fn container_statuses(pod: &Pod, mut edit: impl FnMut(&ContainerStatus, &mut Value)) -> Vec<Value> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|s| {
            let mut status = serde_json::to_value(s).unwrap();
            edit(s, &mut status);
            status
        })
        .collect()
}

/// A container's state: running since `now`, or backing off for a `:broken` image.
fn container_state(broken: bool, now: &str) -> Value {
    if broken {
        json!({"waiting": {"reason": "CrashLoopBackOff", "message": "test kubelet: image is :broken"}})
    } else {
        json!({"running": {"startedAt": now}})
    }
}

/// Writes a pod's status, as a kubelet does (a pod gone meanwhile is no matter).
async fn patch_status(client: kube::Client, namespace: &str, name: &str, status: Value) {
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let _ = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await;
}

/// A node's allocatable CPU and memory, in millicores and bytes (as [`node_status`] says).
const ALLOCATABLE: [(&str, f64); 2] =
    [("cpu", 8000.0), ("memory", 32.0 * 1024.0 * 1024.0 * 1024.0)];

/// A quantity in millicores (cpu) or bytes (memory), enough for the figures tests write.
fn amount(resource: &str, quantity: &str) -> f64 {
    let units = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("m", 0.001),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(suffix, scale)| quantity.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((quantity, 1.0));
    let value = number.parse::<f64>().unwrap_or_default() * scale;
    if resource == "cpu" {
        value * 1000.0
    } else {
        value
    }
}

/// The CPU and memory figures of a container's resources, as JSON.
fn cpu_memory(resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) -> Value {
    let pick = |list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >|
     -> Value {
        list.into_iter()
            .flatten()
            .filter(|(name, _)| name.as_str() == "cpu" || name.as_str() == "memory")
            .map(|(name, q)| (name.clone(), json!(q.0)))
            .collect::<serde_json::Map<String, Value>>()
            .into()
    };
    json!({"requests": pick(resources.and_then(|r| r.requests.as_ref())),
           "limits": pick(resources.and_then(|r| r.limits.as_ref()))})
}

/// The containers whose spec's CPU or memory differs from what their status reports.
fn changed_resources(pod: &Pod) -> Vec<String> {
    changed_containers(pod, |s, c| {
        s.resources.is_some()
            && cpu_memory(s.resources.as_ref()) != cpu_memory(c.resources.as_ref())
    })
}

fn resize_pending(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodResizePending"))
}

/// An in-place resize: the resized containers report their new figures (restarted where their
/// resizePolicy says RestartContainer for a resource that changed), or, when one asks more
/// than a node has, the resize stays pending as Infeasible.
async fn resize_changed(client: kube::Client, pod: Pod, delay: Duration) {
    tokio::time::sleep(delay).await;
    let (Some(name), Some(namespace)) = (pod.metadata.name.clone(), pod.metadata.namespace.clone())
    else {
        return;
    };
    let changed = changed_resources(&pod);
    let specs: Vec<&k8s_openapi::api::core::v1::Container> =
        pod.spec.iter().flat_map(|s| s.containers.iter()).collect();
    let too_big = specs.iter().filter(|c| changed.contains(&c.name)).find_map(|c| {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        ALLOCATABLE.iter().find_map(|(resource, capacity)| {
            let asked = amount(resource, &requests?.get(*resource)?.0);
            (asked > *capacity).then(|| format!(
                "Node didn't have enough capacity: {resource}, requested: {asked}, capacity: {capacity}"
            ))
        })
    });
    let mut conditions = conditions(is_ready(&pod));
    let statuses = match too_big {
        Some(message) => {
            conditions.as_array_mut().unwrap().push(json!({"type": "PodResizePending",
                "status": "True", "reason": "Infeasible", "message": message, "lastTransitionTime": now()}));
            container_statuses(&pod, |_, _| {})
        }
        None => container_statuses(&pod, |s, status| {
            let Some(spec) = specs
                .iter()
                .find(|c| c.name == s.name && changed.contains(&c.name))
            else {
                return;
            };
            let before = cpu_memory(s.resources.as_ref());
            let after = cpu_memory(spec.resources.as_ref());
            status["resources"] = after.clone();
            let restarts = spec.resize_policy.iter().flatten().any(|policy| {
                policy.restart_policy == "RestartContainer"
                    && ["requests", "limits"].iter().any(|list| {
                        before[list].get(&policy.resource_name)
                            != after[list].get(&policy.resource_name)
                    })
            });
            if restarts {
                status["restartCount"] = json!(s.restart_count + 1);
                status["containerID"] = json!(format!("test://{}-{}", s.name, s.restart_count + 1));
                status["state"] = container_state(false, &now());
            }
        }),
    };
    let status = json!({"status": {
        "conditions": conditions,
        "containerStatuses": statuses,
    }});
    patch_status(client, &namespace, &name, status).await;
}

async fn run_pods(client: kube::Client, delay: Duration) {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut events = watcher(pods, watcher::Config::default())
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(pod) = event else { continue };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if is_running(&pod) && !changed_images(&pod).is_empty() {
            tokio::spawn(restart_changed(client.clone(), pod, delay));
            continue;
        }
        if is_running(&pod) && !resize_pending(&pod) && !changed_resources(&pod).is_empty() {
            tokio::spawn(resize_changed(client.clone(), pod, delay));
            continue;
        }
        if backing_off(&pod) {
            continue;
        }
        if is_running(&pod) && unready(&pod) {
            if is_ready(&pod) {
                tokio::spawn(turn_unready(client.clone(), pod));
            }
            continue;
        }
        if is_ready(&pod) {
            continue;
        }
        let broken = is_broken(&pod);
        if broken && is_running(&pod) {
            continue;
        }
        let client = client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let (Some(name), Some(namespace)) =
                (pod.metadata.name.clone(), pod.metadata.namespace.clone())
            else {
                return;
            };
            let now = now();
            let statuses: Vec<Value> = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .map(|c| {
                    json!({"name": c.name, "image": c.image, "imageID": "", "ready": !broken,
                           "restartCount": 0, "started": !broken, "state": container_state(broken, &now),
                           "resources": cpu_memory(c.resources.as_ref())})
                })
                .collect();
            let status = json!({"status": {
                "phase": "Running",
                "startTime": now,
                "conditions": conditions(!broken),
                "containerStatuses": statuses,
            }});
            patch_status(client, &namespace, &name, status).await;
        });
    }
}
