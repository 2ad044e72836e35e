//! Resolving a Service port against one pod: the target port number (named targetPorts are
//! looked up per pod, in containers then sidecar init containers, by name and protocol), the
//! container that declares it, and the pod's address per family.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use kube_validation::ip::{parse_ip_sloppy, special_ip_reasons};

use crate::pod_record::PodRecord;

/// Where a Service port lands on one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedTarget<'a> {
    /// The port number on the pod.
    pub number: i32,
    /// The container (or sidecar init container) that declares it, if any does.
    pub container: Option<&'a str>,
}

/// A Service port resolved for one pod at one address: what a check sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedPort<'a> {
    /// Service port name (`""` for an unnamed single port or a headless Service without ports).
    pub name: &'a str,
    /// Service port number (`None` for a headless Service without ports).
    pub port: Option<i32>,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: &'a str,
    /// The target port on this pod (`None` for a headless Service without ports).
    pub target: Option<ResolvedTarget<'a>>,
    /// The address being evaluated (probes go there).
    pub address: IpAddr,
    /// Its family.
    pub family: IpFamily,
}

/// A Service port's protocol, defaulting to TCP.
pub fn service_port_protocol(port: &ServicePort) -> &str {
    port.protocol
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or("TCP")
}

/// Whether a Service port's targetPort is a name (resolved per pod).
pub fn is_named_target(port: &ServicePort) -> bool {
    matches!(port.target_port, Some(IntOrString::String(_)))
}

/// Resolves a Service port's target on a pod (Kubernetes' `FindPort`): a number is used as is
/// (`None`/0 means the Service port number); a name must match a container port with the same
/// protocol. `None` when a named target is not exposed by the pod.
pub fn resolve_target_port<'a>(
    pod: &'a PodRecord,
    port: &ServicePort,
) -> Option<ResolvedTarget<'a>> {
    let protocol = service_port_protocol(port);
    let same_protocol = |p: &k8s_openapi::api::core::v1::ContainerPort| {
        p.protocol
            .as_deref()
            .filter(|x| !x.is_empty())
            .unwrap_or("TCP")
            == protocol
    };
    match &port.target_port {
        Some(IntOrString::String(name)) => pod.serving_containers().find_map(|c| {
            c.ports.iter().find_map(|p| {
                (p.name.as_deref() == Some(name.as_str()) && same_protocol(p)).then_some(
                    ResolvedTarget {
                        number: p.container_port,
                        container: Some(c.name.as_str()),
                    },
                )
            })
        }),
        other => {
            let number = match other {
                Some(IntOrString::Int(n)) if *n != 0 => *n,
                _ => port.port,
            };
            let container = pod.serving_containers().find_map(|c| {
                c.ports
                    .iter()
                    .any(|p| p.container_port == number && same_protocol(p))
                    .then_some(c.name.as_str())
            });
            Some(ResolvedTarget { number, container })
        }
    }
}

/// Resolves a check's own `port` (number or container port name, any protocol) on a pod.
pub fn resolve_check_port(pod: &PodRecord, port: &IntOrString) -> Option<i32> {
    match port {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => pod.serving_containers().find_map(|c| {
            c.ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
        }),
    }
}

/// The pod's address of one family, from `status.podIPs` (falling back to `status.podIP`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodAddress {
    /// A usable address, canonicalised.
    Usable(IpAddr),
    /// The pod has an address of this family the API rejects for endpoints.
    Rejected {
        /// The address as the pod reports it.
        ip: String,
        /// Why the API rejects it.
        reason: String,
    },
    /// The pod has no address of this family (yet).
    Missing,
}

/// Picks the pod's first address of `family`.
pub fn pod_address(pod: &PodRecord, family: IpFamily) -> PodAddress {
    let ips: &[String] = if pod.pod_ips.is_empty() {
        pod.pod_ip.as_slice()
    } else {
        &pod.pod_ips
    };
    for raw in ips {
        let raw = raw.as_str();
        let Some(ip) = parse_ip_sloppy(raw) else {
            continue;
        };
        let this_family = match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        };
        if this_family != family {
            continue;
        }
        let reasons = special_ip_reasons(ip, raw);
        return if reasons.is_empty() {
            PodAddress::Usable(ip)
        } else {
            PodAddress::Rejected {
                ip: raw.to_owned(),
                reason: reasons.join("; "),
            }
        };
    }
    PodAddress::Missing
}

