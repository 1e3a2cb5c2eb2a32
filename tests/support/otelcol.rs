//! The OpenTelemetry Collector of testbed/otelcol (built by testbed/otelcol.sh from the Go
//! module proxy into a cache), on loopback: OTLP over gRPC and HTTP in, and every span it
//! receives written to its log by the debug exporter, which [`Collector::spans`] reads back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

/// The folder holding `otelcol` ($OTELCOL_BIN, else built and cached by testbed/otelcol.sh).
fn bin_dir() -> PathBuf {
    super::testbed_folder("otelcol.sh")
}

/// One span as the collector received it.
#[derive(Clone, Debug, Default)]
pub struct Span {
    /// Its resource's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub id: String,
    /// Empty for a trace's root.
    pub parent_id: String,
    pub attributes: BTreeMap<String, String>,
}

pub struct Collector {
    child: Child,
    /// OTLP/gRPC (what kube-apiserver exports to).
    pub grpc: u16,
    /// OTLP/HTTP (what `serve --otlp-endpoint` exports to).
    pub http: u16,
    dir: tempfile::TempDir,
}

impl Collector {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (grpc, http) = (super::free_port(), super::free_port());
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "receivers:\n  otlp:\n    protocols:\n      grpc: {{endpoint: '127.0.0.1:{grpc}'}}\n      http: {{endpoint: '127.0.0.1:{http}'}}\n\
                 exporters:\n  debug: {{verbosity: detailed}}\n\
                 service:\n  telemetry: {{metrics: {{level: none}}}}\n  pipelines:\n    traces: {{receivers: [otlp], exporters: [debug]}}\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("otelcol.log")).unwrap();
        let child = Command::new(bin_dir().join("otelcol"))
            .arg(format!(
                "--config=file:{}",
                dir.path().join("config.yaml").display()
            ))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("otelcol starts");
        let mut collector = Self {
            child,
            grpc,
            http,
            dir,
        };
        let start = std::time::Instant::now();
        while !collector.log().contains("Everything is ready") {
            let exited = collector.child.try_wait().ok().flatten();
            assert!(
                exited.is_none(),
                "the collector exited ({exited:?}):\n{}",
                collector.log()
            );
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the collector not ready within 60s:\n{}",
                collector.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        collector
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("otelcol.log")).unwrap_or_default()
    }

    /// Every span received so far, read from the debug exporter's log.
    pub fn spans(&self) -> Vec<Span> {
        parse_spans(&self.log())
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let kept = std::env::temp_dir().join(format!("otelcol-{}.log", std::process::id()));
            let _ = std::fs::write(&kept, &log);
            eprintln!("the collector's whole log: {}", kept.display());
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            eprintln!(
                "--- collector log (last 200 lines) ---\n{}\n---",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// `Str(value)`, `Int(3)`, `Bool(true)`: the value.
fn value(typed: &str) -> String {
    match (typed.find('('), typed.rfind(')')) {
        (Some(open), Some(close)) if open < close => typed[open + 1..close].to_owned(),
        _ => typed.to_owned(),
    }
}

/// The debug exporter's detailed text: per `ResourceSpans`, the resource's attributes, then
/// each `Span #N` with its ids, name and attributes.
fn parse_spans(log: &str) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut service = String::new();
    let mut in_span = false;
    // A span's events and links list `->` lines of their own.
    let mut in_events = false;
    for line in log.lines() {
        let line = line.trim();
        // The first line of a batch follows the log line's timestamp and level.
        if line.contains("ResourceSpans #") {
            in_span = false;
            in_events = false;
            service.clear();
        } else if line.starts_with("Span #") {
            in_span = true;
            in_events = false;
            spans.push(Span {
                service: service.clone(),
                ..Span::default()
            });
        } else if line == "Events:" || line == "Links:" {
            in_events = true;
        } else if in_events {
            continue;
        } else if let Some(attribute) = line.strip_prefix("-> ") {
            let Some((key, typed)) = attribute.split_once(": ") else {
                continue;
            };
            match spans.last_mut() {
                Some(span) if in_span => {
                    span.attributes.insert(key.to_owned(), value(typed));
                }
                _ if key == "service.name" => service = value(typed),
                _ => {}
            }
        } else if let (true, Some(span), Some((field, text))) =
            (in_span, spans.last_mut(), line.split_once(':'))
        {
            let text = text.trim().to_owned();
            match field.trim() {
                "Trace ID" => span.trace_id = text,
                "Parent ID" => span.parent_id = text,
                "ID" => span.id = text,
                "Name" => span.name = text,
                _ => {}
            }
        }
    }
    spans
}
