use super::*;

/// What the one-shot commands read outside a checkout is what deploy/'s injector serves:
/// the label its `serve` selects, and the label its sidecar ConfigMap carries.
#[test]
fn the_deployed_configmap_labels_are_deploy_s() {
    let (key, value) = DEPLOYED_CONFIGMAP_LABELS.split_once('=').unwrap();
    let deployment = include_str!("../../../deploy/base/deployment.yaml");
    assert!(
        deployment.contains(&format!("--configmap-labels={DEPLOYED_CONFIGMAP_LABELS}\n")),
        "deploy/base/deployment.yaml"
    );
    let configmap = include_str!("../../../deploy/base/sidecar-configs.yaml");
    assert!(
        configmap.contains(&format!("{key}: \"{value}\"")),
        "deploy/base/sidecar-configs.yaml"
    );
}

/// client-go's transport (the API server's webhook client) closes a connection idle this
/// long (net/http's default `IdleConnTimeout`).
const API_SERVER_IDLE_CONN_TIMEOUT: Duration = Duration::from_secs(90);

#[test]
fn the_api_server_not_the_injector_closes_the_connections_it_keeps_idle() {
    let Command::Serve(serve) = Cli::try_parse_from(["sidecar-injector", "serve"])
        .unwrap()
        .command
    else {
        panic!("serve");
    };
    // Closed from this side at the moment the API server reuses it, a review is lost; the
    // API server (HTTP/1.1 to webhooks) keeps an idle connection for 90 s.
    assert!(
        serve.idle_timeout > API_SERVER_IDLE_CONN_TIMEOUT,
        "--idle-timeout defaults to {:?}",
        serve.idle_timeout
    );
}

fn strings(args: &[std::ffi::OsString]) -> Vec<&str> {
    args.iter().map(|a| a.to_str().unwrap()).collect()
}

#[test]
fn run_as_tumblrs_entrypoint_it_serves_with_the_scripts_defaults() {
    let args = vec!["/bin/entrypoint.sh".into(), "--v=2".into()];
    let none = |_: &str| None;
    assert_eq!(
        strings(&tumblr_entrypoint(args.clone(), none)),
        [
            "/bin/entrypoint.sh",
            "serve",
            "--annotation-namespace=injector.tumblr.com",
            "--configmap-labels=app=k8s-sidecar-injector",
            "--config-directory=/conf",
            "--v=2"
        ]
    );
    // What the environment sets, it keeps (the flags read the same variables).
    let set = |name: &str| (name == "ANNOTATION_NAMESPACE").then(|| "example.com".to_owned());
    assert_eq!(
        strings(&tumblr_entrypoint(args, set)),
        [
            "/bin/entrypoint.sh",
            "serve",
            "--configmap-labels=app=k8s-sidecar-injector",
            "--config-directory=/conf",
            "--v=2"
        ]
    );
    // A flag the Deployment's args give replaces the script's default (Go's flags let the
    // last one win), in either spelling; a longer flag is not mistaken for it.
    let given = vec![
        "/bin/entrypoint.sh".into(),
        "--annotation-namespace=example.com".into(),
        "--config-directory".into(),
        "conf/".into(),
        "--configmap-labels-extra".into(),
    ];
    assert_eq!(
        strings(&tumblr_entrypoint(given, none)),
        [
            "/bin/entrypoint.sh",
            "serve",
            "--configmap-labels=app=k8s-sidecar-injector",
            "--annotation-namespace=example.com",
            "--config-directory",
            "conf/",
            "--configmap-labels-extra"
        ]
    );
    // Under its own name nothing changes.
    let own = vec!["sidecar-injector".into(), "validate".into()];
    assert_eq!(
        strings(&tumblr_entrypoint(own, none)),
        ["sidecar-injector", "validate"]
    );
}

#[test]
fn started_before_takes_rfc3339_or_a_zoneless_time_as_utc() {
    let utc = |s: &str| super::values::parse_started_before(s).unwrap().to_string();
    assert_eq!(utc("2022-05-01T13:00:00Z"), "2022-05-01T13:00:00Z");
    assert_eq!(utc("2022-05-01T15:00:00+02:00"), "2022-05-01T13:00:00Z");
    assert_eq!(utc("2022-05-01 13:00"), "2022-05-01T13:00:00Z");
    assert_eq!(utc("2022-05-01T13:00:30"), "2022-05-01T13:00:30Z");
    assert_eq!(utc("2022-05-01"), "2022-05-01T00:00:00Z");
    let err = super::values::parse_started_before("yesterday").unwrap_err();
    assert!(err.starts_with("expected a time like"), "{err}");
}

