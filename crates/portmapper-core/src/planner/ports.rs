//! The Service as the planner sees it: its IP families and its ports ([`PortView`]), each with
//! the PortMapping's rules for it.

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::PortMappingSpec;

use super::objects;
use super::types::PlanWarning;
use crate::membership::{PortRules, port_rules};
use crate::target::{is_named_target, service_port_protocol};

/// One Service port as the planner sees it (or the portless pseudo-port of a headless Service
/// without ports).
pub(crate) struct PortView<'a> {
    pub service_port: Option<&'a ServicePort>,
    /// Port name, `""` when unnamed or portless.
    pub name: &'a str,
    /// Name segment in slice names: the name, else the number; `None` when portless.
    pub key: Option<String>,
    pub number: Option<i32>,
    pub protocol: &'a str,
    pub named_target: bool,
    pub rules: PortRules<'a>,
}

/// The IP families the Service publishes, primary first: `spec.ipFamilies`, else the family of
/// its cluster IP, else IPv4.
pub fn service_families(service: &Service) -> Vec<IpFamily> {
    let spec = service.spec.as_ref();
    let mut families: Vec<IpFamily> = Vec::new();
    for f in spec
        .and_then(|s| s.ip_families.as_deref())
        .unwrap_or_default()
    {
        if let Some(f) = IpFamily::parse(f).filter(|f| !families.contains(f)) {
            families.push(f);
        }
    }
    if families.is_empty() {
        let from_ip = spec
            .and_then(|s| {
                s.cluster_ips
                    .as_ref()
                    .and_then(|ips| ips.first())
                    .or(s.cluster_ip.as_ref())
            })
            .and_then(|ip| kube_validation::ip::ip_family(ip));
        families.push(from_ip.unwrap_or(IpFamily::V4));
    }
    families
}

pub(crate) fn port_views<'a>(service: &'a Service, spec: &'a PortMappingSpec) -> Vec<PortView<'a>> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if ports.is_empty() {
        // Headless Services may have no ports: publish the pods for DNS with an empty port list,
        // under the default checks.
        if objects::is_headless(service) {
            return vec![PortView {
                service_port: None,
                name: "",
                key: None,
                number: None,
                protocol: "TCP",
                named_target: false,
                rules: port_rules(spec, ""),
            }];
        }
        return Vec::new();
    }
    ports
        .iter()
        .map(|sp| {
            let name = sp.name.as_deref().unwrap_or_default();
            PortView {
                service_port: Some(sp),
                name,
                key: Some(if name.is_empty() {
                    sp.port.to_string()
                } else {
                    name.to_owned()
                }),
                number: Some(sp.port),
                protocol: service_port_protocol(sp),
                named_target: is_named_target(sp),
                rules: port_rules(spec, name),
            }
        })
        .collect()
}

/// `spec.ports` entries matching no Service port (the portless pseudo-port of a headless Service
/// has no name, so every entry is unknown there).
pub(crate) fn unknown_ports(spec: &PortMappingSpec, ports: &[PortView<'_>]) -> Option<PlanWarning> {
    let named = |p: &&PortView<'_>| p.service_port.is_some() && !p.name.is_empty();
    let entries: Vec<String> = spec
        .ports
        .iter()
        .filter(|rule| !ports.iter().filter(named).any(|p| p.name == rule.name))
        .map(|rule| rule.name.clone())
        .collect();
    (!entries.is_empty()).then(|| PlanWarning::UnknownPort {
        entries,
        service_ports: ports
            .iter()
            .filter(named)
            .map(|p| p.name.to_owned())
            .collect(),
    })
}

pub(crate) fn static_target(sp: &ServicePort) -> i32 {
    match &sp.target_port {
        Some(IntOrString::Int(n)) if *n != 0 => *n,
        _ => sp.port,
    }
}
