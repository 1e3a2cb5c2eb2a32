//! A real Prometheus (Debian's package, unpacked by testbed/prometheus.sh into a cache) and the
//! alert rules of deploy/monitoring as Prometheus reads them.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The folder holding `prometheus` and `promtool` ($PROMETHEUS_BIN, else fetched and cached).
pub fn bin_dir() -> PathBuf {
    super::testbed_folder("prometheus.sh")
}

/// The PrometheusRule of deploy/monitoring.
pub fn prometheus_rule() -> Value {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("deploy/monitoring/prometheusrule.yaml"))
            .unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// Its rules as a Prometheus rule file; `prose: false` leaves out the description and runbook
/// annotations (promtool's unit tests compare every annotation, and those are prose).
pub fn rule_file(prose: bool) -> String {
    let mut spec = prometheus_rule()["spec"].clone();
    if !prose {
        for group in spec["groups"].as_array_mut().unwrap() {
            for rule in group["rules"].as_array_mut().unwrap() {
                let annotations = rule["annotations"].as_object_mut().unwrap();
                annotations.remove("description");
                annotations.remove("runbook");
            }
        }
    }
    serde_yaml::to_string(&spec).unwrap()
}

/// Every alert rule of the PrometheusRule.
pub fn alert_rules() -> Vec<Value> {
    prometheus_rule()["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The names of sidecar-injector's series an expression or a document mentions.
pub fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("sidecar_injector_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// A Prometheus server scraping one target every second and evaluating deploy/monitoring's
/// rules every second, on loopback.
pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    pub fn start(target: SocketAddr) -> Self {
        Self::start_scraping(&[target])
    }

    /// A Prometheus scraping each of `targets` every second.
    pub fn start_scraping(targets: &[SocketAddr]) -> Self {
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let targets = targets.join(", ");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rules.yaml"), rule_file(true)).unwrap();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [rules.yaml]\n\
                 scrape_configs:\n\
                 - job_name: sidecar-injector\n  static_configs: [{{targets: [{targets}]}}]\n"
            ),
        )
        .unwrap();
        // A free port: bound, then released for Prometheus (it takes no port 0).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin_dir().join("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let prometheus = Self {
            child,
            addr,
            _dir: dir,
        };
        let start = std::time::Instant::now();
        while get(addr, "/-/ready").map(|(status, _)| status) != Some(200) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus not ready within 30s:\n{}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `/api/v1/query` of `expr` at the current time: the whole answer.
    pub fn query(&self, expr: &str) -> Value {
        let (_, body) = get(self.addr, &format!("/api/v1/query?query={}", encode(expr)))
            .expect("prometheus answers");
        serde_json::from_str(&body).unwrap()
    }

    /// The alerts pending or firing (`/api/v1/alerts`).
    pub fn alerts(&self) -> Vec<Value> {
        let (_, body) = get(self.addr, "/api/v1/alerts").expect("prometheus answers");
        let answer: Value = serde_json::from_str(&body).unwrap();
        answer["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- prometheus log ---\n{}\n---", self.log());
        }
    }
}

/// A scrape target whose exposition the test sets: the metrics of "the workloads" a canary
/// check reads.
pub struct Exporter {
    pub addr: SocketAddr,
    text: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Exporter {
    /// Serves `/metrics` (any path) on loopback, empty until [`Exporter::set`].
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let served = text.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => request.push(byte[0]),
                        _ => break,
                    }
                }
                let body = served.lock().unwrap().clone();
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { addr, text }
    }

    /// What the next scrapes read, in the text exposition format.
    pub fn set(&self, text: &str) {
        *self.text.lock().unwrap() = text.to_owned();
    }
}

/// HTTP/1.0 GET (so the answer is not chunked): status and body, or None when nothing listens.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// deploy/monitoring's Grafana dashboard.
pub fn dashboard() -> Value {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("deploy/monitoring/dashboard.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every PromQL expression of the dashboard's panels, with Grafana's variables given values
/// (all sidecars, a 1m rate interval), as Grafana would send it.
pub fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| {
            t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$sidecar", ".*")
        })
        .collect()
}

/// The series names an exposition (`/metrics`) carries, suffixes included.
pub fn exported_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut exported = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        exported.insert(line[..end].to_owned());
    }
    exported
}
