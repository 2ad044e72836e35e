//! The pieces every written object shares, built from the plan: labels, owner reference,
//! endpoints and hints.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, ForNode, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use portmapper_api::MANAGER;

use crate::compact_slice::CompactEndpoint;
use crate::pod_record::PodRecord;

pub use crate::ownership::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
/// `service.kubernetes.io/headless`.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// `endpointslice.kubernetes.io/skip-mirror` (on legacy Endpoints).
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// `endpoints.kubernetes.io/last-change-trigger-time`.
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// `endpoints.kubernetes.io/over-capacity`.
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// `service.kubernetes.io/topology-mode`.
pub const ANNOTATION_TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
/// The deprecated `service.kubernetes.io/topology-aware-hints` (wins over topology-mode).
pub const ANNOTATION_TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";

/// The only Service annotations the planner reads (`hint_mode`). The operator's cache keeps
/// these and drops the rest: a Service may carry 256 KiB of annotations nobody here reads.
pub const SERVICE_ANNOTATIONS_READ: [&str; 2] =
    [ANNOTATION_TOPOLOGY_AWARE_HINTS, ANNOTATION_TOPOLOGY_MODE];

/// Labels the native controller never copies from the Service.
pub const RESERVED_LABELS: [&str; 3] = [LABEL_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_HEADLESS];

/// Whether the Service is headless (`clusterIP: None`).
pub fn is_headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// Slice labels: the Service's labels minus reserved keys, the headless marker,
/// `kubernetes.io/service-name` and `managed-by: portmapper.dev`.
pub fn slice_labels(service: &Service, service_name: &str) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = service
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !RESERVED_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if is_headless(service) {
        labels.insert(LABEL_HEADLESS.to_owned(), String::new());
    }
    labels.insert(LABEL_SERVICE_NAME.to_owned(), service_name.to_owned());
    labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned());
    labels
}

/// The controller owner reference to the PortMapping. `blockOwnerDeletion: true` so foreground
/// deletion of a PortMapping waits for its slices (like the native controller's reference to the
/// Service); clusters enforcing `OwnerReferencesPermissionEnforcement` then require the operator
/// to hold `update` on `portmappings/finalizers`, so its RBAC must grant that.
pub fn owner_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/v1alpha1", portmapper_api::GROUP),
        kind: "PortMapping".to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Makes `desired` (the metadata the planner renders) the body of an update of the stored
/// object `live`. An update replaces the whole object, so it carries what is not ours to set:
/// others' annotations, the finalizers, and owner references that are not a controller's (a
/// stale controller reference, from a PortMapping deleted with its dependents orphaned, is
/// replaced by ours). Labels are wholly ours, as the native controller's are: the Service's
/// labels and ours, so a label removed from the Service leaves the slice. The stored
/// resourceVersion makes the update conditional on the object the plan was made from.
pub fn keep_for_update(desired: &mut ObjectMeta, live: &ObjectMeta) {
    desired.resource_version.clone_from(&live.resource_version);
    if let Some(theirs) = &live.annotations {
        let ours = desired.annotations.get_or_insert_with(BTreeMap::new);
        for (key, value) in theirs {
            if key != ANNOTATION_TRIGGER_TIME {
                ours.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
    }
    desired.finalizers.clone_from(&live.finalizers);
    let others = live
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.controller != Some(true))
        .filter(|r| {
            !desired
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == r.uid)
        })
        .cloned()
        .collect::<Vec<_>>();
    if !others.is_empty() {
        desired
            .owner_references
            .get_or_insert_with(Vec::new)
            .extend(others);
    }
}

/// How endpoint hints are computed for a Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintMode {
    /// No hints.
    None,
    /// `forZones: [own zone]` (PreferClose, PreferSameZone).
    Zone,
    /// `forNodes: [own node]` plus the zone (PreferSameNode).
    Node,
}

/// The hint mode and, when `topology-mode: Auto` is requested (unsupported), the annotation
/// asking for it.
pub fn hint_mode(service: &Service) -> (HintMode, Option<&'static str>) {
    let annotations = service.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    // The deprecated annotation wins, as in the native controller.
    let auto = SERVICE_ANNOTATIONS_READ
        .into_iter()
        .find(|k| get(k).is_some())
        .filter(|k| matches!(get(k), Some("Auto" | "auto")));
    if let Some(annotation) = auto {
        return (HintMode::None, Some(annotation));
    }
    let mode = match service
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref())
    {
        Some("PreferClose" | "PreferSameZone") => HintMode::Zone,
        Some("PreferSameNode") => HintMode::Node,
        _ => HintMode::None,
    };
    (mode, None)
}

