use serde_json::json;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use crate::annotations::AnnotationKeys;
use crate::config::{RevisionStamp, RevisionsInForce};
use crate::drift::{DriftIndex, WorkloadEntry};
use crate::drift::{DriftPolicy, DriftState};
use crate::rollout::drift_notes::SidecarNote;
use crate::test_fixtures::PodMeta;
use crate::workload::{UpdateStrategy, WorkloadKind, WorkloadRef};
use serde_json::Value;

const OLD: &str = "aaaaaaaaaaaa";
const NEW: &str = "bbbbbbbbbbbb";
const LOGGER: &str = "logger:v1";

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

/// A rolled-out, healthy workload of `replicas`.
fn healthy(replicas: i32) -> WorkloadEntry {
    WorkloadEntry {
        generation: Some(1),
        observed_generation: Some(1),
        update_strategy: UpdateStrategy::RollingUpdate,
        replicas: Some(replicas),
        status_replicas: Some(replicas),
        updated_replicas: Some(replicas),
        ready_replicas: Some(replicas),
        available_replicas: Some(replicas),
        ..Default::default()
    }
}

/// The cluster and the engine's inputs, built up per test.
struct World {
    index: DriftIndex,
    targets: BTreeMap<String, SidecarTarget>,
    settings: RolloutSettings,
    policy: DriftPolicy,
    /// The engine's memory between plans.
    state: crate::rollout::machine::RolloutState,
    history: crate::rollout::history::RevisionHistory,
    now: Timestamp,
    keys: AnnotationKeys,
    /// Where the next Deployment is created.
    namespace: &'static str,
    /// What the webhook serves, for the preflight (`None`: no preflight).
    served: Option<(
        crate::config::SidecarSet,
        crate::injection::InjectionSettings,
    )>,
}

impl World {
    /// logger:v1 at NEW, its campaign settled an hour ago.
    fn new() -> Self {
        let mut world = World {
            index: DriftIndex::default(),
            targets: BTreeMap::new(),
            // Restarts, unless a test of in-place upgrades turns them on.
            settings: RolloutSettings {
                in_place: crate::rollout::in_place::InPlaceMode::Off,
                ..RolloutSettings::default()
            },
            policy: DriftPolicy::default(),
            state: crate::rollout::machine::RolloutState::default(),
            history: Default::default(),
            now: at(3600),
            keys: AnnotationKeys::default(),
            namespace: "team",
            served: None,
        };
        world.target(LOGGER, NEW);
        world.state.book = world.plan().book;
        world.now = at(7200);
        world
    }

    fn target(&mut self, sidecar: &str, revision: &str) -> &mut Self {
        self.targets.insert(
            sidecar.into(),
            SidecarTarget {
                revision: revision.into(),
                manual: false,
                in_place: true,
                changes: Some("containers[logger].image \"l:1\" -> \"l:2\"".into()),
                // The engine saw OLD's content before: pods at OLD are described from it.
                changes_from: BTreeMap::from([(
                    OLD.to_owned(),
                    "containers[logger].image \"l:1\" -> \"l:2\"".to_owned(),
                )]),
                checks: Vec::new(),
                containers: vec!["logger".to_owned()],
            },
        );
        self
    }

    /// A pod requesting logger:v1 that runs `stamp` (`None`: never injected; `Some("")`:
    /// injected without a revision).
    fn pod(namespace: &str, name: &str, stamp: Option<&str>) -> PodMeta {
        let pod = PodMeta::new(namespace, name).request(LOGGER);
        match stamp {
            None => pod,
            Some("") => pod.annotation("injector/status", "injected"),
            Some(stamp) => pod.injected(stamp),
        }
    }

    fn pods(&mut self, namespace: &str, owner: (&str, &str), names: &[&str], stamp: Option<&str>) {
        for name in names {
            let meta = Self::pod(namespace, name, stamp).owner(owner.0, owner.1).0;
            self.index.apply_pod(&meta, &self.keys);
        }
    }

    /// A Deployment whose `replicas` pods run `revision` of logger:v1 (`None`: never
    /// injected; `Some("")`: injected without a revision).
    fn deployment(&mut self, name: &str, replicas: usize, revision: Option<&str>) -> &mut Self {
        self.deployment_with(name, replicas, revision, healthy(replicas as i32))
    }

    fn deployment_with(
        &mut self,
        name: &str,
        replicas: usize,
        revision: Option<&str>,
        entry: WorkloadEntry,
    ) -> &mut Self {
        let rs = format!("{name}-rs");
        let namespace = self.namespace;
        self.index
            .apply_replicaset(&PodMeta::new(namespace, &rs).owner("Deployment", name).0);
        let names: Vec<String> = (0..replicas).map(|i| format!("{rs}-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let stamp = revision.map(|r| {
            if r.is_empty() {
                String::new()
            } else {
                format!("{LOGGER}={r}")
            }
        });
        self.pods(namespace, ("ReplicaSet", &rs), &names, stamp.as_deref());
        self.index
            .apply_workload_entry(WorkloadKind::Deployment, namespace, name, entry);
        self
    }

    fn statefulset(&mut self, name: &str, replicas: usize, revision: &str, entry: WorkloadEntry) {
        let names: Vec<String> = (0..replicas).map(|i| format!("{name}-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let stamp = format!("{LOGGER}={revision}");
        self.pods("team", ("StatefulSet", name), &names, Some(&stamp));
        self.index
            .apply_workload_entry(WorkloadKind::StatefulSet, "team", name, entry);
    }

    fn entry(&self, name: &str) -> WorkloadEntry {
        self.index
            .workload(WorkloadKind::Deployment, "team", name)
            .unwrap()
            .clone()
    }

    fn set_entry(&mut self, name: &str, entry: WorkloadEntry) {
        self.index
            .apply_workload_entry(WorkloadKind::Deployment, "team", name, entry);
    }

    /// What the executor's patch does to the workload: the stamp, `rolled-at`, a new
    /// generation not yet observed.
    fn patched(&mut self, name: &str, when: Timestamp) {
        let mut entry = self.entry(name);
        entry.rollout_revision = Some(format!("{LOGGER}={}", self.targets[LOGGER].revision).into());
        entry.rolled_at = Some(when);
        entry.generation = Some(entry.generation.unwrap_or(1) + 1);
        self.set_entry(name, entry);
    }

    /// The controller finished: new pods at the target, status rolled out.
    fn rolled(&mut self, name: &str, replicas: usize) {
        let mut entry = self.entry(name);
        entry.observed_generation = entry.generation;
        self.set_entry(name, entry);
        for i in 0..replicas {
            self.index.delete_pod("team", &format!("{name}-rs-{i}"));
        }
        let rs = format!("{name}-rs2");
        self.index
            .apply_replicaset(&PodMeta::new("team", &rs).owner("Deployment", name).0);
        let names: Vec<String> = (0..replicas).map(|i| format!("{rs}-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let stamp = format!("{LOGGER}={}", self.targets[LOGGER].revision);
        self.pods("team", ("ReplicaSet", &rs), &names, Some(&stamp));
    }

    fn plan(&self) -> RolloutPlan {
        let wanted: RevisionsInForce = self
            .targets
            .iter()
            .map(|(k, t)| (k.clone(), t.revision.clone()))
            .collect();
        let report = self.index.classify_revisions(&wanted, &self.policy);
        plan(PlanInput {
            report: &report,
            index: &self.index,
            targets: &self.targets,
            book: &self.state.book,
            finished_since: &self.state.finished_since,
            stamped: &self.state.stamped,
            evicting: &self.state.evicting,
            baking: &self.state.baking,
            settings: &self.settings,
            history: &self.history,
            now: self.now,
            served: self
                .served
                .as_ref()
                .map(|(sidecars, settings)| Served { sidecars, settings }),
        })
    }

    /// Plans and carries the plan's book forward, as the executor does.
    fn step(&mut self) -> RolloutPlan {
        let plan = self.plan();
        self.state.book = plan.book.clone();
        plan
    }
}

fn restarted(plan: &RolloutPlan) -> Vec<&str> {
    plan.restarts
        .iter()
        .map(|r| r.workload.name.as_str())
        .collect()
}

fn waiting<'p>(plan: &'p RolloutPlan, name: &str) -> &'p WaitReason {
    &plan
        .waiting
        .iter()
        .find(|w| w.workload.name == name)
        .unwrap_or_else(|| panic!("{name} not waiting: {plan:#?}"))
        .reason
}

#[test]
fn only_workloads_owning_stale_or_uninjected_pods_are_planned() {
    let mut world = World::new();
    world.settings.max_parallel = 10;
    world.settings.canary = 0;
    world
        .deployment("stale", 2, Some(OLD))
        .deployment("current", 2, Some(NEW))
        .deployment("uninjected", 1, None)
        .deployment("unknown", 1, Some(""));
    let plan = world.plan();
    assert_eq!(restarted(&plan), ["uninjected", "stale"]);
    let stale = plan
        .restarts
        .iter()
        .find(|r| r.workload.name == "stale")
        .unwrap();
    assert_eq!(
        stale.target.as_ref().map(RevisionStamp::as_str),
        Some(format!("{LOGGER}={NEW}").as_str())
    );
    assert_eq!(stale.workload.kind, WorkloadKind::Deployment);
    assert_eq!(
        stale.changes[0].what.as_deref(),
        Some("containers[logger].image \"l:1\" -> \"l:2\"")
    );
    assert!(plan.waiting.is_empty(), "{:?}", plan.waiting);

    world.policy.restart_unknown = true;
    assert_eq!(restarted(&world.plan()), ["uninjected", "unknown", "stale"]);
}

#[test]
fn a_new_revision_settles_before_anything_restarts_and_each_edit_restarts_the_window() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    world.target(LOGGER, "cccccccccccc");
    let first = world.step();
    assert!(first.restarts.is_empty());
    assert!(
        matches!(waiting(&first, "web"), WaitReason::Settling { until } if until.0 == at(7210))
    );
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Settling
    );
    assert_eq!(
        world.state.book.campaigns[LOGGER].previous.as_deref(),
        Some(NEW)
    );

    // Another edit 8 s later: the window starts again, so one campaign covers both.
    world.now = at(7208);
    world.target(LOGGER, "dddddddddddd");
    let second = world.step();
    assert!(
        matches!(waiting(&second, "web"), WaitReason::Settling { until } if until.0 == at(7218))
    );
    world.now = at(7217);
    assert!(world.step().restarts.is_empty());
    world.now = at(7218);
    let plan = world.step();
    assert_eq!(restarted(&plan), ["web"]);
    assert_eq!(
        plan.restarts[0].target.as_ref().map(RevisionStamp::as_str),
        Some(format!("{LOGGER}=dddddddddddd").as_str())
    );
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Running
    );
}

#[test]
fn the_canary_goes_first_and_alone_until_it_is_healthy_and_current() {
    let mut world = World::new();
    world
        .deployment("big", 5, Some(OLD))
        .deployment("small", 1, Some(OLD))
        .deployment("mid", 3, Some(OLD));
    let plan = world.step();
    assert_eq!(
        restarted(&plan),
        ["small"],
        "the smallest workload is the canary"
    );
    assert!(plan.restarts[0].canary);
    assert!(matches!(waiting(&plan, "big"), WaitReason::Canary { .. }));
    assert!(matches!(waiting(&plan, "mid"), WaitReason::Canary { .. }));

    world.patched("small", world.now);
    let plan = world.step();
    assert!(plan.restarts.is_empty(), "the canary is rolling: {plan:#?}");
    assert_eq!(plan.rolling.len(), 1);
    assert_eq!(world.state.book.campaigns[LOGGER].counts.rolling, 1);

    world.now = at(7230);
    world.rolled("small", 1);
    let plan = world.step();
    assert_eq!(plan.succeeded.len(), 1);
    assert_eq!(restarted(&plan), ["mid", "big"]);
    assert!(plan.restarts.iter().all(|r| !r.canary));
}

#[test]
fn at_most_max_parallel_workloads_roll_at_once() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.max_parallel = 3;
    for name in ["a", "b", "c", "d", "e"] {
        world.deployment(name, 1, Some(OLD));
    }
    world.patched("a", at(7000));
    let plan = world.plan();
    assert_eq!(plan.rolling.len(), 1);
    assert_eq!(restarted(&plan), ["b", "c"]);
    assert!(matches!(
        waiting(&plan, "d"),
        WaitReason::MaxParallel { limit: 3 }
    ));
    assert!(matches!(
        waiting(&plan, "e"),
        WaitReason::MaxParallel { limit: 3 }
    ));
}

#[test]
fn restarts_per_minute_are_limited_by_the_rolled_at_stamps() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.max_parallel = 100;
    world.settings.max_restarts_per_minute = 2;
    world.settings.cooldown = Duration::ZERO;
    world.deployment("done", 1, Some(NEW));
    let mut done = world.entry("done");
    done.rolled_at = Some(at(7200 - 30));
    world.set_entry("done", done);
    for name in ["a", "b", "c"] {
        world.deployment(name, 1, Some(OLD));
    }
    let plan = world.plan();
    assert_eq!(restarted(&plan), ["a"], "one restart 30 s ago counts");
    assert!(matches!(
        waiting(&plan, "b"),
        WaitReason::RateLimit { per_minute: 2 }
    ));
    assert_eq!(
        plan.wake_at,
        Some(at(7200 + 30)),
        "when the old restart leaves the minute"
    );
    // A minute later the old restart no longer counts.
    world.now = at(7200 + 31);
    assert_eq!(restarted(&world.plan()), ["a", "b"]);
}

