//! Fair probe permits: one tenant's hanging probes cannot delay another's.
//!
//! A probe holds its permit for its whole run, up to its timeout (60 s at most), so a single
//! FIFO budget lets one PortMapping with many hanging targets hold every permit and queue every
//! other PortMapping's probes behind whole rounds of timeouts. Here permits are bounded three
//! ways: over all probes, per namespace and per PortMapping. Waiters queue per PortMapping
//! (FIFO), and a freed permit goes round-robin between namespaces with an eligible waiter and,
//! within the chosen namespace, round-robin between its PortMappings. A PortMapping at its cap
//! waits for its own probes to end, whatever other PortMappings do, and a namespace at its cap
//! likewise. So a PortMapping whose targets all hang only ever holds its own share, and while
//! fewer namespaces than `total ÷ per_namespace` are saturated, a probe of any other namespace
//! gets a permit at once.
//!
//! Memory is bounded by the callers: one queue entry per waiting probe (each target waits for
//! one permit at a time), removed when the waiter is dropped (its target cancelled), and
//! per-namespace and per-PortMapping records that are removed once they hold nothing.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use crate::target::MappingKey;

/// How many probes may be in flight: over all PortMappings, per namespace, per PortMapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairLimits {
    /// Probes in flight over all PortMappings.
    pub total: usize,
    /// Probes in flight for the PortMappings of one namespace.
    pub per_namespace: usize,
    /// Probes in flight for one PortMapping.
    pub per_mapping: usize,
}

impl FairLimits {
    /// The limits with each share clamped to `1..=total` (and `total` to at least 1).
    pub fn clamped(self) -> Self {
        let total = self.total.max(1);
        Self {
            total,
            per_namespace: self.per_namespace.clamp(1, total),
            per_mapping: self.per_mapping.clamp(1, total),
        }
    }
}

/// Hands out probe permits fairly between namespaces and PortMappings.
pub(crate) struct FairScheduler {
    limits: FairLimits,
    state: Mutex<State>,
}

/// A probe's right to run; gives its permit back when dropped.
pub(crate) struct FairPermit {
    scheduler: Arc<FairScheduler>,
    mapping: MappingKey,
}

impl Drop for FairPermit {
    fn drop(&mut self) {
        let limits = self.scheduler.limits;
        let mut state = self.scheduler.lock();
        state.release(&limits, &self.mapping);
        state.dispatch(&limits);
    }
}

#[derive(Default)]
struct State {
    in_flight: usize,
    next_id: u64,
    namespaces: HashMap<String, Namespace>,
    /// Namespaces below their cap with a PortMapping in `ready`, in round-robin order.
    ready: VecDeque<String>,
}

#[derive(Default)]
struct Namespace {
    in_flight: usize,
    queued: bool,
    mappings: HashMap<String, Mapping>,
    /// PortMappings below their cap with a waiter, in round-robin order.
    ready: VecDeque<String>,
}

#[derive(Default)]
struct Mapping {
    in_flight: usize,
    queued: bool,
    /// Waiters by arrival (ids only grow), each woken once with its permit.
    waiters: BTreeMap<u64, oneshot::Sender<()>>,
}

