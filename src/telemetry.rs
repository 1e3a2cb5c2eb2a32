//! Logging: `tracing` to stderr as text or JSON, at a level given by name or, as Tumblr's
//! `-v`/`LOG_LEVEL` gives it, by glog verbosity number.

use std::fmt;
use std::str::FromStr;

use tracing::Level;
use tracing_subscriber::EnvFilter;

#[cfg(feature = "otlp")]
mod traces;
#[cfg(feature = "otlp")]
pub(crate) use traces::{continue_trace, sampled_trace_id};

/// Without traces, no span has a parent from elsewhere.
#[cfg(not(feature = "otlp"))]
pub(crate) fn continue_trace(_span: &tracing::Span, _headers: &http::HeaderMap) {}

/// Without traces, nothing is an exemplar.
#[cfg(not(feature = "otlp"))]
pub(crate) fn sampled_trace_id(_span: &tracing::Span) -> Option<String> {
    None
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogLevel(pub Level);

impl Default for LogLevel {
    fn default() -> Self {
        LogLevel(Level::INFO)
    }
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        // glog verbosity: Tumblr's default of 2 is normal operation.
        if let Ok(verbosity) = text.parse::<u32>() {
            return Ok(LogLevel(match verbosity {
                0..=2 => Level::INFO,
                3..=4 => Level::DEBUG,
                _ => Level::TRACE,
            }));
        }
        match text.to_ascii_lowercase().as_str() {
            "error" => Ok(LogLevel(Level::ERROR)),
            "warn" | "warning" => Ok(LogLevel(Level::WARN)),
            "info" => Ok(LogLevel(Level::INFO)),
            "debug" => Ok(LogLevel(Level::DEBUG)),
            "trace" => Ok(LogLevel(Level::TRACE)),
            _ => Err(format!(
                "{text:?} is not a log level: use error, warn, info, debug, trace, or a glog verbosity number"
            )),
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.as_str().to_ascii_lowercase())
    }
}

/// The format chosen at [`init`], which [`notice`] follows too.
static FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// What a command says to its user on stderr (why it skipped something, a workload done):
/// the line as given in text mode; in JSON mode one object per line shaped like the log
/// events (`timestamp`, `level`, `message`, then `fields` as their own keys), so that stderr
/// carries JSON only. Never filtered by the log level: it is the command's output, not a log.
///
/// While a command reads several clusters, a notice about one of them (said within
/// [`NOTICE_CLUSTER`]'s scope) names it: `CLUSTER: ` before the line, a `cluster` key in JSON.
pub(crate) fn notice(level: Level, message: &str, fields: &[(&str, &str)]) {
    let format = FORMAT.get().copied().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let line = match NOTICE_CLUSTER.try_with(Clone::clone) {
        Ok(cluster) => {
            let mut named = vec![("cluster", cluster.as_str())];
            named.extend_from_slice(fields);
            render_notice(format, level, &format!("{cluster}: {message}"), &named, now)
        }
        Err(_) => render_notice(format, level, message, fields, now),
    };
    eprintln!("{line}");
}

tokio::task_local! {
    /// The cluster the notices of a future are about, while a command reads several.
    pub(crate) static NOTICE_CLUSTER: String;
}

/// An error a command reports (the one it ends on, a config that does not load): `error: `
/// before it in text mode, level ERROR in JSON.
pub(crate) fn error_notice(message: &str, fields: &[(&str, &str)]) {
    if FORMAT.get().copied().unwrap_or_default() == LogFormat::Text {
        eprintln!("error: {message}");
    } else {
        notice(Level::ERROR, message, fields);
    }
}

fn render_notice(
    format: LogFormat,
    level: Level,
    message: &str,
    fields: &[(&str, &str)],
    now: k8s_openapi::jiff::Timestamp,
) -> String {
    match format {
        LogFormat::Text => message.to_owned(),
        LogFormat::Json => {
            let mut object = serde_json::Map::new();
            object.insert("timestamp".into(), now.to_string().into());
            object.insert("level".into(), level.as_str().into());
            object.insert("message".into(), message.into());
            for (key, value) in fields {
                object.insert((*key).to_owned(), (*value).into());
            }
            object.insert("target".into(), "sidecar_injector::notice".into());
            serde_json::Value::Object(object).to_string()
        }
    }
}