#[test]
fn a_workload_restarted_within_the_cooldown_waits() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    let mut entry = world.entry("web");
    entry.rolled_at = Some(at(7200 - 60));
    world.set_entry("web", entry);
    let plan = world.plan();
    assert!(plan.restarts.is_empty());
    assert!(
        matches!(waiting(&plan, "web"), WaitReason::Cooldown { until } if until.0 == at(7200 - 60 + 600))
    );
    assert_eq!(plan.wake_at, Some(at(7200 - 60 + 600)));
    world.now = at(7200 - 60 + 600);
    assert_eq!(restarted(&world.plan()), ["web"]);

    // Still rolling out a minute after its restart: it waits for that rollout (a config
    // flapping faster than rollouts must not restart it on every flip).
    world.now = at(7200);
    let mut entry = world.entry("web");
    entry.available_replicas = Some(0);
    world.set_entry("web", entry);
    let plan = world.plan();
    assert!(plan.restarts.is_empty());
    assert!(
        matches!(waiting(&plan, "web"), WaitReason::RollingOut { until } if until.0 == at(7200 - 60 + 300))
    );
    assert_eq!(plan.wake_at, Some(at(7200 - 60 + 300)));
    // Stuck mid-rollout (not rolled out --rollout-timeout after its restart: a broken
    // revision): the fix goes in at once, cooldown or not.
    world.now = at(7200 - 60 + 300);
    assert_eq!(restarted(&world.plan()), ["web"]);
}

#[test]
fn a_workload_carrying_the_target_is_waited_on_not_patched_again() {
    let mut world = World::new();
    world.deployment("web", 2, Some(OLD));
    world.patched("web", at(7100));
    let plan = world.plan();
    assert!(plan.restarts.is_empty());
    assert_eq!(
        plan.rolling,
        [Rolling {
            workload: WorkloadRef::new(WorkloadKind::Deployment, "team", "web"),
            target: RevisionStamp::from_annotation(format!("{LOGGER}={NEW}")),
            on_delete: false,
            checks: Vec::new(),
        }]
    );
    world.rolled("web", 2);
    let plan = world.step();
    assert_eq!(
        plan.succeeded,
        [WorkloadRef::new(WorkloadKind::Deployment, "team", "web")]
    );
    assert!(plan.is_settled());
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Complete
    );
    assert_eq!(world.state.book.campaigns[LOGGER].counts.succeeded, 1);
}

#[test]
fn finishing_the_rollout_without_becoming_current_fails_after_the_grace() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    world.patched("web", at(7100));
    // The controller reports done, yet the pod still carries the old revision.
    let mut entry = world.entry("web");
    entry.observed_generation = entry.generation;
    world.set_entry("web", entry);
    let plan = world.step();
    assert!(plan.failed.is_empty());
    assert_eq!(
        plan.finished_not_current,
        [WorkloadRef::new(WorkloadKind::Deployment, "team", "web")]
    );
    world.state.finished_since.insert(
        WorkloadRef::new(WorkloadKind::Deployment, "team", "web"),
        world.now,
    );
    world.now = at(7205);
    let plan = world.step();
    assert_eq!(plan.failed.len(), 1, "{plan:#?}");
    assert!(
        matches!(
            &plan.failed[0].reason,
            FailureReason::Found(FailureCause::NotCurrent {
                not_current: 1,
                total: 1,
                ..
            })
        ),
        "{plan:#?}"
    );
    assert_eq!(plan.pauses.len(), 1);
}

#[test]
fn a_timeout_fails_the_workload_and_pauses_the_campaign_until_resumed_or_replaced() {
    let mut world = World::new();
    world.settings.canary = 1;
    world
        .deployment("canary", 1, Some(OLD))
        .deployment("other", 2, Some(OLD));
    assert_eq!(restarted(&world.step()), ["canary"]);
    world.patched("canary", at(7200));
    world.now = at(7200 + 299);
    assert!(world.step().failed.is_empty());
    world.now = at(7200 + 300);
    let plan = world.step();
    assert_eq!(plan.failed.len(), 1);
    assert!(
        matches!(
            &plan.failed[0].reason,
            FailureReason::Found(FailureCause::NotRolledOut { timeout, .. })
                if *timeout == std::time::Duration::from_secs(300)
        ),
        "{plan:#?}"
    );
    assert_eq!(plan.pauses.len(), 1);
    assert_eq!(plan.pauses[0].1.failed, 1);
    assert_eq!(plan.pauses[0].1.named.len(), 1);
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Paused);
    assert_eq!(campaign.counts.failed, 1);
    assert!(matches!(
        waiting(&plan, "other"),
        WaitReason::CampaignPaused { .. }
    ));

    // Persisted and read back (a restart of the injector): still paused, nothing restarted,
    // the failure not reported twice. The failed canary is in the plan, with why it is left.
    let text = serde_json::to_string(&world.state.book).unwrap();
    world.state.book = serde_json::from_str(&text).unwrap();
    world.now = at(9000);
    let plan = world.step();
    assert!(plan.restarts.is_empty() && plan.failed.is_empty() && plan.pauses.is_empty());
    assert_eq!(plan.failed_earlier.len(), 1, "{plan:#?}");
    let earlier = &plan.failed_earlier[0];
    assert_eq!(earlier.workload.name, "canary");
    assert_eq!(
        (earlier.sidecar.as_str(), earlier.revision.as_str()),
        (LOGGER, NEW)
    );
    assert!(
        matches!(
            &earlier.reason,
            Some(FailureReason::Found(FailureCause::NotRolledOut { .. }))
        ),
        "{earlier:?}"
    );
    // Its controller rolls it out after all (the cause went away): current, nothing to say.
    world.rolled("canary", 1);
    let plan = world.step();
    assert!(plan.failed_earlier.is_empty(), "{plan:#?}");

    // `rollout --resume`: the failed canary is not retried; the next workload goes. Only
    // paused campaigns are resumed, each marked with who resumed it.
    let resumed = world.state.book.resume_paused("ops@laptop", Time(at(9001)));
    assert_eq!(
        resumed,
        [crate::rollout::Resumed {
            sidecar: LOGGER.into(),
            revision: world.state.book.campaigns[LOGGER].revision.clone()
        }]
    );
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Running);
    assert_eq!(campaign.resumed.as_ref().unwrap().by, "ops@laptop");
    assert!(campaign.pause_reason.is_none());
    assert!(
        world
            .state
            .book
            .resume_paused("again", Time(at(9002)))
            .is_empty(),
        "nothing paused left"
    );
    let plan = world.step();
    assert_eq!(restarted(&plan), ["other"], "{plan:#?}");

    // A new revision replaces the paused campaign.
    let mut world2 = World::new();
    world2.deployment("web", 1, Some(OLD));
    world2.state.book.campaigns.get_mut(LOGGER).unwrap().state = CampaignState::Paused;
    assert!(world2.plan().restarts.is_empty());
    world2.target(LOGGER, "eeeeeeeeeeee");
    world2.step();
    world2.now = at(8000);
    assert_eq!(restarted(&world2.step()), ["web"]);
}

#[test]
fn max_failures_above_one_lets_the_campaign_go_on_after_one_failure() {
    let mut world = World::new();
    world.settings.max_failures = 2;
    world
        .deployment("first", 1, Some(OLD))
        .deployment("second", 2, Some(OLD));
    world.step();
    world.patched("first", at(7200));
    world.now = at(7600);
    let plan = world.step();
    assert_eq!(plan.failed.len(), 1);
    assert!(plan.pauses.is_empty());
    assert_eq!(
        restarted(&plan),
        ["second"],
        "a failed canary frees its slot"
    );
}

#[test]
fn manual_policy_paused_deployments_and_partitions_wait_with_a_reason() {
    let mut world = World::new();
    world.deployment_with(
        "held",
        1,
        Some(OLD),
        WorkloadEntry {
            paused: true,
            ..healthy(1)
        },
    );
    world.statefulset(
        "db",
        3,
        OLD,
        WorkloadEntry {
            partition: Some(2),
            ..healthy(3)
        },
    );
    let plan = world.plan();
    assert!(matches!(
        waiting(&plan, "held"),
        WaitReason::DeploymentPaused
    ));
    assert!(matches!(
        waiting(&plan, "db"),
        WaitReason::Partition { partition: 2 }
    ));
    assert!(plan.restarts.is_empty());

    let mut world = World::new();
    world.targets.get_mut(LOGGER).unwrap().manual = true;
    world.deployment("web", 1, Some(OLD));
    let plan = world.step();
    assert!(matches!(waiting(&plan, "web"), WaitReason::Manual { .. }));
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Manual
    );
}

#[test]
fn on_delete_statefulsets_are_restarted_for_eviction_and_done_only_when_pods_are_current() {
    let mut world = World::new();
    world.statefulset(
        "db",
        2,
        OLD,
        WorkloadEntry {
            update_strategy: UpdateStrategy::OnDelete,
            ..healthy(2)
        },
    );
    let plan = world.plan();
    assert_eq!(restarted(&plan), ["db"]);
    assert!(plan.restarts[0].on_delete);
    let mut entry = world
        .index
        .workload(WorkloadKind::StatefulSet, "team", "db")
        .unwrap()
        .clone();
    entry.rollout_revision = plan.restarts[0].target.as_ref().map(|t| t.as_str().into());
    entry.rolled_at = Some(world.now);
    world
        .index
        .apply_workload_entry(WorkloadKind::StatefulSet, "team", "db", entry);
    // Healthy, but the controller replaces nothing by itself: rolling until pods are evicted.
    let plan = world.plan();
    assert!(plan.failed.is_empty());
    assert_eq!(plan.rolling.len(), 1);
    assert!(plan.rolling[0].on_delete);
    let wanted: RevisionsInForce = [(LOGGER.to_owned(), NEW.to_owned())].into_iter().collect();
    assert_eq!(
        world
            .index
            .pods_needing_restart(WorkloadKind::StatefulSet, "team", "db", &wanted, false),
        [
            crate::drift::PodToReplace::at("db-0", &format!("{LOGGER}={OLD}")),
            crate::drift::PodToReplace::at("db-1", &format!("{LOGGER}={OLD}"))
        ]
    );
}

#[test]
fn bare_pods_are_evicted_only_with_evict_bare_pods() {
    let mut world = World::new();
    world.settings.canary = 0;
    let lonely = World::pod("team", "lonely", Some(&format!("{LOGGER}={OLD}"))).0;
    world.index.apply_pod(&lonely, &world.keys);
    assert!(world.plan().restarts.is_empty());
    world.policy.evict_bare_pods = true;
    let plan = world.plan();
    assert_eq!(restarted(&plan), ["lonely"]);
    assert_eq!(plan.restarts[0].workload.kind, WorkloadKind::Pod);
    assert_eq!(plan.restarts[0].target, None);
    assert_eq!(plan.restarts[0].action(), "evict (not recreated)");
}

#[test]
fn restarts_are_described_from_what_the_pods_actually_run() {
    let mut world = World::new();
    world.settings.max_parallel = 10;
    world.settings.canary = 0;
    world.policy.restart_unknown = true;
    world
        .deployment("behind", 1, Some("eeeeeeeeeeee"))
        .deployment("stale", 1, Some(OLD))
        .deployment("unknown", 1, Some(""))
        .deployment("uninjected", 1, None);
    let plan = world.plan();
    let change = |name: &str| {
        let restart = plan
            .restarts
            .iter()
            .find(|r| r.workload.name == name)
            .unwrap_or_else(|| panic!("{name} not planned"));
        let c = &restart.changes[0];
        (c.state, c.from.clone(), c.to.clone(), c.what.clone())
    };
    // A revision this process never saw: its change is not known, and the latest change
    // (from OLD) is not it.
    assert_eq!(
        change("behind"),
        (
            DriftState::Stale,
            Some("eeeeeeeeeeee".into()),
            NEW.into(),
            None
        )
    );
    assert_eq!(
        change("stale"),
        (
            DriftState::Stale,
            Some(OLD.into()),
            NEW.into(),
            Some("containers[logger].image \"l:1\" -> \"l:2\"".into())
        )
    );
    assert_eq!(
        change("unknown"),
        (DriftState::Unknown, None, NEW.into(), None)
    );
    assert_eq!(
        change("uninjected"),
        (DriftState::Uninjected, None, NEW.into(), None)
    );
    let stale = plan
        .restarts
        .iter()
        .find(|r| r.workload.name == "stale")
        .unwrap();
    assert_eq!(stale.action(), "restart");
}

#[test]
fn rolled_out_follows_kubectl_rollout_status_per_kind() {
    let done = healthy(2);
    assert!(rolled_out(WorkloadKind::Deployment, &done));
    let unobserved = WorkloadEntry {
        generation: Some(2),
        ..healthy(2)
    };
    assert!(!rolled_out(WorkloadKind::Deployment, &unobserved));
    let old_pods_left = WorkloadEntry {
        status_replicas: Some(3),
        ..healthy(2)
    };
    assert!(!rolled_out(WorkloadKind::Deployment, &old_pods_left));
    let unavailable = WorkloadEntry {
        available_replicas: Some(1),
        ..healthy(2)
    };
    assert!(!rolled_out(WorkloadKind::Deployment, &unavailable));
    let pending = WorkloadEntry {
        update_revision_pending: true,
        ..healthy(2)
    };
    assert!(!rolled_out(WorkloadKind::StatefulSet, &pending));
    let partitioned = WorkloadEntry {
        partition: Some(1),
        updated_replicas: Some(1),
        update_revision_pending: true,
        ..healthy(2)
    };
    assert!(rolled_out(WorkloadKind::StatefulSet, &partitioned));
    let not_ready = WorkloadEntry {
        ready_replicas: Some(1),
        ..healthy(2)
    };
    assert!(!rolled_out(WorkloadKind::StatefulSet, &not_ready));
    let ds_updating = WorkloadEntry {
        updated_replicas: Some(1),
        ..healthy(2)
    };
    assert!(!rolled_out(WorkloadKind::DaemonSet, &ds_updating));
    assert!(rolled_out(WorkloadKind::DaemonSet, &healthy(2)));
}

