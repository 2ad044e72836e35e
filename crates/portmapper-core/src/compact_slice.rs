//! Our EndpointSlices as the operator holds them: the metadata, address type and ports as the
//! API gives them, and each endpoint in a compact form. A k8s-openapi `Endpoint` is some 350
//! bytes before its strings (its `targetRef` alone is seven optional strings), and the operator
//! keeps one per published pod: 23.5 MB of the heap at 50,000 pods (docs/benchmarks.md, "Heap
//! profile"). The compact form keeps what our own endpoints carry (one address, a Pod target,
//! conditions, node, zone, hostname, hints) with the node, zone and namespace
//! [interned](crate::interned) and the pod UID shared with whoever gives it; any other shape
//! (someone edited the slice) is kept as the `Endpoint` it is, so nothing is lost and a tampered
//! endpoint still reads as tampered. Planned slices take the same form, so the planner reads
//! one type; only a slice to write is turned back into an `EndpointSlice`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::interned::intern;

/// An EndpointSlice with compact endpoints. The fields are named as `EndpointSlice`'s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompactSlice {
    /// `metadata`, as the API gives it (less what the watch strips).
    pub metadata: ObjectMeta,
    /// `addressType`.
    pub address_type: String,
    /// `ports`.
    pub ports: Option<Vec<EndpointPort>>,
    /// `endpoints`.
    pub endpoints: Vec<CompactEndpoint>,
}

impl CompactSlice {
    /// `slice` made compact; `uid` gives the shared copy of a pod UID (the index hands out the
    /// one its published pods are keyed by).
    pub fn new(slice: EndpointSlice, mut uid: impl FnMut(&str) -> Arc<str>) -> Self {
        // A fresh vector, not `collect()`: that reuses the decoded `Vec<Endpoint>`'s buffer in
        // place, and the compact endpoints would keep its 350 bytes per endpoint (and the
        // decoder's spare capacity) for as long as the slice is held.
        let mut endpoints = Vec::with_capacity(slice.endpoints.len());
        endpoints.extend(
            slice
                .endpoints
                .into_iter()
                .map(|e| CompactEndpoint::new(e, &mut uid)),
        );
        Self {
            metadata: slice.metadata,
            address_type: slice.address_type,
            ports: slice.ports,
            endpoints,
        }
    }

    /// The slice as the API takes it (for a write, or to show it).
    pub fn to_endpoint_slice(&self) -> EndpointSlice {
        EndpointSlice {
            metadata: self.metadata.clone(),
            address_type: self.address_type.clone(),
            ports: self.ports.clone(),
            endpoints: self
                .endpoints
                .iter()
                .map(CompactEndpoint::to_endpoint)
                .collect(),
        }
    }
}

impl From<EndpointSlice> for CompactSlice {
    /// Every UID its own allocation: for slices nobody keeps long (tests, tools).
    fn from(slice: EndpointSlice) -> Self {
        Self::new(slice, |uid| Arc::from(uid))
    }
}

/// One endpoint: the shape our slices carry, compact, or any other as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactEndpoint(Shape);

#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Pod(PodEndpoint),
    Other(Box<Endpoint>),
}

/// An endpoint with one address and a `targetRef` of kind Pod with a namespace, name and UID
/// only (what [`build_endpoint`](crate::planner::objects::build_endpoint) renders).
#[derive(Clone, Debug, PartialEq)]
struct PodEndpoint {
    address: Box<str>,
    conditions: Option<EndpointConditions>,
    hints: Option<Box<EndpointHints>>,
    hostname: Option<Box<str>>,
    node_name: Option<Arc<str>>,
    zone: Option<Arc<str>>,
    namespace: Arc<str>,
    name: Box<str>,
    uid: Arc<str>,
}

/// An endpoint's `targetRef`, borrowed: the fields the planner and its readers compare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetRef<'a> {
    pub kind: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub uid: Option<&'a str>,
}

