//! The prober: one probe schedule per target, outside the reconcile loop.
//!
//! Reconciles call [`Prober::set_targets`] with the targets they want watched and read damped
//! results with [`Prober::results`], which only copies cached state: it never waits on a probe.
//! When a damped membership flips, the PortMapping's key is sent on the events channel so the
//! operator can reconcile it; results that do not flip a membership send nothing.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::damping::Damper;
use crate::exec::{ProbeExecutor, timed_out};
use crate::fair::{FairLimits, FairScheduler};
use crate::limits::{TIMEOUT_GRACE, clamp_period, clamp_threshold};
use crate::metrics::ProbeMetrics;
use crate::outcome::{Outcome, ProbeResult};
use crate::target::{MappingKey, Membership, Target};
use portmapper_api::network_key::NetworkKey;

/// Default bound on probes in flight. Probes are I/O-bound, so on a 2-core operator the bound
/// mostly caps sockets: 128 descriptors stay far below the usual 1024 soft limit, and with the
/// default 1 s timeout 128 hanging targets cost one timeout per round (figures in
/// `docs/benchmarks.md`).
pub const DEFAULT_CONCURRENCY: usize = 128;

/// Settings of the [`Prober`].
#[derive(Clone, Debug)]
pub struct ProberConfig {
    /// Most probes in flight at once, over all PortMappings.
    pub concurrency: usize,
    /// Most probes in flight at once for the PortMappings of one namespace; `None`:
    /// [`default_per_namespace`] of `concurrency`.
    pub concurrency_per_namespace: Option<usize>,
    /// Most probes in flight at once for one PortMapping; `None`: [`default_per_mapping`] of
    /// `concurrency`.
    pub concurrency_per_mapping: Option<usize>,
    /// Spread the first probe of targets starting `Included` over one period, so a restart does
    /// not probe every published pod at once. Targets starting `Excluded` (new pods) probe at
    /// once so they are included without waiting.
    pub start_jitter: bool,
}

impl Default for ProberConfig {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            concurrency_per_namespace: None,
            concurrency_per_mapping: None,
            start_jitter: true,
        }
    }
}

/// The default share of one namespace: half the global bound, so one tenant's hanging probes
/// leave the other half to everyone else.
pub fn default_per_namespace(concurrency: usize) -> usize {
    (concurrency / 2).max(1)
}

/// The default share of one PortMapping: a quarter of the global bound, so a namespace's
/// other PortMappings keep permits while one of them hangs.
pub fn default_per_mapping(concurrency: usize) -> usize {
    (concurrency / 4).max(1)
}

impl ProberConfig {
    /// The three bounds, defaults resolved and clamped to `1..=concurrency`.
    pub fn limits(&self) -> FairLimits {
        FairLimits {
            total: self.concurrency,
            per_namespace: self
                .concurrency_per_namespace
                .unwrap_or_else(|| default_per_namespace(self.concurrency)),
            per_mapping: self
                .concurrency_per_mapping
                .unwrap_or_else(|| default_per_mapping(self.concurrency)),
        }
        .clamped()
    }
}

/// Why a prober could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    /// The prober spawns its workers on the current tokio runtime.
    #[error("the prober must be created inside a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
    /// The network executor's TLS setup failed.
    #[error(transparent)]
    Tls(#[from] crate::exec::TlsConfigError),
}

/// The cached, damped state of one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetResult {
    /// The damped membership: what the reconcile should apply.
    pub membership: Membership,
    /// Why the target has this membership: the reason of the latest result that agreed with
    /// it, or the initial membership's reason before any did. Meant for PortMapping status.
    pub reason: String,
    /// The latest probe result, whatever it said.
    pub last: Option<ProbeResult>,
    /// Consecutive Include results counted towards `successThreshold`.
    pub successes: u32,
    /// Consecutive Exclude results counted towards `failureThreshold`.
    pub failures: u32,
    /// Probes finished for this target since it was added.
    pub probes: u64,
}

/// Receives the key of a PortMapping whenever one of its targets' memberships flips.
pub type ProbeEvents = mpsc::UnboundedReceiver<MappingKey>;

struct Entry {
    target: Arc<Target>,
    generation: u64,
    period: Duration,
    worker: AbortHandle,
    damper: Damper,
    result: TargetResult,
}

type Mappings = HashMap<MappingKey, HashMap<NetworkKey, Entry>>;

struct Inner {
    config: ProberConfig,
    executor: Arc<dyn ProbeExecutor>,
    metrics: Arc<dyn ProbeMetrics>,
    permits: Arc<FairScheduler>,
    mappings: RwLock<Mappings>,
    events: mpsc::UnboundedSender<MappingKey>,
    runtime: Handle,
    generations: AtomicU64,
    jitter: RandomState,
}

