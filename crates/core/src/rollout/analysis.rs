//! Metric checks of a bake: PromQL queries a sidecar config names in its rollout policy,
//! filled in for the workload being baked, whose values decide with its pods' health whether
//! the restart passes. The core fills the queries, reads Prometheus's answers and judges them;
//! the shell only sends the queries.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::workload::WorkloadRef;

/// One check, as a config's `rollout.checks` writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricCheck {
    /// Names the check in reasons, the plan and the metrics; unique within the config.
    pub name: String,
    /// A built-in query: `http-error-ratio`, `http-p99-latency`, `sidecar-restarts`,
    /// `sidecar-cpu-throttling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<BuiltIn>,
    /// A PromQL query of one's own, with the placeholders of [`fill`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The check fails when the value is above this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Value>,
    /// The check fails when the value is below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Value>,
    /// How often it is evaluated within the bake (and the `{{interval}}` of its query).
    #[serde(default = "default_interval", with = "humantime_serde_duration")]
    pub interval: Duration,
    /// How many failed evaluations a bake tolerates before the restart fails.
    #[serde(default)]
    pub failures_tolerated: u32,
    /// What an evaluation that gives no value (Prometheus unreachable, a query error, no
    /// data) does.
    #[serde(default)]
    pub when_unknown: WhenUnknown,
}

fn default_interval() -> Duration {
    Duration::from_secs(30)
}

mod humantime_serde_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|err| {
            serde::de::Error::custom(format!("{text:?} is not a duration such as 30s: {err}"))
        })
    }
}

/// The built-in queries, for what a sidecar usually breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuiltIn {
    /// The share of the workload's HTTP requests answered 5xx (`http_requests_total` with a
    /// `code` label, as most exporters and the Prometheus client libraries name it).
    HttpErrorRatio,
    /// The workload's p99 request latency in seconds
    /// (`http_request_duration_seconds_bucket`).
    HttpP99Latency,
    /// Restarts of the sidecar's containers (kube-state-metrics).
    SidecarRestarts,
    /// The share of CPU periods in which the sidecar's containers were throttled (cAdvisor).
    SidecarCpuThrottling,
}

impl BuiltIn {
    /// Its PromQL, with the placeholders of [`fill`].
    pub fn query(self) -> &'static str {
        match self {
            BuiltIn::HttpErrorRatio => {
                r#"sum(rate(http_requests_total{namespace="{{namespace}}",pod=~"{{pods}}",code=~"5.."}[{{interval}}])) / sum(rate(http_requests_total{namespace="{{namespace}}",pod=~"{{pods}}"}[{{interval}}]))"#
            }
            BuiltIn::HttpP99Latency => {
                r#"histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{namespace="{{namespace}}",pod=~"{{pods}}"}[{{interval}}])))"#
            }
            BuiltIn::SidecarRestarts => {
                r#"sum(increase(kube_pod_container_status_restarts_total{namespace="{{namespace}}",pod=~"{{pods}}",container=~"{{containers}}"}[{{interval}}]))"#
            }
            BuiltIn::SidecarCpuThrottling => {
                r#"sum(rate(container_cpu_cfs_throttled_periods_total{namespace="{{namespace}}",pod=~"{{pods}}",container=~"{{containers}}"}[{{interval}}])) / sum(rate(container_cpu_cfs_periods_total{namespace="{{namespace}}",pod=~"{{pods}}",container=~"{{containers}}"}[{{interval}}]))"#
            }
        }
    }
}

/// What fails a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Threshold {
    Max(Value),
    Min(Value),
}

impl Threshold {
    /// Whether `value` fails it.
    pub fn crossed(self, value: f64) -> bool {
        match self {
            Threshold::Max(max) => value > max.0,
            Threshold::Min(min) => value < min.0,
        }
    }
}

/// What an evaluation with no value does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenUnknown {
    /// The bake waits (and says why) until a value comes; the campaign goes no further.
    #[default]
    Wait,
    /// It counts as a failed evaluation.
    Fail,
}

/// Why a check as written cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("check {0:?}: give a template or a query, not both and not neither")]
    TemplateOrQuery(String),
    #[error("check {0:?}: give max (fail above) or min (fail below), one of them")]
    MaxOrMin(String),
    #[error("check {0:?}: the interval must be at least one second")]
    Interval(String),
    #[error("checks: the name {0:?} is given twice")]
    Duplicate(String),
    #[error("check {name:?}: unknown placeholder {{{{{placeholder}}}}} (known: {known})")]
    Placeholder {
        name: String,
        placeholder: String,
        known: String,
    },
}

