//! Native sidecars: a config's containers injected as init containers with
//! `restartPolicy: Always`, placed on purpose among the pod's init containers.

use serde_json::{Value, json};

use super::*;

const PROXY: &str = r#"
name: proxy:v1
nativeSidecars: true
initContainers:
  - {name: net-setup, image: "setup:1", command: ["true"]}
containers:
  - name: proxy
    image: envoy:1
    ports: [{containerPort: 15001}]
    startupProbe: {tcpSocket: {port: 15001}}
env:
  - {name: PROXY, value: "on"}
"#;

fn restart_policy<'a>(list: &'a Value, name: &str) -> Option<&'a str> {
    list.as_array()?
        .iter()
        .find(|c| c["name"] == name)?
        .get("restartPolicy")?
        .as_str()
}

fn with_migrate() -> Value {
    PodBuilder::new()
        .request("proxy:v1")
        .spec(
            "initContainers",
            json!([{"name": "migrate", "image": "app:1"}]),
        )
        .build()
}

#[test]
fn native_sidecars_go_after_the_configs_own_init_containers_and_before_the_pods() {
    let set = sidecars(&[PROXY]);
    let pod = inject(&with_migrate(), &set);
    let init = &pod["spec"]["initContainers"];
    assert_eq!(names(init), ["net-setup", "proxy", "migrate"]);
    assert_eq!(restart_policy(init, "proxy"), Some("Always"));
    assert_eq!(
        restart_policy(init, "net-setup"),
        None,
        "runs to completion"
    );
    assert_eq!(
        restart_policy(init, "migrate"),
        None,
        "the pod's own, untouched"
    );
    assert_eq!(
        names(&pod["spec"]["containers"]),
        ["app"],
        "nothing classic"
    );
    // The config's env reaches the native sidecar as it reaches every container.
    let proxy = &init[1];
    assert!(env_of(proxy).contains(&("PROXY", "on")), "{proxy}");
}

#[test]
fn a_config_can_place_its_native_sidecars_after_the_pods_init_containers() {
    let last = PROXY.replace(
        "nativeSidecars: true",
        "nativeSidecars: true\nnativeSidecarPlacement: last",
    );
    let set = sidecars(&[&last]);
    let pod = inject(&with_migrate(), &set);
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        ["migrate", "net-setup", "proxy"]
    );
}

#[test]
fn a_pod_without_init_containers_gets_the_list() {
    let set = sidecars(&[PROXY]);
    let pod = inject(
        &PodBuilder::new()
            .request("proxy:v1")
            .without_spec("initContainers")
            .build(),
        &set,
    );
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        ["net-setup", "proxy"]
    );
    // With a classic sidecar beside it: the classic one's init container goes after.
    let set = sidecars(&[PROXY, SECRETS]);
    let pod = inject(
        &PodBuilder::new().request("proxy:v1,secrets:v1").build(),
        &set,
    );
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        ["net-setup", "proxy", "secrets-init"]
    );
}

#[test]
fn the_native_and_classic_forms_are_different_revisions() {
    let classic = PROXY.replace("nativeSidecars: true\n", "");
    let [native, classic, last] = [
        PROXY.to_owned(),
        classic,
        PROXY.replace(
            "nativeSidecars: true",
            "nativeSidecars: true\nnativeSidecarPlacement: last",
        ),
    ]
    .map(|text| {
        let set = sidecars(&[&text]);
        set.iter().next().unwrap().revision.clone()
    });
    assert_ne!(native, classic, "a change of form is a new revision");
    assert_ne!(native, last, "so is a change of placement");
    // `nativeSidecars: false` is the classic form, the revision it always had.
    let explicit = sidecars(&[&PROXY.replace("nativeSidecars: true", "nativeSidecars: false")]);
    assert_eq!(explicit.iter().next().unwrap().revision, classic);
}

