//! Integration tests of kube-emulator: the ten rules of docs/emulator-spec.md §0, kube-rs
//! conformance, kubectl conformance, faults, garbage collection and the P0 acceptance test.

// Helpers outside #[test] fns panic on setup failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acceptance;
mod clock;
mod common;
mod crd;
mod differential;
mod faults;
mod fidelity;
mod fuzz;
mod history;
mod kube_rs;
mod kubectl;
mod lifecycle;
mod rules;
mod spec_refs;
mod typed_generators;
mod unknown_fields;
