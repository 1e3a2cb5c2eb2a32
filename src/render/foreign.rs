//! What differs between a running pod's foreign sidecars and what a new pod gets, in words:
//! `mesh-proxy image proxy:1.27 -> proxy:1.28; env MESH_META added`.

use crate::foreign::{EntryChanges, ForeignChange};

/// Every change, `; `-separated, in the order the core found them.
pub(crate) fn foreign_changes(changes: &[ForeignChange]) -> String {
    changes
        .iter()
        .map(foreign_change)
        .collect::<Vec<_>>()
        .join("; ")
}

fn foreign_change(change: &ForeignChange) -> String {
    match change {
        ForeignChange::Missing { container } => {
            format!("{container} missing (a new pod gets it)")
        }
        ForeignChange::NoLongerInjected { container } => {
            format!("{container} no longer injected (a new pod has none)")
        }
        ForeignChange::Form {
            container,
            running,
            expected,
        } => format!(
            "{container} runs {}, a new pod gets it {}",
            running.as_str(),
            expected.as_str()
        ),
        ForeignChange::Position {
            container,
            running,
            expected,
        } => format!("{container} position {running} -> {expected}"),
        ForeignChange::Image {
            container,
            running,
            expected,
        } => format!("{container} image {running} -> {expected}"),
        ForeignChange::Entries {
            container,
            field,
            entries,
        } => format!("{container} {field} {}", entry_changes(entries)),
        ForeignChange::Field { container, field } => format!("{container} {field} changed"),
        ForeignChange::Volumes(entries) => format!("volumes {}", entry_changes(entries)),
        ForeignChange::InitContainers(entries) => {
            format!("init containers {}", entry_changes(entries))
        }
    }
}

/// `A, B added, C removed, D changed`: each part only when it has entries.
fn entry_changes(entries: &EntryChanges) -> String {
    [
        (&entries.added, "added"),
        (&entries.removed, "removed"),
        (&entries.changed, "changed"),
    ]
    .into_iter()
    .filter(|(names, _)| !names.is_empty())
    .map(|(names, what)| format!("{} {what}", names.join(", ")))
    .collect::<Vec<_>>()
    .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foreign::ContainerForm;

    #[test]
    fn each_change_is_said_with_what_it_names() {
        let changes = [
            ForeignChange::Image {
                container: "istio-proxy".into(),
                running: "proxyv2:1.27.1".into(),
                expected: "proxyv2:1.28.0".into(),
            },
            ForeignChange::Entries {
                container: "istio-proxy".into(),
                field: "env".into(),
                entries: EntryChanges {
                    added: vec!["ISTIO_META_MESH_ID".into(), "PROXY_XDS".into()],
                    removed: vec!["OLD".into()],
                    changed: vec![],
                },
            },
            ForeignChange::Form {
                container: "istio-proxy".into(),
                running: ContainerForm::Classic,
                expected: ContainerForm::Native,
            },
            ForeignChange::Position {
                container: "istio-proxy".into(),
                running: 1,
                expected: 0,
            },
            ForeignChange::Field {
                container: "istio-proxy".into(),
                field: "resources".into(),
            },
            ForeignChange::Volumes(EntryChanges {
                changed: vec!["istio-envoy".into()],
                ..EntryChanges::default()
            }),
            ForeignChange::InitContainers(EntryChanges {
                removed: vec!["istio-init".into()],
                ..EntryChanges::default()
            }),
            ForeignChange::Missing {
                container: "vault-agent".into(),
            },
            ForeignChange::NoLongerInjected {
                container: "linkerd-proxy".into(),
            },
        ];
        let said: Vec<String> = changes.iter().map(foreign_change).collect();
        assert_eq!(
            said,
            [
                "istio-proxy image proxyv2:1.27.1 -> proxyv2:1.28.0",
                "istio-proxy env ISTIO_META_MESH_ID, PROXY_XDS added, OLD removed",
                "istio-proxy runs classic, a new pod gets it native",
                "istio-proxy position 1 -> 0",
                "istio-proxy resources changed",
                "volumes istio-envoy changed",
                "init containers istio-init removed",
                "vault-agent missing (a new pod gets it)",
                "linkerd-proxy no longer injected (a new pod has none)",
            ]
        );
        assert_eq!(
            foreign_changes(&changes[..2]),
            "istio-proxy image proxyv2:1.27.1 -> proxyv2:1.28.0; istio-proxy env ISTIO_META_MESH_ID, PROXY_XDS added, OLD removed"
        );
    }
}