#[test]
fn changes_are_described_by_container_name_and_field() {
    let old = json!({"containers": [{"name": "logger", "image": "l:1", "args": ["-v"]}], "env": [{"name": "A", "value": "1"}]});
    let new = json!({"containers": [{"name": "logger", "image": "l:2", "args": ["-v"]}], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]});
    assert_eq!(
        describe_changes(&old, &new),
        "containers[logger].image \"l:1\" -> \"l:2\", env[B] (none) -> present"
    );
    assert_eq!(describe_changes(&old, &old), "no content change");
    let many = json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5});
    assert_eq!(
        describe_changes(&json!({}), &many),
        "a (none) -> 1, b (none) -> 2, c (none) -> 3 and 2 more"
    );
}

#[test]
fn the_book_round_trips_through_its_json_form() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    world.step();
    let text = serde_json::to_string(&world.state.book).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["campaigns"][LOGGER]["revision"], NEW);
    assert_eq!(value["campaigns"][LOGGER]["state"], "running");
    assert_eq!(value["campaigns"][LOGGER]["counts"]["pending"], 1);
    let back: CampaignBook = serde_json::from_str(&text).unwrap();
    assert_eq!(back, world.state.book);
}

#[test]
fn the_one_shot_run_waits_only_on_what_clears_by_itself() {
    let until = Time(at(0));
    let transient = [
        WaitReason::MaxParallel { limit: 5 },
        WaitReason::RateLimit { per_minute: 30 },
        WaitReason::Canary {
            sidecar: LOGGER.into(),
        },
        WaitReason::Settling {
            until: until.clone(),
        },
        WaitReason::NotKnownYet,
    ];
    let lasting = [
        WaitReason::Cooldown { until },
        WaitReason::CampaignPaused {
            sidecar: LOGGER.into(),
        },
        WaitReason::Manual {
            sidecar: LOGGER.into(),
        },
        WaitReason::DeploymentPaused,
        WaitReason::Partition { partition: 1 },
        WaitReason::BookFull(book::BookOverflow {
            bytes: book::BOOK_BUDGET_BYTES + 1,
            budget: book::BOOK_BUDGET_BYTES,
            sidecar: LOGGER.into(),
            failed_workloads: 20_000,
            held_and_pinned_bytes: 0,
        }),
    ];
    assert!(transient.iter().all(WaitReason::clears_by_itself));
    assert!(!lasting.iter().any(WaitReason::clears_by_itself));
}

#[test]
fn a_wait_counts_the_time_left_to_the_minute() {
    let now = at(0);
    assert_eq!(instant::from_now(at(45), now), "in 45s");
    assert_eq!(instant::from_now(at(2 * 3600 + 5 * 60), now), "in 2h 5m");
    assert_eq!(instant::from_now(at(3600), now), "in 1h");
    assert_eq!(instant::from_now(at(-1), now), "now");

    // A workload restarted recently waits for its cooldown, until the instant it ends.
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    let mut entry = world.entry("web");
    entry.rolled_at = Some(world.now);
    world.set_entry("web", entry);
    let plan = world.plan();
    assert!(
        matches!(
            waiting(&plan, "web"),
            WaitReason::Cooldown { until } if until.0 == after(world.now, world.settings.cooldown)
        ),
        "{plan:#?}"
    );
}

#[test]
fn workloads_outside_the_policy_count_toward_no_campaign() {
    // Another engine (another namespace's) rolled `done` to the same revision: this engine,
    // limited to `team`, neither counts it as its success nor lets it stand in for the canary.
    let mut world = World::new();
    world.policy.include_namespaces.insert("team".into());
    world.namespace = "elsewhere";
    let mut entry = healthy(1);
    entry.rollout_revision = Some(format!("{LOGGER}={NEW}").into());
    world.deployment_with("done", 1, Some(NEW), entry);
    world.namespace = "team";
    world.deployment("small", 1, Some(OLD));
    world.deployment("big", 3, Some(OLD));
    let plan = world.step();
    assert_eq!(restarted(&plan), ["small"], "only the canary: {plan:#?}");
    assert!(plan.restarts[0].canary);
    assert!(plan.succeeded.is_empty(), "{:?}", plan.succeeded);
    assert_eq!(world.state.book.campaigns[LOGGER].counts.succeeded, 0);
    assert_eq!(
        world.state.book.campaigns[LOGGER].counts.pending, 2,
        "small (now) and big (after it)"
    );
}

#[test]
fn the_drift_report_flags_a_paused_campaign_and_a_manual_sidecar() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    let campaign = world.state.book.campaigns.get_mut(LOGGER).unwrap();
    campaign.state = CampaignState::Paused;
    campaign.pause_reason = Some("rollout of logger:v1 paused after 1 failed workload(s)".into());
    let wanted: RevisionsInForce = [
        (LOGGER.to_owned(), NEW.to_owned()),
        ("tracer:v1".to_owned(), "cccccccccccc".to_owned()),
    ]
    .into_iter()
    .collect();
    let mut report = world.index.classify_revisions(&wanted, &world.policy);
    let notes = world
        .state
        .book
        .notes(&mut report, &["tracer:v1".to_owned()].into(), world.now);
    let logger = report.sidecars.iter().find(|s| s.name == LOGGER).unwrap();
    assert_eq!(logger.campaign.as_deref(), Some("paused"));
    assert_eq!(
        notes[LOGGER],
        SidecarNote::Paused {
            reason: "rollout of logger:v1 paused after 1 failed workload(s)".into()
        }
    );
    let tracer = report
        .sidecars
        .iter()
        .find(|s| s.name == "tracer:v1")
        .unwrap();
    assert_eq!(tracer.campaign, None, "no campaign for it in the book");
    assert_eq!(notes["tracer:v1"], SidecarNote::Manual);
    // A campaign for another revision than the one in force says nothing about it.
    world.state.book.campaigns.get_mut(LOGGER).unwrap().revision = OLD.into();
    let mut report = world.index.classify_revisions(&wanted, &world.policy);
    let notes = world
        .state
        .book
        .notes(&mut report, &Default::default(), world.now);
    let logger = report.sidecars.iter().find(|s| s.name == LOGGER).unwrap();
    assert_eq!(
        (logger.campaign.as_deref(), notes.get(LOGGER)),
        (None, None)
    );
}

#[test]
fn pods_a_restart_created_while_the_webhook_was_bypassed_get_one_more_restart_then_blame_the_webhook()
 {
    let mut world = World::new();
    world.deployment("late", 1, None);
    world.patched("late", at(7100));
    let mut entry = world.entry("late");
    entry.observed_generation = entry.generation;
    world.set_entry("late", entry);
    let late = WorkloadRef::new(WorkloadKind::Deployment, "team", "late");
    let plan = world.step();
    assert!(
        plan.restarts.is_empty(),
        "within the finish grace: {plan:#?}"
    );
    assert_eq!(plan.rolling.len(), 1);
    world.state.finished_since.insert(late.clone(), world.now);
    world.now = at(7205);

    // Past the grace, its one pod still uninjected: restarted once more although it was
    // restarted 105 s ago (the cooldown is 10 min), and not counted as a failure.
    let plan = world.step();
    assert!(plan.failed.is_empty(), "{plan:#?}");
    assert_eq!(restarted(&plan), ["late"]);
    let heal = &plan.restarts[0];
    assert!(heal.heal);
    let target = heal.target.clone().unwrap();
    assert_eq!(target.as_str(), format!("{LOGGER}={NEW}"));
    assert_eq!(heal.missed, 1, "{heal:?}");
    assert_eq!(
        (heal.changes[0].state, heal.changes[0].from.as_deref()),
        (DriftState::Uninjected, None)
    );

    // The heal is marked on the template; its pods missed the webhook again: now a failure
    // that names the webhook, and no third restart.
    world.patched("late", at(7205));
    let mut entry = world.entry("late");
    entry.rollout_heal = Some(target.as_str().into());
    entry.observed_generation = entry.generation;
    world.set_entry("late", entry);
    world.state.finished_since.insert(late, at(7205));
    world.now = at(7300);
    let plan = world.step();
    assert!(plan.restarts.is_empty(), "{plan:#?}");
    assert_eq!(plan.failed.len(), 1, "{plan:#?}");
    assert_eq!(
        plan.failed[0].reason,
        FailureReason::Found(FailureCause::Bypassed {
            uninjected: 1,
            total: 1,
            sidecar: LOGGER.into()
        })
    );
}

#[test]
fn a_heal_waits_for_the_campaign_and_the_paused_deployment_but_not_the_cooldown() {
    let mut world = World::new();
    let mut paused = healthy(1);
    paused.paused = true;
    world.deployment_with("late", 1, None, paused);
    world.patched("late", at(7100));
    let mut entry = world.entry("late");
    entry.observed_generation = entry.generation;
    world.set_entry("late", entry);
    let late = WorkloadRef::new(WorkloadKind::Deployment, "team", "late");
    world.state.finished_since.insert(late, at(7000));
    let plan = world.step();
    assert!(plan.restarts.is_empty(), "{plan:#?}");
    assert_eq!(waiting(&plan, "late"), &WaitReason::DeploymentPaused);
}

#[test]
fn the_plan_says_when_it_changes_by_time_alone() {
    let mut world = World::new();
    world.deployment("web", 2, Some(OLD));
    // Nothing waits on time: only a change can alter the plan.
    world.targets.clear();
    world.target(LOGGER, OLD);
    world.state.book = world.plan().book;
    world.now = at(9000);
    let plan = world.plan();
    assert!(
        plan.restarts.is_empty() && plan.waiting.is_empty(),
        "{plan:#?}"
    );
    assert_eq!(plan.wake_at, None);

    // A new revision settles for --settle (10 s): the plan changes when that ends.
    world.target(LOGGER, NEW);
    let plan = world.step();
    assert!(matches!(waiting(&plan, "web"), WaitReason::Settling { .. }));
    assert_eq!(plan.wake_at, Some(at(9010)));
    world.now = at(9010);
    let plan = world.step();
    assert_eq!(restarted(&plan), ["web"]);

    // Patched and rolling: the plan changes by time when --rollout-timeout (5 min) ends,
    // unless the rollout finishes first (a watched change).
    world.patched("web", at(9010));
    world.now = at(9011);
    let plan = world.step();
    assert_eq!(plan.rolling.len(), 1, "{plan:#?}");
    assert_eq!(plan.wake_at, Some(at(9010 + 300)));

    // Finished rolling yet a pod not current: when the finish grace (5 s) ends.
    let web = WorkloadRef::new(WorkloadKind::Deployment, "team", "web");
    let mut entry = world.entry("web");
    entry.observed_generation = entry.generation;
    world.set_entry("web", entry);
    world.state.finished_since.insert(web, at(9020));
    world.now = at(9021);
    let plan = world.step();
    assert_eq!(plan.finished_not_current.len(), 1, "{plan:#?}");
    assert_eq!(plan.wake_at, Some(at(9025)));
}

/// Stale Deployments `names` of one pod each in `namespace`, with `priority` if given.
fn stale_in(world: &mut World, namespace: &'static str, names: &[&str], priority: Option<i32>) {
    world.namespace = namespace;
    for name in names {
        let entry = WorkloadEntry {
            rollout_priority: priority,
            ..healthy(1)
        };
        world.deployment_with(name, 1, Some(OLD), entry);
    }
    world.namespace = "team";
}

#[test]
fn the_namespace_limit_holds_alongside_the_global_one() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.max_parallel = 10;
    world.settings.max_parallel_per_namespace = 1;
    stale_in(&mut world, "prod", &["p1", "p2", "p3"], None);
    stale_in(&mut world, "staging", &["s1", "s2"], None);
    let plan = world.step();
    let mut by_namespace: BTreeMap<&str, usize> = BTreeMap::new();
    for restart in &plan.restarts {
        *by_namespace
            .entry(restart.workload.namespace.as_str())
            .or_default() += 1;
    }
    assert_eq!(by_namespace, BTreeMap::from([("prod", 1), ("staging", 1)]));
    let waiting_in_prod: Vec<&WaitReason> = plan
        .waiting
        .iter()
        .filter(|w| w.workload.namespace == "prod")
        .map(|w| &w.reason)
        .collect();
    assert_eq!(waiting_in_prod.len(), 2);
    for reason in waiting_in_prod {
        assert_eq!(
            reason,
            &WaitReason::MaxParallelInNamespace {
                namespace: "prod".into(),
                limit: 1
            }
        );
        assert!(reason.clears_by_itself());
    }
    // A workload of prod already rolling takes prod's slot: nothing more starts there.
    let rolling = plan
        .restarts
        .iter()
        .find(|r| r.workload.namespace == "prod")
        .unwrap()
        .workload
        .clone();
    let mut entry = world
        .index
        .workload(WorkloadKind::Deployment, "prod", &rolling.name)
        .unwrap()
        .clone();
    entry.rollout_revision = Some(format!("{LOGGER}={NEW}").into());
    entry.rolled_at = Some(world.now);
    entry.generation = Some(2);
    world
        .index
        .apply_workload_entry(WorkloadKind::Deployment, "prod", &rolling.name, entry);
    world.now = at(7201);
    let plan = world.step();
    assert!(
        plan.restarts.iter().all(|r| r.workload.namespace != "prod"),
        "{plan:#?}"
    );
    // Without the namespace limit, only --max-parallel applies.
    world.settings.max_parallel_per_namespace = 0;
    let plan = world.plan();
    assert_eq!(
        plan.restarts
            .iter()
            .filter(|r| r.workload.namespace == "prod")
            .count(),
        2
    );
}

