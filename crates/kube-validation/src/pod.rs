//! The Pod rules the emulator enforces beyond ObjectMeta: at least one container, container
//! names, images and ports (`validateContainers`, `validateContainerPorts`) and the status IPs
//! (`validatePodIPs`, `validateHostIPs` of `ValidatePodStatusUpdate`). The rest of the Pod spec is
//! not validated.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod};

use crate::endpointslice::SUPPORTED_PROTOCOLS;
use crate::field::{BadValue, ErrorList, FieldError, FieldPath, go_quote};
use crate::ip::parse_ip_sloppy;
use crate::meta::{validate_object_meta, validate_object_meta_update};
use crate::names::{is_valid_port_name, is_valid_port_num, name_is_dns_subdomain};

/// `IsValidIPForLegacyField` with strict validation (the 1.34 default of
/// `StrictIPCIDRValidation`): Go's sloppy syntax, then no leading zeros and no IPv4-mapped IPv6
/// for values the old object did not already hold.
pub fn validate_legacy_ip(path: &FieldPath, value: &str, valid_old: &[String]) -> ErrorList {
    if valid_old.iter().any(|o| o == value) {
        return Vec::new();
    }
    crate::ip::validate_ip(path, value)
}

fn validate_container_ports(ports: &[ContainerPort], path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = path.index(i);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = is_valid_port_name(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(&p.child("name"), name, msg));
                }
            } else if !names.insert(name) {
                errs.push(FieldError::duplicate(&p.child("name"), name));
            }
        }
        if port.container_port == 0 {
            errs.push(FieldError::required(&p.child("containerPort"), ""));
        } else {
            for msg in is_valid_port_num(i64::from(port.container_port)) {
                errs.push(FieldError::invalid(
                    &p.child("containerPort"),
                    port.container_port,
                    msg,
                ));
            }
        }
        if let Some(host_port) = port.host_port.filter(|h| *h != 0) {
            for msg in is_valid_port_num(i64::from(host_port)) {
                errs.push(FieldError::invalid(&p.child("hostPort"), host_port, msg));
            }
        }
        match port.protocol.as_deref().unwrap_or_default() {
            "" => errs.push(FieldError::required(&p.child("protocol"), "")),
            proto if !SUPPORTED_PROTOCOLS.contains(&proto) => errs.push(FieldError::not_supported(
                &p.child("protocol"),
                proto,
                &SUPPORTED_PROTOCOLS,
            )),
            _ => {}
        }
    }
    errs
}

/// Each container's name (required, a DNS-1123 label, unique) and image (required), then its
/// ports (`validateContainers`).
fn containers_ports(containers: &[Container], path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    let mut names = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let p = path.index(i);
        if c.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else {
            let msgs = crate::names::is_dns1123_label(&c.name);
            errs.extend(
                msgs.into_iter()
                    .map(|m| FieldError::invalid(&p.child("name"), &c.name, m)),
            );
            if !names.insert(c.name.as_str()) {
                errs.push(FieldError::duplicate(&p.child("name"), &c.name));
            }
        }
        if c.image.as_deref().is_none_or(str::is_empty) {
            errs.push(FieldError::required(&p.child("image"), ""));
        }
        errs.extend(validate_container_ports(
            c.ports.as_deref().unwrap_or_default(),
            &p.child("ports"),
        ));
    }
    errs
}

/// The status IPs as the internal type holds them: v1 conversion makes `podIP` authoritative
/// (`podIPs` = [`podIP`] when they differ or the list is empty).
fn effective_ips(single: Option<&str>, list: Vec<String>) -> Vec<String> {
    match single.filter(|s| !s.is_empty()) {
        Some(ip) if list.first().map(String::as_str) != Some(ip) => vec![ip.to_owned()],
        _ => list,
    }
}

fn validate_ip_list(ips: &[String], old: &[String], path: &FieldPath, go_type: &str) -> ErrorList {
    let mut errs: ErrorList = ips
        .iter()
        .enumerate()
        .flat_map(|(i, ip)| validate_legacy_ip(&path.index(i), ip, old))
        .collect();
    let go_list = || {
        let items: Vec<String> = ips
            .iter()
            .map(|ip| format!("core.{go_type}{{IP:{}}}", go_quote(ip)))
            .collect();
        BadValue::Raw(format!("[]core.{go_type}{{{}}}", items.join(", ")))
    };
    if ips.len() > 1 {
        let parsed: Option<Vec<IpAddr>> = ips.iter().map(|ip| parse_ip_sloppy(ip)).collect();
        // Unparseable IPs fail IsDualStackIPStrings upstream (an internal error); they are
        // already reported above.
        if let Some(parsed) = parsed {
            let v4 = parsed.iter().filter(|ip| ip.is_ipv4()).count();
            let dual_stack = v4 >= 1 && v4 < parsed.len();
            if !dual_stack || ips.len() > 2 {
                errs.push(FieldError::invalid(
                    path,
                    go_list(),
                    "may specify no more than one IP for each IP family",
                ));
            }
        }
    }
    let mut seen = HashSet::new();
    for (i, ip) in ips.iter().enumerate() {
        if !seen.insert(ip.as_str()) {
            errs.push(FieldError::duplicate(
                &path.index(i),
                BadValue::Raw(format!("core.{go_type}{{IP:{}}}", go_quote(ip))),
            ));
        }
    }
    errs
}

