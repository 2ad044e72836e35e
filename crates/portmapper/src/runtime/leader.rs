//! Leader election on a coordination.k8s.io/v1 Lease, written here rather than with
//! kube-lease-manager because writes must be gated on *when this replica last renewed*, which
//! that crate does not expose (its leadership flag flips only after it re-syncs, so a paused
//! leader resumed writing before learning it had lost the Lease).
//!
//! - Every renewal that succeeds moves a local monotonic deadline to `start + duration − grace`
//!   (`start` = the instant before the renewal's requests left). [`Leadership::is_leader`] is
//!   `Instant::now() < deadline`, and the operator's client refuses writes past it
//!   ([`crate::runtime::client`]), so no write leaves after the deadline, whatever the election task is
//!   doing.
//! - Standbys watch the Lease (and poll it every retry period, as client-go does), so a release
//!   is taken over at once; an unreleased Lease is taken over once it has not changed for its
//!   duration, measured on the standby's own monotonic clock (no wall-clock comparison).
//! - Every write carries the resourceVersion it read, so two replicas never both win a round.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::runtime::error::Error;

/// Field manager of our Lease writes.
pub const LEASE_MANAGER: &str = "portmapper.dev-lease";

/// Election settings (plain values; the CLI converts its flags into this).
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease.
    pub lease_namespace: String,
    /// This replica in the Lease; must be unique among replicas ([`default_identity`]).
    pub identity: String,
    /// How long a Lease holds without renewal.
    pub lease_duration: Duration,
    /// Margin before the Lease could expire at which this replica stops writing.
    pub grace: Duration,
    /// Renewal cadence of the leader and poll cadence of a standby.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// A renewal cadence that leaves three attempts before the write deadline (client-go's
    /// 2 s retry period for the default 15 s / 5 s).
    pub fn default_retry_period(lease_duration: Duration, grace: Duration) -> Duration {
        (lease_duration.saturating_sub(grace) / 3)
            .clamp(Duration::from_millis(100), Duration::from_secs(2))
    }

    /// How long after a successful renewal this replica may write.
    fn write_window(&self) -> Duration {
        self.lease_duration
            .saturating_sub(self.grace)
            .max(Duration::from_millis(100))
    }
}

/// The host name plus a random suffix, as client-go does: two replicas on one host (or with one
/// host name) never share an identity, so they can never both believe they hold the Lease.
pub fn default_identity() -> String {
    format!("{}_{}", hostname(), uuid::Uuid::new_v4())
}

/// Whether this replica may write: true until the deadline of its last renewal.
#[derive(Clone, Debug)]
pub struct Leadership {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    always: bool,
    deadline: Mutex<Option<Instant>>,
    tx: watch::Sender<bool>,
}

impl Leadership {
    fn new(always: bool) -> Self {
        let (tx, _) = watch::channel(always);
        Self {
            shared: Arc::new(Shared {
                always,
                deadline: Mutex::new(None),
                tx,
            }),
        }
    }

    /// Leadership that is always held (leader election disabled, or tests).
    pub fn always() -> Self {
        Self::new(true)
    }

    /// Whether this replica may write now: checked against the monotonic clock at every call,
    /// so it turns false at the deadline even if the election task never ran since.
    pub fn is_leader(&self) -> bool {
        self.shared.always || self.deadline().is_some_and(|d| Instant::now() < d)
    }

    /// The instant after which this replica stops writing (None: not leading).
    pub fn deadline(&self) -> Option<Instant> {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that sees every acquisition and loss (for reconcile-all and the metric).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.shared.tx.subscribe()
    }

    fn renewed(&self, until: Instant) {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(until);
        self.shared
            .tx
            .send_if_modified(|v| !std::mem::replace(v, true));
    }

    fn lost(&self) {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.shared
            .tx
            .send_if_modified(|v| std::mem::replace(v, false));
    }
}

