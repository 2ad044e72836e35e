//! Nothing to export: the end-to-end suite lives in `e2e/main.rs` and drives the binaries.
