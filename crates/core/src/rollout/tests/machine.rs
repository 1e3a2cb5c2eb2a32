//! The state machine driven with values: what the executor's memory used to decide (what it
//! remembers of each restart, when it lets go, which pod goes next, what it says) is decided
//! by `RolloutState::step` and its `on_*` transitions, and checked here without an API.

use std::collections::BTreeSet;

use super::*;
use crate::drift::PodToReplace;
use crate::rollout::eviction::BlockNews;
use crate::rollout::journal::Said;
use crate::rollout::machine::{Conduct, Effect, Observed, Step};
use crate::workload::RestartMethod;

impl World {
    /// One step of the state machine on this world, as the engine makes it.
    fn machine(&mut self, conduct: Conduct) -> Step {
        self.machine_with(conduct, &BTreeSet::new())
    }

    fn machine_with(&mut self, conduct: Conduct, bakes_changed: &BTreeSet<WorkloadRef>) -> Step {
        let wanted: RevisionsInForce = self
            .targets
            .iter()
            .map(|(k, t)| (k.clone(), t.revision.clone()))
            .collect();
        let report = self.index.classify_revisions(&wanted, &self.policy);
        let index = &self.index;
        let stale_pods = |w: &WorkloadRef| {
            index.pods_needing_restart(
                w.controller_kind().unwrap(),
                &w.namespace,
                &w.name,
                &wanted,
                false,
            )
        };
        let observed = Observed {
            report: &report,
            index,
            targets: &self.targets,
            settings: &self.settings,
            history: &self.history,
            stale_pods: &stale_pods,
            restart_reason: None,
            bakes_changed,
            served: None,
        };
        self.state.step(&observed, self.now, conduct)
    }
}

const ACT: Conduct = Conduct::Act { record: true };

fn web() -> WorkloadRef {
    WorkloadRef::new(WorkloadKind::Deployment, "team", "web")
}

fn db() -> WorkloadRef {
    WorkloadRef::new(WorkloadKind::StatefulSet, "team", "db")
}

fn patches(step: &Step) -> Vec<&Restart> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::PatchTemplate(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn evicted(step: &Step) -> Vec<&str> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::EvictPod { pod, .. } => Some(pod.name.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_template_restart_is_remembered_until_its_outcome_and_reported_once() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.deployment("web", 1, Some(OLD));
    let step = world.machine(ACT);
    let restarts = patches(&step);
    assert_eq!(restarts.len(), 1, "{:#?}", step.effects);
    assert!(
        world.state.awaiting_success.is_empty(),
        "nothing awaited until patched"
    );
    assert_eq!(step.effects.last(), Some(&Effect::WriteStatus));
    let restart = restarts[0].clone();
    world.state.on_restarted(&restart);
    assert_eq!(
        world.state.stamped.get(&web()),
        restart.target.as_ref(),
        "the stamp it wrote"
    );
    assert!(world.state.awaiting_success.contains(&web()));

    world.patched("web", world.now);
    world.now = at(7210);
    world.rolled("web", 1);
    let step = world.machine(ACT);
    assert!(
        step.effects.contains(&Effect::Succeeded(web())),
        "{:#?}",
        step.effects
    );
    assert!(
        world.state.stamped.is_empty(),
        "a stamp matters until the outcome"
    );
    assert!(world.state.awaiting_success.is_empty());
    // Reported once: the next step says nothing more of it.
    let step = world.machine(ACT);
    assert!(!step.effects.contains(&Effect::Succeeded(web())));
}

#[test]
fn a_workload_seen_finished_yet_not_current_keeps_the_moment_it_was_first_seen() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    world.patched("web", at(7100));
    let mut entry = world.entry("web");
    entry.observed_generation = entry.generation;
    world.set_entry("web", entry);
    world.machine(ACT);
    assert_eq!(world.state.finished_since.get(&web()), Some(&at(7200)));
    world.now = at(7203);
    assert!(
        world.machine(ACT).plan.failed.is_empty(),
        "within the grace"
    );
    assert_eq!(world.state.finished_since.get(&web()), Some(&at(7200)));
    // The grace runs from the first sighting: it ends 5 s after it, not after the last.
    world.now = at(7205);
    let step = world.machine(ACT);
    assert_eq!(step.plan.failed.len(), 1, "{:#?}", step.plan);
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::Failed { ours: false, .. })),
        "said, though not this process's restart"
    );
    assert!(world.state.finished_since.is_empty());
}

