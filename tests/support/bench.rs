//! What the benches on the real control plane read off the injector and the cluster.

use std::collections::BTreeMap;

use super::injector::Injector;

/// A Deployment of the benches: `replicas` pods of one app container requesting `sidecar`,
/// replaced as `rolling_update` says (`maxUnavailable`, `maxSurge`).
pub fn bench_deployment(
    name: &str,
    replicas: usize,
    sidecar: &str,
    rolling_update: serde_json::Value,
) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update},
            "selector": {"matchLabels": {"app": name}},
            "template": super::e2e::template(name, Some(sidecar))
        }
    }))
    .expect("a Deployment")
}

/// The `injector/revision` item a config's text stamps, computed by the library.
pub fn stamp_of(text: &str) -> String {
    let config = sidecar_injector::config::parse_config("bench", text)
        .unwrap()
        .config;
    sidecar_injector::config::LoadedSidecar::new(config, "bench").stamp
}

/// The drift gauge's count of `sidecar`'s pods in `state`.
pub fn gauge(injector: &Injector, sidecar: &str, state: &str) -> f64 {
    injector.metric(&format!(
        "sidecar_injector_pods{{sidecar=\"{sidecar}\",state=\"{state}\"}}"
    ))
}

/// Every sample of one metric family, keyed by its labels.
pub fn samples(injector: &Injector, name: &str) -> BTreeMap<String, f64> {
    let (_, body) = injector.lifecycle_get("/metrics");
    samples_in(&body, name)
}

/// Every sample of one metric family in a scrape, keyed by its labels.
pub fn samples_in(body: &str, name: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            Some((labels.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The `q` quantile (0.5, 0.99) of the series of a histogram in a scrape whose labels hold
/// `selector` (`update="pods"`; "" for a histogram without labels), as Prometheus'
/// `histogram_quantile` reads it: the upper bound of the bucket it falls in. `None` before
/// any observation.
pub fn quantile(body: &str, histogram: &str, selector: &str, q: f64) -> Option<f64> {
    let buckets: Vec<(f64, f64)> = samples_in(body, &format!("{histogram}_bucket"))
        .into_iter()
        .filter(|(labels, _)| labels.contains(selector))
        .filter_map(|(labels, count)| {
            let le = labels.split("le=\"").nth(1)?.split('"').next()?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((bound, count))
        })
        .collect();
    let mut buckets = buckets;
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total == 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, count)| *count >= q * total)
        .map(|(bound, _)| *bound)
}

/// The resident and peak resident memory of a process, in MiB (`VmRSS`, `VmHWM`).
pub fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The CPU time a process has used so far, user and system, in seconds (`/proc/PID/stat`).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which may hold spaces, start after its `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / per_second
}

/// `ok` or `MISSED`, for a figure beside its target.
pub fn verdict(met: bool) -> &'static str {
    if met { "ok" } else { "MISSED" }
}