/// Whether the pod has finished for good (`Succeeded` or `Failed`).
pub fn is_terminal(pod: &PodRecord) -> bool {
    matches!(pod.phase.as_deref(), Some("Succeeded" | "Failed"))
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &PodRecord) -> bool {
    pod.deletion_timestamp.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodIP, PodSpec, PodStatus};

    fn cport(name: &str, number: i32, protocol: Option<&str>) -> ContainerPort {
        ContainerPort {
            name: Some(name.into()),
            container_port: number,
            protocol: protocol.map(Into::into),
            ..ContainerPort::default()
        }
    }

    fn pod_with(containers: Vec<Container>, init: Vec<Container>) -> PodRecord {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
        .into()
    }

    fn container(name: &str, ports: Vec<ContainerPort>, restart: Option<&str>) -> Container {
        Container {
            name: name.into(),
            ports: Some(ports),
            restart_policy: restart.map(Into::into),
            ..Container::default()
        }
    }

    fn sport(target: Option<IntOrString>, protocol: Option<&str>) -> ServicePort {
        ServicePort {
            name: Some("http".into()),
            port: 80,
            target_port: target,
            protocol: protocol.map(Into::into),
            ..ServicePort::default()
        }
    }

    #[test]
    fn numeric_target_port_used_as_is_and_defaults_to_port() {
        let pod = pod_with(
            vec![container("app", vec![cport("web", 8080, None)], None)],
            vec![],
        );
        let t = resolve_target_port(&pod, &sport(Some(IntOrString::Int(8080)), None));
        assert_eq!(
            t,
            Some(ResolvedTarget {
                number: 8080,
                container: Some("app")
            })
        );
        let t = resolve_target_port(&pod, &sport(None, None));
        assert_eq!(
            t,
            Some(ResolvedTarget {
                number: 80,
                container: None
            })
        );
    }

    #[test]
    fn named_target_port_resolves_per_pod_by_name_and_protocol() {
        let pod = pod_with(
            vec![container(
                "app",
                vec![cport("dns", 53, Some("UDP")), cport("dns", 5353, None)],
                None,
            )],
            vec![],
        );
        let udp = resolve_target_port(
            &pod,
            &sport(Some(IntOrString::String("dns".into())), Some("UDP")),
        );
        assert_eq!(udp.map(|t| t.number), Some(53));
        let tcp = resolve_target_port(&pod, &sport(Some(IntOrString::String("dns".into())), None));
        assert_eq!(tcp.map(|t| t.number), Some(5353));
    }

    #[test]
    fn named_target_port_found_in_sidecar_init_container_only() {
        let sidecar = container("proxy", vec![cport("admin", 9901, None)], Some("Always"));
        let plain_init = container("setup", vec![cport("setup", 1000, None)], None);
        let pod = pod_with(
            vec![container("app", vec![], None)],
            vec![sidecar, plain_init],
        );
        let t = resolve_target_port(
            &pod,
            &sport(Some(IntOrString::String("admin".into())), None),
        );
        assert_eq!(
            t,
            Some(ResolvedTarget {
                number: 9901,
                container: Some("proxy")
            })
        );
        assert_eq!(
            resolve_target_port(
                &pod,
                &sport(Some(IntOrString::String("setup".into())), None)
            ),
            None
        );
    }

    #[test]
    fn unexposed_named_target_is_unresolvable() {
        let pod = pod_with(
            vec![container("app", vec![cport("web", 8080, None)], None)],
            vec![],
        );
        assert_eq!(
            resolve_target_port(&pod, &sport(Some(IntOrString::String("grpc".into())), None)),
            None
        );
    }

    fn pod_ips(ips: &[&str]) -> PodRecord {
        Pod {
            status: Some(PodStatus {
                pod_ips: Some(ips.iter().map(|ip| PodIP { ip: (*ip).into() }).collect()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
        .into()
    }

    #[test]
    fn pod_address_picks_family_and_canonicalises() {
        let pod = pod_ips(&["10.0.0.1", "FD00:0::1"]);
        assert_eq!(
            pod_address(&pod, IpFamily::V4),
            PodAddress::Usable("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            pod_address(&pod, IpFamily::V6),
            PodAddress::Usable("fd00::1".parse().unwrap())
        );
        assert_eq!(
            pod_address(&pod_ips(&["10.0.0.1"]), IpFamily::V6),
            PodAddress::Missing
        );
    }

    #[test]
    fn pod_address_rejects_loopback_and_link_local() {
        let PodAddress::Rejected { reason, .. } =
            pod_address(&pod_ips(&["127.0.0.1"]), IpFamily::V4)
        else {
            panic!("expected a rejection");
        };
        assert!(reason.contains("loopback"));
        assert!(matches!(
            pod_address(&pod_ips(&["fe80::1"]), IpFamily::V6),
            PodAddress::Rejected { .. }
        ));
    }

    #[test]
    fn pod_ip_fallback_when_pod_ips_empty() {
        let pod: PodRecord = Pod {
            status: Some(PodStatus {
                pod_ip: Some("10.1.2.3".into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
        .into();
        assert_eq!(
            pod_address(&pod, IpFamily::V4),
            PodAddress::Usable("10.1.2.3".parse().unwrap())
        );
    }
}