#[test]
fn a_restart_by_eviction_begins_in_the_step_and_is_let_go_once_its_workload_no_longer_rolls() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.restart_method = RestartMethod::Evict;
    world.deployment("web", 2, Some(OLD));
    let step = world.machine(ACT);
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::PodByPodStarted(r) if r.workload == web())),
        "{:#?}",
        step.effects
    );
    assert!(patches(&step).is_empty(), "the template is never written");
    assert_eq!(
        step.wake_at,
        Some(world.now),
        "its first pod is due at once"
    );
    let restart = &world.state.evicting[&web()];
    assert_eq!((restart.since, restart.in_place), (at(7200), false));
    assert!(world.state.awaiting_success.contains(&web()));

    // The next step evicts its last stale pod, then the next only once that one is gone.
    let step = world.machine(ACT);
    assert_eq!(evicted(&step), ["web-rs-1"]);
    let due = world.state.on_evicted(
        &web(),
        PodToReplace::at("web-rs-1", &format!("{LOGGER}={OLD}")),
        at(7200),
    );
    assert_eq!(due, at(7202), "spaced");
    world.now = at(7203);
    assert!(
        evicted(&world.machine(ACT)).is_empty(),
        "web-rs-1 still there"
    );
    world.index.delete_pod("team", "web-rs-1");
    assert_eq!(evicted(&world.machine(ACT)), ["web-rs-0"]);

    // Its pods current: it rolls no more, and the state lets go of it.
    world.rolled("web", 2);
    let step = world.machine(ACT);
    assert!(
        step.effects.contains(&Effect::Succeeded(web())),
        "{:#?}",
        step.effects
    );
    assert!(world.state.evicting.is_empty() && world.state.evictions.is_empty());
}

#[test]
fn an_on_delete_workload_evicts_one_pod_at_a_time_and_says_a_refusal_once_then_when_overdue() {
    let mut world = World::new();
    world.settings.eviction_timeout = Duration::from_secs(120);
    world.statefulset(
        "db",
        2,
        OLD,
        WorkloadEntry {
            update_strategy: UpdateStrategy::OnDelete,
            ..healthy(2)
        },
    );
    let step = world.machine(ACT);
    let restart = patches(&step)[0].clone();
    world.state.on_restarted(&restart);
    let mut entry = world
        .index
        .workload(WorkloadKind::StatefulSet, "team", "db")
        .unwrap()
        .clone();
    entry.rollout_revision = restart.target.as_ref().map(|t| t.as_str().into());
    entry.rolled_at = Some(world.now);
    world
        .index
        .apply_workload_entry(WorkloadKind::StatefulSet, "team", "db", entry);
    assert_eq!(evicted(&world.machine(ACT)), ["db-1"]);

    let timeout = world.settings.eviction_timeout;
    let (news, retry) = world.state.on_eviction_blocked(&db(), at(7200), timeout);
    assert_eq!((news, retry), (BlockNews::First, at(7205)));
    let (news, _) = world.state.on_eviction_blocked(&db(), at(7260), timeout);
    assert_eq!(news, BlockNews::Quiet);
    let (news, retry) = world.state.on_eviction_blocked(&db(), at(7320), timeout);
    assert_eq!(
        (news, retry),
        (
            BlockNews::Overdue {
                blocked_for: Duration::from_secs(120)
            },
            at(7350)
        )
    );
    // Evicted at last: the refusal is over.
    world.state.on_evicted(
        &db(),
        PodToReplace::at("db-1", &format!("{LOGGER}={OLD}")),
        at(7330),
    );
    assert!(world.state.blocked.is_empty());
    assert_eq!(world.state.evictions[&db()].at, at(7330));
}

