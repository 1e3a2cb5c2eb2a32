use std::collections::BTreeMap;

use super::*;
use crate::name::{NameError, SidecarName};

fn parse(text: &str) -> SidecarConfig {
    parse_config("test.yaml", text)
        .unwrap_or_else(|e| panic!("{e}"))
        .config
}

fn parse_err(text: &str) -> ConfigError {
    parse_config("test.yaml", text).expect_err("the config should be rejected")
}

fn load(files: &[(&str, &str)]) -> LoadReport {
    let files: BTreeMap<String, Result<String, Unreadable>> = files
        .iter()
        .map(|(name, text)| ((*name).to_owned(), Ok((*text).to_owned())))
        .collect();
    load_directory("config", &files)
}

fn loaded<'r>(report: &'r LoadReport, name: &str) -> &'r LoadedSidecar {
    let name = SidecarName::parse(name).unwrap();
    report
        .sidecars
        .iter()
        .find(|s| s.config.name == name)
        .unwrap_or_else(|| panic!("{name} not loaded; errors: {:?}", report.errors))
}

fn error_for<'r>(report: &'r LoadReport, origin: &str) -> &'r ConfigError {
    report
        .errors
        .iter()
        .find(|e| e.origin == origin)
        .unwrap_or_else(|| panic!("no error for {origin}; errors: {:?}", report.errors))
}

#[test]
fn parses_every_key_of_the_format() {
    let config = parse(
        r#"
name: Logger:V1
containers: [{name: shipper, image: shipper:1}]
prependContainers: [{name: first, image: first:1}]
initContainers: [{name: setup, image: setup:1}]
volumes: [{name: logs, emptyDir: {}}]
env: [{name: A, value: "1"}]
volumeMounts: [{name: logs, mountPath: /logs}]
hostAliases: [{ip: 10.0.0.1, hostnames: [a.internal]}]
hostNetwork: true
hostPID: true
serviceAccountName: shipper
rollout: {policy: manual}
"#,
    );
    assert_eq!(config.name.to_string(), "logger:v1");
    assert_eq!(config.containers[0].image.as_deref(), Some("shipper:1"));
    assert_eq!(config.prepend_containers[0].name, "first");
    assert_eq!(config.init_containers[0].name, "setup");
    assert_eq!(config.volumes[0].name, "logs");
    assert_eq!(config.env[0].value.as_deref(), Some("1"));
    assert_eq!(config.volume_mounts[0].mount_path, "/logs");
    assert_eq!(config.host_aliases[0].ip, "10.0.0.1");
    assert!(config.host_network && config.host_pid);
    assert_eq!(config.service_account_name.as_deref(), Some("shipper"));
    assert_eq!(config.rollout_mode(), RolloutMode::Manual);
}

#[test]
fn a_bare_name_means_latest() {
    assert_eq!(parse("name: logger").name.to_string(), "logger:latest");
    assert_eq!(parse("name: logger").rollout_mode(), RolloutMode::Auto);
}

#[test]
fn unknown_top_level_key_is_an_error_naming_key_and_line() {
    let err = parse_err("name: logger:v1\ncontainers: []\nvolumeMount:\n  - name: x\n");
    assert_eq!(err.line, Some(3));
    assert!(matches!(&err.kind, ConfigErrorKind::UnknownKey { key, .. } if key == "volumeMount"));
    assert!(
        err.to_string()
            .starts_with("test.yaml:3: unknown top-level key \"volumeMount\"")
    );
}

#[test]
fn name_errors() {
    assert_eq!(
        parse_err("containers: []").kind,
        ConfigErrorKind::MissingName
    );
    assert_eq!(parse_err("name: null").kind, ConfigErrorKind::MissingName);
    let err = parse_err("env: []\nname: a:b:c\n");
    assert_eq!(err.line, Some(2));
    assert_eq!(
        err.kind,
        ConfigErrorKind::InvalidName(NameError::TooManyColons("a:b:c".into()))
    );
    assert_eq!(
        parse_err("name: [a]").kind,
        ConfigErrorKind::NameNotAString("a list")
    );
}

