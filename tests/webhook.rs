//! The real `serve` binary over real TLS with a real HTTPS client: injection, both review
//! versions, every row of the bad-input table, hot reload of configs and certificates,
//! and graceful shutdown.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use sidecar_injector::serve::tls::{DevCa, DevCertificates, not_after};
use support::https::TlsClient;
use support::injector::{Injector, eventually};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const DEADLINE: Duration = Duration::from_secs(15);

/// A working directory with the example configs and a development certificate pair.
struct Setup {
    dir: tempfile::TempDir,
    certs: DevCertificates,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("config")).unwrap();
        for entry in std::fs::read_dir(Path::new(ROOT).join("config")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(
                entry.path(),
                dir.path().join("config").join(entry.file_name()),
            )
            .unwrap();
        }
        let certs = DevCertificates::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        certs.write(&dir.path().join("tls")).unwrap();
        Setup { dir, certs }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn start(&self, extra: &[&str]) -> Injector {
        let args = self.args(extra);
        Injector::start(self.dir.path(), &to_strs(&args), &[])
    }

    /// As [`Setup::start`], without waiting for it to listen.
    fn spawn(&self, extra: &[&str]) -> Injector {
        let args = self.args(extra);
        Injector::spawn(self.dir.path(), &to_strs(&args), &[])
    }

    /// `serve`'s arguments: this setup's certificate and configs, no shutdown delay, `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let path = |relative: &str| self.path(relative).to_str().unwrap().to_owned();
        let mut args = vec![
            "--tls-cert-file".to_owned(),
            path("tls/tls.crt"),
            "--tls-key-file".to_owned(),
            path("tls/tls.key"),
        ];
        if !extra.contains(&"--config-directory") {
            args.extend(["--config-directory".to_owned(), path("config")]);
        }
        if !extra.contains(&"--shutdown-delay") {
            args.extend(["--shutdown-delay".to_owned(), "0s".to_owned()]);
        }
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args
    }

    /// Replaces `tls/NAME` as the kubelet does a Secret's file: written aside, renamed into
    /// place.
    fn replace_tls_file(&self, name: &str, text: &str) {
        let aside = self.path(&format!("tls/.{name}.tmp"));
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(&aside, self.path(&format!("tls/{name}"))).unwrap();
    }

    fn client(&self) -> TlsClient {
        TlsClient::new(&[self.certs.ca_pem.as_bytes()])
    }
}

fn to_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/tests/fixtures/admission/{name}")).unwrap(),
    )
    .unwrap()
}

fn patched(review: &Value, reply: &Value) -> Value {
    let patch = base64::engine::general_purpose::STANDARD
        .decode(reply["response"]["patch"].as_str().expect("a patch"))
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).expect("the patch applies");
    pod
}

