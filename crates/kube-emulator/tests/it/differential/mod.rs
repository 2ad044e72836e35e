//! Differential test: the same request sequences (raw HTTP, kubectl 1.37, kube-rs) sent to the
//! real kube-apiserver 1.37 (`test_support::realkube::shared()`, one per test binary) and to an
//! in-process emulator, answers compared less the values each server sets for itself
//! ([`compare::normalize`]). Each test runs in a namespace of its own on both servers; a failing
//! test prints every differing path with both answers. The differences a step allows carry their
//! reason, and docs/emulator.md ("Checked against kube-apiserver 1.37") lists them.

mod compare;
mod harness;

mod coordination;
mod endpoints;
mod kube_rs;
mod kubectl;
mod pods;
mod portmappings;
mod services;
mod watch;
