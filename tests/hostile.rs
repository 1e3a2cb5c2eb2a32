//! The hostile inputs of docs/hardening.md, run against the release binary on loopback, each
//! bounded in count and time. Throughout, a probe asks `/health` and a small `/mutate` every
//! 100 ms and samples the process's RSS: no endpoint may go unanswered for a second, and RSS
//! stays under 80 MiB. Each input must be answered as the table says.
#![allow(clippy::too_many_lines)] // a test reads as one scenario

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidecar_injector::serve::tls::DevCertificates;
use support::https::TlsClient;
use support::injector::{Injector, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const DEADLINE: Duration = Duration::from_secs(20);
const MAX_UNANSWERED: Duration = Duration::from_secs(1);
/// With glibc's mmap threshold left to rise, 40 concurrent 6 MiB bodies alone peaked at 85-104 MiB.
const MAX_RSS_KIB: u64 = 80 * 1024;

/// A release build of the binary the image ships (statically linked, cargo's release
/// profile: the image's LTO and profile-guided optimisation only make it faster), which the
/// time and memory bounds are about.
fn release_binary() -> PathBuf {
    if let Ok(path) = std::env::var("SIDECAR_INJECTOR_RELEASE_BIN") {
        return PathBuf::from(path);
    }
    let output = std::process::Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/static-binary"))
        .env("SIDECAR_INJECTOR_PROFILE", "release")
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("scripts/static-binary runs");
    assert!(output.status.success(), "scripts/static-binary failed");
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/tests/fixtures/admission/{name}")).unwrap(),
    )
    .unwrap()
}

/// A review of `bare-pod.json` with its object changed by `edit`.
fn review_with(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut review = fixture("bare-pod.json");
    edit(&mut review["request"]["object"]);
    serde_json::to_vec(&review).unwrap()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// What the probe saw while the attacks ran.
#[derive(Debug, Default)]
struct ProbeReport {
    slowest_health: Duration,
    slowest_mutate: Duration,
    peak_rss_kib: u64,
    /// The attack under way at the slowest answer and at the RSS peak.
    slowest_during: usize,
    peak_during: usize,
    samples: usize,
    failures: Vec<String>,
}

async fn health(lifecycle: std::net::SocketAddr) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect(lifecycle)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    response
        .starts_with("HTTP/1.1 200")
        .then_some(())
        .ok_or(response)
}

/// Every 100 ms until `stop`: `/health` on the lifecycle port, a small review on one HTTP/2
/// connection opened before the attacks (so the connection cap does not shut it out), RSS.
fn spawn_probe(
    injector: &Injector,
    client: TlsClient,
    stop: Arc<AtomicBool>,
    phase: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<ProbeReport> {
    let (tls, lifecycle, pid) = (injector.tls, injector.lifecycle, injector.pid());
    tokio::spawn(async move {
        let mut report = ProbeReport::default();
        let mut connection = client.connect_h2(tls).await.expect("the probe connects");
        let review = serde_json::to_vec(&fixture("bare-pod.json")).unwrap();
        while !stop.load(Ordering::Acquire) {
            let started = Instant::now();
            match tokio::time::timeout(Duration::from_secs(5), health(lifecycle)).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => report.failures.push(format!("/health: {err}")),
                Err(_) => report.failures.push("/health: no answer in 5 s".into()),
            }
            let health_took = started.elapsed();
            let started = Instant::now();
            let answered = tokio::time::timeout(
                Duration::from_secs(5),
                connection.post("/mutate", "application/json", review.clone(), false),
            )
            .await;
            match answered {
                Ok(Ok((status, _))) if status == 200 => {}
                Ok(Ok((status, body))) => report.failures.push(format!(
                    "/mutate: {status} {}",
                    String::from_utf8_lossy(&body)
                )),
                Ok(Err(err)) => {
                    report.failures.push(format!("/mutate: {err}"));
                    if let Ok(again) = client.connect_h2(tls).await {
                        connection = again;
                    }
                }
                Err(_) => report.failures.push("/mutate: no answer in 5 s".into()),
            }
            let mutate_took = started.elapsed();
            let now = phase.load(Ordering::Acquire);
            if health_took.max(mutate_took) > report.slowest_health.max(report.slowest_mutate) {
                report.slowest_during = now;
            }
            report.slowest_health = report.slowest_health.max(health_took);
            report.slowest_mutate = report.slowest_mutate.max(mutate_took);
            let rss = rss_kib(pid);
            if rss > report.peak_rss_kib {
                report.peak_rss_kib = rss;
                report.peak_during = now;
            }
            report.samples += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        report
    })
}

async fn post(client: &TlsClient, injector: &Injector, body: Vec<u8>) -> (u16, Value) {
    let mut connection = client.connect_h2(injector.tls).await.unwrap();
    let (status, body) = connection
        .post("/mutate", "application/json", body, false)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&body).into_owned();
    (
        status.as_u16(),
        serde_json::from_slice(&body).unwrap_or(Value::String(text)),
    )
}

