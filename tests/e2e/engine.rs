//! The rollout engine in `serve`: restarts, pauses, settle and cooldown, the Lease.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_engine_restarts_exactly_the_stale_workloads_once_after_a_configmap_edit() {
    let ns = "e2e-rollout-auto";
    let ctx = engine_context(
        "rollout-auto",
        &["--rollout=auto", "--settle", "1s", "--max-parallel", "10"],
    )
    .await;
    tracer_workloads(&ctx).await;
    let v1 = stamp_of(TRACER_V1);
    for (app, count) in [("web", 2), ("db", 1), ("agent", NODES.len())] {
        wait_pods_at(&ctx, app, count, &v1, DEADLINE).await;
    }
    eventually(DEADLINE, "plain ready", || async {
        (pods_of(&ctx, "plain").await.len() == 1).then_some(())
    })
    .await;
    let plain_before = ctx.api::<Deployment>().get("plain").await.unwrap();
    let plain_replicasets = replicaset_count(&ctx, "plain").await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    for (app, count) in [("web", 2), ("db", 1), ("agent", NODES.len())] {
        wait_pods_at(&ctx, app, count, &v2, Duration::from_secs(120)).await;
    }

    // Each stale workload was rolled once, stamped, explained.
    let injector = ctx.injector.as_ref().unwrap();
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "web rolled exactly once"
    );
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    let web_template = &web.spec.as_ref().unwrap().template.metadata;
    assert_eq!(
        template_annotation(web_template, "injector/rollout-revision"),
        Some(v2.clone())
    );
    let reason = template_annotation(web_template, "injector/rollout-reason").unwrap();
    let (old_rev, new_rev) = (v1.split('=').nth(1).unwrap(), v2.split('=').nth(1).unwrap());
    assert!(
        reason.contains(&format!("tracer:v1 {old_rev} -> {new_rev}")),
        "{reason}"
    );
    assert!(
        reason.contains("containers[tracer].image \"tracer:1\" -> \"tracer:2\""),
        "{reason}"
    );
    let annotations = web.metadata.annotations.clone().unwrap();
    assert!(annotations.contains_key("injector/rolled-at"));
    for name in ["web", "db", "agent"] {
        let events = eventually(
            DEADLINE,
            &format!("{name}'s SidecarRestart Event"),
            || async {
                let events = events_for(&ctx, name, "SidecarRestart").await;
                (!events.is_empty()).then_some(events)
            },
        )
        .await;
        assert_eq!(events.len(), 1, "{name} restarted once: {events:?}");
        assert!(
            events[0]
                .message
                .as_deref()
                .unwrap_or_default()
                .contains(new_rev)
        );
    }
    for kind in ["Deployment", "StatefulSet", "DaemonSet"] {
        assert_eq!(
            injector.metric(&format!(
                "sidecar_injector_rollouts_total{{kind=\"{kind}\",result=\"restarted\"}}"
            )),
            1.0,
            "{kind}"
        );
    }
    // kubectl rollout history shows why.
    let history = std::process::Command::new("kubectl")
        .args(["--kubeconfig"])
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(["-n", ns, "rollout", "history", "deployment/web"])
        .output()
        .expect("kubectl runs");
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(
        history.contains(&format!(
            "sidecar-injector: sidecar tracer:v1 {old_rev} -> {new_rev}"
        )),
        "{history}"
    );

    // The workload whose pods were current is untouched.
    let plain_after = ctx.api::<Deployment>().get("plain").await.unwrap();
    assert_eq!(
        plain_after.spec.unwrap().template,
        plain_before.spec.unwrap().template
    );
    assert_eq!(replicaset_count(&ctx, "plain").await, plain_replicasets);
    // Drift reaches zero, in the gauge and in the published status.
    eventually(DEADLINE, "no stale tracer pods in the gauge", || async {
        (injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"stale\"}") == 0.0
            && injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"current\"}")
                == 5.0)
            .then_some(())
    })
    .await;
    wait_campaign(injector, "tracer:v1", "complete", DEADLINE).await;
    // One line says so.
    let complete = wait_logged(
        injector,
        &format!("campaign of tracer:v1 (revision {new_rev}) complete: "),
    )
    .await;
    assert!(
        complete.ends_with("3 workload(s) restarted, 0 failed"),
        "{complete}"
    );
    assert_eq!(logged(injector, " complete: ").len(), 1);
    // What the injector injects is published under its identity.
    wait_published(&ctx, &format!("tracer:v1={new_rev}")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_revision_pauses_the_campaign_across_restarts_and_a_fix_converges() {
    let mut ctx = engine_context("rollout-broken", QUICK_FAILURE).await;
    for (name, replicas) in [("canary", 1), ("web", 2), ("api", 2)] {
        create_deployment(&ctx, name, replicas, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    for (app, count) in [("canary", 1), ("web", 2), ("api", 2)] {
        wait_pods_at(&ctx, app, count, &v1, DEADLINE).await;
    }

    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_campaign_paused(injector, "tracer:v1").await;
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"failed\"}"),
        1.0
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        1.0
    );
    // The gauge is set before the Events are posted: wait for them rather than race them.
    let paused = eventually(Duration::from_secs(10), "the pause Event", || async {
        let events = events_for(&ctx, "canary", "SidecarRolloutPaused").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(paused[0].type_.as_deref(), Some("Warning"));
    let failed = events_for(&ctx, "canary", "SidecarRolloutFailed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    let deployments = ctx.api::<Deployment>();
    let unpatched = |name: &'static str| {
        let api = deployments.clone();
        async move {
            let d = api.get(name).await.unwrap();
            template_annotation(
                &d.spec.unwrap().template.metadata,
                "injector/rollout-revision",
            )
            .is_none()
        }
    };
    assert!(
        unpatched("web").await && unpatched("api").await,
        "only the canary was patched"
    );

    // `drift` flags the paused campaign, with why.
    let report = drift_report(&[
        "-n",
        "e2e-rollout-broken",
        "--injector-namespace",
        "e2e-rollout-broken",
    ]);
    let tracer = sidecar_row(&report, "tracer:v1");
    assert_eq!(tracer["campaign"], "paused", "{tracer}");
    assert!(
        tracer["note"]
            .as_str()
            .unwrap()
            .contains("paused after 1 failed workload(s)"),
        "{tracer}"
    );

    // The dry-run plan says why the canary is left alone (it is in no other list).
    let plan = rollout_command("e2e-rollout-broken", &[]);
    let stdout = succeeded(&plan);
    let canary = stdout
        .lines()
        .find(|l| l.starts_with("Deployment/e2e-rollout-broken/canary "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        canary.contains(" failed ")
            && canary.contains("its restart to tracer:v1 ")
            && canary.contains("it is not restarted again under this revision"),
        "{stdout}"
    );
    // So does `explain` on the canary's old pod, which the failed rollout left running.
    let old_pod = pods_of(&ctx, "canary")
        .await
        .into_iter()
        .find(|p| annotation(p, "injector/revision") == Some(v1.as_str()))
        .and_then(|p| p.metadata.name)
        .expect("the canary's old pod, kept by its rolling update");
    let explained = explain_pod(&ctx, &old_pod);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.status.success()
            && text.contains("its restart to tracer:v1 ")
            && !text.contains("excluded by its namespace"),
        "{text}{}",
        String::from_utf8_lossy(&explained.stderr)
    );

    // `status` shows the paused campaign, the Lease holder and the publication.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("status")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args(["--injector-namespace", "e2e-rollout-broken", "-o", "json"])
        .output()
        .unwrap();
    let view: Value = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&status.stderr)));
    assert_eq!(
        view["campaigns"]["campaigns"]["tracer:v1"]["state"], "paused",
        "{view:#}"
    );
    assert_eq!(view["lease"]["mode"], "auto", "{view:#}");
    assert_eq!(view["injectors"].as_object().unwrap().len(), 1, "{view:#}");
    assert!(view.get("disagreement").is_none(), "{view:#}");

    // The pause lives in the cluster: a restarted injector keeps it.
    ctx.restart_injector().await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(
        Duration::from_secs(30),
        "the restarted engine reads the pause",
        || async {
            (injector.metric(
                "sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"paused\"}",
            ) == 1.0)
                .then_some(())
        },
    )
    .await;
    // That gauge is set only by the Lease holder after a plan: had the pause been lost, this
    // plan would have patched the others.
    assert!(
        unpatched("web").await && unpatched("api").await,
        "still paused after the restart"
    );

    // One command resumes the pause, without --force: the resume is written into the status
    // ConfigMap and the Lease holder acts on it; the command restarts nothing beside it.
    let ns = "e2e-rollout-broken";
    let output = rollout_command(ns, &["--force", "--confirm"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--force is gone"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = rollout_command(ns, &["--confirm"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("refusing to act: ") && stderr.contains("rollout --resume"),
        "{stderr}"
    );
    let output = rollout_command(ns, &["--resume", "--confirm"]);
    let stdout = succeeded(&output);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        stderr.contains("resumed the campaign of tracer:v1 (revision ")
            && stderr.contains("holds the rollout Lease (serve --rollout=auto)"),
        "{stderr}"
    );
    assert!(!stdout.contains("restarted"), "{stdout}");
    let book = campaign_book(&ctx).await.expect("a campaign book");
    let resumed_by = book["campaigns"]["tracer:v1"]["resumed"]["by"]
        .as_str()
        .unwrap_or_default();
    assert!(resumed_by.starts_with("rollout-cli/"), "{book:#}");
    // The holder goes on with the next workload (the failed canary is not retried), which
    // fails on the same broken image and pauses the campaign again.
    eventually(
        Duration::from_secs(60),
        "the holder restarts the next workload after the resume",
        || async { (!unpatched("api").await || !unpatched("web").await).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the campaign pauses again",
        || async {
            (injector.metric(
                "sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"paused\"}",
            ) == 1.0)
                .then_some(())
        },
    )
    .await;
    assert!(
        unpatched("api").await != unpatched("web").await,
        "exactly one more workload was restarted before the new pause"
    );

    // A fixed revision is a new campaign: everything converges.
    let fixed = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", fixed).await;
    let v3 = stamp_of(fixed);
    for (app, count) in [("canary", 1), ("web", 2), ("api", 2)] {
        wait_pods_at(&ctx, app, count, &v3, Duration::from_secs(120)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn edits_inside_the_settle_window_make_one_campaign_and_the_cooldown_holds_the_next() {
    let ns = "e2e-rollout-settle";
    let ctx = engine_context("rollout-settle", &["--rollout=auto", "--settle", "3s"]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(TRACER_V1), DEADLINE).await;

    // Two edits in quick succession: one restart, to the last.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v3 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:3'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v3).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(v3), Duration::from_secs(90)).await;
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "one restart for both edits"
    );
    let injector = ctx.injector.as_ref().unwrap();
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        1.0
    );

    // A third edit inside the cooldown (10m by default): planned, held, not restarted.
    let v4 = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:4'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", v4).await;
    let v4_rev = stamp_of(v4).split('=').nth(1).unwrap().to_owned();
    // The log says why the campaign waits, once.
    let waits = wait_logged(
        injector,
        "1 workload(s) wait: restarted recently; cooldown until ",
    )
    .await;
    assert!(
        waits.starts_with(&format!("campaign of tracer:v1 (revision {v4_rev}): "))
            && waits.ends_with("(Deployment/e2e-rollout-settle/web)"),
        "{waits}"
    );
    eventually(DEADLINE, "the v4 campaign holds web back", || async {
        let book = campaign_book(&ctx).await?;
        let campaign = &book["campaigns"]["tracer:v1"];
        (campaign["revision"] == v4_rev.as_str()
            && campaign["state"] == "running"
            && campaign["counts"]["pending"] == 1)
            .then_some(())
    })
    .await;
    let dry_run = rollout_command(ns, &["-o", "json"]);
    assert!(
        String::from_utf8_lossy(&dry_run.stderr).contains("as the running injector(s) ")
            && String::from_utf8_lossy(&dry_run.stderr).contains("published them ("),
        "{}",
        String::from_utf8_lossy(&dry_run.stderr)
    );
    let plan: Value = serde_json::from_slice(&dry_run.stdout).unwrap();
    assert_eq!(plan["waiting"][0]["workload"]["name"], "web", "{plan:#}");
    assert_eq!(plan["waiting"][0]["reason"], "cooldown", "{plan:#}");
    // Run where tracer's ConfigMap is not read at all: the plan is the same, because the
    // revisions come from what the running injector published.
    let elsewhere = std::process::Command::new(env!("CARGO_BIN_EXE_sidecar-injector"))
        .arg("rollout")
        .arg("--kubeconfig")
        .arg(&support::cluster::control_plane().kubeconfig)
        .args([
            "--config-directory",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
            "--include-namespace",
            ns,
            "--injector-namespace",
            ns,
            "-o",
            "json",
        ])
        .output()
        .expect("rollout runs");
    let plan: Value = serde_json::from_slice(&elsewhere.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&elsewhere.stderr)));
    assert_eq!(plan["waiting"][0]["workload"]["name"], "web", "{plan:#}");
    assert_eq!(plan["waiting"][0]["sidecars"][0], "tracer:v1", "{plan:#}");
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "not restarted within the cooldown"
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        1.0
    );
    assert_eq!(
        logged(injector, "cooldown until ").len(),
        1,
        "the wait is said once, not on every plan"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_in_dry_run_says_the_whole_plan_once_per_change_and_keeps_no_campaign() {
    let ctx = engine_context(
        "rollout-dry",
        &[
            "--rollout=dry-run",
            "--settle",
            "1s",
            "--publish-interval",
            "1s",
        ],
    )
    .await;
    for (name, replicas) in [("canary", 1), ("web", 2), ("api", 2)] {
        create_deployment(&ctx, name, replicas, template(name, Some("tracer:v1"))).await;
    }
    for (app, count) in [("canary", 1), ("web", 2), ("api", 2)] {
        wait_pods_at(&ctx, app, count, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_logged(
        injector,
        "would restart (canary) Deployment/e2e-rollout-dry/canary: ",
    )
    .await;
    // The whole plan: the canary now, the others after it, each with its reason.
    for app in ["web", "api"] {
        wait_logged(
            injector,
            &format!(
                "dry run: would wait Deployment/e2e-rollout-dry/{app}: waiting for the canary of tracer:v1"
            ),
        )
        .await;
    }
    let said = logged(injector, "dry run: the plan changed").len();
    // Heartbeats rewrite the status ConfigMap every second; the plan is not said again, and
    // no campaign is written or reported as running (a dry run never moves it on).
    let configmaps = ctx.api::<ConfigMap>();
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    eventually(DEADLINE, "three heartbeats", || async {
        let status = configmaps.get("sidecar-injector-status").await.ok()?;
        let mut seen = seen.lock().unwrap();
        seen.insert(status.metadata.resource_version.clone()?);
        assert!(
            !status.data.unwrap_or_default().contains_key("campaigns"),
            "a dry run keeps its campaigns to itself"
        );
        (seen.len() > 3).then_some(())
    })
    .await;
    assert_eq!(logged(injector, "dry run: the plan changed").len(), said);
    assert_eq!(
        injector
            .metric("sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"running\"}"),
        0.0
    );
    assert_eq!(
        replicaset_count(&ctx, "canary").await,
        1,
        "nothing restarted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_lease_holder_acts_and_a_survivor_finishes_the_campaign_exactly_once() {
    let ctx = engine_context("rollout-ha", &[]).await;
    let apps = ["a", "b", "c", "d"];
    for app in apps {
        create_deployment(&ctx, app, 1, template(app, Some("tracer:v1"))).await;
    }
    for app in apps {
        wait_pods_at(&ctx, app, 1, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    // Two engine replicas (the webhook's own process has --rollout=off, so that killing an
    // engine never takes the webhook down).
    let engine = [
        "--rollout=auto",
        "--lease-duration",
        "3s",
        "--settle",
        "1s",
        "--max-parallel",
        "1",
        "--canary",
        "0",
    ];
    let mut replicas = vec![
        ctx.start_replica_with(&engine),
        ctx.start_replica_with(&engine),
    ];
    let leader = eventually(DEADLINE, "one replica holds the Lease", || async {
        replicas.iter().position(|r| {
            r.logs()
                .iter()
                .any(|l| l.contains("holding the rollout Lease: this replica acts"))
        })
    })
    .await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    let deployments = ctx.api::<Deployment>();
    // Mid-campaign: one workload stamped, the rest still to go (--max-parallel 1).
    eventually(Duration::from_secs(60), "the first restart", || async {
        let list = deployments.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|d| {
                template_annotation(
                    &d.spec.as_ref().unwrap().template.metadata,
                    "injector/rollout-revision",
                )
                .as_deref()
                    == Some(v2.as_str())
            })
            .then_some(())
    })
    .await;
    let follower = 1 - leader;
    assert_eq!(
        replicas[follower]
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        0.0,
        "the replica without the Lease patched nothing"
    );
    // The campaign book's size is the leader's to export (the book alert takes the max).
    let book = "sidecar_injector_rollout_book_bytes";
    eventually(DEADLINE, "the leader exports the book's size", || async {
        (replicas[leader].metric(book) > 0.0).then_some(())
    })
    .await;
    assert_eq!(replicas[follower].metric(book), 0.0);
    drop(replicas.remove(leader));
    let survivor = &replicas[0];
    for app in apps {
        wait_pods_at(&ctx, app, 1, &v2, Duration::from_secs(120)).await;
    }
    assert!(
        survivor
            .logs()
            .iter()
            .any(|l| l.contains("holding the rollout Lease: this replica acts")),
        "the survivor took over"
    );
    for app in apps {
        assert_eq!(
            replicaset_count(&ctx, app).await,
            2,
            "{app} restarted exactly once"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_lease_is_taken_stops_at_once_and_acts_again_only_once_it_expires() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let ctx = engine_context("rollout-lease-taken", &[]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(TRACER_V1), DEADLINE).await;
    let replica =
        ctx.start_replica_with(&["--rollout=auto", "--lease-duration", "3s", "--settle", "1s"]);
    let (leader, book) = (
        "sidecar_injector_rollout_leader",
        "sidecar_injector_rollout_book_bytes",
    );
    eventually(
        DEADLINE,
        "the replica leads and exports its book",
        || async { (replica.metric(leader) == 1.0 && replica.metric(book) > 0.0).then_some(()) },
    )
    .await;

    // Another holder writes the Lease, as a replica that took it over would: the replica's
    // grant is not renewed, and when it runs out (2 s of the 3 s lease at most) the replica
    // stops reporting itself leader, and its book, without waiting for anything else to change.
    let taken_for = 10;
    let leases = ctx.api::<Lease>();
    // The replica renews every second: a write that loses the race to a renewal (409) is
    // made again on the Lease as it now is.
    let taken_at = eventually(DEADLINE, "the Lease written to another holder", || async {
        let mut lease = leases.get("sidecar-injector-rollout").await.unwrap();
        let taken_at = jiff::Timestamp::now();
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("another-injector".to_owned());
        spec.renew_time = Some(MicroTime(taken_at));
        spec.lease_duration_seconds = Some(taken_for);
        match leases
            .replace("sidecar-injector-rollout", &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Some(taken_at),
            Err(kube::Error::Api(status)) if status.code == 409 => None,
            Err(err) => panic!("cannot write the Lease: {err}"),
        }
    })
    .await;
    eventually(
        Duration::from_secs(8),
        "the replica stops reporting itself leader",
        || async { (replica.metric(leader) == 0.0 && replica.metric(book) == 0.0).then_some(()) },
    )
    .await;
    assert!(
        !logged(
            &replica,
            "not holding the rollout Lease: this replica only reports"
        )
        .is_empty(),
        "{}",
        replica.logs().join("\n")
    );

    // While the Lease is the other holder's, a new revision restarts nothing; once it expires,
    // the replica takes the Lease back and restarts web, once.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_pods_at(&ctx, "web", 1, &v2, Duration::from_secs(60)).await;
    let expired = taken_at + jiff::SignedDuration::from_secs(i64::from(taken_for));
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    let rolled_at: jiff::Timestamp =
        web.metadata.annotations.as_ref().unwrap()["injector/rolled-at"]
            .parse()
            .unwrap();
    // rolled-at has whole seconds.
    assert!(
        rolled_at >= expired - jiff::SignedDuration::from_secs(1),
        "restarted at {rolled_at}, while the Lease was another's (until {expired})"
    );
    assert!(
        !logged(&replica, "took over the expired rollout Lease").is_empty(),
        "{}",
        replica.logs().join("\n")
    );
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "web restarted exactly once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_never_becomes_ready_leaves_the_lease_to_one_that_is() {
    use k8s_openapi::api::coordination::v1::Lease;
    let ctx = engine_context("rollout-lease-ready", &[]).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(TRACER_V1), DEADLINE).await;
    let engine = ["--rollout=auto", "--lease-duration", "3s", "--settle", "1s"];
    // Its sidecar ConfigMaps are in a namespace its RBAC does not let it read: its first
    // list never succeeds, so it never becomes ready (as a replica of a broken upgrade).
    let unready = ctx.start_replica_with_values(&[("--configmap-namespace", "default")], &engine);
    wait_logged(
        &unready,
        "not competing for the rollout Lease until this replica is ready",
    )
    .await;
    assert_ne!(
        unready.lifecycle_get("/ready").0,
        200,
        "the replica is not ready"
    );
    let leases = ctx.api::<Lease>();
    assert!(
        leases
            .get_opt("sidecar-injector-rollout")
            .await
            .unwrap()
            .is_none(),
        "a replica that is not ready created the Lease:\n{}",
        unready.logs().join("\n")
    );

    // A ready replica takes the Lease and rolls the new revision out; the one that is not
    // ready never held it, so it never stood in the way.
    let ready = ctx.start_replica_with(&engine);
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    wait_pods_at(
        &ctx,
        "web",
        1,
        &stamp_of(TRACER_V2),
        Duration::from_secs(60),
    )
    .await;
    let lease = leases.get("sidecar-injector-rollout").await.unwrap();
    let spec = lease.spec.unwrap();
    assert!(
        spec.holder_identity
            .as_deref()
            .is_some_and(|h| h.ends_with(&format!("-{}", ready.pid()))),
        "held by {:?}, not the ready replica (pid {})",
        spec.holder_identity,
        ready.pid()
    );
    assert_eq!(
        spec.lease_transitions,
        Some(1),
        "the Lease never changed hands"
    );
    assert!(
        logged(&unready, "holding the rollout Lease: this replica acts").is_empty(),
        "{}",
        unready.logs().join("\n")
    );
    assert_eq!(unready.metric("sidecar_injector_rollout_leader"), 0.0);
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        2,
        "web restarted exactly once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_stopped_gracefully_releases_the_lease_and_the_next_replica_acts_at_once() {
    use k8s_openapi::api::coordination::v1::Lease;
    let ctx = engine_context("rollout-release", &[]).await;
    // A long lease: without a release, the next replica would wait 60 s for it to expire.
    let engine = ["--rollout=auto", "--lease-duration", "60s"];
    let mut first = ctx.start_replica_with(&engine);
    let holding = |replica: &support::injector::Injector| {
        replica
            .logs()
            .iter()
            .any(|l| l.contains("holding the rollout Lease: this replica acts"))
    };
    eventually(DEADLINE, "the first replica holds the Lease", || async {
        holding(&first).then_some(())
    })
    .await;
    let leases = ctx.api::<Lease>();
    let holder = |lease: &Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let held = leases.get("sidecar-injector-rollout").await.unwrap();
    assert!(!holder(&held).is_empty());

    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(20)).success());
    assert!(
        first
            .logs()
            .iter()
            .any(|l| l.contains("released the rollout Lease")),
        "{}",
        first.logs().join("\n")
    );
    let released = leases.get("sidecar-injector-rollout").await.unwrap();
    assert_eq!(holder(&released), "", "no holder after a graceful stop");

    let second = ctx.start_replica_with(&engine);
    // Well inside the 60 s the old lease would have lasted.
    eventually(
        Duration::from_secs(20),
        "the next replica takes the released Lease",
        || async { holding(&second).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_a_restart_created_while_the_webhook_was_down_are_restarted_once_more_despite_the_cooldown()
 {
    let mut ctx = engine_context("rollout-heal", &["--rollout=auto", "--settle", "1s"]).await;
    let v1 = stamp_of(TRACER_V1);
    // What an engine's restart to v1 leaves when the webhook is down while the new pods are
    // created: the template carries the target, `rolled-at` is a minute old (well within the
    // 10 min cooldown), and the pods have no sidecar.
    ctx.stop_injector();
    let rolled_at = k8s_openapi::jiff::Timestamp::now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))
        .unwrap()
        .to_string();
    let mut missed = template("missed", Some("tracer:v1"));
    missed["metadata"]["annotations"]["injector/rollout-revision"] = json!(v1);
    create(
        &ctx.api::<Deployment>(),
        json!({
            "metadata": {"name": "missed", "annotations": {"injector/rolled-at": rolled_at}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "missed"}}, "template": missed}
        }),
    )
    .await;
    wait_ready(&ctx, "missed", 2).await;
    for pod in pods_of(&ctx, "missed").await {
        assert_eq!(container_names(&pod), ["app"], "created uninjected");
    }

    ctx.restart_injector().await;
    wait_pods_at(&ctx, "missed", 2, &v1, Duration::from_secs(90)).await;
    assert_eq!(replicaset_count(&ctx, "missed").await, 2, "restarted once");
    let deployment = ctx.api::<Deployment>().get("missed").await.unwrap();
    let template = &deployment.spec.as_ref().unwrap().template.metadata;
    assert_eq!(
        template_annotation(template, "injector/rollout-heal"),
        Some(v1.clone())
    );
    let reason = template_annotation(template, "injector/rollout-reason").unwrap();
    assert!(
        reason.starts_with("2 pod(s) were created while the webhook was bypassed"),
        "{reason}"
    );
    let injector = ctx.injector.as_ref().unwrap();
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"failed\"}"),
        0.0
    );
    // Healed, and nothing more: it stays at two ReplicaSets while the engine keeps planning.
    eventually(DEADLINE, "the heal counted as succeeded", || async {
        (injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"succeeded\"}")
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(replicaset_count(&ctx, "missed").await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_namespace_limit_holds_while_a_campaign_spans_namespaces() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::runtime::watcher;
    use sidecar_injector::annotations::AnnotationKeys;
    use sidecar_injector::drift::WorkloadEntry;
    use sidecar_injector::rollout::rolled_out;
    use sidecar_injector::workload::WorkloadKind;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Mutex};

    let first = "e2e-rollout-ns-limit";
    let second = "e2e-rollout-ns-limit-b";
    let ctx = engine_context(
        "rollout-ns-limit",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--canary",
            "0",
            "--max-parallel",
            "10",
            "--max-parallel-per-namespace",
            "1",
            "--include-namespace",
            second,
        ],
    )
    .await;
    // The second namespace carries the first's label, so the test's webhook serves it too.
    Api::<Namespace>::all(ctx.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": second, "labels": {"sidecar-injector-e2e": first}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let apis = [
        ctx.api::<Deployment>(),
        Api::<Deployment>::namespaced(ctx.client.clone(), second),
    ];
    for api in &apis {
        for i in 0..3 {
            let name = format!("w{i}");
            let deployment = json!({
                "metadata": {"name": name, "labels": {"e2e-ns-limit": "yes"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                         "template": template(&name, Some("tracer:v1"))}
            });
            // The ServiceAccount admission of a new namespace may refuse pods for a moment;
            // the ReplicaSet controller retries.
            create(api, deployment).await;
        }
    }
    let v1 = stamp_of(TRACER_V1);
    eventually(DEADLINE, "3 ready pods at v1 in each namespace", || async {
        three_ready_at(&ctx, first, &v1).await?;
        three_ready_at(&ctx, second, &v1).await
    })
    .await;

    // Watch every Deployment of both namespaces and keep, per namespace, the most that were
    // restarted and not yet rolled out (kubectl's rule) at the same time.
    let keys = AnnotationKeys::default();
    let peak: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let watch = tokio::spawn({
        let (api, peak) = (Api::<Deployment>::all(ctx.client.clone()), peak.clone());
        async move {
            let config = watcher::Config::default().labels("e2e-ns-limit=yes");
            let mut rolling: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let mut events = std::pin::pin!(watcher(api, config));
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) = event else {
                    continue;
                };
                let namespace = d.metadata.namespace.clone().unwrap_or_default();
                let name = d.metadata.name.clone().unwrap_or_default();
                let entry = WorkloadEntry::from_deployment(&d, &keys);
                let set = rolling.entry(namespace.clone()).or_default();
                if entry.rollout_revision.is_some() && !rolled_out(WorkloadKind::Deployment, &entry)
                {
                    set.insert(name);
                } else {
                    set.remove(&name);
                }
                let mut peak = peak.lock().unwrap();
                let top = peak.entry(namespace).or_default();
                *top = (*top).max(set.len());
            }
        }
    });

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    eventually(
        Duration::from_secs(120),
        "every pod at v2 in both namespaces",
        || async {
            three_ready_at(&ctx, first, &v2).await?;
            three_ready_at(&ctx, second, &v2).await
        },
    )
    .await;
    watch.abort();
    let peak = peak.lock().unwrap().clone();
    assert_eq!(
        peak,
        BTreeMap::from([(first.to_owned(), 1), (second.to_owned(), 1)]),
        "at most one rolling per namespace, and each namespace rolled"
    );
    let injector = ctx.injector.as_ref().unwrap();
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        6.0
    );
}

