use base64::Engine;
use serde_json::{Value, json};

use super::*;
use crate::admission::{AdmissionResult, SidecarResult, UNKNOWN_SIDECAR_LABEL};
use crate::config::{LoadedSidecar, parse_config};

fn sidecars() -> SidecarSet {
    let logger = "name: logger:v1\ncontainers: [{name: log-shipper, image: 'shipper:1'}]\nenv: [{name: LOG_ENDPOINT, value: x}]\n";
    let clash = "name: clash:v1\ncontainers: [{name: app, image: 'x:1'}]\n";
    [logger, clash]
        .iter()
        .map(|t| LoadedSidecar::new(parse_config("t.yaml", t).unwrap().config, "t.yaml"))
        .collect()
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/admission/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn answer(review_json: &Value) -> (Answer, Value) {
    let answer = review(
        &serde_json::to_vec(review_json).unwrap(),
        &sidecars(),
        &InjectionSettings::default(),
    )
    .expect("a review");
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    (answer, body)
}

fn decoded_patch(body: &Value) -> Value {
    let patch = base64::engine::general_purpose::STANDARD
        .decode(body["response"]["patch"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&patch).unwrap()
}

#[test]
fn injects_a_real_review_and_echoes_uid_and_version() {
    let input = fixture("deployment-pod.json");
    let (answer, body) = answer(&input);
    assert_eq!(answer.result, AdmissionResult::Injected);
    assert_eq!(
        answer.namespace, "team-a",
        "request.namespace, the object has none"
    );
    assert_eq!(answer.pod, "web-67d5756f64-");
    assert_eq!(
        answer.sidecars,
        [("logger:v1".to_owned(), SidecarResult::Injected)]
    );
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["response"]["uid"], input["request"]["uid"]);
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(body["response"]["patchType"], "JSONPatch");
    let patch: json_patch::Patch = serde_json::from_value(decoded_patch(&body)).unwrap();
    let mut pod = input["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    assert_eq!(pod["spec"]["containers"][1]["name"], "log-shipper");
}

#[test]
fn answers_v1beta1_in_v1beta1() {
    let mut input = fixture("statefulset-pod.json");
    input["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (_, body) = answer(&input);
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(body["response"]["allowed"], true);
}

#[test]
fn a_denial_carries_the_message_in_status() {
    let mut input = fixture("bare-pod.json");
    input["request"]["object"]["metadata"]["annotations"]["injector/request"] = json!("logger:v9");
    let (answer, body) = answer(&input);
    assert_eq!(answer.result, AdmissionResult::Denied);
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["status"]["code"], 403);
    assert_eq!(
        body["response"]["status"]["message"],
        r#"sidecar "logger:v9" not found; known: logger:v1"#
    );
    assert!(body["response"].get("patch").is_none());
    assert_eq!(
        answer.sidecars,
        [(UNKNOWN_SIDECAR_LABEL.to_owned(), SidecarResult::NotFound)]
    );

    input["request"]["object"]["metadata"]["annotations"]["injector/request"] = json!("clash:v1");
    input["request"]["object"]["spec"]["containers"][0]["name"] = json!("app");
    let (answer, _) = self::answer(&input);
    assert_eq!(
        answer.sidecars,
        [("clash:v1".to_owned(), SidecarResult::NameClash)]
    );
}

#[test]
fn a_skip_is_allowed_without_patch() {
    let mut input = fixture("bare-pod.json");
    input["request"]["object"]["metadata"]["annotations"] = json!({});
    let (answer, body) = answer(&input);
    assert_eq!(answer.result, AdmissionResult::Skipped);
    assert_eq!(
        body["response"],
        json!({"uid": input["request"]["uid"], "allowed": true})
    );
}

#[test]
fn a_non_pod_is_allowed_with_a_warning() {
    let mut input = fixture("bare-pod.json");
    input["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let (answer, body) = answer(&input);
    assert_eq!(answer.result, AdmissionResult::NotAPod);
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"].get("patch").is_none());
    assert_eq!(
        body["response"]["warnings"][0],
        "sidecar-injector only mutates Pods; this request is for apps/v1 Deployment, let through unchanged"
    );
}

#[test]
fn a_pod_that_does_not_parse_is_denied_with_the_error() {
    let mut input = fixture("bare-pod.json");
    input["request"]["object"]["spec"]["containers"] = json!("not a list");
    let (answer, body) = answer(&input);
    assert_eq!(answer.result, AdmissionResult::InvalidPod);
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("cannot read the pod: invalid type: string"),
        "{message}"
    );
}

#[test]
fn updates_are_let_through() {
    let mut input = fixture("bare-pod.json");
    input["request"]["operation"] = json!("UPDATE");
    let (answer, body) = answer(&input);
    assert_eq!(answer.result, AdmissionResult::Skipped);
    assert!(body["response"].get("patch").is_none());
}

#[test]
fn bodies_that_are_not_reviews_are_errors() {
    let set = sidecars();
    let settings = InjectionSettings::default();
    let err = |body: &str| review(body.as_bytes(), &set, &settings).unwrap_err();
    assert!(matches!(err("{nope"), ReviewError::Unreadable(_)));
    assert!(matches!(err("[]"), ReviewError::NotAReview { .. }));
    assert_eq!(
        err(r#"{"apiVersion": "v1", "kind": "Pod"}"#).to_string(),
        r#"the body is not an AdmissionReview (apiVersion "v1", kind "Pod"); expected admission.k8s.io/v1 or v1beta1"#
    );
    assert_eq!(
        err(r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#),
        ReviewError::NoRequest
    );
    assert!(
        matches!(
            err(
                r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"object": {}}}"#
            ),
            ReviewError::Unreadable(_)
        ),
        "a request without uid cannot be answered"
    );
    let invalid = review(
        b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"\xff\"}",
        &set,
        &settings,
    )
    .unwrap_err();
    assert_eq!(
        invalid.to_string(),
        "cannot read the body as an AdmissionReview: the body is not UTF-8 (invalid byte at offset 44)"
    );
}

/// `bare-pod.json` with `containers` replaced by `count` copies of a container carrying
/// `env` entries of its own.
fn pod_with_containers(count: usize, env: usize) -> Value {
    let mut review = fixture("bare-pod.json");
    let env: Vec<Value> = (0..env)
        .map(|i| json!({"name": format!("OWN_{i}"), "value": "x"}))
        .collect();
    let containers: Vec<Value> = (0..count)
        .map(|i| json!({"name": format!("c{i}"), "image": "app:1", "env": env}))
        .collect();
    review["request"]["object"]["spec"]["containers"] = Value::Array(containers);
    review
}

#[test]
fn a_pod_with_too_many_containers_is_denied_naming_the_limit() {
    use crate::injection::MAX_POD_CONTAINERS;
    // With the one injected container the pod reaches the limit exactly.
    let (at_limit, body) = answer(&pod_with_containers(MAX_POD_CONTAINERS - 1, 0));
    assert_eq!(at_limit.result, AdmissionResult::Injected, "{body}");
    let (over, body) = answer(&pod_with_containers(MAX_POD_CONTAINERS, 0));
    assert_eq!(over.result, AdmissionResult::Denied);
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("257 containers") && message.contains("at most 256"),
        "{message}"
    );
}

#[test]
fn an_injection_whose_patch_exceeds_the_limit_is_denied_not_built() {
    // 24 env entries of ~8 KiB each, added to each of 11 containers: ~2.1 MB of patch.
    let big = "v".repeat(8 * 1024);
    let env: Vec<String> = (0..24)
        .map(|i| format!("{{name: E{i}, value: '{big}'}}"))
        .collect();
    let config = format!(
        "name: heavy:v1\ncontainers: [{{name: h, image: 'h:1'}}]\nenv: [{}]\n",
        env.join(", ")
    );
    let set: SidecarSet = [LoadedSidecar::new(
        parse_config("t.yaml", &config).unwrap().config,
        "t.yaml",
    )]
    .into_iter()
    .collect();
    let mut review = pod_with_containers(10, 0);
    review["request"]["object"]["metadata"]["annotations"]["injector/request"] = json!("heavy:v1");
    let reply = super::review(
        &serde_json::to_vec(&review).unwrap(),
        &set,
        &InjectionSettings::default(),
    )
    .unwrap();
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(
        reply.result,
        AdmissionResult::Denied,
        "{}",
        reply.body.len()
    );
    assert!(
        reply.body.len() < 4096,
        "the reply stays small: {}",
        reply.body.len()
    );
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("exceed 1572864 bytes"), "{message}");
    // Fewer containers: the same config fits and is injected.
    review["request"]["object"]["spec"]["containers"] =
        pod_with_containers(1, 0)["request"]["object"]["spec"]["containers"].clone();
    let reply = super::review(
        &serde_json::to_vec(&review).unwrap(),
        &set,
        &InjectionSettings::default(),
    )
    .unwrap();
    assert_eq!(reply.result, AdmissionResult::Injected);
}

