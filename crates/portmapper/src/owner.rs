//! Ownership: which PortMapping controls an object, judged by its controller ownerReference.

use kube::Resource;
use kube::ResourceExt;

/// Whether `obj` is controlled by the PortMapping with `uid`.
pub fn controlled_by<K: Resource>(obj: &K, uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Whether `obj` is an orphan of Service `service`: labelled as ours for that Service, with no
/// controller at all (its PortMapping was deleted with `--cascade=orphan`).
pub fn orphan_of<K: Resource>(obj: &K, service: &str) -> bool {
    let labels = obj.labels();
    labels
        .get("endpointslice.kubernetes.io/managed-by")
        .is_some_and(|m| m == portmapper_api::MANAGER)
        && labels
            .get("kubernetes.io/service-name")
            .is_some_and(|s| s == service)
        && !obj
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true))
}
