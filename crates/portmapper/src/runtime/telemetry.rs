//! Structured logs with `tracing`: text for humans, JSON for log pipelines.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::runtime::error::Error;

/// How and how much to log (from `--log-level` and `--log-format`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Filter in `RUST_LOG` syntax (e.g. `info,portmapper=debug`).
    pub filter: String,
    /// Line format.
    pub format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. Logs go to stderr so stdout stays clean for `portmapper crd`.
pub fn init(config: &LogConfig) -> Result<(), Error> {
    let filter = EnvFilter::try_new(&config.filter)
        .map_err(|e| Error::Config(format!("invalid --log-level {:?}: {e}", config.filter)))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match config.format {
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    result.map_err(|e| Error::Config(format!("installing the log subscriber: {e}")))
}

/// Installs the global subscriber writing plain text (no colours) to `path`, truncated: the demo
/// keeps its terminal for the membership table and says where the logs are.
pub fn init_to_file(config: &LogConfig, path: &std::path::Path) -> Result<(), Error> {
    let filter = EnvFilter::try_new(&config.filter)
        .map_err(|e| Error::Config(format!("invalid --log-level {:?}: {e}", config.filter)))?;
    let file = std::fs::File::create(path)
        .map_err(|e| Error::Config(format!("creating the log file {}: {e}", path.display())))?;
    let writer = std::sync::Mutex::new(file);
    let registry = tracing_subscriber::registry().with(filter);
    let result = match config.format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(writer),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_writer(writer),
            )
            .try_init(),
    };
    result.map_err(|e| Error::Config(format!("installing the log subscriber: {e}")))
}
