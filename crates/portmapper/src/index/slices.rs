//! Our EndpointSlices: by owner, orphans by Service, the pods they publish, our own writes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_core::compact_slice::CompactSlice;

use portmapper_core::ownership::LABEL_SERVICE_NAME;

use crate::index::own_writes::{Answered, Observed};

use super::names::{drop_name, put_name};
use super::{
    Index, OurSlice, OwnedFootprint, PmKey, insert, missing, ns_of, orphan_service,
    portmapping_controller, remove,
};

impl Index {
    /// One of our slices was added or changed; the index keeps it, compact. Affected: its
    /// controller; for an orphan, the PortMappings of its Service (which adopt it); and
    /// PortMappings whose publication of its pods changed are found through the owner.
    pub fn apply_slice(&mut self, slice: EndpointSlice) -> Vec<PmKey> {
        let key = ObjectRef::from_obj(&slice);
        let ns = ns_of(&slice);
        let footprint = OwnedFootprint {
            owner: portmapping_controller(&slice),
            orphan_of: orphan_service(&slice),
            service: slice.labels().get(LABEL_SERVICE_NAME).cloned(),
        };
        put_name(&mut self.our_names, &ns, &slice.metadata);
        let object = Arc::new(CompactSlice::new(slice, |uid| self.shared_uid(uid)));
        let new = OurSlice { object, footprint };
        let observed = self.own_writes.observed(&key, new.resource_version());
        self.doubt_resolved(&ns, &key.name);
        let mut affected = HashSet::new();
        let written_by = |f: &OwnedFootprint, uid: &str| {
            f.owner.as_ref().is_some_and(|(_, u)| u == uid) && f.orphan_of.is_none()
        };
        // The echo of a write, to the PortMapping that made it, is what its plan already
        // decided: waking it would only plan again to find nothing to do (at 10,000 pods, two
        // of every three reconciles after a pod flip). Unless a reconcile of it was put off
        // until this write showed, or the slice changed hands.
        let mut echo_of = match &observed {
            Observed::Echo { owner, wake: false } | Observed::InFlight { owner } => {
                Some(owner.as_str())
            }
            _ => None,
        }
        .filter(|uid| written_by(&new.footprint, uid));
        if let Some(old) = self.slices.remove(&key) {
            if echo_of.is_some_and(|uid| !written_by(&old.footprint, uid)) {
                echo_of = None;
            }
            self.collect_owned(&ns, &old.footprint, &mut affected);
            self.unregister_slice(&key, &old);
        }
        self.collect_owned(&ns, &new.footprint, &mut affected);
        if echo_of.is_some()
            && let Some((pm, _)) = &new.footprint.owner
        {
            affected.remove(pm);
        }
        self.register_slice(&key, &new);
        self.slices.insert(key, new);
        affected.into_iter().collect()
    }

    /// Indexes `slice` by owner (and the pods it publishes) or, an orphan, by Service.
    fn register_slice(&mut self, key: &ObjectRef<EndpointSlice>, slice: &OurSlice) {
        if let Some((pm, uid)) = &slice.footprint.owner {
            insert(&mut self.slices_by_owner, uid.clone(), key.clone());
            let shared = Arc::new(pm.clone());
            for e in &slice.object.endpoints {
                let Some(pod) = e.target_uid() else {
                    continue;
                };
                let pod = match e.shared_uid() {
                    Some(shared) => shared.clone(),
                    None => self.shared_uid(pod),
                };
                let by_pm = self.published.entry(pod).or_default();
                match by_pm.iter_mut().find(|(k, _)| **k == *pm) {
                    Some((_, n)) => *n += 1,
                    None => {
                        // A first push would reserve room for four: 0.3 KiB per published pod
                        // for the one PortMapping nearly every pod has.
                        by_pm.reserve_exact(1);
                        by_pm.push((shared.clone(), 1));
                    }
                }
            }
        }
        if let Some(svc) = &slice.footprint.orphan_of {
            let ns = key.namespace.clone().unwrap_or_default();
            insert(&mut self.orphans_by_service, (ns, svc.clone()), key.clone());
        }
    }