/// Everything that varies per endpoint.
#[derive(Clone, Copy)]
pub struct EndpointFacts<'a> {
    /// The pod.
    pub pod: &'a PodRecord,
    /// Its address in the slice's family.
    pub address: IpAddr,
    /// Published ready.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Zone of its node, if known.
    pub zone: Option<&'a str>,
}

/// Renders one endpoint like the native controller: one address, conditions, targetRef to the
/// pod, nodeName, zone, hostname (pods whose subdomain is the Service), and hints for ready
/// endpoints only.
pub fn build_endpoint(
    facts: &EndpointFacts<'_>,
    service_name: &str,
    namespace: &str,
    hints: HintMode,
) -> Endpoint {
    let pod = facts.pod;
    let node = pod
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(str::to_owned);
    let hostname = pod
        .hostname
        .clone()
        .filter(|h| !h.is_empty() && pod.subdomain.as_deref() == Some(service_name));
    let zone = facts.zone.map(str::to_owned);
    let hints = if facts.ready {
        let for_zones = zone.as_ref().map(|z| vec![ForZone { name: z.clone() }]);
        match hints {
            HintMode::None => None,
            HintMode::Zone => for_zones.map(|z| EndpointHints {
                for_zones: Some(z),
                for_nodes: None,
            }),
            HintMode::Node => match (&node, for_zones) {
                (None, None) => None,
                (node, zones) => Some(EndpointHints {
                    for_nodes: node.as_ref().map(|n| vec![ForNode { name: n.clone() }]),
                    for_zones: zones,
                }),
            },
        }
    } else {
        None
    };
    Endpoint {
        addresses: vec![facts.address.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(facts.ready),
            serving: Some(true),
            terminating: Some(facts.terminating),
        }),
        deprecated_topology: None,
        hints,
        hostname,
        node_name: node,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".to_owned()),
            namespace: Some(namespace.to_owned()),
            name: present(&pod.name).map(str::to_owned),
            uid: present(&pod.uid).map(str::to_owned),
            ..ObjectReference::default()
        }),
        zone,
    }
}

/// A record's field as the API would carry it: absent when empty.
fn present(field: &str) -> Option<&str> {
    (!field.is_empty()).then_some(field)
}

/// An endpoint the planner wants, before it is rendered: the facts and the context that decide
/// its rendering. Plans compare these with the live endpoints without allocating and render
/// only the slices they write, so a converged or one-pod change stays cheap at any pool size.
#[derive(Clone, Copy)]
pub struct DesiredEndpoint<'a> {
    /// What varies per endpoint.
    pub facts: EndpointFacts<'a>,
    /// The Service (decides `hostname`).
    pub service_name: &'a str,
    /// The namespace (of the targetRef).
    pub namespace: &'a str,
    /// The hint mode.
    pub hints: HintMode,
    /// The pod's position in the pool (set by the evaluation; 0 otherwise).
    pub(crate) pool_position: u32,
}

impl<'a> DesiredEndpoint<'a> {
    /// The endpoint of `facts` in a slice of Service `service_name`.
    pub fn new(
        facts: EndpointFacts<'a>,
        service_name: &'a str,
        namespace: &'a str,
        hints: HintMode,
    ) -> Self {
        Self {
            pool_position: 0,
            facts,
            service_name,
            namespace,
            hints,
        }
    }

