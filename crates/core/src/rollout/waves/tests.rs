use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::rollout::book::{Campaign, Failure, Promotion};
use crate::workload::{WorkloadKind, WorkloadRef};

const LOGGER: &str = "logger:v1";
const NEW: &str = "bbbbbbbbbbbb";
const BAKE: Duration = Duration::from_secs(600);

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

fn book_with(
    revision: &str,
    state: CampaignState,
    edit: impl FnOnce(&mut Campaign),
) -> CampaignBook {
    crate::test_fixtures::book_of(LOGGER, revision, state, edit)
}

fn web() -> WorkloadRef {
    WorkloadRef {
        kind: WorkloadKind::Deployment,
        namespace: "shop".into(),
        name: "web".into(),
    }
}

#[test]
fn a_campaign_is_done_only_once_complete_and_baked() {
    let complete = book_with(NEW, CampaignState::Complete, |c| {
        c.completed = Some(Time(at(1_000)))
    });
    assert_eq!(
        progress(&complete, LOGGER, NEW, BAKE, at(1_599)),
        Progress::Baking { until: at(1_600) }
    );
    assert_eq!(
        progress(&complete, LOGGER, NEW, BAKE, at(1_600)),
        Progress::Done
    );
    // A book written before `completed` was kept: the bake counts from now.
    let unknown = book_with(NEW, CampaignState::Complete, |_| {});
    assert_eq!(
        progress(&unknown, LOGGER, NEW, BAKE, at(5)),
        Progress::Baking { until: at(605) }
    );
    assert_eq!(
        progress(&unknown, LOGGER, NEW, Duration::ZERO, at(5)),
        Progress::Done
    );
}

#[test]
fn another_revision_or_no_campaign_is_not_progress() {
    let old = book_with("aaaaaaaaaaaa", CampaignState::Complete, |c| {
        c.completed = Some(Time(at(0)))
    });
    assert_eq!(
        progress(&old, LOGGER, NEW, BAKE, at(10_000)),
        Progress::OtherRevision {
            revision: "aaaaaaaaaaaa".into()
        }
    );
    assert_eq!(
        progress(&CampaignBook::default(), LOGGER, NEW, BAKE, at(0)),
        Progress::NoCampaign
    );
}

#[test]
fn a_gated_campaign_says_whether_its_promotion_is_written() {
    let mut book = book_with(NEW, CampaignState::Gated, |_| {});
    assert_eq!(
        progress(&book, LOGGER, NEW, BAKE, at(0)),
        Progress::Gated { promoted: false }
    );
    book.promotions.insert(
        LOGGER.into(),
        Promotion {
            revision: "cccccccccccc".into(),
            by: "someone".into(),
            at: Time(at(0)),
        },
    );
    assert_eq!(
        progress(&book, LOGGER, NEW, BAKE, at(0)),
        Progress::Gated { promoted: false },
        "a promotion of another revision is not this one's"
    );
    book.promotions.get_mut(LOGGER).unwrap().revision = NEW.into();
    assert_eq!(
        progress(&book, LOGGER, NEW, BAKE, at(0)),
        Progress::Gated { promoted: true }
    );
}

#[test]
fn a_failure_names_its_workload_and_reason_until_resumed() {
    let failing = |acknowledged: usize| {
        book_with(NEW, CampaignState::Running, |c| {
            c.record_failure(Failure {
                workload: web(),
                reason: crate::rollout::FailureReason::Said("pods not ready within 60s".into()),
                at: Time(at(1)),
            });
            c.acknowledged_failures = acknowledged;
            c.counts.pending = 3;
        })
    };
    assert_eq!(
        progress(&failing(0), LOGGER, NEW, BAKE, at(2)),
        Progress::Failed {
            workload: Some("Deployment/shop/web".into()),
            reason: "pods not ready within 60s".into()
        }
    );
    assert_eq!(
        progress(&failing(1), LOGGER, NEW, BAKE, at(2)),
        Progress::Rolling {
            state: CampaignState::Running,
            pending: 3,
            rolling: 0
        },
        "a failure cleared by rollout --resume no longer stops the fleet"
    );
    let paused = book_with(NEW, CampaignState::Paused, |c| {
        c.pause_reason = Some("the maintenance window closed".into())
    });
    assert_eq!(
        progress(&paused, LOGGER, NEW, BAKE, at(2)),
        Progress::Failed {
            workload: None,
            reason: "the maintenance window closed".into()
        }
    );
}

fn cluster(name: &str, progress: Result<Progress, String>) -> (String, Result<Progress, String>) {
    (name.to_owned(), progress)
}

