//! Watch health: every watch of the operator
//! - backs off exponentially after a failure and resets only once it has been free of failures
//!   for [`WatchPolicy::healthy_after`] (kube's `default_backoff()` resets on the first event
//!   after an error, so a server that resets every watch after one event was hammered);
//! - is restarted (fresh LIST, then WATCH) when it is open but has received nothing, not even a
//!   BOOKMARK, for [`WatchPolicy::stall_after`]; meanwhile `/readyz` answers 503 and
//!   `portmapper_watches_stalled` counts it. Liveness is measured on the response bytes (the
//!   client is wrapped by [`track`]), because kube-runtime's watcher consumes bookmarks without
//!   surfacing them;
//! - relists when it makes no progress: a watch re-opened from the resourceVersion of a watch
//!   that ended early ([`WatchPolicy::healthy_after`]) delivered nothing, not even a bookmark
//!   (kube's watcher resumes from the last version it received). After
//!   [`NO_PROGRESS_RELIST`] such re-watches in a row the watch starts over with a LIST, so the
//!   store follows the objects even while a server keeps resetting every watch before its
//!   first event arrives (issue 11's reset storm), as client-go's reflector relists after a
//!   "very short watch" that received no items;
//! - re-watches at once, whatever is left of its backoff, when another watch of the process
//!   is answered again after watch requests failed (an API-server restart; see
//!   [`Recovery`]).

use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::{Request, Response};
use kube::api::Api;
use kube::client::Body;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tower::{BoxError, Service};
use tracing::{debug, info, warn};

use crate::runtime::metrics::{Metrics, WatchLabels, WatchRestartLabels};
use crate::runtime::watch_recovery::Recovery;

/// Re-watches in a row from one resourceVersion, each after an early end, before a watch
/// relists. Two, not one: a single reset (an API-server restart, a load balancer closing idle
/// connections) resumes without a LIST; a server that resets every watch costs a LIST per three
/// paced watch requests (about one every 6–9 s with the default backoff).
pub const NO_PROGRESS_RELIST: u32 = 2;

/// How watches retry, and when a silent watch counts as stalled.
#[derive(Clone, Debug)]
pub struct WatchPolicy {
    /// A watch open this long without an event or bookmark is restarted. The API server sends
    /// bookmarks about once a minute to watches that ask for them (ours do), so the default is
    /// two bookmark intervals.
    pub stall_after: Duration,
    /// First backoff after a failure.
    pub backoff_initial: Duration,
    /// Backoff cap.
    pub backoff_max: Duration,
    /// Failure-free time after which the backoff starts over from `backoff_initial`.
    pub healthy_after: Duration,
}

impl Default for WatchPolicy {
    fn default() -> Self {
        Self {
            stall_after: Duration::from_secs(120),
            backoff_initial: Duration::from_secs(1),
            // Low enough that the first re-watch after a reset storm comes within the issue's
            // 5 s convergence target (3 s + 25 % jitter); 20 s of resets still cost each watch
            // about 8 requests.
            backoff_max: Duration::from_secs(3),
            healthy_after: Duration::from_secs(30),
        }
    }
}

/// Exponential backoff with up to 25 % jitter that ignores resets until no failure happened for
/// `healthy_after`. Implements kube-runtime's `Backoff`, for `WatchStreamExt::backoff`.
pub struct WatchBackoff {
    initial: Duration,
    max: Duration,
    healthy_after: Duration,
    current: Option<Duration>,
    last_failure: Option<Instant>,
    random: RandomState,
    draws: u64,
}

impl WatchBackoff {
    /// A backoff following `policy`.
    pub fn new(policy: &WatchPolicy) -> Self {
        Self {
            initial: policy.backoff_initial,
            max: policy.backoff_max.max(policy.backoff_initial),
            healthy_after: policy.healthy_after,
            current: None,
            last_failure: None,
            random: RandomState::new(),
            draws: 0,
        }
    }

    /// The pause before the next attempt after a failure (never shorter than the last one).
    pub fn failed(&mut self) -> Duration {
        let base = match self.current {
            None => self.initial,
            Some(c) => (c * 2).min(self.max),
        };
        self.current = Some(base);
        self.last_failure = Some(Instant::now());
        self.draws = self.draws.wrapping_add(1);
        let quarter = u64::try_from(base.as_millis() / 4).unwrap_or(u64::MAX);
        let jitter = self
            .random
            .hash_one(self.draws)
            .checked_rem(quarter.max(1))
            .unwrap_or(0);
        base + Duration::from_millis(jitter)
    }

