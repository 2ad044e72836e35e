//! The shared state of one emulator instance (store, faults, request log, settings) and the
//! response body type: below the HTTP transport, the admin API, watches and controllers, which
//! all take a `Core` without depending on each other.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use tokio::sync::{Notify, mpsc, watch};

use crate::clock::Clock;
use crate::faults::Faults;
use crate::reqlog::RequestLog;
use crate::store::{Retention, State};

/// Response body type (full or streaming).
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A complete body.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A streaming body.
pub fn boxed_stream<S>(s: StreamBody<S>) -> Body
where
    S: futures::Stream<Item = Result<Frame<Bytes>, std::io::Error>> + Send + Sync + 'static,
{
    BodyExt::boxed(s)
}

/// Tunables of one emulator instance.
#[derive(Debug, Clone)]
pub struct Config {
    /// BOOKMARK cadence on watches that allow them (upstream ~60 s; tests use ~1 s).
    pub bookmark_interval: Duration,
    /// Watch deadline when the client sends no `timeoutSeconds` (upstream 30–60 min).
    pub watch_default_timeout: Duration,
    /// Events buffered per watcher before it is closed as too slow.
    pub watch_buffer: usize,
    /// Delay before the CRD controller writes `Established` (tests of waiting).
    pub crd_establish_delay: Duration,
    /// Delay before garbage-collector / namespace-controller passes (asynchrony like upstream).
    pub controller_delay: Duration,
    /// Event log and continue-token retention.
    pub retention: Retention,
    /// Seed of the fault RNG.
    pub seed: u64,
    /// Max request-log entries kept.
    pub request_log_cap: usize,
    /// First global resourceVersion (1 in tests; the binary uses microseconds since the epoch).
    pub initial_resource_version: u64,
    /// Source of every server-set time (system time unless a test installs a manual clock).
    pub clock: Arc<Clock>,
    /// Graceful deletion of pods bound to a node, as a real API server does it: a delete without
    /// `gracePeriodSeconds: 0` sets `deletionTimestamp` and `deletionGracePeriodSeconds` (the
    /// pod's `terminationGracePeriodSeconds`, default 30) and leaves the pod Terminating for its
    /// kubelet to finish; here a test plays the kubelet with a delete of grace 0. Off by default:
    /// the emulator then plays the kubelet at once and removes the pod.
    pub graceful_pod_deletion: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            bookmark_interval: Duration::from_secs(1),
            watch_default_timeout: Duration::from_secs(1800),
            watch_buffer: 8192,
            crd_establish_delay: Duration::ZERO,
            controller_delay: Duration::from_millis(10),
            retention: Retention::default(),
            seed: 0,
            request_log_cap: 200_000,
            initial_resource_version: 1,
            clock: Arc::default(),
            graceful_pod_deletion: false,
        }
    }
}

/// Listener commands (restart simulation).
#[derive(Debug)]
pub enum ListenerCmd {
    /// Close the listener and every connection, refuse for this long, then listen again.
    Restart(Duration, tokio::sync::oneshot::Sender<()>),
}

/// Shared state of one emulator.
#[derive(Debug)]
pub struct Core {
    state: Mutex<State>,
    /// Fault rules.
    pub faults: Faults,
    /// Request log.
    pub log: RequestLog,
    /// Settings.
    pub config: Config,
    /// Wakes the controllers (CRD, namespace, GC) after writes.
    pub kick: Notify,
    /// Bound address.
    pub addr: SocketAddr,
    /// Bumped to close every open connection.
    pub close_conns: watch::Sender<u64>,
    /// Listener control.
    pub listener: mpsc::UnboundedSender<ListenerCmd>,
    /// `/readyz` answers 200 while true, 500 otherwise (readiness fault).
    pub ready: std::sync::atomic::AtomicBool,
}

impl Core {
    /// Lock the store (a poisoned lock is recovered: the state is always consistent between ops).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After the clock was set or advanced: expire what is now past its retention, and let the
    /// controllers look again (a CRD's establish delay may have passed).
    pub fn clock_moved(&self) {
        self.lock().trim();
        self.kick.notify_one();
    }

    /// Build the core.
    pub fn new(
        config: Config,
        addr: SocketAddr,
        listener: mpsc::UnboundedSender<ListenerCmd>,
    ) -> Self {
        let mut state = State::new(config.retention.clone(), config.clock.clone());
        // Start the revision counter where asked (the binary seeds it from the clock so a
        // restarted emulator never hands out revisions older than its predecessor's).
        state.rv = config.initial_resource_version.max(1);
        state.compacted_rv = state.rv;
        state.graceful_pod_deletion = config.graceful_pod_deletion;
        Self {
            state: Mutex::new(state),
            faults: Faults::new(config.seed),
            log: RequestLog::new(config.request_log_cap),
            kick: Notify::new(),
            addr,
            close_conns: watch::channel(0).0,
            listener,
            config,
            ready: std::sync::atomic::AtomicBool::new(true),
        }
    }
}
