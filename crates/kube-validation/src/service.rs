//! core/v1 Service defaulting (minus IP/nodePort allocation) and validation
//! (`pkg/apis/core/validation` `ValidateService`, `validateServicePort`,
//! `ValidateServiceClusterIPsRelatedFields`, `ValidateServiceUpdate`).

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::endpointslice::SUPPORTED_PROTOCOLS;
use crate::field::{BadValue, ErrorList, FieldError, FieldPath};
use crate::ip::{IpFamily, ip_family, validate_ip};
use crate::meta::{validate_labels, validate_object_meta, validate_object_meta_update};
use crate::names::{
    is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_port_name,
    is_valid_port_num, name_is_dns_label,
};

/// Service types, sorted as the apiserver lists them.
pub const SERVICE_TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
/// Session affinities, sorted.
pub const SESSION_AFFINITIES: [&str; 2] = ["ClientIP", "None"];
/// IP family policies, sorted.
pub const IP_FAMILY_POLICIES: [&str; 3] = ["PreferDualStack", "RequireDualStack", "SingleStack"];
/// IP families, sorted.
pub const IP_FAMILIES: [&str; 2] = ["IPv4", "IPv6"];
/// Traffic policies, sorted.
pub const TRAFFIC_POLICIES: [&str; 2] = ["Cluster", "Local"];
/// Traffic distributions accepted with the 1.34 default feature gates, sorted.
pub const TRAFFIC_DISTRIBUTIONS: [&str; 3] = ["PreferClose", "PreferSameNode", "PreferSameZone"];
/// Longest ClientIP session affinity timeout.
pub const MAX_CLIENT_IP_AFFINITY_SECONDS: i32 = 86400;

/// A string slice as field errors print it (JSON).
fn go_string_slice(values: &[String]) -> BadValue {
    crate::field::go_json_strings(values)
}

/// Applies the defaults clients read back (docs/emulator-spec.md §6.2), except cluster IP and
/// nodePort allocation, which need cluster state: type ClusterIP, sessionAffinity None, ports
/// protocol TCP and targetPort = port, internalTrafficPolicy Cluster, and for non-ExternalName
/// Services ipFamilyPolicy SingleStack and ipFamilies from the cluster IP (else IPv4);
/// externalTrafficPolicy Cluster and allocateLoadBalancerNodePorts for external types.
pub fn default_service(service: &mut Service) {
    let spec = service.spec.get_or_insert_with(ServiceSpec::default);
    let type_ = spec
        .type_
        .get_or_insert_with(|| "ClusterIP".to_owned())
        .clone();
    spec.session_affinity
        .get_or_insert_with(|| "None".to_owned());
    for port in spec.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".to_owned());
        if port.target_port.is_none() || port.target_port == Some(IntOrString::Int(0)) {
            port.target_port = Some(IntOrString::Int(port.port));
        }
    }
    if type_ == "ExternalName" {
        return;
    }
    spec.internal_traffic_policy
        .get_or_insert_with(|| "Cluster".to_owned());
    spec.ip_family_policy
        .get_or_insert_with(|| "SingleStack".to_owned());
    if spec.ip_families.as_ref().is_none_or(Vec::is_empty) {
        let family = spec
            .cluster_ip
            .as_deref()
            .and_then(ip_family)
            .unwrap_or(IpFamily::V4);
        spec.ip_families = Some(vec![family.as_str().to_owned()]);
    }
    if let Some(ip) = spec.cluster_ip.clone().filter(|ip| !ip.is_empty()) {
        spec.cluster_ips.get_or_insert_with(|| vec![ip]);
    }
    if type_ == "NodePort" || type_ == "LoadBalancer" {
        spec.external_traffic_policy
            .get_or_insert_with(|| "Cluster".to_owned());
    }
    if type_ == "LoadBalancer" {
        spec.allocate_load_balancer_node_ports.get_or_insert(true);
    }
}

fn is_headless(spec: &ServiceSpec) -> bool {
    spec.cluster_ip.as_deref() == Some("None")
}