/// The running election.
pub struct Election {
    leadership: Leadership,
    config: LeaderConfig,
    api: Api<Lease>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Election {
    /// Starts competing for the Lease. `client` must not be the write-gated client: the renewal
    /// is what moves the gate's deadline.
    pub async fn start(client: Client, config: LeaderConfig) -> Result<Self, Error> {
        if config.identity.is_empty() {
            return Err(Error::Leader("the identity must not be empty".into()));
        }
        let api: Api<Lease> = Api::namespaced(client, &config.lease_namespace);
        let leadership = Leadership::new(false);
        let stop = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        info!(
            lease = %config.lease_name,
            namespace = %config.lease_namespace,
            identity = %config.identity,
            "competing for leadership"
        );
        let tasks = vec![
            tokio::spawn(watch_lease(
                api.clone(),
                config.lease_name.clone(),
                wake.clone(),
                stop.clone(),
            )),
            tokio::spawn(elect(
                api.clone(),
                config.clone(),
                leadership.clone(),
                wake,
                stop.clone(),
            )),
        ];
        Ok(Self {
            leadership,
            config,
            api,
            stop,
            tasks,
        })
    }

    /// A handle for the apply layer and the client's write gate.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// This replica's identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Stops writing at once, then gives the Lease up (if this replica still holds it) so a
    /// standby takes over without waiting for it to expire.
    pub async fn release(self, timeout: Duration) {
        self.leadership.lost();
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
        match tokio::time::timeout(timeout, give_up(&self.api, &self.config)).await {
            Ok(Ok(true)) => info!(identity = %self.config.identity, "released the leader lease"),
            Ok(Ok(false)) => debug!("not holding the leader lease; nothing to release"),
            Ok(Err(err)) => warn!(error = %err, "releasing the leader lease; it will expire"),
            Err(_) => warn!("timed out releasing the leader lease; it will expire"),
        }
    }
}

/// What one round of the election found.
enum Round {
    /// We hold the Lease; renewed by requests that started at this instant.
    Leading(Instant),
    /// Someone else holds a live Lease.
    Standby,
    /// Lost a race (409): look again at once.
    Conflict,
    /// The API failed; keep the deadline we have and retry.
    Failed,
}

/// The last Lease version seen and when this replica first saw it (client-go's observedTime).
#[derive(Default)]
struct Observed {
    resource_version: Option<String>,
    at: Option<Instant>,
}

async fn elect(
    api: Api<Lease>,
    config: LeaderConfig,
    leadership: Leadership,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut observed = Observed::default();
    loop {
        let deadline = leadership.deadline();
        let round = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            // A renewal that hangs past the deadline must not keep us "leading".
            _ = sleep_until_opt(deadline) => {
                warn!(identity = %config.identity, "renewal deadline passed; stopped writing");
                leadership.lost();
                continue;
            }
            round = round(&api, &config, &mut observed) => round,
        };
        let pause = match round {
            Round::Leading(started) => {
                if !leadership.is_leader() {
                    info!(identity = %config.identity, "acquired the leader lease");
                }
                leadership.renewed(started + config.write_window());
                config.retry_period
            }
            Round::Standby => {
                if leadership.deadline().is_some() {
                    info!(identity = %config.identity, "another replica holds the leader lease");
                }
                leadership.lost();
                config.retry_period
            }
            Round::Conflict => Duration::from_millis(20),
            Round::Failed => config.retry_period,
        };
        // Standbys also wake on every Lease event, so a release is taken over at once.
        let standby = !leadership.is_leader();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
            _ = wake.notified(), if standby => {}
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn round(api: &Api<Lease>, config: &LeaderConfig, observed: &mut Observed) -> Round {
    let started = Instant::now();
    let name = &config.lease_name;
    let current = match api.get_opt(name).await {
        Ok(current) => current,
        Err(err) => {
            warn!(error = %err, lease = %name, "reading the leader lease");
            return Round::Failed;
        }
    };
    let Some(mut lease) = current else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(config.lease_namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(held_spec(config, None, 0)),
        };
        return write_outcome(api.create(&post_params(), &lease).await, started);
    };
    let now = Instant::now();
    if observed.resource_version != lease.meta().resource_version || observed.at.is_none() {
        observed.resource_version = lease.meta().resource_version.clone();
        observed.at = Some(now);
    }
    let spec = lease.spec.take().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(config.lease_duration, Duration::from_secs);
    let expired = observed.at.is_some_and(|at| now >= at + duration);
    let transitions = spec.lease_transitions.unwrap_or(0);
    let new_spec = match holder.as_deref() {
        Some(h) if h == config.identity => LeaseSpec {
            renew_time: Some(now_micro()),
            lease_duration_seconds: Some(seconds(config.lease_duration)),
            ..spec
        },
        Some(other) if !expired => {
            debug!(holder = other, "leader lease is held");
            return Round::Standby;
        }
        _ => {
            debug!(previous = ?holder, identity = %config.identity, "taking the leader lease");
            held_spec(config, Some(&spec), transitions.saturating_add(1))
        }
    };
    lease.spec = Some(new_spec);
    // replace() sends the resourceVersion we read: a 409 means someone else wrote first.
    write_outcome(api.replace(name, &post_params(), &lease).await, started)
}

fn write_outcome(result: Result<Lease, kube::Error>, started: Instant) -> Round {
    match result {
        Ok(_) => Round::Leading(started),
        Err(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists() => Round::Conflict,
        Err(err) => {
            warn!(error = %err, "writing the leader lease");
            Round::Failed
        }
    }
}

fn held_spec(config: &LeaderConfig, previous: Option<&LeaseSpec>, transitions: i32) -> LeaseSpec {
    let now = now_micro();
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        lease_duration_seconds: Some(seconds(config.lease_duration)),
        lease_transitions: Some(transitions),
        ..previous.cloned().unwrap_or_default()
    }
}

/// Gives the Lease up as client-go does (empty holder, 1 s duration), only while we hold it.
async fn give_up(api: &Api<Lease>, config: &LeaderConfig) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(&config.lease_name).await? else {
        return Ok(false);
    };
    let mut spec = lease.spec.take().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now_micro());
    lease.spec = Some(spec);
    api.replace(&config.lease_name, &post_params(), &lease)
        .await?;
    Ok(true)
}