    /// Starts over from the first step, whatever `healthy_after` says.
    pub fn restart(&mut self) {
        self.current = None;
    }

    /// A success: starts over only if the last failure is `healthy_after` old.
    pub fn succeeded(&mut self) {
        if self
            .last_failure
            .is_none_or(|at| at.elapsed() >= self.healthy_after)
        {
            self.current = None;
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.failed())
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.succeeded();
    }
}

/// The health of every watch of one operator instance (read by `/readyz`).
#[derive(Clone, Default)]
pub struct WatchHealth {
    inner: Arc<HealthInner>,
}

struct HealthInner {
    policy: WatchPolicy,
    watches: Mutex<Vec<Weak<Liveness>>>,
    /// The server answering the watches again: it cuts their pauses short.
    recovery: Arc<Recovery>,
}

impl Default for HealthInner {
    fn default() -> Self {
        Self::new(WatchPolicy::default())
    }
}

impl HealthInner {
    fn new(policy: WatchPolicy) -> Self {
        // At most one recovery per first backoff step: a server that answers and fails in
        // turn wakes a watch no more often than its shortest pause would.
        let recovery = Arc::new(Recovery::new(policy.backoff_initial));
        Self {
            policy,
            watches: Mutex::new(Vec::new()),
            recovery,
        }
    }

    /// The live watches whose requests have this key.
    fn lookup(&self, key: &str) -> Vec<Arc<Liveness>> {
        self.watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|l| l.key == key)
            .collect()
    }
}

impl WatchHealth {
    /// Health judged by `policy` (which also sets every watch's backoff).
    pub fn new(policy: WatchPolicy) -> Self {
        Self {
            inner: Arc::new(HealthInner::new(policy)),
        }
    }

    /// The policy watches follow.
    pub fn policy(&self) -> &WatchPolicy {
        &self.inner.policy
    }

    /// Names of the watches that are stalled now (empty: all healthy).
    pub fn stalled(&self) -> Vec<&'static str> {
        let mut watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches.retain(|w| w.strong_count() > 0);
        let mut names: Vec<&'static str> = watches
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|l| {
                l.stalled.load(Ordering::Acquire) || l.silent(self.inner.policy.stall_after)
            })
            .map(|l| l.what)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn register(&self, what: &'static str, key: String) -> Arc<Liveness> {
        let live = Arc::new(Liveness {
            pace: Mutex::new(Pace {
                backoff: WatchBackoff::new(&self.inner.policy),
                started: None,
                resumed_from: None,
                repeats: 0,
                failed_at: None,
            }),
            recovery: self.inner.recovery.clone(),
            relist: tokio::sync::Notify::new(),
            what,
            key,
            last: Mutex::new(Instant::now()),
            open: AtomicUsize::new(0),
            stalled: AtomicBool::new(false),
        });
        let mut watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches.retain(|w| w.strong_count() > 0);
        watches.push(Arc::downgrade(&live));
        live
    }
}

/// When one watch last heard from the server.
struct Liveness {
    what: &'static str,
    /// Path and selectors of its requests ([`request_key`]).
    key: String,
    last: Mutex<Instant>,
    /// Watch responses whose body is still open.
    open: AtomicUsize,
    /// Restarted for silence and not heard from since.
    stalled: AtomicBool,
    /// Paces re-watches: kube's watcher re-watches at once after a watch ends early (a reset
    /// after one event surfaces as an ended stream, never reaching a stream backoff), so the
    /// pacing has to happen where the request leaves.
    pace: Mutex<Pace>,
    /// Told when re-watches make no progress ([`NO_PROGRESS_RELIST`]); the watch's stream
    /// ([`resilient`]) starts over with a LIST.
    relist: tokio::sync::Notify,
    /// The process's recoveries (shared by every watch).
    recovery: Arc<Recovery>,
}

/// What the re-watch pacing remembers of the watch requests of one watch.
struct Pace {
    backoff: WatchBackoff,
    /// When the last watch request left (after its pause).
    started: Option<Instant>,
    /// The resourceVersion it resumed from.
    resumed_from: Option<String>,
    /// Consecutive early re-watches from that same resourceVersion.
    repeats: u32,
    /// The recovery generation when its last request failed (None: it was answered).
    failed_at: Option<u64>,
}