/// Whether stderr carries text (a progress bar may be drawn on it).
pub(crate) fn text_on_stderr() -> bool {
    FORMAT.get().copied().unwrap_or_default() == LogFormat::Text
}

/// Where traces go, when `serve --otlp-endpoint` asks for them.
#[cfg(feature = "otlp")]
pub(crate) use traces::{TraceSettings, TracesError, TracesGuard};

/// Installs the global subscriber, and with `traces` the layer that sends spans to a
/// collector (its guard sends the last batch when dropped). Other crates log at warn and
/// above unless tracing.
#[cfg(feature = "otlp")]
pub(crate) fn init(
    level: LogLevel,
    format: LogFormat,
    traces: Option<&TraceSettings>,
) -> Result<Option<TracesGuard>, TracesError> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (traces, guard) = match traces {
        Some(settings) => {
            let (layer, guard) = traces::layer(settings)?;
            (Some(layer), Some(guard))
        }
        None => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(log_layer(level, format))
        .with(traces)
        .try_init();
    Ok(guard)
}

/// Installs the global subscriber. Other crates log at warn and above unless tracing.
#[cfg(not(feature = "otlp"))]
pub(crate) fn init(level: LogLevel, format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = tracing_subscriber::registry()
        .with(log_layer(level, format))
        .try_init();
}

/// The log lines on stderr, filtered by `level` on their own (spans the log leaves out may
/// still be traced).
fn log_layer<S>(level: LogLevel, format: LogFormat) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use tracing_subscriber::Layer;
    let _ = FORMAT.set(format);
    let others = if level.0 == Level::TRACE {
        "debug"
    } else {
        "warn"
    };
    // kube's watcher logs each failed list with a debug dump of the API's Status; the watch
    // that failed logs it again in the API server's words (cluster::watch), so kube's copy is
    // left to tracing.
    let watcher = if level.0 == Level::TRACE {
        "debug"
    } else {
        "error"
    };
    let filter = EnvFilter::new(format!(
        "{others},kube_runtime::watcher={watcher},sidecar_injector={level}"
    ));
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => layer.with_filter(filter).boxed(),
        LogFormat::Json => layer.json().flatten_event(true).with_filter(filter).boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_is_a_plain_line_in_text_and_one_json_object_in_json() {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let fields = [("workload", "Deployment/team/web"), ("done", "3")];
        assert_eq!(
            render_notice(
                LogFormat::Text,
                Level::INFO,
                "done Deployment/team/web (3/10)",
                &fields,
                now
            ),
            "done Deployment/team/web (3/10)"
        );
        let json: serde_json::Value = serde_json::from_str(&render_notice(
            LogFormat::Json,
            Level::WARN,
            "done Deployment/team/web (3/10)",
            &fields,
            now,
        ))
        .unwrap();
        assert_eq!(json["level"], "WARN");
        assert_eq!(json["message"], "done Deployment/team/web (3/10)");
        assert_eq!(json["workload"], "Deployment/team/web");
        assert_eq!(json["done"], "3");
        assert_eq!(json["timestamp"], "2027-01-15T08:00:00Z");
    }

    #[test]
    fn levels_by_name_or_glog_number() {
        assert_eq!("2".parse::<LogLevel>().unwrap().0, Level::INFO);
        assert_eq!("4".parse::<LogLevel>().unwrap().0, Level::DEBUG);
        assert_eq!("9".parse::<LogLevel>().unwrap().0, Level::TRACE);
        assert_eq!("WARN".parse::<LogLevel>().unwrap().0, Level::WARN);
        assert!("loud".parse::<LogLevel>().unwrap_err().contains("\"loud\""));
    }
}
