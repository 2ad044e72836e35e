//! What the operator runs on: its API clients ([`client`]) and their warnings, the one writer
//! of a PortMapping's objects ([`apply`]), leader election, the health and metrics endpoint,
//! metrics, logs and errors.

pub mod api_warnings;
pub mod apply;
pub mod client;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod sync_metrics;
pub mod telemetry;
pub mod watch_health;
pub mod watch_recovery;
