//! Why a workload is restarted, in words: its `NS/rollout-reason`, the plan's reason column,
//! Events and the logs.

use crate::drift::DriftState;
use crate::rollout::{Restart, SidecarChange};
use crate::workload::RestartMethod;

/// `sidecar logger:v1 3f2a9c1e7b0d -> 77b0d2aa41c9: containers[logger].image "1.0" -> "2.0"`.
fn changes(changes: &[SidecarChange]) -> String {
    changes
        .iter()
        .map(|c| {
            let from = match (&c.from, c.state) {
                (Some(revision), _) => revision.as_str(),
                (None, DriftState::Unknown) => "(injected without a revision)",
                (None, _) => "(not injected)",
            };
            let mut text = format!("sidecar {} {from} -> {}", c.sidecar, c.to);
            if let Some(what) = &c.what {
                text.push_str(": ");
                text.push_str(what);
            }
            text
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The restart's reason.
pub(crate) fn restart_reason(restart: &Restart) -> String {
    if let Some(selected) = &restart.selected {
        return format!(
            "container {} in {} pod(s) started before {}",
            selected.containers.join(", "),
            selected.pods,
            selected.started_before
        );
    }
    let changed = changes(&restart.changes);
    let reason = if restart.reverted {
        format!(
            "the template stamp this engine set ({}) was reverted while the pods stayed (a GitOps controller's self-heal?); restarting by eviction instead, the template untouched: {changed}",
            restart
                .target
                .as_ref()
                .map_or("", crate::config::RevisionStamp::as_str),
        )
    } else if restart.heal {
        format!(
            "{} pod(s) were created while the webhook was bypassed (down, unreachable or too slow, with failurePolicy Ignore); restarted once more: {changed}",
            restart.missed
        )
    } else {
        changed
    };
    match (&restart.not_in_place, restart.method) {
        (_, RestartMethod::InPlace) => format!("in place: {reason}"),
        (Some(why), _) => format!("{reason} (restarted, not upgraded in place: {why})"),
        _ => reason,
    }
}

/// The restart with its reason in words.
pub(crate) fn word_restart(restart: &mut Restart) {
    restart.reason = restart_reason(restart);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RevisionStamp;
    use crate::rollout::in_place::NotInPlace;
    use crate::rollout::selection::SelectedPods;
    use crate::workload::{WorkloadKind, WorkloadRef};

    fn restart(changes: Vec<SidecarChange>) -> Restart {
        let web = WorkloadRef::new(WorkloadKind::Deployment, "team", "web");
        Restart {
            target: Some(RevisionStamp::sorted([("logger:v1", "bbbbbbbbbbbb")])),
            pods: 2,
            ..crate::test_fixtures::restart(web, changes)
        }
    }

    fn change(state: DriftState, from: Option<&str>, what: Option<&str>) -> SidecarChange {
        SidecarChange {
            sidecar: "logger:v1".into(),
            state,
            from: from.map(str::to_owned),
            to: "bbbbbbbbbbbb".into(),
            what: what.map(str::to_owned),
        }
    }

    #[test]
    fn a_restart_says_each_sidecars_revisions_and_what_changed() {
        let stale = change(
            DriftState::Stale,
            Some("aaaaaaaaaaaa"),
            Some(r#"containers[logger].image "l:1" -> "l:2""#),
        );
        assert_eq!(
            restart_reason(&restart(vec![stale.clone()])),
            r#"sidecar logger:v1 aaaaaaaaaaaa -> bbbbbbbbbbbb: containers[logger].image "l:1" -> "l:2""#
        );
        assert_eq!(
            restart_reason(&restart(vec![
                change(DriftState::Unknown, None, None),
                change(DriftState::Uninjected, None, None),
            ])),
            "sidecar logger:v1 (injected without a revision) -> bbbbbbbbbbbb; sidecar logger:v1 (not injected) -> bbbbbbbbbbbb"
        );

        let mut heal = restart(vec![change(DriftState::Uninjected, None, None)]);
        (heal.heal, heal.missed) = (true, 1);
        assert_eq!(
            restart_reason(&heal),
            "1 pod(s) were created while the webhook was bypassed (down, unreachable or too slow, with failurePolicy Ignore); restarted once more: sidecar logger:v1 (not injected) -> bbbbbbbbbbbb"
        );
        let mut reverted = restart(vec![stale.clone()]);
        (reverted.reverted, reverted.method) = (true, RestartMethod::Evict);
        assert!(
            restart_reason(&reverted).starts_with(
                "the template stamp this engine set (logger:v1=bbbbbbbbbbbb) was reverted"
            ),
            "{}",
            restart_reason(&reverted)
        );
        let mut in_place = restart(vec![stale.clone()]);
        in_place.method = RestartMethod::InPlace;
        assert!(restart_reason(&in_place).starts_with("in place: sidecar logger:v1 aaaaaaaaaaaa"));
        let mut not_in_place = restart(vec![stale]);
        not_in_place.not_in_place = Some(NotInPlace::Recreate);
        assert!(
            restart_reason(&not_in_place)
                .ends_with("(restarted, not upgraded in place: strategy Recreate)"),
            "{}",
            restart_reason(&not_in_place)
        );
    }

    #[test]
    fn a_restart_chosen_by_container_says_which_pods() {
        let mut chosen = restart(Vec::new());
        chosen.selected = Some(SelectedPods {
            containers: vec!["istio-proxy".into()],
            pods: 1,
            started_before: "2023-11-14T22:16:40Z".into(),
        });
        assert_eq!(
            restart_reason(&chosen),
            "container istio-proxy in 1 pod(s) started before 2023-11-14T22:16:40Z"
        );
    }
}
