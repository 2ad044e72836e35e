//! `discovery.k8s.io/v1` EndpointSlice defaulting and validation
//! (`pkg/apis/discovery/validation/validation.go`, `pkg/apis/discovery/v1/defaults.go`).

use std::collections::HashSet;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, EndpointPort, EndpointSlice};

use std::net::IpAddr;

use crate::field::{ErrorList, FieldError, FieldPath};

use crate::ip::{parse_ip_sloppy, validate_endpoint_ip, validate_ip, validate_ip_strict};
use crate::meta::{validate_labels, validate_object_meta, validate_object_meta_update};
use crate::names::{
    is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_label_value,
    name_is_dns_subdomain,
};

/// Most endpoints in one slice.
pub const MAX_ENDPOINTS: usize = 1000;
/// Most addresses in one endpoint.
pub const MAX_ADDRESSES: usize = 100;
/// Most ports in one slice (raised from 100 in Kubernetes 1.21).
pub const MAX_PORTS: usize = 20_000;
/// Most `deprecatedTopology` labels.
pub const MAX_TOPOLOGY_LABELS: usize = 16;
/// Most zone hints per endpoint.
pub const MAX_ZONE_HINTS: usize = 8;
/// Most node hints per endpoint.
pub const MAX_NODE_HINTS: usize = 8;
/// Accepted `addressType`s, in the (sorted) order the apiserver lists them.
pub const SUPPORTED_ADDRESS_TYPES: [&str; 3] = ["FQDN", "IPv4", "IPv6"];
/// Accepted port protocols, in the (sorted) order the apiserver lists them.
pub const SUPPORTED_PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];

/// Applies the v1 defaults: `ports[].name` → `""`, `ports[].protocol` → `TCP`.
pub fn default_endpoint_slice(slice: &mut EndpointSlice) {
    for port in slice.ports.iter_mut().flatten() {
        port.name.get_or_insert_with(String::new);
        port.protocol.get_or_insert_with(|| "TCP".to_owned());
    }
}

/// Validates an EndpointSlice being created (call [`default_endpoint_slice`] first, as the
/// apiserver does).
pub fn validate_endpoint_slice(slice: &EndpointSlice) -> ErrorList {
    let mut errs = imperative(slice);
    errs.extend(declarative(slice, None));
    errs
}

/// Validates an update: metadata update rules, the object itself (unchanged endpoints are not
/// revalidated), and the immutable `addressType`.
pub fn validate_endpoint_slice_update(new: &EndpointSlice, old: &EndpointSlice) -> ErrorList {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &FieldPath::new("metadata"));
    errs.extend(validate_object_meta(
        &new.metadata,
        true,
        name_is_dns_subdomain,
        &FieldPath::new("metadata"),
        true,
    ));
    errs.extend(validate_ports(
        new.ports.as_deref().unwrap_or_default(),
        &FieldPath::new("ports"),
    ));
    if new.endpoints != old.endpoints {
        errs.extend(validate_endpoints(
            &new.endpoints,
            &new.address_type,
            &FieldPath::new("endpoints"),
        ));
    }
    errs.extend(declarative(new, Some(old)));
    errs
}

/// The hand-written rules (`ValidateEndpointSlice`) that declarative validation does not cover.
fn imperative(slice: &EndpointSlice) -> ErrorList {
    let mut errs = validate_object_meta(
        &slice.metadata,
        true,
        name_is_dns_subdomain,
        &FieldPath::new("metadata"),
        true,
    );
    errs.extend(validate_ports(
        slice.ports.as_deref().unwrap_or_default(),
        &FieldPath::new("ports"),
    ));
    errs.extend(validate_endpoints(
        &slice.endpoints,
        &slice.address_type,
        &FieldPath::new("endpoints"),
    ));
    errs
}