#[test]
fn empty_and_non_mapping_documents_are_errors() {
    assert_eq!(parse_err("").kind, ConfigErrorKind::Empty);
    assert_eq!(parse_err("# only a comment\n").kind, ConfigErrorKind::Empty);
    assert_eq!(
        parse_err("- a\n- b\n").kind,
        ConfigErrorKind::NotAMapping("a list")
    );
}

#[test]
fn syntax_errors_carry_the_line() {
    let err = parse_err("name: logger:v1\ncontainers:\n  - name: [unclosed\n");
    assert!(matches!(err.kind, ConfigErrorKind::Syntax(_)), "{err}");
    assert!(err.line.is_some(), "{err}");
}

#[test]
fn several_documents_in_one_file_are_an_error() {
    let err = parse_err("name: a\n---\nname: b\n");
    assert!(matches!(err.kind, ConfigErrorKind::Syntax(_)), "{err}");
}

#[test]
fn yaml_1_1_octal_modes_load_as_kubernetes_reads_them() {
    let config = parse(
        "name: x\nvolumes:\n  - name: c\n    configMap:\n      name: c\n      defaultMode: 0644\n      items: [{key: k, path: p, mode: 0600}]\n",
    );
    let config_map = config.volumes[0].config_map.as_ref().unwrap();
    assert_eq!(config_map.default_mode, Some(420));
    assert_eq!(config_map.items.as_ref().unwrap()[0].mode, Some(384));
}

#[test]
fn yaml_1_1_booleans_load_where_kubernetes_wants_a_boolean() {
    let config = parse(
        "name: x\nhostNetwork: yes\nvolumeMounts: [{name: a, mountPath: /a, readOnly: on}]\n",
    );
    assert!(config.host_network);
    assert_eq!(config.volume_mounts[0].read_only, Some(true));
}

#[test]
fn strings_that_look_octal_or_boolean_stay_strings_where_a_string_is_wanted() {
    let config = parse("name: x\nenv: [{name: MODE, value: '0644'}, {name: ON, value: 'yes'}]\n");
    assert_eq!(config.env[0].value.as_deref(), Some("0644"));
    assert_eq!(config.env[1].value.as_deref(), Some("yes"));
}

#[test]
fn a_wrongly_typed_nested_field_is_an_error_naming_its_path() {
    let err = parse_err("name: x\ncontainers:\n  - name: a\n    ports: [{containerPort: http}]\n");
    match &err.kind {
        ConfigErrorKind::InvalidField { path, message } => {
            assert_eq!(path, "containers[0].ports[0].containerPort");
            assert!(message.contains("http"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(err.line, Some(2));
}

#[test]
fn nested_fields_unknown_to_kubernetes_are_warnings_with_their_path() {
    let parsed = parse_config(
        "test.yaml",
        "name: x\ncontainers:\n  - name: a\n    image: a:1\n    imagePullPolcy: Always\nvolumes: [{name: v, emptyDir: {sizeLimt: 1Gi}}]\n",
    )
    .unwrap();
    let messages: Vec<String> = parsed.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages[0].contains("`containers[0].imagePullPolcy`"),
        "{messages:?}"
    );
    assert!(
        messages[1].contains("`volumes[0].emptyDir.sizeLimt`"),
        "{messages:?}"
    );
    assert!(messages[0].starts_with("test.yaml: warning:"));
}

#[test]
fn known_fields_give_no_warning() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/logger-v1.yaml"
    ))
    .unwrap();
    assert_eq!(parse_config("logger-v1.yaml", &text).unwrap().warnings, []);
}