/// Exactly three pods in `namespace`, all Ready and stamped `stamp`.
async fn three_ready_at(
    ctx: &support::cluster::TestContext,
    namespace: &str,
    stamp: &str,
) -> Option<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let list = pods.list(&ListParams::default()).await.ok()?;
    (list.items.len() == 3
        && list
            .items
            .iter()
            .all(|p| annotation(p, "injector/revision") == Some(stamp) && is_ready(p)))
    .then_some(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_replica_recreate_deployment_waits_with_its_reason_until_downtime_is_accepted() {
    let ctx = engine_context("rollout-downtime", &["--rollout=auto", "--settle", "1s"]).await;
    let solo = json!({
        "metadata": {"name": "solo"},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                 "selector": {"matchLabels": {"app": "solo"}},
                 "template": template("solo", Some("tracer:v1"))}
    });
    create(&ctx.api::<Deployment>(), solo).await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "solo", 1, &v1, DEADLINE).await;
    wait_pods_at(&ctx, "web", 1, &v1, DEADLINE).await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    // web is restarted; solo waits, and the engine says why.
    wait_pods_at(&ctx, "web", 1, &v2, Duration::from_secs(90)).await;
    let injector = ctx.injector.as_ref().unwrap();
    let line = wait_logged(injector, "a restart would take it down: strategy Recreate").await;
    assert!(
        line.contains("Deployment/e2e-rollout-downtime/solo"),
        "{line}"
    );
    assert_eq!(replicaset_count(&ctx, "solo").await, 1, "solo untouched");

    // Accepted on the workload: restarted.
    ctx.api::<Deployment>()
        .patch(
            "solo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"injector/allow-downtime": "true"}}}),
            ),
        )
        .await
        .unwrap();
    wait_pods_at(&ctx, "solo", 1, &v2, Duration::from_secs(90)).await;
    assert_eq!(replicaset_count(&ctx, "solo").await, 2);
}