impl Liveness {
    /// The pause before a new watch resuming from `resource_version`: backs off while watches
    /// end sooner than `healthy_after` after they started. Asks for a relist when this is the
    /// [`NO_PROGRESS_RELIST`]th early re-watch in a row from the same resourceVersion. The
    /// pause is cut short by a recovery after the returned generation (the one of this watch's
    /// last failure, if its last request failed).
    fn next_watch(
        &self,
        healthy_after: Duration,
        resource_version: Option<&str>,
    ) -> (Duration, u64) {
        let mut pace = self.pace.lock().unwrap_or_else(|p| p.into_inner());
        let early = pace
            .started
            .is_some_and(|start| start.elapsed() < healthy_after);
        let pause = if early {
            pace.backoff.failed()
        } else {
            pace.backoff.succeeded();
            Duration::ZERO
        };
        let stuck = early
            && resource_version.is_some_and(|rv| !rv.is_empty())
            && pace.resumed_from.as_deref() == resource_version;
        pace.repeats = if stuck { pace.repeats + 1 } else { 0 };
        if pace.repeats >= NO_PROGRESS_RELIST {
            pace.repeats = 0;
            // A stored permit if the stream is busy: it relists at its next poll.
            self.relist.notify_one();
        }
        pace.resumed_from = resource_version.map(str::to_owned);
        pace.started = Some(Instant::now() + pause);
        let since = pace.failed_at.unwrap_or_else(|| self.recovery.generation());
        (pause, since)
    }

    /// The answer to one of its requests: a 2xx is an answer (maybe the recovery), no
    /// response or a 5xx a failure.
    fn answered(&self, answer: Option<hyper::StatusCode>) {
        let mut pace = self.pace.lock().unwrap_or_else(|p| p.into_inner());
        match answer {
            Some(code) if code.is_success() => {
                pace.failed_at = None;
                if self.recovery.answered() {
                    info!(
                        watch = self.what,
                        "the API server answers watches again; waking the watches backing off"
                    );
                }
            }
            Some(code) if !code.is_server_error() => {}
            _ => {
                pace.failed_at.get_or_insert(self.recovery.generation());
                self.recovery.failed();
            }
        }
    }

    /// The server answered a watch: its resourceVersion is gone (410). It is up and serving,
    /// so the re-watch after the relist is paced from the first step, not at the step an
    /// outage before grew (a server answering every watch 410 is still paced: 1 s a watch).
    fn expired(&self) {
        let mut pace = self.pace.lock().unwrap_or_else(|p| p.into_inner());
        pace.backoff.restart();
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Open, yet silent for longer than `after`. A watch waiting out its backoff is not silent.
    fn silent(&self, after: Duration) -> bool {
        self.open.load(Ordering::Acquire) > 0
            && self
                .last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed()
                > after
    }
}

/// A watcher that backs off with [`WatchBackoff`] and restarts when silent.
pub fn resilient<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    health: &WatchHealth,
    metrics: &Arc<Metrics>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static + use<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let health = health.clone();
    let policy = health.policy().clone();
    let key = format!(
        "{}?{}|{}",
        api.resource_url(),
        config.label_selector.as_deref().unwrap_or_default(),
        config.field_selector.as_deref().unwrap_or_default()
    );
    let live = health.register(what, key);
    let state = Resilient {
        api,
        config,
        what,
        backoff: WatchBackoff::new(&policy),
        policy,
        live,
        metrics: metrics.clone(),
        inner: None,
        pause: None,
    };
    futures::stream::unfold(state, |mut st| async move {
        let item = st.next().await;
        Some((item, st))
    })
}

struct Resilient<K: Resource + Clone + DeserializeOwned + Debug + Send + 'static> {
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    policy: WatchPolicy,
    backoff: WatchBackoff,
    live: Arc<Liveness>,
    metrics: Arc<Metrics>,
    inner: Option<BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>>,
    /// The pause before the next attempt, and the recovery generation it began at.
    pause: Option<(Duration, u64)>,
}

enum Step<T> {
    Item(T),
    Ended,
    Check,
    Relist,
}

