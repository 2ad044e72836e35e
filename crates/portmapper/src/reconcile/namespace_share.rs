//! A namespace's share of the reconcile workers: no namespace holds every one.
//!
//! kube-runtime's Controller runs up to `--concurrency` passes at once and picks the next
//! PortMapping from its queue in no particular order, with no notion of namespaces and no hook
//! to choose (kube-runtime 5.0 `controller/runner.rs`: `hold_unless(|msg| !slots.contains_key(msg))`).
//! So a namespace with many PortMappings whose passes are long can hold every worker while
//! other namespaces wait. Here a pass that would make its namespace hold more than its share
//! gives its worker back at once and is queued again when a pass of its own namespace ends,
//! so at least one worker stays free for the other namespaces. The share is one worker fewer
//! than `--concurrency` (at least 1): a single busy namespace keeps almost all of them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;

use crate::index::trigger::Trigger;

type Key = ObjectRef<PortMapping>;

/// Passes running per namespace, and the PortMappings waiting for their namespace's share.
pub struct NamespaceShare {
    share: usize,
    namespaces: Mutex<HashMap<String, Namespace>>,
}

#[derive(Default)]
struct Namespace {
    running: usize,
    /// Queued again, one each, as the namespace's passes end; a PortMapping at most once.
    deferred: VecDeque<Key>,
}

/// A running pass; ending it (dropping it) lets its namespace's next deferred PortMapping run.
pub struct Pass<'a> {
    share: &'a NamespaceShare,
    trigger: &'a Trigger,
    namespace: String,
}

impl NamespaceShare {
    /// The share of a controller running `concurrency` passes at once over every namespace;
    /// `None` when it watches one namespace (nobody to share with).
    pub fn new(concurrency: u16, watch_namespace: Option<&str>) -> Self {
        let share = match watch_namespace {
            Some(_) => usize::MAX,
            None => usize::from(concurrency).saturating_sub(1).max(1),
        };
        Self {
            share,
            namespaces: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Namespace>> {
        // Counters are updated in one step each: a panic elsewhere leaves them consistent.
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a pass of `pm`, or defers it (`None`: the caller returns at once) while its
    /// namespace holds its share; `trigger` queues it again when one of those passes ends.
    pub fn enter<'a>(&'a self, pm: &Key, trigger: &'a Trigger) -> Option<Pass<'a>> {
        let namespace = pm.namespace.clone().unwrap_or_default();
        let mut namespaces = self.lock();
        let entry = namespaces.entry(namespace.clone()).or_default();
        if entry.running >= self.share {
            if !entry.deferred.contains(pm) {
                entry.deferred.push_back(pm.clone());
            }
            return None;
        }
        entry.running += 1;
        Some(Pass {
            share: self,
            trigger,
            namespace,
        })
    }

    /// Forgets a deleted PortMapping's deferred pass.
    pub fn forget(&self, pm: &Key) {
        let namespace = pm.namespace.clone().unwrap_or_default();
        let mut namespaces = self.lock();
        if let Some(entry) = namespaces.get_mut(&namespace) {
            entry.deferred.retain(|k| k != pm);
            if entry.running == 0 && entry.deferred.is_empty() {
                namespaces.remove(&namespace);
            }
        }
    }

    #[cfg(test)]
    fn state(&self, namespace: &str) -> Option<(usize, Vec<String>)> {
        let namespaces = self.lock();
        let entry = namespaces.get(namespace)?;
        let deferred = entry.deferred.iter().map(|k| k.name.clone()).collect();
        Some((entry.running, deferred))
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let next = {
            let mut namespaces = self.share.lock();
            let Some(entry) = namespaces.get_mut(&self.namespace) else {
                return;
            };
            entry.running = entry.running.saturating_sub(1);
            let next = entry.deferred.pop_front();
            if entry.running == 0 && entry.deferred.is_empty() {
                namespaces.remove(&self.namespace);
            }
            next
        };
        if let Some(pm) = next {
            // Fails only once the controller has stopped: nothing left to run it.
            let _ = self.trigger.unbounded_send(pm);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures::channel::mpsc;

    fn key(ns: &str, name: &str) -> Key {
        ObjectRef::new(name).within(ns)
    }

    #[test]
    fn a_namespace_never_holds_every_worker_and_its_deferred_passes_run_as_its_own_end() {
        let (tx, mut queued) = mpsc::unbounded();
        let trigger = Trigger::new(tx);
        let share = NamespaceShare::new(4, None);
        let a: Vec<Pass<'_>> = (0..3)
            .map(|i| share.enter(&key("a", &format!("pm{i}")), &trigger).unwrap())
            .collect();
        // The fourth worker is left to other namespaces.
        assert!(share.enter(&key("a", "pm3"), &trigger).is_none());
        assert!(share.enter(&key("a", "pm4"), &trigger).is_none());
        assert!(
            share.enter(&key("a", "pm3"), &trigger).is_none(),
            "deferred once"
        );
        assert_eq!(
            share.state("a"),
            Some((3, vec!["pm3".to_string(), "pm4".to_string()]))
        );
        let b = share.enter(&key("b", "victim"), &trigger);
        assert!(b.is_some(), "another namespace runs beside the busy one");
        assert!(queued.try_recv().is_err(), "nothing queued again yet");

        // Each pass of `a` that ends queues one deferred PortMapping of `a`, in order.
        let mut a = a.into_iter();
        drop(a.next());
        assert_eq!(queued.try_recv().unwrap(), key("a", "pm3"));
        assert!(queued.try_recv().is_err());
        drop(b);
        assert!(
            queued.try_recv().is_err(),
            "the end of b's pass queues nothing of a's"
        );
        drop(a.next());
        assert_eq!(queued.try_recv().unwrap(), key("a", "pm4"));
        drop(a.next());
        assert!(queued.try_recv().is_err());
        assert_eq!(share.state("a"), None, "nothing kept once idle");
        assert_eq!(share.state("b"), None);
    }

    #[test]
    fn a_forgotten_portmapping_is_not_queued_again() {
        let (tx, mut queued) = mpsc::unbounded();
        let trigger = Trigger::new(tx);
        let share = NamespaceShare::new(2, None);
        let running = share.enter(&key("a", "pm0"), &trigger).unwrap();
        assert!(share.enter(&key("a", "gone"), &trigger).is_none());
        share.forget(&key("a", "gone"));
        drop(running);
        assert!(queued.try_recv().is_err());
        assert_eq!(share.state("a"), None);
    }

    #[test]
    fn one_watched_namespace_or_one_worker_defers_nothing() {
        let (tx, _queued) = mpsc::unbounded();
        let trigger = Trigger::new(tx);
        let single = NamespaceShare::new(4, Some("shop"));
        let held: Vec<Pass<'_>> = (0..10)
            .filter_map(|i| single.enter(&key("shop", &format!("pm{i}")), &trigger))
            .collect();
        assert_eq!(held.len(), 10);
        let one = NamespaceShare::new(1, None);
        assert!(one.enter(&key("a", "pm0"), &trigger).is_some());
    }
}