    /// One of our slices is gone: its owner, and every PortMapping of its Service (its name is
    /// free now, e.g. for the PortMapping that takes over a deleted publisher's Service).
    pub fn delete_slice(&mut self, key: &ObjectRef<EndpointSlice>) -> Vec<PmKey> {
        let ours = self.own_writes.awaits_gone(key);
        self.own_writes.observed_gone(key);
        let mut affected = HashSet::new();
        let ns = key.namespace.as_deref().unwrap_or_default();
        let known_elsewhere = self
            .foreign_names
            .get(ns)
            .is_some_and(|n| n.contains_key(&key.name));
        if !ours && !known_elsewhere && self.slices.contains_key(key) {
            self.in_doubt
                .entry(ns.to_owned())
                .or_default()
                .insert(key.name.clone());
        }
        drop_name(&mut self.our_names, ns, &key.name);
        if let Some(old) = self.slices.remove(key) {
            let ns = key.namespace.clone().unwrap_or_default();
            if let Some(svc) = &old.footprint.service {
                affected.extend(
                    self.pms_by_service
                        .get(&(ns.clone(), svc.clone()))
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
            self.collect_owned(&ns, &old.footprint, &mut affected);
            self.unregister_slice(key, &old);
        }
        affected.into_iter().collect()
    }

    /// After a relist of our slices: forgets those not in `present`.
    pub fn retain_slices(&mut self, present: &HashSet<ObjectRef<EndpointSlice>>) -> Vec<PmKey> {
        self.slices_listed = true;
        let gone = missing(self.slices.keys(), present);
        self.delete_each(gone, Self::delete_slice)
    }

    /// Whether our slices' watch has listed once.
    pub fn slices_listed(&self) -> bool {
        self.slices_listed
    }

    /// The PortMapping with UID `owner` is about to apply `slice`: the slice's events are not
    /// taken for someone else's change until the answer says whose they were.
    pub fn applying_slice(&mut self, owner: &str, slice: ObjectRef<EndpointSlice>, now: Instant) {
        self.own_writes.applying(owner, slice, now);
    }

    /// The PortMapping with UID `owner` applied `slice` and the API server answered with
    /// `resource_version`. Nothing to await when the watch already brought that version;
    /// [`Answered::Wake`] when it brought something else meanwhile.
    pub fn wrote_slice(
        &mut self,
        owner: &str,
        slice: ObjectRef<EndpointSlice>,
        resource_version: String,
        now: Instant,
    ) -> Answered {
        let cached = self
            .slices
            .get(&slice)
            .is_some_and(|s| s.resource_version() == Some(resource_version.as_str()));
        self.own_writes
            .answered(owner, slice, resource_version, cached, now)
    }

    /// The apply of `slice` by the PortMapping with UID `owner` failed, or its answer named no
    /// version.
    pub fn apply_failed(&mut self, owner: &str, slice: &ObjectRef<EndpointSlice>) -> Answered {
        self.own_writes.apply_failed(owner, slice)
    }

    /// The PortMapping with UID `owner` deleted `slice`. Nothing to await when the watch
    /// already removed it.
    pub fn deleted_slice(&mut self, owner: &str, slice: ObjectRef<EndpointSlice>, now: Instant) {
        if self.slices.contains_key(&slice) {
            self.own_writes.deleted(owner, slice, now);
        }
    }

    /// Whether a slice write of the PortMapping with UID `owner` has not reached the cache.
    pub fn own_writes_pending(&mut self, owner: &str, now: Instant) -> bool {
        self.own_writes.pending(owner, now)
    }

    /// `uid` as `published` already holds it (one allocation per published pod), or new.
    fn shared_uid(&self, uid: &str) -> Arc<str> {
        match self.published.get_key_value(uid) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(uid),
        }
    }

    pub(super) fn collect_owned(
        &self,
        ns: &str,
        footprint: &OwnedFootprint,
        out: &mut HashSet<PmKey>,
    ) {
        if let Some((pm, _)) = &footprint.owner {
            out.insert(pm.clone());
        }
        if let Some(svc) = &footprint.orphan_of {
            out.extend(
                self.pms_by_service
                    .get(&(ns.to_owned(), svc.clone()))
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
    }

    pub(super) fn unregister_slice(&mut self, key: &ObjectRef<EndpointSlice>, old: &OurSlice) {
        if let Some((pm, uid)) = &old.footprint.owner {
            remove(&mut self.slices_by_owner, uid, key);
            for pod in old.object.endpoints.iter().filter_map(|e| e.target_uid()) {
                if let Some(by_pm) = self.published.get_mut(pod) {
                    if let Some(at) = by_pm.iter().position(|(k, _)| **k == *pm) {
                        by_pm[at].1 -= 1;
                        if by_pm[at].1 == 0 {
                            by_pm.swap_remove(at);
                        }
                    }
                    if by_pm.is_empty() {
                        self.published.remove(pod);
                    }
                }
            }
        }
        if let Some(svc) = &old.footprint.orphan_of {
            let ns = key.namespace.clone().unwrap_or_default();
            remove(&mut self.orphans_by_service, &(ns, svc.clone()), key);
        }
    }

    /// Our slices controlled by the PortMapping with `uid` or by one of `also` (PortMappings it
    /// takes over from), plus orphans of `adopt_for` (a Service in `namespace`), which the
    /// planner adopts.
    pub fn owned_slices(
        &self,
        uid: &str,
        also: &[String],
        namespace: &str,
        adopt_for: Option<&str>,
    ) -> Vec<Arc<CompactSlice>> {
        let owned = std::iter::once(uid)
            .chain(also.iter().map(String::as_str))
            .filter_map(|u| self.slices_by_owner.get(u))
            .flatten();
        let orphans = adopt_for
            .and_then(|svc| {
                self.orphans_by_service
                    .get(&(namespace.to_owned(), svc.to_owned()))
            })
            .into_iter()
            .flatten();
        owned
            .chain(orphans)
            .filter_map(|k| Some(self.slices.get(k)?.object.clone()))
            .collect()
    }
}