#[test]
fn injection_into_a_pod_whose_containers_have_many_env_entries_adds_only_what_is_missing() {
    // The pod's containers already hold LOG_ENDPOINT among many others: nothing to add there.
    let mut review = pod_with_containers(3, 2000);
    for container in review["request"]["object"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
    {
        container["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "LOG_ENDPOINT", "value": "own"}));
    }
    let (answer, body) = answer(&review);
    assert_eq!(answer.result, AdmissionResult::Injected);
    let patch = decoded_patch(&body);
    let env_ops: Vec<&Value> = patch
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["path"].as_str().unwrap().contains("/env"))
        .collect();
    assert!(
        env_ops.is_empty(),
        "nothing added to the pod's own containers: {env_ops:?}"
    );
}

#[test]
fn an_injection_of_a_sidecar_with_a_warning_carries_it_and_others_do_not() {
    let input = fixture("deployment-pod.json");
    let set = sidecars();
    let logger: crate::name::SidecarName = "logger:v1".parse().unwrap();
    let warned = set.with_warnings([(logger, std::sync::Arc::from("logger:v1 is paused"))].into());
    let review_bytes = serde_json::to_vec(&input).unwrap();
    let answer = review(&review_bytes, &warned, &InjectionSettings::default()).unwrap();
    assert_eq!(answer.result, AdmissionResult::Injected);
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["response"]["warnings"], json!(["logger:v1 is paused"]));
    assert!(body["response"]["patch"].is_string());
    // Without the warning, nothing to say.
    let (_, body) = super::tests::answer(&input);
    assert!(body["response"].get("warnings").is_none(), "{body}");
}

