//! The `PortMapping` custom resource (`portmapper.dev/v1alpha1`).
//!
//! A PortMapping names a selector-less Service, a pod pool and per-port membership rules; the
//! operator publishes one EndpointSlice set per Service port from it.

pub mod check;
pub mod crd;
pub mod fields;
pub mod network_key;
pub mod reference;
pub mod rules;
mod selector;
pub mod spec;
pub mod status;
pub mod validate;

pub use check::{ApiKind, Check, CheckClass, CheckKind, LeafCheck, NetworkKind};
pub use fields::KeySource;
pub use network_key::{CheckPosition, IpFamily, NetworkKey};
pub use spec::{
    DEFAULT_GATE_CONDITION_TYPE, PodPool, PortMapping, PortMappingSpec, PortRule, ProbeSettings,
    ReadinessGate, ServiceRef, SliceGrouping, TerminatingEndpoints, UnlistedPorts,
};
pub use status::{ExcludedPod, PortMappingStatus, PortStatus};

/// API group of every portmapper resource.
pub const GROUP: &str = "portmapper.dev";
/// Field manager and `endpointslice.kubernetes.io/managed-by` value of the operator.
pub const MANAGER: &str = "portmapper.dev";
