use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::workload::WorkloadKind;

fn check(yaml: &str) -> MetricCheck {
    serde_yaml::from_str(yaml).unwrap()
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

#[test]
fn a_query_is_filled_for_exactly_the_workloads_pods_and_the_sidecars_containers() {
    let workload = WorkloadRef::new(WorkloadKind::Deployment, "shop", "web");
    let pods = ["web-7d9f-abcde".to_owned(), "web-7d9f-fghij".to_owned()];
    let containers = ["logger".to_owned()];
    let subject = Subject {
        workload: &workload,
        pods: &pods,
        containers: &containers,
    };
    let own = check(
        r#"{name: errors, query: 'max(errors{ns="{{namespace}}",w="{{name}}",k="{{kind}}",pod=~"{{pods}}",c=~"{{containers}}"}[{{interval}}])', max: 0.05, interval: 1m}"#,
    );
    assert_eq!(
        fill(&own, &subject),
        r#"max(errors{ns="shop",w="web",k="Deployment",pod=~"web-7d9f-abcde|web-7d9f-fghij",c=~"logger"}[60s])"#
    );
    let restarts = check("{name: restarts, template: sidecar-restarts, max: 0}");
    assert_eq!(
        fill(&restarts, &subject),
        r#"sum(increase(kube_pod_container_status_restarts_total{namespace="shop",pod=~"web-7d9f-abcde|web-7d9f-fghij",container=~"logger"}[30s]))"#
    );
    // No pod: a query that matches none, never one that matches every pod.
    let none = Subject {
        pods: &[],
        ..subject
    };
    assert!(fill(&restarts, &none).contains(r#"pod=~"$^""#));
    // A dot in a name matches only a dot.
    let dotted = ["web.1".to_owned()];
    let dotted = Subject {
        pods: &dotted,
        ..none
    };
    assert!(fill(&restarts, &dotted).contains(r#"pod=~"web\\.1""#));
}

#[test]
fn a_check_as_written_is_refused_with_what_is_wrong() {
    let cases = [
        (
            "[{name: a, max: 1}]",
            "check \"a\": give a template or a query, not both and not neither",
        ),
        (
            "[{name: a, query: up, template: http-error-ratio, max: 1}]",
            "check \"a\": give a template or a query, not both and not neither",
        ),
        (
            "[{name: a, query: up}]",
            "check \"a\": give max (fail above) or min (fail below), one of them",
        ),
        (
            "[{name: a, query: up, max: 1, min: 0}]",
            "check \"a\": give max (fail above) or min (fail below), one of them",
        ),
        (
            "[{name: a, query: up, max: 1, interval: 0s}]",
            "check \"a\": the interval must be at least one second",
        ),
        (
            "[{name: a, query: up, max: 1}, {name: a, query: up, max: 2}]",
            "checks: the name \"a\" is given twice",
        ),
        (
            "[{name: a, query: 'up{pod=~\"{{pod}}\"}', max: 1}]",
            "check \"a\": unknown placeholder {{pod}} (known: namespace, name, kind, pods, containers, interval)",
        ),
    ];
    for (yaml, error) in cases {
        let checks: Vec<MetricCheck> = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(validate(&checks).unwrap_err().to_string(), error, "{yaml}");
    }
    let good: Vec<MetricCheck> = serde_yaml::from_str(
        "[{name: a, template: http-p99-latency, max: 0.5}, {name: b, query: 'up{namespace=\"{{namespace}}\"}', min: 1}]",
    )
    .unwrap();
    assert_eq!(validate(&good), Ok(()));
    let unknown = serde_yaml::from_str::<MetricCheck>("{name: a, query: up, max: 1, maximum: 2}");
    assert!(
        unknown
            .unwrap_err()
            .to_string()
            .contains("unknown field `maximum`")
    );
    let interval =
        serde_yaml::from_str::<MetricCheck>("{name: a, query: up, max: 1, interval: soon}");
    assert!(
        interval
            .unwrap_err()
            .to_string()
            .contains("\"soon\" is not a duration such as 30s")
    );
}

#[test]
fn prometheus_answers_read_as_one_value_or_why_there_is_none() {
    let vector = |result: serde_json::Value| json!({"status": "success", "data": {"resultType": "vector", "result": result}});
    assert_eq!(
        reading_of(&vector(
            json!([{"metric": {}, "value": [1700000000.0, "0.25"]}])
        )),
        Reading::Value(Value(0.25))
    );
    assert_eq!(
        reading_of(
            &json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}})
        ),
        Reading::Value(Value(3.0))
    );
    assert_eq!(
        reading_of(&vector(json!([]))),
        Reading::Unknown("no data".into())
    );
    assert_eq!(
        reading_of(&vector(json!([{"value": [1.0, "NaN"]}]))),
        Reading::Unknown("no data (NaN)".into())
    );
    assert_eq!(
        reading_of(&vector(
            json!([{"value": [1.0, "1"]}, {"value": [1.0, "2"]}])
        )),
        Reading::Unknown("the query returns 2 series: aggregate them to one (sum, max)".into())
    );
    assert_eq!(
        reading_of(
            &json!({"status": "error", "errorType": "bad_data", "error": "parse error at char 4"})
        ),
        Reading::Unknown("the query failed: parse error at char 4".into())
    );
    assert_eq!(
        reading_of(&json!({"status": "success", "data": {"resultType": "matrix", "result": []}})),
        Reading::Unknown("the query returns a matrix, not a number".into())
    );
}

#[test]
fn checks_are_evaluated_at_the_start_each_interval_and_at_the_end_and_judged_by_their_tolerance() {
    let errors = check("{name: errors, query: up, max: 0.05, interval: 10s}");
    let key = || "logger:v1/errors".to_owned();
    let judge = |records: &CheckRecords, now: i64| {
        judge_checks([(key(), &errors)], records, at(130), at(now))
    };
    let mut records = CheckRecords::new();
    // The bake starts: due at once.
    let verdict = judge(&records, 100);
    assert_eq!((verdict.due.clone(), verdict.passed), (vec![key()], false));
    record(
        &mut records,
        &key(),
        &errors,
        Reading::Value(Value(0.01)),
        at(100),
    );
    let verdict = judge(&records, 101);
    assert!(verdict.due.is_empty());
    assert_eq!(verdict.next, Some(at(110)), "the next interval");
    assert_eq!(judge(&records, 110).due, [key()]);
    // The last interval is cut at the end, where it is due once more.
    record(
        &mut records,
        &key(),
        &errors,
        Reading::Value(Value(0.02)),
        at(125),
    );
    assert_eq!(judge(&records, 126).next, Some(at(130)));
    assert!(!judge(&records, 130).passed);
    record(
        &mut records,
        &key(),
        &errors,
        Reading::Value(Value(0.02)),
        at(130),
    );
    let verdict = judge(&records, 131);
    assert!(
        verdict.passed && verdict.due.is_empty() && verdict.next.is_none(),
        "{verdict:?}"
    );

    // A value over the max fails it, none tolerated.
    let mut failing = CheckRecords::new();
    record(
        &mut failing,
        &key(),
        &errors,
        Reading::Value(Value(0.31)),
        at(100),
    );
    let verdict = judge(&failing, 101);
    assert_eq!(
        verdict.failed.map(|(k, r)| (k, r.failures)),
        Some((key(), 1))
    );
    assert!(!verdict.passed);

    // Two tolerated: the third fails it.
    let tolerant =
        check("{name: errors, query: up, max: 0.05, interval: 10s, failuresTolerated: 2}");
    let mut records = CheckRecords::new();
    for second in [100, 110] {
        record(
            &mut records,
            &key(),
            &tolerant,
            Reading::Value(Value(0.31)),
            at(second),
        );
        assert!(
            judge_checks([(key(), &tolerant)], &records, at(130), at(second))
                .failed
                .is_none()
        );
    }
    record(
        &mut records,
        &key(),
        &tolerant,
        Reading::Value(Value(0.31)),
        at(120),
    );
    assert!(
        judge_checks([(key(), &tolerant)], &records, at(130), at(120))
            .failed
            .is_some()
    );
}

#[test]
fn a_check_with_no_value_waits_and_is_asked_again_or_fails_as_it_says() {
    let waits = check("{name: errors, query: up, max: 0.05, interval: 10s}");
    let key = "logger:v1/errors".to_owned();
    let mut records = CheckRecords::new();
    let unreachable = || Reading::Unknown("Prometheus is unreachable".into());
    record(&mut records, &key, &waits, unreachable(), at(130));
    let verdict = judge_checks([(key.clone(), &waits)], &records, at(130), at(131));
    assert!(!verdict.passed && verdict.failed.is_none());
    assert_eq!(
        verdict.next,
        Some(at(140)),
        "asked again each interval, past the end"
    );
    assert_eq!(records[&key].failures, 0, "unknown is not a failure");
    record(
        &mut records,
        &key,
        &waits,
        Reading::Value(Value(0.0)),
        at(140),
    );
    assert!(judge_checks([(key.clone(), &waits)], &records, at(130), at(141)).passed);

    let fails = check("{name: errors, query: up, max: 0.05, whenUnknown: fail}");
    let mut records = CheckRecords::new();
    record(&mut records, &key, &fails, unreachable(), at(100));
    assert_eq!(records[&key].failures, 1);
    assert!(
        judge_checks([(key.clone(), &fails)], &records, at(130), at(101))
            .failed
            .is_some()
    );
}