/// Wakes the election on every change of the Lease (a standby then looks at once).
async fn watch_lease(api: Api<Lease>, name: String, wake: Arc<Notify>, stop: CancellationToken) {
    use kube::runtime::WatchStreamExt;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api, config)
        .backoff(crate::runtime::watch_health::WatchBackoff::new(
            &crate::runtime::watch_health::WatchPolicy::default(),
        ))
        .touched_objects();
    let mut stream = std::pin::pin!(stream);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            item = stream.next() => match item {
                Some(Ok(_)) => wake.notify_one(),
                Some(Err(err)) => debug!(error = %err, "watching the leader lease; retrying"),
                None => return,
            },
        }
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(LEASE_MANAGER.into()),
        ..PostParams::default()
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "portmapper".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_identities_differ() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}_", hostname())));
    }

    #[test]
    fn retry_period_leaves_three_attempts() {
        let d = LeaderConfig::default_retry_period;
        assert_eq!(
            d(Duration::from_secs(15), Duration::from_secs(5)),
            Duration::from_secs(2)
        );
        assert_eq!(
            d(Duration::from_secs(3), Duration::from_secs(1)),
            Duration::from_nanos(666_666_666)
        );
    }

    #[tokio::test]
    async fn leadership_expires_at_its_deadline_without_the_election_running() {
        let l = Leadership::new(false);
        assert!(!l.is_leader());
        l.renewed(Instant::now() + Duration::from_millis(50));
        assert!(l.is_leader());
        assert!(*l.subscribe().borrow());
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(!l.is_leader());
    }
}
