//! Load benchmark of `serve` against a floor server on the same TLS stack.
//!
//! Starts the real release binary (`sidecar-injector serve`) and a floor server (this binary
//! with `--floor-server`: rustls + axum-server, reads the body, returns a constant allowed
//! review), then loads them alternately with the same ~8 KB pod review over keep-alive
//! HTTP/1.1 connections, as the apiserver does, at concurrency 16 and 64. Prints requests/s,
//! p50/p99, the CPU each server and the load generator spent per request (the server's kernel
//! share and its context switches per request apart), the real/floor ratio per pair of runs,
//! and the real server's idle and peak RSS.
//!
//! A second floor sends back the real server's own reply (its base64 patch included), so the
//! share of the gap that is the reply's size, not the admission work, can be read off. A third
//! does the admission work itself (`admission::review` on each body, its reply sent back) on
//! the floor's bare stack: real/that floor is what the server's shell costs (limits, timeouts,
//! metrics, the idle guard), that floor/the second what the admission work costs. A fourth
//! reads each body as JSON and keeps nothing (serde_json into `IgnoredAny`, the least any
//! JSON reader measured pays for these bytes) before sending the real reply: that floor/the
//! first is as near the floor as a webhook that reads the review can come on this stack.
//!
//! `--baseline PATH` loads another build of `sidecar-injector` (an earlier commit's, say) in
//! the same rounds, and prints this build's throughput as a ratio of it. `--real PATH` judges
//! another build than cargo's as the real server: the image's, which `scripts/static-binary`
//! builds with a profile (cargo's own build has none).
//!
//! Run: `cargo bench --bench webhook_load` (optionally `-- --seconds 5 --rounds 3`, and
//! `--concurrency 16,64,500` for other numbers of concurrent connections).
//! Every request goes to 127.0.0.1; each run is bounded in time.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

#[allow(dead_code)]
#[path = "../tests/support/https.rs"]
mod https;
#[allow(dead_code)]
#[path = "support/review.rs"]
mod review;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Issue 16's targets: throughput at least 0.6 of the floor's at c16 and c64, p99 at c64 at
/// most twice the floor's, idle RSS under 16 MiB.
const TARGET_RATIO: f64 = 0.6;
const TARGET_P99_RATIO: f64 = 2.0;
const TARGET_IDLE_RSS_MIB: f64 = 16.0;

/// The real server unless `--real` names another build: cargo's release build, without a
/// profile.
const CARGO_BUILD: &str = env!("CARGO_BIN_EXE_sidecar-injector");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(position) = args.iter().position(|a| a == "--floor-server") {
        let answer = match args.get(position + 3).map(String::as_str) {
            None => FloorAnswer::Constant,
            Some("--review") => FloorAnswer::Review,
            Some("--skim") => FloorAnswer::Skim(PathBuf::from(&args[position + 4])),
            Some(path) => FloorAnswer::File(PathBuf::from(path)),
        };
        floor_server(
            Path::new(&args[position + 1]),
            Path::new(&args[position + 2]),
            answer,
        );
        return;
    }
    let value = |name: &str| {
        args.iter().position(|a| a == name).map(|i| {
            args.get(i + 1)
                .unwrap_or_else(|| panic!("{name} needs a value"))
        })
    };
    let option =
        |name: &str, default: u64| value(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it, and
    // then one short round checks that the harness still works, without measuring anything.
    if args.iter().any(|a| a == "--bench") {
        let seconds = option("--seconds", 4);
        let rounds = option("--rounds", 3);
        let baseline = value("--baseline").map(PathBuf::from);
        let concurrencies: Vec<usize> = value("--concurrency").map_or_else(
            || vec![16, 64],
            |list| {
                list.split(',')
                    .map(|c| {
                        c.trim()
                            .parse()
                            .expect("--concurrency takes numbers, e.g. 16,64,500")
                    })
                    .collect()
            },
        );
        let real = value("--real").map_or_else(|| PathBuf::from(CARGO_BUILD), PathBuf::from);
        drive(
            Duration::from_secs(seconds),
            rounds as usize,
            &concurrencies,
            &real,
            baseline.as_deref(),
        );
    } else {
        println!("webhook_load: smoke run (use `cargo bench --bench webhook_load` to measure)");
        drive(
            Duration::from_millis(500),
            1,
            &[4],
            Path::new(CARGO_BUILD),
            None,
        );
    }
}

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds a process has used so far, in user space and in the kernel.
#[derive(Clone, Copy)]
struct CpuSeconds {
    user: f64,
    system: f64,
}

