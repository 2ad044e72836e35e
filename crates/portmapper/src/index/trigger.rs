//! Where reconciles are queued: the sending end of the Controller's `reconcile_on` channel,
//! which every watch event that touches a PortMapping and every probe membership flip goes
//! through, and how many were queued per PortMapping (with its resourceVersion, what a quiet
//! pass compares: see [`crate::reconcile::state`]).
//!
//! A PortMapping waits in the channel at most once: a trigger for one already waiting is
//! counted but not sent again, since the waiting one brings a pass that reads the index after
//! this event too. The channel is unbounded, and without this it held one entry per event
//! until the Controller drained it: about 2 million (193 MB) while 5,000 PortMappings of 10
//! pods each were first published.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::Stream;
use futures::StreamExt;
use futures::channel::mpsc::{TrySendError, UnboundedReceiver, UnboundedSender};
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;

type Key = ObjectRef<PortMapping>;

/// One PortMapping's reconciles queued, and whether one waits in the channel.
#[derive(Debug, Default, Clone, Copy)]
struct Queued {
    /// Since this process started, or since the PortMapping was forgotten.
    count: u64,
    /// Sent, and not yet taken from the channel.
    waiting: bool,
}

/// The reconcile queue's sending end, and the count of reconciles queued per PortMapping.
#[derive(Clone)]
pub struct Trigger {
    tx: UnboundedSender<Key>,
    queued: Arc<Mutex<HashMap<Key, Queued>>>,
}

impl Trigger {
    /// A trigger feeding `tx`; the receiving end is read through [`Trigger::taking`].
    pub fn new(tx: UnboundedSender<Key>) -> Self {
        Self {
            tx,
            queued: Arc::default(),
        }
    }

    fn counts(&self) -> MutexGuard<'_, HashMap<Key, Queued>> {
        self.queued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a reconcile; fails once the controller has stopped. Counted first, so the next
    /// pass of `target` plans even if it was settled; sent only if `target` is not waiting in
    /// the channel already.
    pub fn unbounded_send(&self, target: Key) -> Result<(), TrySendError<Key>> {
        let mut counts = self.counts();
        let queued = counts.entry(target.clone()).or_default();
        queued.count += 1;
        if queued.waiting {
            return Ok(());
        }
        queued.waiting = true;
        // Under the lock: `taking` clears `waiting` only after the key has left the channel.
        self.tx.unbounded_send(target)
    }

    /// The channel's receiving end as the Controller reads it: each key taken is no longer
    /// waiting, so the next trigger for it is sent.
    pub fn taking(&self, rx: UnboundedReceiver<Key>) -> impl Stream<Item = Key> + use<> {
        let queued = self.queued.clone();
        rx.map(move |key| {
            let mut counts = queued.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(q) = counts.get_mut(&key) {
                q.waiting = false;
            }
            key
        })
    }

    /// Reconciles queued for `pm` so far.
    pub fn queued(&self, pm: &Key) -> u64 {
        self.counts().get(pm).map_or(0, |q| q.count)
    }

    /// Forgets `pm`'s count.
    pub fn forget(&self, pm: &Key) {
        self.counts().remove(pm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ObjectRef::new(name).within("ns")
    }

    #[tokio::test]
    async fn a_portmapping_waits_in_the_channel_once_and_every_trigger_is_counted() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let trigger = Trigger::new(tx);
        let mut taken = Box::pin(trigger.taking(rx));
        for _ in 0..1000 {
            trigger.unbounded_send(key("a")).unwrap();
        }
        trigger.unbounded_send(key("b")).unwrap();
        assert_eq!(trigger.queued(&key("a")), 1000);
        assert_eq!(taken.next().await, Some(key("a")));
        assert_eq!(taken.next().await, Some(key("b")));
        // Nothing more waits: the 999 other triggers of `a` were folded into the one taken.
        assert!(
            futures::FutureExt::now_or_never(taken.next()).is_none(),
            "the channel is empty"
        );
        // Once taken, the next trigger is sent again.
        trigger.unbounded_send(key("a")).unwrap();
        assert_eq!(taken.next().await, Some(key("a")));
        assert_eq!(trigger.queued(&key("a")), 1001);
    }

    #[tokio::test]
    async fn a_forgotten_portmapping_is_sent_again() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let trigger = Trigger::new(tx);
        let mut taken = Box::pin(trigger.taking(rx));
        trigger.unbounded_send(key("a")).unwrap();
        trigger.forget(&key("a"));
        trigger.unbounded_send(key("a")).unwrap();
        assert_eq!(taken.next().await, Some(key("a")));
        assert_eq!(taken.next().await, Some(key("a")));
    }
}
