//! core/v1 Endpoints defaulting and validation (`pkg/apis/core/validation` `ValidateEndpoints`).

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, Endpoints};

use crate::endpointslice::SUPPORTED_PROTOCOLS;
use crate::field::{ErrorList, FieldError, FieldPath};
use crate::ip::{validate_endpoint_ip, validate_ip};
use crate::meta::{validate_object_meta, validate_object_meta_update};
use crate::names::{is_dns1123_label, is_qualified_name, is_valid_port_num, name_is_dns_subdomain};

/// Applies the v1 default `subsets[].ports[].protocol` → `TCP`.
pub fn default_endpoints(endpoints: &mut Endpoints) {
    for subset in endpoints.subsets.iter_mut().flatten() {
        for port in subset.ports.iter_mut().flatten() {
            port.protocol.get_or_insert_with(|| "TCP".to_owned());
        }
    }
}

/// Validates an Endpoints object being created (after [`default_endpoints`]).
pub fn validate_endpoints(endpoints: &Endpoints) -> ErrorList {
    let mut errs = validate_object_meta(
        &endpoints.metadata,
        true,
        name_is_dns_subdomain,
        &FieldPath::new("metadata"),
        true,
    );
    let path = FieldPath::new("subsets");
    for (i, subset) in endpoints.subsets.iter().flatten().enumerate() {
        let idx = path.index(i);
        let ready = subset.addresses.as_deref().unwrap_or_default();
        let not_ready = subset.not_ready_addresses.as_deref().unwrap_or_default();
        if ready.is_empty() && not_ready.is_empty() {
            errs.push(FieldError::required(
                &idx,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (j, address) in ready.iter().enumerate() {
            errs.extend(validate_address(address, &idx.child("addresses").index(j)));
        }
        for (j, address) in not_ready.iter().enumerate() {
            errs.extend(validate_address(
                address,
                &idx.child("notReadyAddresses").index(j),
            ));
        }
        let ports = subset.ports.as_deref().unwrap_or_default();
        for (j, port) in ports.iter().enumerate() {
            errs.extend(validate_port(
                port,
                ports.len() > 1,
                &idx.child("ports").index(j),
            ));
        }
    }
    errs
}

/// Validates an update: metadata update rules, then the object itself.
pub fn validate_endpoints_update(new: &Endpoints, old: &Endpoints) -> ErrorList {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &FieldPath::new("metadata"));
    errs.extend(validate_endpoints(new));
    errs
}

fn validate_address(address: &EndpointAddress, path: &FieldPath) -> ErrorList {
    let ip_path = path.child("ip");
    let mut errs = validate_ip(&ip_path, &address.ip);
    if let Some(hostname) = address.hostname.as_deref().filter(|h| !h.is_empty()) {
        let p = path.child("hostname");
        errs.extend(
            is_dns1123_label(hostname)
                .into_iter()
                .map(|m| FieldError::invalid(&p, hostname, m)),
        );
    }
    if let Some(node) = &address.node_name {
        let p = path.child("nodeName");
        errs.extend(
            name_is_dns_subdomain(node, false)
                .into_iter()
                .map(|m| FieldError::invalid(&p, node, m)),
        );
    }
    errs.extend(validate_endpoint_ip(&ip_path, &address.ip));
    errs
}

fn validate_port(port: &EndpointPort, require_name: bool, path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    let name = port.name.as_deref().unwrap_or_default();
    if require_name && name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else if !name.is_empty() {
        let p = path.child("name");
        errs.extend(
            is_dns1123_label(name)
                .into_iter()
                .map(|m| FieldError::invalid(&p, name, m)),
        );
    }
    errs.extend(
        is_valid_port_num(i64::from(port.port))
            .into_iter()
            .map(|m| FieldError::invalid(&path.child("port"), port.port, m)),
    );
    match port.protocol.as_deref().filter(|p| !p.is_empty()) {
        None => errs.push(FieldError::required(&path.child("protocol"), "")),
        Some(p) if !SUPPORTED_PROTOCOLS.contains(&p) => errs.push(FieldError::not_supported(
            &path.child("protocol"),
            p,
            &SUPPORTED_PROTOCOLS,
        )),
        Some(_) => {}
    }
    if let Some(app) = &port.app_protocol {
        let p = path.child("appProtocol");
        errs.extend(
            is_qualified_name(app)
                .into_iter()
                .map(|m| FieldError::invalid(&p, app, m)),
        );
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EndpointSubset;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn addr(ip: &str) -> EndpointAddress {
        EndpointAddress {
            ip: ip.into(),
            ..EndpointAddress::default()
        }
    }

    fn port(name: Option<&str>, number: i32) -> EndpointPort {
        EndpointPort {
            name: name.map(Into::into),
            port: number,
            protocol: Some("TCP".into()),
            app_protocol: None,
        }
    }

    fn endpoints(subsets: Vec<EndpointSubset>) -> Endpoints {
        Endpoints {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            subsets: Some(subsets),
        }
    }

    fn msgs(e: &Endpoints) -> Vec<String> {
        validate_endpoints(e)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn valid_endpoints_pass() {
        let e = endpoints(vec![EndpointSubset {
            addresses: Some(vec![addr("10.0.0.1")]),
            not_ready_addresses: Some(vec![addr("fd00::1")]),
            ports: Some(vec![port(Some("http"), 80), port(Some("https"), 443)]),
        }]);
        assert!(msgs(&e).is_empty());
    }

    #[test]
    fn subset_needs_addresses_or_not_ready_addresses() {
        let e = endpoints(vec![EndpointSubset {
            ports: Some(vec![port(None, 80)]),
            ..EndpointSubset::default()
        }]);
        assert_eq!(
            msgs(&e),
            vec!["subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`"]
        );
    }

    #[test]
    fn port_name_required_when_several_ports() {
        let e = endpoints(vec![EndpointSubset {
            addresses: Some(vec![addr("10.0.0.1")]),
            not_ready_addresses: None,
            ports: Some(vec![port(None, 80), port(Some("b"), 81)]),
        }]);
        assert_eq!(msgs(&e), vec!["subsets[0].ports[0].name: Required value"]);
    }

    #[test]
    fn port_number_in_range() {
        let e = endpoints(vec![EndpointSubset {
            addresses: Some(vec![addr("10.0.0.1")]),
            not_ready_addresses: None,
            ports: Some(vec![port(None, 0)]),
        }]);
        assert_eq!(
            msgs(&e),
            vec![
                "subsets[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
            ]
        );
    }

    #[test]
    fn special_ips_rejected_in_not_ready_addresses_too() {
        let e = endpoints(vec![EndpointSubset {
            addresses: None,
            not_ready_addresses: Some(vec![addr("169.254.169.254")]),
            ports: None,
        }]);
        assert_eq!(
            msgs(&e),
            vec![
                r#"subsets[0].notReadyAddresses[0].ip: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)"#
            ]
        );
    }

    #[test]
    fn invalid_ip_reported_by_both_checks_like_upstream() {
        let e = endpoints(vec![EndpointSubset {
            addresses: Some(vec![addr("nope")]),
            not_ready_addresses: None,
            ports: None,
        }]);
        assert_eq!(msgs(&e).len(), 2);
    }

    #[test]
    fn protocol_defaulted_then_required() {
        let mut e = endpoints(vec![EndpointSubset {
            addresses: Some(vec![addr("10.0.0.1")]),
            not_ready_addresses: None,
            ports: Some(vec![EndpointPort {
                port: 80,
                ..EndpointPort::default()
            }]),
        }]);
        assert_eq!(
            msgs(&e),
            vec!["subsets[0].ports[0].protocol: Required value"]
        );
        default_endpoints(&mut e);
        assert!(msgs(&e).is_empty());
    }

    #[test]
    fn hostname_must_be_label() {
        let mut a = addr("10.0.0.1");
        a.hostname = Some("Pod-A".into());
        let e = endpoints(vec![EndpointSubset {
            addresses: Some(vec![a]),
            not_ready_addresses: None,
            ports: None,
        }]);
        assert_eq!(msgs(&e).len(), 1);
    }
}