    /// The pod's UID. Read through the pod, so only when needed: sorting and finding
    /// endpoints compare addresses first (as integers) and reach the UID only when two
    /// addresses tie, and a pass that reuses its last order never reads it; copying it into
    /// every endpoint read every pod (a cache miss each, the pods lying all over the heap).
    pub fn uid(&self) -> &'a str {
        self.facts.pod.uid.as_str()
    }

    /// The address as `(family, bits)`: how endpoints are ordered before their UIDs.
    pub(crate) fn address_key(&self) -> (u8, u128) {
        address_key(self.facts.address)
    }

    /// The endpoint as the API stores it.
    pub fn to_endpoint(&self) -> Endpoint {
        build_endpoint(&self.facts, self.service_name, self.namespace, self.hints)
    }

    fn node(&self) -> Option<&'a str> {
        self.facts
            .pod
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
    }

    fn hostname(&self) -> Option<&'a str> {
        let pod = self.facts.pod;
        pod.hostname
            .as_deref()
            .filter(|h| !h.is_empty() && pod.subdomain.as_deref() == Some(self.service_name))
    }

    /// Whether `live` is what [`to_endpoint`](Self::to_endpoint) would give, by the planner's equality
    /// ([`endpoint_eq`](super::endpoint_eq)) — without rendering.
    pub fn same_as(&self, live: &CompactEndpoint) -> bool {
        live.target_uid() == present(&self.facts.pod.uid) && self.same_as_identified(live, true)
    }

    /// [`same_as`](Self::same_as) for a `live` endpoint already known to carry this endpoint's
    /// pod UID and address (packing matched them): the UID is not compared again, and the
    /// address text only with `compare_address` (a matched IPv6 address may be spelled
    /// differently; a matched IPv4 one cannot).
    pub(crate) fn same_as_identified(&self, live: &CompactEndpoint, compare_address: bool) -> bool {
        let f = &self.facts;
        let cond = live.conditions();
        let conditions = (
            cond.and_then(|c| c.ready).unwrap_or(true),
            cond.and_then(|c| c.serving).unwrap_or(true),
            cond.and_then(|c| c.terminating).unwrap_or(false),
        );
        let pod = f.pod;
        (if compare_address {
            address_is(live, f.address)
        } else {
            live.only_address().is_some()
        }) && conditions == (f.ready, true, f.terminating)
            && live.hostname() == self.hostname()
            && live.node_name() == self.node()
            && live.zone() == f.zone
            && live.target_ref().is_some_and(|t| {
                t.kind == Some("Pod")
                    && t.namespace == Some(self.namespace)
                    && t.name == present(&pod.name)
            })
            && self.hints_match(live.hints())
    }

    /// Hints as [`build_endpoint`] sets them, compared as `hints_eq` does: zones equal, and
    /// nodes equal unless the server dropped them.
    fn hints_match(&self, live: Option<&EndpointHints>) -> bool {
        let (zones, nodes) = match (self.facts.ready, self.hints) {
            (false, _) | (_, HintMode::None) => (None, None),
            (true, HintMode::Zone) => (self.facts.zone, None),
            (true, HintMode::Node) => (self.facts.zone, self.node()),
        };
        // Compared as iterators: no allocation per endpoint on the converged path.
        let live_zones = || {
            live.into_iter()
                .flat_map(|h| h.for_zones.iter().flatten())
                .map(|z| z.name.as_str())
        };
        let live_nodes = || {
            live.into_iter()
                .flat_map(|h| h.for_nodes.iter().flatten())
                .map(|n| n.name.as_str())
        };
        live_zones().eq(zones) && (live_nodes().eq(nodes) || live_nodes().next().is_none())
    }
}

/// Whether `live` carries exactly `address`, as rendered (canonical text), without allocating.
fn address_is(live: &CompactEndpoint, address: IpAddr) -> bool {
    use std::io::Write;
    let Some(only) = live.only_address() else {
        return false;
    };
    let mut buf = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    if write!(cursor, "{address}").is_err() {
        return false;
    }
    let len = usize::try_from(cursor.position()).unwrap_or(0);
    only.as_bytes() == &buf[..len]
}

/// An address as `(family, bits)`, ordered as `IpAddr` is.
pub(crate) fn address_key(address: IpAddr) -> (u8, u128) {
    match address {
        IpAddr::V4(a) => (4, u128::from(a.to_bits())),
        IpAddr::V6(a) => (6, a.to_bits()),
    }
}

/// What a member's endpoint is made of besides its pod (whose record does not change while
/// its position keeps the same version).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeptMember {
    pub address: IpAddr,
    /// Pool position.
    pub position: u32,
    pub ready: bool,
    pub terminating: bool,
}