impl CpuSeconds {
    /// `None` for this process.
    fn of(pid: Option<u32>) -> Self {
        let path = pid.map_or_else(
            || "/proc/self/stat".to_owned(),
            |p| format!("/proc/{p}/stat"),
        );
        let stat = std::fs::read_to_string(path).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at state, field 3.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state.
        CpuSeconds {
            user: ticks(11) / 100.0,
            system: ticks(12) / 100.0,
        }
    }

    fn since(self, earlier: CpuSeconds) -> CpuSeconds {
        CpuSeconds {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
        }
    }

    fn total(self) -> f64 {
        self.user + self.system
    }
}

/// Context switches, voluntary and not, over every thread of a process so far. The kernel's
/// share of a server's CPU grows with them: on shared cores, the more CPU a server takes, the
/// more often its threads and the load generator's preempt each other.
fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .map(|status| {
            ["voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"]
                .iter()
                .filter_map(|field| status_value::<u64>(&status, field))
                .sum::<u64>()
        })
        .sum()
}

/// The number after `field` in a `/proc/.../status` text.
fn status_value<T: std::str::FromStr>(status: &str, field: &str) -> Option<T> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
}

fn rss_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status_value::<f64>(&status, field).map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Reads stdout/stderr lines until one carries the listening address.
fn wait_listening(child: &mut Child, from_stderr: bool) -> SocketAddr {
    use std::io::{BufRead, BufReader};
    let reader: Box<dyn std::io::Read + Send> = if from_stderr {
        Box::new(child.stderr.take().unwrap())
    } else {
        Box::new(child.stdout.take().unwrap())
    };
    let mut lines = BufReader::new(reader).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Ok(value) = serde_json::from_str::<Value>(&line)
            && value["message"] == "listening"
        {
            let addr = value["tls"].as_str().unwrap().parse().unwrap();
            // Keep draining so the server never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return addr;
        }
    }
    panic!("the server did not report its address");
}

fn start_real(binary: &Path, dir: &Path, cert: &Path, key: &Path) -> Server {
    let log_level = std::env::var("BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".into());
    let mut child = Command::new(binary)
        .current_dir(dir)
        .args([
            "serve",
            "--bind-address",
            "127.0.0.1",
            "--tls-port",
            "0",
            "--lifecycle-port",
            "0",
            "--log-format",
            "json",
            "--log-level",
            &log_level,
        ])
        .arg("--config-directory")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config"))
        .arg("--tls-cert-file")
        .arg(cert)
        .arg("--tls-key-file")
        .arg(key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()));
    let addr = wait_listening(&mut child, true);
    Server { child, addr }
}

/// What a floor server answers.
enum FloorAnswer {
    /// A constant allowed review.
    Constant,
    /// The contents of this file (the real server's reply).
    File(PathBuf),
    /// What `admission::review` answers for the body, with the shipped example configs.
    Review,
    /// The contents of this file, once the body has been read as JSON.
    Skim(PathBuf),
}

fn start_floor(cert: &Path, key: &Path, answer: &FloorAnswer) -> Server {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.arg("--floor-server").arg(cert).arg(key);
    match answer {
        FloorAnswer::Constant => {}
        FloorAnswer::File(path) => {
            command.arg(path);
        }
        FloorAnswer::Review => {
            command.arg("--review");
        }
        FloorAnswer::Skim(path) => {
            command.arg("--skim").arg(path);
        }
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the floor server starts");
    let addr = wait_listening(&mut child, false);
    Server { child, addr }
}

/// The floor: the same TLS stack and HTTP server, none of the real server's shell. It answers
/// as `answer` says: a constant allowed review; a file (the real server's reply, patch
/// included: the floor that sends as much back as the real server does); that file once the
/// body has been read as JSON; or the admission work's own reply for each body.
fn floor_server(cert: &Path, key: &Path, answer: FloorAnswer) {
    use axum::routing::post;
    sidecar_injector::serve::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config = sidecar_injector::serve::tls::server_config_from_files(cert, key).unwrap();
        let app = match answer {
            FloorAnswer::Constant => replying(
                axum::body::Bytes::from_static(
                    br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"floor","allowed":true}}"#,
                ),
                received,
            ),
            FloorAnswer::File(path) => replying(std::fs::read(path).unwrap().into(), received),
            FloorAnswer::Skim(path) => replying(std::fs::read(path).unwrap().into(), read_as_json),
            FloorAnswer::Review => {
                let sidecars = std::sync::Arc::new(review::sidecars());
                let settings = std::sync::Arc::new(
                    sidecar_injector::injection::InjectionSettings::default(),
                );
                axum::Router::new().route(
                    "/mutate",
                    post(move |body: axum::body::Bytes| async move {
                        let answer =
                            sidecar_injector::serve::review(&body, &sidecars, &settings)
                                .unwrap();
                        ([("content-type", "application/json")], answer.body)
                    }),
                )
            }
        };
        let handle = axum_server::Handle::new();
        let server = axum_server::bind_rustls(
            "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
            axum_server::tls_rustls::RustlsConfig::from_config(config),
        )
        .handle(handle.clone());
        let task = tokio::spawn(server.serve(app.into_make_service()));
        let addr = handle.listening().await.unwrap();
        println!("{}", json!({"message": "listening", "tls": addr.to_string()}));
        task.await.unwrap().unwrap();
    });
}

