//! # kube-emulator
//!
//! An in-memory Kubernetes API server on `127.0.0.1`, faithful enough that kube-rs
//! (`Api`, `watcher`, `reflector`, `Controller`, finalizers, server-side apply, leases) and the
//! real `kubectl` run against it unchanged. Built to `docs/emulator-spec.md` (the `§N` in the
//! sources are its sections); what is and is not emulated is listed in `docs/emulator.md`.
//!
//! ## In-process use (tests)
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use kube_emulator::{Emulator, History, faults::{FaultAction, DropMode, Rule}};
//! let emu = Emulator::start().await?;                 // ephemeral port, kubeconfig in a temp dir
//! let client = emu.client()?;                          // a kube::Client for it
//! let kubeconfig = emu.kubeconfig_path();              // KUBECONFIG for kubectl / an operator binary
//! // ... run the code under test ...
//! let writes = emu.requests().writes_by_manager("my-operator");   // count API writes
//! let lists = emu.requests().filter(|r| r.verb == "list" && r.resource == "endpointslices");
//! emu.inject(Rule::new(FaultAction::Status { code: 500, reason: None, message: None, retry_after_seconds: None })
//!     .verbs(&["list"]).resource("discovery.k8s.io", "endpointslices").times(1));
//! emu.inject(Rule::new(FaultAction::WatchDrop { after_events: Some(3), after_ms: None, mode: DropMode::Abrupt })
//!     .watch(true).times(1));
//! emu.compact_now(true);                               // force a 410 + relist on every watcher
//! emu.restart(Duration::from_secs(1), History::Drop).await;   // refuse connections, drop history
//! let snap = emu.snapshot();
//! emu.restore(&snap);
//! # let _ = (client, kubeconfig, writes, lists); Ok(()) }
//! ```
//!
//! | Handle method | Purpose |
//! |---|---|
//! | [`Emulator::start`], [`Emulator::builder`] | start (bookmark interval, CRD establish delay, seed, kubeconfig path, manifests, clock) |
//! | [`Emulator::addr`], [`Emulator::url`], [`Emulator::kubeconfig_path`] | where it listens |
//! | [`Emulator::client`], [`Emulator::kube_config`] | a `kube::Client` / a `kube::Config` to tweak first |
//! | [`Emulator::requests`] | the [`reqlog::RequestLog`]: `writes_by_manager`, `writes_by_user_agent`, `write_counts`, `filter`, `clear` |
//! | [`Emulator::inject`], [`Emulator::faults`] | fault rules ([`faults::Rule`], [`faults::FaultAction`]) |
//! | [`Emulator::compact_now`], [`Emulator::restart`], [`Emulator::set_ready`] | 410s, restarts, readiness |
//! | [`Emulator::snapshot`], [`Emulator::restore`], [`Emulator::load_yaml`], [`Emulator::get`] | state |
//! | [`Emulator::resource_version`], [`Emulator::watch_count`] | introspection |
//! | [`Emulator::clock`], [`Emulator::set_clock`], [`Emulator::advance_clock`] | the [`Clock`] of server-set times and expiry ([`EmulatorBuilder::clock`] installs a manual one) |
//!
//! Dropping the handle stops the server and removes its temporary kubeconfig.
//!
//! ## Binary
//! `kube-emulator serve --listen 127.0.0.1:0 --kubeconfig <path> [--load <file-or-dir>...]`
//! serves until SIGINT/SIGTERM; the admin API lives under `/__emu/` (see [`admin`]).

pub mod admin;
pub mod builtins;
pub mod clock;
pub mod controllers;
mod defaults;
pub mod discovery;
pub mod emulator;
pub mod error;
pub mod faults;
pub mod instance;
pub mod kubeconfig;
pub mod meta;
pub mod openapi;
pub mod ops;
pub mod podspec;
pub mod protobuf;
pub mod registry;
pub mod reqlog;
pub mod request;
pub mod reviews;
pub mod selector;
pub mod semantics;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod strategy;
pub mod table;
pub mod times;
pub mod validation;
pub mod watch;

pub use admin::History;
pub use clock::Clock;
pub use emulator::{Emulator, EmulatorBuilder};
pub use error::{ApiError, EmuError};
pub use instance::Config;
pub use snapshot::Snapshot;
