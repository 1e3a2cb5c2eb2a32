//! Metric checks in words: a reading against its threshold, a failed check, where a bake's
//! checks stand.

use crate::rollout::analysis::{CheckStanding, MetricCheck, Reading, Threshold};

/// `above the max 0.05` / `below the min 10`.
fn crossed(threshold: Threshold) -> String {
    match threshold {
        Threshold::Max(max) => format!("above the max {}", max.0),
        Threshold::Min(min) => format!("below the min {}", min.0),
    }
}

/// `max 0.05` / `min 10`.
fn limit(threshold: Threshold) -> String {
    match threshold {
        Threshold::Max(max) => format!("max {}", max.0),
        Threshold::Min(min) => format!("min {}", min.0),
    }
}

/// What one evaluation of `check` read, against its threshold.
pub(crate) fn check_reading(check: &MetricCheck, reading: &Reading) -> String {
    reading_words(check.threshold(), reading)
}

fn reading_words(threshold: Threshold, reading: &Reading) -> String {
    match reading {
        Reading::Value(value) if threshold.crossed(value.0) => {
            format!("{}, {}", value.0, crossed(threshold))
        }
        Reading::Value(value) => format!("{} ({})", value.0, limit(threshold)),
        Reading::Unknown(why) => format!("no value ({why})"),
    }
}

/// Why a metric check failed a restart: the check, the reading, the threshold and the query.
pub(crate) fn check_failure(
    check: &str,
    query: &str,
    threshold: Threshold,
    reading: &Reading,
    (failures, tolerated): (u32, u32),
) -> String {
    let times = if tolerated == 0 {
        String::new()
    } else {
        format!(" {failures} times ({tolerated} tolerated)")
    };
    format!(
        "metric check {check} failed{times}: {}; query: {query}",
        reading_words(threshold, reading)
    )
}

/// Where a bake's checks stand, for the plan's table: `logger:v1/errors 0.01 (max 0.05)`.
pub(crate) fn checks_standing(checks: &[CheckStanding]) -> String {
    format!("baking; metric checks: {}", each_check(checks))
}

fn each_check(checks: &[CheckStanding]) -> String {
    let each: Vec<String> = checks
        .iter()
        .map(|c| {
            let failures = if c.failures == 0 {
                String::new()
            } else {
                format!(", failed {} of {} tolerated", c.failures, c.tolerated)
            };
            match &c.last {
                Some(reading) => format!(
                    "{} {}{failures}",
                    c.key,
                    reading_words(c.threshold, reading)
                ),
                None => format!("{} not evaluated yet", c.key),
            }
        })
        .collect();
    each.join("; ")
}

/// `status`'s lines under a campaign: each of its baking workloads' checks.
pub(crate) fn campaign_checks(campaign: &crate::rollout::Campaign) -> Vec<String> {
    campaign
        .checks
        .iter()
        .map(|bake| format!("  baking {}: {}", bake.workload, each_check(&bake.checks)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::analysis::Value;

    #[test]
    #[allow(clippy::too_many_lines)] // a test reads as one scenario
    fn a_check_says_its_value_against_its_threshold_and_why_it_has_none() {
        let max = Threshold::Max(Value(0.05));
        assert_eq!(
            reading_words(max, &Reading::Value(Value(0.31))),
            "0.31, above the max 0.05"
        );
        assert_eq!(
            reading_words(max, &Reading::Value(Value(0.01))),
            "0.01 (max 0.05)"
        );
        assert_eq!(
            reading_words(Threshold::Min(Value(10.0)), &Reading::Value(Value(3.0))),
            "3, below the min 10"
        );
        assert_eq!(
            reading_words(max, &Reading::Unknown("no data".into())),
            "no value (no data)"
        );
        assert_eq!(
            check_failure(
                "logger:v1/errors",
                "sum(x)",
                max,
                &Reading::Value(Value(0.31)),
                (1, 0)
            ),
            "metric check logger:v1/errors failed: 0.31, above the max 0.05; query: sum(x)"
        );
        assert_eq!(
            check_failure(
                "logger:v1/errors",
                "sum(x)",
                max,
                &Reading::Unknown("Prometheus is unreachable".into()),
                (3, 2)
            ),
            "metric check logger:v1/errors failed 3 times (2 tolerated): no value (Prometheus is unreachable); query: sum(x)"
        );
        let standing = [
            CheckStanding {
                key: "logger:v1/errors".into(),
                query: "q".into(),
                threshold: max,
                last: Some(Reading::Value(Value(0.01))),
                failures: 0,
                tolerated: 0,
            },
            CheckStanding {
                key: "logger:v1/p99".into(),
                query: "q".into(),
                threshold: Threshold::Max(Value(0.5)),
                last: None,
                failures: 0,
                tolerated: 0,
            },
        ];
        assert_eq!(
            checks_standing(&standing),
            "baking; metric checks: logger:v1/errors 0.01 (max 0.05); logger:v1/p99 not evaluated yet"
        );
        let mut tolerated = standing[0].clone();
        tolerated.failures = 1;
        tolerated.tolerated = 2;
        tolerated.last = Some(Reading::Value(Value(0.2)));
        let mut campaign = crate::test_fixtures::campaign(
            "bbbbbbbbbbbb",
            crate::rollout::CampaignState::Running,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        );
        campaign.checks = vec![crate::rollout::BakeChecks {
            workload: crate::workload::WorkloadRef::new(
                crate::workload::WorkloadKind::Deployment,
                "shop",
                "web",
            ),
            checks: vec![tolerated],
        }];
        assert_eq!(
            campaign_checks(&campaign),
            [
                "  baking Deployment/shop/web: logger:v1/errors 0.2, above the max 0.05, failed 1 of 2 tolerated"
            ]
        );
    }
}
