//! Integration tests of the PortMapping API: CEL rules, Rust validation, the generated CRD.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cel;
mod crd;
mod fixtures;
mod validate;
