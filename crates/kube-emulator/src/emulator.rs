//! The in-process handle: start an emulator on 127.0.0.1, get a kubeconfig and a `kube::Client`,
//! count writes, inject faults, snapshot/restore, restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::info;

use crate::admin::History;
use crate::clock::Clock;
use crate::error::{ApiError, EmuError};
use crate::faults::{Faults, Rule};
use crate::instance::{Config, Core};
use crate::registry::GroupResource;
use crate::reqlog::RequestLog;
use crate::server;
use crate::snapshot::Snapshot;

/// Builder for [`Emulator`].
#[derive(Debug, Clone)]
pub struct EmulatorBuilder {
    config: Config,
    listen: SocketAddr,
    kubeconfig: Option<PathBuf>,
    load: Vec<PathBuf>,
}

impl Default for EmulatorBuilder {
    fn default() -> Self {
        Self {
            config: Config::default(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig: None,
            load: Vec::new(),
        }
    }
}

impl EmulatorBuilder {
    /// Listen address (default `127.0.0.1:0`, an ephemeral port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }
    /// Where to write the kubeconfig (default: a fresh temp directory, removed on drop).
    pub fn kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }
    /// Load manifests (file or directory) at start.
    pub fn load(mut self, path: impl Into<PathBuf>) -> Self {
        self.load.push(path.into());
        self
    }
    /// Replace all settings.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// BOOKMARK cadence.
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.config.bookmark_interval = d;
        self
    }
    /// Delay before CRDs become Established.
    pub fn crd_establish_delay(mut self, d: Duration) -> Self {
        self.config.crd_establish_delay = d;
        self
    }
    /// First global resourceVersion.
    pub fn initial_resource_version(mut self, rv: u64) -> Self {
        self.config.initial_resource_version = rv;
        self
    }
    /// Keep pods bound to a node Terminating after a graceful delete, as a cluster without
    /// kubelets does ([`Config::graceful_pod_deletion`]).
    pub fn graceful_pod_deletion(mut self, on: bool) -> Self {
        self.config.graceful_pod_deletion = on;
        self
    }
    /// Seed of the fault RNG.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }
    /// The clock for every server-set time and time-based expiry (default: system time);
    /// e.g. `Clock::manual(t0)`, moved later with [`Emulator::advance_clock`].
    pub fn clock(mut self, clock: Clock) -> Self {
        self.config.clock = Arc::new(clock);
        self
    }

    /// Bind, write the kubeconfig, load manifests and start serving.
    pub async fn start(self) -> Result<Emulator, EmuError> {
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(|source| EmuError::Bind {
                addr: self.listen.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| EmuError::Bind {
            addr: self.listen.to_string(),
            source,
        })?;
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let core = Arc::new(Core::new(self.config, addr, ctl_tx));
        {
            let mut st = core.lock();
            crate::controllers::bootstrap(&mut st);
            for p in &self.load {
                let n = crate::snapshot::load_path(&mut st, &core.config, p)?;
                info!(path = %p.display(), objects = n, "loaded manifests");
            }
        }
        let (temp_dir, kubeconfig) = match self.kubeconfig {
            Some(p) => (None, p),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "kube-emulator-{}-{}",
                    std::process::id(),
                    addr.port()
                ));
                let p = dir.join("kubeconfig");
                (Some(dir), p)
            }
        };
        crate::kubeconfig::write(&kubeconfig, addr)?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        tokio::spawn(server::accept_loop(
            core.clone(),
            listener,
            ctl_rx,
            shutdown_rx.clone(),
        ));
        tokio::spawn(crate::controllers::run(core.clone(), shutdown_rx));
        info!(%addr, kubeconfig = %kubeconfig.display(), "kube-emulator serving");
        Ok(Emulator {
            core,
            addr,
            kubeconfig,
            temp_dir,
            shutdown: shutdown_tx,
        })
    }
}

