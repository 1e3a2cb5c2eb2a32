//! The plan the engine would make now, without acting: what `explain` and a `rollout` without
//! `--confirm` show.

use super::{ContainerRun, EngineOptions};
use crate::cluster::status::InjectorState;
use crate::config::SidecarSet;

/// What a snapshot plan brings pods to.
pub(crate) enum Aim {
    /// The revisions in force: those a running injector published (`--revisions-from`), or
    /// the configs read here.
    Revisions(Option<crate::cluster::status::Publication>),
    /// `rollout --sidecar-container-name`: a selection of pods by container name.
    Containers(ContainerRun),
}

/// The plan the engine would make now, as one pure step of the rollout state machine on a
/// snapshot: the cluster as `feed` listed it, the campaign book and the revision history of
/// `state`. No executor: nothing is acted on, written or followed. What
/// cannot be read (a team's rights) is said, and planned without.
pub(crate) fn plan_now(
    state: &InjectorState,
    options: &EngineOptions,
    feed: &crate::cluster::drift_feed::DriftFeed,
    set: &SidecarSet,
    aim: &Aim,
) -> crate::rollout::RolloutPlan {
    use crate::rollout::machine::{Conduct, OnIndex, RolloutState};
    use crate::rollout::targets::{ContentHistory, revision_targets};

    let now = k8s_openapi::jiff::Timestamp::now();
    let (targets, book, revisions, in_force) = match aim {
        Aim::Containers(run) => (
            run.selection.targets(),
            crate::rollout::CampaignBook::default(),
            crate::rollout::history::RevisionHistory::default(),
            SidecarSet::default(),
        ),
        Aim::Revisions(published) => {
            let book = state.book().cloned().unwrap_or_else(|err| {
                tracing::warn!("{err}; planning as if there were no campaigns");
                crate::rollout::CampaignBook::default()
            });
            let mut revisions = state.history().cloned().unwrap_or_else(|err| {
                tracing::warn!("{err}; planning without the revision history");
                crate::rollout::history::RevisionHistory::default()
            });
            let published = published.as_ref().map(|p| (&p.revisions, &p.manual));
            let computed = revision_targets(
                &book,
                published,
                &mut ContentHistory::default(),
                &mut revisions,
                set,
                &options.settings,
                !options.ignore_manual_policy,
                now,
            );
            for error in &computed.errors {
                tracing::warn!("a pinned revision is not served: {error}");
            }
            (computed.targets, book, revisions, computed.in_force)
        }
    };
    let injection = crate::injection::InjectionSettings::preflight(&options.keys);
    let index = feed.index.lock().expect("drift index lock");
    let live = match aim {
        Aim::Containers(run) => Some((&run.selection, run.live.lock().expect("live pods lock"))),
        Aim::Revisions(_) => None,
    };
    let input = OnIndex {
        index: &index,
        targets: &targets,
        settings: &options.settings,
        history: &revisions,
        policy: &options.policy,
        kinds: options.kinds.as_ref(),
        selection: live.as_ref().map(|(selection, live)| (*selection, &**live)),
        bakes_changed: &std::collections::BTreeSet::new(),
        served: Some(crate::rollout::Served {
            sidecars: &in_force,
            settings: &injection,
        }),
    };
    let mut plan = RolloutState::with_book(book)
        .step_on_index(
            &input,
            now,
            Conduct::Plan {
                follow_bakes: false,
            },
        )
        .plan;
    crate::render::word_plan(&mut plan, now);
    plan
}
