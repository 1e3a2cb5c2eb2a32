//! Pods with pod-level resources (`spec.resources`, Kubernetes 1.34+) through the real API
//! server, which refuses a pod whose containers request more than its pod-level requests.

use super::*;

/// A pod (template) whose app leaves `free` of its pod-level CPU request unrequested.
fn sized(app: &str, request: &str, pod_cpu: &str) -> Value {
    let mut template = template(app, Some(request));
    template["spec"]["resources"] = json!({
        "requests": {"cpu": pod_cpu, "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"}
    });
    template["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "495m", "memory": "240Mi"}});
    template
}

fn pod_resources(pod: &Pod) -> Value {
    serde_json::to_value(&pod.spec.as_ref().unwrap().resources).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_pod_level_resources_is_created_with_its_sidecar_paid_for() {
    let ctx = TestContext::new("pod-resources", &[]).await;
    // logger:v1 (config/) requests 10m and 32Mi and limits its memory to 64Mi: the app's
    // 495m and 240Mi leave 5m and 16Mi of the pod's requests free, too little for it.
    let mut pod = sized("asks", "logger:v1", "500m");
    pod["metadata"]["name"] = json!("asks");
    create(&ctx.api::<Pod>(), pod).await;
    let pod = ctx.api::<Pod>().get("asks").await.unwrap();
    assert_eq!(container_names(&pod), ["app", "log-shipper"]);
    if support::cluster::server_minor() < 34 {
        // Pod-level resources are off before 1.34: the API server drops them.
        assert_eq!(pod.spec.as_ref().unwrap().resources, None);
        return;
    }
    assert_eq!(
        pod_resources(&pod),
        json!({"requests": {"cpu": "510m", "memory": "288Mi"},
               "limits": {"cpu": "1010m", "memory": "576Mi"}})
    );
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(logger_v1_stamp().as_str())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_engine_rolls_out_pods_with_pod_level_resources_and_never_into_refused_ones() {
    if support::cluster::server_minor() < 34 {
        eprintln!("pod-level resources are off before Kubernetes 1.34: nothing to roll out");
        return;
    }
    let ctx = engine_context(
        "pod-resources-rollout",
        &["--rollout=auto", "--settle", "1s"],
    )
    .await;
    let sidecar = |image: &str, mode: &str| {
        format!(
            "name: tracer:v1\n{mode}containers: [{{name: tracer, image: '{image}', resources: {{requests: {{cpu: 100m}}}}}}]\n"
        )
    };
    let v1 = sidecar("tracer:1", "");
    put_config(&ctx, "tracing", "tracer.yaml", &v1).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_in_force(injector, stamp_of(&v1), true).await;
    // Both fit once the webhook adds the sidecar's 100m to their pod-level requests.
    create_deployment(&ctx, "roomy", 1, sized("roomy", "tracer:v1", "1")).await;
    create_deployment(&ctx, "tight", 1, sized("tight", "tracer:v1", "500m")).await;
    wait_pods_at(&ctx, "roomy", 1, &stamp_of(&v1), DEADLINE).await;
    wait_pods_at(&ctx, "tight", 1, &stamp_of(&v1), DEADLINE).await;
    let tight = pods_of(&ctx, "tight").await.remove(0);
    assert_eq!(pod_resources(&tight)["requests"]["cpu"], "600m");

    // v2 refuses pods it does not fit: roomy still fits and is rolled out; tight's new pods
    // would be refused, so the engine leaves it running v1 and says why.
    let v2 = sidecar("tracer:2", "podResources: refuse\n");
    put_config(&ctx, "tracing", "tracer.yaml", &v2).await;
    wait_pods_at(&ctx, "roomy", 1, &stamp_of(&v2), Duration::from_secs(90)).await;
    let roomy = pods_of(&ctx, "roomy").await.remove(0);
    assert_eq!(
        pod_resources(&roomy)["requests"]["cpu"],
        "1",
        "refuse keeps the pod-level figures as written"
    );
    let line = wait_logged(injector, "the webhook would refuse its new pods").await;
    assert!(
        line.contains("Deployment/e2e-pod-resources-rollout/tight")
            && line.contains("spec.resources.requests.cpu is 500m"),
        "{line}"
    );
    assert_eq!(replicaset_count(&ctx, "tight").await, 1, "tight untouched");
    wait_pods_at(&ctx, "tight", 1, &stamp_of(&v1), DEADLINE).await;
    // The webhook refuses such a pod with both figures.
    let mut bare = sized("bare", "tracer:v1", "500m");
    bare["metadata"]["name"] = json!("bare");
    let refused = ctx
        .api::<Pod>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(bare).unwrap(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "sidecar \"tracer:v1\" does not fit the pod's resources (its config says \
             podResources: refuse): spec.resources.requests.cpu is 500m, and the containers \
             would request 595m with the sidecar"
        ),
        "{refused}"
    );
}