impl<K> Resilient<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    async fn next(&mut self) -> Result<watcher::Event<K>, watcher::Error> {
        // Check silence a few times per threshold, so a stall is caught within ~1.25× of it.
        let check_every = (self.policy.stall_after / 4).max(Duration::from_millis(50));
        loop {
            if let Some((pause, since)) = self.pause.take()
                && self.live.recovery.pause(pause, since).await
            {
                debug!(
                    watch = self.what,
                    "the API server answers again; re-watching now"
                );
            }
            let inner = self.inner.get_or_insert_with(|| {
                self.live.touch();
                watcher(self.api.clone(), self.config.clone()).boxed()
            });
            let step = tokio::select! {
                item = inner.next() => match item {
                    Some(item) => Step::Item(item),
                    None => Step::Ended,
                },
                _ = tokio::time::sleep(check_every) => Step::Check,
                _ = self.live.relist.notified() => Step::Relist,
            };
            match step {
                Step::Item(Ok(event)) => {
                    self.backoff.succeeded();
                    self.recovered();
                    return Ok(event);
                }
                // The server answered that our resourceVersion is compacted away: the watcher
                // relists now (its next watch request is paced like any early re-watch, from the
                // pacing's first step). A pause here, or the pacing the outage before had grown
                // (up to 3.75 s), kept the store behind, and reconciles waiting to see their own
                // writes with it.
                Step::Item(Err(err)) if expired(&err) => {
                    self.live.expired();
                    self.restarted("expired");
                    debug!(
                        watch = self.what,
                        "resourceVersion expired (410); relisting"
                    );
                    return Err(err);
                }
                Step::Item(Err(err)) => {
                    let pause = self.backoff.failed();
                    self.restarted("error");
                    debug!(watch = self.what, ?pause, "watch failed; backing off");
                    self.pause = Some((pause, self.live.recovery.generation()));
                    return Err(err);
                }
                // kube's watcher never ends; if it does, start over.
                Step::Ended => self.inner = None,
                Step::Relist => self.relist(),
                Step::Check => self.check_silence(),
            }
        }
    }

    /// Re-watches make no progress: start over with a list.
    fn relist(&mut self) {
        info!(
            watch = self.what,
            relist_after = NO_PROGRESS_RELIST,
            "re-watches make no progress (each ended early, from one \
             resourceVersion); relisting"
        );
        self.restarted("no_progress");
        // The new watcher lists first; its watch is paced like any re-watch.
        self.inner = None;
    }

    /// Notes a stalled watch heard from again, and restarts one silent for too long.
    fn check_silence(&mut self) {
        if self.live.stalled.load(Ordering::Acquire)
            && !self.live.silent(self.policy.stall_after)
            && self.live.open.load(Ordering::Acquire) > 0
        {
            // Heard from the server again (a bookmark counts).
            self.recovered();
        }
        if !self.live.silent(self.policy.stall_after) {
            return;
        }
        warn!(
            watch = self.what,
            stall_after = ?self.policy.stall_after,
            "watch open but silent (no event, no bookmark); restarting it"
        );
        if !self.live.stalled.swap(true, Ordering::AcqRel) {
            self.metrics
                .watches_stalled
                .get_or_create(&WatchLabels { watch: self.what })
                .inc();
        }
        self.restarted("stalled");
        // Dropping the stream closes the silent connection; the new watcher relists, so the
        // store catches up even while watches keep stalling.
        self.inner = None;
        let since = self.live.recovery.generation();
        self.pause = Some((self.backoff.failed(), since));
    }

    fn restarted(&self, reason: &'static str) {
        self.metrics
            .watch_restarts
            .get_or_create(&WatchRestartLabels {
                watch: self.what,
                reason,
            })
            .inc();
    }

    fn recovered(&self) {
        if self.live.stalled.swap(false, Ordering::AcqRel) {
            info!(watch = self.what, "watch is delivering again");
            self.metrics
                .watches_stalled
                .get_or_create(&WatchLabels { watch: self.what })
                .dec();
        }
    }
}

/// Whether the server answered a watch request that its resourceVersion is too old (410
/// Gone). Only watch requests, which the client paces ([`Liveness::next_watch`]): a LIST
/// answered 410 backs off, or a server answering every LIST so would be listed without pause.
fn expired(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// `client` recording, for every watch registered with `health`, when its requests last got
/// bytes back. Watches are matched by path and selectors, so one wrapped client serves them all.
pub fn track(client: Client, health: &WatchHealth) -> Client {
    let default_ns = client.default_namespace().to_owned();
    Client::new(
        Tracked {
            client,
            health: health.inner.clone(),
        },
        default_ns,
    )
}

#[derive(Clone)]
struct Tracked {
    client: Client,
    health: Arc<HealthInner>,
}

/// Path, label selector and field selector of a request (decoded), as registered watches name
/// theirs.
fn request_key(uri: &hyper::Uri) -> (String, bool) {
    let (mut labels, mut fields, mut watch) = (String::new(), String::new(), false);
    for pair in uri.query().unwrap_or_default().split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "labelSelector" => labels = decode(v),
            "fieldSelector" => fields = decode(v),
            "watch" => watch = v == "true" || v == "1",
            _ => {}
        }
    }
    (format!("{}?{labels}|{fields}", uri.path()), watch)
}