#[test]
fn a_bad_started_before_time_is_refused_naming_the_flag() {
    let err = Cli::try_parse_from([
        "sidecar-injector",
        "rollout",
        "--sidecar-container-name",
        "logger",
        "--only-started-before",
        "yesterday",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("'yesterday' for '--only-started-before <TIME>'"),
        "{err}"
    );
    assert!(
        err.contains("expected a time like 2022-05-01T13:00:00Z"),
        "{err}"
    );
}

#[test]
fn a_namespace_selector_is_read_as_kubectl_spells_it() {
    let read = |s: &str| {
        let selector = super::values::parse_label_selector(s).unwrap();
        selector
            .match_expressions
            .unwrap()
            .into_iter()
            .map(|r| {
                format!(
                    "{} {} {:?}",
                    r.key,
                    r.operator,
                    r.values.unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        read("team=a, env!=dev,tier in (web, api),x notin (1),k==v,has,!legacy"),
        [
            "team In [\"a\"]",
            "env NotIn [\"dev\"]",
            "tier In [\"web\", \"api\"]",
            "x NotIn [\"1\"]",
            "k In [\"v\"]",
            "has Exists []",
            "legacy DoesNotExist []",
        ]
    );
    for bad in ["", "tier in web", "a b=c"] {
        assert!(
            super::values::parse_label_selector(bad).is_err(),
            "{bad:?} was read"
        );
    }
}

/// `serve` parsed from `given` and the settings file `text`, as `Cli::parse_args` does.
fn serve_with_settings(given: &[&str], text: &str) -> Result<ServeArgs, String> {
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    let argv: Vec<std::ffi::OsString> = std::iter::once("sidecar-injector")
        .chain(given.iter().copied())
        .map(Into::into)
        .collect();
    let matches = command.clone().try_get_matches_from(&argv).unwrap();
    let (_, given_matches) = matches.subcommand().unwrap();
    let serve = command.find_subcommand("serve").unwrap();
    let extra = settings_file::arguments(
        std::path::Path::new("settings.yaml"),
        text,
        serve,
        given_matches,
    )
    .map_err(|err| err.to_string())?;
    let cli = Cli::try_parse_from(argv.into_iter().chain(extra)).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Serve(serve) => Ok(*serve),
        _ => panic!("serve"),
    }
}

#[test]
fn a_settings_file_sets_serves_flags_and_the_command_line_overrides_it() {
    let text = "# the injector's settings\nmax-parallel: 10\nbake: 1m\nallow-downtime: true\n\
                maintenance-window: [\"Sat-Sun 00:00-04:00\", \"Mon 01:00-02:00\"]\n\
                configmap-labels: sidecar-injector.io/config=true\nlog-format: json\n";
    let serve = serve_with_settings(&["serve"], text).unwrap();
    assert_eq!(serve.safety.max_parallel, 10);
    assert_eq!(serve.safety.bake, Duration::from_secs(60));
    assert!(serve.safety.allow_downtime);
    assert_eq!(serve.safety.maintenance_windows.len(), 2);
    assert_eq!(
        serve.configmaps.configmap_labels.as_deref(),
        Some("sidecar-injector.io/config=true")
    );
    let given = serve_with_settings(
        &[
            "serve",
            "--max-parallel=3",
            "--maintenance-window=Sun 02:00-03:00",
        ],
        text,
    )
    .unwrap();
    assert_eq!(given.safety.max_parallel, 3);
    assert_eq!(
        given.safety.maintenance_windows.len(),
        1,
        "a flag replaces a list"
    );
    assert_eq!(given.safety.bake, Duration::from_secs(60));
    // A switch set false, or a setting left empty, leaves the default.
    let off = serve_with_settings(&["serve"], "allow-downtime: false\nmax-parallel:\n").unwrap();
    assert!(!off.safety.allow_downtime);
    assert_eq!(off.safety.max_parallel, 5);
    assert!(serve_with_settings(&["serve"], "").is_ok());
}

#[test]
fn a_wrong_settings_file_says_which_key_and_why() {
    let error = |text: &str| serve_with_settings(&["serve"], text).unwrap_err();
    assert_eq!(
        error("max-paralel: 10\n"),
        "the settings file settings.yaml: \"max-paralel\" is not a flag of serve \
         (`sidecar-injector serve --help` lists them, spelled as here without the dashes)"
    );
    assert!(
        error("allow-downtime: yes please\n")
            .contains("allow-downtime: a switch takes true or false")
    );
    assert!(error("bake: {minutes: 1}\n").contains("bake: a mapping is not a flag's value"));
    assert!(error("- bake\n").contains("must be a mapping of serve's flags"));
    assert!(error("settings: other.yaml\n").contains("names the settings file itself"));
    assert!(error("lease-duration: 1s\n").contains("is not a flag of serve"));
    assert!(error("max-parallel: ten\n").contains("invalid value 'ten' for '--max-parallel"));
}