/// A running emulator. Dropping it stops the server.
#[derive(Debug)]
pub struct Emulator {
    core: Arc<Core>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    temp_dir: Option<PathBuf>,
    shutdown: watch::Sender<bool>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(d) = &self.temp_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Emulator {
    /// Start with defaults on an ephemeral port.
    pub async fn start() -> Result<Self, EmuError> {
        EmulatorBuilder::default().start().await
    }

    /// A builder for non-default settings.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }

    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Path of the written kubeconfig (use as `KUBECONFIG` for kubectl or an operator binary).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A `kube::Config` for this emulator (namespace `default`); tweak timeouts before building a client.
    pub fn kube_config(&self) -> Result<kube::Config, EmuError> {
        let uri = self
            .url()
            .parse()
            .map_err(|e| EmuError::Client(format!("{e}")))?;
        let mut c = kube::Config::new(uri);
        c.default_namespace = "default".into();
        Ok(c)
    }

    /// A ready `kube::Client`.
    pub fn client(&self) -> Result<kube::Client, EmuError> {
        kube::Client::try_from(self.kube_config()?).map_err(|e| EmuError::Client(e.to_string()))
    }

    /// The request log (count writes per field manager / user agent, inspect traffic).
    pub fn requests(&self) -> &RequestLog {
        &self.core.log
    }

    /// Fault rules (add/remove/list).
    pub fn faults(&self) -> &Faults {
        &self.core.faults
    }

    /// Add a fault rule; returns its id.
    pub fn inject(&self, rule: Rule) -> String {
        self.core.faults.add(rule)
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.core.lock().rv
    }

    /// Drop event history ("compact now"): every resumed watch gets 410 and relists;
    /// optionally close every open watch so clients resume immediately.
    pub fn compact_now(&self, close_watches: bool) {
        let mut st = self.core.lock();
        st.compact_now();
        if close_watches {
            st.close_all_watches();
        }
    }

    /// Simulate a restart: refuse connections for `down`, close every connection, keep or drop history.
    pub async fn restart(&self, down: Duration, history: History) {
        crate::admin::restart(&self.core, down, history).await;
    }

    /// Snapshot the store.
    pub fn snapshot(&self) -> Snapshot {
        crate::snapshot::take(&self.core.lock())
    }

    /// Restore a snapshot (revision counter stays monotonic; watches are closed and get 410 on resume).
    pub fn restore(&self, snap: &Snapshot) {
        crate::snapshot::restore(&mut self.core.lock(), snap);
        self.core.kick.notify_one();
    }

    /// Create objects from YAML/JSON manifests (CRDs first in the stream are established at once).
    pub fn load_yaml(&self, text: &str) -> Result<Vec<Value>, ApiError> {
        let objs = crate::snapshot::parse_manifests(text).map_err(ApiError::bad_request)?;
        let mut st = self.core.lock();
        let mut out = Vec::new();
        for o in objs {
            crate::controllers::pass(&mut st, &self.core.config);
            out.push(crate::snapshot::load_object(&mut st, o)?);
        }
        drop(st);
        self.core.kick.notify_one();
        Ok(out)
    }

    /// Peek at a stored object without going through HTTP (not logged).
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let st = self.core.lock();
        st.get(
            &GroupResource::new(group, resource),
            &crate::store::key(namespace, name),
        )
        .map(|o| (*o).clone())
    }

    /// Readiness fault: `/readyz` answers 500 while `false`.
    pub fn set_ready(&self, ready: bool) {
        self.core
            .ready
            .store(ready, std::sync::atomic::Ordering::SeqCst);
    }

    /// The emulator clock.
    pub fn clock(&self) -> &Clock {
        &self.core.config.clock
    }

    /// Set the clock to `at` (a system clock keeps running from there); history and `continue`
    /// tokens older than their retention expire at once.
    pub fn set_clock(&self, at: jiff::Timestamp) {
        self.core.config.clock.set(at);
        self.core.clock_moved();
    }

    /// Move the clock forward by `by`; history and `continue` tokens that thereby pass their
    /// retention expire at once.
    pub fn advance_clock(&self, by: Duration) {
        let by = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::MAX);
        self.core.config.clock.advance(by);
        self.core.clock_moved();
    }

    /// Number of open watches.
    pub fn watch_count(&self) -> usize {
        self.core.lock().watchers.len()
    }
}
