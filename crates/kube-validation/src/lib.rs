//! Pure Kubernetes API validation: the rules the apiserver enforces on the objects portmapper
//! writes (EndpointSlice, Endpoints) and on those an API server emulator must police, with
//! field errors rendered exactly like the apiserver's (`endpoints[0].addresses[0]: Invalid
//! value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`) and the 422
//! message assembled by [`status::invalid_message`].
//!
//! Functions take typed k8s-openapi objects. Call the `default_*` function of a type first, as
//! the apiserver defaults before it validates.
//!
//! Covered: ObjectMeta (create and update), EndpointSlice, Endpoints, Service (without IP and
//! nodePort allocation), Lease, events.k8s.io/v1 Event, and the name/label/IP helpers they use.
//! [`field::FieldError`] is also the field error of `apiserver-semantics` (CRD schema
//! validation), whose bad values are decoded JSON (`BadValue: From<serde_json::Value>`).
//!
//! Known differences from the apiserver:
//! - Composite bad values (owner references, service port keys, object references) are printed
//!   readably; Go prints them with `%#v`. Strings, numbers and string slices match exactly.
//! - IPs are parsed like `netutils.ParseIPSloppy` (leading zeros accepted, as with the
//!   `StrictIPCIDRValidation` gate off); non-canonical forms are accepted, not warned about.
//! - Feature-gated fields follow the 1.34 defaults (e.g. all three `trafficDistribution` values).

pub mod endpoints;
pub mod endpointslice;
pub mod event;
pub mod field;
pub mod ip;
pub mod lease;
pub mod meta;
pub mod names;
pub mod pod;
pub mod service;
pub mod status;

pub use endpoints::{default_endpoints, validate_endpoints, validate_endpoints_update};
pub use endpointslice::{
    default_endpoint_slice, validate_endpoint_slice, validate_endpoint_slice_update,
};
pub use event::{validate_core_event, validate_event_create, validate_event_update};
pub use field::{BadValue, ErrorList, ErrorType, FieldError, FieldPath};
pub use ip::IpFamily;
pub use lease::{validate_lease, validate_lease_update};
pub use pod::{validate_pod, validate_pod_update};
pub use service::{
    default_service, init_ip_family_fields, validate_service, validate_service_update,
};
pub use status::{InvalidError, StatusCause, invalid_message};