impl KeptMember {
    /// What a desired endpoint's pod needs to make it again.
    pub(crate) fn of(e: &DesiredEndpoint<'_>) -> Self {
        Self {
            address: e.facts.address,
            position: e.pool_position,
            ready: e.facts.ready,
            terminating: e.facts.terminating,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec, ServiceSpec};

    fn svc(
        labels: &[(&str, &str)],
        cluster_ip: &str,
        td: Option<&str>,
        annotations: &[(&str, &str)],
    ) -> Service {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                labels: map(labels),
                annotations: map(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(cluster_ip.into()),
                traffic_distribution: td.map(Into::into),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn labels_copy_service_labels_minus_reserved_and_mark_headless() {
        let s = svc(
            &[
                ("app", "web"),
                (LABEL_MANAGED_BY, "x"),
                (LABEL_HEADLESS, "y"),
            ],
            "None",
            None,
            &[],
        );
        let labels = slice_labels(&s, "web");
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(LABEL_MANAGED_BY).map(String::as_str),
            Some("portmapper.dev")
        );
        assert_eq!(labels.get(LABEL_HEADLESS).map(String::as_str), Some(""));
        assert_eq!(
            labels.get(LABEL_SERVICE_NAME).map(String::as_str),
            Some("web")
        );
        let clusterip = slice_labels(
            &svc(&[(LABEL_HEADLESS, "y")], "10.96.0.1", None, &[]),
            "web",
        );
        assert!(!clusterip.contains_key(LABEL_HEADLESS));
    }

    #[test]
    fn an_update_keeps_what_others_set_and_drops_their_labels_and_stale_controller() {
        let kv = |pairs: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
            )
        };
        let mut desired = ObjectMeta {
            labels: kv(&[("app", "web")]),
            annotations: kv(&[(ANNOTATION_TRIGGER_TIME, "new")]),
            owner_references: Some(vec![owner_reference("pm", "uid-now")]),
            ..ObjectMeta::default()
        };
        let mut other = owner_reference("backup", "uid-backup");
        other.controller = None;
        let live = ObjectMeta {
            resource_version: Some("42".into()),
            labels: kv(&[("app", "web"), ("removed-from-service", "x")]),
            annotations: kv(&[
                (ANNOTATION_TRIGGER_TIME, "old"),
                ("example.com/note", "kept"),
            ]),
            finalizers: Some(vec!["example.com/hold".into()]),
            owner_references: Some(vec![
                owner_reference("pm", "uid-before"),
                other.clone(),
                owner_reference("pm", "uid-now"),
            ]),
            ..ObjectMeta::default()
        };
        keep_for_update(&mut desired, &live);
        assert_eq!(desired.resource_version.as_deref(), Some("42"));
        assert_eq!(desired.labels, kv(&[("app", "web")]));
        assert_eq!(
            desired.annotations,
            kv(&[
                (ANNOTATION_TRIGGER_TIME, "new"),
                ("example.com/note", "kept")
            ])
        );
        assert_eq!(desired.finalizers, Some(vec!["example.com/hold".into()]));
        assert_eq!(
            desired.owner_references,
            Some(vec![owner_reference("pm", "uid-now"), other])
        );
    }

    #[test]
    fn owner_reference_is_controller_to_the_portmapping() {
        let r = owner_reference("pm", "uid-1");
        assert_eq!(r.api_version, "portmapper.dev/v1alpha1");
        assert_eq!(r.kind, "PortMapping");
        assert_eq!(r.controller, Some(true));
        assert_eq!(r.block_owner_deletion, Some(true));
    }

    #[test]
    fn hint_mode_follows_traffic_distribution_and_refuses_auto() {
        assert_eq!(
            hint_mode(&svc(&[], "x", Some("PreferClose"), &[])),
            (HintMode::Zone, None)
        );
        assert_eq!(
            hint_mode(&svc(&[], "x", Some("PreferSameZone"), &[])),
            (HintMode::Zone, None)
        );
        assert_eq!(
            hint_mode(&svc(&[], "x", Some("PreferSameNode"), &[])),
            (HintMode::Node, None)
        );
        assert_eq!(hint_mode(&svc(&[], "x", None, &[])), (HintMode::None, None));
        let auto = svc(
            &[],
            "x",
            Some("PreferClose"),
            &[(ANNOTATION_TOPOLOGY_MODE, "Auto")],
        );
        assert_eq!(
            hint_mode(&auto),
            (HintMode::None, Some(ANNOTATION_TOPOLOGY_MODE))
        );
        let deprecated_wins = svc(
            &[],
            "x",
            Some("PreferClose"),
            &[
                (ANNOTATION_TOPOLOGY_MODE, "Auto"),
                (ANNOTATION_TOPOLOGY_AWARE_HINTS, "Disabled"),
            ],
        );
        assert_eq!(hint_mode(&deprecated_wins), (HintMode::Zone, None));
    }