/// The declarative rules of discovery/v1 (beta since 1.37, so they replace the hand-written
/// ones they cover and come after them): `addressType` required, immutable, one of the
/// supported types; each endpoint's `addresses` required, at most 100. Unchanged values are not
/// revalidated on update.
fn declarative(slice: &EndpointSlice, old: Option<&EndpointSlice>) -> ErrorList {
    let mut errs = Vec::new();
    let path = FieldPath::new("addressType");
    let address_type = slice.address_type.as_str();
    let changed = old.is_none_or(|o| o.address_type != slice.address_type);
    if changed {
        if address_type.is_empty() {
            errs.push(FieldError::required(&path, ""));
        } else if old.is_some() {
            errs.push(FieldError::invalid(
                &path,
                crate::field::BadValue::Null,
                "field is immutable",
            ));
        } else if !SUPPORTED_ADDRESS_TYPES.contains(&address_type) {
            errs.push(FieldError::not_supported(
                &path,
                address_type,
                &SUPPORTED_ADDRESS_TYPES,
            ));
        }
    }
    if old.is_some_and(|o| o.endpoints == slice.endpoints) {
        return errs;
    }
    for (i, endpoint) in slice.endpoints.iter().enumerate() {
        let addresses = &endpoint.addresses;
        if addresses.is_empty() {
            let p = FieldPath::new("endpoints").index(i).child("addresses");
            errs.push(FieldError::required(&p, ""));
        } else if addresses.len() > MAX_ADDRESSES {
            let p = FieldPath::new("endpoints").index(i).child("addresses");
            errs.push(FieldError::too_many(&p, addresses.len(), MAX_ADDRESSES));
        }
    }
    errs
}

fn validate_endpoints(endpoints: &[Endpoint], address_type: &str, path: &FieldPath) -> ErrorList {
    if endpoints.len() > MAX_ENDPOINTS {
        return vec![FieldError::too_many(path, endpoints.len(), MAX_ENDPOINTS)];
    }
    let mut errs = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        // Paths are built only when something is wrong: valid slices are the hot path.
        let idx = || path.index(i);
        let addr_path = || idx().child("addresses");
        for (j, address) in endpoint.addresses.iter().enumerate() {
            let p = || addr_path().index(j);
            match address_type {
                "IPv4" | "IPv6" => {
                    let v4 = address_type == "IPv4";
                    let ip_errs = if v4 {
                        validate_ip(&p(), address)
                    } else {
                        validate_ip_strict(&p(), address)
                    };
                    if !ip_errs.is_empty() {
                        errs.extend(ip_errs);
                        continue;
                    }
                    let is_v4 = matches!(parse_ip_sloppy(address), Some(IpAddr::V4(_)));
                    if is_v4 != v4 {
                        let family = if v4 { "an IPv4" } else { "an IPv6" };
                        errs.push(FieldError::invalid(
                            &addr_path(),
                            address,
                            format!("must be {family} address"),
                        ));
                    }
                    errs.extend(validate_endpoint_ip(&p(), address));
                }
                "FQDN" => errs.extend(validate_fqdn(&p(), address)),
                // Unknown address types were already reported; their addresses are not checked.
                _ => {}
            }
        }
        if let Some(node) = &endpoint.node_name {
            let msgs = name_is_dns_subdomain(node, false);
            if !msgs.is_empty() {
                let p = idx().child("nodeName");
                errs.extend(msgs.into_iter().map(|m| FieldError::invalid(&p, node, m)));
            }
        }
        if let Some(topology) = &endpoint.deprecated_topology {
            let topo_path = idx().child("deprecatedTopology");
            if topology.len() > MAX_TOPOLOGY_LABELS {
                errs.push(FieldError::too_many(
                    &topo_path,
                    topology.len(),
                    MAX_TOPOLOGY_LABELS,
                ));
            }
            errs.extend(validate_labels(topology, &topo_path));
        }
        if let Some(hostname) = &endpoint.hostname {
            let msgs = is_dns1123_label(hostname);
            if !msgs.is_empty() {
                let p = idx().child("hostname");
                errs.extend(
                    msgs.into_iter()
                        .map(|m| FieldError::invalid(&p, hostname, m)),
                );
            }
        }
        if let Some(hints) = &endpoint.hints {
            errs.extend(validate_hints(hints, &|| idx().child("hints")));
        }
    }
    errs
}

