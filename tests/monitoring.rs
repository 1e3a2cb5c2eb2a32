//! deploy/monitoring proven with the real tools: promtool checks the alert rules and runs their
//! unit tests (tests/monitoring/alerts.test.yaml), kubectl kustomize renders the component
//! with deploy/, and the dashboard is checked for what it shows. A real Prometheus scraping
//! `serve` in a real scenario, every dashboard query and every named series, are in the e2e
//! suite (tests/e2e/monitoring.rs).
#![allow(clippy::too_many_lines)] // a test reads as one scenario

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::prometheus::{
    alert_rules, bin_dir, dashboard, dashboard_exprs, metric_names, rule_file,
};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let promtool = bin_dir().join("promtool");
    let dir = tempfile::tempdir().unwrap();

    // The rules as shipped, prose included.
    let full = dir.path().join("full.yaml");
    std::fs::write(&full, rule_file(true)).unwrap();
    let check = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&full)
        .output()
        .unwrap();
    let alerts = alert_rules();
    assert!(
        check.status.success(),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
    assert!(
        text(&check.stdout).contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{}",
        text(&check.stdout)
    );
    // What the issue asks an operator to get with each alert.
    let mut names = BTreeSet::new();
    for alert in &alerts {
        let name = alert["alert"].as_str().unwrap();
        assert!(names.insert(name.to_owned()), "{name} twice");
        assert!(
            alert["labels"]["severity"].is_string(),
            "{name}: no severity"
        );
        for key in ["summary", "description", "runbook"] {
            let value = alert["annotations"][key].as_str().unwrap_or_default();
            assert!(value.len() > 20, "{name}: {key} {value:?}");
        }
    }
    for expected in [
        "SidecarInjectorDown",
        "SidecarInjectorWebhookErrors",
        "SidecarInjectorWebhookSlow",
        "SidecarInjectorInjectionsDenied",
        "SidecarInjectorConfigLoadFailing",
        "SidecarInjectorCertificateExpiringSoon",
        "SidecarInjectorCampaignPaused",
        "SidecarInjectorCampaignBookNearlyFull",
        "SidecarInjectorStalePods",
        "SidecarInjectorRolloutLeaderAbsent",
    ] {
        assert!(names.contains(expected), "no {expected}");
    }

    // Every alert is unit-tested both ways: firing in its case, quiet in another.
    let tests_text =
        std::fs::read_to_string(Path::new(ROOT).join("tests/monitoring/alerts.test.yaml")).unwrap();
    let tests: Value = serde_yaml::from_str(&tests_text).unwrap();
    for name in &names {
        let cases: Vec<&Value> = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
            .filter(|c| c["alertname"] == name.as_str())
            .collect();
        let fires = cases
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
        let quiet = cases
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(fires && quiet, "{name}: fires {fires}, quiet {quiet}");
    }
    std::fs::write(dir.path().join("rules.yaml"), rule_file(false)).unwrap();
    let test_file = dir.path().join("alerts.test.yaml");
    std::fs::write(&test_file, tests_text).unwrap();
    let unit = Command::new(&promtool)
        .args(["test", "rules"])
        .arg(&test_file)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        unit.status.success(),
        "{}{}",
        text(&unit.stdout),
        text(&unit.stderr)
    );
    assert!(
        text(&unit.stdout).contains("SUCCESS"),
        "{}",
        text(&unit.stdout)
    );
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_yaml::Deserializer::from_str(&text(&output.stdout))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn one<'d>(docs: &'d [Value], kind: &str) -> &'d Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{kind}: {found:#?}");
    found[0]
}

fn selects(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| labels[k] == *v)
}

#[test]
fn the_monitoring_component_renders_with_deploy_and_selects_the_injector() {
    let docs = kustomize(&Path::new(ROOT).join("deploy/overlays/monitoring"));
    let service = one(&docs, "Service");
    let deployment = one(&docs, "Deployment");
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
    let rule = one(&docs, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], namespace);
    assert_eq!(rule["spec"], support::prometheus::prometheus_rule()["spec"]);

    let monitor = one(&docs, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["namespace"], namespace);
    assert!(selects(
        &monitor["spec"]["selector"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"][0],
        namespace
    );
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port),
        "the Service has no port {port}"
    );
    assert!(docs.iter().all(|d| d["kind"] != "PodMonitor"));

    let dashboard_map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "sidecar-injector-dashboard")
        .expect("the dashboard ConfigMap");
    assert_eq!(
        dashboard_map["metadata"]["labels"]["grafana_dashboard"],
        "1"
    );
    let shipped: Value = serde_json::from_str(
        dashboard_map["data"]["sidecar-injector.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, dashboard());

    // The PodMonitor variant: a kustomization of a user's, next to the checkout.
    let dir = tempfile::tempdir_in(Path::new(ROOT).join("target")).unwrap();
    let up = "../..";
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [{up}/deploy/base]\n\
             components: [{up}/deploy/components/pdb, {up}/deploy/monitoring, {up}/deploy/monitoring/pod-monitor]\n"
        ),
    )
    .unwrap();
    let docs = kustomize(dir.path());
    assert!(docs.iter().all(|d| d["kind"] != "ServiceMonitor"));
    let pod_monitor = one(&docs, "PodMonitor");
    let template = &one(&docs, "Deployment")["spec"]["template"];
    assert!(selects(
        &pod_monitor["spec"]["selector"],
        &template["metadata"]["labels"]
    ));
    let port = pod_monitor["spec"]["podMetricsEndpoints"][0]["port"]
        .as_str()
        .unwrap();
    assert!(
        template["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port),
        "the injector's container has no port {port}"
    );
}

#[test]
fn the_dashboard_and_the_alerts_show_what_operators_watch() {
    let dashboard = dashboard();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_i64().unwrap()), "panel id twice");
        if panel["type"] != "row" {
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{}: no query", panel["title"]);
            assert!(panel["description"].as_str().is_some_and(|d| !d.is_empty()));
        }
    }
    let mut named = BTreeSet::new();
    for expr in dashboard_exprs(&dashboard) {
        named.extend(metric_names(&expr));
    }
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let sidecar = variables.iter().find(|v| v["name"] == "sidecar").unwrap();
    assert_eq!(
        sidecar["definition"],
        "label_values(sidecar_injector_pods, sidecar)"
    );
    for alert in alert_rules() {
        named.extend(metric_names(alert["expr"].as_str().unwrap()));
    }
    // What the issue lists for the dashboard and the alerts, by the series that show it.
    for expected in [
        "sidecar_injector_pods",
        "sidecar_injector_rollout_campaign",
        "sidecar_injector_rollouts_total",
        "sidecar_injector_admission_requests_total",
        "sidecar_injector_admission_duration_seconds_bucket",
        "sidecar_injector_config_reloads_total",
        "sidecar_injector_certificate_expiration_timestamp_seconds",
        "sidecar_injector_rollout_leader",
    ] {
        assert!(named.contains(expected), "nothing shows {expected}");
    }

    // That each is on a running serve's /metrics is checked end to end, where serve has a
    // cluster, pods and a campaign (a series appears with its first labels).
}
