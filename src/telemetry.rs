//! Logging: `tracing` to stderr as text or JSON, at a level given by name or, as Tumblr's
//! `-v`/`LOG_LEVEL` gives it, by glog verbosity number.

use std::fmt;
use std::str::FromStr;

use tracing::Level;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLevel(pub Level);

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

/// Installs the global subscriber. Other crates log at warn and above unless tracing.
pub fn init(level: LogLevel, format: LogFormat) {
    let others = if level.0 == Level::TRACE {
        "debug"
    } else {
        "warn"
    };
    let filter = EnvFilter::new(format!("{others},sidecar_injector={level}"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_by_name_or_glog_number() {
        assert_eq!("2".parse::<LogLevel>().unwrap().0, Level::INFO);
        assert_eq!("4".parse::<LogLevel>().unwrap().0, Level::DEBUG);
        assert_eq!("9".parse::<LogLevel>().unwrap().0, Level::TRACE);
        assert_eq!("WARN".parse::<LogLevel>().unwrap().0, Level::WARN);
        assert!("loud".parse::<LogLevel>().unwrap_err().contains("\"loud\""));
    }
}
