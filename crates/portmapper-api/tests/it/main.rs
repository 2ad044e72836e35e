//! Integration tests of the PortMapping API: CEL rules, Rust validation, the generated CRD.

mod cel;
mod crd;
mod fixtures;
mod validate;
