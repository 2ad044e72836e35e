//! The portmapper operator: decide (membership) → plan (pure, in `portmapper-core`) → apply.

pub mod api_warnings;
pub mod apply;
pub mod backoff;
pub mod batch_window;
pub mod cli;
pub mod client;
pub mod conditions;
pub mod context;
pub mod controller;
#[cfg(feature = "demo")]
pub mod demo;
#[cfg(feature = "demo")]
pub mod demo_pods;
pub mod entry;
pub mod error;
#[cfg(test)]
mod fake_api;
pub mod gates;
pub mod http;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod migration_exec;
pub mod own_writes;
pub mod pod_wire;
pub mod pods;
pub mod pool_pods;
pub mod probing;
pub mod quiet;
pub mod reconcile;
#[cfg(test)]
mod reconcile_tests;
pub mod render;
pub mod report;
pub mod run;
pub mod status_view;
pub mod sync_metrics;
pub mod telemetry;
pub mod text_table;
pub mod watch_health;
pub mod watches;