#[test]
fn canaries_come_from_canary_namespaces_then_by_rollout_priority() {
    // By size alone the canary would be the smallest workload (a1, one pod, in prod).
    let mut world = World::new();
    stale_in(&mut world, "prod", &["a1"], None);
    stale_in(&mut world, "staging", &["z9"], Some(-1));
    world.namespace = "staging";
    world.deployment("big", 3, Some(OLD));
    world.namespace = "team";
    let plan = world.step();
    assert_eq!(restarted(&plan), ["z9"], "lower rollout-priority first");
    assert!(plan.restarts[0].canary);

    // A canary namespace comes before any priority.
    let mut world = World::new();
    world.settings.canary_namespaces = ["canary".to_owned()].into();
    stale_in(&mut world, "prod", &["a1"], Some(-5));
    world.namespace = "canary";
    world.deployment("big", 3, Some(OLD));
    world.namespace = "team";
    let plan = world.step();
    assert_eq!(restarted(&plan), ["big"]);
    assert!(plan.restarts[0].canary);
    assert!(matches!(waiting(&plan, "a1"), WaitReason::Canary { .. }));
}

#[test]
fn downtime_is_judged_from_the_strategy_and_replicas() {
    use crate::drift::Downtime;
    let spec = |replicas: i32, strategy: serde_json::Value| {
        serde_json::from_value::<k8s_openapi::api::apps::v1::DeploymentSpec>(json!({
            "replicas": replicas, "selector": {}, "strategy": strategy,
            "template": {"spec": {"containers": []}}
        }))
        .unwrap()
    };
    let cases = [
        (3, json!({"type": "Recreate"}), Some(Downtime::Recreate)),
        (1, json!({"type": "RollingUpdate"}), None),
        (1, json!({}), None),
        (
            1,
            json!({"rollingUpdate": {"maxUnavailable": 1}}),
            Some(Downtime::SingleReplicaMaxUnavailable),
        ),
        (
            1,
            json!({"rollingUpdate": {"maxUnavailable": "100%"}}),
            Some(Downtime::SingleReplicaMaxUnavailable),
        ),
        (1, json!({"rollingUpdate": {"maxUnavailable": "50%"}}), None),
        (
            1,
            json!({"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
            None,
        ),
        (2, json!({"rollingUpdate": {"maxUnavailable": 1}}), None),
    ];
    for (replicas, strategy, want) in cases {
        assert_eq!(
            Downtime::of_deployment(&spec(replicas, strategy.clone())),
            want,
            "{replicas} replicas, {strategy}"
        );
    }
}

#[test]
fn a_restart_that_means_downtime_waits_until_accepted() {
    use crate::drift::Downtime;
    let mut world = World::new();
    let entry = WorkloadEntry {
        downtime: Some(Downtime::Recreate),
        ..healthy(1)
    };
    world.deployment_with("solo", 1, Some(OLD), entry.clone());
    let plan = world.plan();
    assert!(plan.restarts.is_empty(), "{plan:#?}");
    let reason = waiting(&plan, "solo");
    assert_eq!(
        reason,
        &WaitReason::Downtime {
            why: Downtime::Recreate
        }
    );
    assert!(!reason.clears_by_itself());
    // Accepted for this workload by its annotation...
    world.set_entry(
        "solo",
        WorkloadEntry {
            allow_downtime: true,
            ..entry
        },
    );
    assert_eq!(restarted(&world.plan()), ["solo"]);
    // ...or for all by the flag.
    let mut world = World::new();
    world.settings.allow_downtime = true;
    world.deployment_with(
        "solo",
        1,
        Some(OLD),
        WorkloadEntry {
            downtime: Some(Downtime::SingleReplicaMaxUnavailable),
            ..healthy(1)
        },
    );
    assert_eq!(restarted(&world.plan()), ["solo"]);
}

#[test]
fn restarts_start_only_inside_a_maintenance_window_and_rolling_ones_go_on() {
    use crate::maintenance::MaintenanceWindows;
    // World::new's now is Friday 2027-01-15 10:00 UTC, at(7200).
    let saturday = at(7200 + 14 * 3600);
    let mut world = World::new();
    world.settings.maintenance_windows = MaintenanceWindows::parse_list("Sat 00:00-04:00").unwrap();
    world.deployment("web", 2, Some(OLD));
    world.deployment("api", 2, Some(OLD));
    world.patched("api", at(7000));
    let plan = world.step();
    // Outside the window: web waits, with the opening; api, restarted before, keeps rolling.
    assert!(plan.restarts.is_empty(), "{plan:#?}");
    assert_eq!(plan.rolling.len(), 1, "{plan:#?}");
    let reason = waiting(&plan, "web");
    assert_eq!(
        reason,
        &WaitReason::OutsideMaintenanceWindow {
            windows: "Sat 00:00-04:00".into(),
            opens: Some(Time(saturday)),
        }
    );
    assert!(!reason.clears_by_itself());
    // api's --rollout-timeout ends first; once it has rolled out, the opening is next.
    assert_eq!(plan.wake_at, Some(at(7000 + 300)));
    world.rolled("api", 2);
    let plan = world.step();
    assert_eq!(plan.succeeded.len(), 1, "{plan:#?}");
    assert_eq!(plan.wake_at, Some(saturday));
    assert_eq!(
        plan.book.maintenance,
        Some(crate::rollout::MaintenanceStatus {
            windows: "Sat 00:00-04:00".into(),
            open: false,
            until: Some(Time(saturday)),
        })
    );
    assert_eq!(plan.book.campaigns[LOGGER].counts.pending, 1);

    // The window opens: web is restarted.
    world.now = saturday;
    let plan = world.step();
    assert_eq!(restarted(&plan), ["web"]);
    assert_eq!(plan.book.maintenance.as_ref().map(|m| m.open), Some(true));
    // It closes at 04:00: that is when the plan changes next by time alone.
    assert_eq!(plan.wake_at, Some(at(7200 + 18 * 3600)));
}

#[test]
fn a_workloads_own_maintenance_window_replaces_the_global_one() {
    use crate::maintenance::MaintenanceWindows;
    let own = |text: &str| WorkloadEntry {
        maintenance_window: Some(MaintenanceWindows::parse_list(text)),
        ..healthy(2)
    };
    let mut world = World::new();
    world.settings.maintenance_windows = MaintenanceWindows::parse_list("Sat 00:00-04:00").unwrap();
    world.deployment_with("always", 2, Some(OLD), own("always"));
    // Friday 10:00 UTC is 11:00 in Oslo.
    world.deployment_with("oslo", 2, Some(OLD), own("Fri 10:30-12:00 Europe/Oslo"));
    world.deployment_with("later", 2, Some(OLD), own("Fri 12:00-13:00"));
    world.deployment_with("broken", 2, Some(OLD), own("Fri 12:00"));
    world.settings.max_parallel = 10;
    world.settings.canary = 0;
    let plan = world.plan();
    let mut names = restarted(&plan);
    names.sort_unstable();
    assert_eq!(names, ["always", "oslo"]);
    assert_eq!(
        waiting(&plan, "later"),
        &WaitReason::OutsideMaintenanceWindow {
            windows: "Fri 12:00-13:00".into(),
            opens: Some(Time(at(7200 + 2 * 3600))),
        }
    );
    let WaitReason::MaintenanceWindowInvalid { error } = waiting(&plan, "broken") else {
        panic!("{plan:#?}");
    };
    assert_eq!(
        error.to_string(),
        "`12:00` is not a span of wall-clock times (HH:MM-HH:MM, e.g. 22:00-06:00)"
    );
}

#[test]
fn notices_say_a_campaign_started_completed_or_paused_once_each() {
    use crate::rollout::notice::{NoticeEvent, NoticeTracker};
    let mut tracker = NoticeTracker::default();
    let mut notices = |world: &mut World| {
        let plan = world.step();
        tracker
            .notices(&plan, &world.state.book, Time(world.now))
            .into_iter()
            .map(|n| (n.event, n.counts.pending, n.counts.rolling))
            .collect::<Vec<_>>()
    };
    let mut world = World::new();
    world
        .deployment("small", 1, Some(OLD))
        .deployment("big", 2, Some(OLD));
    // The canary restart starts the campaign.
    assert_eq!(notices(&mut world), [(NoticeEvent::Started, 1, 1)]);
    world.patched("small", world.now);
    assert_eq!(notices(&mut world), []);
    world.now = at(7230);
    world.rolled("small", 1);
    // The rest restarted: still the same campaign, nothing to announce.
    assert_eq!(notices(&mut world), []);
    world.patched("big", world.now);
    world.rolled("big", 2);
    let done = notices(&mut world);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0], (NoticeEvent::Completed, 0, 0));
    assert_eq!(notices(&mut world), []);

    // A new revision whose canary times out: started, then paused with the reason.
    let mut world = World::new();
    let mut tracker = NoticeTracker::default();
    world
        .deployment("canary", 1, Some(OLD))
        .deployment("other", 2, Some(OLD));
    let plan = world.step();
    let started = tracker.notices(&plan, &world.state.book, Time(world.now));
    assert_eq!(started[0].event, NoticeEvent::Started);
    world.patched("canary", at(7200));
    world.now = at(7200 + 300);
    let plan = world.step();
    let paused = tracker.notices(&plan, &world.state.book, Time(world.now));
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].event, NoticeEvent::Paused);
    assert_eq!(paused[0].counts.failed, 1);
    assert!(
        paused[0].pause.as_ref().is_some_and(|p| matches!(
            p.named[0].1,
            FailureReason::Found(FailureCause::NotRolledOut { .. })
        )),
        "{paused:?}"
    );
    let json = serde_json::to_value(&paused[0]).unwrap();
    assert_eq!(json["event"], "paused");
    let plan = world.step();
    assert_eq!(
        tracker.notices(&plan, &world.state.book, Time(world.now)),
        []
    );
}

#[test]
fn a_workload_unhealthy_before_any_restart_of_ours_waits_and_is_never_the_failed_canary() {
    let mut world = World::new();
    world.settings.canary = 1;
    // The smallest workload would be the canary, but its only pod is not available: its app
    // is down, not our sidecar.
    let mut sick = healthy(1);
    sick.available_replicas = Some(0);
    sick.ready_replicas = Some(0);
    world.deployment_with("sick", 1, Some(OLD), sick.clone());
    world.deployment("web", 2, Some(OLD));
    let plan = world.step();
    assert_eq!(restarted(&plan), ["web"], "{plan:#?}");
    assert!(plan.restarts[0].canary);
    let reason = waiting(&plan, "sick");
    assert_eq!(
        reason,
        &WaitReason::Unhealthy {
            progress: "1 of 1 updated, 0 available".into()
        }
    );
    assert!(!reason.clears_by_itself());
    // The canary succeeds while sick stays sick: no failure, no pause, sick still waits.
    world.patched("web", world.now);
    world.now = at(7300);
    world.rolled("web", 2);
    let plan = world.step();
    assert!(
        plan.failed.is_empty() && plan.pauses.is_empty(),
        "{plan:#?}"
    );
    assert!(matches!(
        waiting(&plan, "sick"),
        WaitReason::Unhealthy { .. }
    ));
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Running
    );
    // Healthy again: restarted.
    world.set_entry("sick", healthy(1));
    assert_eq!(restarted(&world.step()), ["sick"]);
}

#[test]
fn a_workload_sick_from_a_revision_whose_campaign_failed_is_restarted_not_held() {
    let mut world = World::new();
    world.settings.canary = 0;
    // Scaled up while OLD's campaign was paused: its new pod runs OLD and is not available.
    let mut sick = healthy(2);
    sick.available_replicas = Some(1);
    sick.ready_replicas = Some(1);
    world.deployment_with("web", 2, Some(OLD), sick);
    let plan = world.step();
    assert!(matches!(
        waiting(&plan, "web"),
        WaitReason::Unhealthy { .. }
    ));
    // The book says OLD failed (its campaign paused before NEW replaced it): that is what
    // ails web, and the restart to NEW the cure.
    world
        .state
        .book
        .campaigns
        .get_mut(LOGGER)
        .unwrap()
        .failed_before
        .push(OLD.to_owned());
    assert_eq!(restarted(&world.step()), ["web"]);
}

#[test]
fn a_reverted_stamp_switches_the_workload_to_eviction_and_the_eviction_rolls_it() {
    use crate::config::RevisionStamp;
    use crate::workload::RestartMethod;
    let target = RevisionStamp::sorted([(LOGGER, NEW)]);
    let web = WorkloadRef::new(WorkloadKind::Deployment, "team", "web");
    let mut world = World::new();
    world.deployment("web", 2, Some(OLD));
    // This engine stamped the template a minute ago; the stamp is gone (the entry carries
    // none) and the pods are still stale: reverted.
    let mut entry = world.entry("web");
    entry.rolled_at = Some(at(7200 - 60));
    world.set_entry("web", entry);
    world.state.stamped.insert(web.clone(), target.clone());
    let plan = world.step();
    assert_eq!(
        restarted(&plan),
        ["web"],
        "no cooldown for a reverted restart"
    );
    let restart = &plan.restarts[0];
    assert_eq!(
        (restart.method, restart.reverted, restart.on_delete),
        (RestartMethod::Evict, true, true)
    );
    assert_eq!(
        restart.target.as_ref().map(RevisionStamp::as_str),
        Some("logger:v1=bbbbbbbbbbbb")
    );

    // The executor began it: rolling, by eviction, until the pods are current.
    world.state.evicting.insert(
        web.clone(),
        crate::rollout::EvictionRestart {
            target: target.clone(),
            since: at(7200),
            in_place: false,
            problem: None,
            upgrading: false,
            awaiting: None,
        },
    );
    world.now = at(7210);
    let plan = world.step();
    assert!(plan.restarts.is_empty(), "{plan:#?}");
    assert_eq!(plan.rolling.len(), 1);
    assert!(plan.rolling[0].on_delete, "its stale pods are evicted");
    // Its --rollout-timeout runs from the start of the eviction.
    assert_eq!(plan.wake_at, Some(at(7200 + 300)));
    world.rolled("web", 2);
    let plan = world.step();
    assert_eq!(plan.succeeded, std::slice::from_ref(&web));

    // Not stamped by this engine: a template restart, as always.
    let mut world = World::new();
    world.deployment("web", 2, Some(OLD));
    let plan = world.plan();
    assert_eq!(
        plan.restarts[0].method,
        crate::workload::RestartMethod::Template
    );
    // An explicit `template` on the workload keeps the template method, reverted or not.
    world.state.stamped.insert(web.clone(), target.clone());
    let mut entry = world.entry("web");
    entry.restart_method = Some(RestartMethod::Template);
    world.set_entry("web", entry.clone());
    let plan = world.plan();
    assert_eq!(
        (plan.restarts[0].method, plan.restarts[0].reverted),
        (RestartMethod::Template, false)
    );
    // `evict` on the workload, or --restart-method evict: evicted from the first restart.
    world.state.stamped.clear();
    entry.restart_method = Some(RestartMethod::Evict);
    world.set_entry("web", entry.clone());
    assert_eq!(world.plan().restarts[0].method, RestartMethod::Evict);
    entry.restart_method = None;
    world.set_entry("web", entry);
    world.settings.restart_method = RestartMethod::Evict;
    let plan = world.plan();
    assert_eq!(
        (plan.restarts[0].method, plan.restarts[0].reverted),
        (RestartMethod::Evict, false)
    );
}