#[test]
fn a_pod_that_already_has_the_native_sidecar_is_not_injected_twice() {
    let set = sidecars(&[PROXY]);
    let once = inject(&with_migrate(), &set);
    assert_eq!(
        try_inject(&once, &set),
        Decision::Skip(SkipReason::AlreadyInjected)
    );
    // Without our status annotation (another tool's copy): its init container's name clashes.
    let mut copied = once.clone();
    copied["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("injector/status");
    assert!(
        matches!(
            try_inject(&copied, &set),
            Decision::Deny(Denial::ContainerNameClash { ref container, .. }) if container == "net-setup"
        ),
        "{:?}",
        try_inject(&copied, &set)
    );
}

#[test]
fn a_native_sidecar_clashes_with_a_pod_container_of_its_name_in_either_list() {
    let set = sidecars(&[PROXY]);
    for list in ["containers", "initContainers"] {
        let pod = PodBuilder::new()
            .request("proxy:v1")
            .spec(list, json!([{"name": "proxy", "image": "mine:1"}]))
            .build();
        assert!(
            matches!(
                try_inject(&pod, &set),
                Decision::Deny(Denial::ContainerNameClash { ref container, .. }) if container == "proxy"
            ),
            "{list}: {:?}",
            try_inject(&pod, &set)
        );
    }
}

#[test]
fn with_native_sidecars_for_jobs_only_a_jobs_pods_get_the_native_form() {
    let jobs = PROXY.replace("nativeSidecars: true", "nativeSidecars: jobs");
    let set = sidecars(&[&jobs]);
    // A Deployment's pod: classic.
    let plain = inject(&with_migrate(), &set);
    assert_eq!(names(&plain["spec"]["containers"]), ["app", "proxy"]);
    assert_eq!(
        names(&plain["spec"]["initContainers"]),
        ["migrate", "net-setup"]
    );
    assert_eq!(restart_policy(&plain["spec"]["containers"], "proxy"), None);
    // A Job's pod: native, before the pod's own init containers.
    let mut job_pod = with_migrate();
    job_pod["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly", "uid": "u", "controller": true}
    ]);
    let native = inject(&job_pod, &set);
    assert_eq!(names(&native["spec"]["containers"]), ["app"]);
    let init = &native["spec"]["initContainers"];
    assert_eq!(names(init), ["net-setup", "proxy", "migrate"]);
    assert_eq!(restart_policy(init, "proxy"), Some("Always"));
    // One config, one revision, whichever form a pod gets; not the classic config's.
    let classic = sidecars(&[&PROXY.replace("nativeSidecars: true\n", "")]);
    assert_ne!(
        set.iter().next().unwrap().revision,
        classic.iter().next().unwrap().revision
    );
}

#[test]
fn a_pod_annotated_native_sidecars_false_keeps_its_sidecars_classic_at_the_same_revision() {
    let set = sidecars(&[PROXY]);
    let kept = with_migrate();
    let kept = PodBuilder(kept)
        .annotation("injector/native-sidecars", "false")
        .build();
    let pod = inject(&kept, &set);
    assert_eq!(names(&pod["spec"]["containers"]), ["app", "proxy"]);
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        ["migrate", "net-setup"]
    );
    assert_eq!(restart_policy(&pod["spec"]["containers"], "proxy"), None);
    // Stamped with the config's revision: current, never restarted for its form.
    let native = inject(&with_migrate(), &set);
    assert_eq!(
        pod["metadata"]["annotations"]["injector/revision"],
        native["metadata"]["annotations"]["injector/revision"]
    );
    // Any other value changes nothing.
    let other = PodBuilder(with_migrate())
        .annotation("injector/native-sidecars", "maybe")
        .build();
    assert_eq!(
        names(&inject(&other, &set)["spec"]["initContainers"]),
        ["net-setup", "proxy", "migrate"]
    );
}

