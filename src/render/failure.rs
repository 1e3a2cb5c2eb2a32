//! Why a restart failed, in words: what the book stores, the plan shows and Events, notices
//! and the logs say.

use crate::rollout::{
    CampaignBook, FailedEarlier, Failure, FailureCause, FailureReason, RolloutPlan,
};

/// The failure's reason in words.
pub(crate) fn failure_reason(reason: &FailureReason) -> String {
    match reason {
        FailureReason::Said(words) => words.clone(),
        FailureReason::Found(cause) => failure_cause(cause),
    }
}

fn failure_cause(cause: &FailureCause) -> String {
    match cause {
        FailureCause::NotRolledOut { timeout, progress } => format!(
            "not rolled out within {} ({progress})",
            humantime::format_duration(*timeout)
        ),
        FailureCause::Bake { bake, problem } => format!(
            "within the bake ({}) of rolling out: {problem}",
            humantime::format_duration(*bake)
        ),
        FailureCause::Bypassed {
            uninjected,
            total,
            sidecar,
        } => format!(
            "finished rolling, twice, but {uninjected} of {total} pods were created without {sidecar} (the webhook was bypassed: down, unreachable or too slow, with failurePolicy Ignore)"
        ),
        FailureCause::NotCurrent {
            not_current,
            total,
            sidecar,
            revision,
        } => format!(
            "finished rolling but {not_current} of {total} pods still do not run {sidecar} {revision}"
        ),
        FailureCause::InPlace { reason } => format!("in-place upgrade failed: {reason}"),
        FailureCause::Metric {
            check,
            query,
            threshold,
            reading,
            failures,
            tolerated,
        } => super::check_failure(check, query, *threshold, reading, (*failures, *tolerated)),
        FailureCause::CampaignFailed => "its campaign failed".to_owned(),
    }
}

/// `reason` in the words the book stores.
pub(crate) fn word_reason(reason: &mut FailureReason) {
    if let FailureReason::Found(_) = reason {
        *reason = FailureReason::Said(failure_reason(reason));
    }
}

pub(crate) fn word_failure(failure: &mut Failure) {
    word_reason(&mut failure.reason);
}

/// The failures found in a pass, in the book that keeps them: in words, as it is written.
pub(crate) fn word_book(book: &mut CampaignBook) {
    for campaign in book.campaigns.values_mut() {
        campaign.failures.iter_mut().for_each(word_failure);
        if let Some(reverted) = &mut campaign.reverted {
            word_reason(&mut reverted.reason);
        }
    }
}

/// A workload that failed under the revision in force, left alone: why, and that it stays so.
fn failed_earlier(earlier: &FailedEarlier) -> String {
    let why = earlier.reason.as_ref().map_or_else(
        || {
            format!(
                "its reason is no longer kept: the campaign keeps the latest {}",
                crate::rollout::FAILURE_DETAILS
            )
        },
        failure_reason,
    );
    format!(
        "its restart to {} {} failed ({why}); it is not restarted again under this revision: fix or revert the config",
        earlier.sidecar, earlier.revision
    )
}

/// The plan's failures in words: those found now, and those of earlier passes it leaves.
pub(crate) fn word_failures(plan: &mut RolloutPlan) {
    plan.failed.iter_mut().for_each(word_failure);
    for earlier in &mut plan.failed_earlier {
        earlier.message = failed_earlier(earlier);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::rollout::CampaignState;
    use crate::workload::{WorkloadKind, WorkloadRef};

    fn web() -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::Deployment, "team", "web")
    }

    #[test]
    fn each_cause_is_said_with_its_values() {
        let said = |cause| failure_reason(&FailureReason::Found(cause));
        let cases = [
            (
                FailureCause::NotRolledOut {
                    timeout: Duration::from_secs(300),
                    progress: "0 of 1 updated".into(),
                },
                "not rolled out within 5m (0 of 1 updated)",
            ),
            (
                FailureCause::Bake {
                    bake: Duration::from_secs(30),
                    problem: "pod web-0: container logger (restarted 1 time)".into(),
                },
                "within the bake (30s) of rolling out: pod web-0: container logger (restarted 1 time)",
            ),
            (
                FailureCause::Bypassed {
                    uninjected: 1,
                    total: 1,
                    sidecar: "logger:v1".into(),
                },
                "finished rolling, twice, but 1 of 1 pods were created without logger:v1 (the webhook was bypassed: down, unreachable or too slow, with failurePolicy Ignore)",
            ),
            (
                FailureCause::NotCurrent {
                    not_current: 1,
                    total: 2,
                    sidecar: "logger:v1".into(),
                    revision: "bbbbbbbbbbbb".into(),
                },
                "finished rolling but 1 of 2 pods still do not run logger:v1 bbbbbbbbbbbb",
            ),
            (
                FailureCause::InPlace {
                    reason: "pod web-rs-1: container app restarted".into(),
                },
                "in-place upgrade failed: pod web-rs-1: container app restarted",
            ),
            (FailureCause::CampaignFailed, "its campaign failed"),
        ];
        for (cause, words) in cases {
            assert_eq!(said(cause), words);
        }
    }

    #[test]
    fn the_book_stores_a_found_cause_in_words_and_reads_a_stored_one_back() {
        let mut campaign = crate::test_fixtures::campaign(
            "bbbbbbbbbbbb",
            CampaignState::Paused,
            Time(Timestamp::UNIX_EPOCH),
        );
        campaign.record_failure(Failure {
            workload: web(),
            reason: FailureReason::Found(FailureCause::NotRolledOut {
                timeout: Duration::from_secs(300),
                progress: "0 of 1 updated".into(),
            }),
            at: Time(Timestamp::UNIX_EPOCH),
        });
        let mut book = CampaignBook {
            campaigns: [("logger:v1".to_owned(), campaign)].into(),
            ..Default::default()
        };
        word_book(&mut book);
        let stored: serde_json::Value = serde_json::from_str(&book.encode()).unwrap();
        assert_eq!(
            stored["campaigns"]["logger:v1"]["failures"][0]["reason"],
            "not rolled out within 5m (0 of 1 updated)",
            "the stored format every release reads: the reason in words"
        );
        // A book written by an earlier release: its reasons read back as words.
        let read: CampaignBook = serde_json::from_value(stored).unwrap();
        assert_eq!(
            read.campaigns["logger:v1"].failures[0].reason,
            FailureReason::Said("not rolled out within 5m (0 of 1 updated)".into())
        );
    }

    #[test]
    fn a_workload_failed_earlier_says_why_while_the_reason_is_kept() {
        let kept = FailureReason::Said("not rolled out within 5m (0 of 1 updated)".into());
        let mut plan = RolloutPlan {
            failed_earlier: vec![
                FailedEarlier::new(web(), "logger:v1", "bbbbbbbbbbbb", Some(&kept)),
                FailedEarlier::new(web(), "logger:v1", "bbbbbbbbbbbb", None),
            ],
            ..Default::default()
        };
        word_failures(&mut plan);
        assert_eq!(
            plan.failed_earlier[0].message,
            "its restart to logger:v1 bbbbbbbbbbbb failed (not rolled out within 5m (0 of 1 updated)); it is not restarted again under this revision: fix or revert the config"
        );
        assert!(
            plan.failed_earlier[1]
                .message
                .contains("(its reason is no longer kept: the campaign keeps the latest 20)"),
            "{}",
            plan.failed_earlier[1].message
        );
    }
}