#[test]
fn a_restart_succeeds_only_after_its_health_bake_and_a_crash_within_it_stops_the_canary() {
    use crate::rollout::Bake;
    let mut world = World::new();
    world.settings.bake = Duration::from_secs(30);
    world
        .deployment("canary", 1, Some(OLD))
        .deployment("other", 2, Some(OLD));
    assert_eq!(restarted(&world.step()), ["canary"]);
    world.patched("canary", at(7200));
    world.now = at(7210);
    world.rolled("canary", 1);
    let canary = WorkloadRef::new(WorkloadKind::Deployment, "team", "canary");
    // Rolled out and current: its bake starts; it is still rolling, the rest wait for it.
    let plan = world.step();
    let target = crate::config::RevisionStamp::sorted([(LOGGER, NEW)]);
    assert_eq!(plan.bakes_started, [(canary.clone(), target.clone())]);
    assert!(plan.succeeded.is_empty(), "{plan:#?}");
    assert_eq!(plan.rolling.len(), 1);
    assert!(matches!(waiting(&plan, "other"), WaitReason::Canary { .. }));
    assert_eq!(plan.wake_at, Some(at(7240)));
    world.state.baking.insert(
        canary.clone(),
        Bake {
            target: target.clone(),
            since: at(7210),
            ..Default::default()
        },
    );
    world.now = at(7220);
    let plan = world.step();
    assert!(plan.bakes_started.is_empty() && plan.bake_checks.is_empty());
    assert_eq!(plan.wake_at, Some(at(7240)));

    // Its sidecar crashes 15 s in: the health drop asks for a read of its pods...
    world.now = at(7225);
    let mut entry = world.entry("canary");
    entry.available_replicas = Some(0);
    entry.ready_replicas = Some(0);
    world.set_entry("canary", entry);
    let plan = world.step();
    assert_eq!(plan.bake_checks, std::slice::from_ref(&canary));
    assert!(plan.failed.is_empty());
    // ...which names the container: the restart fails, the campaign pauses at the canary.
    world.state.baking.insert(
        canary.clone(),
        Bake {
            target: target.clone(),
            since: at(7210),
            read_at: Some(at(7225)),
            problem: Some(
                "pod canary-rs2-0: container logger (restarted 1 time, CrashLoopBackOff, last exit: Error, code 3)".into(),
            ),
            ..Default::default()
        },
    );
    let plan = world.step();
    assert_eq!(plan.failed.len(), 1, "{plan:#?}");
    assert_eq!(
        plan.failed[0].reason,
        FailureReason::Found(FailureCause::Bake {
            bake: std::time::Duration::from_secs(30),
            problem: "pod canary-rs2-0: container logger (restarted 1 time, CrashLoopBackOff, last exit: Error, code 3)".into()
        })
    );
    assert_eq!(plan.pauses.len(), 1);
    assert!(matches!(
        waiting(&plan, "other"),
        WaitReason::CampaignPaused { .. }
    ));
}

#[test]
fn a_bake_passes_once_its_end_read_finds_nothing_even_after_a_drop_its_pods_do_not_explain() {
    use crate::rollout::Bake;
    let mut world = World::new();
    world.settings.bake = Duration::from_secs(30);
    world.settings.canary = 0;
    world.deployment("web", 2, Some(OLD));
    world.patched("web", at(7100));
    world.rolled("web", 2);
    let web = WorkloadRef::new(WorkloadKind::Deployment, "team", "web");
    let target = crate::config::RevisionStamp::sorted([(LOGGER, NEW)]);
    world.state.baking.insert(
        web.clone(),
        Bake {
            target: target.clone(),
            since: at(7150),
            ..Default::default()
        },
    );
    // The bake's end: its pods are read first...
    world.now = at(7180);
    let plan = world.step();
    assert_eq!(plan.bake_checks, std::slice::from_ref(&web));
    assert!(plan.succeeded.is_empty());
    // ...and found fine: it succeeded.
    world.state.baking.get_mut(&web).unwrap().read_at = Some(at(7180));
    assert_eq!(world.step().succeeded, std::slice::from_ref(&web));

    // Its health drops within the bake (scaled up, the new pod not ready yet): its pods
    // are read, and read again only when the pod watch saw them change while it lasts
    // (no timer: until then the plan wakes only at the bake's end); nothing wrong with a
    // container is no failure, and the bake passes at its end.
    world.state.baking.insert(
        web.clone(),
        Bake {
            target,
            since: at(7150),
            ..Default::default()
        },
    );
    world.now = at(7160);
    let mut entry = world.entry("web");
    entry.replicas = Some(3);
    entry.available_replicas = Some(2);
    world.set_entry("web", entry);
    let plan = world.step();
    assert_eq!(plan.bake_checks, std::slice::from_ref(&web));
    world.state.baking.get_mut(&web).unwrap().read_at = Some(at(7160));
    let plan = world.step();
    assert!(
        plan.failed.is_empty() && plan.bake_checks.is_empty(),
        "{plan:#?}"
    );
    assert_eq!(plan.wake_at, Some(at(7180)), "the bake's end, not a poll");
    world.now = at(7170);
    assert!(
        world.step().bake_checks.is_empty(),
        "nothing changed: no read"
    );
    world.state.baking.get_mut(&web).unwrap().pods_changed = true;
    assert_eq!(
        world.step().bake_checks,
        std::slice::from_ref(&web),
        "a pod changed: read again"
    );
    let bake = world.state.baking.get_mut(&web).unwrap();
    bake.read_at = Some(at(7170));
    bake.pods_changed = false;
    // Healthy again (scaled back), a change of its pods asks for no read before the end.
    let mut entry = world.entry("web");
    entry.replicas = Some(2);
    world.set_entry("web", entry);
    world.state.baking.get_mut(&web).unwrap().pods_changed = true;
    world.now = at(7175);
    let plan = world.step();
    assert!(plan.bake_checks.is_empty(), "{plan:#?}");
    assert_eq!(plan.wake_at, Some(at(7180)));
    world.now = at(7180);
    assert_eq!(world.step().bake_checks, std::slice::from_ref(&web));
    world.state.baking.get_mut(&web).unwrap().read_at = Some(at(7180));
    assert_eq!(world.step().succeeded, std::slice::from_ref(&web));
}

#[test]
fn each_restart_bakes_once_and_a_passed_bake_stays_succeeded() {
    use crate::rollout::Bake;
    let mut world = World::new();
    world.settings.bake = Duration::from_secs(1);
    world
        .deployment("canary", 1, Some(OLD))
        .deployment("other", 2, Some(OLD));
    // The executor's part: bakes kept while rolling or succeeded, passed once succeeded,
    // pods read when asked (nothing found).
    let mut started: Vec<String> = Vec::new();
    let mut first_success: BTreeMap<String, usize> = BTreeMap::new();
    for step in 0..30 {
        let plan = world.step();
        for r in &plan.restarts {
            world.patched(&r.workload.name, world.now);
        }
        let bakes = &mut world.state.baking;
        bakes.retain(|w, _| {
            plan.rolling.iter().any(|r| &r.workload == w) || plan.succeeded.contains(w)
        });
        for done in &plan.succeeded {
            bakes.get_mut(done).unwrap().passed = true;
            first_success.entry(done.name.clone()).or_insert(step);
        }
        for (w, target) in &plan.bakes_started {
            started.push(w.name.clone());
            let since = world.now;
            bakes.insert(
                w.clone(),
                Bake {
                    target: target.clone(),
                    since,
                    ..Default::default()
                },
            );
        }
        for w in &plan.bake_checks {
            bakes.get_mut(w).unwrap().read_at = Some(world.now);
        }
        for (name, since) in &first_success {
            assert!(
                plan.succeeded.iter().any(|w| &w.name == name),
                "{name} succeeded at step {since}, then not at step {step}: {plan:#?}"
            );
        }
        if step == 2 {
            world.rolled("canary", 1);
        }
        if step == 8 {
            world.rolled("other", 2);
        }
        world.now = world
            .now
            .checked_add(SignedDuration::from_millis(500))
            .unwrap();
    }
    assert_eq!(started, ["canary", "other"], "each baked once");
    assert_eq!(first_success.len(), 2);
    // A process that starts later does not bake them again: restarted long enough ago.
    world.state.baking.clear();
    world.now = at(7200 + 3600);
    let plan = world.step();
    assert_eq!(plan.succeeded.len(), 2, "{plan:#?}");
    assert!(plan.bakes_started.is_empty());
}

#[test]
fn a_campaign_back_to_the_revision_a_failed_one_left_is_a_reversion() {
    let failed = Campaign {
        previous: Some("good00000000".into()),
        pause_reason: Some("paused after 1 failed workload(s)".into()),
        ..crate::test_fixtures::campaign(
            "broken000000",
            CampaignState::Paused,
            Time(Timestamp::UNIX_EPOCH),
        )
    };
    let reverted = super::planner::campaigns::reversion(&failed, "good00000000").unwrap();
    assert_eq!(reverted.from, "broken000000");
    assert_eq!(
        reverted.reason,
        FailureReason::Said("paused after 1 failed workload(s)".into())
    );
    // A fix with new content is a new campaign, not a reversion.
    assert_eq!(
        super::planner::campaigns::reversion(&failed, "fixed0000000"),
        None
    );
    // Going back from a campaign that did not fail is an ordinary change.
    let completed = Campaign {
        state: CampaignState::Complete,
        pause_reason: None,
        ..failed.clone()
    };
    assert_eq!(
        super::planner::campaigns::reversion(&completed, "good00000000"),
        None
    );
    // The failed revisions are remembered across campaigns, the last ten.
    assert_eq!(
        super::planner::campaigns::failed_before(&failed),
        ["broken000000"]
    );
    assert!(super::planner::campaigns::failed_before(&completed).is_empty());
    let many = Campaign {
        failed_before: (0..10).map(|i| format!("old{i:09}")).collect(),
        checks: Vec::new(),
        ..failed.clone()
    };
    let remembered = super::planner::campaigns::failed_before(&many);
    assert_eq!(remembered.len(), 10);
    assert_eq!(remembered.first().unwrap(), "old000000001");
    assert_eq!(remembered.last().unwrap(), "broken000000");
}

#[test]
fn pods_injected_with_the_revision_of_a_paused_campaign_are_warned_about() {
    use crate::config::{LoadedSidecar, parse_config};
    let text = "name: logger:v1\ncontainers: [{name: log-shipper, image: 'shipper:1'}]\n";
    let set: crate::config::SidecarSet = std::iter::once(LoadedSidecar::new(
        parse_config("t.yaml", text).unwrap().config,
        "t.yaml",
    ))
    .collect();
    let revision = set.iter().next().unwrap().revision.to_string();
    let campaign = |revision: &str, state| {
        crate::test_fixtures::campaign(revision, state, Time(Timestamp::UNIX_EPOCH))
    };
    let book = |c: Campaign| CampaignBook {
        campaigns: [("logger:v1".to_owned(), c)].into(),
        maintenance: None,
        ..Default::default()
    };
    let warnings = book(campaign(&revision, CampaignState::Paused)).admission_warnings(&set);
    assert_eq!(
        warnings[&"logger:v1".parse().unwrap()],
        HeldWarning::Paused {
            revision: revision.clone(),
            failures: 0
        }
    );
    // Running, or paused at another revision (the config moved on): nothing to warn about.
    assert!(
        book(campaign(&revision, CampaignState::Running))
            .admission_warnings(&set)
            .is_empty()
    );
    assert!(
        book(campaign("0123456789ab", CampaignState::Paused))
            .admission_warnings(&set)
            .is_empty()
    );
}

/// A history where OLD served well and NEW is the revision in force.
fn history_with_old_good() -> crate::rollout::history::RevisionHistory {
    use crate::rollout::history::{HistoryEntry, Outcome};
    let entry = |revision: &str, outcome| HistoryEntry {
        revision: revision.into(),
        content: serde_json::json!({"containers": [{"name": "logger", "image": revision}]}),
        first_served: Time(at(0)),
        outcome,
        reason: None,
    };
    crate::rollout::history::RevisionHistory {
        sidecars: [(
            LOGGER.to_owned(),
            vec![entry(OLD, Outcome::Good), entry(NEW, Outcome::Pending)],
        )]
        .into(),
    }
}

