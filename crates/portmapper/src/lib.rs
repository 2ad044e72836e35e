//! The portmapper operator, in layers (each uses only those below it):
//! - [`cli`]: the command line (clap) and the binary's entry point;
//! - [`commands`]: `run`, `render`, `status` and `demo`;
//! - [`controller`]: the wiring: reflectors, pod watches, the kube-runtime Controller;
//! - [`reconcile`]: one pass per PortMapping: gather → plan (`portmapper-core`) → execute;
//! - [`index`]: what every watched object touches, and where reconciles are queued;
//! - [`runtime`]: API clients, the writer, leader election, HTTP, metrics, telemetry, errors.

pub mod cli;
pub mod commands;
pub mod controller;
pub mod index;
pub mod reconcile;
pub mod runtime;
