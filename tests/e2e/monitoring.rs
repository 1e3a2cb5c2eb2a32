//! deploy/monitoring against a real Prometheus (Debian's) scraping a real `serve` whose engine
//! pauses a campaign on the real control plane: the alert goes pending then firing, every
//! dashboard query evaluates, and every series the alerts and the dashboard name is exported.

use super::*;
use support::prometheus::{
    Prometheus, alert_rules, dashboard, dashboard_exprs, exported_names, metric_names,
};

fn campaign_alert(prometheus: &Prometheus) -> Option<String> {
    prometheus
        .alerts()
        .into_iter()
        .find(|a| {
            a["labels"]["alertname"] == "SidecarInjectorCampaignPaused"
                && a["labels"]["sidecar"] == "tracer:v1"
        })
        .map(|a| a["state"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_fires_the_campaign_alert_when_a_broken_revision_pauses_it() {
    let ctx = engine_context("monitoring", QUICK_FAILURE).await;
    create_deployment(&ctx, "canary", 1, template("canary", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "canary", 1, &stamp_of(TRACER_V1), DEADLINE).await;
    let injector = ctx.injector.as_ref().unwrap();
    let prometheus = Prometheus::start(injector.lifecycle);

    // Scraped, leading, and quiet: no alert of ours pending or firing on a healthy injector.
    eventually(
        DEADLINE,
        "Prometheus scrapes serve as the Lease holder",
        || async {
            let answer = prometheus.query("max(sidecar_injector_rollout_leader) == 1");
            (answer["data"]["result"].as_array()?.len() == 1).then_some(())
        },
    )
    .await;
    // (SidecarInjectorDown may be pending from an evaluation before the first scrape: it
    // clears with the series.)
    eventually(DEADLINE, "no alert pending or firing", || async {
        prometheus.alerts().is_empty().then_some(())
    })
    .await;

    let broken = "name: tracer:v1\ncontainers: [{name: tracer, image: 'tracer:broken'}]\n";
    put_config(&ctx, "tracing", "tracer.yaml", broken).await;
    eventually(Duration::from_secs(60), "the alert pending", || async {
        campaign_alert(&prometheus).filter(|s| s == "pending")
    })
    .await;
    // `for: 1m` on the rule: firing a minute after the pause was first seen.
    eventually(Duration::from_secs(90), "the alert firing", || async {
        campaign_alert(&prometheus).filter(|s| s == "firing")
    })
    .await;
    let alerts = prometheus.alerts();
    let in_state = |state: &str| -> Vec<String> {
        alerts
            .iter()
            .filter(|a| a["state"] == state)
            .map(|a| a["labels"]["alertname"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(in_state("firing"), ["SidecarInjectorCampaignPaused"]);
    // The canary still runs the old revision: stale, pending until it has been for 6 hours.
    assert_eq!(
        in_state("pending"),
        ["SidecarInjectorStalePods"],
        "{alerts:#?}"
    );

    // Every dashboard query is valid PromQL that Prometheus evaluates.
    let dashboard = dashboard();
    for expr in dashboard_exprs(&dashboard) {
        let answer = prometheus.query(&expr);
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
    }
    let drift =
        prometheus.query("max by (sidecar, state) (sidecar_injector_pods{sidecar=\"tracer:v1\"})");
    assert!(
        !drift["data"]["result"].as_array().unwrap().is_empty(),
        "{drift}"
    );

    // Every series the alerts and the dashboard name is on this serve's /metrics.
    let (_, exposition) = injector.lifecycle_get("/metrics");
    let exported = exported_names(&exposition);
    let mut named = std::collections::BTreeSet::new();
    for expr in dashboard_exprs(&dashboard) {
        named.extend(metric_names(&expr));
    }
    for alert in alert_rules() {
        named.extend(metric_names(alert["expr"].as_str().unwrap()));
    }
    let missing: Vec<&String> = named.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "not on /metrics: {missing:?}\n{exposition}"
    );

    // What the book alert divides: the size of the campaigns item the leader wrote (the
    // paused campaign and its failure in it), over the budget.
    let configmaps = ctx.api::<ConfigMap>();
    eventually(
        DEADLINE,
        "the book gauge at the campaigns item's size",
        || async {
            let status = configmaps.get("sidecar-injector-status").await.ok()?;
            let book = status.data?.remove("campaigns")?;
            assert!(book.contains("tracer:v1"), "{book}");
            let (_, exposition) = injector.lifecycle_get("/metrics");
            let line = format!("sidecar_injector_rollout_book_bytes {}", book.len());
            exposition.lines().any(|l| l == line).then_some(())
        },
    )
    .await;
    let share = prometheus.query(
        "max(sidecar_injector_rollout_book_bytes) / max(sidecar_injector_rollout_book_budget_bytes)",
    );
    let share: f64 = share["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{share}"));
    assert!(share > 0.0 && share < 0.01, "{share}");
}
