//! Operator integration tests: the real controller against the in-process API server emulator,
//! through a kube Client exactly as against a cluster.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod consumers;
mod crashes;
mod failover;
mod fault_matrix;
mod faults;
mod fuzz;
mod gate;
mod harness;
mod hostile;
mod leader;
mod lifecycle;
mod log_capture;
mod migration;
mod observer;
mod ownership;
mod probing;
mod procs;
mod render;
mod reporting;
mod scenarios;
mod slice_shapes;
mod status;
mod trigger;
mod watches;