impl CompactEndpoint {
    /// `e` made compact when it has our shape; `uid` gives the shared copy of its pod UID.
    pub fn new(e: Endpoint, uid: impl FnOnce(&str) -> Arc<str>) -> Self {
        if !PodEndpoint::fits(&e) {
            return Self(Shape::Other(Box::new(e)));
        }
        let target = e.target_ref.unwrap_or_default();
        let text = |s: Option<String>| s.unwrap_or_default();
        Self(Shape::Pod(PodEndpoint {
            address: e.addresses.into_iter().next().unwrap_or_default().into(),
            conditions: e.conditions,
            hints: e.hints.map(Box::new),
            hostname: e.hostname.map(String::into_boxed_str),
            node_name: e.node_name.as_deref().map(intern),
            zone: e.zone.as_deref().map(intern),
            namespace: intern(&text(target.namespace)),
            name: text(target.name).into(),
            uid: uid(&text(target.uid)),
        }))
    }

    /// The endpoint as the API stores it.
    pub fn to_endpoint(&self) -> Endpoint {
        match &self.0 {
            Shape::Pod(p) => p.to_endpoint(),
            Shape::Other(e) => e.as_ref().clone(),
        }
    }

    /// `addresses`.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        let (one, many): (Option<&str>, &[String]) = match &self.0 {
            Shape::Pod(p) => (Some(&p.address), &[]),
            Shape::Other(e) => (None, &e.addresses),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }

    /// The one address, when there is exactly one.
    pub fn only_address(&self) -> Option<&str> {
        match &self.0 {
            Shape::Pod(p) => Some(&p.address),
            Shape::Other(e) => match e.addresses.as_slice() {
                [only] => Some(only),
                _ => None,
            },
        }
    }

    /// `conditions`.
    pub fn conditions(&self) -> Option<&EndpointConditions> {
        match &self.0 {
            Shape::Pod(p) => p.conditions.as_ref(),
            Shape::Other(e) => e.conditions.as_ref(),
        }
    }

    /// `hints`.
    pub fn hints(&self) -> Option<&EndpointHints> {
        match &self.0 {
            Shape::Pod(p) => p.hints.as_deref(),
            Shape::Other(e) => e.hints.as_ref(),
        }
    }

    /// `hostname`.
    pub fn hostname(&self) -> Option<&str> {
        match &self.0 {
            Shape::Pod(p) => p.hostname.as_deref(),
            Shape::Other(e) => e.hostname.as_deref(),
        }
    }

    /// `nodeName`.
    pub fn node_name(&self) -> Option<&str> {
        match &self.0 {
            Shape::Pod(p) => p.node_name.as_deref(),
            Shape::Other(e) => e.node_name.as_deref(),
        }
    }

    /// `zone`.
    pub fn zone(&self) -> Option<&str> {
        match &self.0 {
            Shape::Pod(p) => p.zone.as_deref(),
            Shape::Other(e) => e.zone.as_deref(),
        }
    }

    /// `targetRef`.
    pub fn target_ref(&self) -> Option<TargetRef<'_>> {
        match &self.0 {
            Shape::Pod(p) => Some(TargetRef {
                kind: Some(POD),
                namespace: Some(&p.namespace),
                name: Some(&p.name),
                uid: Some(&p.uid),
            }),
            Shape::Other(e) => e.target_ref.as_ref().map(|t| TargetRef {
                kind: t.kind.as_deref(),
                namespace: t.namespace.as_deref(),
                name: t.name.as_deref(),
                uid: t.uid.as_deref(),
            }),
        }
    }

    /// `targetRef.uid`.
    pub fn target_uid(&self) -> Option<&str> {
        self.target_ref()?.uid
    }

    /// The shared copy of the pod UID, when the endpoint has our shape.
    pub fn shared_uid(&self) -> Option<&Arc<str>> {
        match &self.0 {
            Shape::Pod(p) => Some(&p.uid),
            Shape::Other(_) => None,
        }
    }
}

impl From<Endpoint> for CompactEndpoint {
    fn from(e: Endpoint) -> Self {
        Self::new(e, |uid| Arc::from(uid))
    }
}

const POD: &str = "Pod";

