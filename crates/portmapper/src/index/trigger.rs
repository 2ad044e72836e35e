//! Where reconciles are queued: the sending end of the Controller's `reconcile_on` channel,
//! which every watch event that touches a PortMapping and every probe membership flip goes
//! through, and how many were queued per PortMapping (with its resourceVersion, what a quiet
//! pass compares: see [`crate::reconcile::state`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::channel::mpsc::{TrySendError, UnboundedSender};
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;

type Key = ObjectRef<PortMapping>;

/// The reconcile queue's sending end, and the count of reconciles queued per PortMapping.
#[derive(Clone)]
pub struct Trigger {
    tx: UnboundedSender<Key>,
    /// Since this process started, or since the PortMapping was forgotten.
    queued: Arc<Mutex<HashMap<Key, u64>>>,
}

impl Trigger {
    /// A trigger feeding `tx`.
    pub fn new(tx: UnboundedSender<Key>) -> Self {
        Self {
            tx,
            queued: Arc::default(),
        }
    }

    fn counts(&self) -> MutexGuard<'_, HashMap<Key, u64>> {
        self.queued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a reconcile; fails once the controller has stopped. Counted first, so the next
    /// pass of `target` plans even if it was settled.
    pub fn unbounded_send(&self, target: Key) -> Result<(), TrySendError<Key>> {
        *self.counts().entry(target.clone()).or_default() += 1;
        self.tx.unbounded_send(target)
    }

    /// Reconciles queued for `pm` so far.
    pub fn queued(&self, pm: &Key) -> u64 {
        self.counts().get(pm).copied().unwrap_or(0)
    }

    /// Forgets `pm`'s count.
    pub fn forget(&self, pm: &Key) {
        self.counts().remove(pm);
    }
}
