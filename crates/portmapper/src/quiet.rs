//! Quiet passes: a resync reconciles every PortMapping, and one whose inputs have not changed
//! since a pass that wrote nothing would plan the same nothing again (at 1,000 PortMappings,
//! about 0.3 s of CPU every resync). Such a pass is skipped.
//!
//! "Its inputs have not changed" is read from two things: the PortMapping's resourceVersion
//! (its spec, labels, annotations and status), and how many reconciles were queued for it
//! through [`crate::watches::Trigger`], which every watch event that touches it (pods, slices,
//! its Service, nodes, Endpoints) and every probe membership flip goes through. The count is
//! read before the pass reads any input, so an event during the pass makes the next one plan.
//!
//! Only a pass that read nothing but the caches may be taken as settled: one that probes the
//! network, reads the API server (an Endpoints object not in our cache, names in doubt) or is
//! in the middle of a selector migration is planned at every resync, as before.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;

type Key = ObjectRef<PortMapping>;

/// What a pass saw of a PortMapping's inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    resource_version: Option<String>,
    queued: u64,
}

#[derive(Default)]
struct Inner {
    /// Reconciles queued per PortMapping since this process started (or since it was forgotten).
    queued: HashMap<Key, u64>,
    /// The fingerprint of each PortMapping's last pass that wrote nothing and read only caches.
    settled: HashMap<Key, Fingerprint>,
}

/// Queued reconciles and settled passes, per PortMapping.
#[derive(Default)]
pub struct QuietPasses {
    inner: Mutex<Inner>,
}

impl QuietPasses {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A reconcile of `pm` was queued: something it reads changed.
    pub fn queued(&self, pm: &Key) {
        let mut inner = self.lock();
        match inner.queued.get_mut(pm) {
            Some(n) => *n += 1,
            None => {
                inner.queued.insert(pm.clone(), 1);
            }
        }
    }

    /// What this pass of `pm` starts from; read before any other input.
    pub fn fingerprint(&self, pm: &PortMapping, key: &Key) -> Fingerprint {
        Fingerprint {
            resource_version: pm.metadata.resource_version.clone(),
            queued: self.lock().queued.get(key).copied().unwrap_or(0),
        }
    }

    /// Whether a pass that starts from `seen` would find what the last settled pass found.
    /// Otherwise the settled pass is forgotten, so a pass that fails cannot leave it behind.
    pub fn is_quiet(&self, key: &Key, seen: &Fingerprint) -> bool {
        let mut inner = self.lock();
        if inner.settled.get(key) == Some(seen) {
            return true;
        }
        inner.settled.remove(key);
        false
    }

    /// The pass that started from `seen` wrote nothing and read only caches.
    pub fn settled(&self, key: &Key, seen: Fingerprint) {
        self.lock().settled.insert(key.clone(), seen);
    }

    /// The next pass of `pm` plans, whatever it starts from (this replica stopped leading).
    pub fn unsettle(&self, key: &Key) {
        self.lock().settled.remove(key);
    }

    /// Forgets a deleted PortMapping.
    pub fn forget(&self, key: &Key) {
        let mut inner = self.lock();
        inner.queued.remove(key);
        inner.settled.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm(rv: &str) -> PortMapping {
        let mut pm = PortMapping::new("web", test_support::spec("web", "app"));
        pm.metadata.namespace = Some("default".into());
        pm.metadata.resource_version = Some(rv.into());
        pm
    }

    #[test]
    fn a_pass_is_quiet_only_while_nothing_it_reads_has_changed() {
        let quiet = QuietPasses::default();
        let key = Key::new("web").within("default");
        let first = quiet.fingerprint(&pm("1"), &key);
        assert!(!quiet.is_quiet(&key, &first), "nothing is settled yet");
        quiet.settled(&key, first.clone());
        assert!(quiet.is_quiet(&key, &quiet.fingerprint(&pm("1"), &key)));
        // A new version of the PortMapping (its spec, or its status written by someone else).
        assert!(!quiet.is_quiet(&key, &quiet.fingerprint(&pm("2"), &key)));
        // The settled pass was forgotten by the look that failed.
        assert!(!quiet.is_quiet(&key, &first));
        quiet.settled(&key, first.clone());
        // An event queued a reconcile: a pod, a slice, the Service, a probe flip.
        quiet.queued(&key);
        let after = quiet.fingerprint(&pm("1"), &key);
        assert_ne!(after, first);
        assert!(!quiet.is_quiet(&key, &after));
        // Another PortMapping's events are not this one's.
        quiet.settled(&key, after.clone());
        quiet.queued(&Key::new("other").within("default"));
        assert!(quiet.is_quiet(&key, &quiet.fingerprint(&pm("1"), &key)));
        quiet.unsettle(&key);
        assert!(!quiet.is_quiet(&key, &after));
        quiet.settled(&key, after.clone());
        quiet.forget(&key);
        assert!(!quiet.is_quiet(&key, &after));
    }
}
