//! Canary analysis on metrics: a real Prometheus scrapes a target whose values the test sets
//! ("the workloads' error counts"), and the bake's metric checks of a sidecar config decide
//! whether the campaign goes on.

use super::history::revision;
use super::*;
use support::prometheus::{Exporter, Prometheus};

/// tracer:v2 with a check of each workload's errors, as the exporter labels them.
const TRACER_V2_CHECKED: &str = "name: tracer:v1\n\
containers: [{name: tracer, image: 'tracer:2'}]\n\
rollout:\n  checks:\n  - name: errors\n    query: 'max(test_errors{namespace=\"{{namespace}}\",workload=\"{{name}}\"})'\n    max: 0.5\n    interval: 2s\n";

fn checks(injector: &support::injector::Injector, outcome: &str) -> f64 {
    injector.metric(&format!(
        "sidecar_injector_metric_checks_total{{check=\"tracer:v1/errors\",outcome=\"{outcome}\"}}"
    ))
}

/// canary and web at tracer:v1, each reporting `errors` to Prometheus, once Prometheus has
/// scraped them.
async fn two_workloads_reporting(
    ctx: &TestContext,
    exporter: &Exporter,
    prometheus: &Prometheus,
    errors: [u32; 2],
) {
    for name in ["canary", "web"] {
        create_deployment(ctx, name, 1, template(name, Some("tracer:v1"))).await;
    }
    let v1 = stamp_of(TRACER_V1);
    for app in ["canary", "web"] {
        wait_pods_at(ctx, app, 1, &v1, DEADLINE).await;
    }
    let ns = &ctx.namespace;
    exporter.set(&format!(
        "test_errors{{namespace=\"{ns}\",workload=\"canary\"}} {}\ntest_errors{{namespace=\"{ns}\",workload=\"web\"}} {}\n",
        errors[0], errors[1]
    ));
    eventually(
        DEADLINE,
        "Prometheus scraped both workloads' errors",
        || async {
            let answer = prometheus.query("count(test_errors)");
            (answer["data"]["result"][0]["value"][1] == "2").then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_whose_error_metric_crosses_its_max_pauses_the_campaign_and_new_pods_are_held() {
    let exporter = Exporter::start();
    let prometheus = Prometheus::start_scraping(&[exporter.addr]);
    let url = format!("http://{}", prometheus.addr);
    let flags = [
        QUICK_FAILURE,
        &["--cooldown", "1s", "--bake", "5s", "--prometheus-url", &url],
    ]
    .concat();
    let ctx = engine_context("canary-metrics", &flags).await;
    two_workloads_reporting(&ctx, &exporter, &prometheus, [1, 0]).await;
    let v1 = stamp_of(TRACER_V1);
    // v1 is the last good revision a hold falls back to.
    eventually(DEADLINE, "v1 good in the revision history", || async {
        let history = super::revision_history(&ctx).await?;
        (history["sidecars"]["tracer:v1"][0]["outcome"] == "good").then_some(())
    })
    .await;

    // The canary rolls out to v2 and stays Ready, but its errors are over the check's max: the
    // restart fails with the check, its value and its query, the campaign pauses, web is
    // never restarted, and new pods get v1 back.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2_CHECKED).await;
    let v2 = stamp_of(TRACER_V2_CHECKED);
    wait_pods_at(&ctx, "canary", 1, &v2, DEADLINE).await;
    let book = wait_book_paused(&ctx, "tracer:v1").await;
    let campaign = &book["campaigns"]["tracer:v1"];
    let failures = campaign["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{book:#}");
    assert_eq!(failures[0]["workload"]["name"], "canary", "{book:#}");
    let ns = &ctx.namespace;
    assert_eq!(
        failures[0]["reason"],
        format!(
            "metric check tracer:v1/errors failed: 1, above the max 0.5; query: max(test_errors{{namespace=\"{ns}\",workload=\"canary\"}})"
        ),
        "{book:#}"
    );
    assert_eq!(campaign["held"]["revision"], revision(&v1), "{book:#}");
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    assert!(
        template_annotation(
            &web.spec.unwrap().template.metadata,
            "injector/rollout-revision"
        )
        .is_none(),
        "web was never restarted"
    );
    let fresh = create_pod(&ctx, "fresh", "tracer:v1").await.unwrap();
    assert_eq!(annotation(&fresh, "injector/revision"), Some(v1.as_str()));
    let injector = ctx.injector.as_ref().unwrap();
    assert!(checks(injector, "fail") >= 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn passing_checks_let_the_campaign_complete_and_an_unreachable_prometheus_holds_it_waiting() {
    // Errors under the max everywhere: the canary and then web pass their checks and the
    // campaign completes.
    let exporter = Exporter::start();
    let prometheus = Prometheus::start_scraping(&[exporter.addr]);
    let url = format!("http://{}", prometheus.addr);
    let flags = [QUICK_FAILURE, &["--bake", "3s", "--prometheus-url", &url]].concat();
    let ctx = engine_context("canary-metrics-pass", &flags).await;
    two_workloads_reporting(&ctx, &exporter, &prometheus, [0, 0]).await;
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2_CHECKED).await;
    let v2 = stamp_of(TRACER_V2_CHECKED);
    eventually(DEADLINE, "the campaign completes", || async {
        let book = campaign_book(&ctx).await?;
        (book["campaigns"]["tracer:v1"]["state"] == "complete").then_some(())
    })
    .await;
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 1, &v2, DEADLINE).await;
    }
    let injector = ctx.injector.as_ref().unwrap();
    // Each bake passed on an evaluation at or after its end (on a busy machine the first may
    // come that late, and be the only one).
    assert!(
        checks(injector, "pass") >= 2.0,
        "{}",
        checks(injector, "pass")
    );
    assert_eq!(checks(injector, "fail"), 0.0);
    drop(ctx);

    // Prometheus unreachable: the canary's check has no value, so (whenUnknown: wait) its bake
    // waits, asks again each interval and says why; web is not restarted meanwhile.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{closed}");
    let flags = [QUICK_FAILURE, &["--bake", "3s", "--prometheus-url", &url]].concat();
    let ctx = engine_context("canary-metrics-down", &flags).await;
    for name in ["canary", "web"] {
        create_deployment(&ctx, name, 1, template(name, Some("tracer:v1"))).await;
    }
    for app in ["canary", "web"] {
        wait_pods_at(&ctx, app, 1, &stamp_of(TRACER_V1), DEADLINE).await;
    }
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2_CHECKED).await;
    wait_pods_at(&ctx, "canary", 1, &v2, DEADLINE).await;
    let injector = ctx.injector.as_ref().unwrap();
    eventually(DEADLINE, "the check asked again, with no value", || async {
        (checks(injector, "unknown") >= 3.0).then_some(())
    })
    .await;
    wait_logged(
        injector,
        "metric check tracer:v1/errors: no value (Prometheus is unreachable",
    )
    .await;
    let book = campaign_book(&ctx).await.unwrap();
    assert_eq!(
        book["campaigns"]["tracer:v1"]["state"], "running",
        "{book:#}"
    );
    let web = ctx.api::<Deployment>().get("web").await.unwrap();
    assert!(
        template_annotation(
            &web.spec.unwrap().template.metadata,
            "injector/rollout-revision"
        )
        .is_none(),
        "web waits for the canary's checks"
    );
}