    fn pod(node: Option<&str>, hostname: Option<&str>, subdomain: Option<&str>) -> PodRecord {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                hostname: hostname.map(Into::into),
                subdomain: subdomain.map(Into::into),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
        .into()
    }

    fn facts<'a>(p: &'a PodRecord, ready: bool, zone: Option<&'static str>) -> EndpointFacts<'a> {
        EndpointFacts {
            pod: p,
            address: "10.0.0.1".parse().unwrap(),
            ready,
            terminating: !ready,
            zone,
        }
    }

    #[test]
    fn hostname_only_when_subdomain_is_the_service() {
        let p = pod(None, Some("db-0"), Some("web"));
        assert_eq!(
            build_endpoint(&facts(&p, true, None), "web", "ns", HintMode::None)
                .hostname
                .as_deref(),
            Some("db-0")
        );
        let other = pod(None, Some("db-0"), Some("other"));
        assert_eq!(
            build_endpoint(&facts(&other, true, None), "web", "ns", HintMode::None).hostname,
            None
        );
    }

    #[test]
    fn hints_only_for_ready_endpoints() {
        let p = pod(Some("n1"), None, None);
        let ep = build_endpoint(&facts(&p, true, Some("z1")), "web", "ns", HintMode::Zone);
        assert_eq!(
            ep.hints
                .and_then(|h| h.for_zones)
                .map(|z| z[0].name.clone())
                .as_deref(),
            Some("z1")
        );
        let draining = build_endpoint(&facts(&p, false, Some("z1")), "web", "ns", HintMode::Zone);
        assert_eq!(draining.hints, None);
        assert_eq!(
            draining.conditions.as_ref().and_then(|c| c.terminating),
            Some(true)
        );
    }

    #[test]
    fn prefer_same_node_hints_node_and_zone() {
        let p = pod(Some("n1"), None, None);
        let ep = build_endpoint(&facts(&p, true, Some("z1")), "web", "ns", HintMode::Node);
        let hints = ep.hints.unwrap_or_default();
        assert_eq!(
            hints.for_nodes.map(|n| n[0].name.clone()).as_deref(),
            Some("n1")
        );
        assert_eq!(
            hints.for_zones.map(|z| z[0].name.clone()).as_deref(),
            Some("z1")
        );
        let no_zone = build_endpoint(&facts(&p, true, None), "web", "ns", HintMode::Zone);
        assert_eq!(no_zone.hints, None);
    }

    #[test]
    fn prefer_same_node_without_zone_hints_the_node_only() {
        let p = pod(Some("n1"), None, None);
        let ep = build_endpoint(&facts(&p, true, None), "web", "ns", HintMode::Node);
        assert_eq!(
            ep.hints,
            Some(EndpointHints {
                for_nodes: Some(vec![ForNode { name: "n1".into() }]),
                for_zones: None,
            })
        );
        // Neither a node nor a zone: no hints struct at all.
        let unscheduled = pod(None, None, None);
        let ep = build_endpoint(
            &facts(&unscheduled, true, None),
            "web",
            "ns",
            HintMode::Node,
        );
        assert_eq!(ep.hints, None);
        // A zone but no node: the zone only.
        let ep = build_endpoint(
            &facts(&unscheduled, true, Some("z1")),
            "web",
            "ns",
            HintMode::Node,
        );
        assert_eq!(
            ep.hints,
            Some(EndpointHints {
                for_nodes: None,
                for_zones: Some(vec![ForZone { name: "z1".into() }]),
            })
        );
        // Draining endpoints get no node hint either.
        let ep = build_endpoint(&facts(&p, false, Some("z1")), "web", "ns", HintMode::Node);
        assert_eq!(ep.hints, None);
    }

