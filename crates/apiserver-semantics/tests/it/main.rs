//! Integration tests of apiserver-semantics: one binary, one module per area.

mod crd_portmapping;
mod ssa_portmapping;
