//! Structured logs with `tracing`: text for humans, JSON for log pipelines.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::{LogArgs, LogFormat};
use crate::error::Error;

/// Installs the global subscriber. Logs go to stderr so stdout stays clean for `portmapper crd`.
pub fn init(args: &LogArgs) -> Result<(), Error> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| Error::Config(format!("invalid --log-level {:?}: {e}", args.log_level)))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match args.log_format {
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
pub fn init_to_file(args: &LogArgs, path: &std::path::Path) -> Result<(), Error> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| Error::Config(format!("invalid --log-level {:?}: {e}", args.log_level)))?;
    let file = std::fs::File::create(path)
        .map_err(|e| Error::Config(format!("creating the log file {}: {e}", path.display())))?;
    let writer = std::sync::Mutex::new(file);
    let registry = tracing_subscriber::registry().with(filter);
    let result = match args.log_format {
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