#[test]
fn a_bake_is_kept_while_its_workload_rolls_its_reads_asked_and_its_problem_fails_it() {
    let mut world = World::new();
    world.settings.bake = Duration::from_secs(30);
    world.settings.canary = 0;
    world.deployment("web", 1, Some(OLD));
    let restart = patches(&world.machine(ACT))[0].clone();
    world.state.on_restarted(&restart);
    world.patched("web", at(7200));
    world.now = at(7210);
    world.rolled("web", 1);
    let step = world.machine(ACT);
    assert!(step.effects.contains(&Effect::BakeStarted(web())));
    assert_eq!(world.state.baking[&web()].since, at(7210));
    assert!(world.state.bake_open(&web()));

    // Its health drops and the watch saw its pods change: their read is asked for...
    world.now = at(7220);
    let mut entry = world.entry("web");
    entry.ready_replicas = Some(0);
    entry.available_replicas = Some(0);
    world.set_entry("web", entry);
    let step = world.machine_with(ACT, &BTreeSet::from([web()]));
    assert!(
        step.effects.contains(&Effect::ReadBake {
            workload: web(),
            pods: vec!["web-rs2-0".to_owned()]
        }),
        "{:#?}",
        step.effects
    );
    // ...which finds a crash: the next step fails it, and the bake is closed.
    let problem = "pod web-rs2-0: container logger (restarted 1 time)".to_owned();
    let wake = world.state.on_bake_read(&web(), &[problem], at(7220));
    assert_eq!(wake, Some(at(7220)), "the next plan comes at once");
    assert!(!world.state.bake_open(&web()));
    let step = world.machine(ACT);
    assert_eq!(step.plan.failed.len(), 1, "{:#?}", step.plan);
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::Failed { ours: true, .. }))
    );
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::Paused { workloads, .. } if workloads == &[web()]))
    );
}

#[test]
fn a_restarted_workload_deleted_mid_rollout_ends_gone_and_its_stamp_is_dropped() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.deployment("web", 1, Some(OLD));
    let restart = patches(&world.machine(ACT))[0].clone();
    world.state.on_restarted(&restart);
    world.index.delete_pod("team", "web-rs-0");
    world
        .index
        .delete_workload(WorkloadKind::Deployment, "team", "web");
    let step = world.machine(ACT);
    assert!(
        step.effects.contains(&Effect::Gone(web())),
        "{:#?}",
        step.effects
    );
    assert!(world.state.stamped.is_empty() && world.state.awaiting_success.is_empty());
}

#[test]
fn only_a_process_that_acts_carries_the_book_forward_and_only_a_dry_run_says_its_plan() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.deployment("web", 1, Some(OLD));
    world.target(LOGGER, "cccccccccccc");
    let before = world.state.book.clone();
    let step = world.machine(Conduct::Plan { follow_bakes: true });
    assert!(step.effects.is_empty(), "{:#?}", step.effects);
    assert_eq!(
        world.state.book, before,
        "a replica without the Lease keeps its book"
    );
    assert_ne!(step.plan.book, before, "the plan settles the new revision");

    let step = world.machine(Conduct::DryRun);
    assert_eq!(world.state.book, step.plan.book);
    assert!(
        step.effects
            .iter()
            .all(|e| matches!(e, Effect::Say(line) if matches!(
                line.said,
                Said::DryRunChanged { .. } | Said::WouldRestart { .. } | Said::WouldWait(_)
            ))),
        "{:#?}",
        step.effects
    );
    assert!(!step.effects.is_empty());

    let step = world.machine(Conduct::Act { record: false });
    assert!(
        !step.effects.contains(&Effect::WriteStatus),
        "a selection's campaign is its own"
    );
}