/// The `resourceVersion` a request names (a watch resumes from it).
fn resource_version(uri: &hyper::Uri) -> Option<String> {
    uri.query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("resourceVersion="))
        .map(decode)
}

/// Decodes a form-urlencoded query value.
fn decode(v: &str) -> String {
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Counts open watch responses until their body is dropped.
struct OpenWatch(Vec<Arc<Liveness>>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        for live in &self.0 {
            live.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

type TrackedBody = UnsyncBoxBody<Bytes, BoxError>;

impl Service<Request<Body>> for Tracked {
    type Response = Response<TrackedBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let (key, watch) = request_key(req.uri());
        let resumed_from = resource_version(req.uri());
        let lives = self.health.lookup(&key);
        let client = self.client.clone();
        let healthy_after = self.health.policy.healthy_after;
        Box::pin(async move {
            if watch && let Some(live) = lives.first() {
                let (pause, since) = live.next_watch(healthy_after, resumed_from.as_deref());
                if !pause.is_zero() {
                    debug!(
                        watch = live.what,
                        ?pause,
                        "watch ended early; pacing the re-watch"
                    );
                    if live.recovery.pause(pause, since).await {
                        debug!(
                            watch = live.what,
                            "the API server answers again; re-watching now"
                        );
                    }
                }
            }
            lives.iter().for_each(|l| l.touch());
            let response = client.send(req).await.map_err(BoxError::from);
            let answer = response.as_ref().ok().map(Response::status);
            if let Some(live) = lives.first() {
                live.answered(answer);
            }
            let response = response?;
            lives.iter().for_each(|l| l.touch());
            if !watch || lives.is_empty() {
                return Ok(response.map(|b| b.map_err(BoxError::from).boxed_unsync()));
            }
            for live in &lives {
                live.open.fetch_add(1, Ordering::AcqRel);
            }
            let open = OpenWatch(lives);
            Ok(response.map(move |body| {
                body.map_frame(move |frame| {
                    open.0.iter().for_each(|l| l.touch());
                    frame
                })
                .map_err(BoxError::from)
                .boxed_unsync()
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_keys_match_what_watches_register() {
        let uri: hyper::Uri =
            "/api/v1/namespaces/ns/pods?labelSelector=example.com%2Fgroup%20in+(a%2Cb)&watch=true&resourceVersion=5"
                .parse()
                .unwrap();
        assert_eq!(
            request_key(&uri),
            (
                "/api/v1/namespaces/ns/pods?example.com/group in (a,b)|".to_string(),
                true
            )
        );
    }

    fn policy() -> WatchPolicy {
        WatchPolicy {
            stall_after: Duration::from_secs(2),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_millis(800),
            healthy_after: Duration::from_millis(200),
        }
    }

    #[tokio::test]
    async fn early_rewatches_from_one_resource_version_ask_for_a_relist() {
        use futures::FutureExt;
        let health = WatchHealth::new(WatchPolicy {
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(2),
            healthy_after: Duration::from_millis(100),
            ..policy()
        });
        let live = health.register("pods", "/api/v1/pods?|".into());
        let healthy_after = health.policy().healthy_after;
        let relisted = || live.relist.notified().now_or_never().is_some();
        // The first watch, then early re-watches from the same version: the second of those
        // asks for a relist, and the count starts over.
        let watches = |rv: Option<&str>, n: usize| {
            (0..n)
                .map(|_| {
                    live.next_watch(healthy_after, rv);
                    relisted()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            watches(Some("10"), 6),
            [false, false, true, false, true, false]
        );
        // Progress (a newer version) starts the count over.
        assert_eq!(watches(Some("11"), 3), [false, false, true]);
        // A watch without a resourceVersion (a fresh one) never counts.
        assert_eq!(watches(None, 4), [false; 4]);
        // Re-watches after a watch that lasted (not early) do not count either.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert_eq!(watches(Some("12"), 1), [false]);
        }
    }

    /// After an API-server restart every watch waits out its own backoff: the first watch
    /// answered again wakes the others; a server error or no answer wakes nothing.
    #[tokio::test]
    async fn a_watch_answered_again_wakes_the_watches_pacing_their_rewatch() {
        use hyper::StatusCode;
        let health = WatchHealth::new(WatchPolicy {
            backoff_initial: Duration::from_secs(600),
            backoff_max: Duration::from_secs(600),
            healthy_after: Duration::from_secs(600),
            ..policy()
        });
        let pods = health.register("pods", "/api/v1/pods?|".into());
        let slices = health.register(
            "slices",
            "/apis/discovery.k8s.io/v1/endpointslices?|".into(),
        );
        let healthy_after = health.policy().healthy_after;
        // The pods watch ended early, and its re-watch found the server down.
        assert_eq!(pods.next_watch(healthy_after, Some("1")).0, Duration::ZERO);
        pods.answered(None);
        slices.answered(Some(StatusCode::SERVICE_UNAVAILABLE));
        let (pause, since) = pods.next_watch(healthy_after, Some("1"));
        assert!(pause >= Duration::from_secs(600), "{pause:?}");
        let waiting = {
            let recovery = pods.recovery.clone();
            tokio::spawn(async move { recovery.pause(pause, since).await })
        };
        // Still down: a 5xx or no answer is no recovery.
        slices.answered(Some(StatusCode::INTERNAL_SERVER_ERROR));
        slices.answered(None);
        assert_eq!(health.inner.recovery.generation(), since);
        // A 4xx is an answer of a server that is up, but no proof the watches are served.
        slices.answered(Some(StatusCode::GONE));
        assert_eq!(health.inner.recovery.generation(), since);
        slices.answered(Some(StatusCode::OK));
        let woken = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the pause was cut short")
            .unwrap();
        assert!(woken);
        assert_eq!(health.inner.recovery.generation(), since + 1);
        // The next re-watch of the pods watch, from its failure before the recovery, is cut
        // short at once too.
        let (pause, since) = pods.next_watch(healthy_after, Some("1"));
        assert!(pods.recovery.pause(pause, since).await);
    }

    /// After an outage grew the re-watch pacing, a 410 (the server is up, the version gone)
    /// paces the re-watch after the relist from the first step again.
    #[test]
    fn an_expired_watch_paces_its_rewatch_from_the_first_step() {
        let health = WatchHealth::new(policy());
        let live = health.register("pods", "/api/v1/pods?|".into());
        let healthy_after = health.policy().healthy_after;
        let mut last = Duration::ZERO;
        for _ in 0..6 {
            last = live.next_watch(healthy_after, Some("1")).0;
        }
        assert!(last >= Duration::from_millis(800), "grown: {last:?}");
        live.expired();
        let (pause, _) = live.next_watch(healthy_after, Some("2"));
        assert!(pause <= Duration::from_millis(125), "{pause:?}");
    }

    #[test]
    fn an_expired_resource_version_is_told_from_other_watch_errors() {
        let status = |code| Box::new(kube::core::Status::failure("x", "Expired").with_code(code));
        assert!(expired(&watcher::Error::WatchError(status(410))));
        assert!(expired(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(410))
        )));
        assert!(!expired(&watcher::Error::WatchError(status(500))));
        assert!(!expired(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(503))
        )));
        assert!(!expired(&watcher::Error::NoResourceVersion));
        assert!(!expired(&watcher::Error::InitialListFailed(
            kube::Error::Api(status(410))
        )));
    }

    #[test]
    fn the_resource_version_of_a_request_is_read_from_its_query() {
        let uri: hyper::Uri = "/api/v1/pods?watch=true&resourceVersion=42&timeoutSeconds=290"
            .parse()
            .unwrap();
        assert_eq!(resource_version(&uri).as_deref(), Some("42"));
        let uri: hyper::Uri = "/api/v1/pods?limit=500".parse().unwrap();
        assert_eq!(resource_version(&uri), None);
    }

    #[tokio::test]
    async fn backoff_grows_to_its_cap_and_ignores_resets_until_healthy() {
        let mut b = WatchBackoff::new(&policy());
        let within = |d: Duration, base: u64| {
            d >= Duration::from_millis(base) && d < Duration::from_millis(base + base / 4 + 1)
        };
        assert!(within(b.failed(), 100));
        b.succeeded(); // an event right after the failure: no reset
        assert!(within(b.failed(), 200));
        assert!(within(b.failed(), 400));
        assert!(within(b.failed(), 800));
        assert!(within(b.failed(), 800));
        tokio::time::sleep(Duration::from_millis(250)).await;
        b.succeeded();
        assert!(within(b.failed(), 100));
    }
}