fn validate_hints(hints: &EndpointHints, path: &dyn Fn() -> FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    let zones = hints.for_zones.as_deref().unwrap_or_default();
    let zones_path = || path().child("forZones");
    if zones.len() > MAX_ZONE_HINTS {
        return vec![FieldError::too_many(
            &zones_path(),
            zones.len(),
            MAX_ZONE_HINTS,
        )];
    }
    let mut seen = HashSet::new();
    for (i, zone) in zones.iter().enumerate() {
        let p = || zones_path().index(i).child("name");
        if !seen.insert(zone.name.as_str()) {
            errs.push(FieldError::duplicate(&p(), &zone.name));
        }
        let msgs = is_valid_label_value(&zone.name);
        if !msgs.is_empty() {
            let p = p();
            errs.extend(
                msgs.into_iter()
                    .map(|m| FieldError::invalid(&p, &zone.name, m)),
            );
        }
    }
    let nodes = hints.for_nodes.as_deref().unwrap_or_default();
    let nodes_path = || path().child("forNodes");
    if nodes.len() > MAX_NODE_HINTS {
        errs.push(FieldError::too_many(
            &nodes_path(),
            nodes.len(),
            MAX_NODE_HINTS,
        ));
        return errs;
    }
    let mut seen = HashSet::new();
    for (i, node) in nodes.iter().enumerate() {
        let p = || nodes_path().index(i).child("name");
        if !seen.insert(node.name.as_str()) {
            errs.push(FieldError::duplicate(&p(), &node.name));
        }
        let msgs = name_is_dns_subdomain(&node.name, false);
        if !msgs.is_empty() {
            let p = p();
            errs.extend(
                msgs.into_iter()
                    .map(|m| FieldError::invalid(&p, &node.name, m)),
            );
        }
    }
    errs
}

fn validate_ports(ports: &[EndpointPort], path: &FieldPath) -> ErrorList {
    if ports.len() > MAX_PORTS {
        return vec![FieldError::too_many(path, ports.len(), MAX_PORTS)];
    }
    let mut errs = Vec::new();
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let idx = path.index(i);
        let name = port.name.as_deref().unwrap_or_default();
        let name_path = idx.child("name");
        if !name.is_empty() {
            errs.extend(
                is_dns1123_label(name)
                    .into_iter()
                    .map(|m| FieldError::invalid(&name_path, name, m)),
            );
        }
        if !names.insert(name) {
            errs.push(FieldError::duplicate(&name_path, name));
        }
        match port.protocol.as_deref() {
            None => errs.push(FieldError::required(&idx.child("protocol"), "")),
            Some(p) if !SUPPORTED_PROTOCOLS.contains(&p) => errs.push(FieldError::not_supported(
                &idx.child("protocol"),
                p,
                &SUPPORTED_PROTOCOLS,
            )),
            Some(_) => {}
        }
        if let Some(app) = &port.app_protocol {
            let p = idx.child("appProtocol");
            errs.extend(
                is_qualified_name(app)
                    .into_iter()
                    .map(|m| FieldError::invalid(&p, app, m)),
            );
        }
    }
    errs
}