/// What the floors that answer a fixed reply do with the body: receive it...
fn received(body: &[u8]) {
    std::hint::black_box(body.len());
}

/// ...or read it as JSON, keeping nothing: the least any JSON reader measured pays for it.
fn read_as_json(body: &[u8]) {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).expect("the review is JSON");
}

/// A floor router that receives each body, hands it to `read`, and answers `reply`.
fn replying(reply: axum::body::Bytes, read: fn(&[u8])) -> axum::Router {
    axum::Router::new().route(
        "/mutate",
        axum::routing::post(move |body: axum::body::Bytes| async move {
            read(&body);
            ([("content-type", "application/json")], reply.clone())
        }),
    )
}

/// The median and extremes of a few rounds' ratios.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &mut [f64]) -> Self {
        values.sort_by(f64::total_cmp);
        Spread {
            median: values[values.len() / 2],
            min: values[0],
            max: values[values.len() - 1],
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.2} (min {:.2}, max {:.2})",
            self.median, self.min, self.max
        )
    }
}

struct RunResult {
    /// CPU microseconds per request: the server's (of which in the kernel), and the load
    /// generator's.
    server_cpu_us: f64,
    server_sys_us: f64,
    client_cpu_us: f64,
    /// The server's context switches per request.
    server_switches: f64,
    requests: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    errors: usize,
}

