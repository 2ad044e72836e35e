//! Webhook host name lookups on a bounded number of threads.
//!
//! The system resolver (`getaddrinfo`) is kept on purpose: it applies the pod's
//! `/etc/resolv.conf` (search list, `ndots`) and `/etc/hosts` exactly as every other program in
//! the cluster does, and needs no new dependency. Its one danger is that it blocks a thread and
//! cannot be cancelled: tokio's `lookup_host` gives it a blocking-pool thread that outlives the
//! probe's timeout, so slow lookups used to pile up towards the pool's 512 threads. Here a lookup
//! first takes one of a fixed number of slots and holds it until its thread returns, so at most
//! that many threads ever block on DNS; a lookup that gets no slot, or no answer, within its
//! budget abstains with a reason saying so.
//!
//! A namespace holds at most a quarter of the slots: a tenant whose webhook hosts sit in a zone
//! that never answers ties up its own share only, and every other namespace's lookups find a
//! slot (threat analysis M5).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ProbeError;

/// Default number of lookups in flight, over all webhooks.
pub const DEFAULT_DNS_LOOKUPS: usize = 16;

/// A blocking lookup of (host, port).
pub type LookupFn = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// Resolves names on at most `slots` blocking threads at a time, a quarter of them per
/// namespace.
pub struct Resolver {
    slots: Arc<Semaphore>,
    size: usize,
    /// Each namespace's share, while it has lookups in flight (entries go with their last
    /// permit).
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
    share: usize,
    lookup: Arc<LookupFn>,
}

impl Resolver {
    /// The system resolver with `slots` lookups in flight at most.
    pub fn system(slots: usize) -> Self {
        Self::with_lookup(
            slots,
            Arc::new(|host: &str, port: u16| (host, port).to_socket_addrs().map(Iterator::collect)),
        )
    }

    /// A resolver calling `lookup` (tests count the threads it blocks).
    pub fn with_lookup(slots: usize, lookup: Arc<LookupFn>) -> Self {
        let size = slots.max(1);
        Self {
            slots: Arc::new(Semaphore::new(size)),
            size,
            shares: Mutex::default(),
            share: (size / 4).max(1),
            lookup,
        }
    }