    #[test]
    fn deprecated_auto_wins_over_topology_mode_disabled_and_disabled_alone_keeps_hints() {
        let deprecated_auto = svc(
            &[],
            "x",
            Some("PreferSameNode"),
            &[
                (ANNOTATION_TOPOLOGY_MODE, "Disabled"),
                (ANNOTATION_TOPOLOGY_AWARE_HINTS, "auto"),
            ],
        );
        assert_eq!(
            hint_mode(&deprecated_auto),
            (HintMode::None, Some(ANNOTATION_TOPOLOGY_AWARE_HINTS))
        );
        let disabled = svc(
            &[],
            "x",
            Some("PreferSameNode"),
            &[(ANNOTATION_TOPOLOGY_MODE, "Disabled")],
        );
        assert_eq!(hint_mode(&disabled), (HintMode::Node, None));
        let lower_auto = svc(&[], "x", None, &[(ANNOTATION_TOPOLOGY_MODE, "auto")]);
        assert_eq!(
            hint_mode(&lower_auto),
            (HintMode::None, Some(ANNOTATION_TOPOLOGY_MODE))
        );
    }

    #[test]
    fn endpoint_carries_target_ref_node_and_zone() {
        let p = pod(Some("n1"), None, None);
        let ep = build_endpoint(&facts(&p, true, Some("z1")), "web", "ns", HintMode::None);
        assert_eq!(ep.addresses, vec!["10.0.0.1"]);
        assert_eq!(ep.node_name.as_deref(), Some("n1"));
        assert_eq!(ep.zone.as_deref(), Some("z1"));
        let r = ep.target_ref.unwrap_or_default();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.uid.as_deref()),
            (Some("Pod"), Some("ns"), Some("u"))
        );
    }

    /// Every variation of the facts against every rendering of every other variation (and a
    /// few server-side rewrites): comparing without rendering must agree with rendering and
    /// comparing, or converged plans would write (or miss writes).
    #[test]
    fn same_as_agrees_with_rendering_then_comparing() {
        use super::super::endpoint_eq;
        let pods = [
            pod(None, None, None),
            pod(Some("n1"), None, None),
            pod(Some("n2"), Some("h"), Some("web")),
            pod(Some("n1"), Some("h"), Some("other")),
        ];
        let mut desired = Vec::new();
        for p in &pods {
            for (address, ready, terminating) in [
                ("10.0.0.1", true, false),
                ("10.0.0.1", false, true),
                ("10.0.0.2", true, true),
                ("fd00::1", true, false),
            ] {
                for zone in [None, Some("z1"), Some("z2")] {
                    for hints in [HintMode::None, HintMode::Zone, HintMode::Node] {
                        desired.push(DesiredEndpoint::new(
                            EndpointFacts {
                                pod: p,
                                address: address.parse().unwrap(),
                                ready,
                                terminating,
                                zone,
                            },
                            "web",
                            "ns",
                            hints,
                        ));
                    }
                }
            }
        }
        let mut live: Vec<Endpoint> = desired.iter().map(DesiredEndpoint::to_endpoint).collect();
        for e in live.clone() {
            // What the server may store instead: defaults left out, forNodes stripped, a
            // non-canonical address, a targetRef with a resourceVersion.
            let mut e1 = e.clone();
            if let Some(c) = e1.conditions.as_mut() {
                c.serving = None;
            }
            let mut e2 = e.clone();
            if let Some(h) = e2.hints.as_mut() {
                h.for_nodes = None;
            }
            let mut e3 = e.clone();
            e3.addresses = vec![e.addresses[0].replace("fd00::1", "fd00:0::1")];
            let mut e4 = e.clone();
            if let Some(t) = e4.target_ref.as_mut() {
                t.resource_version = Some("7".into());
            }
            live.extend([e1, e2, e3, e4]);
        }
        let mut agreed = 0;
        for d in &desired {
            let rendered = d.to_endpoint();
            for l in &live {
                assert_eq!(
                    d.same_as(&CompactEndpoint::from(l.clone())),
                    endpoint_eq(&rendered, l),
                    "desired {rendered:?} vs live {l:?}"
                );
                agreed += 1;
            }
        }
        assert_eq!(agreed, desired.len() * live.len());
    }
}
