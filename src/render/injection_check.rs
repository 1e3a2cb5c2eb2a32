//! What `check` says of the pod a dry-run create was answered with.

use crate::check::{CheckReport, SidecarCheck};

/// One line per requested sidecar, and when one is missing, why it may be: the report's
/// lines, and whether every one of them passed.
pub(crate) fn check_lines(report: &CheckReport, namespace: &str) -> Vec<String> {
    let mut lines: Vec<String> = report
        .sidecars
        .iter()
        .map(|check| match check {
            SidecarCheck::Injected { sidecar, revision } => format!(
                "{sidecar}: injected, revision {revision}, into a dry-run pod in namespace {namespace}"
            ),
            SidecarCheck::Missing { sidecar } => {
                format!("{sidecar}: not injected into a dry-run pod in namespace {namespace}")
            }
        })
        .collect();
    if report.passed() {
        lines.push(format!(
            "the pod's containers as the API server answered: {}",
            report.containers.join(", ")
        ));
    } else if report.stamped {
        lines.push(
            "an injector reached the pod but left these out: does each config exist, and does `sidecar-injector explain -f` of such a pod say why?"
                .to_owned(),
        );
    } else {
        lines.push(format!(
            "no injector reached the pod: the API server answered it as it was sent. Is the webhook registered (in policy mode, the policies bound) for namespace {namespace}, the namespace not the injector's own nor labelled sidecar-injector.io/injection=disabled, and a replica ready? With failurePolicy Ignore, a webhook that cannot be called lets pods through without sidecars"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(stamped: bool, sidecars: Vec<SidecarCheck>) -> CheckReport {
        CheckReport {
            stamped,
            sidecars,
            containers: vec!["app".into(), "log-shipper".into()],
        }
    }

    #[test]
    fn a_pass_names_the_revision_and_the_containers() {
        let lines = check_lines(
            &report(
                true,
                vec![SidecarCheck::Injected {
                    sidecar: "logger:v1".into(),
                    revision: "3f2a9c1e".into(),
                }],
            ),
            "default",
        );
        assert_eq!(
            lines,
            [
                "logger:v1: injected, revision 3f2a9c1e, into a dry-run pod in namespace default",
                "the pod's containers as the API server answered: app, log-shipper",
            ]
        );
    }

    #[test]
    fn a_failure_says_whether_any_injector_was_reached() {
        let missing = || {
            vec![SidecarCheck::Missing {
                sidecar: "tracer:v2".into(),
            }]
        };
        let unreached = check_lines(&report(false, missing()), "team-a");
        assert_eq!(
            unreached[0],
            "tracer:v2: not injected into a dry-run pod in namespace team-a"
        );
        assert!(unreached[1].starts_with("no injector reached the pod"));
        assert!(unreached[1].contains("for namespace team-a"));
        let reached = check_lines(&report(true, missing()), "team-a");
        assert!(reached[1].starts_with("an injector reached the pod but left these out"));
    }
}
