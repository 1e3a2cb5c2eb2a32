//! The real `sidecar-injector serve` binary, started on loopback with ephemeral ports, its
//! logs collected (and printed when a test fails), stopped when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Injector {
    child: Child,
    pub tls: SocketAddr,
    pub lifecycle: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    /// The thread reading stderr into `logs`; finished once the process and its pipe are gone.
    reader: std::thread::JoinHandle<()>,
}

impl Injector {
    /// Starts `serve` in `cwd` with `args` (ports and log format are set here) and waits for
    /// its "listening" line.
    pub fn start(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_binary(
            Path::new(env!("CARGO_BIN_EXE_sidecar-injector")),
            cwd,
            args,
            env,
        )
    }

    /// As [`Injector::start`], with another build of the binary (the release one).
    pub fn start_binary(binary: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut injector = Self::spawn_binary(binary, cwd, args, env);
        let listening = injector.wait_for_log(Duration::from_secs(20), |line| {
            line["message"] == "listening"
        });
        // `--injection=policy` serves no webhook.
        if let Some(tls) = listening["tls"].as_str() {
            injector.tls = tls.parse().unwrap();
        }
        injector.lifecycle = listening["lifecycle"].as_str().unwrap().parse().unwrap();
        injector
    }

    /// Starts `serve` as [`Injector::start`] does, without waiting for it to listen (for a
    /// start that is meant to fail). `tls` and `lifecycle` stay unset.
    pub fn spawn(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_binary(
            Path::new(env!("CARGO_BIN_EXE_sidecar-injector")),
            cwd,
            args,
            env,
        )
    }

    fn spawn_binary(binary: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(binary);
        command
            .current_dir(cwd)
            .args([
                "serve",
                "--bind-address",
                "127.0.0.1",
                "--log-format",
                "json",
            ])
            .args(args)
            .env_remove("LOG_LEVEL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for var in [
            "TLS_PORT",
            "LIFECYCLE_PORT",
            "TLS_CERT_FILE",
            "TLS_KEY_FILE",
            "CONFIG_DIR",
            "ANNOTATION_NAMESPACE",
        ] {
            command.env_remove(var);
        }
        if !env.iter().any(|(k, _)| *k == "TLS_PORT") && !args.contains(&"--tls-port") {
            command.args(["--tls-port", "0"]);
        }
        if !env.iter().any(|(k, _)| *k == "LIFECYCLE_PORT") && !args.contains(&"--lifecycle-port") {
            command.args(["--lifecycle-port", "0"]);
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("the injector starts");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Injector {
            child,
            tls: "0.0.0.0:0".parse().unwrap(),
            lifecycle: "0.0.0.0:0".parse().unwrap(),
            logs,
            reader,
        }
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// The first JSON log line matching `matches`, waiting up to `deadline` for it.
    pub fn wait_for_log(&mut self, deadline: Duration, matches: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let found = self
                .logs()
                .iter()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|line| matches(line));
            if let Some(line) = found {
                return line;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the injector exited ({status}) before the expected log line:\n{}",
                    self.logs().join("\n")
                );
            }
            assert!(
                start.elapsed() < deadline,
                "no matching log line within {deadline:?}:\n{}",
                self.logs().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits for the process to exit, up to `deadline`, and for its last log lines to be read
    /// (the reader may lag behind the exit).
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while !self.reader.is_finished() {
                    assert!(
                        start.elapsed() < deadline,
                        "the injector exited ({status}) but its stderr stays open after {deadline:?}"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                return status;
            }
            assert!(
                start.elapsed() < deadline,
                "the injector did not exit within {deadline:?}:\n{}",
                self.logs().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Plain HTTP GET on the lifecycle port.
    pub fn lifecycle_get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.lifecycle).expect("lifecycle port");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// The value of one sample of `/metrics`, e.g. `sidecar_injector_config_reloads_total{source="directory",result="error"}`.
    pub fn metric(&self, sample: &str) -> f64 {
        let (_, body) = self.lifecycle_get("/metrics");
        body.lines()
            .find_map(|line| {
                line.strip_prefix(sample)
                    .and_then(|rest| rest.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- injector logs ---\n{}\n---", self.logs().join("\n"));
        }
    }
}

/// Polls `check` until it returns `Some`, failing the test after `deadline`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