impl PodEndpoint {
    /// Whether `e` has this shape: nothing would be lost keeping it so. Empty strings do not
    /// (`Some("")` and `None` would read alike).
    fn fits(e: &Endpoint) -> bool {
        let Some(t) = e.target_ref.as_ref() else {
            return false;
        };
        e.addresses.len() == 1
            && e.deprecated_topology.is_none()
            && t.kind.as_deref() == Some(POD)
            && t.api_version.is_none()
            && t.field_path.is_none()
            && t.resource_version.is_none()
            && [&t.namespace, &t.name, &t.uid]
                .iter()
                .all(|f| f.as_deref().is_some_and(|s| !s.is_empty()))
    }

    fn to_endpoint(&self) -> Endpoint {
        Endpoint {
            addresses: vec![self.address.to_string()],
            conditions: self.conditions.clone(),
            deprecated_topology: None,
            hints: self.hints.as_deref().cloned(),
            hostname: self.hostname.as_deref().map(str::to_owned),
            node_name: self.node_name.as_deref().map(str::to_owned),
            target_ref: Some(ObjectReference {
                kind: Some(POD.to_owned()),
                namespace: Some(self.namespace.to_string()),
                name: Some(self.name.to_string()),
                uid: Some(self.uid.to_string()),
                ..ObjectReference::default()
            }),
            zone: self.zone.as_deref().map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> Endpoint {
        Endpoint {
            addresses: vec!["10.0.0.1".into()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            hostname: Some("web-0".into()),
            node_name: Some("node-1".into()),
            zone: Some("z1".into()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some("web-0".into()),
                uid: Some("uid-0".into()),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        }
    }

    #[test]
    fn our_shape_is_compact_and_comes_back_as_it_was() {
        let e = CompactEndpoint::from(ours());
        assert!(matches!(e.0, Shape::Pod(_)));
        assert_eq!(e.to_endpoint(), ours());
        assert_eq!(e.target_uid(), Some("uid-0"));
        assert_eq!(e.only_address(), Some("10.0.0.1"));
        assert_eq!((e.node_name(), e.zone()), (Some("node-1"), Some("z1")));
    }

    #[test]
    fn any_other_shape_is_kept_whole() {
        let edits: [fn(&mut Endpoint); 6] = [
            |e| e.addresses.push("10.0.0.2".into()),
            |e| e.addresses.clear(),
            |e| e.target_ref = None,
            |e| {
                if let Some(t) = e.target_ref.as_mut() {
                    t.resource_version = Some("7".into());
                }
            },
            |e| {
                if let Some(t) = e.target_ref.as_mut() {
                    t.name = Some(String::new());
                }
            },
            |e| e.deprecated_topology = Some([("a".into(), "b".into())].into()),
        ];
        for edit in edits {
            let mut edited = ours();
            edit(&mut edited);
            let e = CompactEndpoint::from(edited.clone());
            assert!(matches!(e.0, Shape::Other(_)));
            assert_eq!(e.to_endpoint(), edited);
            assert_eq!(e.addresses().count(), edited.addresses.len());
        }
    }

    #[test]
    fn a_slice_comes_back_as_it_was() {
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web".into()),
                resource_version: Some("3".into()),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(80),
                ..EndpointPort::default()
            }]),
            endpoints: vec![ours(), Endpoint::default()],
        };
        assert_eq!(CompactSlice::from(slice.clone()).to_endpoint_slice(), slice);
    }

    #[test]
    fn the_endpoints_hold_no_room_of_the_decoded_ones() {
        let mut decoded = Vec::with_capacity(128);
        decoded.extend(std::iter::repeat_n(ours(), 100));
        let slice = CompactSlice::from(EndpointSlice {
            endpoints: decoded,
            ..EndpointSlice::default()
        });
        assert_eq!(slice.endpoints.capacity(), 100);
    }

    #[test]
    fn the_uid_is_the_one_given() {
        let shared: Arc<str> = Arc::from("uid-0");
        let e = CompactEndpoint::new(ours(), |_| shared.clone());
        assert!(e.shared_uid().is_some_and(|u| Arc::ptr_eq(u, &shared)));
    }
}