#[test]
fn an_upgrade_in_place_under_way_holds_its_workload_until_read_done_then_the_next_pod_goes() {
    use crate::rollout::machine::UpgradeNews;
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.history = history_old_new("image");
    world.deployment("web", 2, Some(OLD));
    world.machine(ACT);
    assert!(world.state.evicting[&web()].in_place);
    let step = world.machine(ACT);
    let picked: Vec<&str> = step
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::UpgradePod {
                pod, heal: false, ..
            } => Some(pod.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(picked, ["web-rs-1"], "{:#?}", step.effects);

    let upgrade = |pod: &str, uid: &str| crate::rollout::in_place::InPlaceUpgrade {
        namespace: "team".into(),
        pod: pod.into(),
        uid: uid.into(),
        upgraded: BTreeMap::new(),
        images: BTreeMap::new(),
        resized: BTreeMap::new(),
        before: BTreeMap::new(),
        others: BTreeMap::new(),
        min_ready: Duration::ZERO,
        generation: None,
    };
    let upgrades = |step: &Step| -> Vec<String> {
        step.effects
            .iter()
            .filter_map(|e| match e {
                Effect::UpgradePod { pod, .. } => Some(pod.name.clone()),
                _ => None,
            })
            .collect()
    };
    world
        .state
        .on_upgrade_started(&web(), upgrade("web-rs-1", "uid-1"));
    let step = world.machine(ACT);
    assert!(
        world.state.evicting[&web()].upgrading,
        "the planner is told"
    );
    assert!(upgrades(&step).is_empty(), "one pod at a time");

    // Read gone (a scale-down): done, and the workload is free for its next pod.
    let news = world.state.on_upgrade_read(&web(), None, at(7200));
    assert_eq!(news, Some(UpgradeNews::Done));
    assert!(world.state.upgrades.is_empty());
    assert!(world.state.upgraded_baseline(&web(), "uid-1").is_some());
    let current = World::pod("team", "web-rs-1", Some(&format!("{LOGGER}={NEW}")))
        .owner("ReplicaSet", "web-rs")
        .0;
    world.index.apply_pod(&current, &world.keys);
    let step = world.machine(ACT);
    assert_eq!(upgrades(&step), ["web-rs-0"]);
    assert!(!world.state.evicting[&web()].upgrading);

    // Replaced under its upgrade: failed, and the restart fails with it at the next plan.
    world
        .state
        .on_upgrade_started(&web(), upgrade("web-rs-0", "uid-0"));
    let replaced = k8s_openapi::api::core::v1::Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some("another".into()),
            ..crate::test_fixtures::PodMeta::new("team", "web-rs-0").0
        },
        ..Default::default()
    };
    let news = world
        .state
        .on_upgrade_read(&web(), Some(&replaced), at(7201));
    assert!(
        matches!(&news, Some(UpgradeNews::Failed(why)) if why.contains("was replaced")),
        "{news:?}"
    );
    assert!(world.state.upgrades.is_empty());
    let step = world.machine(ACT);
    assert!(
        step.effects.iter().any(|e| matches!(e, Effect::Failed { failure, ours: true } if matches!(failure.reason, FailureReason::Found(FailureCause::InPlace { .. })))),
        "{:#?}",
        step.effects
    );
}

#[test]
fn a_resize_the_api_server_refuses_for_the_node_fails_the_restart_and_no_other_pod_goes() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.history = history_old_new("memory");
    world.deployment("web", 2, Some(OLD));
    world.machine(ACT);
    assert!(world.state.evicting[&web()].in_place);
    let reason = "pod web-rs-1: the API server refused to resize logger: node didn't have enough allocatable resources";
    world.state.on_upgrade_refused(&web(), reason.into());
    let step = world.machine(ACT);
    assert!(
        step.effects.iter().any(|e| matches!(e, Effect::Failed { failure, ours: true }
            if failure.reason == FailureReason::Found(FailureCause::InPlace { reason: reason.into() }))),
        "{:#?}",
        step.effects
    );
    assert!(
        !step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::UpgradePod { .. } | Effect::EvictPod { .. })),
        "{:#?}",
        step.effects
    );
}

fn evaluations(step: &Step) -> Vec<&crate::rollout::analysis::MetricQuery> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::EvaluateCheck(query) => Some(query),
            _ => None,
        })
        .collect()
}

/// A world whose logger config has an error-ratio check, its canary `web` and `api` after it,
/// with `web` rolled out and its bake (of `bake`) begun at 7210.
fn baking_with_a_check(bake: u64, check: &str) -> World {
    let mut world = World::new();
    world.settings.bake = Duration::from_secs(bake);
    let target = world.targets.get_mut(LOGGER).unwrap();
    target.checks = vec![serde_yaml::from_str(check).unwrap()];
    world
        .deployment("web", 1, Some(OLD))
        .deployment("worker", 1, Some(OLD));
    let restart = patches(&world.machine(ACT))[0].clone();
    assert_eq!(restart.workload, web(), "web is the canary");
    world.state.on_restarted(&restart);
    world.patched("web", at(7200));
    world.now = at(7210);
    world.rolled("web", 1);
    let step = world.machine(ACT);
    assert!(step.effects.contains(&Effect::BakeStarted(web())));
    world
}

