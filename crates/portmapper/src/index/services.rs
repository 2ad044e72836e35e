//! Services: a Service event reaches the PortMappings that name it.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;

use super::{Index, PmKey, dedup};

impl Index {
    /// A Service was added, changed or deleted: the PortMappings naming it.
    pub fn service_changed(&self, svc: &ObjectRef<Service>) -> Vec<PmKey> {
        self.pms_by_service
            .get(&(svc.namespace.clone().unwrap_or_default(), svc.name.clone()))
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// After a relist of Services: the PortMappings whose Service the new list lacks (it was
    /// deleted while the watch was down).
    pub fn services_missing(&self, present: &HashSet<ObjectRef<Service>>) -> Vec<PmKey> {
        let mut out = Vec::new();
        for ((ns, name), pms) in &self.pms_by_service {
            if !present.contains(&ObjectRef::new(name).within(ns)) {
                out.extend(pms.iter().cloned());
            }
        }
        dedup(out)
    }
}
