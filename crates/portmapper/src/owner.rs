//! Ownership: which PortMapping controls an object, judged by its controller ownerReference.

use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;

/// The PortMapping that is the controller owner of `obj`, if any.
pub fn portmapping_owner<K: Resource>(obj: &K) -> Option<ObjectRef<PortMapping>> {
    let ns = obj.meta().namespace.clone()?;
    obj.owner_references()
        .iter()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == "PortMapping"
                && o.api_version
                    .starts_with(&format!("{}/", portmapper_api::GROUP))
        })
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

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