#[test]
fn a_canary_whose_metric_check_fails_within_its_bake_fails_and_pauses_the_campaign() {
    let mut world = baking_with_a_check(
        60,
        "{name: errors, query: 'max(errors{pod=~\"{{pods}}\"})', max: 0.05, interval: 10s}",
    );
    // The bake began: the check is evaluated at once, for the canary's pods.
    let step = world.machine(ACT);
    let queries = evaluations(&step);
    assert_eq!(queries.len(), 1, "{:#?}", step.effects);
    assert_eq!(queries[0].key, format!("{LOGGER}/errors"));
    assert_eq!(queries[0].query, r#"max(errors{pod=~"web-rs2-0"})"#);
    let query = queries[0].clone();
    let rolling = &step.plan.rolling[0];
    assert_eq!((rolling.workload.clone(), rolling.checks.len()), (web(), 1));
    use crate::rollout::analysis::{Reading, Value};
    assert_eq!(
        world
            .state
            .on_check_read(&query, Reading::Value(Value(0.01)), at(7210)),
        Some(at(7210))
    );
    let step = world.machine(ACT);
    assert!(evaluations(&step).is_empty(), "not due before its interval");
    assert_eq!(step.plan.wake_at, Some(at(7220)));
    assert_eq!(
        step.plan.rolling[0].checks[0].last,
        Some(Reading::Value(Value(0.01)))
    );

    // Ten seconds on, the canary's error ratio is 0.31: it fails, the campaign pauses before
    // worker, and the failure names the check, its value, its max and its query.
    world.now = at(7220);
    let query = evaluations(&world.machine(ACT))[0].clone();
    world
        .state
        .on_check_read(&query, Reading::Value(Value(0.31)), at(7220));
    let step = world.machine(ACT);
    assert_eq!(step.plan.failed.len(), 1, "{:#?}", step.plan);
    assert_eq!(
        step.plan.failed[0].reason,
        FailureReason::Found(FailureCause::Metric {
            check: format!("{LOGGER}/errors"),
            query: r#"max(errors{pod=~"web-rs2-0"})"#.into(),
            threshold: crate::rollout::analysis::Threshold::Max(Value(0.05)),
            reading: Reading::Value(Value(0.31)),
            failures: 1,
            tolerated: 0,
        })
    );
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::Paused { workloads, .. } if workloads == &[web()]))
    );
    assert!(patches(&step).is_empty(), "worker is never restarted");
}

#[test]
fn a_canary_whose_checks_pass_to_the_end_succeeds_and_one_with_no_value_waits() {
    use crate::rollout::analysis::{Reading, Value};
    // Checks bake a workload even with --bake 0s: once, at once.
    let mut world = baking_with_a_check(0, "{name: errors, query: up, max: 0.05}");
    let step = world.machine(ACT);
    let query = evaluations(&step)[0].clone();
    assert!(step.plan.succeeded.is_empty());
    world.state.on_bake_read(&web(), &[], at(7210));
    world.state.on_check_read(
        &query,
        Reading::Unknown("Prometheus is unreachable".into()),
        at(7210),
    );
    // No value, and whenUnknown waits: still baking, asked again after its interval.
    let step = world.machine(ACT);
    assert!(step.plan.succeeded.is_empty() && step.plan.failed.is_empty());
    assert_eq!(step.plan.wake_at, Some(at(7240)));
    world.now = at(7240);
    let query = evaluations(&world.machine(ACT))[0].clone();
    world
        .state
        .on_check_read(&query, Reading::Value(Value(0.0)), at(7240));
    let step = world.machine(ACT);
    assert_eq!(step.plan.succeeded, [web()], "{:#?}", step.plan);
    assert_eq!(patches(&step).len(), 1, "worker is restarted next");
}