#[test]
fn injected_containers_need_distinct_names() {
    let err = parse_err("name: x\ncontainers: [{image: a}]\n");
    assert!(
        matches!(&err.kind, ConfigErrorKind::InvalidField { path, .. } if path == "containers[0].name")
    );
    let err = parse_err("name: x\ncontainers: [{name: a}]\nprependContainers: [{name: a}]\n");
    assert!(
        err.to_string().contains("\"a\" appears more than once"),
        "{err}"
    );
    // The other copy in initContainers is named, with where it is.
    let err = parse_err(
        "name: x\ncontainers: [{name: b}, {name: a}]\ninitContainers: [{name: c}, {name: a}]\n",
    );
    assert!(
        matches!(&err.kind, ConfigErrorKind::InvalidField { path, message }
            if path == "initContainers[1].name" && message.contains("(also containers[1])")),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("init containers share one set of names"),
        "{err}"
    );
}

#[test]
fn rollout_policy_is_checked() {
    assert!(matches!(
        parse_err("name: x\nrollout: {policy: sometimes}\n").kind,
        ConfigErrorKind::InvalidField { .. }
    ));
    assert!(matches!(
        parse_err("name: x\nrollout: {polcy: manual}\n").kind,
        ConfigErrorKind::InvalidField { .. }
    ));
}

const GRANDPARENT: &str = r#"
name: base:v1
containers:
  - {name: shipper, image: shipper:1}
  - {name: helper, image: helper:1}
env:
  - {name: A, value: grandparent}
  - {name: B, value: grandparent}
volumeMounts:
  - {name: logs, mountPath: /logs}
hostAliases:
  - {ip: 10.0.0.1, hostnames: [one.internal]}
hostNetwork: true
serviceAccountName: base
rollout: {policy: manual}
"#;

const PARENT: &str = r#"
name: middle:v1
inherits: base.yaml
containers:
  - {name: shipper, image: shipper:2}
env:
  - {name: B, value: parent}
  - {name: C, value: parent}
hostAliases:
  - {ip: 10.0.0.2, hostnames: [two.internal]}
"#;

const CHILD: &str = r#"
name: child:v1
inherits: ./middle.yaml
containers:
  - {name: extra, image: extra:1}
env:
  - {name: A, value: child}
volumeMounts:
  - {name: logs, mountPath: /var/log}
serviceAccountName: child
hostPID: true
"#;

#[test]
fn two_level_inheritance_merges_lists_by_name_and_child_wins() {
    let report = load(&[
        ("base.yaml", GRANDPARENT),
        ("middle.yaml", PARENT),
        ("child.yaml", CHILD),
    ]);
    assert_eq!(report.errors, []);
    let child = &loaded(&report, "child:v1").config;
    let containers: Vec<(&str, &str)> = child
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.image.as_deref().unwrap()))
        .collect();
    // Replaced in place, then new items appended.
    assert_eq!(
        containers,
        [
            ("shipper", "shipper:2"),
            ("helper", "helper:1"),
            ("extra", "extra:1")
        ]
    );
    let env: Vec<(&str, &str)> = child
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()))
        .collect();
    assert_eq!(env, [("A", "child"), ("B", "parent"), ("C", "parent")]);
    assert_eq!(child.volume_mounts.len(), 1);
    assert_eq!(child.volume_mounts[0].mount_path, "/var/log");
    let aliases: Vec<&str> = child.host_aliases.iter().map(|a| a.ip.as_str()).collect();
    assert_eq!(
        aliases,
        ["10.0.0.1", "10.0.0.2"],
        "hostAliases are concatenated"
    );
    assert!(child.host_network, "a parent's hostNetwork: true is kept");
    assert!(child.host_pid, "a child's hostPID: true wins");
    assert_eq!(child.service_account_name.as_deref(), Some("child"));
    assert_eq!(
        child.rollout_mode(),
        RolloutMode::Manual,
        "policy is inherited"
    );
    assert_eq!(
        loaded(&report, "middle:v1")
            .config
            .service_account_name
            .as_deref(),
        Some("base")
    );
}