/// The placeholders a query may use.
const PLACEHOLDERS: [&str; 6] = [
    "namespace",
    "name",
    "kind",
    "pods",
    "containers",
    "interval",
];

impl MetricCheck {
    /// Its query before filling.
    pub fn template_text(&self) -> &str {
        match (&self.query, self.template) {
            (Some(query), _) => query,
            (None, Some(built_in)) => built_in.query(),
            (None, None) => "",
        }
    }

    /// What fails it (checked by [`validate`]).
    pub fn threshold(&self) -> Threshold {
        match (self.max, self.min) {
            (Some(max), _) => Threshold::Max(max),
            (None, Some(min)) => Threshold::Min(min),
            (None, None) => Threshold::Max(Value(f64::INFINITY)),
        }
    }

    /// How `reading` counts.
    pub fn judge(&self, reading: &Reading) -> Outcome {
        match reading {
            Reading::Value(value) if self.threshold().crossed(value.0) => Outcome::Fail,
            Reading::Value(_) => Outcome::Pass,
            Reading::Unknown(_) => match self.when_unknown {
                WhenUnknown::Wait => Outcome::Unknown,
                WhenUnknown::Fail => Outcome::Fail,
            },
        }
    }
}

/// The checks of a config, each usable, names unique.
pub fn validate(checks: &[MetricCheck]) -> Result<(), CheckError> {
    let mut names = std::collections::BTreeSet::new();
    for check in checks {
        let name = || check.name.clone();
        if check.template.is_some() == check.query.is_some() {
            return Err(CheckError::TemplateOrQuery(name()));
        }
        if check.max.is_some() == check.min.is_some() {
            return Err(CheckError::MaxOrMin(name()));
        }
        if check.interval < Duration::from_secs(1) {
            return Err(CheckError::Interval(name()));
        }
        if !names.insert(check.name.as_str()) {
            return Err(CheckError::Duplicate(name()));
        }
        let mut rest = check.template_text();
        while let Some(start) = rest.find("{{") {
            let tail = &rest[start + 2..];
            let end = tail.find("}}").unwrap_or(tail.len());
            let placeholder = tail[..end].trim();
            if !PLACEHOLDERS.contains(&placeholder) {
                return Err(CheckError::Placeholder {
                    name: name(),
                    placeholder: placeholder.to_owned(),
                    known: PLACEHOLDERS.join(", "),
                });
            }
            rest = &tail[end.min(tail.len())..];
        }
    }
    Ok(())
}

/// What a query is filled in with: the workload baked, its pods, the sidecar's containers.
#[derive(Clone, Debug)]
pub struct Subject<'a> {
    pub workload: &'a WorkloadRef,
    pub pods: &'a [String],
    pub containers: &'a [String],
}

/// `check`'s query for `subject`: `{{namespace}}`, `{{name}}` and `{{kind}}` of the workload,
/// `{{pods}}` and `{{containers}}` as regular expressions matching exactly its pods and the
/// sidecar's containers (for `=~`), and `{{interval}}` as a PromQL duration.
pub fn fill(check: &MetricCheck, subject: &Subject<'_>) -> String {
    let alternation = |names: &[String]| {
        if names.is_empty() {
            // Matches nothing: a query about no pod has no data, never every pod's.
            return "$^".to_owned();
        }
        names
            .iter()
            .map(|n| n.replace('.', "\\\\."))
            .collect::<Vec<_>>()
            .join("|")
    };
    check
        .template_text()
        .replace("{{namespace}}", &subject.workload.namespace)
        .replace("{{name}}", &subject.workload.name)
        .replace("{{kind}}", subject.workload.kind.as_str())
        .replace("{{pods}}", &alternation(subject.pods))
        .replace("{{containers}}", &alternation(subject.containers))
        .replace("{{interval}}", &format!("{}s", check.interval.as_secs()))
}

/// A sample's value; compared bit for bit, so that plans holding one compare as values.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Value(pub f64);

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Value {}

/// What one evaluation gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reading {
    Value(Value),
    /// No value, and why: Prometheus unreachable, a query error, no data.
    Unknown(String),
}

/// How an evaluation counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Pass,
    Fail,
    Unknown,
}