/// Probes network checks on schedules of their own and caches damped results.
///
/// Dropping the prober cancels every probe.
pub struct Prober {
    inner: Arc<Inner>,
}

impl Prober {
    /// A prober running `executor` on the current tokio runtime, reporting to `metrics`.
    pub fn new(
        config: ProberConfig,
        executor: Arc<dyn ProbeExecutor>,
        metrics: Arc<dyn ProbeMetrics>,
    ) -> Result<(Self, ProbeEvents), ProberError> {
        let runtime = Handle::try_current()?;
        let (events, receiver) = mpsc::unbounded_channel();
        let permits = FairScheduler::new(config.limits());
        let inner = Inner {
            config,
            executor,
            metrics,
            permits,
            mappings: RwLock::default(),
            events,
            runtime,
            generations: AtomicU64::new(0),
            jitter: RandomState::new(),
        };
        Ok((
            Self {
                inner: Arc::new(inner),
            },
            receiver,
        ))
    }

    /// A prober that probes over the network with a [`crate::NetworkExecutor`].
    pub fn network(
        config: ProberConfig,
        executor: crate::ExecutorConfig,
        metrics: Arc<dyn ProbeMetrics>,
    ) -> Result<(Self, ProbeEvents), ProberError> {
        let executor = Arc::new(crate::NetworkExecutor::new(executor)?);
        Self::new(config, executor, metrics)
    }

    /// Replaces the targets of one PortMapping.
    ///
    /// Targets whose [`NetworkKey`] was already known keep their schedule, membership and
    /// streaks; their definition (check, pod facts, thresholds) is updated in place and used
    /// from the next probe, and only a changed `periodSeconds` restarts their schedule. New
    /// targets start from their `initial_membership`. Targets no longer listed are cancelled at once, probe
    /// in flight included. An empty list forgets the PortMapping.
    pub fn set_targets(&self, mapping: &MappingKey, targets: impl IntoIterator<Item = Target>) {
        let inner = &self.inner;
        let mut mappings = inner.write();
        let mut old = mappings.remove(mapping).unwrap_or_default();
        let mut current: HashMap<NetworkKey, Entry> = HashMap::with_capacity(old.len());
        for target in targets {
            let key = target.key();
            let period = clamp_period(target.settings.period_seconds);
            let success = clamp_threshold(target.settings.success_threshold);
            let failure = clamp_threshold(target.settings.failure_threshold);
            let existing = match current.remove(&key) {
                Some(entry) => Some(entry), // listed twice: the last definition wins
                None => old.remove(&key),
            };
            let entry = match existing {
                Some(mut entry) => {
                    entry.damper.set_thresholds(success, failure);
                    if entry.period != period {
                        // Same spreading as a start, so a period edit on a big PortMapping
                        // does not probe every pod at once.
                        let delay =
                            inner.first_delay(mapping, &key, entry.damper.membership(), period);
                        entry.worker.abort();
                        entry.generation = inner.next_generation();
                        entry.worker =
                            inner.spawn_worker(mapping, &key, entry.generation, period, delay);
                        entry.period = period;
                    }
                    entry.target = Arc::new(target);
                    entry
                }
                None => {
                    let initial = target.initial_membership;
                    let generation = inner.next_generation();
                    let delay = inner.first_delay(mapping, &key, initial, period);
                    let worker = inner.spawn_worker(mapping, &key, generation, period, delay);
                    let damper = Damper::new(initial, success, failure);
                    Entry {
                        target: Arc::new(target),
                        generation,
                        period,
                        worker,
                        result: TargetResult {
                            membership: initial,
                            reason: match initial {
                                Membership::Included => "published before the first probe".into(),
                                Membership::Excluded => "not probed yet".into(),
                            },
                            last: None,
                            successes: 0,
                            failures: 0,
                            probes: 0,
                        },
                        damper,
                    }
                }
            };
            current.insert(key, entry);
        }
        for (_, gone) in old {
            gone.worker.abort();
        }
        tracing::debug!(%mapping, targets = current.len(), "prober targets set");
        if !current.is_empty() {
            mappings.insert(mapping.clone(), current);
        }
    }

    /// Cancels every target of one PortMapping and forgets its results.
    pub fn remove_mapping(&self, mapping: &MappingKey) {
        self.set_targets(mapping, std::iter::empty());
    }

    /// The cached result of one target; `None` if the prober does not know it.
    pub fn result(&self, mapping: &MappingKey, key: &NetworkKey) -> Option<TargetResult> {
        let mappings = self.inner.read();
        Some(mappings.get(mapping)?.get(key)?.result.clone())
    }