impl RunResult {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

async fn load(
    client: &https::TlsClient,
    server: &Server,
    body: &hyper::body::Bytes,
    concurrency: usize,
    duration: Duration,
) -> RunResult {
    let addr = server.addr;
    let (server_cpu, client_cpu) = (
        CpuSeconds::of(Some(server.child.id())),
        CpuSeconds::of(None),
    );
    let switches = context_switches(server.child.id());
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, body) = (client.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut connection = client.connect(addr).await.expect("connect");
            while Instant::now() < deadline {
                let sent = Instant::now();
                match connection
                    .post("/mutate", "application/json", body.clone())
                    .await
                {
                    Ok((status, _)) if status == 200 => latencies.push(sent.elapsed()),
                    _ => {
                        errors += 1;
                        connection = client.connect(addr).await.expect("reconnect");
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (l, e) = worker.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    let per_request = |count: f64| count / latencies.len().max(1) as f64;
    let server_cpu = CpuSeconds::of(Some(server.child.id())).since(server_cpu);
    let server_cpu_us = per_request(server_cpu.total() * 1e6);
    let server_sys_us = per_request(server_cpu.system * 1e6);
    let client_cpu_us = per_request(CpuSeconds::of(None).since(client_cpu).total() * 1e6);
    let server_switches =
        per_request(context_switches(server.child.id()).saturating_sub(switches) as f64);
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    RunResult {
        server_cpu_us,
        server_sys_us,
        client_cpu_us,
        server_switches,
        requests: latencies.len(),
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
        errors,
    }
}

fn drive(
    duration: Duration,
    rounds: usize,
    concurrencies: &[usize],
    real_binary: &Path,
    baseline: Option<&Path>,
) {
    sidecar_injector::serve::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let certs = sidecar_injector::serve::tls::DevCertificates::generate(&[
        "localhost".into(),
        "127.0.0.1".into(),
    ])
    .unwrap();
    certs.write(dir.path()).unwrap();
    let (cert, key): (PathBuf, PathBuf) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    println!("real: {}", real_binary.display());
    let real = start_real(real_binary, dir.path(), &cert, &key);
    let baseline = baseline.map(|binary| start_real(binary, dir.path(), &cert, &key));
    let floor = start_floor(&cert, &key, &FloorAnswer::Constant);
    let body = hyper::body::Bytes::from(review::review_body());
    let client = https::TlsClient::new(&[certs.ca_pem.as_bytes()]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    // Idle: after start, one warm-up request so every lazy allocation has happened.
    let answer_of = |server: &Server| {
        runtime.block_on(async {
            let mut connection = client.connect(server.addr).await.unwrap();
            let (status, reply) = connection
                .post("/mutate", "application/json", body.clone())
                .await
                .unwrap();
            assert_eq!(status, 200);
            reply
        })
    };
    let reply = answer_of(&real);
    assert!(
        String::from_utf8_lossy(&reply).contains("\"patch\""),
        "the real server must inject"
    );
    if let Some(baseline) = &baseline {
        answer_of(baseline);
    }
    std::thread::sleep(Duration::from_millis(300));
    let idle_rss = rss_mib(real.child.id(), "VmRSS:");
    let baseline_idle_rss = baseline
        .as_ref()
        .map(|server| rss_mib(server.child.id(), "VmRSS:"));
    let reply_path = dir.path().join("reply.json");
    std::fs::write(&reply_path, &reply).unwrap();
    let floor_with_reply = start_floor(&cert, &key, &FloorAnswer::File(reply_path.clone()));
    let floor_skimming = start_floor(&cert, &key, &FloorAnswer::Skim(reply_path));
    let floor_reviewing = start_floor(&cert, &key, &FloorAnswer::Review);
    let reply_bytes = reply.len();
    // The reviewing floor must do the same work as the real server: the same reply.
    assert_eq!(
        String::from_utf8_lossy(&answer_of(&floor_reviewing)),
        String::from_utf8_lossy(&reply),
        "the reviewing floor answers as the real server does"
    );

    println!(
        "review body: {} bytes, the real server's reply {reply_bytes} bytes; {:?} per run; {} rounds; the load generator and the servers share this machine's cores; ratio: real's req/s over that row's; floor+r sends the real reply, floor+s reads the body as JSON and sends the real reply, floor+a does the admission work",
        body.len(),
        duration,
        rounds
    );
    println!(
        "{:>5} {:>8} {:>5} {:>10} {:>9} {:>9} {:>7} {:>7} {:>12} {:>8} {:>9} {:>12}",
        "conc",
        "server",
        "round",
        "req/s",
        "p50",
        "p99",
        "errors",
        "ratio",
        "server µs/req",
        "of it sys",
        "switches",
        "client µs/req"
    );
    let mut worst_ratio = f64::INFINITY;
    let mut p99_ratio = 0.0f64;
    for &concurrency in concurrencies {
        let mut ratios = Vec::new();
        let mut reply_ratios = Vec::new();
        let mut p99_ratios = Vec::new();
        let mut baseline_ratios = Vec::new();
        let mut baseline_p99_ratios = Vec::new();
        let mut baseline_cpu_ratios = Vec::new();
        let mut shell_ratios = Vec::new();
        let mut work_ratios = Vec::new();
        let mut skim_ratios = Vec::new();
        let mut over_skim_ratios = Vec::new();
        for round in 1..=rounds {
            let real_run = runtime.block_on(load(&client, &real, &body, concurrency, duration));
            let floor_run = runtime.block_on(load(&client, &floor, &body, concurrency, duration));
            let reply_run = runtime.block_on(load(
                &client,
                &floor_with_reply,
                &body,
                concurrency,
                duration,
            ));
            let skim_run =
                runtime.block_on(load(&client, &floor_skimming, &body, concurrency, duration));
            let reviewing_run = runtime.block_on(load(
                &client,
                &floor_reviewing,
                &body,
                concurrency,
                duration,
            ));
            let baseline_run = baseline.as_ref().map(|server| {
                runtime.block_on(load(&client, server, &body, concurrency, duration))
            });
            let ratio = real_run.rps() / floor_run.rps();
            let reply_ratio = real_run.rps() / reply_run.rps();
            let shell_ratio = real_run.rps() / reviewing_run.rps();
            ratios.push(ratio);
            reply_ratios.push(reply_ratio);
            shell_ratios.push(shell_ratio);
            work_ratios.push(reviewing_run.rps() / reply_run.rps());
            let over_skim = real_run.rps() / skim_run.rps();
            skim_ratios.push(skim_run.rps() / floor_run.rps());
            over_skim_ratios.push(over_skim);
            p99_ratios.push(real_run.p99.as_secs_f64() / floor_run.p99.as_secs_f64());
            let baseline_row = baseline_run.as_ref().map(|run| {
                let ratio = real_run.rps() / run.rps();
                baseline_ratios.push(ratio);
                baseline_p99_ratios.push(real_run.p99.as_secs_f64() / run.p99.as_secs_f64());
                baseline_cpu_ratios.push(real_run.server_cpu_us / run.server_cpu_us);
                ("baseline", run, format!("{ratio:.2}"))
            });
            for (name, run, shown) in [
                ("real", &real_run, String::new()),
                ("floor", &floor_run, format!("{ratio:.2}")),
                ("floor+r", &reply_run, format!("{reply_ratio:.2}")),
                ("floor+s", &skim_run, format!("{over_skim:.2}")),
                ("floor+a", &reviewing_run, format!("{shell_ratio:.2}")),
            ]
            .into_iter()
            .chain(baseline_row)
            {
                println!(
                    "{:>5} {:>8} {:>5} {:>10.0} {:>8.2}ms {:>8.2}ms {:>7} {:>7} {:>12.1} {:>8.1} {:>9.2} {:>12.1}",
                    concurrency,
                    name,
                    round,
                    run.rps(),
                    run.p50.as_secs_f64() * 1e3,
                    run.p99.as_secs_f64() * 1e3,
                    run.errors,
                    shown,
                    run.server_cpu_us,
                    run.server_sys_us,
                    run.server_switches,
                    run.client_cpu_us
                );
            }
        }
        let floor = Spread::of(&mut ratios);
        let reply_median = Spread::of(&mut reply_ratios).median;
        let p99_median = Spread::of(&mut p99_ratios).median;
        worst_ratio = worst_ratio.min(floor.median);
        if concurrency == 64 {
            p99_ratio = p99_median;
        }
        println!(
            "concurrency {concurrency}: real/floor {floor}; real/(floor sending the real reply) median {reply_median:.2}; p99 real/floor median {p99_median:.2}"
        );
        println!(
            "concurrency {concurrency}: the admission work on the floor's stack, floor+a/floor+r {}; the server's shell, real/floor+a {}",
            Spread::of(&mut work_ratios),
            Spread::of(&mut shell_ratios)
        );
        println!(
            "concurrency {concurrency}: reading the body as JSON and nothing more, floor+s/floor {}; real/floor+s {}",
            Spread::of(&mut skim_ratios),
            Spread::of(&mut over_skim_ratios)
        );
        if !baseline_ratios.is_empty() {
            let baseline = Spread::of(&mut baseline_ratios);
            let p99 = Spread::of(&mut baseline_p99_ratios);
            let cpu = Spread::of(&mut baseline_cpu_ratios);
            println!(
                "concurrency {concurrency}: real/baseline req/s {baseline}; p99 {p99}; server CPU per review {cpu}"
            );
            // One line for scripts/perf-guard to read: the medians.
            println!(
                "guard concurrency={concurrency} rps={:.3} p99={:.3} cpu={:.3}",
                baseline.median, p99.median, cpu.median
            );
        }
    }
    let peak_rss = rss_mib(real.child.id(), "VmHWM:");
    println!("real server RSS: idle {idle_rss:.1} MiB, peak {peak_rss:.1} MiB");
    if let (Some(server), Some(idle)) = (&baseline, baseline_idle_rss) {
        let peak = rss_mib(server.child.id(), "VmHWM:");
        println!("baseline server RSS: idle {idle:.1} MiB, peak {peak:.1} MiB");
        println!(
            "guard idle_rss={:.3} peak_rss={:.3}",
            idle_rss / idle,
            peak_rss / peak
        );
    }
    if concurrencies.len() < 2 {
        return;
    }
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "targets ({}): real/floor >= {TARGET_RATIO} ({}), p99 at c64 <= {TARGET_P99_RATIO}x the floor's ({}), idle RSS < {TARGET_IDLE_RSS_MIB} MiB ({})",
        real_binary.display(),
        met(worst_ratio >= TARGET_RATIO),
        met(p99_ratio <= TARGET_P99_RATIO),
        met(idle_rss < TARGET_IDLE_RSS_MIB)
    );
}
