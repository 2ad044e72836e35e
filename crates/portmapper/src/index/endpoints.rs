//! Our Endpoints objects, by owner.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Endpoints;
use kube::runtime::reflector::ObjectRef;

use super::{
    Index, OwnedFootprint, PmKey, dedup, insert, missing, ns_of, orphan_service,
    portmapping_controller, remove,
};

impl Index {
    /// One of our Endpoints objects was added or changed: its controller (or, for an orphan,
    /// the PortMappings of its Service).
    pub fn apply_endpoints(&mut self, endpoints: &Endpoints) -> Vec<PmKey> {
        let key = ObjectRef::from_obj(endpoints);
        let footprint = OwnedFootprint {
            owner: portmapping_controller(endpoints),
            orphan_of: orphan_service(endpoints),
            service: None,
        };
        let mut affected = self.delete_endpoints(&key);
        let mut more = HashSet::new();
        self.collect_owned(&ns_of(endpoints), &footprint, &mut more);
        affected.extend(more);
        if let Some((_, uid)) = &footprint.owner {
            insert(&mut self.endpoints_by_owner, uid.clone(), key.clone());
        }
        self.endpoints.insert(key, footprint);
        dedup(affected)
    }

    /// One of our Endpoints objects is gone.
    pub fn delete_endpoints(&mut self, key: &ObjectRef<Endpoints>) -> Vec<PmKey> {
        let Some(old) = self.endpoints.remove(key) else {
            return Vec::new();
        };
        if let Some((_, uid)) = &old.owner {
            remove(&mut self.endpoints_by_owner, uid, key);
        }
        let mut out = HashSet::new();
        self.collect_owned(key.namespace.as_deref().unwrap_or_default(), &old, &mut out);
        out.into_iter().collect()
    }

    /// After a relist of our Endpoints objects: forgets those not in `present`.
    pub fn retain_endpoints(&mut self, present: &HashSet<ObjectRef<Endpoints>>) -> Vec<PmKey> {
        let gone = missing(self.endpoints.keys(), present);
        self.delete_each(gone, Self::delete_endpoints)
    }

    /// Our Endpoints objects controlled by the PortMapping with `uid`.
    pub fn owned_endpoints(&self, uid: &str) -> Vec<ObjectRef<Endpoints>> {
        self.endpoints_by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}