#[test]
fn an_inherited_config_has_the_revision_of_its_flattened_form() {
    let report = load(&[("base.yaml", GRANDPARENT), ("middle.yaml", PARENT)]);
    let flat = r#"
name: flat:v1
containers:
  - {name: shipper, image: shipper:2}
  - {name: helper, image: helper:1}
env:
  - {name: A, value: grandparent}
  - {name: B, value: parent}
  - {name: C, value: parent}
volumeMounts: [{name: logs, mountPath: /logs}]
hostAliases:
  - {ip: 10.0.0.1, hostnames: [one.internal]}
  - {ip: 10.0.0.2, hostnames: [two.internal]}
hostNetwork: true
serviceAccountName: base
"#;
    assert_eq!(
        loaded(&report, "middle:v1").revision,
        Revision::of(&parse(flat))
    );
}

#[test]
fn inherits_may_not_leave_the_directory() {
    for parent in ["../base.yaml", "/etc/base.yaml", "sub/base.yaml", ".."] {
        let child = format!("name: child\ninherits: {parent}\n");
        let report = load(&[("base.yaml", GRANDPARENT), ("child.yaml", &child)]);
        let err = error_for(&report, "config/child.yaml");
        assert_eq!(
            err.kind,
            ConfigErrorKind::InheritsOutsideDirectory(parent.into())
        );
        assert_eq!(err.line, Some(2));
    }
}

#[test]
fn a_missing_parent_is_an_error() {
    let report = load(&[("child.yaml", "name: child\ninherits: nowhere.yaml\n")]);
    assert_eq!(
        error_for(&report, "config/child.yaml").kind,
        ConfigErrorKind::MissingParent("nowhere.yaml".into())
    );
    assert!(report.sidecars.is_empty());
}

#[test]
fn an_inheritance_cycle_is_an_error_showing_the_cycle() {
    let report = load(&[
        ("a.yaml", "name: a\ninherits: b.yaml\n"),
        ("b.yaml", "name: b\ninherits: a.yaml\n"),
        ("self.yaml", "name: self\ninherits: self.yaml\n"),
        ("ok.yaml", "name: ok\n"),
    ]);
    assert_eq!(
        error_for(&report, "config/a.yaml").kind,
        ConfigErrorKind::InheritanceCycle("config/a.yaml -> config/b.yaml -> config/a.yaml".into())
    );
    assert!(matches!(
        error_for(&report, "config/self.yaml").kind,
        ConfigErrorKind::InheritanceCycle(_)
    ));
    assert_eq!(report.sidecars.len(), 1, "the good config still loads");
}

#[test]
fn an_inherits_chain_deeper_than_the_limit_is_an_error_and_the_rest_loads() {
    use crate::config::parse::MAX_INHERITS_DEPTH;
    // c0 inherits c1 inherits ... c{depth}: c0 has `depth` parents above it.
    let chain = |prefix: &str, depth: usize| -> Vec<(String, String)> {
        (0..=depth)
            .map(|i| {
                let parent = if i < depth {
                    format!("inherits: {prefix}{}.yaml\n", i + 1)
                } else {
                    String::new()
                };
                (
                    format!("{prefix}{i}.yaml"),
                    format!("name: {prefix}{i}\n{parent}env: [{{name: E{i}, value: v}}]\n"),
                )
            })
            .collect()
    };
    let mut files = chain("ok", MAX_INHERITS_DEPTH);
    files.extend(chain("deep", MAX_INHERITS_DEPTH + 1));
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let report = load(&borrowed);
    let top = report
        .sidecars
        .iter()
        .find(|s| s.config.name.name() == "ok0")
        .unwrap_or_else(|| panic!("a chain at the limit loads: {:?}", report.errors));
    assert_eq!(
        top.config.env.len(),
        MAX_INHERITS_DEPTH + 1,
        "every ancestor merged"
    );
    let err = error_for(&report, "config/deep0.yaml");
    assert!(
        matches!(&err.kind, ConfigErrorKind::InheritanceTooDeep(chain) if chain.starts_with("config/deep0.yaml -> config/deep1.yaml")),
        "{err}"
    );
    assert!(err.to_string().contains("longer than 16"), "{err}");
    assert_eq!(
        report.errors.len(),
        1,
        "only the over-deep file: {:?}",
        report.errors
    );
}

