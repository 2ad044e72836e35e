//! What the prober must evaluate: every network check (httpGet, tcpSocket, grpc, webhook) of
//! every (pool pod, Service port, IP family) the planner will look up, with the key under which
//! the planner reads the result back from [`NetworkDecisions`](crate::NetworkDecisions).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use portmapper_api::{CheckKind, PortMapping};

use crate::membership::{PortRules, port_rules, publish_not_ready};
use crate::network::{CheckPosition, NetworkKey};
use crate::planner::service_families;
use crate::pool::{SelectorError, pod_in_pool};
use crate::target::{
    PodAddress, is_terminal, pod_address, resolve_check_port, resolve_target_port,
};

/// One network check to run.
#[derive(Clone, Debug)]
pub struct ProbeTarget<'a> {
    /// Where the result goes.
    pub key: NetworkKey,
    /// The pod.
    pub pod: &'a Pod,
    /// The address to probe (the pod's address of `key.family`).
    pub address: IpAddr,
    /// The Service port's target port on this pod (`None` for a portless headless Service).
    pub target_port: Option<i32>,
    /// The port to probe: the check's own `port` resolved on the pod, else `target_port`
    /// (`None` for webhooks, and when a named check port is not exposed by the pod).
    pub probe_port: Option<i32>,
    /// The check (always a network kind).
    pub check: CheckKind<'a>,
}

fn check_port<'a>(check: &CheckKind<'a>) -> Option<&'a IntOrString> {
    match check {
        CheckKind::HttpGet(c) => c.port.as_ref(),
        CheckKind::TcpSocket(c) => c.port.as_ref(),
        CheckKind::Grpc(c) => c.port.as_ref(),
        _ => None,
    }
}

/// Whether `check` would dial the target port of a UDP or SCTP Service port over TCP: a probe
/// without its own `port` on a non-TCP port has nothing to test, so it is never run and the
/// planner excludes the pod with a reason that says so.
pub(crate) fn dials_non_tcp_target(check: &CheckKind<'_>, protocol: &str) -> bool {
    matches!(
        check,
        CheckKind::HttpGet(_) | CheckKind::TcpSocket(_) | CheckKind::Grpc(_)
    ) && check_port(check).is_none()
        && protocol != "TCP"
}

/// Whether a check (or one of its `anyOf` entries) is evaluated by the prober.
fn has_network_check(check: &portmapper_api::Check) -> bool {
    match check.kind() {
        Some(CheckKind::AnyOf(leaves)) => leaves
            .iter()
            .any(|l| l.kind().is_some_and(|k| k.is_network())),
        Some(kind) => kind.is_network(),
        None => false,
    }
}

/// Every network check the planner may consult for this PortMapping. Nothing is listed while
/// `publishNotReadyAddresses` is in force (network checks are health checks, bypassed then),
/// for ExternalName Services, or for pods the planner never evaluates (outside the pool,
/// terminal, without a usable address, not exposing a named target port).
pub fn probe_targets<'a>(
    port_mapping: &'a PortMapping,
    service: &'a Service,
    pods: &[&'a Pod],
) -> Result<Vec<ProbeTarget<'a>>, SelectorError> {
    let spec = &port_mapping.spec;
    let namespace = port_mapping
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default();
    let svc_spec = service.spec.as_ref();
    if publish_not_ready(spec, service)
        || svc_spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName")
    {
        return Ok(Vec::new());
    }
    let families = service_families(service);
    let ports = svc_spec
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    // A headless Service without ports is evaluated once per pod under the name "".
    let headless = svc_spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    let views: Vec<Option<&k8s_openapi::api::core::v1::ServicePort>> =
        if ports.is_empty() && headless {
            vec![None]
        } else {
            ports.iter().map(Some).collect()
        };
    // Most PortMappings probe nothing: skip the walk over every pod then.
    let probes_any = views.iter().any(|sp| {
        let name = sp.and_then(|p| p.name.as_deref()).unwrap_or_default();
        port_rules(spec, name)
            .checks()
            .iter()
            .any(has_network_check)
    });
    if !probes_any {
        // Still report an invalid selector, as the walk would.
        if let Some(selector) = &spec.pods.selector {
            crate::pool::selector_matches(selector, None)?;
        }
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for pod in pods {
        if !pod_in_pool(spec, namespace, pod)? || is_terminal(pod) {
            continue;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        for sp in &views {
            let name = sp.and_then(|p| p.name.as_deref()).unwrap_or_default();
            let protocol = sp.map_or("TCP", |p| crate::target::service_port_protocol(p));
            let rules = port_rules(spec, name);
            let PortRules::Checks(checks) = rules else {
                continue;
            };
            let target = match sp {
                Some(sp) => match resolve_target_port(pod, sp) {
                    Some(t) => Some(t.number),
                    None => continue,
                },
                None => None,
            };
            for &family in &families {
                let PodAddress::Usable(address) = pod_address(pod, family) else {
                    continue;
                };
                for (index, check) in checks.iter().enumerate() {
                    let Some(kind) = check.kind() else { continue };
                    let mut push = |kind: CheckKind<'a>, any_of: Option<usize>| {
                        if !kind.is_network() || dials_non_tcp_target(&kind, protocol) {
                            return;
                        }
                        let probe_port = match (&kind, check_port(&kind)) {
                            (CheckKind::Webhook(_), _) => None,
                            (_, Some(p)) => resolve_check_port(pod, p),
                            (_, None) => target,
                        };
                        out.push(ProbeTarget {
                            key: NetworkKey {
                                pod_uid: uid.clone(),
                                port_name: name.to_owned(),
                                family,
                                position: CheckPosition { index, any_of },
                            },
                            pod,
                            address,
                            target_port: target,
                            probe_port,
                            check: kind,
                        });
                    };
                    match kind {
                        CheckKind::AnyOf(leaves) => {
                            for (j, leaf) in leaves.iter().enumerate() {
                                if let Some(k) = leaf.kind() {
                                    push(k, Some(j));
                                }
                            }
                        }
                        k => push(k, None),
                    }
                }
            }
        }
    }
    Ok(out)
}
