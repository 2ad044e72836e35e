//! The commands of the `portmapper` binary: `run` (the operator), `render` (an offline
//! preview), `status` (a live PortMapping's pods × ports matrix) and `demo` (everything on one
//! machine, feature `demo`).

#[cfg(feature = "demo")]
pub mod demo;
pub mod render;
pub mod run;
pub mod status;
pub mod text_table;
