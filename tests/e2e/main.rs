//! End-to-end tests: start the real `kube-emulator` and `portmapper` binaries as processes and
//! drive them only with kubectl, as a user would. With `PORTMAPPER_E2E_KUBECONFIG` set, the same
//! scenarios run against that cluster (kind, k3d) instead of the emulator, with real pods.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admission;
mod chart;
mod demo;
mod env;
mod examples;
mod quickstart;
mod rbac;
