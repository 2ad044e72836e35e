//! PortMapping specs with every optional field as the API server defaults it.

use portmapper_api::{KeySource, PodPool, PortMapping, PortMappingSpec, ServiceRef};

/// A spec for Service `service` over the pods whose label `pool_key` equals the Service's name,
/// with no port rules and every other field at its CRD default. Tests set the fields they are
/// about on the result.
pub fn spec(service: &str, pool_key: &str) -> PortMappingSpec {
    PortMappingSpec {
        service_ref: ServiceRef {
            name: service.into(),
        },
        pods: PodPool {
            key: pool_key.into(),
            from: KeySource::Label,
            value: None,
            selector: None,
        },
        ports: vec![],
        default_checks: None,
        unlisted_ports: Default::default(),
        publish_not_ready_addresses: None,
        terminating_endpoints: Default::default(),
        max_endpoints_per_slice: 100,
        slice_grouping: Default::default(),
        legacy_endpoints: false,
        native_cleanup: true,
        probe: Default::default(),
        readiness_gate: None,
    }
}

/// PortMapping `name` in `namespace`, with a UID (owner references need one).
pub fn port_mapping(name: &str, namespace: &str, spec: PortMappingSpec) -> PortMapping {
    let mut pm = PortMapping::new(name, spec);
    pm.metadata.namespace = Some(namespace.into());
    pm.metadata.uid = Some(format!("{name}-uid"));
    pm
}