impl FairScheduler {
    pub(crate) fn new(limits: FairLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: limits.clamped(),
            state: Mutex::default(),
        })
    }

    /// Waits for a permit for a probe of `mapping`. Dropping the future gives up its place in
    /// the queue (or the permit, if it was granted meanwhile).
    pub(crate) async fn acquire(self: &Arc<Self>, mapping: &MappingKey) -> FairPermit {
        loop {
            let waiting = match self.try_acquire(mapping) {
                Ok(permit) => return permit,
                Err(waiting) => waiting,
            };
            if let Some(permit) = waiting.wait().await {
                return permit;
            }
        }
    }

    /// A permit at once, or a place in `mapping`'s queue.
    fn try_acquire(self: &Arc<Self>, mapping: &MappingKey) -> Result<FairPermit, Waiting> {
        let mut state = self.lock();
        // After every change `dispatch` leaves either no free permit or no eligible waiter,
        // so a probe that fits every cap and has no waiter of its own PortMapping ahead of it
        // jumps nobody.
        if state.fits(&self.limits, mapping) {
            state.grant(mapping);
            return Ok(self.permit(mapping));
        }
        let id = state.next_id;
        state.next_id += 1;
        let (wake, receiver) = oneshot::channel();
        state.mapping_mut(mapping).waiters.insert(id, wake);
        state.sync(&self.limits, mapping);
        state.dispatch(&self.limits);
        Err(Waiting {
            scheduler: self.clone(),
            mapping: mapping.clone(),
            id,
            receiver: Some(receiver),
        })
    }

    fn permit(self: &Arc<Self>, mapping: &MappingKey) -> FairPermit {
        FairPermit {
            scheduler: self.clone(),
            mapping: mapping.clone(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the counters consistent before anything can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Probes in flight: over all, for `mapping`'s namespace, for `mapping`.
    #[cfg(test)]
    fn in_flight(&self, mapping: &MappingKey) -> (usize, usize, usize) {
        let state = self.lock();
        let ns = state.namespaces.get(&mapping.namespace);
        (
            state.in_flight,
            ns.map_or(0, |n| n.in_flight),
            ns.and_then(|n| n.mappings.get(&mapping.name))
                .map_or(0, |m| m.in_flight),
        )
    }

    /// Waiters and records held, to check that nothing outlives its use.
    #[cfg(test)]
    fn held(&self) -> (usize, usize, usize) {
        let state = self.lock();
        let mappings = state.namespaces.values().map(|n| n.mappings.len()).sum();
        let waiters = state
            .namespaces
            .values()
            .flat_map(|n| n.mappings.values())
            .map(|m| m.waiters.len())
            .sum();
        (state.namespaces.len(), mappings, waiters)
    }
}

/// A place in a PortMapping's queue; dropping it leaves the queue.
struct Waiting {
    scheduler: Arc<FairScheduler>,
    mapping: MappingKey,
    id: u64,
    receiver: Option<oneshot::Receiver<()>>,
}

impl Waiting {
    /// The permit once granted; `None` if the queue entry vanished without one (the caller
    /// queues again).
    async fn wait(mut self) -> Option<FairPermit> {
        let receiver = self.receiver.as_mut()?;
        let granted = receiver.await.is_ok();
        // Granted or not, the entry has left the queue: nothing for `drop` to undo.
        self.receiver = None;
        granted.then(|| self.scheduler.permit(&self.mapping))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else {
            return;
        };
        let limits = self.scheduler.limits;
        let mut state = self.scheduler.lock();
        // Under the lock nothing can be granted meanwhile: either the permit is already here
        // (give it back) or the entry is still queued (leave the queue).
        if receiver.try_recv().is_ok() {
            state.release(&limits, &self.mapping);
        } else if let Some(m) = state.mapping_get_mut(&self.mapping) {
            m.waiters.remove(&self.id);
            state.sync(&limits, &self.mapping);
        }
        state.dispatch(&limits);
    }
}

impl State {
    fn mapping_mut(&mut self, key: &MappingKey) -> &mut Mapping {
        self.namespaces
            .entry(key.namespace.clone())
            .or_default()
            .mappings
            .entry(key.name.clone())
            .or_default()
    }

    fn mapping_get_mut(&mut self, key: &MappingKey) -> Option<&mut Mapping> {
        self.namespaces
            .get_mut(&key.namespace)?
            .mappings
            .get_mut(&key.name)
    }

    /// Whether a probe of `key` may start now without passing anyone.
    fn fits(&self, limits: &FairLimits, key: &MappingKey) -> bool {
        if self.in_flight >= limits.total {
            return false;
        }
        let Some(ns) = self.namespaces.get(&key.namespace) else {
            return true;
        };
        let Some(m) = ns.mappings.get(&key.name) else {
            return ns.in_flight < limits.per_namespace;
        };
        ns.in_flight < limits.per_namespace
            && m.in_flight < limits.per_mapping
            && m.waiters.is_empty()
    }

    fn grant(&mut self, key: &MappingKey) {
        self.in_flight += 1;
        let ns = self.namespaces.entry(key.namespace.clone()).or_default();
        ns.in_flight += 1;
        ns.mappings.entry(key.name.clone()).or_default().in_flight += 1;
    }

    fn release(&mut self, limits: &FairLimits, key: &MappingKey) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(ns) = self.namespaces.get_mut(&key.namespace) {
            ns.in_flight = ns.in_flight.saturating_sub(1);
            if let Some(m) = ns.mappings.get_mut(&key.name) {
                m.in_flight = m.in_flight.saturating_sub(1);
            }
        }
        self.sync(limits, key);
    }

    /// Hands free permits to waiters, round-robin between namespaces, then PortMappings.
    fn dispatch(&mut self, limits: &FairLimits) {
        while self.in_flight < limits.total {
            let Some(ns_name) = self.ready.pop_front() else {
                return;
            };
            let Some(ns) = self.namespaces.get_mut(&ns_name) else {
                continue;
            };
            ns.queued = false;
            let Some(name) = ns.ready.pop_front() else {
                continue;
            };
            let Some(m) = ns.mappings.get_mut(&name) else {
                continue;
            };
            m.queued = false;
            let Some((_, wake)) = m.waiters.pop_first() else {
                continue;
            };
            let key = MappingKey::new(ns_name, name);
            // The receiver lives until its `Waiting` is dropped, which takes this lock first
            // and then gives back a permit it finds sent; a send cannot be lost.
            if wake.send(()).is_ok() {
                self.grant(&key);
            }
            self.sync(limits, &key);
        }
    }

    /// Puts `key`'s PortMapping and namespace in or out of the round-robin rings after a
    /// change, and forgets them once they hold nothing.
    fn sync(&mut self, limits: &FairLimits, key: &MappingKey) {
        let Some(ns) = self.namespaces.get_mut(&key.namespace) else {
            return;
        };
        if let Some(m) = ns.mappings.get_mut(&key.name) {
            let eligible = !m.waiters.is_empty() && m.in_flight < limits.per_mapping;
            if eligible != m.queued {
                m.queued = eligible;
                if eligible {
                    ns.ready.push_back(key.name.clone());
                } else {
                    ns.ready.retain(|n| n != &key.name);
                }
            }
            if m.in_flight == 0 && m.waiters.is_empty() {
                ns.mappings.remove(&key.name);
            }
        }
        let eligible = !ns.ready.is_empty() && ns.in_flight < limits.per_namespace;
        if eligible != ns.queued {
            ns.queued = eligible;
            if eligible {
                self.ready.push_back(key.namespace.clone());
            } else {
                self.ready.retain(|n| n != &key.namespace);
            }
        }
        if ns.in_flight == 0 && ns.mappings.is_empty() {
            self.namespaces.remove(&key.namespace);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    fn limits(total: usize, per_namespace: usize, per_mapping: usize) -> FairLimits {
        FairLimits {
            total,
            per_namespace,
            per_mapping,
        }
    }

    type Acquire = Pin<Box<dyn Future<Output = FairPermit>>>;

    fn acquire(s: &Arc<FairScheduler>, ns: &str, name: &str) -> Acquire {
        let s = s.clone();
        let key = MappingKey::new(ns, name);
        Box::pin(async move { s.acquire(&key).await })
    }

    /// Polls once: the permit if granted by now.
    fn poll(f: &mut Acquire) -> Option<FairPermit> {
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(p) => Some(p),
            Poll::Pending => None,
        }
    }

    /// Polls every waiter once and keeps those still waiting; returns the permits granted.
    fn poll_all(waiting: &mut Vec<Acquire>) -> Vec<FairPermit> {
        let mut granted = Vec::new();
        waiting.retain_mut(|f| match poll(f) {
            Some(p) => {
                granted.push(p);
                false
            }
            None => true,
        });
        granted
    }

    #[test]
    fn a_mapping_never_exceeds_its_cap_and_a_quiet_one_starts_at_once() {
        let s = FairScheduler::new(limits(8, 8, 2));
        let mut waiting: Vec<Acquire> = (0..100).map(|_| acquire(&s, "a", "hangs")).collect();
        let mut held = poll_all(&mut waiting);
        assert_eq!(held.len(), 2, "the hanging mapping holds its cap only");
        let mut quiet = acquire(&s, "a", "quiet");
        let permit = poll(&mut quiet).expect("a quiet mapping is not queued behind another");
        assert_eq!(s.in_flight(&MappingKey::new("a", "hangs")), (3, 3, 2));
        drop(permit);
        // A freed permit of the hanging mapping goes to its next waiter, still within its cap.
        held.pop();
        assert_eq!(poll_all(&mut waiting).len(), 1);
        assert_eq!(waiting.len(), 97);
        assert_eq!(s.in_flight(&MappingKey::new("a", "hangs")), (2, 2, 2));
    }

    #[test]
    fn freed_permits_go_round_robin_between_namespaces_then_mappings() {
        let s = FairScheduler::new(limits(1, 1, 1));
        let mut current = poll(&mut acquire(&s, "x", "busy")).unwrap();
        let order = [
            ("x", "busy"),
            ("x", "busy"),
            ("x", "busy"),
            ("x", "other"),
            ("y", "one"),
            ("y", "one"),
            ("z", "one"),
        ];
        let mut waiting: Vec<(String, Acquire)> = order
            .iter()
            .map(|(ns, m)| {
                let mut f = acquire(&s, ns, m);
                assert!(poll(&mut f).is_none());
                (format!("{ns}/{m}"), f)
            })
            .collect();
        let mut served = Vec::new();
        while !waiting.is_empty() {
            drop(current);
            let mut granted: Vec<(usize, FairPermit)> = waiting
                .iter_mut()
                .enumerate()
                .filter_map(|(i, (_, f))| poll(f).map(|p| (i, p)))
                .collect();
            assert_eq!(granted.len(), 1, "one waiter per freed permit");
            let (i, permit) = granted.remove(0);
            current = permit;
            served.push(waiting.remove(i).0);
        }
        // x held the first permit: y and z come before x's next, and x's PortMappings alternate.
        assert_eq!(
            served,
            [
                "y/one", "z/one", "x/other", "y/one", "x/busy", "x/busy", "x/busy"
            ]
        );
    }

    #[test]
    fn dropped_waiters_leave_the_queue_and_records_are_forgotten() {
        let s = FairScheduler::new(limits(2, 2, 1));
        let held = poll(&mut acquire(&s, "a", "m")).unwrap();
        let waiting: Vec<Acquire> = (0..50)
            .map(|_| {
                let mut f = acquire(&s, "a", "m");
                assert!(poll(&mut f).is_none());
                f
            })
            .collect();
        assert_eq!(s.held(), (1, 1, 50));
        drop(waiting);
        assert_eq!(
            s.held(),
            (1, 1, 0),
            "one waiter entry per target, gone on cancel"
        );
        drop(held);
        assert_eq!(s.held(), (0, 0, 0));
        assert_eq!(s.in_flight(&MappingKey::new("a", "m")), (0, 0, 0));
    }

    #[test]
    fn a_permit_granted_to_a_dropped_waiter_is_given_back() {
        let s = FairScheduler::new(limits(1, 1, 1));
        let held = poll(&mut acquire(&s, "a", "m")).unwrap();
        let mut waiter = acquire(&s, "b", "m");
        assert!(poll(&mut waiter).is_none());
        drop(held); // granted to `waiter`, which never looks
        assert_eq!(s.in_flight(&MappingKey::new("b", "m")), (1, 1, 1));
        drop(waiter);
        assert_eq!(s.in_flight(&MappingKey::new("b", "m")), (0, 0, 0));
        assert!(poll(&mut acquire(&s, "c", "m")).is_some());
    }

    #[test]
    fn a_namespace_never_exceeds_its_cap() {
        let s = FairScheduler::new(limits(4, 2, 1));
        let mut held: Vec<FairPermit> = (0..10)
            .filter_map(|i| poll(&mut acquire(&s, "a", &format!("m{i}"))))
            .collect();
        assert_eq!(held.len(), 2);
        held.extend(poll(&mut acquire(&s, "b", "m")));
        assert_eq!(held.len(), 3, "another namespace starts at once");
    }
}