#[test]
fn a_broken_parent_breaks_its_children_but_nothing_else() {
    let report = load(&[
        ("base.yaml", "name: base\nbogus: 1\n"),
        ("child.yaml", "name: child\ninherits: base.yaml\n"),
        ("other.yaml", "name: other\n"),
    ]);
    assert!(matches!(
        error_for(&report, "config/child.yaml").kind,
        ConfigErrorKind::InvalidParent { .. }
    ));
    assert!(matches!(
        error_for(&report, "config/base.yaml").kind,
        ConfigErrorKind::UnknownKey { .. }
    ));
    loaded(&report, "other");
}

#[test]
fn duplicate_names_are_an_error_for_every_holder() {
    let report = load(&[
        ("a.yaml", "name: Logger:v1\n"),
        ("b.yaml", "name: logger:V1\n"),
        ("c.yaml", "name: logger:v2\n"),
    ]);
    assert_eq!(
        error_for(&report, "config/a.yaml").kind,
        ConfigErrorKind::DuplicateName {
            name: "logger:v1".into(),
            others: "config/b.yaml".into()
        }
    );
    error_for(&report, "config/b.yaml");
    let names: Vec<String> = report
        .sidecars
        .iter()
        .map(|s| s.config.name.to_string())
        .collect();
    assert_eq!(names, ["logger:v2"]);
}

#[test]
fn an_unreadable_file_is_reported_by_name() {
    let mut files = BTreeMap::new();
    files.insert(
        "x.yaml".to_owned(),
        Err(Unreadable::Io("permission denied".to_owned())),
    );
    let report = load_directory("config/", &files);
    assert_eq!(
        report.errors[0].to_string(),
        "config/x.yaml: cannot read: permission denied"
    );
}

#[test]
fn a_reload_keeps_the_last_good_version_of_a_broken_config() {
    let mut state = SourceState::default();
    let first = load(&[
        ("a.yaml", "name: a\ncontainers: [{name: a, image: 'a:1'}]\n"),
        ("b.yaml", "name: b\n"),
    ]);
    state.apply(&first);
    let a_v1 = loaded(&first, "a").revision.clone();

    // a.yaml broken, b.yaml edited, c.yaml added.
    let second = load(&[
        (
            "a.yaml",
            "name: a\ncontainers: [{name: a, image: 'a:2'}]\nbogus: 1\n",
        ),
        ("b.yaml", "name: b\nhostPID: true\n"),
        ("c.yaml", "name: c\n"),
    ]);
    let summary = state.apply(&second);
    assert_eq!(
        summary,
        ReloadSummary {
            kept: vec!["config/a.yaml".into()],
            errors: 1,
            served: 3
        }
    );
    let set: SidecarSet = state.sidecars().cloned().collect();
    assert_eq!(
        set.get(&"a".parse().unwrap()).unwrap().revision,
        a_v1,
        "a keeps serving v1"
    );
    assert!(
        set.get(&"b".parse().unwrap()).unwrap().config.host_pid,
        "b took its edit"
    );

    // a.yaml fixed, c.yaml deleted.
    let third = load(&[
        ("a.yaml", "name: a\ncontainers: [{name: a, image: 'a:2'}]\n"),
        ("b.yaml", "name: b\n"),
    ]);
    let summary = state.apply(&third);
    assert_eq!(summary.kept, Vec::<Origin>::new());
    let set: SidecarSet = state.sidecars().cloned().collect();
    assert_ne!(set.get(&"a".parse().unwrap()).unwrap().revision, a_v1);
    assert!(
        set.get(&"c".parse().unwrap()).is_none(),
        "a deleted file's config is gone"
    );
}