#[test]
fn a_pod_says_which_of_its_sidecars_were_injected_natively() {
    let jobs = PROXY.replace("nativeSidecars: true", "nativeSidecars: jobs");
    let set = sidecars(&[LOGGER_V1, &jobs]);
    let request = |pod: Value| PodBuilder(pod).request("logger:v1,proxy:v1").build();
    let native_key = "injector/injected-native";
    // A Deployment's pod: both classic, nothing said.
    let plain = inject(&request(with_migrate()), &set);
    assert_eq!(plain["metadata"]["annotations"].get(native_key), None);
    // A Job's pod: the proxy is native, the logger stays classic.
    let mut job_pod = request(with_migrate());
    job_pod["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly", "uid": "u", "controller": true}
    ]);
    let native = inject(&job_pod, &set);
    assert_eq!(native["metadata"]["annotations"][native_key], "proxy:v1");
    // Copied from another pod's manifest, the annotation is taken off a classic pod.
    let copied = PodBuilder(request(with_migrate()))
        .annotation(native_key, "proxy:v1")
        .build();
    let classic = inject(&copied, &set);
    assert_eq!(classic["metadata"]["annotations"].get(native_key), None);
}

fn on_nodes(set: crate::config::SidecarSet, nodes: &[(&str, &str)]) -> crate::config::SidecarSet {
    set.with_nodes(std::sync::Arc::new(crate::nodes::NodeKubelets::listed(
        nodes.iter().copied(),
    )))
}

fn of_a_job(mut pod: Value) -> Value {
    pod["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly", "uid": "u", "controller": true}
    ]);
    pod
}

fn native_proxy(pod: &Value) -> bool {
    restart_policy(&pod["spec"]["initContainers"], "proxy") == Some("Always")
}

#[test]
fn with_native_sidecars_auto_the_nodes_kubelets_choose_the_form() {
    let auto = PROXY.replace("nativeSidecars: true", "nativeSidecars: auto");
    let configs = sidecars(&[&auto]);
    // No node known (no cluster, or nodes not listed yet): classic, the form every kubelet runs.
    assert!(!native_proxy(&inject(&with_migrate(), &configs)));
    assert!(!native_proxy(&inject(&of_a_job(with_migrate()), &configs)));
    // Every kubelet 1.29+: native.
    let new = on_nodes(configs.clone(), &[("a", "v1.33.2"), ("b", "v1.36.3")]);
    let pod = inject(&with_migrate(), &new);
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        ["net-setup", "proxy", "migrate"]
    );
    assert!(native_proxy(&pod));
    assert_eq!(
        pod["metadata"]["annotations"]["injector/injected-native"],
        "proxy:v1"
    );
    // One old kubelet: classic, but a Job's pods get native sidecars (a classic one would
    // never let them complete anywhere).
    let mixed = on_nodes(configs.clone(), &[("a", "v1.33.2"), ("old", "v1.28.9")]);
    assert!(!native_proxy(&inject(&with_migrate(), &mixed)));
    assert!(native_proxy(&inject(&of_a_job(with_migrate()), &mixed)));
    // A pod already bound to a node goes by that node's kubelet alone.
    let on = |node: &str| {
        let mut pod = with_migrate();
        pod["spec"]["nodeName"] = json!(node);
        native_proxy(&inject(&pod, &mixed))
    };
    assert!(on("a"));
    assert!(!on("old"));
    // Every form of an auto config is one revision, not the classic or the native config's.
    let revision = |set: &crate::config::SidecarSet| set.iter().next().unwrap().revision.clone();
    assert_eq!(
        inject(&with_migrate(), &new)["metadata"]["annotations"]["injector/revision"],
        inject(&with_migrate(), &mixed)["metadata"]["annotations"]["injector/revision"]
    );
    assert_ne!(revision(&configs), revision(&sidecars(&[PROXY])));
    assert_ne!(
        revision(&configs),
        revision(&sidecars(&[&PROXY.replace("nativeSidecars: true\n", "")]))
    );
    // The annotation that keeps a workload classic holds under auto too.
    let kept = PodBuilder(with_migrate())
        .annotation("injector/native-sidecars", "false")
        .build();
    assert!(!native_proxy(&inject(&kept, &new)));
}