#[test]
fn a_wave_promotes_what_waits_and_is_done_when_every_cluster_is() {
    let gated = Progress::Gated { promoted: false };
    let rolling = Progress::Rolling {
        state: CampaignState::Running,
        pending: 1,
        rolling: 1,
    };
    assert_eq!(
        wave_step(&[
            cluster("prod-eu", Ok(gated.clone())),
            cluster("prod-us", Ok(rolling.clone())),
            cluster("prod-ap", Ok(gated.clone())),
        ]),
        WaveStep::Promote(vec!["prod-eu".into(), "prod-ap".into()])
    );
    assert_eq!(
        wave_step(&[
            cluster("prod-eu", Ok(Progress::Done)),
            cluster("prod-us", Ok(rolling))
        ]),
        WaveStep::Wait
    );
    assert_eq!(
        wave_step(&[
            cluster("prod-eu", Ok(Progress::Done)),
            cluster("prod-us", Err("connection refused".into()))
        ]),
        WaveStep::Wait,
        "a cluster not read is not done"
    );
    assert_eq!(
        wave_step(&[
            cluster("prod-eu", Ok(Progress::Done)),
            cluster("prod-us", Ok(Progress::Done))
        ]),
        WaveStep::Done
    );
}

#[test]
fn a_failure_anywhere_in_the_wave_stops_it_before_any_promotion() {
    assert_eq!(
        wave_step(&[
            cluster("prod-eu", Ok(Progress::Gated { promoted: false })),
            cluster(
                "prod-us",
                Ok(Progress::Failed {
                    workload: Some("Deployment/shop/web".into()),
                    reason: "pods not ready".into()
                })
            ),
        ]),
        WaveStep::Stop {
            cluster: "prod-us".into(),
            workload: Some("Deployment/shop/web".into()),
            reason: "pods not ready".into()
        }
    );
}

#[test]
fn the_revision_to_promote_is_the_first_waves_when_they_agree() {
    let at_new = || Ok(book_with(NEW, CampaignState::Gated, |_| {}));
    assert_eq!(
        fleet_revision(
            LOGGER,
            &[("staging".into(), at_new()), ("qa".into(), at_new())]
        ),
        Ok(NEW.to_owned())
    );
    let other = Ok(book_with("aaaaaaaaaaaa", CampaignState::Complete, |_| {}));
    assert_eq!(
        fleet_revision(
            LOGGER,
            &[("staging".into(), at_new()), ("qa".into(), other)]
        )
        .unwrap_err()
        .to_string(),
        format!("its campaigns disagree: staging {NEW}, qa aaaaaaaaaaaa")
    );
    assert_eq!(
        fleet_revision(LOGGER, &[("staging".into(), Err("forbidden".into()))])
            .unwrap_err()
            .to_string(),
        "staging could not be read: forbidden"
    );
    assert_eq!(
        fleet_revision(LOGGER, &[("staging".into(), Ok(CampaignBook::default()))])
            .unwrap_err()
            .to_string(),
        "staging has no campaign of logger:v1"
    );
}

#[test]
fn an_upstream_gate_opens_only_once_every_upstream_cluster_completed_and_baked() {
    let baked = || {
        Ok(book_with(NEW, CampaignState::Complete, |c| {
            c.completed = Some(Time(at(0)))
        }))
    };
    let running = Ok(book_with(NEW, CampaignState::Running, |c| {
        c.counts.pending = 2
    }));
    assert_eq!(
        upstream_verdict(
            LOGGER,
            NEW,
            &[("staging".into(), baked()), ("qa".into(), baked())],
            BAKE,
            at(600)
        ),
        UpstreamVerdict::Promote {
            by: vec!["staging".into(), "qa".into()]
        }
    );
    assert_eq!(
        upstream_verdict(
            LOGGER,
            NEW,
            &[("staging".into(), baked()), ("qa".into(), running)],
            BAKE,
            at(600)
        ),
        UpstreamVerdict::Wait(vec![(
            "qa".into(),
            Ok(Progress::Rolling {
                state: CampaignState::Running,
                pending: 2,
                rolling: 0
            })
        )])
    );
    assert_eq!(
        upstream_verdict(LOGGER, NEW, &[("staging".into(), baked())], BAKE, at(599)),
        UpstreamVerdict::Wait(vec![(
            "staging".into(),
            Ok(Progress::Baking { until: at(600) })
        )])
    );
    assert_eq!(
        upstream_verdict(
            LOGGER,
            NEW,
            &[("staging".into(), Err("forbidden".into()))],
            BAKE,
            at(600)
        ),
        UpstreamVerdict::Wait(vec![("staging".into(), Err("forbidden".into()))])
    );
    // Upstream completed another revision: not this one's proof.
    assert_eq!(
        upstream_verdict(
            LOGGER,
            "cccccccccccc",
            &[("staging".into(), baked())],
            BAKE,
            at(600)
        ),
        UpstreamVerdict::Wait(vec![(
            "staging".into(),
            Ok(Progress::OtherRevision {
                revision: NEW.into()
            })
        )])
    );
    assert_eq!(
        upstream_verdict(LOGGER, NEW, &[], BAKE, at(600)),
        UpstreamVerdict::Wait(Vec::new())
    );
}
