//! Why a campaign paused, in words, with what resumes it or rolls it back: logged, put in
//! Events and notices, shown in the plan, and kept in the book for `status`, `drift` and the
//! revision history.

use crate::rollout::CampaignBook;
use crate::rollout::pause::{Pause, WhilePaused};

use super::{RESUME, roll_back};

/// The setting that holds new pods at the last good revision while a campaign is paused.
const HOLD: &str = "--on-campaign-failure=hold";

/// The words of `pause`, `sidecar`'s campaign.
pub(crate) fn pause_reason(sidecar: &str, pause: &Pause) -> String {
    let new_pods = match &pause.new_pods {
        WhilePaused::HeldAt(good) => {
            format!("new pods get the last good revision {good} meanwhile ({HOLD})")
        }
        WhilePaused::NoGoodRevision => {
            "new pods still get this revision (no good revision of it is remembered to hold them at)"
                .to_owned()
        }
        WhilePaused::NotHeld => "new pods still get this revision".to_owned(),
    };
    let mut named: Vec<String> = pause
        .named
        .iter()
        .map(|(workload, reason)| format!("{workload}: {}", super::failure_reason(reason)))
        .collect();
    if named.is_empty() {
        named.push("their reasons are no longer kept".to_owned());
    } else if pause.failed > named.len() {
        named.push(format!("and {} more", pause.failed - named.len()));
    }
    format!(
        "rollout of {sidecar} {} paused after {} failed workload(s) ({}); {new_pods}: fix or revert the config, roll back with {}, or run {RESUME}",
        pause.revision,
        pause.failed,
        named.join("; "),
        roll_back(sidecar),
    )
}

/// The plan's pauses in words (`plan.paused`).
pub(crate) fn word_pauses(plan: &mut crate::rollout::RolloutPlan) {
    plan.paused = plan
        .pauses
        .iter()
        .map(|(sidecar, pause)| (sidecar.clone(), pause_reason(sidecar, pause)))
        .collect();
}

/// The words of the plan's pauses ([`word_pauses`]) kept in `book`, the engine's, which it
/// writes: what every later reader of a paused campaign shows.
pub(crate) fn keep_pause_words(plan: &crate::rollout::RolloutPlan, book: &mut CampaignBook) {
    for (sidecar, words) in &plan.paused {
        if let Some(campaign) = book.campaigns.get_mut(sidecar) {
            campaign.pause_reason = Some(words.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{WorkloadKind, WorkloadRef};

    fn pause(failed: usize, named: usize, new_pods: WhilePaused) -> Pause {
        Pause {
            revision: "bbbbbbbbbbbb".into(),
            failed,
            named: (0..named)
                .map(|i| {
                    let workload =
                        WorkloadRef::new(WorkloadKind::Deployment, "team", &format!("web-{i}"));
                    (workload, "not rolled out within 5m (0 of 1 updated)".into())
                })
                .collect(),
            new_pods,
        }
    }

    #[test]
    fn a_pause_names_its_failures_what_new_pods_get_and_the_commands_that_end_it() {
        assert_eq!(
            pause_reason(
                "logger:v1",
                &pause(1, 1, WhilePaused::HeldAt("aaaaaaaaaaaa".into()))
            ),
            "rollout of logger:v1 bbbbbbbbbbbb paused after 1 failed workload(s) (Deployment/team/web-0: not rolled out within 5m (0 of 1 updated)); \
             new pods get the last good revision aaaaaaaaaaaa meanwhile (--on-campaign-failure=hold): \
             fix or revert the config, roll back with `sidecar-injector rollout --to logger:v1=previous`, or run `sidecar-injector rollout --resume`"
        );
        let more = pause_reason("logger:v1", &pause(7, 5, WhilePaused::NotHeld));
        assert!(
            more.contains("web-4: not rolled out within 5m (0 of 1 updated); and 2 more); new pods still get this revision: "),
            "{more}"
        );
        let unkept = pause_reason("logger:v1", &pause(2, 0, WhilePaused::NoGoodRevision));
        assert!(
            unkept.contains("(their reasons are no longer kept); new pods still get this revision (no good revision of it is remembered to hold them at): "),
            "{unkept}"
        );
    }

    #[test]
    fn the_words_of_a_pause_are_kept_in_the_book_the_engine_writes() {
        let mut book = CampaignBook::default();
        book.campaigns.insert(
            "logger:v1".into(),
            crate::test_fixtures::campaign(
                "bbbbbbbbbbbb",
                crate::rollout::CampaignState::Paused,
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ),
        );
        let mut plan = crate::rollout::RolloutPlan {
            pauses: vec![("logger:v1".into(), pause(1, 1, WhilePaused::NotHeld))],
            ..Default::default()
        };
        word_pauses(&mut plan);
        keep_pause_words(&plan, &mut book);
        let words = pause_reason("logger:v1", &pause(1, 1, WhilePaused::NotHeld));
        assert_eq!(plan.paused, [("logger:v1".to_owned(), words.clone())]);
        assert_eq!(book.campaigns["logger:v1"].pause_reason, Some(words));
    }
}