#[test]
fn the_reply_is_json_whatever_the_uid_and_messages_hold() {
    // The reply is written by hand: quotes, backslashes, control characters and non-ASCII in
    // what it echoes must come out escaped, and every patch length must encode whole.
    let uid = "uid \"quoted\" \\ back\u{1}slash é ☃";
    let mut skipped = fixture("bare-pod.json");
    skipped["request"]["uid"] = json!(uid);
    skipped["request"]["object"]["metadata"]["annotations"] =
        json!({"injector/request": "nope:v1\"\u{7}"});
    let settings = InjectionSettings {
        on_missing_sidecar: crate::injection::MissingSidecarPolicy::Allow,
        ..InjectionSettings::default()
    };
    let reply = review(
        &serde_json::to_vec(&skipped).unwrap(),
        &sidecars(),
        &settings,
    )
    .unwrap();
    let body: Value = serde_json::from_slice(&reply.body).expect("the reply is JSON");
    assert_eq!(body["response"]["uid"], uid);
    assert_eq!(
        body["response"]["warnings"],
        json!([crate::render::admission_message(
            reply.message.as_ref().unwrap()
        )])
    );

    let mut denied = fixture("bare-pod.json");
    denied["request"]["uid"] = json!(uid);
    denied["request"]["object"]["metadata"]["annotations"] =
        json!({"injector/request": "clash:v1"});
    denied["request"]["object"]["spec"]["containers"][0]["name"] = json!("app");
    let (refusal, body) = answer(&denied);
    assert_eq!(refusal.result, AdmissionResult::Denied);
    assert_eq!(
        body["response"],
        json!({"uid": uid, "allowed": false, "status": {"code": 403, "message": crate::render::admission_message(refusal.message.as_ref().unwrap())}})
    );

    // Patches of every length modulo 3 (the base64 padding), each decoding to what was built:
    // each app container adds an env operation.
    let mut paddings = std::collections::BTreeSet::new();
    for count in 1..=6 {
        let mut injected = fixture("bare-pod.json");
        injected["request"]["object"]["metadata"]["annotations"] =
            json!({"injector/request": "logger:v1"});
        let app = injected["request"]["object"]["spec"]["containers"][0].clone();
        injected["request"]["object"]["spec"]["containers"] = (0..count)
            .map(|i| {
                let mut container = app.clone();
                container["name"] = json!(format!("app-{i}"));
                container
            })
            .collect();
        let (injection, body) = answer(&injected);
        assert_eq!(injection.result, AdmissionResult::Injected);
        let encoded = body["response"]["patch"].as_str().unwrap();
        paddings.insert(encoded.len() - encoded.trim_end_matches('=').len());
        let patch = decoded_patch(&body);
        assert!(
            patch
                .as_array()
                .unwrap()
                .iter()
                .any(|op| op["value"]["name"] == "log-shipper"),
            "{patch}"
        );
    }
    assert_eq!(paddings.len(), 3, "every padding case was encoded");
}