#[test]
fn a_config_that_never_loaded_is_not_served() {
    let mut state = SourceState::default();
    state.apply(&load(&[("a.yaml", "name: a\nbogus: 1\n")]));
    assert!(state.is_empty());
}

#[test]
fn a_fresh_config_of_the_same_name_supersedes_a_kept_one() {
    let mut state = SourceState::default();
    state.apply(&load(&[("a.yaml", "name: x\n")]));
    let summary = state.apply(&load(&[
        ("a.yaml", "name: x\nbogus: 1\n"),
        ("b.yaml", "name: x\nhostPID: true\n"),
    ]));
    assert!(summary.kept.is_empty());
    let served: Vec<String> = state.sidecars().map(|s| s.origin.to_string()).collect();
    assert_eq!(served, ["config/b.yaml"]);
}

fn items(list: &[(&str, &str)]) -> Vec<(Origin, String)> {
    list.iter()
        .map(|(key, text)| {
            (
                configmap_origin("injector", "sidecars", key),
                (*text).to_owned(),
            )
        })
        .collect()
}

#[test]
fn configmap_items_load_each_on_its_own_and_cannot_inherit() {
    let report = load_configmap_items(&items(&[
        (
            "logger.yaml",
            "name: logger:v3\ncontainers: [{name: s, image: 's:3'}]\n",
        ),
        ("child.yaml", "name: child\ninherits: logger.yaml\n"),
        ("broken.yaml", "name: broken\nbogus: 1\n"),
    ]));
    let names: Vec<String> = report
        .sidecars
        .iter()
        .map(|s| s.config.name.to_string())
        .collect();
    assert_eq!(names, ["logger:v3"]);
    assert_eq!(
        report.sidecars[0].origin,
        "ConfigMap injector/sidecars item logger.yaml"
    );
    let messages: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "ConfigMap injector/sidecars item child.yaml:2: `inherits` is only for configs on disk; a ConfigMap item cannot inherit (\"logger.yaml\")",
            "ConfigMap injector/sidecars item broken.yaml:2: unknown top-level key \"bogus\" (allowed: name, inherits, containers, prependContainers, initContainers, volumes, env, volumeMounts, hostAliases, hostNetwork, hostPID, serviceAccountName, rollout, nativeSidecars, nativeSidecarPlacement, podResources)",
        ]
    );
    let duplicates = load_configmap_items(&items(&[("a", "name: x\n"), ("b", "name: X\n")]));
    assert_eq!(duplicates.errors.len(), 2);
    assert!(duplicates.sidecars.is_empty());
}

#[test]
fn a_configmap_config_overrides_a_disk_config_of_the_same_name() {
    let mut directory = SourceState::default();
    directory.apply(&load(&[
        ("a.yaml", "name: logger:v1\n"),
        ("b.yaml", "name: metrics:v1\n"),
    ]));
    let mut configmaps = SourceState::default();
    configmaps.apply(&load_configmap_items(&items(&[(
        "logger.yaml",
        "name: logger:v1\nhostPID: true\n",
    )])));
    let (set, overridden) = merge_sources(&directory, &configmaps);
    assert_eq!(overridden, ["logger:v1".parse().unwrap()]);
    let logger = set.get(&"logger:v1".parse().unwrap()).unwrap();
    assert!(logger.config.host_pid);
    assert_eq!(
        logger.origin,
        "ConfigMap injector/sidecars item logger.yaml"
    );
    assert!(set.get(&"metrics:v1".parse().unwrap()).is_some());
}

