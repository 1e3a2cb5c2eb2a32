use std::collections::BTreeSet;

use super::*;
use crate::test_fixtures::loaded;

fn set(texts: &[&str]) -> SidecarSet {
    let mut set = SidecarSet::default();
    for text in texts {
        set.insert(loaded(text));
    }
    set
}

fn rendered(
    texts: &[&str],
    on_missing_sidecar: MissingSidecarPolicy,
) -> Result<Vec<Value>, PolicyError> {
    let keys = AnnotationKeys::new("injector");
    let ignored: BTreeSet<String> = ["kube-system".to_owned()].into();
    render(
        &set(texts),
        &PolicySettings {
            keys: &keys,
            ignored_namespaces: &ignored,
            on_missing_sidecar,
            name: "sidecar-injector",
            namespace_selector: None,
        },
    )
}

const LOGGER: &str = "name: logger:v1\ncontainers: [{name: log-shipper, image: 'fluent-bit:2'}]\n\
                      env: [{name: ENDPOINT, value: 'http://x'}]\n\
                      volumeMounts: [{name: logs, mountPath: /var/log/app}]\n\
                      volumes: [{name: logs, emptyDir: {}}]\n";

#[test]
fn a_config_the_policies_cannot_express_is_refused_with_each_reason() {
    let refused = rendered(
        &[
            LOGGER,
            "name: secrets:v1\nserviceAccountName: vault\ninitContainers: [{name: init, image: v}]\n",
            "name: native:v1\nnativeSidecars: auto\ncontainers: [{name: n, image: n}]\n",
        ],
        MissingSidecarPolicy::Deny,
    )
    .unwrap_err();
    let PolicyError::Refused(refused) = refused else {
        panic!("{refused}")
    };
    let said: Vec<String> = refused.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "native:v1 (test.yaml): nativeSidecars: auto: the form follows the nodes' kubelets, which a policy does not see (true or jobs can be compiled)"
        ]
    );
}

#[test]
fn the_policies_are_labelled_kept_off_ignored_namespaces_and_inject_in_request_order() {
    let objects = rendered(
        &[
            LOGGER,
            "name: tracer:v1\ncontainers: [{name: tracer, image: t}]\n",
        ],
        MissingSidecarPolicy::Deny,
    )
    .unwrap();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    for object in &objects {
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            MANAGED_BY
        );
    }
    let policy = &objects[0]["spec"];
    assert_eq!(
        policy["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system"])
    );
    // The stamp and the stale form's removal, then a mutation a request position.
    let mutations = policy["mutations"].as_array().unwrap();
    assert_eq!(mutations.len(), 4);
    let stamp = mutations[0]["applyConfiguration"]["expression"]
        .as_str()
        .unwrap();
    assert!(stamp.starts_with("variables.inject ? "), "{stamp}");
    let first = mutations[2]["jsonPatch"]["expression"].as_str().unwrap();
    assert!(
        first.starts_with(
            "object.metadata.annotations[\"injector/status\"] == 'injected' && size(variables.known) > 0 ? (variables.known[0] == \"logger:v1\" ? "
        ),
        "{first}"
    );
    let patch = first;
    // The injected container carries the config's env and mounts, as the webhook's does.
    assert!(
        patch.contains(r#"value: Object.spec.containers{env: [Object.spec.containers.env{name: "ENDPOINT", value: "http://x"}], image: "fluent-bit:2", name: "log-shipper", volumeMounts: [Object.spec.containers.volumeMounts{mountPath: "/var/log/app", name: "logs"}]}}"#),
        "{patch}"
    );
    // A request for an unknown sidecar is refused, naming what is known.
    let validations = objects[2]["spec"]["validations"].as_array().unwrap();
    assert_eq!(validations.len(), 2);
    assert!(
        validations[1]["messageExpression"]
            .as_str()
            .unwrap()
            .contains("(known: logger:v1, tracer:v1)")
    );
    let allowed = rendered(&[LOGGER], MissingSidecarPolicy::Allow).unwrap();
    assert_eq!(
        allowed[2]["spec"]["validations"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn a_policy_too_large_to_store_is_refused_saying_how_large() {
    let configs: Vec<String> = (0..30)
        .map(|n| {
            format!(
                "name: s{n}:v1\ncontainers: [{{name: c{n}, image: 'i:{n}', args: [{}]}}]\n\
                 env: [{{name: E{n}, value: '{}'}}]\n",
                vec!["--flag"; 40].join(", "),
                "x".repeat(200)
            )
        })
        .collect();
    let texts: Vec<&str> = configs.iter().map(String::as_str).collect();
    match rendered(&texts, MissingSidecarPolicy::Deny) {
        Err(PolicyError::TooLarge { configs, bytes }) => {
            assert_eq!(configs, 30);
            assert!(bytes > MAX_POLICY_BYTES);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn in_policy_mode_a_config_the_policies_cannot_express_keeps_its_last_good_version() {
    use crate::config::{SourceState, configmap_origin, load_configmap_items};
    let origin = configmap_origin("injector", "tracing", "tracer.yaml");
    let load = |text: &str| {
        let mut report = load_configmap_items(&[(origin.clone(), text.to_owned())]);
        screen(&mut report);
        report
    };
    let good =
        "name: tracer:v1\nnativeSidecars: true\ncontainers: [{name: tracer, image: 'tracer:1'}]\n";
    let auto =
        "name: tracer:v1\nnativeSidecars: auto\ncontainers: [{name: tracer, image: 'tracer:2'}]\n";
    let mut state = SourceState::default();
    state.apply(&load(good));
    let refused = load(auto);
    assert!(refused.sidecars.is_empty());
    let errors: Vec<String> = refused.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        errors,
        [format!(
            "{origin}: not in policy mode (--injection=policy): {}",
            Unsupported::NativeSidecars
        )]
    );
    let summary = state.apply(&refused);
    assert_eq!(summary.kept, [origin]);
    let served: Vec<&str> = state
        .sidecars()
        .flat_map(|s| s.config.containers.iter().map(|c| c.image.as_deref()))
        .flatten()
        .collect();
    assert_eq!(served, ["tracer:1"], "the good version keeps serving");
}

#[test]
fn the_bindings_reach_the_namespaces_of_the_selector() {
    let selector: LabelSelector = serde_json::from_value(json!({
        "matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]
    }))
    .unwrap();
    let keys = AnnotationKeys::new("injector");
    let ignored = BTreeSet::new();
    let objects = render(
        &set(&[LOGGER]),
        &PolicySettings {
            keys: &keys,
            ignored_namespaces: &ignored,
            on_missing_sidecar: MissingSidecarPolicy::Deny,
            name: "sidecar-injector",
            namespace_selector: Some(&selector),
        },
    )
    .unwrap();
    for binding in [&objects[1], &objects[3]] {
        assert_eq!(
            binding["spec"]["matchResources"]["namespaceSelector"],
            json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}),
            "{}",
            binding["kind"]
        );
    }
}