/// The reply body to `review_json` with only the config `text` loaded.
fn body_with(text: &str, review_json: &Value) -> Value {
    let set: SidecarSet = [LoadedSidecar::new(
        parse_config("t.yaml", text).unwrap().config,
        "t.yaml",
    )]
    .into_iter()
    .collect();
    let answer = review(
        &serde_json::to_vec(review_json).unwrap(),
        &set,
        &InjectionSettings::default(),
    )
    .unwrap();
    serde_json::from_slice(&answer.body).unwrap()
}

/// A review of creating `object` (a Job or a CronJob) in namespace team.
fn job_review(kind: &str, object: Value) -> Value {
    let mut input = fixture("bare-pod.json");
    input["request"]["kind"] = json!({"group": "batch", "version": "v1", "kind": kind});
    input["request"]["namespace"] = json!("team");
    input["request"]["object"] = object;
    input
}

fn pod_template(request: Option<&str>) -> Value {
    let annotations = request.map_or(json!({}), |r| json!({"injector/request": r}));
    json!({
        "metadata": {"annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "w:1"}]}
    })
}

#[test]
fn a_job_whose_pods_would_get_a_classic_sidecar_is_warned_of_and_let_through() {
    let job = |request| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly"},
            "spec": {"template": pod_template(request)}})
    };
    let (answered, body) = answer(&job_review("Job", job(Some("logger:v1"))));
    assert_eq!(answered.result, AdmissionResult::NotAPod);
    assert_eq!(body["response"]["allowed"], true);
    assert!(
        body["response"].get("patch").is_none(),
        "a Job is never patched"
    );
    let warning = body["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with(
            "sidecar(s) logger:v1 would be injected into this Job's pods as regular containers"
        ) && warning.contains("the Job never completes; `nativeSidecars: true`"),
        "{warning}"
    );
    // A CronJob's Job template is read the same way.
    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "hourly"},
        "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": pod_template(Some("logger:v1"))}}}});
    let (_, body) = answer(&job_review("CronJob", cronjob));
    assert!(
        body["response"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("into this CronJob's pods")),
        "{body}"
    );
    // No request, or an unknown sidecar: nothing to say here (the pods' own review says it).
    for request in [None, Some("nope:v1")] {
        let (_, body) = answer(&job_review("Job", job(request)));
        assert!(
            body["response"].get("warnings").is_none(),
            "{request:?}: {body}"
        );
    }
}

#[test]
fn a_job_whose_sidecar_is_native_is_not_warned_of() {
    for mode in ["true", "jobs"] {
        let native = format!(
            "name: proxy:v1\nnativeSidecars: {mode}\ncontainers: [{{name: proxy, image: 'p:1'}}]\n"
        );
        let review_json = job_review(
            "Job",
            json!({"kind": "Job", "spec": {"template": pod_template(Some("proxy:v1"))}}),
        );
        let body = body_with(&native, &review_json);
        assert_eq!(body["response"]["allowed"], true);
        assert!(body["response"].get("warnings").is_none(), "{mode}: {body}");
    }
}