/// `HH:MM` (UTC) of a moment `seconds` after the Unix epoch.
fn wall_clock(seconds: i64) -> String {
    let minute = seconds.rem_euclid(86_400) / 60;
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_workload_waits_for_the_maintenance_window_and_is_restarted_when_it_opens() {
    // A daily window opening at the first whole minute at least 20 s from now (UTC).
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let opens = (now + 20 + 59) / 60 * 60;
    let window = format!("{}-{}", wall_clock(opens), wall_clock(opens + 1800));
    let ctx = engine_context(
        "rollout-window",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--maintenance-window",
            &window,
        ],
    )
    .await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 1, &v1, DEADLINE).await;
    let injector = ctx.injector.as_ref().unwrap();

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    let line = wait_logged(injector, "outside maintenance window (opens at").await;
    assert!(line.contains("Deployment/e2e-rollout-window/web"), "{line}");
    assert!(line.contains(&window), "{line}");
    eventually(DEADLINE, "the pending gauge counts web", || async {
        (injector.metric("sidecar_injector_rollout_pending{sidecar=\"tracer:v1\"}") == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        injector.metric("sidecar_injector_maintenance_window_open"),
        0.0
    );
    // `drift` shows the wait and the opening, from the engine's status.
    let namespace = "e2e-rollout-window";
    let report = eventually(DEADLINE, "drift notes the closed window", || async {
        // The same ConfigMaps, namespace and status as the engine under test.
        let report = drift_report(&scope_args(namespace));
        let note = report["sidecars"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "tracer:v1")?["note"]
            .as_str()?
            .to_owned();
        note.starts_with("outside maintenance window (opens in")
            .then_some(note)
    })
    .await;
    assert!(report.contains(&window), "{report}");
    assert_eq!(
        replicaset_count(&ctx, "web").await,
        1,
        "web restarted early"
    );

    // The window opens: web is restarted then, not before.
    wait_pods_at(&ctx, "web", 1, &v2, Duration::from_secs(150)).await;
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    let rolled_at: k8s_openapi::jiff::Timestamp =
        web.metadata.annotations.as_ref().unwrap()["injector/rolled-at"]
            .parse()
            .unwrap();
    assert!(
        rolled_at.as_second() >= opens,
        "restarted at {rolled_at}, before the window opened ({opens})"
    );
    assert_eq!(
        injector.metric("sidecar_injector_maintenance_window_open"),
        1.0
    );
}

/// A generic webhook receiver on loopback: answers 500 to its first POST, then 200, and keeps
/// every body it was sent.
async fn notice_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::sync::{Arc, Mutex};
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/hooks/team",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (kept, attempts) = (kept.clone(), attempts.clone());
            async move {
                if attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                }
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/team", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_is_announced_to_the_notify_url_when_it_starts_and_completes() {
    let (url, received) = notice_receiver().await;
    let ctx = engine_context(
        "rollout-notify",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--notify-url",
            &url,
            "--notify-timeout",
            "2s",
        ],
    )
    .await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    create_deployment(&ctx, "api", 1, template("api", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 1, &v1, DEADLINE).await;
    wait_pods_at(&ctx, "api", 1, &v1, DEADLINE).await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_pods_at(&ctx, "web", 1, &v2, Duration::from_secs(90)).await;
    wait_pods_at(&ctx, "api", 1, &v2, Duration::from_secs(90)).await;
    let notices = eventually(DEADLINE, "started and completed were received", || async {
        let notices = received.lock().unwrap().clone();
        (notices.len() >= 2).then_some(notices)
    })
    .await;
    let revision = v2.split('=').nth(1).unwrap();
    assert_eq!(notices.len(), 2, "{notices:#?}");
    let (started, completed) = (&notices[0], &notices[1]);
    assert_eq!(started["event"], "started", "{notices:#?}");
    assert_eq!(started["sidecar"], "tracer:v1");
    assert_eq!(started["revision"], revision);
    assert_eq!(
        started["counts"]["rolling"], 1,
        "the canary first: {started}"
    );
    assert_eq!(started["counts"]["pending"], 1, "{started}");
    assert!(
        started["text"]
            .as_str()
            .unwrap()
            .starts_with("sidecar-injector: campaign of tracer:v1"),
        "{started}"
    );
    assert_eq!(completed["event"], "completed", "{notices:#?}");
    assert_eq!(completed["counts"]["succeeded"], 2, "{completed}");
    // The receiver's first answer was a 500: retried, logged, counted as sent in the end.
    let injector = ctx.injector.as_ref().unwrap();
    let line = wait_logged(injector, "notification to --notify-url not delivered").await;
    assert!(line.contains("500"), "{line}");
    assert!(!line.contains("/hooks/team"), "the URL is a secret: {line}");
    // The receiver keeps a notice before it answers, and the injector counts it sent once the
    // answer is read: the count can trail the notice's arrival.
    let completed_sent =
        "sidecar_injector_notifications_total{event=\"completed\",result=\"sent\"}";
    eventually(DEADLINE, "the completed notice counted as sent", || async {
        (injector.metric(completed_sent) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        injector.metric("sidecar_injector_notifications_total{event=\"started\",result=\"sent\"}"),
        1.0
    );
    assert_eq!(injector.metric(completed_sent), 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workload_unhealthy_before_the_campaign_waits_and_does_not_fail_the_canary() {
    let ctx = engine_context("rollout-unhealthy", &["--rollout=auto", "--settle", "1s"]).await;
    // sick's app never becomes Ready (the test kubelet's `:broken` tag): unhealthy before
    // any restart of ours.
    let mut sick = template("sick", Some("tracer:v1"));
    sick["spec"]["containers"][0]["image"] = json!("example.org/app:broken");
    create_deployment(&ctx, "sick", 1, sick).await;
    create_deployment(&ctx, "web", 2, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 2, &v1, DEADLINE).await;

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    // web, though larger, is the canary and is restarted; sick waits with the reason.
    wait_pods_at(&ctx, "web", 2, &v2, Duration::from_secs(90)).await;
    let injector = ctx.injector.as_ref().unwrap();
    let line = wait_logged(injector, "not healthy before its restart").await;
    assert!(
        line.contains("Deployment/e2e-rollout-unhealthy/sick"),
        "{line}"
    );
    assert_eq!(replicaset_count(&ctx, "sick").await, 1, "sick untouched");
    // No failure, no pause: the campaign runs on, sick pending.
    eventually(DEADLINE, "web's restart counts as succeeded", || async {
        (injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"succeeded\"}")
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"failed\"}"),
        0.0
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollout_campaign{sidecar=\"tracer:v1\",state=\"running\"}"),
        1.0
    );
    assert_eq!(
        injector.metric("sidecar_injector_rollout_pending{sidecar=\"tracer:v1\"}"),
        1.0
    );
}

/// A GitOps controller's self-heal, as Argo CD does it: whenever the Deployment's template
/// carries the engine's stamp, it is put back as it was. Counts its reverts.
fn gitops_self_heal(
    ctx: &support::cluster::TestContext,
    name: &str,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let reverts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let api: Api<Deployment> = ctx.api();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let count = reverts.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let mut stream = watcher(api.clone(), config).boxed();
        let mut last_revert: Option<i64> = None;
        while let Some(event) = stream.next().await {
            let (Ok(watcher::Event::Apply(d)) | Ok(watcher::Event::InitApply(d))) = event else {
                continue;
            };
            let stamped = d
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .is_some_and(|a| a.contains_key("injector/rollout-revision"));
            if !stamped {
                continue;
            }
            let revert = json!({
                "metadata": {"annotations": {"injector/rolled-at": null, "kubernetes.io/change-cause": null}},
                "spec": {"template": {"metadata": {"annotations": {
                    "injector/rollout-revision": null, "injector/rollout-reason": null}}}}
            });
            // Events of the stamped generation may still arrive after its revert: a stamp is
            // new only in a generation after the last one this loop produced.
            if d.metadata.generation <= last_revert {
                continue;
            }
            let reverted = api
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(revert),
                )
                .await;
            if let Ok(after) = reverted {
                last_revert = after.metadata.generation;
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    reverts
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stamp_reverted_by_a_gitops_controller_is_restarted_by_eviction_exactly_once() {
    let ctx = engine_context("rollout-gitops", &["--rollout=auto", "--settle", "1s"]).await;
    create_deployment(&ctx, "web", 2, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 2, &v1, DEADLINE).await;
    let reverts = gitops_self_heal(&ctx, "web");

    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    // The stamp is reverted; the engine notices and evicts the pods instead, once.
    wait_pods_at(&ctx, "web", 2, &v2, Duration::from_secs(120)).await;
    let injector = ctx.injector.as_ref().unwrap();
    let switched = logged(
        injector,
        "restarting by eviction: the template stamp this engine set",
    );
    assert_eq!(switched.len(), 1, "{switched:#?}");
    assert!(switched[0].contains(&v2), "{}", switched[0]);
    eventually(DEADLINE, "the eviction restart succeeded", || async {
        (injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"succeeded\"}")
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"evicted\"}"),
        2.0,
        "each stale pod evicted once"
    );
    assert_eq!(
        injector
            .metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"restarted\"}"),
        2.0,
        "the template restart, then the one by eviction"
    );
    assert_eq!(
        injector.metric("sidecar_injector_rollouts_total{kind=\"Deployment\",result=\"failed\"}"),
        0.0
    );
    // The GitOps controller had one stamp to revert: the engine never wrote the template
    // again, and the template is as git has it.
    assert_eq!(reverts.load(std::sync::atomic::Ordering::SeqCst), 1);
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    assert_eq!(
        template_annotation(
            &web.spec.unwrap().template.metadata,
            "injector/rollout-revision"
        ),
        None
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn reverting_a_broken_revision_heals_the_canary_and_a_workload_scaled_up_during_the_pause() {
    // `continue`: new pods get the failing revision during the pause (the default, `hold`,
    // would give them the last good one; tests/e2e/history.rs shows that).
    let flags = [QUICK_FAILURE, &["--on-campaign-failure", "continue"]].concat();
    let ctx = engine_context("rollout-revert", &flags).await;
    for name in ["canary", "web"] {
        create_deployment(&ctx, name, 1, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 1, &v1, DEADLINE).await;
    }
    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    let injector = ctx.injector.as_ref().unwrap();
    wait_campaign_paused(injector, "tracer:v1").await;

    // Whoever creates a pod now is told by kubectl that it gets the revision that failed
    // (a server-side dry run goes through the webhook and creates nothing).
    let broken_revision = stamp_of(broken).split_once('=').unwrap().1.to_owned();
    let warning = format!(
        "Warning: the rollout of sidecar tracer:v1 (revision {broken_revision}) is paused after 1 failed restart(s)"
    );
    eventually(
        DEADLINE,
        "kubectl shows the paused campaign's warning",
        || async { dry_run_warnings(&ctx, "tracer:v1").filter(|w| w.contains(&warning)) },
    )
    .await;

    // While it is paused, web scales up: its new pod gets the broken sidecar.
    let broken_stamp = stamp_of(broken);
    ctx.api::<Deployment>()
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    eventually(
        DEADLINE,
        "web's new pod runs the broken revision",
        || async {
            pods_of(&ctx, "web")
                .await
                .iter()
                .any(|p| annotation(p, "injector/revision") == Some(broken_stamp.as_str()))
                .then_some(())
        },
    )
    .await;

    // The revert the pause message recommends: the last good content back. Every pod comes
    // back to it, the canary's broken pod and web's included.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V1).await;
    for (app, count) in [("canary", 1), ("web", 2)] {
        wait_pods_at(&ctx, app, count, &v1, Duration::from_secs(120)).await;
    }
    let book = campaign_book(&ctx).await.expect("a campaign book");
    let campaign = &book["campaigns"]["tracer:v1"];
    assert_eq!(
        campaign["revision"],
        v1.split_once('=').unwrap().1,
        "{book:#}"
    );
    assert_eq!(
        campaign["reverted"]["from"],
        broken_stamp.split_once('=').unwrap().1,
        "{book:#}"
    );
}

/// Waits (up to 120 s: a restart included) until `app`'s pods in the namespace of `pods` are
/// one Ready pod for which `check` holds, said as `what`.
async fn wait_one_pod(pods: &Api<Pod>, app: &str, what: &str, check: impl Fn(&Pod) -> bool) {
    eventually(
        Duration::from_secs(120),
        &format!("{app}: one Ready pod, {what}"),
        || async {
            let found = pods_in(pods, app).await;
            (found.len() == 1 && is_ready(&found[0]) && check(&found[0])).then_some(())
        },
    )
    .await;
}

/// Waits until the engine's campaign succeeded, having restarted one Deployment and failed
/// none.
async fn wait_campaign_done_with_one_restart(injector: &support::injector::Injector) {
    let rollouts = |result: &str| {
        injector.metric(&format!(
            "sidecar_injector_rollouts_total{{kind=\"Deployment\",result=\"{result}\"}}"
        ))
    };
    eventually(DEADLINE, "the campaign done", || async {
        (rollouts("succeeded") == 1.0).then_some(())
    })
    .await;
    assert_eq!(rollouts("restarted"), 1.0, "one Deployment restarted");
    assert_eq!(rollouts("failed"), 0.0, "none failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_of_a_namespace_the_webhook_configuration_leaves_out_are_excluded_and_never_restarted()
{
    use k8s_openapi::api::core::v1::Namespace;
    let first = "e2e-rollout-reach";
    let second = "e2e-rollout-reach-b";
    let configuration = format!("sidecar-injector-{first}");
    // The injector follows its webhook configuration (as deploy/ runs it; the CA file is the
    // one in its working directory).
    let ctx = engine_context(
        "rollout-reach",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--max-parallel",
            "10",
            "--include-namespace",
            second,
            "--webhook-configuration",
            &configuration,
            "--ca-bundle-file",
            "ca.crt",
        ],
    )
    .await;
    // The second namespace lacks the label the test's webhook configuration selects: the API
    // server never calls the injector for its pods.
    let namespaces = Api::<Namespace>::all(ctx.client.clone());
    create(&namespaces, json!({"metadata": {"name": second}})).await;
    let deployment = |name: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": template(name, Some("tracer:v1"))}
        })
    };
    let outside_deployments = Api::<Deployment>::namespaced(ctx.client.clone(), second);
    create(&ctx.api::<Deployment>(), deployment("inside")).await;
    // The ServiceAccount admission of a new namespace may refuse pods for a moment; the
    // ReplicaSet controller retries.
    create(&outside_deployments, deployment("outside")).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "inside", 1, &v1, DEADLINE).await;
    let outside_pods = Api::<Pod>::namespaced(ctx.client.clone(), second);
    wait_one_pod(&outside_pods, "outside", "uninjected", |pod| {
        container_names(pod) == ["app"]
    })
    .await;
    let injector = ctx.injector.as_ref().unwrap();

    // A campaign: inside is restarted to v2; outside, never (each restart would only make
    // another uninjected pod, and the second would count as a failure).
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_pods_at(&ctx, "inside", 1, &v2, Duration::from_secs(120)).await;
    wait_campaign_done_with_one_restart(injector).await;
    let outside_replicasets = Api::namespaced(ctx.client.clone(), second);
    let outside_sets = || replicaset_count_in(&outside_replicasets, "outside");
    assert_eq!(outside_sets().await, 1, "outside never restarted");
    // The gauge counts it excluded (beside the pods of other tests' namespaces, which the
    // namespace filter excludes), never uninjected.
    let counted = |state: &str| {
        injector.metric(&format!(
            "sidecar_injector_pods{{sidecar=\"tracer:v1\",state=\"{state}\"}}"
        ))
    };
    assert_eq!(counted("uninjected"), 0.0);
    assert!(counted("excluded") >= 1.0);
    // drift says why, as the engine judged it. Its configs are the engine's, and no namespace
    // filter (which would be the reason given first).
    let configs = [
        "--configmap-namespace",
        first,
        "--configmap-labels",
        "sidecar-injector-e2e/config=true",
        "--injector-namespace",
        first,
        "--webhook-configuration",
        &configuration,
    ];
    let mut drift_args = configs.to_vec();
    drift_args.extend(["-n", second]);
    let report = drift_report(&drift_args);
    let row = &report["workloads"][0];
    assert_eq!(row["name"], "outside", "{report:#}");
    assert_eq!(row["state"], "excluded", "{report:#}");
    assert_eq!(
        row["reason"],
        format!(
            "namespace {second} is not sent to the webhook (MutatingWebhookConfiguration {configuration}: its namespaceSelector wants sidecar-injector-e2e={first})"
        )
    );

    // explain, asked why outside has no sidecar, answers with the webhook configuration.
    let mut explain_args = vec!["deploy/outside", "-n", second];
    explain_args.extend(configs);
    let explained = crate::toolbox::explain(&explain_args);
    assert_eq!(
        explained["injection"]["message"],
        format!(
            "not injected: the API server never calls the webhook for pods of namespace {second}"
        ),
        "{explained:#}"
    );
    assert_eq!(
        explained["injection"]["checks"][0]["check"],
        "webhook called"
    );
    assert_eq!(explained["injection"]["checks"][0]["detail"], row["reason"]);
    // Its pods and drift say what `drift` says, and the engine is said to leave them out.
    assert_eq!(
        explained["workload_pods"]["states"],
        json!({"excluded": 1}),
        "{explained:#}"
    );
    assert_eq!(explained["sidecars"][0]["state"], "excluded");
    assert_eq!(explained["sidecars"][0]["excluded"], row["reason"]);
    assert_eq!(explained["rollout"]["action"], "nothing", "{explained:#}");
    assert_eq!(
        explained["rollout"]["why"],
        format!(
            "the engine leaves its pods out: {}",
            row["reason"].as_str().unwrap()
        )
    );

    // Labelled as the webhook configuration selects: reached from now on, and the engine
    // restarts outside into an injected pod at once.
    namespaces
        .patch(
            second,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"sidecar-injector-e2e": first}}}),
            ),
        )
        .await
        .unwrap();
    wait_one_pod(
        &outside_pods,
        "outside",
        "restarted, injected at v2",
        |pod| annotation(pod, "injector/revision").is_some_and(|s| s.contains(&v2)),
    )
    .await;
    assert_eq!(outside_sets().await, 2, "outside restarted exactly once");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_an_object_selector_leaves_out_are_excluded_and_never_restarted() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let namespace = "e2e-rollout-labels";
    let configuration = format!("sidecar-injector-{namespace}");
    let ctx = engine_context(
        "rollout-labels",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--max-parallel",
            "10",
            "--webhook-configuration",
            &configuration,
            "--ca-bundle-file",
            "ca.crt",
        ],
    )
    .await;
    // Pods labelled `sidecars: off` opt out of the webhook, as an overlay of deploy/ may say.
    let opt_out = "sidecar-injector-e2e/sidecars";
    let configurations = Api::<MutatingWebhookConfiguration>::all(ctx.client.clone());
    let set_object_selector = |selector: Value| {
        let configurations = configurations.clone();
        let configuration = configuration.clone();
        async move {
            configurations
                .patch(
                    &configuration,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Json::<()>(
                        serde_json::from_value(json!([
                            {"op": "add", "path": "/webhooks/0/objectSelector", "value": selector},
                        ]))
                        .unwrap(),
                    ),
                )
                .await
                .unwrap();
        }
    };
    set_object_selector(json!({"matchExpressions": [
        {"key": opt_out, "operator": "NotIn", "values": ["off"]},
    ]}))
    .await;
    let opted_out = |name: &str| {
        let mut template = template(name, Some("tracer:v1"));
        template["metadata"]["labels"][opt_out] = json!("off");
        template
    };
    // The API server follows its webhook configurations a moment later: a pod created
    // before would still be injected. A server-side dry run goes through the webhook.
    let pods = ctx.api::<Pod>();
    eventually(
        DEADLINE,
        "the API server applies the objectSelector",
        || async {
            let probe: Pod = serde_json::from_value(json!({
                "metadata": {"name": "probe", "labels": {opt_out: "off"},
                             "annotations": {"injector/request": "tracer:v1"}},
                "spec": {"containers": [{"name": "app", "image": "example.org/app:1.0"}]},
            }))
            .unwrap();
            let params = PostParams {
                dry_run: true,
                ..Default::default()
            };
            let created = pods.create(&params, &probe).await.ok()?;
            (container_names(&created) == ["app"]).then_some(())
        },
    )
    .await;
    create_deployment(&ctx, "plain", 1, template("plain", Some("tracer:v1"))).await;
    create_deployment(&ctx, "opted-out", 1, opted_out("opted-out")).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "plain", 1, &v1, DEADLINE).await;
    wait_one_pod(&pods, "opted-out", "uninjected", |pod| {
        container_names(pod) == ["app"]
    })
    .await;
    let injector = ctx.injector.as_ref().unwrap();

    // A campaign: plain is restarted to v2; opted-out, never (each restart would only make
    // another uninjected pod, and the second would count as a failure).
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    let v2 = stamp_of(TRACER_V2);
    wait_pods_at(&ctx, "plain", 1, &v2, Duration::from_secs(120)).await;
    wait_campaign_done_with_one_restart(injector).await;
    assert_eq!(
        replicaset_count(&ctx, "opted-out").await,
        1,
        "opted-out never restarted"
    );
    assert_eq!(
        injector.metric("sidecar_injector_pods{sidecar=\"tracer:v1\",state=\"uninjected\"}"),
        0.0,
        "counted excluded, not uninjected"
    );
    // drift says why, as the engine judged it.
    let configs = [
        "--configmap-namespace",
        namespace,
        "--configmap-labels",
        "sidecar-injector-e2e/config=true",
        "--injector-namespace",
        namespace,
        "--webhook-configuration",
        &configuration,
    ];
    let mut drift_args = configs.to_vec();
    drift_args.extend(["-n", namespace]);
    let report = drift_report(&drift_args);
    let rows = report["workloads"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|row| row["name"] == "opted-out")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(row["state"], "excluded", "{report:#}");
    let why = format!(
        "the pods' labels leave them out of the webhook (MutatingWebhookConfiguration {configuration}: its objectSelector wants {opt_out} notin (off))"
    );
    assert_eq!(row["reason"], why, "{report:#}");
    let plain = rows.iter().find(|row| row["name"] == "plain").unwrap();
    assert_eq!(plain["state"], "current", "{report:#}");

    // explain, asked why opted-out has no sidecar, answers with the objectSelector, and
    // that the engine leaves it out.
    let mut explain_args = vec!["deploy/opted-out", "-n", namespace];
    explain_args.extend(configs);
    let explained = crate::toolbox::explain(&explain_args);
    assert_eq!(
        explained["injection"]["message"],
        "not injected: the API server never calls the webhook for pods labelled as these",
        "{explained:#}"
    );
    assert_eq!(explained["injection"]["checks"][0]["detail"], why);
    assert_eq!(explained["sidecars"][0]["excluded"], why, "{explained:#}");
    assert_eq!(explained["rollout"]["action"], "nothing", "{explained:#}");

    // The objectSelector removed: opted-out is reached from now on, and the engine restarts it
    // once, into an injected pod at v2.
    set_object_selector(json!({})).await;
    wait_one_pod(&pods, "opted-out", "restarted, injected at v2", |pod| {
        annotation(pod, "injector/revision").is_some_and(|s| s.contains(&v2))
    })
    .await;
    assert_eq!(
        replicaset_count(&ctx, "opted-out").await,
        2,
        "opted-out restarted exactly once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_injector_that_may_not_read_namespaces_still_rolls_out_counting_every_namespace_reached()
{
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let namespace = "e2e-rollout-reach-rbac";
    let configuration = format!("sidecar-injector-{namespace}");
    let mut ctx = engine_context(
        "rollout-reach-rbac",
        &[
            "--rollout=auto",
            "--settle",
            "1s",
            "--webhook-configuration",
            &configuration,
            "--ca-bundle-file",
            "ca.crt",
        ],
    )
    .await;
    // deploy/'s ClusterRole as it was before it could read namespaces (a cluster that kept
    // its own RBAC through an upgrade): the injector is bound to that instead.
    let mut role = of_kind(&kustomize("deploy"), "ClusterRole").clone();
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| rule["resources"] != json!(["namespaces"]))
        .cloned()
        .collect();
    assert_eq!(rules.len() + 1, role["rules"].as_array().unwrap().len());
    role["rules"] = json!(rules);
    role["metadata"] = json!({"name": "e2e-sidecar-injector-without-namespaces"});
    match Api::<ClusterRole>::all(ctx.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(role).unwrap(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("ClusterRole: {e}"),
    }
    let bindings = Api::<ClusterRoleBinding>::all(ctx.client.clone());
    let binding = format!("sidecar-injector-{namespace}");
    bindings
        .delete(&binding, &Default::default())
        .await
        .unwrap();
    create(
        &bindings,
        json!({
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "e2e-sidecar-injector-without-namespaces"},
            "subjects": [{"kind": "ServiceAccount", "name": "sidecar-injector", "namespace": namespace}]
        }),
    )
    .await;
    ctx.restart_injector().await;
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    let v1 = stamp_of(TRACER_V1);
    wait_pods_at(&ctx, "web", 1, &v1, DEADLINE).await;

    // Refused the namespaces, it still syncs, leads and restarts what is stale.
    let injector = ctx.injector.as_ref().unwrap();
    wait_logged(injector, "namespace watch failed").await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    wait_pods_at(
        &ctx,
        "web",
        1,
        &stamp_of(TRACER_V2),
        Duration::from_secs(120),
    )
    .await;
    assert!(
        logged(injector, "namespace watch failed")[0].contains("namespaces is forbidden"),
        "{:?}",
        logged(injector, "namespace watch failed")
    );

    // drift, as that account: the report, every namespace counted as reached.
    let kubeconfig = support::cluster::service_account_kubeconfig(
        &ctx.client,
        namespace,
        "sidecar-injector",
        ctx.dir(),
    )
    .await;
    let mut args = scope_args(namespace);
    args.extend(["--webhook-configuration", &configuration, "-n", namespace]);
    let report = drift_report_as(&kubeconfig, ctx.dir(), &args);
    assert_eq!(report["workloads"][0]["name"], "web", "{report:#}");
    assert_eq!(report["workloads"][0]["state"], "current", "{report:#}");
}
