//! Fixtures the workspace's tests share, so that a test states only what it is about.
//!
//! A dev-dependency of the crates whose tests use it; of the workspace it depends on `portmapper-api` alone, so
//! that `portmapper-core`'s own unit tests can use it without a second copy of the core crate.

mod components;
pub mod node;
mod plane_state;
pub mod realkube;
pub mod sandbox;
pub mod spec;

pub use sandbox::{Inner, Sandbox, in_sandbox, run_inner};
pub use spec::{port_mapping, spec};