/// `IsFullyQualifiedDomainName`: a DNS subdomain with at least two labels; a trailing dot is
/// ignored.
pub fn validate_fqdn(path: &FieldPath, name: &str) -> ErrorList {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let errs = is_dns1123_subdomain(name);
    if !errs.is_empty() {
        return vec![FieldError::invalid(path, name, errs.join(","))];
    }
    if name.split('.').count() < 2 {
        return vec![FieldError::invalid(
            path,
            name,
            "should be a domain with at least two segments separated by dots",
        )];
    }
    for label in name.split('.') {
        let errs = is_dns1123_label(label);
        if !errs.is_empty() {
            return vec![FieldError::invalid(path, label, errs.join(","))];
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{ForNode, ForZone};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn slice(address_type: &str, addresses: &[&str]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web.http".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            address_type: address_type.into(),
            endpoints: addresses
                .iter()
                .map(|a| Endpoint {
                    addresses: vec![(*a).to_owned()],
                    ..Endpoint::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
        }
    }

    fn msgs(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_slice_passes() {
        assert!(validate_endpoint_slice(&slice("IPv4", &["10.0.0.1", "10.0.0.2"])).is_empty());
        assert!(validate_endpoint_slice(&slice("IPv6", &["fd00::1"])).is_empty());
    }

    #[test]
    fn address_type_required_and_supported() {
        assert_eq!(
            msgs(validate_endpoint_slice(&slice("", &[]))),
            vec!["addressType: Required value"]
        );
        assert_eq!(
            msgs(validate_endpoint_slice(&slice("IP", &[]))),
            vec![
                r#"addressType: Unsupported value: "IP": supported values: "FQDN", "IPv4", "IPv6""#
            ]
        );
    }

    #[test]
    fn address_type_immutable_on_update() {
        let mut old = slice("IPv4", &[]);
        old.metadata.resource_version = Some("1".into());
        let mut new = slice("IPv6", &[]);
        new.metadata.resource_version = Some("1".into());
        assert_eq!(
            msgs(validate_endpoint_slice_update(&new, &old)),
            vec!["addressType: Invalid value: null: field is immutable"]
        );
    }

    #[test]
    fn endpoints_capped_at_1000_and_short_circuit() {
        let addrs: Vec<String> = (0..1001).map(|_| "127.0.0.1".to_owned()).collect();
        let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        assert_eq!(
            msgs(validate_endpoint_slice(&slice("IPv4", &refs))),
            vec!["endpoints: Too many: 1001: must have at most 1000 items"]
        );
    }

    #[test]
    fn endpoint_needs_between_1_and_100_addresses() {
        let mut s = slice("IPv4", &["10.0.0.1"]);
        s.endpoints[0].addresses.clear();
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec!["endpoints[0].addresses: Required value"]
        );
        s.endpoints[0].addresses = (0..101).map(|i| format!("10.0.0.{}", i + 1)).collect();
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec!["endpoints[0].addresses: Too many: 101: must have at most 100 items"]
        );
    }

    #[test]
    fn address_family_must_match_address_type() {
        assert_eq!(
            msgs(validate_endpoint_slice(&slice("IPv4", &["fd00::1"]))),
            vec![r#"endpoints[0].addresses: Invalid value: "fd00::1": must be an IPv4 address"#]
        );
        assert_eq!(
            msgs(validate_endpoint_slice(&slice("IPv6", &["10.0.0.1"]))),
            vec![r#"endpoints[0].addresses: Invalid value: "10.0.0.1": must be an IPv6 address"#]
        );
    }

    #[test]
    fn loopback_and_link_local_addresses_rejected() {
        assert_eq!(
            msgs(validate_endpoint_slice(&slice(
                "IPv4",
                &["10.0.0.1", "127.0.0.1"]
            ))),
            vec![
                r#"endpoints[1].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#
            ]
        );
        assert_eq!(
            validate_endpoint_slice(&slice("IPv6", &["fe80::1"])).len(),
            1
        );
    }

    #[test]
    fn fqdn_needs_two_segments() {
        assert!(validate_endpoint_slice(&slice("FQDN", &["db.example.com."])).is_empty());
        assert_eq!(
            msgs(validate_endpoint_slice(&slice("FQDN", &["db"]))),
            vec![
                r#"endpoints[0].addresses[0]: Invalid value: "db": should be a domain with at least two segments separated by dots"#
            ]
        );
    }

    #[test]
    fn hostname_must_be_dns1123_label() {
        let mut s = slice("IPv4", &["10.0.0.1"]);
        s.endpoints[0].hostname = Some("a.b".into());
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec![r#"endpoints[0].hostname: Invalid value: "a.b": must not contain dots"#]
        );
    }

    #[test]
    fn node_name_must_be_dns_subdomain() {
        let mut s = slice("IPv4", &["10.0.0.1"]);
        s.endpoints[0].node_name = Some("Node_1".into());
        assert_eq!(validate_endpoint_slice(&s).len(), 1);
    }

    #[test]
    fn zone_hints_capped_unique_and_label_values() {
        let mut s = slice("IPv4", &["10.0.0.1"]);
        let zone = |n: &str| ForZone { name: n.into() };
        s.endpoints[0].hints = Some(EndpointHints {
            for_zones: Some(vec![zone("a"), zone("a"), zone("b c")]),
            for_nodes: Some(vec![ForNode { name: "n1".into() }]),
        });
        let errs = msgs(validate_endpoint_slice(&s));
        assert_eq!(
            errs[0],
            r#"endpoints[0].hints.forZones[1].name: Duplicate value: "a""#
        );
        assert!(errs[1].starts_with(
            r#"endpoints[0].hints.forZones[2].name: Invalid value: "b c": a valid label"#
        ));
        assert_eq!(errs.len(), 2);
        s.endpoints[0].hints = Some(EndpointHints {
            for_zones: Some((0..9).map(|i| zone(&format!("z{i}"))).collect()),
            for_nodes: None,
        });
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec!["endpoints[0].hints.forZones: Too many: 9: must have at most 8 items"]
        );
    }

    #[test]
    fn port_names_unique_including_empty() {
        let mut s = slice("IPv4", &[]);
        let port = |name: Option<&str>| EndpointPort {
            name: name.map(Into::into),
            port: Some(1),
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        s.ports = Some(vec![port(None), port(None)]);
        default_endpoint_slice(&mut s);
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec![r#"ports[1].name: Duplicate value: """#]
        );
    }

    #[test]
    fn port_protocol_required_and_supported() {
        let mut s = slice("IPv4", &[]);
        if let Some(ports) = s.ports.as_mut() {
            ports[0].protocol = None;
        }
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec!["ports[0].protocol: Required value"]
        );
        default_endpoint_slice(&mut s);
        assert!(validate_endpoint_slice(&s).is_empty());
        if let Some(ports) = s.ports.as_mut() {
            ports[0].protocol = Some("ICMP".into());
        }
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec![
                r#"ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#
            ]
        );
    }

    #[test]
    fn port_name_must_be_dns1123_label_and_app_protocol_qualified() {
        let mut s = slice("IPv4", &[]);
        if let Some(ports) = s.ports.as_mut() {
            ports[0].name = Some("HTTP".into());
            ports[0].app_protocol = Some("kubernetes.io/h2c".into());
        }
        assert_eq!(validate_endpoint_slice(&s).len(), 1);
        if let Some(ports) = s.ports.as_mut() {
            ports[0].name = Some("http".into());
            ports[0].app_protocol = Some("a/b/c".into());
        }
        assert_eq!(validate_endpoint_slice(&s).len(), 1);
    }

    #[test]
    fn twenty_thousand_ports_allowed_not_more() {
        let mut s = slice("IPv4", &[]);
        let port = |i: usize| EndpointPort {
            name: Some(format!("p{i}")),
            port: Some(1),
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        s.ports = Some((0..20_000).map(port).collect());
        assert!(validate_endpoint_slice(&s).is_empty());
        s.ports = Some((0..20_001).map(port).collect());
        assert_eq!(
            msgs(validate_endpoint_slice(&s)),
            vec!["ports: Too many: 20001: must have at most 20000 items"]
        );
    }

    #[test]
    fn name_must_be_dns_subdomain() {
        let mut s = slice("IPv4", &[]);
        s.metadata.name = Some("web..http".into());
        assert_eq!(validate_endpoint_slice(&s).len(), 1);
    }
}