#[test]
fn what_the_api_server_would_refuse_in_every_pod_is_an_error_naming_file_and_line() {
    let err = parse_err(
        "name: proxy:v1\ncontainers:\n  - {name: proxy, image: envoy:1, restartPolicy: Always}\n",
    );
    assert_eq!(err.line, Some(2));
    let text = err.to_string();
    assert!(
        text.starts_with("test.yaml:2: invalid `containers[0].restartPolicy`")
            && text.contains("write `nativeSidecars: true`"),
        "{text}"
    );
    let err = parse_err(
        "name: setup:v1\ninitContainers:\n  - {name: once, image: a:1}\n  - {name: again, image: a:1, restartPolicy: OnFailure}\n",
    );
    assert_eq!(err.line, Some(2));
    assert!(
        err.to_string()
            .contains("`initContainers[1].restartPolicy`: init container \"again\": restartPolicy \"OnFailure\" is refused"),
        "{err}"
    );
    let err = parse_err(
        "name: setup:v1\ninitContainers:\n  - name: once\n    image: a:1\n    readinessProbe: {exec: {command: [\"true\"]}}\n",
    );
    assert!(
        err.to_string().contains(
            "`initContainers[0].readinessProbe`: init container \"once\" runs to completion"
        ),
        "{err}"
    );
    // A native sidecar written as an init container takes probes.
    let native_init = "name: setup:v1\ninitContainers:\n  - name: agent\n    image: a:1\n    restartPolicy: Always\n    ports: [{containerPort: 8200}]\n    startupProbe: {tcpSocket: {port: 8200}}\n";
    assert_eq!(parse_config("test.yaml", native_init).unwrap().warnings, []);
}

#[test]
fn a_native_startup_probe_on_a_port_no_container_declares_is_a_warning() {
    let text = "name: proxy:v1\nnativeSidecars: true\ncontainers:\n  - name: proxy\n    image: envoy:1\n    ports: [{containerPort: 15001, name: proxy}]\n    startupProbe: {httpGet: {port: 8080, path: /ready}}\n";
    let parsed = parse_config("test.yaml", text).unwrap();
    let messages: Vec<String> = parsed.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].starts_with(
            "test.yaml: warning: native sidecar \"proxy\": its startupProbe targets port 8080, which no container of this config declares"
        ),
        "{messages:?}"
    );
    let by_name = text.replace("port: 8080", "port: proxy");
    assert_eq!(parse_config("test.yaml", &by_name).unwrap().warnings, []);
    // Classic, the same probe holds nothing back: no warning.
    let classic = text.replace("nativeSidecars: true\n", "");
    assert_eq!(parse_config("test.yaml", &classic).unwrap().warnings, []);
}

#[test]
fn a_child_inherits_the_native_form_of_its_parent() {
    let files = [
        (
            "base.yaml",
            "name: base:v1\nnativeSidecars: true\nnativeSidecarPlacement: last\ncontainers: [{name: proxy, image: envoy:1}]\n",
        ),
        (
            "child.yaml",
            "name: child:v1\ninherits: base.yaml\ncontainers: [{name: proxy, image: envoy:2}]\n",
        ),
    ];
    let report = load(&files);
    assert_eq!(report.errors, []);
    let child = report
        .sidecars
        .iter()
        .find(|s| s.config.name.to_string() == "child:v1")
        .unwrap();
    assert!(child.config.is_native());
    assert_eq!(child.config.native_placement(), NativePlacement::Last);
}

#[test]
fn native_sidecars_takes_true_false_jobs_or_auto_and_names_anything_else() {
    let text = |value: &str| {
        format!(
            "name: proxy:v1\nnativeSidecars: {value}\ncontainers: [{{name: proxy, image: p:1}}]\n"
        )
    };
    for (value, expected) in [
        ("true", NativeSidecars::Always),
        ("false", NativeSidecars::Never),
        ("jobs", NativeSidecars::Jobs),
        ("auto", NativeSidecars::Auto),
    ] {
        assert_eq!(
            parse_config("test.yaml", &text(value))
                .unwrap()
                .config
                .native_sidecars(),
            expected,
            "{value}"
        );
    }
    let err = parse_err(&text("sometimes"));
    assert!(
        err.to_string()
            .contains("expected true, false, jobs or auto, found \"sometimes\""),
        "{err}"
    );
    assert_eq!(err.line, Some(2));
}