#[test]
fn a_job_that_keeps_a_native_sidecar_classic_is_warned_of() {
    let native =
        "name: proxy:v1\nnativeSidecars: true\ncontainers: [{name: proxy, image: 'p:1'}]\n";
    let mut template = pod_template(Some("proxy:v1"));
    template["metadata"]["annotations"]["injector/native-sidecars"] = json!("false");
    let review_json = job_review(
        "Job",
        json!({"kind": "Job", "spec": {"template": template}}),
    );
    let body = body_with(native, &review_json);
    assert!(
        body["response"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("sidecar(s) proxy:v1 would be injected")),
        "{body}"
    );
}

#[test]
fn a_job_with_an_auto_sidecar_is_warned_of_only_where_no_node_runs_native_sidecars() {
    let auto = "name: proxy:v1\nnativeSidecars: auto\ncontainers: [{name: proxy, image: 'p:1'}]\n";
    let review_json = job_review(
        "Job",
        json!({"kind": "Job", "spec": {"template": pod_template(Some("proxy:v1"))}}),
    );
    let warnings = |nodes: &[(&str, &str)]| {
        let set: SidecarSet = [LoadedSidecar::new(
            parse_config("t.yaml", auto).unwrap().config,
            "t.yaml",
        )]
        .into_iter()
        .collect();
        let set = set.with_nodes(std::sync::Arc::new(crate::nodes::NodeKubelets::listed(
            nodes.iter().copied(),
        )));
        let answer = review(
            &serde_json::to_vec(&review_json).unwrap(),
            &set,
            &InjectionSettings::default(),
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&answer.body).unwrap();
        body["response"].get("warnings").cloned()
    };
    // One node runs them: the Job's pods get them natively, whatever the other nodes run.
    assert_eq!(warnings(&[("a", "v1.36.3"), ("old", "v1.28.0")]), None);
    // None does: classic, and the Job would never complete.
    assert!(warnings(&[("old", "v1.28.0")]).is_some());
    assert!(warnings(&[]).is_some(), "no node known");
}

#[test]
fn text_a_pod_controls_is_quoted_at_most_64_characters_wherever_it_is_echoed() {
    let long = "x".repeat(1_000_000);
    let cut = format!("{}...", "x".repeat(64));
    let mut input = fixture("bare-pod.json");
    input["request"]["object"]["metadata"]["annotations"]["injector/request"] = json!(long);
    input["request"]["object"]["metadata"]["name"] = json!(long);
    let (denied, body) = answer(&input);
    assert!(denied.body.len() < 4096, "{} bytes", denied.body.len());
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("sidecar \"{cut}\" not found")),
        "{message}"
    );
    assert_eq!(denied.pod.len(), 253 + 3, "the log line's pod field");
    // Let through by --on-missing-sidecar=allow, the warning quotes as much.
    let allow = InjectionSettings {
        on_missing_sidecar: crate::injection::MissingSidecarPolicy::Allow,
        ..InjectionSettings::default()
    };
    let allowed = review(&serde_json::to_vec(&input).unwrap(), &sidecars(), &allow).unwrap();
    assert!(allowed.body.len() < 4096, "{} bytes", allowed.body.len());
    let body: Value = serde_json::from_slice(&allowed.body).unwrap();
    assert_eq!(
        body["response"]["warnings"][0],
        format!("sidecar(s) not found, not injected: \"{cut}\"")
    );
    // A kind, and a value serde could not read, are quoted as briefly.
    let mut not_a_pod = fixture("bare-pod.json");
    not_a_pod["request"]["object"]["kind"] = json!(long);
    let (_, body) = answer(&not_a_pod);
    assert!(body.to_string().len() < 4096);
    let mut unreadable = fixture("bare-pod.json");
    unreadable["request"]["object"]["spec"]["containers"] = json!(long);
    let (refused, _) = answer(&unreadable);
    assert!(refused.body.len() < 4096, "{} bytes", refused.body.len());
}