    /// The cached results of every target of one PortMapping. Never waits on a probe.
    pub fn results(&self, mapping: &MappingKey) -> HashMap<NetworkKey, TargetResult> {
        let mappings = self.inner.read();
        mappings
            .get(mapping)
            .map(|targets| {
                targets
                    .iter()
                    .map(|(key, entry)| (key.clone(), entry.result.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The PortMappings that have targets.
    pub fn mapping_keys(&self) -> Vec<MappingKey> {
        self.inner.read().keys().cloned().collect()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        for targets in self.inner.write().values() {
            for entry in targets.values() {
                entry.worker.abort();
            }
        }
    }
}

impl Inner {
    fn read(&self) -> RwLockReadGuard<'_, Mappings> {
        // Writers only insert finished values; a panicking writer leaves a consistent map.
        self.mappings.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Mappings> {
        self.mappings
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed)
    }

    fn first_delay(
        &self,
        mapping: &MappingKey,
        key: &NetworkKey,
        initial: Membership,
        period: Duration,
    ) -> Duration {
        if !self.config.start_jitter || initial == Membership::Excluded {
            return Duration::ZERO;
        }
        let hash = self.jitter.hash_one((mapping, key));
        let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
        Duration::from_millis(hash % period_ms)
    }

    fn spawn_worker(
        self: &Arc<Self>,
        mapping: &MappingKey,
        key: &NetworkKey,
        generation: u64,
        period: Duration,
        delay: Duration,
    ) -> AbortHandle {
        let worker = Worker {
            inner: Arc::downgrade(self),
            mapping: mapping.clone(),
            key: key.clone(),
            generation,
        };
        self.runtime.spawn(worker.run(period, delay)).abort_handle()
    }

    /// The target a worker of `generation` should probe next, or `None` if it was replaced.
    fn current_target(
        &self,
        mapping: &MappingKey,
        key: &NetworkKey,
        generation: u64,
    ) -> Option<Arc<Target>> {
        let mappings = self.read();
        let entry = mappings.get(mapping)?.get(key)?;
        (entry.generation == generation).then(|| entry.target.clone())
    }

    /// Counts a result and notifies if the membership flipped.
    fn record(&self, mapping: &MappingKey, key: &NetworkKey, generation: u64, result: ProbeResult) {
        let flipped = {
            let mut mappings = self.write();
            let Some(entry) = mappings.get_mut(mapping).and_then(|t| t.get_mut(key)) else {
                return;
            };
            if entry.generation != generation {
                return;
            }
            let flipped = entry.damper.observe(result.outcome);
            let membership = entry.damper.membership();
            let agrees = matches!(
                (result.outcome, membership),
                (Outcome::Include, Membership::Included) | (Outcome::Exclude, Membership::Excluded)
            );
            let state = &mut entry.result;
            if agrees {
                state.reason.clone_from(&result.reason);
            }
            state.membership = membership;
            state.successes = entry.damper.successes();
            state.failures = entry.damper.failures();
            state.probes += 1;
            state.last = Some(result);
            flipped
        };
        if flipped {
            tracing::debug!(%mapping, pod_uid = %key.pod_uid, port = %key.port_name, position = %key.position, "probe membership changed");
            // The receiver is gone only when the operator is shutting down.
            let _ = self.events.send(mapping.clone());
        }
    }
}

/// The schedule of one target.
struct Worker {
    inner: Weak<Inner>,
    mapping: MappingKey,
    key: NetworkKey,
    generation: u64,
}

impl Worker {
    async fn run(self, period: Duration, delay: Duration) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut ticker = tokio::time::interval(period);
        // A probe that waited for a permit past its tick runs once, not in a burst.
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if self.probe_once().await.is_none() {
                return;
            }
        }
    }

    /// One probe; `None` when the worker should stop.
    async fn probe_once(&self) -> Option<()> {
        let (target, executor, permits) = {
            let inner = self.inner.upgrade()?;
            let target = inner.current_target(&self.mapping, &self.key, self.generation)?;
            (target, inner.executor.clone(), inner.permits.clone())
        };
        let permit = permits.acquire(&self.mapping).await;
        let started = Instant::now();
        let timeout = target.timeout();
        let check_type = target.check.check_type();
        // Executors enforce the timeout themselves; this guard catches one that does not.
        let result = tokio::time::timeout(
            timeout + TIMEOUT_GRACE,
            executor.probe(&self.mapping, &target),
        )
        .await
        .unwrap_or_else(|_| timed_out(check_type, timeout));
        drop(permit);
        let elapsed = started.elapsed();
        let inner = self.inner.upgrade()?;
        inner.metrics.observe(check_type, &result, elapsed);
        tracing::trace!(
            mapping = %self.mapping, pod = %target.pod.name, port = %self.key.port_name,
            outcome = %result.outcome, cause = %result.cause, ?elapsed, "probe finished"
        );
        inner.record(&self.mapping, &self.key, self.generation, result);
        Some(())
    }
}