/// Prometheus's answer to an instant query (`/api/v1/query`), as a reading: one value, from a
/// scalar or a vector of one series. No series, or NaN (a ratio with no traffic), is no data;
/// several series are an error of the query, which must aggregate them to one.
pub fn reading_of(answer: &serde_json::Value) -> Reading {
    if answer["status"] != "success" {
        let error = answer["error"].as_str().unwrap_or("no error given");
        return Reading::Unknown(format!("the query failed: {error}"));
    }
    let data = &answer["data"];
    let sample = match data["resultType"].as_str() {
        Some("scalar") => &data["result"],
        Some("vector") => match data["result"].as_array().map(Vec::as_slice) {
            Some([]) | None => return Reading::Unknown("no data".to_owned()),
            Some([one]) => &one["value"],
            Some(many) => {
                return Reading::Unknown(format!(
                    "the query returns {} series: aggregate them to one (sum, max)",
                    many.len()
                ));
            }
        },
        other => {
            return Reading::Unknown(format!(
                "the query returns a {}, not a number",
                other.unwrap_or("nothing")
            ));
        }
    };
    match sample[1].as_str().map(str::parse::<f64>) {
        Some(Ok(value)) if value.is_nan() => Reading::Unknown("no data (NaN)".to_owned()),
        Some(Ok(value)) => Reading::Value(Value(value)),
        _ => Reading::Unknown(format!("unreadable sample {sample}")),
    }
}

/// Where one check of a bake stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckRecord {
    /// When it was last evaluated, and what that gave.
    pub last: Option<(k8s_openapi::jiff::Timestamp, Reading)>,
    /// Failed evaluations so far in the bake.
    pub failures: u32,
}

/// A bake's checks by key (`SIDECAR/CHECK`).
pub type CheckRecords = BTreeMap<String, CheckRecord>;

/// A check to evaluate now, for a bake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricQuery {
    pub workload: WorkloadRef,
    /// `SIDECAR/CHECK`.
    pub key: String,
    pub check: MetricCheck,
    /// Filled in.
    pub query: String,
}

/// Where a check of a baking workload stands, for the plan, `status` and `explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckStanding {
    /// `SIDECAR/CHECK`.
    pub key: String,
    /// Filled in (empty where the book keeps it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query: String,
    pub threshold: Threshold,
    /// The last evaluation's reading, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Reading>,
    pub failures: u32,
    pub tolerated: u32,
}

/// What a bake's checks say at `now`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChecksVerdict {
    /// The first check that failed more often than it tolerates, with its record.
    pub failed: Option<(String, CheckRecord)>,
    /// The checks to evaluate now.
    pub due: Vec<String>,
    /// When the next one falls due, if none is due now.
    pub next: Option<k8s_openapi::jiff::Timestamp>,
    /// Every check has a reading taken at or after the bake's end that is not unknown: the
    /// checks let the bake pass.
    pub passed: bool,
}

/// The checks of a bake from `since` that ends at `ends`, by key, judged at `now` from their
/// `records`: each is evaluated at the bake's start, every interval within it, and once at or
/// after its end; a check that failed more often than it tolerates fails the bake, and one
/// that ends unknown (`whenUnknown: wait`) keeps it waiting, evaluated every interval.
pub fn judge_checks<'c>(
    checks: impl IntoIterator<Item = (String, &'c MetricCheck)>,
    records: &CheckRecords,
    ends: k8s_openapi::jiff::Timestamp,
    now: k8s_openapi::jiff::Timestamp,
) -> ChecksVerdict {
    let mut verdict = ChecksVerdict {
        passed: true,
        ..ChecksVerdict::default()
    };
    for (key, check) in checks {
        let record = records.get(&key).cloned().unwrap_or_default();
        if record.failures > check.failures_tolerated {
            verdict.failed.get_or_insert((key, record));
            continue;
        }
        let Some((at, reading)) = &record.last else {
            verdict.passed = false;
            verdict.due.push(key);
            continue;
        };
        let ended = *at >= ends;
        let unknown = check.judge(reading) == Outcome::Unknown;
        if !ended || unknown {
            verdict.passed = false;
        }
        let next = crate::rollout::after(*at, check.interval);
        // Past the end, a reading from before it is due again at once; an unknown one waits
        // for its interval.
        let due_at = if ended && unknown {
            next
        } else if ended {
            continue;
        } else {
            next.min(ends)
        };
        if due_at <= now {
            verdict.due.push(key);
        } else {
            verdict.next = Some(verdict.next.map_or(due_at, |n| n.min(due_at)));
        }
    }
    if verdict.failed.is_some() {
        verdict.passed = false;
    }
    verdict
}

/// A bake's record of `check` once an evaluation read `reading` at `at`.
pub fn record(
    records: &mut CheckRecords,
    key: &str,
    check: &MetricCheck,
    reading: Reading,
    at: k8s_openapi::jiff::Timestamp,
) {
    let record = records.entry(key.to_owned()).or_default();
    if check.judge(&reading) == Outcome::Fail {
        record.failures += 1;
    }
    record.last = Some((at, reading));
}

#[cfg(test)]
mod tests;