#[test]
fn a_paused_campaign_holds_new_pods_at_the_last_good_revision_until_resumed_or_replaced() {
    let mut world = World::new();
    world.history = history_with_old_good();
    world
        .deployment("canary", 1, Some(OLD))
        .deployment("other", 2, Some(OLD));
    assert_eq!(restarted(&world.step()), ["canary"]);
    world.patched("canary", at(7200));
    world.now = at(7200 + 300);
    let plan = world.step();
    assert_eq!(plan.pauses.len(), 1);
    assert_eq!(
        plan.pauses[0].1.new_pods,
        crate::rollout::pause::WhilePaused::HeldAt(OLD.into())
    );
    let held = world.state.book.campaigns[LOGGER]
        .held
        .clone()
        .expect("a hold");
    assert_eq!(held.revision, OLD);
    assert_eq!(held.content["containers"][0]["image"], OLD);
    assert_eq!(held.since, Time(at(7500)));
    // The hold outlives a restart of the injector, and plans after the pause keep it.
    let text = serde_json::to_string(&world.state.book).unwrap();
    world.state.book = serde_json::from_str(&text).unwrap();
    world.now = at(9000);
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].held.as_ref(),
        Some(&held)
    );

    // `rollout --resume` ends it.
    world.state.book.resume_paused("ops", Time(at(9001)));
    assert!(world.state.book.campaigns[LOGGER].held.is_none());

    // A new revision ends it: its campaign starts with no hold.
    let mut world2 = World::new();
    world2.history = history_with_old_good();
    world2.deployment("web", 1, Some(OLD));
    world2.step();
    world2.patched("web", at(7200));
    world2.now = at(7500);
    world2.step();
    assert!(world2.state.book.campaigns[LOGGER].held.is_some());
    world2.target(LOGGER, "eeeeeeeeeeee");
    world2.step();
    assert!(world2.state.book.campaigns[LOGGER].held.is_none());
}

#[test]
fn with_continue_or_no_good_revision_a_paused_campaign_holds_nothing() {
    for (on_failure, history, says) in [
        (
            crate::rollout::OnCampaignFailure::Continue,
            history_with_old_good(),
            crate::rollout::pause::WhilePaused::NotHeld,
        ),
        (
            crate::rollout::OnCampaignFailure::Hold,
            Default::default(),
            crate::rollout::pause::WhilePaused::NoGoodRevision,
        ),
    ] {
        let mut world = World::new();
        world.settings.on_campaign_failure = on_failure;
        world.history = history;
        world.deployment("canary", 1, Some(OLD));
        world.step();
        world.patched("canary", at(7200));
        world.now = at(7500);
        let plan = world.step();
        assert_eq!(plan.pauses[0].1.new_pods, says);
        assert!(world.state.book.campaigns[LOGGER].held.is_none());
    }
}

#[test]
fn the_webhook_serves_a_pin_over_its_config_and_a_hold_over_the_failed_revision() {
    use crate::config::revision::injected_content;
    let loaded = |image: &str| {
        crate::test_fixtures::loaded(&format!(
            "name: logger:v1\ncontainers: [{{name: log-shipper, image: '{image}'}}]\n"
        ))
    };
    let (good, broken, fixed) = (
        loaded("shipper:1"),
        loaded("shipper:broken"),
        loaded("shipper:3"),
    );
    let config: crate::config::SidecarSet = std::iter::once(broken.clone()).collect();
    let name: crate::name::SidecarName = LOGGER.parse().unwrap();
    let served_revision =
        |set: &crate::config::SidecarSet| set.get(&name).unwrap().revision.to_string();

    // Paused at the broken revision, held at the good one: the webhook injects the good
    // content (same name and origin), warns about it, and the pinned set is the config.
    let mut campaign = crate::test_fixtures::campaign(
        broken.revision.as_str(),
        CampaignState::Paused,
        Time(Timestamp::UNIX_EPOCH),
    );
    campaign.pause_reason = Some("canary not rolled out".into());
    campaign.held = Some(crate::rollout::Hold {
        revision: good.revision.to_string(),
        content: injected_content(&good.config),
        since: Time(Timestamp::UNIX_EPOCH),
    });
    let mut book = CampaignBook::default();
    book.campaigns.insert(LOGGER.into(), campaign);
    let (pinned, errors) = book.pinned(&config);
    assert!(errors.is_empty());
    assert_eq!(served_revision(&pinned), broken.revision.to_string());
    let new_pods = book.new_pods(&config);
    assert!(new_pods.errors.is_empty(), "{:?}", new_pods.errors);
    let held = new_pods.served.get(&name).unwrap();
    assert_eq!(held.revision, good.revision);
    assert_eq!(held.stamp, good.stamp);
    assert_eq!(held.config.containers, good.config.containers);
    assert_eq!(
        new_pods.warnings[&name],
        HeldWarning::HeldAfterFailure {
            held: good.revision.to_string(),
            revision: broken.revision.to_string()
        }
    );

    // The drift report says it.
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    let wanted: RevisionsInForce = [(LOGGER.to_owned(), broken.revision.to_string())]
        .into_iter()
        .collect();
    let mut report = world.index.classify_revisions(&wanted, &world.policy);
    let notes = book.notes(&mut report, &Default::default(), world.now);
    assert_eq!(
        notes[LOGGER],
        SidecarNote::Held {
            held: good.revision.to_string(),
            revision: broken.revision.to_string(),
            reason: Some("canary not rolled out".into()),
        }
    );

    // A config changed since: no hold applies (the campaign is for another revision).
    let changed: crate::config::SidecarSet = std::iter::once(fixed.clone()).collect();
    let new_pods = book.new_pods(&changed);
    assert_eq!(
        served_revision(&new_pods.served),
        fixed.revision.to_string()
    );
    assert!(new_pods.warnings.is_empty());

    // A pin over the broken config serves the good revision to the engine and the webhook
    // alike, and a config change ends it.
    let mut book = CampaignBook::default();
    book.pins.insert(
        LOGGER.into(),
        crate::rollout::Pin {
            revision: good.revision.to_string(),
            content: injected_content(&good.config),
            over: broken.revision.to_string(),
            by: "ops".into(),
            at: Time(Timestamp::UNIX_EPOCH),
        },
    );
    let (pinned, _) = book.pinned(&config);
    assert_eq!(served_revision(&pinned), good.revision.to_string());
    assert_eq!(
        served_revision(&book.served(&pinned).0),
        good.revision.to_string()
    );
    assert!(book.clone().drop_stale_pins(&config).is_empty());
    assert_eq!(
        served_revision(&book.pinned(&changed).0),
        fixed.revision.to_string()
    );
    let ended = book.drop_stale_pins(&changed);
    assert_eq!(ended.len(), 1);
    assert!(book.pins.is_empty());

    // A pin whose content does not hash to its revision is refused, and said.
    let mut book = CampaignBook::default();
    book.pins.insert(
        LOGGER.into(),
        crate::rollout::Pin {
            revision: good.revision.to_string(),
            content: injected_content(&fixed.config),
            over: broken.revision.to_string(),
            by: "ops".into(),
            at: Time(Timestamp::UNIX_EPOCH),
        },
    );
    let (pinned, errors) = book.pinned(&config);
    assert_eq!(served_revision(&pinned), broken.revision.to_string());
    assert_eq!(errors.len(), 1);
}

/// A history where OLD and NEW of logger:v1 differ in `what` (`image` or `env`).
fn history_old_new(what: &str) -> crate::rollout::history::RevisionHistory {
    use crate::rollout::history::{HistoryEntry, Outcome};
    let content = |image: &str, env: &str, memory: &str| {
        serde_json::json!({"containers": [{"name": "logger", "image": image,
        "resources": {"requests": {"memory": memory}}}], "env": [{"name": "E", "value": env}]})
    };
    let new = match what {
        "image" => content("l:2", "a", "64Mi"),
        "memory" => content("l:1", "a", "128Mi"),
        _ => content("l:1", "b", "64Mi"),
    };
    let entry = |revision: &str, content| HistoryEntry {
        revision: revision.into(),
        content,
        first_served: Time(at(0)),
        outcome: Outcome::Good,
        reason: None,
    };
    crate::rollout::history::RevisionHistory {
        sidecars: [(
            LOGGER.to_owned(),
            vec![entry(OLD, content("l:1", "a", "64Mi")), entry(NEW, new)],
        )]
        .into(),
    }
}

#[test]
fn a_memory_change_is_made_in_place_unless_the_pods_set_pod_level_resources() {
    let mut world = World::new();
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.history = history_old_new("memory");
    world.deployment("web", 2, Some(OLD));
    let plan = world.step();
    assert_eq!(
        plan.restarts[0].method,
        crate::workload::RestartMethod::InPlace,
        "{:?}",
        plan.restarts[0].not_in_place
    );

    // The same change where the template sets pod-level resources: restarted, and the plan
    // says why.
    let mut world = World::new();
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.history = history_old_new("memory");
    let entry = WorkloadEntry {
        template: Some(std::sync::Arc::from(
            r#"{"spec":{"resources":{"requests":{"memory":"1Gi"}},"containers":[]}}"#,
        )),
        ..healthy(2)
    };
    world.deployment_with("web", 2, Some(OLD), entry);
    let plan = world.step();
    assert_eq!(
        plan.restarts[0].method,
        crate::workload::RestartMethod::Template
    );
    assert_eq!(
        plan.restarts[0].not_in_place,
        Some(crate::rollout::in_place::NotInPlace::PodLevelResources)
    );
}

#[test]
fn an_image_only_change_upgrades_in_place_and_anything_else_restarts_with_the_reason() {
    let mut world = World::new();
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.history = history_old_new("image");
    world.deployment("web", 2, Some(OLD));
    let plan = world.step();
    assert_eq!(restarted(&plan), ["web"]);
    let restart = &plan.restarts[0];
    assert_eq!(restart.method, crate::workload::RestartMethod::InPlace);
    assert!(restart.on_delete, "pod by pod");
    assert_eq!(restart.action(), "upgrade in place (canary)");
    assert_eq!(restart.changes[0].sidecar, LOGGER);

    // The executor began it: rolling pod by pod; a failed pod upgrade fails the restart.
    let web = plan.restarts[0].workload.clone();
    let target = plan.restarts[0].target.clone().unwrap();
    let mut restart = crate::rollout::EvictionRestart {
        target: target.clone(),
        since: at(7200),
        in_place: true,
        problem: None,
        upgrading: false,
        awaiting: None,
    };
    world.state.evicting.insert(web.clone(), restart.clone());
    world.now = at(7201);
    let plan = world.step();
    assert!(plan.restarts.is_empty());
    assert_eq!(plan.rolling.len(), 1);
    assert!(plan.rolling[0].on_delete);
    restart.problem = Some("pod web-rs-1: container app restarted".into());
    world.state.evicting.insert(web.clone(), restart);
    let plan = world.step();
    assert_eq!(plan.failed.len(), 1);
    assert_eq!(
        plan.failed[0].reason,
        FailureReason::Found(FailureCause::InPlace {
            reason: "pod web-rs-1: container app restarted".into()
        })
    );

    // Its last pod patched (every pod's revision says current) and its sidecar not back yet:
    // the restart goes on until that upgrade is judged, and only then succeeds.
    let mut world = World::new();
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.settings.bake = std::time::Duration::ZERO;
    world.history = history_old_new("image");
    world.deployment("web", 2, Some(OLD));
    let target = world.step().restarts[0].target.clone().unwrap();
    let mut restart = crate::rollout::EvictionRestart {
        target,
        since: at(7200),
        in_place: true,
        problem: None,
        upgrading: true,
        awaiting: None,
    };
    world.state.evicting.insert(web.clone(), restart.clone());
    let stamp = format!("{LOGGER}={NEW}");
    world.pods(
        "team",
        ("ReplicaSet", "web-rs"),
        &["web-rs-0", "web-rs-1"],
        Some(&stamp),
    );
    world.now = at(7205);
    let plan = world.step();
    assert!(plan.succeeded.is_empty(), "{:?}", plan.succeeded);
    assert_eq!(plan.rolling.len(), 1, "{plan:?}");
    restart.upgrading = false;
    world.state.evicting.insert(web.clone(), restart);
    let plan = world.step();
    assert_eq!(plan.succeeded, std::slice::from_ref(&web));

    // An env change restarts, and says why not in place.
    let mut world = World::new();
    world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
    world.history = history_old_new("env");
    world.deployment("web", 2, Some(OLD));
    let plan = world.step();
    assert_eq!(
        plan.restarts[0].method,
        crate::workload::RestartMethod::Template
    );
    assert_eq!(
        plan.restarts[0]
            .not_in_place
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(
            "logger:v1: env changed: only a change of injected containers' images, CPU and memory is made in place"
        )
    );

    // The sidecar's config opts out; maxUnavailable 0 leaves no room; --in-place=off.
    for case in ["config", "budget", "off"] {
        let mut world = World::new();
        world.settings.in_place = crate::rollout::in_place::InPlaceMode::Auto;
        world.history = history_old_new("image");
        let mut entry = healthy(2);
        match case {
            "config" => world.targets.get_mut(LOGGER).unwrap().in_place = false,
            "budget" => entry.max_unavailable = Some(0),
            _ => world.settings.in_place = crate::rollout::in_place::InPlaceMode::Off,
        }
        world.deployment_with("web", 2, Some(OLD), entry);
        let plan = world.step();
        assert_eq!(
            plan.restarts[0].method,
            crate::workload::RestartMethod::Template,
            "{case}"
        );
        let reason = plan.restarts[0]
            .not_in_place
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        match case {
            "config" => assert!(reason.contains("rollout: {inPlace: false}"), "{reason}"),
            "budget" => assert!(reason.contains("maxUnavailable 0"), "{reason}"),
            _ => assert!(reason.is_empty(), "{reason}"),
        }
    }
}

