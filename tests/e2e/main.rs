//! End-to-end tests: start the `portmapper` binary as a process and drive it only with kubectl, as
//! a user would, against the real control plane this test binary starts once (`realkube up`:
//! kube-apiserver, etcd and kube-controller-manager from the Kubernetes Go modules), each test in
//! a namespace of its own, playing kubelet (`node.rs` runs its pods on a real node instead). The
//! tests that need the emulator's request log use `kube-emulator serve`. With
//! `PORTMAPPER_E2E_KUBECONFIG` set, the scenarios run against that cluster (kind, k3d) instead,
//! with real pods.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admission;
mod chart;
mod cilium;
mod consumers;
mod contour;
mod dataplane;
mod demo;
mod dns;
mod env;
mod examples;
mod gitops;
mod istio;
mod node;
mod quickstart;
mod rbac;
mod tenants;
