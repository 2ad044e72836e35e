//! Operator integration tests: the real controller through a kube Client, exactly as against a
//! cluster.
//!
//! Most run on the **real control plane** (kube-apiserver and kube-controller-manager 1.37,
//! `realkube up`), started once for the binary and shared: each test in a namespace of its own,
//! its controller watching only that namespace, the tests playing kubelet (Nodes, pod status,
//! pod deletion with grace 0), and the API server's audit log as the request log
//! ([`harness`], [`requests`]). That covers the scenarios, lifecycle, ownership, migration,
//! the readiness gate, reporting, consumer caveats, the trigger time, hostile inputs, the
//! status command, the observer's own check, leader election, failover and kill -9 restarts
//! of the binary, and (in a network namespace, with a control plane of its own) the network
//! checks. The faults of the control plane's own components (`real_faults`: kill -9 of
//! kube-apiserver and etcd, priority-and-fairness 429s, etcd compaction, a restart under a
//! leader and its standby) run on a control plane of their own, one at a time.
//!
//! The rest run on the **in-process emulator** (`kube_emulator::Emulator`, one per test),
//! because they need what only it offers:
//! - fault rules: `faults`, `fault_matrix`, `backoff`, `watches`, the fault cases of `migration`, the
//!   hung Lease requests of `leader`.
//!
//! What a pass plans and writes is proved below them, by the reconcile tests
//! (`src/reconcile/tests.rs`: a recording fake API, caches filled by hand, no sleeps): the lagging
//! PortMapping cache and the same-second tie of two PortMappings moved there from here.
//!
//! `render` and `fuzz` exercise `portmapper render`, which needs no server; `agreement` runs the
//! operator on the real control plane over every example and compares it with render.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agreement;
mod backoff;
mod churn;
mod consumers;
mod crashes;
mod failover;
mod fault_matrix;
mod faults;
mod fuzz;
mod gate;
mod gate_release;
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
mod real_faults;
mod render;
mod reporting;
mod requests;
mod scenarios;
mod slice_shapes;
mod status;
mod trigger;
mod watches;