fn pod_ips(pod: &Pod) -> Vec<String> {
    let status = pod.status.as_ref();
    effective_ips(
        status.and_then(|s| s.pod_ip.as_deref()),
        status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|l| l.iter().map(|p| p.ip.clone()).collect())
            .unwrap_or_default(),
    )
}

fn host_ips(pod: &Pod) -> Vec<String> {
    let status = pod.status.as_ref();
    effective_ips(
        status.and_then(|s| s.host_ip.as_deref()),
        status
            .and_then(|s| s.host_ips.as_ref())
            .map(|l| l.iter().map(|p| p.ip.clone()).collect())
            .unwrap_or_default(),
    )
}

fn validate_pod_fields(pod: &Pod, old: Option<&Pod>) -> ErrorList {
    let mut errs = Vec::new();
    if let Some(spec) = pod.spec.as_ref() {
        let path = FieldPath::new("spec");
        if spec.containers.is_empty() {
            errs.push(FieldError::required(&path.child("containers"), ""));
        }
        errs.extend(containers_ports(
            &spec.containers,
            &path.child("containers"),
        ));
        errs.extend(containers_ports(
            spec.init_containers.as_deref().unwrap_or_default(),
            &path.child("initContainers"),
        ));
    }
    let status = FieldPath::new("status");
    let old_pod_ips = old.map(pod_ips).unwrap_or_default();
    let old_host_ips = old.map(host_ips).unwrap_or_default();
    errs.extend(validate_ip_list(
        &pod_ips(pod),
        &old_pod_ips,
        &status.child("podIPs"),
        "PodIP",
    ));
    errs.extend(validate_ip_list(
        &host_ips(pod),
        &old_host_ips,
        &status.child("hostIPs"),
        "HostIP",
    ));
    errs
}

/// Validate a Pod on create: ObjectMeta, container ports, status IPs.
pub fn validate_pod(pod: &Pod) -> ErrorList {
    let mut errs = validate_object_meta(
        &pod.metadata,
        true,
        name_is_dns_subdomain,
        &FieldPath::new("metadata"),
        true,
    );
    errs.extend(validate_pod_fields(pod, None));
    errs
}

/// Validate a Pod update (main endpoint or `/status`): IPs the old object held stay valid.
pub fn validate_pod_update(new: &Pod, old: &Pod) -> ErrorList {
    let mut errs = validate_pod(new);
    // validate_pod checked the status IPs without the old ones; redo them with.
    errs.retain(|e| !e.field.starts_with("status."));
    let path = FieldPath::new("metadata");
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &path,
    ));
    errs.extend(
        validate_pod_fields(new, Some(old))
            .into_iter()
            .filter(|e| e.field.starts_with("status.")),
    );
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: serde_json::Value) -> Pod {
        serde_json::from_value(yaml).expect("pod")
    }

    fn msgs(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn containers_need_names_and_images() {
        let none = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": []}}),
        );
        assert_eq!(
            msgs(validate_pod(&none)),
            ["spec.containers: Required value"]
        );
        let bad = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "a"}]}}),
        );
        assert_eq!(
            msgs(validate_pod(&bad)),
            [
                r#"spec.containers[1].name: Duplicate value: "a""#,
                "spec.containers[1].image: Required value"
            ]
        );
    }

    #[test]
    fn port_names_are_iana_service_names() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "image": "app", "ports": [
                {"name": "sixteen-chars-ab", "containerPort": 80, "protocol": "TCP"},
                {"name": "http", "containerPort": 81, "protocol": "TCP"},
                {"name": "http", "containerPort": 82, "protocol": "TCP"},
                {"containerPort": 0, "protocol": "ICMP"}]}]}}),
        );
        assert_eq!(
            msgs(validate_pod(&p)),
            vec![
                r#"spec.containers[0].ports[0].name: Invalid value: "sixteen-chars-ab": must be no more than 15 characters"#,
                r#"spec.containers[0].ports[2].name: Duplicate value: "http""#,
                "spec.containers[0].ports[3].containerPort: Required value",
                r#"spec.containers[0].ports[3].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
            ]
        );
    }

    #[test]
    fn status_ips_are_ips_one_per_family() {
        let bad = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "status": {"podIP": "10.244.53.300"}}),
        );
        assert_eq!(
            msgs(validate_pod(&bad)),
            vec![
                r#"status.podIPs[0]: Invalid value: "10.244.53.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"#
            ]
        );
        let two_v4 = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                       "hostIP": "010.0.0.1"}}),
        );
        assert_eq!(
            msgs(validate_pod(&two_v4)),
            vec![
                r#"status.podIPs: Invalid value: []core.PodIP{core.PodIP{IP:"10.0.0.1"}, core.PodIP{IP:"10.0.0.2"}}: may specify no more than one IP for each IP family"#,
                r#"status.hostIPs[0]: Invalid value: "010.0.0.1": must not have leading 0s"#,
            ]
        );
        let dual = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d"},
            "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}}),
        );
        assert!(validate_pod(&dual).is_empty());
        // A value the stored object already holds stays valid (strict rules apply to new ones).
        let old = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "d", "resourceVersion": "1"},
            "status": {"hostIP": "010.0.0.1"}}),
        );
        assert_eq!(msgs(validate_pod_update(&old, &old)), Vec::<String>::new());
    }
}