fn validate_port(
    port: &ServicePort,
    require_name: bool,
    names: &mut HashSet<String>,
    path: &FieldPath,
) -> ErrorList {
    let mut errs = Vec::new();
    let name = port.name.as_deref().unwrap_or_default();
    let name_path = path.child("name");
    if require_name && name.is_empty() {
        errs.push(FieldError::required(&name_path, ""));
    } else if !name.is_empty() {
        errs.extend(
            is_dns1123_label(name)
                .into_iter()
                .map(|m| FieldError::invalid(&name_path, name, m)),
        );
        if !names.insert(name.to_owned()) {
            errs.push(FieldError::duplicate(&name_path, name));
        }
    }
    errs.extend(
        is_valid_port_num(i64::from(port.port))
            .into_iter()
            .map(|m| FieldError::invalid(&path.child("port"), port.port, m)),
    );
    match port.protocol.as_deref().filter(|p| !p.is_empty()) {
        None => errs.push(FieldError::required(&path.child("protocol"), "")),
        Some(p) if !SUPPORTED_PROTOCOLS.contains(&p) => {
            errs.push(FieldError::not_supported(
                &path.child("protocol"),
                p,
                &SUPPORTED_PROTOCOLS,
            ));
        }
        Some(_) => {}
    }
    let target_path = path.child("targetPort");
    match &port.target_port {
        Some(IntOrString::Int(n)) => errs.extend(
            is_valid_port_num(i64::from(*n))
                .into_iter()
                .map(|m| FieldError::invalid(&target_path, *n, m)),
        ),
        Some(IntOrString::String(s)) => errs.extend(
            is_valid_port_name(s)
                .into_iter()
                .map(|m| FieldError::invalid(&target_path, s, m)),
        ),
        // Defaulting fills it; an undefaulted object reads as 0 in Go.
        None => errs.push(FieldError::invalid(
            &target_path,
            0,
            "must be between 1 and 65535, inclusive",
        )),
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

fn validate_cluster_ips(spec: &ServiceSpec) -> ErrorList {
    let mut errs = Vec::new();
    let path = FieldPath::new("spec");
    let ips_path = path.child("clusterIPs");
    let cluster_ip = spec.cluster_ip.as_deref().unwrap_or_default();
    let ips = spec.cluster_ips.as_deref().unwrap_or_default();
    if !cluster_ip.is_empty() {
        if ips.is_empty() {
            errs.push(FieldError::required(&ips_path, ""));
        } else if ips[0] != cluster_ip {
            errs.push(FieldError::invalid(
                &ips_path,
                go_string_slice(ips),
                "first value must match `clusterIP`",
            ));
        }
    } else if !ips.is_empty() {
        errs.push(FieldError::invalid(
            &ips_path,
            go_string_slice(ips),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let families = spec.ip_families.as_deref().unwrap_or_default();
    let mut seen = HashSet::new();
    for (i, f) in families.iter().enumerate() {
        let p = path.child("ipFamilies").index(i);
        if !IP_FAMILIES.contains(&f.as_str()) {
            errs.push(FieldError::not_supported(&p, f, &IP_FAMILIES));
        }
        if !seen.insert(f.as_str()) {
            errs.push(FieldError::duplicate(&p, f));
        }
    }
    if let Some(policy) = spec
        .ip_family_policy
        .as_deref()
        .filter(|p| !IP_FAMILY_POLICIES.contains(p))
    {
        errs.push(FieldError::not_supported(
            &path.child("ipFamilyPolicy"),
            policy,
            &IP_FAMILY_POLICIES,
        ));
    }
    let mut invalid = false;
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                invalid = true;
                errs.push(FieldError::invalid(
                    &ips_path,
                    go_string_slice(ips),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        let e = validate_ip(&ips_path.index(i), ip);
        invalid |= !e.is_empty();
        errs.extend(e);
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid(
            &ips_path,
            go_string_slice(ips),
            "may only hold up to 2 values",
        ));
    }
    if invalid {
        return errs;
    }
    if ips.len() > 1 {
        let fams: HashSet<Option<IpFamily>> = ips.iter().map(|ip| ip_family(ip)).collect();
        if fams.len() != ips.len() {
            errs.push(FieldError::invalid(
                &ips_path,
                go_string_slice(ips),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !is_headless(spec) {
        for (i, (ip, family)) in ips.iter().zip(families).enumerate() {
            let is_v6 = ip_family(ip) == Some(IpFamily::V6);
            if family == "IPv4" && is_v6 {
                errs.push(FieldError::invalid(
                    &ips_path.index(i),
                    ip,
                    format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
            if family == "IPv6" && !is_v6 {
                errs.push(FieldError::invalid(
                    &ips_path.index(i),
                    ip,
                    format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
    errs
}

/// The IP family name of a family (`IPv4`, `IPv6`).
fn family_name(f: IpFamily) -> &'static str {
    match f {
        IpFamily::V4 => "IPv4",
        IpFamily::V6 => "IPv6",
    }
}

/// The API server's `initIPFamilyFields` (service REST storage, run before cluster IPs are
/// allocated): defaults `ipFamilyPolicy` (the old object's on update; `RequireDualStack` for a
/// headless Service without selector; else `SingleStack`) and `ipFamilies` (from `clusterIPs`,
/// then the cluster's primary family, then the other family unless single-stack), and rejects
/// families the cluster does not serve. `cluster_families` is the service CIDRs' families,
/// primary first. ExternalName Services are left alone.
pub fn init_ip_family_fields(
    service: &mut Service,
    old: Option<&Service>,
    cluster_families: &[IpFamily],
) -> ErrorList {
    let mut errs = Vec::new();
    let Some(spec) = service.spec.as_mut() else {
        return errs;
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return errs;
    }
    let path = FieldPath::new("spec");
    let headless_selectorless = spec.cluster_ip.as_deref() == Some("None")
        && spec.selector.as_ref().is_none_or(|s| s.is_empty());
    if spec.ip_family_policy.is_none() {
        let old_policy = old.and_then(|o| o.spec.as_ref()?.ip_family_policy.clone());
        spec.ip_family_policy = Some(match old_policy {
            Some(p) => p,
            None if headless_selectorless => "RequireDualStack".to_owned(),
            None => "SingleStack".to_owned(),
        });
    }
    let policy = spec.ip_family_policy.clone().unwrap_or_default();
    let policy_path = path.child("ipFamilyPolicy");
    let ips = spec.cluster_ips.clone().unwrap_or_default();
    let mut families = spec.ip_families.clone().unwrap_or_default();
    if policy == "SingleStack" {
        if ips.len() == 2 {
            errs.push(FieldError::invalid(
                &policy_path,
                &policy,
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
            ));
        }
        if families.len() == 2 {
            errs.push(FieldError::invalid(
                &policy_path,
                &policy,
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
            ));
        }
    }
    for (i, ip) in ips.iter().enumerate() {
        if ip == "None" {
            break;
        }
        // A malformed IP is reported by validation; nothing to infer from it.
        let Some(fam) = ip_family(ip) else { continue };
        if i >= families.len() {
            if cluster_families.contains(&fam) {
                families.push(family_name(fam).to_owned());
            } else {
                errs.push(FieldError::invalid(
                    &path.child("clusterIPs").index(i),
                    go_string_slice(&ips),
                    format!("{} is not configured on this cluster", family_name(fam)),
                ));
            }
        }
    }
    if !errs.is_empty() {
        return errs;
    }
    let primary = cluster_families.first().copied().unwrap_or(IpFamily::V4);
    let other = |f: &str| if f == "IPv4" { "IPv6" } else { "IPv4" };
    if headless_selectorless {
        if families.is_empty() {
            families.push(family_name(primary).to_owned());
        }
        if families.len() < 2 && policy != "SingleStack" {
            let alt = other(&families[0]).to_owned();
            families.push(alt);
        }
        spec.ip_families = Some(families);
        return errs;
    }
    if policy == "RequireDualStack" && cluster_families.len() < 2 {
        errs.push(FieldError::invalid(
            &policy_path,
            &policy,
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, f) in families.iter().enumerate() {
        let served = cluster_families.iter().any(|c| family_name(*c) == f);
        if !served {
            errs.push(FieldError::invalid(
                &path.child("ipFamilies").index(i),
                f,
                "not configured on this cluster",
            ));
        }
    }
    if !errs.is_empty() {
        return errs;
    }
    if families.is_empty() {
        families.push(family_name(primary).to_owned());
    }
    if policy != "SingleStack" && families.len() == 1 && cluster_families.len() == 2 {
        let alt = other(&families[0]).to_owned();
        families.push(alt);
    }
    spec.ip_families = Some(families);
    errs
}

fn go_service_port_key(port: &ServicePort) -> BadValue {
    BadValue::Raw(format!(
        "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
        crate::field::go_quote(port.protocol.as_deref().unwrap_or_default()),
        port.port
    ))
}

/// Validates a Service being created (after [`default_service`] and IP allocation).
pub fn validate_service(service: &Service) -> ErrorList {
    let mut errs = validate_object_meta(
        &service.metadata,
        true,
        // DNS-1123 labels since 1.36 (KEP-5311, RelaxedServiceNameValidation, on by default).
        name_is_dns_label,
        &FieldPath::new("metadata"),
        true,
    );
    let default_spec = ServiceSpec::default();
    let spec = service.spec.as_ref().unwrap_or(&default_spec);
    let path = FieldPath::new("spec");
    let type_ = spec.type_.as_deref().unwrap_or_default();
    let ports = spec.ports.as_deref().unwrap_or_default();
    if ports.is_empty() && !is_headless(spec) && type_ != "ExternalName" {
        errs.push(FieldError::required(&path.child("ports"), ""));
    }
    if type_ == "ExternalName" {
        if spec.cluster_ips.as_ref().is_some_and(|v| !v.is_empty()) {
            errs.push(FieldError::forbidden(
                &path.child("clusterIPs"),
                "may not be set for ExternalName services",
            ));
        }
        if spec.ip_families.as_ref().is_some_and(|v| !v.is_empty()) {
            errs.push(FieldError::forbidden(
                &path.child("ipFamilies"),
                "may not be set for ExternalName services",
            ));
        }
        if spec.ip_family_policy.is_some() {
            errs.push(FieldError::forbidden(
                &path.child("ipFamilyPolicy"),
                "may not be set for ExternalName services",
            ));
        }
        let cname = spec.external_name.as_deref().unwrap_or_default();
        let cname = cname.strip_suffix('.').unwrap_or(cname);
        if cname.is_empty() {
            errs.push(FieldError::required(&path.child("externalName"), ""));
        } else {
            let p = path.child("externalName");
            errs.extend(
                is_dns1123_subdomain(cname)
                    .into_iter()
                    .map(|m| FieldError::invalid(&p, cname, m)),
            );
        }
    }
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        errs.extend(validate_port(
            port,
            ports.len() > 1,
            &mut names,
            &path.child("ports").index(i),
        ));
    }
    if let Some(selector) = &spec.selector {
        errs.extend(validate_labels(selector, &path.child("selector")));
    }
    let affinity_path = path.child("sessionAffinity");
    match spec.session_affinity.as_deref().filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(&affinity_path, "")),
        Some(a) if !SESSION_AFFINITIES.contains(&a) => {
            errs.push(FieldError::not_supported(
                &affinity_path,
                a,
                &SESSION_AFFINITIES,
            ));
        }
        Some("ClientIP") => {
            let cfg_path = path.child("sessionAffinityConfig");
            let why = "when session affinity type is ClientIP";
            match spec.session_affinity_config.as_ref() {
                None => errs.push(FieldError::required(&cfg_path, why)),
                Some(cfg) => match cfg.client_ip.as_ref() {
                    None => errs.push(FieldError::required(&cfg_path.child("clientIP"), why)),
                    Some(c) => match c.timeout_seconds {
                        None => errs.push(FieldError::required(&cfg_path.child("clientIP").child("timeoutSeconds"), why)),
                        Some(t) if t <= 0 || t > MAX_CLIENT_IP_AFFINITY_SECONDS => errs.push(FieldError::invalid(
                            &cfg_path.child("clientIP").child("timeoutSeconds"),
                            t,
                            format!("must be greater than 0 and less than {MAX_CLIENT_IP_AFFINITY_SECONDS}"),
                        )),
                        Some(_) => {}
                    },
                },
            }
        }
        Some(_) => {
            if spec.session_affinity_config.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("sessionAffinityConfig"),
                    "must not be set when session affinity is None",
                ));
            }
        }
    }
    if type_ != "ExternalName" {
        errs.extend(validate_cluster_ips(spec));
    }
    for (i, ip) in spec.external_ips.iter().flatten().enumerate() {
        errs.extend(validate_ip(&path.child("externalIPs").index(i), ip));
    }
    if type_.is_empty() {
        errs.push(FieldError::required(&path.child("type"), ""));
    } else if !SERVICE_TYPES.contains(&type_) {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            type_,
            &SERVICE_TYPES,
        ));
    }
    if type_ == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if port.node_port.is_some_and(|n| n != 0) {
                errs.push(FieldError::forbidden(
                    &path.child("ports").index(i).child("nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut seen_node_ports = HashSet::new();
    let mut seen_keys = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = path.child("ports").index(i);
        if let Some(n) = port
            .node_port
            .filter(|n| *n != 0 && !seen_node_ports.insert((*n, port.protocol.clone())))
        {
            errs.push(FieldError::duplicate(&p.child("nodePort"), n));
        }
        if !seen_keys.insert((port.port, port.protocol.clone())) {
            errs.push(FieldError::duplicate(&p, go_service_port_key(port)));
        }
    }
    let externally_accessible = type_ == "LoadBalancer"
        || type_ == "NodePort"
        || (type_ == "ClusterIP" && spec.external_ips.as_ref().is_some_and(|v| !v.is_empty()));
    let etp_path = path.child("externalTrafficPolicy");
    match spec
        .external_traffic_policy
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        Some(p) if !externally_accessible => {
            errs.push(FieldError::invalid(
                &etp_path,
                p,
                "may only be set for externally-accessible services",
            ));
        }
        Some(p) if !TRAFFIC_POLICIES.contains(&p) => {
            errs.push(FieldError::not_supported(&etp_path, p, &TRAFFIC_POLICIES));
        }
        None if externally_accessible => errs.push(FieldError::required(&etp_path, "")),
        _ => {}
    }
    let itp_path = path.child("internalTrafficPolicy");
    match spec.internal_traffic_policy.as_deref() {
        None if type_ != "ExternalName" => errs.push(FieldError::required(&itp_path, "")),
        Some(p) if !TRAFFIC_POLICIES.contains(&p) => {
            errs.push(FieldError::not_supported(&itp_path, p, &TRAFFIC_POLICIES));
        }
        _ => {}
    }
    if let Some(td) = spec
        .traffic_distribution
        .as_deref()
        .filter(|t| !TRAFFIC_DISTRIBUTIONS.contains(t))
    {
        errs.push(FieldError::not_supported(
            &path.child("trafficDistribution"),
            td,
            &TRAFFIC_DISTRIBUTIONS,
        ));
    }
    errs
}

/// Validates an update: metadata update rules, the object itself, and that cluster IPs do not
/// change once set (upgrades that add a secondary IP and downgrades to SingleStack are allowed).
pub fn validate_service_update(new: &Service, old: &Service) -> ErrorList {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &FieldPath::new("metadata"));
    let default_spec = ServiceSpec::default();
    let (ns, os) = (
        new.spec.as_ref().unwrap_or(&default_spec),
        old.spec.as_ref().unwrap_or(&default_spec),
    );
    let external = |s: &ServiceSpec| s.type_.as_deref() == Some("ExternalName");
    let both_headless = is_headless(ns) && is_headless(os);
    if !(external(ns) || external(os) || both_headless) {
        let (new_ips, old_ips) = (
            ns.cluster_ips.as_deref().unwrap_or_default(),
            os.cluster_ips.as_deref().unwrap_or_default(),
        );
        let path = FieldPath::new("spec").child("clusterIPs");
        let shown = go_string_slice(new_ips);
        if new_ips.len() == old_ips.len() {
            for (i, ip) in old_ips.iter().enumerate() {
                if *ip != new_ips[i] {
                    errs.push(FieldError::invalid(
                        &path.index(i),
                        shown.clone(),
                        "may not change once set",
                    ));
                }
            }
        } else if old_ips.len() > new_ips.len() {
            if new_ips.is_empty() {
                errs.push(FieldError::invalid(
                    &path.index(0),
                    shown.clone(),
                    "primary clusterIP can not be unset",
                ));
            }
            if !old_ips.is_empty() && !new_ips.is_empty() && new_ips[0] != old_ips[0] {
                errs.push(FieldError::invalid(
                    &path.index(0),
                    shown.clone(),
                    "may not change once set",
                ));
            }
            if new_ips.len() == 1 && ns.ip_family_policy.as_deref() != Some("SingleStack") {
                errs.push(FieldError::invalid(
                    &path.index(0),
                    shown,
                    "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        } else if !old_ips.is_empty() && new_ips[0] != old_ips[0] {
            errs.push(FieldError::invalid(
                &path.index(0),
                shown,
                "may not change once set",
            ));
        }
    }
    errs.extend(validate_service(new));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ClientIPConfig, SessionAffinityConfig};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn port(name: &str, number: i32) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port: number,
            ..ServicePort::default()
        }
    }

    fn svc(ports: Vec<ServicePort>) -> Service {
        let mut s = Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(ports),
                cluster_ip: Some("10.96.0.10".into()),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        default_service(&mut s);
        s
    }

    fn msgs(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn spec(s: &mut Service) -> &mut ServiceSpec {
        s.spec.get_or_insert_with(ServiceSpec::default)
    }

    #[test]
    fn defaulted_service_is_valid() {
        let s = svc(vec![port("http", 80), port("https", 443)]);
        assert!(
            validate_service(&s).is_empty(),
            "{:?}",
            msgs(validate_service(&s))
        );
        let sp = s.spec.clone().unwrap_or_default();
        assert_eq!(sp.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(sp.ip_families, Some(vec!["IPv4".to_owned()]));
        assert_eq!(sp.cluster_ips, Some(vec!["10.96.0.10".to_owned()]));
        assert_eq!(
            sp.ports.unwrap_or_default()[0].target_port,
            Some(IntOrString::Int(80))
        );
    }

    #[test]
    fn service_name_must_be_a_dns1123_label() {
        let mut s = svc(vec![port("http", 80)]);
        s.metadata.name = Some("1st-api".into());
        assert!(
            msgs(validate_service(&s)).is_empty(),
            "KEP-5311: a leading digit is fine"
        );
        s.metadata.name = Some("Web".into());
        let errs = msgs(validate_service(&s));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .starts_with("metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 label"),
            "{errs:?}"
        );
        s.metadata.name = Some("a.b".into());
        assert_eq!(
            msgs(validate_service(&s)),
            ["metadata.name: Invalid value: \"a.b\": must not contain dots"]
        );
    }

    #[test]
    fn ports_required_unless_headless_or_external_name() {
        assert_eq!(
            msgs(validate_service(&svc(vec![]))),
            vec!["spec.ports: Required value"]
        );
        let mut headless = Service {
            metadata: svc(vec![]).metadata,
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        default_service(&mut headless);
        spec(&mut headless).cluster_ips = Some(vec!["None".into()]);
        assert!(
            validate_service(&headless).is_empty(),
            "{:?}",
            msgs(validate_service(&headless))
        );
    }

    #[test]
    fn port_names_required_unique_and_dns1123() {
        let mut s = svc(vec![
            port("", 80),
            port("b", 81),
            port("b", 82),
            port("B", 83),
        ]);
        default_service(&mut s);
        let errs = msgs(validate_service(&s));
        assert_eq!(errs[0], "spec.ports[0].name: Required value");
        assert_eq!(errs[1], r#"spec.ports[2].name: Duplicate value: "b""#);
        assert!(errs[2].starts_with(r#"spec.ports[3].name: Invalid value: "B""#));
    }

    #[test]
    fn target_port_number_or_iana_name() {
        let mut p = port("http", 80);
        p.target_port = Some(IntOrString::String("http--x".into()));
        let s = svc(vec![p]);
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                r#"spec.ports[0].targetPort: Invalid value: "http--x": must not contain consecutive hyphens"#
            ]
        );
        let mut p = port("http", 80);
        p.target_port = Some(IntOrString::Int(70000));
        assert_eq!(
            msgs(validate_service(&svc(vec![p]))),
            vec![
                "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
            ]
        );
    }

    #[test]
    fn duplicate_port_and_protocol_rejected() {
        let errs = msgs(validate_service(&svc(vec![port("a", 80), port("b", 80)])));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with(
            "spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\""
        ));
    }

    #[test]
    fn type_must_be_supported() {
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).type_ = Some("Magic".into());
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                r#"spec.type: Unsupported value: "Magic": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort""#
            ]
        );
    }

    #[test]
    fn external_name_needs_a_dns_name_and_no_cluster_ips() {
        let mut s = Service {
            metadata: svc(vec![]).metadata,
            spec: Some(ServiceSpec {
                type_: Some("ExternalName".into()),
                external_name: Some("db.example.com.".into()),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        default_service(&mut s);
        assert!(
            validate_service(&s).is_empty(),
            "{:?}",
            msgs(validate_service(&s))
        );
        spec(&mut s).external_name = None;
        spec(&mut s).cluster_ips = Some(vec!["10.96.0.1".into()]);
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                "spec.clusterIPs: Forbidden: may not be set for ExternalName services",
                "spec.externalName: Required value",
            ]
        );
    }

    #[test]
    fn cluster_ips_first_must_match_cluster_ip_and_families() {
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).cluster_ips = Some(vec!["10.96.0.11".into()]);
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                r#"spec.clusterIPs: Invalid value: ["10.96.0.11"]: first value must match `clusterIP`"#
            ]
        );
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).ip_families = Some(vec!["IPv6".into()]);
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                "spec.clusterIPs[0]: Invalid value: \"10.96.0.10\": expected an IPv6 value as indicated by `ipFamilies[0]`"
            ]
        );
    }

    #[test]
    fn dual_stack_needs_one_ip_per_family() {
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).cluster_ips = Some(vec!["10.96.0.10".into(), "10.96.0.11".into()]);
        spec(&mut s).ip_families = Some(vec!["IPv4".into(), "IPv4".into()]);
        let errs = msgs(validate_service(&s));
        assert!(errs.contains(&r#"spec.ipFamilies[1]: Duplicate value: "IPv4""#.to_owned()));
        assert!(
            errs.iter()
                .any(|e| e.ends_with("may specify no more than one IP for each IP family"))
        );
    }

    #[test]
    fn session_affinity_client_ip_timeout_bounded() {
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).session_affinity = Some("ClientIP".into());
        spec(&mut s).session_affinity_config = Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(0),
            }),
        });
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400"
            ]
        );
    }

    #[test]
    fn node_port_forbidden_for_cluster_ip() {
        let mut p = port("http", 80);
        p.node_port = Some(30080);
        assert_eq!(
            msgs(validate_service(&svc(vec![p]))),
            vec!["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
        );
    }

    #[test]
    fn external_traffic_policy_only_for_external_services() {
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).external_traffic_policy = Some("Local".into());
        assert_eq!(
            msgs(validate_service(&s)),
            vec![
                r#"spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services"#
            ]
        );
    }

    #[test]
    fn traffic_distribution_values() {
        let mut s = svc(vec![port("http", 80)]);
        spec(&mut s).traffic_distribution = Some("PreferSameNode".into());
        assert!(validate_service(&s).is_empty());
        spec(&mut s).traffic_distribution = Some("Nearest".into());
        assert_eq!(validate_service(&s).len(), 1);
    }

    #[test]
    fn cluster_ip_may_not_change_once_set() {
        let mut old = svc(vec![port("http", 80)]);
        old.metadata.resource_version = Some("3".into());
        let mut new = old.clone();
        spec(&mut new).cluster_ip = Some("10.96.0.99".into());
        spec(&mut new).cluster_ips = Some(vec!["10.96.0.99".into()]);
        assert_eq!(
            msgs(validate_service_update(&new, &old)),
            vec![r#"spec.clusterIPs[0]: Invalid value: ["10.96.0.99"]: may not change once set"#]
        );
    }
}