/// A revision that fails on every workload, resumed again and again, must not outgrow the
/// status ConfigMap (1 MiB): every failed workload is remembered by name, reasons only for
/// the latest.
#[test]
fn a_revision_failing_on_thousands_of_workloads_keeps_the_book_small() {
    const WORKLOADS: usize = 3_000;
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.max_parallel = WORKLOADS;
    world.settings.max_restarts_per_minute = WORKLOADS;
    world.settings.max_failures = WORKLOADS;
    let names: Vec<String> = (0..WORKLOADS)
        .map(|i| format!("payments-api-{i:04}"))
        .collect();
    for name in &names {
        world.deployment(name, 1, Some(OLD));
    }
    assert_eq!(world.step().restarts.len(), WORKLOADS);
    for name in &names {
        world.patched(name, at(7200));
    }
    world.now = at(7200 + 300);
    let plan = world.step();
    assert_eq!(plan.failed.len(), WORKLOADS);
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Paused);
    assert_eq!(campaign.failure_count(), WORKLOADS);
    assert_eq!(campaign.failures.len(), book::FAILURE_DETAILS);

    // The pause names a few failures and counts them all.
    let pause = &plan.pauses[0].1;
    assert_eq!(pause.failed, WORKLOADS);
    assert_eq!(pause.named.len(), 5);

    // As the status ConfigMap holds it: a failure takes about 300 bytes written out in full.
    let encoded = world.state.book.encode();
    let size = encoded.len();
    assert!(
        size < 150 * 1024,
        "{size} bytes for {WORKLOADS} failed workloads"
    );

    // Read back (a restart, or another replica), resumed: no failed workload goes again.
    world.state.book = CampaignBook::decode(&encoded).unwrap();
    assert_eq!(
        world.state.book.resume_paused("ops", Time(at(7600))).len(),
        1
    );
    world.deployment("newcomer", 1, Some(OLD));
    world.now = at(7700);
    let plan = world.step();
    assert_eq!(restarted(&plan), ["newcomer"], "{plan:#?}");
    assert!(plan.failed.is_empty() && plan.pauses.is_empty());
    // Each failed workload is in the plan, the reason kept for the latest only.
    assert_eq!(plan.failed_earlier.len(), WORKLOADS);
    let said = |name: &str| {
        plan.failed_earlier
            .iter()
            .find(|e| e.workload.name == name)
            .unwrap()
    };
    assert!(said("payments-api-2999").reason.is_some());
    let oldest = said("payments-api-0000");
    assert!(oldest.reason.is_none());
}

/// A book written before failed workloads were kept by name lists them all in `failures`.
#[test]
fn a_book_from_before_keeps_its_failed_workloads_and_acknowledgements() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    world.deployment("failed-00", 1, Some(OLD));
    let mut value = serde_json::to_value(&world.state.book).unwrap();
    let failures: Vec<Value> = (0..25)
        .map(|i| {
            json!({
                "workload": {"kind": "Deployment", "namespace": "team", "name": format!("failed-{i:02}")},
                "reason": "not rolled out within 5m (0 of 1 updated replicas are available)",
                "at": "2027-01-15T08:00:00Z",
            })
        })
        .collect();
    value["campaigns"][LOGGER]["failures"] = Value::Array(failures);
    value["campaigns"][LOGGER]["acknowledgedFailures"] = json!(25);
    assert!(value["campaigns"][LOGGER].get("failedWorkloads").is_none());

    world.state.book = CampaignBook::decode(&value.to_string()).unwrap();
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.failure_count(), 25);
    assert_eq!(campaign.unacknowledged_failures(), 0);
    assert_eq!(campaign.failures.len(), book::FAILURE_DETAILS);
    assert_eq!(
        campaign.failures[0].workload.name, "failed-05",
        "the latest reasons are kept"
    );
    // failed-00 carries the revision that failed on it and is still not rolled out: it is
    // not failed again (nor the campaign paused), though its reason was dropped.
    world.patched("failed-00", at(7000));
    world.now = at(7000 + 600);
    let plan = world.step();
    assert!(
        plan.failed.is_empty() && plan.pauses.is_empty(),
        "{plan:#?}"
    );
    assert_eq!(restarted(&plan), ["web"]);
    let value = serde_json::to_value(&world.state.book).unwrap();
    assert_eq!(
        value["campaigns"][LOGGER]["failedWorkloads"]["team"][0],
        "Deployment/failed-00"
    );
}

#[test]
fn a_malformed_failed_workload_is_named() {
    let mut value = serde_json::to_value(&World::new().state.book).unwrap();
    value["campaigns"][LOGGER]["failedWorkloads"] = json!({"team": ["Deployment/web", "Job/x"]});
    let err = CampaignBook::decode(&value.to_string()).unwrap_err();
    assert!(
        err.to_string()
            .contains("failedWorkloads: \"Job/x\" in namespace \"team\" is not Kind/name"),
        "{err}"
    );
}

/// Held and pinned configs are kept whole in the book (a config may take 256 KiB): a few
/// large ones fill it as failures do, and the reason then says so and how to drop them.
#[test]
fn held_and_pinned_configs_count_toward_the_book_budget() {
    let since = Time(at(0));
    let config = |kib: usize| {
        json!({"name": "x", "containers": [{"name": "x", "image": "x:1",
               "env": [{"name": "BLOB", "value": "a".repeat(kib * 1024)}]}]})
    };
    let mut book = CampaignBook::default();
    for sidecar in ["a:v1", "b:v1", "c:v1"] {
        book.pins.insert(
            sidecar.into(),
            book::Pin {
                revision: "rrrrrrrrrrrr".into(),
                content: config(220),
                over: "oooooooooooo".into(),
                by: "ops".into(),
                at: since.clone(),
            },
        );
    }
    assert!(book.overflow().is_none(), "660 KiB of pins fit");
    let mut paused = crate::test_fixtures::campaign(NEW, CampaignState::Paused, since.clone());
    paused.held = Some(book::Hold {
        revision: OLD.into(),
        content: config(250),
        since: since.clone(),
    });
    book.campaigns.insert(LOGGER.into(), paused);

    let overflow = book
        .overflow()
        .expect("910 KiB of configs are over the budget");
    assert_eq!(overflow.sidecar, LOGGER);
    assert_eq!(overflow.failed_workloads, 0);
    assert!(
        (250 * 1024..260 * 1024).contains(&overflow.held_and_pinned_bytes),
        "{overflow:?}"
    );
    // Released, the hold leaves the book under its budget.
    book.campaigns.get_mut(LOGGER).unwrap().held = None;
    assert!(book.overflow().is_none());
}

/// Past 1 MiB no status write succeeds: a pause or a failure would then live only in the
/// leader's memory. Near that, nothing starts that the book could not record.
#[test]
fn a_book_near_the_configmap_limit_starts_no_restart_until_it_shrinks() {
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    let mut failed = 0;
    while world.state.book.overflow().is_none() {
        let campaign = world.state.book.campaigns.get_mut(LOGGER).unwrap();
        for _ in 0..1_000 {
            campaign.failed_workloads.insert(WorkloadRef::new(
                WorkloadKind::Deployment,
                &format!("team-{:03}", failed % 400),
                &format!("checkout-worker-{failed:05}"),
            ));
            failed += 1;
        }
    }
    // Only a revision failing on a very large cluster comes near it.
    assert!(
        failed > 15_000,
        "over the budget at {failed} failed workloads"
    );
    let plan = world.step();
    assert!(plan.restarts.is_empty(), "{plan:#?}");
    let WaitReason::BookFull(overflow) = waiting(&plan, "web") else {
        panic!("{plan:#?}");
    };
    assert_eq!(overflow.sidecar, LOGGER);
    assert_eq!(overflow.failed_workloads, failed);
    assert!(overflow.bytes > book::BOOK_BUDGET_BYTES, "{overflow:?}");
    // The 20,000 failures paused the campaign too, though none came with its reason.
    let pause = &plan.pauses[0].1;
    assert_eq!(pause.failed, 20_000);
    assert!(pause.named.is_empty(), "{pause:?}");
    // Resumed, it still waits on the book, and `drift` says so on the sidecar.
    assert_eq!(
        world.state.book.resume_paused("ops", Time(world.now)).len(),
        1
    );
    let wanted: RevisionsInForce = [(LOGGER.to_owned(), NEW.to_owned())].into_iter().collect();
    let mut report = world.index.classify_revisions(&wanted, &world.policy);
    let notes = world
        .state
        .book
        .notes(&mut report, &Default::default(), world.now);
    let SidecarNote::BookFull(overflow) = &notes[LOGGER] else {
        panic!("{notes:?}");
    };
    assert_eq!(
        (overflow.sidecar.as_str(), overflow.failed_workloads),
        (LOGGER, 20_000)
    );
    // What is written still fits a ConfigMap, with room for the failures of restarts that
    // were rolling when the budget was reached.
    // The ConfigMap's key for the book, and the book.
    let size = "campaigns".len() + world.state.book.encode().len();
    assert!(size + 64 * 1024 < 1024 * 1024, "{size} bytes");

    // A new revision starts its campaign afresh: the book shrinks and web restarts.
    world.target(LOGGER, "cccccccccccc");
    world.now = at(9000);
    world.step();
    world.now = at(9000 + 60);
    let plan = world.step();
    assert!(world.state.book.overflow().is_none());
    assert_eq!(restarted(&plan), ["web"], "{plan:#?}");
}

/// web, stamped for `revision` by an earlier campaign of it (restarted at `rolled_at`), its
/// `replicas` pods at that revision, `available` of them available.
fn restarted_earlier(
    world: &mut World,
    name: &str,
    replicas: usize,
    available: i32,
    (revision, rolled_at): (&str, Timestamp),
) {
    let mut entry = healthy(replicas as i32);
    entry.rollout_revision = Some(format!("{LOGGER}={revision}").into());
    entry.rolled_at = Some(rolled_at);
    entry.available_replicas = Some(available);
    entry.ready_replicas = Some(available);
    world.deployment_with(name, replicas, Some(revision), entry);
}

#[test]
fn a_scale_up_during_a_hold_fails_nothing_and_a_rollback_heals_the_canary_without_pausing() {
    let mut world = World::new();
    world.history = history_with_old_good();
    // The campaign of OLD restarted web and api an hour before NEW came.
    world.deployment("canary", 1, Some(OLD));
    restarted_earlier(&mut world, "web", 2, 2, (OLD, at(3000)));
    restarted_earlier(&mut world, "api", 2, 2, (OLD, at(3000)));
    assert_eq!(restarted(&world.step()), ["canary"]);
    world.patched("canary", at(7200));
    // The canary's new pod (at NEW) never becomes ready beside its old one.
    world.pods(
        "team",
        ("ReplicaSet", "canary-rs2"),
        &["canary-rs2-0"],
        Some(&format!("{LOGGER}={NEW}")),
    );
    world.index.apply_replicaset(
        &PodMeta::new("team", "canary-rs2")
            .owner("Deployment", "canary")
            .0,
    );
    world.now = at(7500);
    let plan = world.step();
    assert_eq!(plan.pauses.len(), 1, "{plan:#?}");
    assert_eq!(
        world.state.book.campaigns[LOGGER]
            .held
            .as_ref()
            .unwrap()
            .revision,
        OLD
    );

    // web scales 2 -> 3 during the hold: its new pod gets the held revision OLD and is not
    // ready yet. Nothing fails: a scale-up says nothing against any revision.
    restarted_earlier(&mut world, "web", 3, 2, (OLD, at(3000)));
    world.now = at(7560);
    let plan = world.step();
    assert!(plan.failed.is_empty(), "{:#?}", plan.failed);
    assert!(plan.pauses.is_empty(), "{:#?}", plan.pauses);
    assert!(plan.restarts.is_empty(), "paused: {:#?}", plan.restarts);

    // `rollout --to logger:v1=previous` pins OLD over NEW.
    world.state.book.pins.insert(
        LOGGER.into(),
        crate::rollout::Pin {
            revision: OLD.into(),
            content: json!({}),
            over: NEW.into(),
            by: "ops".into(),
            at: Time(at(7600)),
        },
    );
    world.target(LOGGER, OLD);
    world.now = at(7600);
    world.step();
    world.now = at(7611);
    let plan = world.step();
    // The canary, with its broken pod, is restarted to OLD; web and api, stamped OLD by the
    // campaign of an hour ago, are not judged again: web's scale-up is no failure of OLD.
    assert_eq!(restarted(&plan), ["canary"], "{plan:#?}");
    assert!(plan.failed.is_empty(), "{:#?}", plan.failed);
    assert_ne!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Paused
    );

    // Even if the canary's restart to OLD failed, the rollback would not pause itself.
    world.patched("canary", at(7611));
    world.now = at(7611 + 301);
    let plan = world.step();
    assert_eq!(plan.failed.len(), 1, "{plan:#?}");
    assert!(plan.pauses.is_empty(), "{:#?}", plan.pauses);
    assert_ne!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Paused
    );
}

#[test]
fn a_carrier_whose_new_pods_get_the_held_revision_waits_and_is_not_failed() {
    let mut world = World::new();
    world.history = history_with_old_good();
    world.settings.canary = 0;
    world.settings.max_parallel = 2;
    world
        .deployment("a", 1, Some(OLD))
        .deployment("b", 1, Some(OLD));
    assert_eq!(restarted(&world.step()), ["a", "b"]);
    world.patched("a", at(7200));
    world.patched("b", at(7400));
    // a fails (its rollout never finishes); the campaign pauses and holds OLD.
    world.now = at(7501);
    let plan = world.step();
    assert_eq!(plan.pauses.len(), 1, "{plan:#?}");
    assert_eq!(plan.failed.len(), 1, "{plan:#?}");
    // b's controller finished, but with the hold in force its new pod got OLD: not current, and
    // no failure of NEW either, not even past its --rollout-timeout. It waits for the campaign.
    let mut entry = world.entry("b");
    entry.observed_generation = entry.generation;
    world.set_entry("b", entry);
    world.now = at(7800);
    let plan = world.step();
    assert!(
        plan.failed.iter().all(|f| f.workload.name != "b"),
        "{:#?}",
        plan.failed
    );
    assert!(
        matches!(waiting(&plan, "b"), WaitReason::CampaignPaused { .. }),
        "{plan:#?}"
    );
    assert!(plan.rolling.iter().all(|r| r.workload.name != "b"));
}

