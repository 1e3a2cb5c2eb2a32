//! `check`: proof that an injector works end to end. The shell asks the API server to create
//! [`probe_pod`] as a server-side dry run, which runs every mutating webhook and admission
//! policy a real pod meets, and [`judge`] reads the pod it is answered with.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::annotations::AnnotationKeys;
use crate::explain::PodState;
use crate::name::SidecarName;

/// The image of the probe pod's one container: never pulled, since the pod is never created.
pub const PROBE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// A pod that requests `request`, with a generated name, and a container that passes the
/// `restricted` Pod Security Standard, so that what refuses it is about the sidecars.
pub fn probe_pod(request: &[SidecarName], keys: &AnnotationKeys) -> Pod {
    let request = request
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    Pod {
        metadata: ObjectMeta {
            generate_name: Some("sidecar-injector-check-".to_owned()),
            annotations: Some(BTreeMap::from([(keys.request.clone(), request)])),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_owned(),
                "sidecar-injector-check".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some(PROBE_IMAGE.to_owned()),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    run_as_non_root: Some(true),
                    run_as_user: Some(65532),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".to_owned()]),
                        ..Capabilities::default()
                    }),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".to_owned(),
                        ..SeccompProfile::default()
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// What became of one requested sidecar in the answered pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SidecarCheck {
    /// Stamped with this revision.
    Injected { sidecar: String, revision: String },
    /// Not among the pod's stamped revisions.
    Missing { sidecar: String },
}

/// The answered pod, judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Whether an injector marked the pod injected at all: when not, none was reached.
    pub stamped: bool,
    pub sidecars: Vec<SidecarCheck>,
    /// The pod's containers and init containers, in order, as answered.
    pub containers: Vec<String>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.stamped
            && self
                .sidecars
                .iter()
                .all(|check| matches!(check, SidecarCheck::Injected { .. }))
    }
}

/// The answered pod judged against the sidecars its request named.
pub fn judge(request: &[SidecarName], answered: &Pod, keys: &AnnotationKeys) -> CheckReport {
    let spec = answered.spec.clone().unwrap_or_default();
    let containers: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|container| container.name.clone())
        .collect();
    let annotations = answered.metadata.annotations.clone().unwrap_or_default();
    let state = PodState::read(&annotations, keys, containers.clone());
    let sidecars = request
        .iter()
        .map(|name| {
            let sidecar = name.to_string();
            match state.revisions.get(&sidecar) {
                Some(revision) if state.injected => SidecarCheck::Injected {
                    sidecar,
                    revision: revision.clone(),
                },
                _ => SidecarCheck::Missing { sidecar },
            }
        })
        .collect();
    CheckReport {
        stamped: state.injected,
        sidecars,
        containers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logger() -> Vec<SidecarName> {
        SidecarName::parse_list("logger:v1").unwrap()
    }

    fn answered(probe: &Pod, stamps: &[(&str, &str)], extra: &[&str]) -> Pod {
        let mut pod = probe.clone();
        let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (key, value) in stamps {
            annotations.insert((*key).to_owned(), (*value).to_owned());
        }
        let spec = pod.spec.as_mut().unwrap();
        for name in extra {
            spec.containers.push(Container {
                name: (*name).to_owned(),
                ..Container::default()
            });
        }
        pod
    }

    #[test]
    fn the_probe_requests_the_sidecars_and_passes_the_restricted_standard() {
        let keys = AnnotationKeys::default();
        let request = SidecarName::parse_list("logger:v1,tracer:v2").unwrap();
        let pod = probe_pod(&request, &keys);
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["injector/request"], "logger:v1,tracer:v2");
        let context = pod.spec.as_ref().unwrap().containers[0]
            .security_context
            .clone()
            .unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        assert_eq!(context.allow_privilege_escalation, Some(false));
        assert_eq!(context.capabilities.unwrap().drop.unwrap(), ["ALL"]);
    }

    #[test]
    fn a_stamped_pod_with_the_revision_passes() {
        let keys = AnnotationKeys::default();
        let probe = probe_pod(&logger(), &keys);
        let pod = answered(
            &probe,
            &[
                ("injector/status", "injected"),
                ("injector/revision", "logger:v1=3f2a9c1e"),
            ],
            &["log-shipper"],
        );
        let report = judge(&logger(), &pod, &keys);
        assert!(report.passed());
        assert_eq!(
            report.sidecars,
            [SidecarCheck::Injected {
                sidecar: "logger:v1".into(),
                revision: "3f2a9c1e".into()
            }]
        );
        assert_eq!(report.containers, ["app", "log-shipper"]);
    }

    #[test]
    fn an_unstamped_pod_or_a_missing_sidecar_fails() {
        let keys = AnnotationKeys::default();
        let probe = probe_pod(&logger(), &keys);
        let untouched = judge(&logger(), &probe, &keys);
        assert!(!untouched.passed());
        assert!(!untouched.stamped);

        let request = SidecarName::parse_list("logger:v1,tracer:v2").unwrap();
        let pod = answered(
            &probe,
            &[
                ("injector/status", "injected"),
                ("injector/revision", "logger:v1=3f2a9c1e"),
            ],
            &[],
        );
        let report = judge(&request, &pod, &keys);
        assert!(!report.passed());
        assert_eq!(
            report.sidecars[1],
            SidecarCheck::Missing {
                sidecar: "tracer:v2".into()
            }
        );
    }
}
