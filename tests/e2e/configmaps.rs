//! The ConfigMap config source: served, edited, guarded against bad edits, removed.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn configmap_configs_are_served_edited_guarded_and_removed() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ctx = TestContext::with_deploy_rbac(
        "configmaps",
        &[
            "--configmap-namespace",
            "e2e-configmaps",
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
        ],
    )
    .await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        DEADLINE,
        "/ready after the first ConfigMap list",
        || async { (injector.lifecycle_get("/ready").0 == 200).then_some(()) },
    )
    .await;
    let in_force = |stamp: String| wait_in_force(injector, stamp, true);
    let configmaps: Api<ConfigMap> = ctx.api();
    let v1 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
    configmaps
        .create(
            &PostParams::default(),
            &configmap("tracing", true, "tracer.yaml", v1),
        )
        .await
        .unwrap();
    in_force(stamp_of(v1)).await;
    let pod = create_pod(&ctx, "first", "tracer:v1")
        .await
        .expect("injected from the ConfigMap");
    assert_eq!(container_names(&pod), ["app", "tracer"]);
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(stamp_of(v1).as_str())
    );

    // An edit gives new pods the new content and a new revision.
    let v2 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    configmaps
        .replace("tracing", &PostParams::default(), &{
            let mut cm = configmaps.get("tracing").await.unwrap();
            cm.data = Some([("tracer.yaml".to_owned(), v2.to_owned())].into());
            cm
        })
        .await
        .unwrap();
    in_force(stamp_of(v2)).await;
    let pod = create_pod(&ctx, "second", "tracer:v1").await.unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[1].image.as_deref(),
        Some("tracer:2")
    );
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(stamp_of(v2).as_str())
    );
    assert_ne!(stamp_of(v1), stamp_of(v2));

    // An invalid edit keeps v2 serving and leaves a Warning Event on the ConfigMap.
    configmaps
        .replace("tracing", &PostParams::default(), &{
            let mut cm = configmaps.get("tracing").await.unwrap();
            cm.data = Some(
                [(
                    "tracer.yaml".to_owned(),
                    "name: tracer:v1\nimagee: typo\n".to_owned(),
                )]
                .into(),
            );
            cm
        })
        .await
        .unwrap();
    let warning = eventually(DEADLINE, "a Warning Event on the ConfigMap", || async {
        let events: Api<Event> = ctx.api();
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.involved_object.kind.as_deref() == Some("ConfigMap")
                    && e.involved_object.name.as_deref() == Some("tracing")
            })
    })
    .await;
    assert_eq!(warning.reason.as_deref(), Some("InvalidSidecarConfig"));
    let message = warning.message.unwrap_or_default();
    assert!(
        message.contains("item tracer.yaml:2: unknown top-level key \"imagee\""),
        "{message}"
    );
    let pod = create_pod(&ctx, "third", "tracer:v1").await.unwrap();
    assert_eq!(
        annotation(&pod, "injector/revision"),
        Some(stamp_of(v2).as_str()),
        "the last good version serves"
    );
    assert!(
        injector
            .metric("sidecar_injector_config_reloads_total{source=\"configmap\",result=\"error\"}")
            >= 1.0
    );

    // Unlabelled, or in another namespace: ignored.
    let ghost = "name: ghost:v1\ncontainers: [{name: ghost, image: 'ghost:1'}]\n";
    configmaps
        .create(
            &PostParams::default(),
            &configmap("unlabelled", false, "ghost.yaml", ghost),
        )
        .await
        .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "e2e-configmaps-other"}})).unwrap(),
        )
        .await
        .unwrap();
    let elsewhere: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "e2e-configmaps-other");
    elsewhere
        .create(
            &PostParams::default(),
            &configmap("elsewhere", true, "ghost.yaml", ghost),
        )
        .await
        .unwrap();
    // A change the injector does see, so that the ghost ConfigMaps had their chance too.
    let marker = "name: marker:v1\n";
    configmaps
        .create(
            &PostParams::default(),
            &configmap("marker", true, "marker.yaml", marker),
        )
        .await
        .unwrap();
    in_force(stamp_of(marker)).await;
    let denied = create_pod(&ctx, "ghostly", "ghost:v1")
        .await
        .expect_err("ghost:v1 is not served");
    assert!(
        denied
            .to_string()
            .contains(r#"sidecar "ghost:v1" not found"#),
        "{denied}"
    );

    // Deleting the ConfigMap removes its configs.
    configmaps
        .delete("tracing", &Default::default())
        .await
        .unwrap();
    wait_in_force(injector, "tracer:v1".into(), false).await;
    let denied = create_pod(&ctx, "fourth", "tracer:v1")
        .await
        .expect_err("tracer:v1 is gone");
    assert!(
        denied
            .to_string()
            .contains(r#"sidecar "tracer:v1" not found"#),
        "{denied}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_allow_a_deleted_configmap_sidecar_lets_pods_through_uninjected() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ctx = TestContext::with_deploy_rbac(
        "allow",
        &[
            "--on-missing-sidecar",
            "allow",
            "--configmap-namespace",
            "e2e-allow",
            "--configmap-labels",
            "sidecar-injector-e2e/config=true",
        ],
    )
    .await;
    let injector = ctx.injector.as_ref().unwrap();
    let text = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
    let configmaps: Api<ConfigMap> = ctx.api();
    configmaps
        .create(
            &PostParams::default(),
            &configmap("tracing", true, "tracer.yaml", text),
        )
        .await
        .unwrap();
    wait_in_force(injector, stamp_of(text), true).await;
    let pod = create_pod(&ctx, "before", "tracer:v1").await.unwrap();
    assert_eq!(container_names(&pod), ["app", "tracer"]);
    configmaps
        .delete("tracing", &Default::default())
        .await
        .unwrap();
    wait_in_force(injector, "tracer:v1".into(), false).await;
    let pod = create_pod(&ctx, "after", "tracer:v1")
        .await
        .expect("allowed with --on-missing-sidecar=allow");
    assert_eq!(container_names(&pod), ["app"]);
    assert_eq!(annotation(&pod, "injector/status"), None);
}