async fn post_review(injector: &Injector, client: &TlsClient, review: &Value) -> (u16, Value) {
    let mut connection = client.connect(injector.tls).await.unwrap();
    let (status, body) = connection
        .post(
            "/mutate",
            "application/json",
            serde_json::to_vec(review).unwrap(),
        )
        .await
        .unwrap();
    (
        status.as_u16(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn injects_a_real_review_into_the_expected_pod() {
    let setup = Setup::new();
    let injector = setup.start(&[]);
    let review = fixture("deployment-pod.json");
    let (status, reply) = post_review(&injector, &setup.client(), &review).await;
    assert_eq!(status, 200);
    assert_eq!(reply["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(reply["response"]["uid"], review["request"]["uid"]);
    assert_eq!(reply["response"]["patchType"], "JSONPatch");
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{ROOT}/tests/fixtures/expected/deployment-pod.logger-v1.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(patched(&review, &reply), expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_v1beta1_in_kind() {
    let setup = Setup::new();
    let injector = setup.start(&[]);
    let mut review = fixture("daemonset-pod.json");
    review["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (status, reply) = post_review(&injector, &setup.client(), &review).await;
    assert_eq!(status, 200);
    assert_eq!(reply["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(reply["kind"], "AdmissionReview");
    let pod = patched(&review, &reply);
    assert_eq!(pod["spec"]["containers"][1]["name"], "log-shipper");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_row_of_the_bad_input_table() {
    let setup = Setup::new();
    let injector = setup.start(&["--max-body-bytes", "20000", "--body-read-timeout", "700ms"]);
    let client = setup.client();
    let mut connection = client.connect(injector.tls).await.unwrap();

    // Body not JSON, not an AdmissionReview, a review without request: 400 with a message.
    for (body, message) in [
        ("{not json", "cannot read the body as an AdmissionReview"),
        (
            r#"{"apiVersion": "v1", "kind": "Pod"}"#,
            "is not an AdmissionReview",
        ),
        (
            r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
            "has no request",
        ),
    ] {
        let (status, reply) = connection
            .post("/mutate", "application/json", body)
            .await
            .unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(
            String::from_utf8_lossy(&reply).contains(message),
            "{body}: {reply:?}"
        );
    }

    // request.object not a Pod: allowed, no patch, a warning.
    let mut not_pod = fixture("bare-pod.json");
    not_pod["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let (status, reply) = post_review(&injector, &client, &not_pod).await;
    assert_eq!(status, 200);
    assert_eq!(reply["response"]["allowed"], true);
    assert!(reply["response"].get("patch").is_none());
    assert!(
        reply["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("only mutates Pods")
    );

    // A Pod that does not parse: denied, the parse error in the message.
    let mut broken = fixture("bare-pod.json");
    broken["request"]["object"]["spec"]["containers"] = json!({"name": "not-a-list"});
    let (status, reply) = post_review(&injector, &client, &broken).await;
    assert_eq!(status, 200);
    assert_eq!(reply["response"]["allowed"], false);
    assert!(
        reply["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot read the pod: invalid type")
    );

    // Content-Type not JSON: 415.
    let body = serde_json::to_vec(&fixture("bare-pod.json")).unwrap();
    let (status, _) = connection
        .post("/mutate", "text/plain", body.clone())
        .await
        .unwrap();
    assert_eq!(status, 415);

    // Over --max-body-bytes: 413, declared or not. (The server then closes the connection
    // rather than read the rest, so each case gets its own.)
    let big = vec![b' '; 30_000];
    let mut fresh = client.connect(injector.tls).await.unwrap();
    let (status, _) = fresh
        .post("/mutate", "application/json", big.clone())
        .await
        .unwrap();
    assert_eq!(status, 413);
    let status = raw_exchange(&setup, &injector, chunked_request(&big)).await;
    assert_eq!(
        status, 413,
        "a chunked body without Content-Length is limited too"
    );

    // A client too slow to send its body: 408.
    let slow = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"".to_vec();
    assert_eq!(raw_exchange(&setup, &injector, slow).await, 408);

    // The server is still healthy and counted each outcome.
    let (status, _) = client
        .connect(injector.tls)
        .await
        .unwrap()
        .get("/health")
        .await
        .unwrap();
    assert_eq!(status, 200);
    for (result, count) in [
        ("bad_request", 3.0),
        ("not_a_pod", 1.0),
        ("invalid_pod", 1.0),
        ("unsupported_media_type", 1.0),
        ("payload_too_large", 2.0),
        ("timeout", 1.0),
    ] {
        assert_eq!(
            injector.metric(&format!(
                "sidecar_injector_admission_requests_total{{result=\"{result}\"}}"
            )),
            count,
            "{result}"
        );
    }
}

fn chunked_request(body: &[u8]) -> Vec<u8> {
    let mut request = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for chunk in body.chunks(4096) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    request
}

/// Sends raw bytes over TLS and returns the status code of the reply.
async fn raw_exchange(setup: &Setup, injector: &Injector, request: Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = setup.client().connect_tls(injector.tls).await.unwrap();
    tls.write_all(&request).await.unwrap();
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    // The server answers and may close; read until the status line is complete.
    while !response.windows(2).any(|w| w == b"\r\n") {
        let read = tokio::time::timeout(DEADLINE, tls.read(&mut buffer))
            .await
            .expect("a reply")
            .unwrap();
        if read == 0 {
            break;
        }
        response.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&response)
        .split_whitespace()
        .nth(1)
        .expect("a status line")
        .parse()
        .unwrap()
}

/// The API server keeps a webhook connection for its next review for up to 90 s. Closed from
/// this side while it waits, a review sent as the close crosses is lost (its pod created
/// uninjected with failurePolicy Ignore): hyper's header timeout used to close it 10 s after
/// each review. A head that starts and does not end is still cut.
#[tokio::test(flavor = "multi_thread")]
async fn a_keep_alive_connection_waits_past_the_header_timeout_for_its_next_review() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const HEAD_LIMIT: Duration = Duration::from_secs(1);
    let setup = Setup::new();
    let injector = setup.start(&["--body-read-timeout", "1s"]);
    let client = setup.client();
    let review = serde_json::to_vec(&fixture("deployment-pod.json")).unwrap();
    let mut connection = client.connect(injector.tls).await.unwrap();
    for pause in [Duration::ZERO, 3 * HEAD_LIMIT] {
        // The quiet time between two reviews on the connection is what is under test.
        tokio::time::sleep(pause).await;
        let (status, _) = connection
            .post("/mutate", "application/json", review.clone())
            .await
            .unwrap_or_else(|e| panic!("a review {pause:?} after the last one: {e}"));
        assert_eq!(status, 200);
    }

    // A head begun and never ended: the connection is closed a second after its first byte.
    let mut tls = client.connect_tls(injector.tls).await.unwrap();
    let started = std::time::Instant::now();
    tls.write_all(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(DEADLINE, tls.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the connection is closed before {DEADLINE:?}"
    );
    let took = started.elapsed();
    assert!(took >= HEAD_LIMIT, "closed after {took:?}");
}

/// Reads from `stream` into `received` until `wanted` is in it.
async fn read_until<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    received: &mut Vec<u8>,
    wanted: &[u8],
) {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 4096];
    while !received.windows(wanted.len()).any(|w| w == wanted) {
        let read = tokio::time::timeout(DEADLINE, stream.read(&mut buffer))
            .await
            .expect("an answer")
            .unwrap();
        assert!(
            read > 0,
            "closed; received {:?}",
            String::from_utf8_lossy(received)
        );
        received.extend_from_slice(&buffer[..read]);
    }
}

/// curl sends `Expect: 100-continue` before a large body: the server answers 100, then the
/// review. (That the head deadline does not take the body after the 100 for a new head is
/// shown in `src/serve/connection.rs`.)
#[tokio::test(flavor = "multi_thread")]
async fn a_review_sent_after_100_continue_is_answered() {
    use tokio::io::AsyncWriteExt;
    let setup = Setup::new();
    let injector = setup.start(&["--body-read-timeout", "1s"]);
    let review = serde_json::to_vec(&fixture("deployment-pod.json")).unwrap();
    let mut tls = setup.client().connect_tls(injector.tls).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        review.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    read_until(&mut tls, &mut received, b"HTTP/1.1 100 Continue\r\n\r\n").await;
    tls.write_all(&review).await.unwrap();
    read_until(&mut tls, &mut received, b"\"patchType\":\"JSONPatch\"").await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.contains("HTTP/1.1 200 OK"), "{text}");
}

/// Reads HTTP/2 frames until one of `kind` with `flags` has come: the frames read, as
/// (type, flags), or the error that ended the connection first.
async fn read_frames_until<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    kind: u8,
    flags: u8,
) -> std::io::Result<Vec<(u8, u8)>> {
    use tokio::io::AsyncReadExt;
    let mut frames = Vec::new();
    loop {
        let mut header = [0u8; 9];
        stream.read_exact(&mut header).await?;
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let mut payload = vec![0u8; length];
        stream.read_exact(&mut payload).await?;
        frames.push((header[3], header[4]));
        if (header[3], header[4]) == (kind, flags) {
            return Ok(frames);
        }
    }
}

/// A client may speak HTTP/2 over TLS without ALPN (prior knowledge), and hyper serves it. Its
/// frames are not a request head: a connection whose client spoke last (here, acknowledging
/// the server's SETTINGS) and then went quiet must not be closed as a head left unfinished.
#[tokio::test(flavor = "multi_thread")]
async fn http2_without_alpn_is_served_and_its_quiet_connection_kept() {
    use tokio::io::AsyncWriteExt;
    const HEAD_LIMIT: Duration = Duration::from_secs(1);
    const SETTINGS: u8 = 4;
    const PING: u8 = 6;
    const ACK: u8 = 1;
    let setup = Setup::new();
    let injector = setup.start(&["--body-read-timeout", "1s"]);
    let client = setup.client();

    let mut tls = client.connect_tls_without_alpn(injector.tls).await.unwrap();
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    tls.write_all(&[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    // The server's SETTINGS, then its acknowledgement of ours: after that it owes nothing.
    let frames = read_frames_until(&mut tls, SETTINGS, ACK).await.unwrap();
    assert!(
        frames.contains(&(SETTINGS, 0)),
        "the server's SETTINGS: {frames:?}"
    );
    tls.write_all(&[0, 0, 0, SETTINGS, ACK, 0, 0, 0, 0])
        .await
        .unwrap();
    // Quiet for three times --body-read-timeout, the client having spoken last.
    tokio::time::sleep(3 * HEAD_LIMIT).await;
    let mut ping = vec![0, 0, 8, PING, 0, 0, 0, 0, 0];
    ping.extend_from_slice(b"stillopn");
    tls.write_all(&ping).await.unwrap();
    let answer = tokio::time::timeout(DEADLINE, read_frames_until(&mut tls, PING, ACK))
        .await
        .expect("an answer to the PING");
    assert!(
        answer.is_ok(),
        "the quiet connection was closed: {answer:?}"
    );

    // A review over such a connection is served.
    let review = serde_json::to_vec(&fixture("deployment-pod.json")).unwrap();
    let mut connection = client
        .connect_h2_prior_knowledge(injector.tls)
        .await
        .unwrap();
    let (status, body) = connection
        .post("/mutate", "application/json", review, false)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert!(reply["response"]["patch"].is_string(), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_edit_takes_effect_and_a_broken_edit_keeps_the_last_good() {
    let setup = Setup::new();
    let injector = setup.start(&["--reload-debounce", "50ms"]);
    let client = setup.client();
    let review = fixture("statefulset-pod.json");
    let revision_of = |reply: &Value| {
        patched(&review, reply)["metadata"]["annotations"]["injector/revision"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (_, reply) = post_review(&injector, &client, &review).await;
    let original = revision_of(&reply);

    let logger = setup.path("config/logger-v1.yaml");
    edit(&logger, "fluent-bit:2.2.0", "fluent-bit:2.2.1");
    let edited = eventually(DEADLINE, "the edit takes effect", || async {
        let (_, reply) = post_review(&injector, &client, &review).await;
        let revision = revision_of(&reply);
        (revision != original).then_some(revision)
    })
    .await;
    let (_, reply) = post_review(&injector, &client, &review).await;
    assert_eq!(
        patched(&review, &reply)["spec"]["containers"][1]["image"],
        "fluent/fluent-bit:2.2.1"
    );

    let errors = "sidecar_injector_config_reloads_total{source=\"directory\",result=\"error\"}";
    assert_eq!(injector.metric(errors), 0.0);
    std::fs::write(
        &logger,
        "name: logger:v1\ncontainers: [{name: log-shipper, image: 'x:9'}]\nimagee: typo\n",
    )
    .unwrap();
    eventually(DEADLINE, "the broken edit is counted", || async {
        (injector.metric(errors) >= 1.0).then_some(())
    })
    .await;
    let (_, reply) = post_review(&injector, &client, &review).await;
    assert_eq!(
        revision_of(&reply),
        edited,
        "the last good config keeps serving"
    );
    assert!(
        injector
            .logs()
            .iter()
            .any(|l| l.contains("unknown top-level key \\\"imagee\\\"")),
        "the error is logged"
    );
    assert_eq!(
        injector.metric("sidecar_injector_configs_loaded{source=\"directory\"}"),
        4.0
    );
    // In JSON, the list of configs in force is one plain field, not a debug-printed array.
    let in_force: Value = injector
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "sidecar configs in force")
        .unwrap();
    let sidecars = in_force["sidecars"].as_str().unwrap();
    assert!(
        sidecars.starts_with("logger:v1=") && !sidecars.contains(['[', '"']),
        "{sidecars}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn certificate_rotation_fails_no_request_and_a_bad_pair_keeps_the_old() {
    let setup = Setup::new();
    let injector = setup.start(&["--reload-debounce", "50ms"]);
    let rotated = DevCertificates::generate(&["localhost".into()]).unwrap();
    let client = TlsClient::new(&[setup.certs.ca_pem.as_bytes(), rotated.ca_pem.as_bytes()]);
    let first_der = client.connect(injector.tls).await.unwrap().peer_certificate;
    let review = serde_json::to_vec(&fixture("bare-pod.json")).unwrap();
    let expiry = "sidecar_injector_certificate_expiration_timestamp_seconds";
    let expiry_of = |pem: &str| not_after(pem.as_bytes(), "tls.crt").unwrap() as f64;
    assert_eq!(injector.metric(expiry), expiry_of(&setup.certs.cert_pem));

    // A client loops, a new connection (handshake) per request, while the files rotate.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let looper = {
        let (client, stop, done, review, addr) = (
            client.clone(),
            stop.clone(),
            done.clone(),
            review.clone(),
            injector.tls,
        );
        tokio::spawn(async move {
            let (mut ok, mut failed, mut certificates) =
                (0u32, Vec::new(), std::collections::BTreeSet::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match client.connect(addr).await {
                    Ok(mut connection) => {
                        certificates.insert(connection.peer_certificate.clone());
                        match connection
                            .post("/mutate", "application/json", review.clone())
                            .await
                        {
                            Ok((status, _)) if status == 200 => ok += 1,
                            other => failed.push(format!("{other:?}")),
                        }
                    }
                    Err(err) => failed.push(err.to_string()),
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            (ok, failed, certificates)
        })
    };
    let replace = |name: &str, text: &str| setup.replace_tls_file(name, text);
    let requests = || done.load(std::sync::atomic::Ordering::Relaxed);
    eventually(DEADLINE, "the loop is running", || async {
        (requests() >= 10).then_some(())
    })
    .await;
    replace("tls.key", &rotated.key_pem);
    replace("tls.crt", &rotated.cert_pem);
    let new_der = eventually(DEADLINE, "the new certificate is served", || async {
        let der = client.connect(injector.tls).await.ok()?.peer_certificate;
        (der != first_der).then_some(der)
    })
    .await;
    eventually(
        DEADLINE,
        "the expiry gauge follows the new certificate",
        || async { (injector.metric(expiry) == expiry_of(&rotated.cert_pem)).then_some(()) },
    )
    .await;
    let rotated_at = requests();
    eventually(DEADLINE, "the loop runs on the new certificate", || async {
        (requests() >= rotated_at + 10).then_some(())
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed, certificates) = looper.await.unwrap();
    assert!(
        failed.is_empty(),
        "{} requests failed: {failed:?}",
        failed.len()
    );
    assert!(ok > 10, "the client looped ({ok} requests)");
    assert_eq!(
        certificates.len(),
        2,
        "the loop saw the old and then the new certificate"
    );

    // A bad pair is refused and the current one keeps serving.
    let errors = "sidecar_injector_certificate_reloads_total{result=\"error\"}";
    replace(
        "tls.crt",
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    );
    eventually(DEADLINE, "the bad pair is refused", || async {
        (injector.metric(errors) >= 1.0).then_some(())
    })
    .await;
    let mut connection = client.connect(injector.tls).await.unwrap();
    assert_eq!(connection.peer_certificate, new_der);
    let (status, _) = connection
        .post("/mutate", "application/json", review)
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn graceful_shutdown_fails_ready_first_and_finishes_requests_in_flight() {
    use tokio::io::AsyncWriteExt;
    let setup = Setup::new();
    let mut injector = setup.start(&["--shutdown-delay", "2s", "--shutdown-timeout", "10s"]);
    assert_eq!(injector.lifecycle_get("/ready").0, 200);
    assert_eq!(injector.lifecycle_get("/health").0, 200);

    // A request in flight: headers and half the body sent.
    let body = serde_json::to_vec(&fixture("deployment-pod.json")).unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut tls = setup.client().connect_tls(injector.tls).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(first).await.unwrap();
    tls.flush().await.unwrap();

    injector.signal("TERM");
    // /ready fails first, while the listener still accepts.
    eventually(DEADLINE, "/ready fails after SIGTERM", || async {
        (injector.lifecycle_get("/ready").0 == 503).then_some(())
    })
    .await;
    assert!(
        setup.client().connect(injector.tls).await.is_ok(),
        "still accepting during the delay"
    );

    // The listeners close after the delay; the in-flight request still completes.
    eventually(DEADLINE, "the TLS listener closes", || async {
        setup
            .client()
            .connect(injector.tls)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    tls.write_all(rest).await.unwrap();
    tls.flush().await.unwrap();
    let mut response = Vec::new();
    read_until(&mut tls, &mut response, b"\"uid\"").await;
    assert!(String::from_utf8_lossy(&response).starts_with("HTTP/1.1 200"));
    drop(tls);
    let status = injector.wait_exit(DEADLINE);
    assert!(status.success(), "exit status {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tumblr_environment_variables_configure_serve() {
    let setup = Setup::new();
    let config = setup.path("config");
    let cert = setup.path("tls/tls.crt");
    let key = setup.path("tls/tls.key");
    let injector = Injector::start(
        setup.dir.path(),
        &["--shutdown-delay", "0s"],
        &[
            ("TLS_PORT", "0"),
            ("LIFECYCLE_PORT", "0"),
            ("CONFIG_DIR", config.to_str().unwrap()),
            ("TLS_CERT_FILE", cert.to_str().unwrap()),
            ("TLS_KEY_FILE", key.to_str().unwrap()),
            ("ANNOTATION_NAMESPACE", "injector.tumblr.com"),
            ("LOG_LEVEL", "2"),
            ("CONFIGMAP_NAMESPACE", ""),
        ],
    );
    let mut review = fixture("bare-pod.json");
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"injector.tumblr.com/request": "logger:v1"});
    let (_, reply) = post_review(&injector, &setup.client(), &review).await;
    let pod = patched(&review, &reply);
    assert_eq!(
        pod["metadata"]["annotations"]["injector.tumblr.com/status"],
        "injected"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_with_no_flags_generates_development_certificates_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::copy(
        format!("{ROOT}/config/logger-v1.yaml"),
        dir.path().join("config/logger-v1.yaml"),
    )
    .unwrap();
    let no_kubeconfig = dir.path().join("none");
    let injector = Injector::start(
        dir.path(),
        &["--shutdown-delay", "0s", "-v", "2"],
        &[("KUBECONFIG", no_kubeconfig.to_str().unwrap())],
    );
    let ca = std::fs::read(dir.path().join("certs/ca.crt")).expect("certs/ca.crt written");
    // With no cluster it says, once, that only the directory is served.
    let directory_only = injector
        .logs()
        .into_iter()
        .filter(|l| {
            l.contains("no cluster connection") && l.contains("serving directory configs only")
        })
        .count();
    assert_eq!(directory_only, 1, "{:#?}", injector.logs());
    let generated: Vec<String> = injector
        .logs()
        .into_iter()
        .filter(|l| l.contains("generated a development CA"))
        .collect();
    assert_eq!(generated.len(), 1, "{generated:?}");
    let client = TlsClient::new(&[&ca]);
    let (status, reply) = post_review(&injector, &client, &fixture("bare-pod.json")).await;
    assert_eq!(status, 200);
    assert_eq!(reply["response"]["allowed"], true);
    drop(injector);
    // A second start reuses the pair, so a caBundle pasted from the first stays valid.
    let again = Injector::start(dir.path(), &["--shutdown-delay", "0s"], &[]);
    assert_eq!(std::fs::read(dir.path().join("certs/ca.crt")).unwrap(), ca);
    assert!(TlsClient::new(&[&ca]).connect(again.tls).await.is_ok());
    drop(again);
    // A pair from an earlier run that has expired since (a run a year later) is renewed with
    // the same CA, not served: every handshake would fail.
    let kept = DevCa::read(&dir.path().join("certs"))
        .unwrap()
        .expect("the CA kept");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    DevCertificates::issue(&kept, &names, now - 7200, now - 3600)
        .unwrap()
        .write(&dir.path().join("certs"))
        .unwrap();
    let expired = std::fs::read(dir.path().join("certs/tls.crt")).unwrap();
    let renewed = Injector::start(dir.path(), &["--shutdown-delay", "0s"], &[]);
    let handshake = TlsClient::new(&[&ca]).connect(renewed.tls).await;
    assert!(handshake.is_ok(), "{:?}", handshake.err());
    assert!(
        renewed
            .logs()
            .iter()
            .any(|l| l.contains("expired") && l.contains("signed by the same CA")),
        "{:?}",
        renewed.logs()
    );
    assert_ne!(
        std::fs::read(dir.path().join("certs/tls.crt")).unwrap(),
        expired
    );
    assert_eq!(std::fs::read(dir.path().join("certs/ca.crt")).unwrap(), ca);
    drop(renewed);
    // A pair cut short (a disk filled mid-write) is renewed too, and the log names the file.
    let whole = std::fs::read(dir.path().join("certs/tls.crt")).unwrap();
    std::fs::write(dir.path().join("certs/tls.crt"), &whole[..whole.len() / 2]).unwrap();
    let mended = Injector::start(dir.path(), &["--shutdown-delay", "0s"], &[]);
    assert!(TlsClient::new(&[&ca]).connect(mended.tls).await.is_ok());
    assert!(
        mended
            .logs()
            .iter()
            .any(|l| l.contains("does not read: certs/tls.crt") && l.contains("no END line")),
        "{:?}",
        mended.logs()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn over_http2_too_large_and_wrong_media_type_come_back_as_statuses_with_a_body() {
    let setup = Setup::new();
    let injector = setup.start(&["--max-body-bytes", "20000"]);
    let client = setup.client();
    let mut h2 = client.connect_h2(injector.tls).await.unwrap();
    let big = vec![b' '; 6 * 1024 * 1024];
    // Each answer arrives as a status with its text, while the client is still uploading;
    // the connection stays usable after each.
    for (content_type, streamed, status, text) in [
        (
            "text/plain",
            false,
            415,
            "Content-Type must be application/json",
        ),
        (
            "application/json",
            false,
            413,
            "the body exceeds --max-body-bytes (20000 bytes)",
        ),
        (
            "application/json",
            true,
            413,
            "the body exceeds --max-body-bytes (20000 bytes)",
        ),
    ] {
        let (got, body) = h2
            .post("/mutate", content_type, big.clone(), streamed)
            .await
            .unwrap_or_else(|e| panic!("{content_type} streamed={streamed}: {e}"));
        assert_eq!(got, status, "{content_type} streamed={streamed}");
        assert_eq!(String::from_utf8_lossy(&body).trim(), text);
    }
    // curl, which gives up on a stream reset before the response: the same statuses and texts.
    let file = setup.path("big.json");
    std::fs::write(&file, &big).unwrap();
    let url = format!("https://localhost:{}/mutate", injector.tls.port());
    for (content_type, chunked, status, text) in [
        (
            "text/plain",
            false,
            "415",
            "Content-Type must be application/json",
        ),
        (
            "application/json",
            false,
            "413",
            "the body exceeds --max-body-bytes (20000 bytes)",
        ),
        (
            "application/json",
            true,
            "413",
            "the body exceeds --max-body-bytes (20000 bytes)",
        ),
    ] {
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sS", "--http2", "--cacert"])
            .arg(setup.path("tls/ca.crt"))
            .args(["-w", "\n%{http_code} %{http_version}", "-H"])
            .arg(format!("Content-Type: {content_type}"))
            .arg("--data-binary")
            .arg(format!("@{}", file.display()));
        if chunked {
            curl.args(["-H", "Transfer-Encoding: chunked"]);
        }
        let output = curl.arg(&url).output().expect("curl runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "curl {content_type} chunked={chunked}: {}{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(stdout, format!("{text}\n\n{status} 2"));
    }

    let review = serde_json::to_vec(&fixture("bare-pod.json")).unwrap();
    let (status, body) = h2
        .post("/mutate", "application/json", review, false)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["response"]["allowed"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_naming_too_many_sidecars_is_denied_with_a_short_reason() {
    let setup = Setup::new();
    let injector = setup.start(&[]);
    let client = setup.client();
    let mut review = fixture("bare-pod.json");
    let names: Vec<String> = (0..100_000).map(|i| format!("s{i}:v1")).collect();
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"injector/request": names.join(",")});
    let (status, reply) = post_review(&injector, &client, &review).await;
    assert_eq!(status, 200);
    assert_eq!(reply["response"]["allowed"], false);
    let message = reply["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("the request names 100000 sidecars; at most 64 are allowed"),
        "{message}"
    );
    assert!(message.len() < 300, "{} bytes", message.len());
    // The log line is as short. It reaches the test through a reader of the process's
    // stderr, possibly after the reply: waited for, not read at once.
    let logged = eventually(DEADLINE, "the denial's log line", || async {
        injector
            .logs()
            .into_iter()
            .find(|l| l.contains("at most 64"))
    })
    .await;
    assert!(logged.len() < 1000, "{} bytes", logged.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_are_capped_and_idle_http2_connections_are_closed() {
    let setup = Setup::new();
    let injector = setup.start(&["--max-connections", "5", "--idle-timeout", "1s"]);
    let client = setup.client();
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(client.connect_h2(injector.tls).await.unwrap());
    }
    // One more is closed at accept, before its TLS handshake, and counted.
    assert!(client.connect_h2(injector.tls).await.is_err());
    assert_eq!(
        injector.metric("sidecar_injector_connections_refused_total{port=\"webhook\"}"),
        1.0
    );
    // Idle HTTP/2 connections are closed by the server, which frees their slots.
    eventually(DEADLINE, "the idle connections closed", || async {
        held.iter()
            .all(support::https::H2Connection::is_closed)
            .then_some(())
    })
    .await;
    let mut fresh = client.connect_h2(injector.tls).await.unwrap();
    let review = serde_json::to_vec(&fixture("bare-pod.json")).unwrap();
    let (status, _) = fresh
        .post("/mutate", "application/json", review, false)
        .await
        .unwrap();
    assert_eq!(status, 200);
}

/// The lifecycle port is plain HTTP that probes and Prometheus reach: a head that never ends
/// is closed, and connections past its cap (64) are closed at accept, so that nothing held
/// there takes the process's file descriptors from the webhook. It used to keep both forever.
#[tokio::test(flavor = "multi_thread")]
async fn the_lifecycle_port_cuts_unfinished_heads_and_caps_its_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    const HEAD_LIMIT: Duration = Duration::from_secs(1);
    const CAP: usize = 64;
    let setup = Setup::new();
    let injector = setup.start(&["--body-read-timeout", "1s"]);

    let mut partial = TcpStream::connect(injector.lifecycle).await.unwrap();
    let started = std::time::Instant::now();
    partial
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(DEADLINE, partial.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "an unfinished head kept past {DEADLINE:?}");
    let took = started.elapsed();
    assert!(took >= HEAD_LIMIT, "closed after {took:?}");

    // The cap's worth of connections that send nothing, each answered once to know it was
    // accepted (a keep-alive request), then one more: closed at once, unanswered.
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut connection = TcpStream::connect(injector.lifecycle).await.unwrap();
        connection
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        read_until(&mut connection, &mut answer, b"\r\n\r\n").await;
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        held.push(connection);
    }
    let mut over = TcpStream::connect(injector.lifecycle).await.unwrap();
    let _ = over
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    // Closed (or reset) unanswered, well before the idle timeout.
    let _ = tokio::time::timeout(DEADLINE, over.read_to_end(&mut answer))
        .await
        .expect("closed before the deadline");
    assert!(
        answer.is_empty(),
        "answered: {:?}",
        String::from_utf8_lossy(&answer)
    );
    // The webhook port is not touched by the lifecycle port's cap.
    let (status, _) = post_review(&injector, &setup.client(), &fixture("bare-pod.json")).await;
    assert_eq!(status, 200);

    drop(held);
    eventually(DEADLINE, "the lifecycle port answering again", || async {
        let mut probe = TcpStream::connect(injector.lifecycle).await.ok()?;
        probe
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        probe.read_to_end(&mut answer).await.ok()?;
        answer.starts_with(b"HTTP/1.1 200").then_some(())
    })
    .await;
    let refused = |port: &str| {
        injector.metric(&format!(
            "sidecar_injector_connections_refused_total{{port=\"{port}\"}}"
        ))
    };
    // The one over the cap, and any probe above that came before the dropped connections'
    // slots were free.
    assert!(refused("lifecycle") >= 1.0, "{}", refused("lifecycle"));
    assert_eq!(refused("webhook"), 0.0);
}

/// The image of the injected `log-shipper` for `review`, or `None` when nothing is injected.
async fn shipper_image(injector: &Injector, client: &TlsClient, review: &Value) -> Option<String> {
    let (_, reply) = post_review(injector, client, review).await;
    reply["response"]["patch"].as_str()?;
    let pod = patched(review, &reply);
    pod["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "log-shipper")
        .and_then(|c| c["image"].as_str().map(str::to_owned))
}

/// Copies `config/` to `target` with the shipper image set to `image`.
fn config_copy(setup: &Setup, target: &Path, image: &str) {
    std::fs::create_dir_all(target).unwrap();
    for entry in std::fs::read_dir(setup.path("config")).unwrap() {
        let entry = entry.unwrap();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        std::fs::write(
            target.join(entry.file_name()),
            text.replace("fluent/fluent-bit:2.2.0", image),
        )
        .unwrap();
    }
}

/// Rewrites `file` in place with `from` replaced by `to`, as an editor saving it would.
fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    std::fs::write(file, text.replace(from, to)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_pointed_or_recreated_config_directory_is_followed() {
    let setup = Setup::new();
    // --config-directory is a symlink, as git-sync keeps one.
    config_copy(&setup, &setup.path("rev-a"), "fluent/fluent-bit:2.2.0");
    std::os::unix::fs::symlink(setup.path("rev-a"), setup.path("live")).unwrap();
    let live = setup.path("live");
    let injector = setup.start(&[
        "--reload-debounce",
        "50ms",
        "--config-directory",
        live.to_str().unwrap(),
    ]);
    let client = setup.client();
    let review = fixture("statefulset-pod.json");
    let image = || shipper_image(&injector, &client, &review);
    assert_eq!(image().await.as_deref(), Some("fluent/fluent-bit:2.2.0"));

    // The symlink swapped atomically to a new revision.
    config_copy(&setup, &setup.path("rev-b"), "fluent/fluent-bit:2.2.1");
    std::os::unix::fs::symlink(setup.path("rev-b"), setup.path("live.tmp")).unwrap();
    std::fs::rename(setup.path("live.tmp"), &live).unwrap();
    eventually(DEADLINE, "the new target is served", || async {
        (image().await.as_deref() == Some("fluent/fluent-bit:2.2.1")).then_some(())
    })
    .await;
    // An edit in the new target is seen: it is watched now.
    edit(&setup.path("rev-b/logger-v1.yaml"), "2.2.1", "2.2.2");
    eventually(DEADLINE, "an edit in the new target is served", || async {
        (image().await.as_deref() == Some("fluent/fluent-bit:2.2.2")).then_some(())
    })
    .await;

    // The target deleted: the configs in force stay (an error counted, nothing dropped).
    let errors = "sidecar_injector_config_reloads_total{source=\"directory\",result=\"error\"}";
    std::fs::remove_dir_all(setup.path("rev-b")).unwrap();
    eventually(DEADLINE, "the missing directory is counted", || async {
        (injector.metric(errors) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(image().await.as_deref(), Some("fluent/fluent-bit:2.2.2"));
    // ...and recreated: followed, and later edits in it too.
    config_copy(&setup, &setup.path("rev-b"), "fluent/fluent-bit:2.2.3");
    eventually(DEADLINE, "the recreated directory is served", || async {
        (image().await.as_deref() == Some("fluent/fluent-bit:2.2.3")).then_some(())
    })
    .await;
    edit(&setup.path("rev-b/logger-v1.yaml"), "2.2.3", "2.2.4");
    eventually(
        DEADLINE,
        "an edit in the recreated directory is served",
        || async { (image().await.as_deref() == Some("fluent/fluent-bit:2.2.4")).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn relative_paths_are_watched_the_default_config_directory_and_the_certificate_files() {
    // As the README runs it: from a checkout, `config/` by default, certificate paths relative
    // to the working directory.
    let setup = Setup::new();
    let injector = Injector::start(
        setup.dir.path(),
        &[
            "--tls-cert-file",
            "tls/tls.crt",
            "--tls-key-file",
            "./tls/tls.key",
            "--reload-debounce",
            "50ms",
            "--shutdown-delay",
            "0s",
        ],
        &[],
    );
    let rotated = DevCertificates::generate(&["localhost".into()]).unwrap();
    let client = TlsClient::new(&[setup.certs.ca_pem.as_bytes(), rotated.ca_pem.as_bytes()]);
    let review = fixture("statefulset-pod.json");
    let image = || shipper_image(&injector, &client, &review);
    assert_eq!(image().await.as_deref(), Some("fluent/fluent-bit:2.2.0"));

    edit(&setup.path("config/logger-v1.yaml"), "2.2.0", "2.2.1");
    eventually(DEADLINE, "the edit in config/ is served", || async {
        (image().await.as_deref() == Some("fluent/fluent-bit:2.2.1")).then_some(())
    })
    .await;

    let first_der = client.connect(injector.tls).await.unwrap().peer_certificate;
    setup.replace_tls_file("tls.key", &rotated.key_pem);
    setup.replace_tls_file("tls.crt", &rotated.cert_pem);
    eventually(DEADLINE, "the rotated certificate is served", || async {
        let der = client.connect(injector.tls).await.ok()?.peer_certificate;
        (der != first_der).then_some(())
    })
    .await;
}

#[test]
fn a_port_in_use_stops_serve_at_once_with_an_error_naming_it() {
    let setup = Setup::new();
    let running = setup.start(&[]);
    for (flag, taken) in [
        ("--tls-port", running.tls.port()),
        ("--lifecycle-port", running.lifecycle.port()),
    ] {
        let taken = taken.to_string();
        let mut second = setup.spawn(&[flag, &taken]);
        let status = second.wait_exit(DEADLINE);
        let logs = second.logs().join("\n");
        assert!(!status.success(), "{flag}: {status}");
        assert!(
            logs.contains(&format!("cannot listen on 127.0.0.1:{taken} ({flag})"))
                && logs.contains("in use"),
            "{flag}: {logs}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_written_in_two_parts_is_served_only_once_complete() {
    use std::io::Write;
    let setup = Setup::new();
    let injector = setup.start(&["--reload-debounce", "50ms"]);
    let client = setup.client();
    let review = fixture("statefulset-pod.json");
    let reloads = "sidecar_injector_config_reloads_total{source=\"directory\",result=\"success\"}";
    let before = injector.metric(reloads);

    // The first part alone is a valid config; the writer pauses well past the quiet time
    // before it writes the rest and closes the file.
    let mut file = std::fs::File::create(setup.path("config/logger-v1.yaml")).unwrap();
    file.write_all(
        b"name: logger:v1\ncontainers: [{name: log-shipper, image: 'fluent/fluent-bit:9.0.0'}]\n",
    )
    .unwrap();
    file.flush().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    file.write_all(b"env: [{name: PART, value: two}]\n")
        .unwrap();
    drop(file);

    let env_of = |reply: &Value| patched(&review, reply)["spec"]["containers"][0]["env"].clone();
    eventually(DEADLINE, "the complete file is served", || async {
        let (_, reply) = post_review(&injector, &client, &review).await;
        env_of(&reply)
            .as_array()
            .is_some_and(|env| env.iter().any(|e| e["name"] == "PART"))
            .then_some(())
    })
    .await;
    assert_eq!(
        injector.metric(reloads),
        before + 1.0,
        "one reload, of the complete file; the half-written one was never loaded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_http2_client_does_not_hold_shutdown() {
    let setup = Setup::new();
    let mut injector = setup.start(&["--shutdown-timeout", "20s"]);
    let mut idle = setup.client().connect_h2(injector.tls).await.unwrap();
    let (status, _) = idle
        .post(
            "/mutate",
            "application/json",
            serde_json::to_vec(&fixture("bare-pod.json")).unwrap(),
            false,
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let started = std::time::Instant::now();
    injector.signal("TERM");
    let status = injector.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the idle connection held shutdown for {:?}",
        started.elapsed()
    );
    assert!(idle.is_closed(), "the server closed the idle connection");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_tumblr_metrics_tumblrs_series_are_exported_under_their_names() {
    let setup = Setup::new();
    let injector = setup.start(&["--tumblr-metrics"]);
    let client = setup.client();
    let mut requesting = fixture("bare-pod.json");
    requesting["request"]["object"]["metadata"]["annotations"] =
        json!({"injector/request": "logger:v1"});
    let mut plain = fixture("bare-pod.json");
    plain["request"]["object"]["metadata"]["annotations"] = json!({});
    assert_eq!(post_review(&injector, &client, &requesting).await.0, 200);
    assert_eq!(post_review(&injector, &client, &plain).await.0, 200);
    assert_eq!(post_review(&injector, &client, &json!([1])).await.0, 400);
    let (_, metrics) = injector.lifecycle_get("/metrics");
    for line in [
        r#"injections{status="success",reason="all_groovy",requested="logger:v1"} 1"#,
        r#"injections{status="skipped",reason="no_annotation",requested=""} 1"#,
        r#"injections{status="error",reason="unmarshal_error",requested=""} 1"#,
        r#"http_api_requests_total{code="200",method="post"} 2"#,
        r#"http_api_requests_total{code="400",method="post"} 1"#,
        r#"http_request_duration_seconds_count{handler="mutate",method="post"} 3"#,
        r#"http_request_duration_seconds_bucket{le="0.001",handler="mutate",method="post"}"#,
        r#"http_response_size_bytes_bucket{le="5000.0"}"#,
        "# TYPE http_in_flight_requests gauge",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(line)),
            "{line} not in:\n{metrics}"
        );
    }
    // The project's own series are still there, and the exposition ends once.
    assert!(metrics.contains("sidecar_injector_admission_requests_total"));
    assert_eq!(metrics.matches("# EOF").count(), 1);
    assert!(metrics.ends_with("# EOF\n"));

    // Without the switch, none of Tumblr's names.
    let other = setup.start(&[]);
    assert_eq!(post_review(&other, &client, &requesting).await.0, 200);
    let (_, metrics) = other.lifecycle_get("/metrics");
    assert!(!metrics.contains("injections{"), "{metrics}");
    assert!(!metrics.contains("http_api_requests_total"), "{metrics}");
}
