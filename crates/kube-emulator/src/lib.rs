//! # kube-emulator
//!
//! An in-memory Kubernetes API server on `127.0.0.1`, faithful enough that kube-rs
//! (`Api`, `watcher`, `reflector`, `Controller`, finalizers, server-side apply, leases) and the
//! real `kubectl` run against it unchanged. Built to `shared/reference/apiserver-emulator-spec.md`;
//! what is and is not emulated is listed in `docs/emulator.md`.
//!
//! ## In-process use (tests)
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kube_emulator::{Emulator, faults::{Action, Rule}};
//! let emu = Emulator::start().await?;                 // ephemeral port, kubeconfig in a temp dir
//! let client = emu.client()?;                          // a kube::Client for it
//! let kubeconfig = emu.kubeconfig_path();              // KUBECONFIG for kubectl / an operator binary
//! // ... run the code under test ...
//! let writes = emu.requests().writes_by_manager("my-operator");   // count API writes
//! emu.inject(Rule::new(Action::Status { code: 500, reason: None, message: None, retry_after_seconds: None })
//!     .verbs(&["list"]).resource("discovery.k8s.io", "endpointslices").times(1));
//! emu.compact_now(true);                               // force a 410 + relist on every watcher
//! # let _ = (client, kubeconfig, writes); Ok(()) }
//! ```
//!
//! ## Binary
//! `kube-emulator serve --listen 127.0.0.1:0 --kubeconfig <path> [--load <file-or-dir>...]`
//! serves until SIGINT/SIGTERM; the admin API lives under `/__emu/` (see [`admin`]).

pub mod admin;
pub mod builtins;
pub mod controllers;
pub mod discovery;
pub mod emulator;
pub mod error;
pub mod faults;
pub mod kubeconfig;
pub mod meta;
pub mod openapi;
pub mod ops;
pub mod registry;
pub mod reqlog;
pub mod request;
pub mod selector;
pub mod semantics;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod table;
pub mod validation;
pub mod watch;

pub use admin::History;
pub use emulator::{Emulator, EmulatorBuilder};
pub use error::{ApiError, EmuError};
pub use server::Config;
pub use snapshot::Snapshot;