#[test]
fn a_bake_failure_found_while_the_workload_is_healthy_fails_it_at_once() {
    use crate::rollout::Bake;
    let mut world = World::new();
    world.settings.bake = Duration::from_secs(30);
    world
        .deployment("canary", 1, Some(OLD))
        .deployment("other", 2, Some(OLD));
    assert_eq!(restarted(&world.step()), ["canary"]);
    world.patched("canary", at(7200));
    world.now = at(7210);
    world.rolled("canary", 1);
    let canary = WorkloadRef::new(WorkloadKind::Deployment, "team", "canary");
    let target = crate::config::RevisionStamp::sorted([(LOGGER, NEW)]);
    world.step();
    // The read found a container that crashed and is back up: the workload is rolled out and
    // every pod current, and the restart still fails, now (it used to wait out a finish grace,
    // then plan a heal with no pods to heal, which panicked in the gates).
    world.state.baking.insert(
        canary.clone(),
        Bake {
            target,
            since: at(7210),
            read_at: Some(at(7225)),
            problem: Some("pod canary-rs2-0: container logger (restarted 1 time)".into()),
            ..Default::default()
        },
    );
    for now in [7225, 7300, 7400] {
        world.now = at(now);
        let plan = world.step();
        assert!(
            plan.restarts.iter().all(|r| r.workload != canary),
            "{plan:#?}"
        );
        if now == 7225 {
            assert_eq!(plan.failed.len(), 1, "{plan:#?}");
            assert_eq!(plan.pauses.len(), 1);
        }
    }
}

mod machine;

/// 2,500 stale Deployments, 500 of them in one team's namespace: the first plan starts no more
/// than --max-parallel, that namespace no more than its own limit, and the campaign says when
/// its restart budget lets it end at the earliest.
#[test]
fn a_campaign_over_thousands_of_workloads_keeps_its_limits_and_names_its_end() {
    let mut world = World::new();
    world.settings.canary = 0;
    world.settings.max_parallel = 20;
    world.settings.max_restarts_per_minute = 30;
    world.settings.max_parallel_per_namespace = 5;
    let big: Vec<String> = (0..500).map(|i| format!("api-{i:03}")).collect();
    let big: Vec<&str> = big.iter().map(String::as_str).collect();
    stale_in(&mut world, "big-team", &big, None);
    for team in 0..100 {
        let namespace: &'static str = Box::leak(format!("team-{team:02}").into_boxed_str());
        let names: Vec<String> = (0..20).map(|i| format!("svc-{i:02}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        stale_in(&mut world, namespace, &names, None);
    }
    let plan = world.step();
    assert_eq!(plan.restarts.len(), 20, "--max-parallel holds");
    let in_big = plan
        .restarts
        .iter()
        .filter(|r| r.workload.namespace == "big-team")
        .count();
    assert!(in_big <= 5, "{in_big} restarts in big-team");
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Running);
    let pending = campaign.counts.pending;
    assert_eq!(pending + campaign.counts.rolling, 2_500);
    // The first 30 go in this minute, then 30 a minute.
    let minutes = i64::from((pending - 1) / 30);
    let end = campaign.expected_end.as_ref().expect("an expected end").0;
    assert_eq!(end, at(7200 + minutes * 60));
    // `drift` says it on the sidecar's row, and in its JSON.
    let wanted: RevisionsInForce = [(LOGGER.to_owned(), NEW.to_owned())].into_iter().collect();
    let mut report = world.index.classify_revisions(&wanted, &world.policy);
    let book = &world.state.book;
    let notes = book.notes(&mut report, &Default::default(), world.now);
    assert_eq!(
        notes[LOGGER],
        SidecarNote::Ends {
            at: Time(end),
            pending
        }
    );
    let row = report.sidecars.iter().find(|s| s.name == LOGGER).unwrap();
    let json = serde_json::to_value(row).unwrap();
    assert_eq!(
        json["expectedEnd"],
        serde_json::json!(end.to_string()),
        "{json}"
    );
}

#[test]
fn the_expected_end_counts_from_the_settle_window_and_only_while_to_come() {
    use crate::rollout::book::CampaignCounts;
    use crate::rollout::planner::campaigns::expected_end;
    let counts = CampaignCounts {
        pending: 61,
        ..Default::default()
    };
    let (settled, now) = (at(600), at(0));
    assert_eq!(
        expected_end(CampaignState::Settling, &counts, settled, now, 30),
        Some(at(600 + 120))
    );
    assert_eq!(
        expected_end(CampaignState::Running, &counts, settled, at(1000), 30),
        Some(at(1000 + 120))
    );
    let none_left = CampaignCounts::default();
    assert_eq!(
        expected_end(CampaignState::Running, &none_left, settled, at(1000), 30),
        Some(at(1000))
    );
    for state in [
        CampaignState::Complete,
        CampaignState::Paused,
        CampaignState::Manual,
    ] {
        assert_eq!(expected_end(state, &counts, settled, now, 30), None);
    }
}

/// A history where NEW (the revision rolled out) is good.
fn history_with_new_good() -> crate::rollout::history::RevisionHistory {
    use crate::rollout::history::{HistoryEntry, Outcome};
    crate::rollout::history::RevisionHistory {
        sidecars: [(
            LOGGER.to_owned(),
            vec![HistoryEntry {
                revision: NEW.into(),
                content: serde_json::json!({"containers": [{"name": "logger", "image": NEW}]}),
                first_served: Time(at(0)),
                outcome: Outcome::Good,
                reason: None,
            }],
        )]
        .into(),
    }
}

#[test]
fn a_gated_revision_restarts_nothing_and_holds_new_pods_until_promoted() {
    const NEXT: &str = "cccccccccccc";
    let mut world = World::new();
    world.settings.promotion = crate::rollout::promotion::PromotionMode::Gated;
    world.history = history_with_new_good();
    world.deployment("web", 2, Some(NEW));
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Complete
    );
    world.target(LOGGER, NEXT);
    let arrived = world.now;
    world.step();
    // Long past the settle window: still nothing restarts.
    world.now = at(7200 + 3600);
    let plan = world.step();
    assert!(restarted(&plan).is_empty(), "{plan:#?}");
    assert_eq!(
        waiting(&plan, "web"),
        &WaitReason::AwaitingPromotion {
            sidecar: LOGGER.into()
        }
    );
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Gated);
    assert_eq!(campaign.previous.as_deref(), Some(NEW));
    let hold = campaign.held.clone().expect("new pods kept at NEW");
    assert_eq!(hold.revision, NEW);
    assert_eq!(campaign.counts.pending, 1);
    // An approval of another revision promotes nothing.
    world.state.book.promotions.insert(
        LOGGER.into(),
        crate::rollout::Promotion {
            revision: OLD.into(),
            by: "ops".into(),
            at: Time(world.now),
        },
    );
    assert!(restarted(&world.step()).is_empty());
    // Its own does: the campaign runs, canary first, and the hold ends.
    world.state.book.promotions.insert(
        LOGGER.into(),
        crate::rollout::Promotion {
            revision: NEXT.into(),
            by: "ops".into(),
            at: Time(world.now),
        },
    );
    // It comes into force for new pods now: it settles before anything restarts, so that
    // every replica serves it (no longer the held one) before a restart's new pods arrive.
    let promoted = world.now;
    assert!(restarted(&world.step()).is_empty());
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Settling);
    assert_eq!(campaign.since, Time(promoted));
    assert!(campaign.held.is_none());
    assert_ne!(promoted, arrived);
    world.now = crate::rollout::after(promoted, world.settings.settle);
    let plan = world.step();
    assert_eq!(restarted(&plan), ["web"]);
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Running
    );
}

#[test]
fn no_gate_for_a_new_sidecar_a_revert_or_with_the_gate_off() {
    // A sidecar new to the cluster starts at once.
    let mut world = World::new();
    world.settings.promotion = crate::rollout::promotion::PromotionMode::Gated;
    world.target("tracer:v1", "dddddddddddd");
    world.step();
    assert_eq!(
        world.state.book.campaigns["tracer:v1"].state,
        CampaignState::Settling
    );
    // A config put back to the revision rolled out while the next one waited: no gate.
    world.target(LOGGER, "cccccccccccc");
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Gated
    );
    world.target(LOGGER, NEW);
    world.step();
    let campaign = &world.state.book.campaigns[LOGGER];
    assert_eq!(campaign.state, CampaignState::Settling);
    assert_eq!(campaign.previous.as_deref(), Some(NEW));
    // The gate turned off (the flag removed): a waiting revision starts.
    world.target(LOGGER, "cccccccccccc");
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Gated
    );
    world.settings.promotion = crate::rollout::promotion::PromotionMode::Auto;
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].state,
        CampaignState::Settling
    );
}

#[test]
fn a_complete_campaign_records_since_when_and_loses_it_when_it_runs_again() {
    let mut world = World::new();
    world.deployment("web", 1, Some(NEW));
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].completed,
        Some(Time(at(7200)))
    );
    world.now = at(8000);
    world.step();
    assert_eq!(
        world.state.book.campaigns[LOGGER].completed,
        Some(Time(at(7200))),
        "kept while it stays complete"
    );
    world.deployment("late", 1, Some(OLD));
    world.step();
    assert_eq!(world.state.book.campaigns[LOGGER].completed, None);
}

#[test]
fn the_webhook_serves_the_last_good_revision_while_the_next_waits_for_promotion() {
    use crate::config::revision::injected_content;
    let loaded = |image: &str| {
        crate::test_fixtures::loaded(&format!(
            "name: logger:v1\ncontainers: [{{name: log-shipper, image: '{image}'}}]\n"
        ))
    };
    let (good, next) = (loaded("shipper:1"), loaded("shipper:2"));
    let config: crate::config::SidecarSet = std::iter::once(next.clone()).collect();
    let name: crate::name::SidecarName = LOGGER.parse().unwrap();
    let mut campaign = crate::test_fixtures::campaign(
        next.revision.as_str(),
        CampaignState::Gated,
        Time(Timestamp::UNIX_EPOCH),
    );
    campaign.held = Some(crate::rollout::Hold {
        revision: good.revision.to_string(),
        content: injected_content(&good.config),
        since: Time(Timestamp::UNIX_EPOCH),
    });
    let mut book = CampaignBook::default();
    book.campaigns.insert(LOGGER.into(), campaign);
    let new_pods = book.new_pods(&config);
    assert!(new_pods.errors.is_empty(), "{:?}", new_pods.errors);
    assert_eq!(new_pods.served.get(&name).unwrap().revision, good.revision);
    assert_eq!(
        new_pods.warnings[&name],
        HeldWarning::AwaitingPromotion {
            held: good.revision.to_string(),
            revision: next.revision.to_string()
        }
    );

    // drift says what it waits for, and what new pods get.
    let mut world = World::new();
    world.deployment("web", 1, Some(OLD));
    let wanted: RevisionsInForce = [(LOGGER.to_owned(), next.revision.to_string())]
        .into_iter()
        .collect();
    let mut report = world.index.classify_revisions(&wanted, &world.policy);
    let notes = book.notes(&mut report, &Default::default(), world.now);
    assert_eq!(report.sidecars[0].campaign.as_deref(), Some("gated"));
    assert_eq!(
        notes[LOGGER],
        SidecarNote::Gated {
            revision: next.revision.to_string(),
            held: Some(good.revision.to_string()),
            upstream: None,
        }
    );
}

#[test]
fn a_workload_whose_new_pods_the_webhook_would_refuse_is_not_restarted() {
    let config = "name: logger:v1\npodResources: refuse\ncontainers:\n  - {name: shipper, image: s:2, resources: {requests: {cpu: 100m}}}\n";
    let sidecars: crate::config::SidecarSet = std::iter::once(crate::config::LoadedSidecar::new(
        crate::config::parse_config("logger.yaml", config)
            .unwrap()
            .config,
        "logger.yaml",
    ))
    .collect();
    let template = |pod_cpu: &str| -> Option<std::sync::Arc<str>> {
        Some(
            json!({
                "metadata": {"annotations": {"injector/request": LOGGER}},
                "spec": {
                    "resources": {"requests": {"cpu": pod_cpu}},
                    "containers": [{"name": "app", "resources": {"requests": {"cpu": "450m"}}}]
                }
            })
            .to_string()
            .into(),
        )
    };
    let mut world = World::new();
    world.served = Some((sidecars, crate::injection::InjectionSettings::default()));
    let tight = WorkloadEntry {
        template: template("500m"),
        ..healthy(2)
    };
    world.deployment_with("tight", 2, Some(OLD), tight);
    world.deployment_with(
        "roomy",
        2,
        Some(OLD),
        WorkloadEntry {
            template: template("1"),
            ..healthy(2)
        },
    );
    world.settings.canary = 0;
    let plan = world.plan();
    assert_eq!(restarted(&plan), ["roomy"]);
    let reason = waiting(&plan, "tight");
    assert!(!reason.clears_by_itself());
    assert_eq!(
        reason,
        &WaitReason::PodsWouldBeRefused {
            denial: "sidecar \"logger:v1\" does not fit the pod's resources (its config says \
                     podResources: refuse): spec.resources.requests.cpu is 500m, and the \
                     containers would request 550m with the sidecar; raise \
                     spec.resources.requests.cpu to 550m or more, or remove \
                     spec.resources.requests.cpu"
                .into()
        }
    );
    // Raised, it is restarted.
    world.set_entry(
        "tight",
        WorkloadEntry {
            template: template("600m"),
            ..healthy(2)
        },
    );
    assert!(restarted(&world.plan()).contains(&"tight"));
}