    /// Namespace `namespace`'s share; forgets the shares no lookup holds.
    fn share_of(&self, namespace: &str) -> Arc<Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        // A held permit keeps a second reference to its semaphore.
        shares.retain(|_, share| Arc::strong_count(share) > 1);
        shares
            .entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }

    /// The addresses of `host`, looked up for a webhook of `namespace`, within `budget`
    /// (waiting for a slot included).
    pub async fn resolve(
        &self,
        namespace: &str,
        host: &str,
        port: u16,
        budget: Duration,
    ) -> Result<Vec<SocketAddr>, ProbeError> {
        let deadline = tokio::time::Instant::now() + budget;
        let busy = |slots| ProbeError::ResolveBusy {
            host: host.to_owned(),
            slots,
            budget,
        };
        let acquire = |semaphore: Arc<Semaphore>, slots| async move {
            match tokio::time::timeout_at(deadline, semaphore.acquire_owned()).await {
                Ok(Ok(permit)) => Ok::<OwnedSemaphorePermit, ProbeError>(permit),
                // Timed out (the semaphores are never closed).
                _ => Err(busy(slots)),
            }
        };
        let own = acquire(self.share_of(namespace), self.share).await?;
        let any = acquire(self.slots.clone(), self.size).await?;
        let (lookup, name) = (self.lookup.clone(), host.to_owned());
        let thread = tokio::task::spawn_blocking(move || {
            // Held until the lookup returns, however long after the probe gave up.
            let _permits = (own, any);
            lookup(&name, port)
        });
        let resolve_err = |source| ProbeError::Resolve {
            host: host.to_owned(),
            source,
        };
        match tokio::time::timeout_at(deadline, thread).await {
            Err(_) => Err(resolve_err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {budget:?}"),
            ))),
            Ok(Err(join)) => Err(resolve_err(io::Error::other(join.to_string()))),
            Ok(Ok(result)) => result.map_err(resolve_err),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A lookup that blocks its thread for `hold` and records how many threads block at once.
    fn slow(hold: Duration, now: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> Arc<LookupFn> {
        Arc::new(move |_: &str, port: u16| {
            let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(inside, Ordering::SeqCst);
            std::thread::sleep(hold);
            now.fetch_sub(1, Ordering::SeqCst);
            Ok(vec![SocketAddr::from(([10, 96, 0, 10], port))])
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_lookups_never_block_more_threads_than_slots() {
        const SLOTS: usize = 4;
        let (now, peak) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
        let resolver = Arc::new(Resolver::with_lookup(
            SLOTS,
            slow(Duration::from_millis(400), now, peak.clone()),
        ));
        // Three waves of 64 lookups from 64 namespaces, each giving up long before the lookups
        // return.
        let mut busy = 0;
        let mut timed_out = 0;
        for _ in 0..3 {
            let calls = (0..64).map(|i| {
                let resolver = resolver.clone();
                tokio::spawn(async move {
                    let ns = format!("ns-{i}");
                    resolver
                        .resolve(&ns, "x.tarpit.example", 80, Duration::from_millis(50))
                        .await
                })
            });
            for call in futures_join(calls).await {
                match call {
                    Err(ProbeError::ResolveBusy { slots, .. }) => {
                        // The operator's slots, or the namespace's share of them.
                        assert!(slots == SLOTS || slots == SLOTS / 4, "{slots}");
                        busy += 1;
                    }
                    Err(ProbeError::Resolve { source, .. }) => {
                        assert_eq!(source.kind(), io::ErrorKind::TimedOut);
                        timed_out += 1;
                    }
                    other => panic!("a 400 ms lookup answered within 50 ms: {other:?}"),
                }
            }
        }
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak <= SLOTS, "{peak} threads blocked in lookups at once");
        assert!(peak >= 1, "the lookups ran");
        assert_eq!(busy + timed_out, 192);
        assert!(busy >= 192 - 3 * SLOTS, "{busy} lookups found no slot");
    }

    #[tokio::test]
    async fn a_quick_lookup_answers() {
        let resolver =
            Resolver::with_lookup(1, slow(Duration::ZERO, Arc::default(), Arc::default()));
        let addrs = resolver
            .resolve("shop", "decider.shop.svc", 8443, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(addrs, vec![SocketAddr::from(([10, 96, 0, 10], 8443))]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_namespace_whose_lookups_hang_leaves_the_other_namespaces_their_slots() {
        const SLOTS: usize = 16;
        let hung = Arc::new(AtomicUsize::new(0));
        let counted = hung.clone();
        let lookup: Arc<LookupFn> = Arc::new(move |host: &str, port: u16| {
            if host.ends_with(".tarpit.example") {
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(2));
            }
            Ok(vec![SocketAddr::from(([10, 96, 0, 10], port))])
        });
        let resolver = Arc::new(Resolver::with_lookup(SLOTS, lookup));
        // The attacker starts 64 lookups that hang far beyond their 50 ms budget.
        let attacks = (0..64).map(|i| {
            let resolver = resolver.clone();
            tokio::spawn(async move {
                let host = format!("x{i}.tarpit.example");
                resolver
                    .resolve("attacker", &host, 80, Duration::from_millis(50))
                    .await
            })
        });
        let attacks = futures_join(attacks).await;
        assert!(attacks.iter().all(Result::is_err));
        assert_eq!(
            hung.load(Ordering::SeqCst),
            SLOTS / 4,
            "the attacker's share"
        );
        // While they hang, other namespaces' lookups answer at once.
        for ns in ["b", "c", "d"] {
            let addrs = resolver
                .resolve(ns, "decider.svc", 8443, Duration::from_millis(500))
                .await
                .unwrap();
            assert_eq!(addrs, vec![SocketAddr::from(([10, 96, 0, 10], 8443))]);
        }
    }

    async fn futures_join<T: Send + 'static>(
        handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for handle in handles.collect::<Vec<_>>() {
            out.push(handle.await.unwrap());
        }
        out
    }
}