fn denial(reply: &Value) -> &str {
    assert_eq!(reply["response"]["allowed"], false, "{reply}");
    reply["response"]["status"]["message"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_hostile_input_is_answered_as_the_table_says_and_serve_stays_up() {
    let binary = release_binary();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::copy(
        Path::new(ROOT).join("config/logger-v1.yaml"),
        config.join("logger-v1.yaml"),
    )
    .unwrap();
    // A config whose env, added to every container, makes a patch past the limit, and which
    // changes the service account (removing legacy token volumes).
    let env: Vec<String> = (0..2_000)
        .map(|i| format!("{{name: E{i}, value: v}}"))
        .collect();
    std::fs::write(
        config.join("heavy.yaml"),
        format!(
            "name: heavy:v1\nserviceAccountName: agent\ncontainers: [{{name: h, image: 'h:1'}}]\nenv: [{}]\n",
            env.join(", ")
        ),
    )
    .unwrap();
    std::fs::write(
        config.join("token.yaml"),
        "name: token:v1\nserviceAccountName: agent\ncontainers: [{name: t, image: 't:1'}]\n",
    )
    .unwrap();
    let certs = DevCertificates::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
    certs.write(&dir.path().join("tls")).unwrap();
    let path = |p: &str| dir.path().join(p).to_str().unwrap().to_owned();
    let (config_arg, cert, key) = (path("config"), path("tls/tls.crt"), path("tls/tls.key"));
    let injector = Injector::start_binary(
        &binary,
        dir.path(),
        &[
            "--config-directory",
            &config_arg,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--max-connections",
            "256",
            "--body-read-timeout",
            "2s",
            "--reload-debounce",
            "50ms",
        ],
        &[],
    );
    let client = TlsClient::new(&[certs.ca_pem.as_bytes()]);
    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicUsize::new(0));
    let probe = spawn_probe(&injector, client.clone(), stop.clone(), phase.clone());
    let pid = injector.pid();
    // `serve` re-executes itself with glibc's mmap threshold fixed: without it, large bodies
    // leave memory resident in malloc's arenas.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|var| var == b"GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072"),
        "serve runs without its malloc tunables"
    );
    let next = |n: usize| {
        eprintln!("before attack {n}: RSS {} KiB", rss_kib(pid));
        phase.store(n, Ordering::Release);
    };
    let mut answered = Vec::new();

    next(1);
    // 1. More connections than --max-connections, left idle: the excess is closed at accept
    // and counted; the probe's connection keeps working.
    let mut idle = Vec::new();
    for _ in 0..320 {
        if let Ok(connection) = client.connect_h2(injector.tls).await {
            idle.push(connection);
        }
    }
    let refused = "sidecar_injector_connections_refused_total{port=\"webhook\"}";
    eventually(DEADLINE, "connections over the cap are refused", || async {
        (injector.metric(refused) >= 60.0).then_some(())
    })
    .await;
    drop(idle);
    answered.push(format!(
        "320 idle HTTP/2 connections: {} refused",
        injector.metric(refused)
    ));

    next(2);
    // 2. 100,000 names in the request annotation: denied, the reason quoting no more than the
    // limit.
    let names = vec!["a:v1"; 100_000].join(",");
    let body = review_with(|pod| pod["metadata"]["annotations"]["injector/request"] = json!(names));
    let (status, reply) = post(&client, &injector, body).await;
    assert_eq!(status, 200);
    let message = denial(&reply);
    assert!(message.contains("at most 64"), "{message}");
    assert!(message.len() < 1024, "{message}");
    answered.push(format!(
        "100,000 names: denied, {} byte reason",
        message.len()
    ));

    next(3);
    // 3. 100,000 containers asking for a sidecar: denied before any patch is built.
    let containers: Vec<Value> = (0..100_000)
        .map(|i| json!({"name": format!("c{i}"), "image": "app:1"}))
        .collect();
    let body = review_with(|pod| pod["spec"]["containers"] = json!(containers));
    let size = body.len();
    let (status, reply) = post(&client, &injector, body).await;
    assert_eq!(status, 200);
    assert!(denial(&reply).contains("at most 256"), "{reply}");
    answered.push(format!("{size} byte pod of 100,000 containers: denied"));

    next(4);
    // 4. A 2,000-entry env added to 200 containers: a patch past 1.5 MiB, denied unbuilt.
    let containers: Vec<Value> = (0..200)
        .map(|i| json!({"name": format!("c{i}"), "image": "app:1"}))
        .collect();
    let body = review_with(|pod| {
        pod["spec"]["containers"] = json!(containers);
        pod["metadata"]["annotations"]["injector/request"] = json!("heavy:v1");
    });
    let (status, reply) = post(&client, &injector, body).await;
    assert_eq!(status, 200);
    assert!(denial(&reply).contains("exceed 1572864 bytes"), "{reply}");
    answered.push("2,000 env x 200 containers: denied, patch over the limit".into());
    // A requested name of a megabyte (and a pod name as long): the denial, and its log line,
    // quote 64 characters of it.
    let long = "x".repeat(1_000_000);
    let body = review_with(|pod| {
        pod["metadata"]["annotations"]["injector/request"] = json!(long);
        pod["metadata"]["name"] = json!(long);
    });
    let (status, reply) = post(&client, &injector, body).await;
    assert_eq!(status, 200);
    let reply_bytes = reply.to_string().len();
    assert!(reply_bytes < 4096, "{reply_bytes} bytes");
    assert!(
        denial(&reply).starts_with(&format!("sidecar \"{}...\" not found", &long[..64])),
        "{reply}"
    );
    let logged = eventually(DEADLINE, "the denial logged", || async {
        injector
            .logs()
            .into_iter()
            .find(|line| line.contains("not found; known"))
    })
    .await;
    assert!(logged.len() < 4096, "a log line of {} bytes", logged.len());
    answered.push(format!(
        "a megabyte name: denied in {reply_bytes} bytes, logged in {} bytes",
        logged.len()
    ));

    next(5);
    // 5. 30,000 legacy token volumes with a sidecar that changes the service account: all
    // removed in one linear pass.
    let volumes: Vec<Value> = (0..30_000)
        .map(|i| json!({"name": format!("default-token-{i}"), "secret": {"secretName": "s"}}))
        .collect();
    let body = review_with(|pod| {
        pod["spec"]["volumes"] = json!(volumes);
        pod["metadata"]["annotations"]["injector/request"] = json!("token:v1");
    });
    let started = Instant::now();
    let (status, reply) = post(&client, &injector, body).await;
    assert_eq!(
        (status, &reply["response"]["allowed"]),
        (200, &json!(true)),
        "{reply}"
    );
    answered.push(format!(
        "30,000 legacy token volumes: injected in {} ms",
        started.elapsed().as_millis()
    ));

    next(6);
    // 6. 40 bodies of 6 MiB at once: past --max-buffered-bytes (32 MiB) the rest get 503.
    let padding = "p".repeat(6 * 1024 * 1024 - 4096);
    let big = review_with(|pod| pod["metadata"]["labels"] = json!({ "padding": padding }));
    let uploads: Vec<_> = (0..40)
        .map(|_| {
            let (client, body, tls) = (client.clone(), big.clone(), injector.tls);
            tokio::spawn(async move {
                let mut connection = client.connect_h2(tls).await.unwrap();
                connection
                    .post("/mutate", "application/json", body, true)
                    .await
                    .map(|(status, _)| status.as_u16())
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for upload in uploads {
        if let Ok(status) = upload.await.unwrap() {
            *statuses.entry(status).or_default() += 1;
        }
    }
    assert!(
        statuses.keys().all(|s| [200, 503].contains(s)) && statuses.contains_key(&200),
        "{statuses:?}"
    );
    answered.push(format!("40 x 6 MiB at once: {statuses:?}"));

    next(7);
    // 7. Slow uploads that never finish: 408 after --body-read-timeout, the socket freed.
    let slow: Vec<_> = (0..50)
        .map(|_| {
            let (client, tls) = (client.clone(), injector.tls);
            tokio::spawn(async move {
                let mut stream = client.connect_tls(tls).await.unwrap();
                stream
                    .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\":")
                    .await
                    .unwrap();
                let mut response = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response)).await;
                String::from_utf8_lossy(&response).into_owned()
            })
        })
        .collect();
    for upload in slow {
        let response = upload.await.unwrap();
        assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    }
    answered.push("50 unfinished uploads: 408 each".into());

    next(8);
    // 8. A JSON nesting bomb and invalid UTF-8: 400 with a reason.
    for (what, body) in [
        ("100,000 nested arrays", "[".repeat(100_000).into_bytes()),
        ("invalid UTF-8", b"{\"apiVersion\":\"\xff\xfe\"}".to_vec()),
    ] {
        let (status, reply) = post(&client, &injector, body).await;
        assert_eq!(status, 400, "{what}: {reply}");
        answered.push(format!("{what}: 400"));
    }

    next(9);
    // 9. Config faults: a deeply nested config and a FIFO in the config directory are errors
    // that keep the configs in force; nothing blocks.
    let errors = "sidecar_injector_config_reloads_total{source=\"directory\",result=\"error\"}";
    std::fs::write(
        config.join("deep.yaml"),
        format!("name: deep:v1\nrollout: {}\n", "[".repeat(100_000)),
    )
    .unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(config.join("fifo.yaml"))
            .status()
            .unwrap()
            .success()
    );
    eventually(DEADLINE, "the broken configs are counted", || async {
        (injector.metric(errors) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        injector.metric("sidecar_injector_configs_loaded{source=\"directory\"}"),
        3.0
    );
    answered.push("deep config, FIFO config: reload errors, 3 configs kept".into());

    next(10);
    // 10. The certificate replaced by a FIFO, then by a chain with a broken block: errors,
    // the old pair keeps serving.
    let cert_errors = "sidecar_injector_certificate_reloads_total{result=\"error\"}";
    std::fs::remove_file(dir.path().join("tls/tls.crt")).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(dir.path().join("tls/tls.crt"))
            .status()
            .unwrap()
            .success()
    );
    eventually(DEADLINE, "the FIFO certificate is an error", || async {
        (injector.metric(cert_errors) >= 1.0).then_some(())
    })
    .await;
    std::fs::remove_file(dir.path().join("tls/tls.crt")).unwrap();
    std::fs::write(
        dir.path().join("tls/tls.crt"),
        format!(
            "{}-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n",
            certs.cert_pem
        ),
    )
    .unwrap();
    eventually(DEADLINE, "the broken chain is an error", || async {
        (injector.metric(cert_errors) >= 2.0).then_some(())
    })
    .await;
    let (status, _) = post(&client, &injector, review_with(|_| {})).await;
    assert_eq!(status, 200, "the old pair still serves");
    answered.push("FIFO certificate, broken chain: errors, old pair serving".into());

    stop.store(true, Ordering::Release);
    let report = probe.await.unwrap();
    eprintln!("answers:\n  {}", answered.join("\n  "));
    eprintln!(
        "probe: {} samples, slowest /health {:?}, slowest /mutate {:?}, peak RSS {} KiB",
        report.samples, report.slowest_health, report.slowest_mutate, report.peak_rss_kib
    );
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(report.samples >= 10, "{report:?}");
    assert!(report.slowest_health < MAX_UNANSWERED, "{report:?}");
    assert!(report.slowest_mutate < MAX_UNANSWERED, "{report:?}");
    assert!(report.peak_rss_kib < MAX_RSS_KIB, "{report:?}");
}
