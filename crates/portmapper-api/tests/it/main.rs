//! Integration tests of the PortMapping API: admission on the emulator, CEL rules, Rust
//! validation, the generated CRD.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admission;
mod cel;
mod crd;
mod fixtures;
mod validate;
