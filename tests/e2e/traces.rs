//! Traces against a real OpenTelemetry Collector: kube-apiserver traces its requests to the
//! collector, the injector (`serve --otlp-endpoint`) sends its spans there too, and each review's
//! span is a child of the API server's call to the webhook; a restart's span is in its plan's
//! trace; a review's trace id is an exemplar of the latency histogram.

use super::*;
use support::cluster::OtherControlPlane;
use support::otelcol::{Collector, Span};

const NAME: &str = "traces";

#[tokio::test(flavor = "multi_thread")]
async fn a_review_continues_the_api_servers_trace_and_a_restart_is_in_its_plans() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let tracing_config = dir.path().join("tracing.yaml");
    std::fs::write(
        &tracing_config,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\n\
             endpoint: 127.0.0.1:{}\nsamplingRatePerMillion: 1000000\n",
            collector.grpc
        ),
    )
    .unwrap();
    let plane = OtherControlPlane::start_with(
        NAME,
        &format!("--tracing-config-file={}", tracing_config.display()),
    );
    support::kubelet::start(&plane.plane.kubeconfig, Duration::from_millis(300));
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let ctx = engine_context_in(
        &plane.plane,
        NAME,
        &["--rollout=auto", "--otlp-endpoint", &endpoint],
    )
    .await;
    let ns = ctx.namespace.clone();
    create_deployment(&ctx, "web", 1, template("web", Some("tracer:v1"))).await;
    wait_pods_at(&ctx, "web", 1, &stamp_of(TRACER_V1), DEADLINE).await;

    // The review of web's pod: a child of the API server's call to the webhook, in its trace.
    let (review, caller) = eventually(
        DEADLINE,
        "the review's span under the API server's",
        || async {
            let spans = collector.spans();
            let review = spans
                .iter()
                .find(|s| {
                    s.service == "sidecar-injector"
                        && s.name == "admission review"
                        && s.attributes.get("namespace") == Some(&ns)
                        && s.attributes.get("result").map(String::as_str) == Some("injected")
                })?
                .clone();
            let caller = spans
                .iter()
                .find(|s| s.id == review.parent_id && s.service == "apiserver")?
                .clone();
            Some((review, caller))
        },
    )
    .await;
    assert_eq!(review.trace_id, caller.trace_id, "one trace");
    assert!(
        review.attributes["pod"].starts_with("web-"),
        "{:?}",
        review.attributes
    );

    // Its trace id is an exemplar of the review latency histogram (the last review of that
    // bucket's: any review the collector has).
    let injector = ctx.injector.as_ref().unwrap();
    let reviews: Vec<String> = collector
        .spans()
        .into_iter()
        .filter(|s| s.name == "admission review")
        .map(|s| s.trace_id)
        .collect();
    let (_, metrics) = injector.lifecycle_get("/metrics");
    let exemplars: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sidecar_injector_admission_duration_seconds_bucket"))
        .filter_map(|l| l.split_once(" # {trace_id=\"").map(|(_, rest)| &rest[..32]))
        .collect();
    assert!(
        exemplars.iter().any(|e| reviews.iter().any(|r| r == e)),
        "exemplars {exemplars:?}, reviews' traces {reviews:?}"
    );

    // A config edit: web's restart is a span in a plan's trace, its child.
    put_config(&ctx, "tracing", "tracer.yaml", TRACER_V2).await;
    wait_pods_at(
        &ctx,
        "web",
        1,
        &stamp_of(TRACER_V2),
        Duration::from_secs(120),
    )
    .await;
    let workload = format!("Deployment/{ns}/web");
    let (restart, plan): (Span, Span) =
        eventually(DEADLINE, "the restart's span in its plan", || async {
            let spans = collector.spans();
            let restart = spans
                .iter()
                .find(|s| s.name == "restart" && s.attributes.get("workload") == Some(&workload))?
                .clone();
            let plan = spans
                .iter()
                .find(|s| s.id == restart.parent_id && s.name == "rollout plan")?
                .clone();
            Some((restart, plan))
        })
        .await;
    assert_eq!(restart.trace_id, plan.trace_id);
    assert!(plan.parent_id.is_empty(), "a plan begins its trace");
    assert_eq!(plan.service, "sidecar-injector");
    assert!(
        restart.attributes["target"].starts_with("tracer:v1="),
        "{:?}",
        restart.attributes
    );
}
