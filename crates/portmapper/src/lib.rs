//! The portmapper operator: decide (membership) → plan (pure, in `portmapper-core`) → apply.

pub mod apply;
pub mod cli;
pub mod client;
pub mod conditions;
pub mod controller;
#[cfg(feature = "demo")]
pub mod demo;
#[cfg(feature = "demo")]
pub mod demo_pods;
pub mod error;
pub mod http;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod migration;
pub mod migration_exec;
pub mod owner;
pub mod pods;
pub mod probing;
pub mod reconcile;
pub mod render;
pub mod report;
pub mod run;
pub mod telemetry;
pub mod watch_health;
pub mod watches;
