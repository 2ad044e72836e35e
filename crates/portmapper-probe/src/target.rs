//! Targets: what the operator asks the prober to watch, and the one address a probe may use.
//!
//! A probe's destination is never read from the check: checks have no host field, and the only
//! socket address an executor can connect to for a pod is a [`PodAddr`], which only
//! [`Target::pod_addr`] creates, from an IP the caller listed in [`PoolPod::ips`] for the
//! target's family and a port of that pod. `PodAddr` has no public constructor:
//!
//! ```compile_fail
//! use portmapper_probe::PodAddr;
//! let addr = PodAddr(std::net::SocketAddr::from(([169, 254, 169, 254], 80)));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use portmapper_api::ProbeSettings;
use portmapper_api::check::Dials;
pub use portmapper_api::check::{CheckType, NetworkCheck};
use portmapper_api::network_key::{CheckPosition, IpFamily, NetworkKey};

/// Namespace and name of a PortMapping.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingKey {
    /// Namespace of the PortMapping.
    pub namespace: String,
    /// Name of the PortMapping.
    pub name: String,
}

impl MappingKey {
    /// A key from namespace and name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for MappingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The family of an IP address.
fn family_of(ip: &IpAddr) -> IpFamily {
    match ip {
        IpAddr::V4(_) => IpFamily::V4,
        IpAddr::V6(_) => IpFamily::V6,
    }
}

/// A container port the pod declares, for checks that name a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    /// `ports[].name`.
    pub name: String,
    /// `ports[].containerPort`.
    pub port: u16,
    /// `ports[].protocol` (`TCP` when unset).
    pub protocol: String,
}

/// Where a pod's labels and annotations are read from when a webhook review is sent.
///
/// Only webhooks send them, and one pod has many targets (ports × checks × families): targets
/// hold a shared source instead of copies, so a pod with 256 KiB of annotations costs its
/// record once, whatever its fan-out.
pub trait MetadataSource: Send + Sync + 'static {
    /// `metadata.labels`.
    fn labels(&self) -> BTreeMap<String, String>;
    /// `metadata.annotations`.
    fn annotations(&self) -> BTreeMap<String, String>;
}

/// Labels and annotations held as maps (tests, and callers without a record to share).
struct OwnedMetadata {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl MetadataSource for OwnedMetadata {
    fn labels(&self) -> BTreeMap<String, String> {
        self.labels.clone()
    }
    fn annotations(&self) -> BTreeMap<String, String> {
        self.annotations.clone()
    }
}

/// A pod's labels and annotations, materialised only when read.
#[derive(Clone)]
pub struct PodMetadata(std::sync::Arc<dyn MetadataSource>);

impl PodMetadata {
    /// Metadata held as these maps.
    pub fn new(labels: BTreeMap<String, String>, annotations: BTreeMap<String, String>) -> Self {
        Self(std::sync::Arc::new(OwnedMetadata {
            labels,
            annotations,
        }))
    }

    /// Metadata read from `source` on demand.
    pub fn shared(source: std::sync::Arc<dyn MetadataSource>) -> Self {
        Self(source)
    }

    /// The pod's labels, copied.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.0.labels()
    }

    /// The pod's annotations, copied.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.0.annotations()
    }
}

impl Default for PodMetadata {
    fn default() -> Self {
        Self::new(BTreeMap::new(), BTreeMap::new())
    }
}

impl PartialEq for PodMetadata {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
            || (self.labels() == other.labels() && self.annotations() == other.annotations())
    }
}

impl Eq for PodMetadata {}

impl fmt::Debug for PodMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Annotations may be large: the count says enough in a log.
        let (labels, annotations) = (self.labels().len(), self.annotations().len());
        write!(f, "PodMetadata({labels} labels, {annotations} annotations)")
    }
}

/// The facts about one pool pod that probes need.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PoolPod {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Pod labels and annotations (sent to webhooks).
    pub metadata: PodMetadata,
    /// `status.podIPs`: the only addresses a probe of this pod may connect to.
    pub ips: Vec<IpAddr>,
    /// Declared container ports, to resolve named check ports.
    pub ports: Vec<ContainerPort>,
}

/// The Service port a target belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    /// `spec.ports[].name`.
    pub name: String,
    /// `spec.ports[].port`.
    pub port: i32,
    /// `spec.ports[].protocol`.
    pub protocol: String,
    /// The target port resolved for this pod: the default port of every check.
    pub target_port: u16,
}

/// Damped membership of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Membership {
    /// The check includes the pod.
    Included,
    /// The check excludes the pod.
    Excluded,
}

/// One thing to probe: a check of one Service port for one pod and address family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The pool pod, shared by every target of the pod and family.
    pub pod: Arc<PoolPod>,
    /// Name of the Service the PortMapping publishes (sent to webhooks).
    pub service: String,
    /// The Service port.
    pub port: ServicePort,
    /// Family of the slice being published; the probe uses the pod IP of this family.
    pub family: IpFamily,
    /// Where the check sits in the port's rules.
    pub position: CheckPosition,
    /// The check, shared by every target of its position (a webhook's `caBundle` may be
    /// 64 KiB).
    pub check: Arc<NetworkCheck>,
    /// `spec.probe` of the PortMapping.
    pub settings: ProbeSettings,
    /// Membership before the first probe: `Included` when the pod is published for this port
    /// now (so restarts and leader changes do not flap), else `Excluded`. Only read when the
    /// target is new to the prober.
    pub initial_membership: Membership,
}

/// A socket address on a pool pod: the only kind of pod address an executor connects to.
/// Created only by [`Target::pod_addr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PodAddr(SocketAddr);

impl PodAddr {
    /// The socket address.
    pub fn socket_addr(self) -> SocketAddr {
        self.0
    }
}

impl fmt::Display for PodAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a target has no address a probe may use. Pod-side facts: the probe excludes the pod.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// The pod lists no IP of the family.
    #[error("pod {pod} has no {family} address")]
    NoAddress {
        /// Pod name.
        pod: String,
        /// Wanted family.
        family: &'static str,
    },
    /// The pod IP is one a pod never legitimately has (see [`crate::address::refusal`]:
    /// unspecified, multicast, broadcast, link-local, cloud metadata, IPv6 spellings of IPv4
    /// addresses, or loopback when not allowed).
    #[error("pod {pod} address {ip} is not a usable pod IP ({why})")]
    Unusable {
        /// Pod name.
        pod: String,
        /// The IP.
        ip: IpAddr,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The check names a port the pod does not declare.
    #[error("pod {pod} declares no container port named {name:?}")]
    UnknownPortName {
        /// Pod name.
        pod: String,
        /// The port name.
        name: String,
    },
    /// The check's port number is outside 1–65535.
    #[error("check port {0} is not in 1-65535")]
    BadPortNumber(i32),
}

impl Target {
    /// This target's identity: the key the planner reads its result under.
    pub fn key(&self) -> NetworkKey {
        NetworkKey {
            pod_uid: self.pod.uid.clone(),
            port_name: self.port.name.clone(),
            family: self.family,
            position: self.position,
        }
    }

    /// The effective timeout: the check's `timeoutSeconds`, else `spec.probe.timeoutSeconds`,
    /// within 1–60 s.
    pub fn timeout(&self) -> std::time::Duration {
        crate::limits::clamp_timeout(
            self.check
                .timeout_seconds()
                .unwrap_or(self.settings.timeout_seconds),
        )
    }

    /// The pod IP of the target's family, if it is one a probe may use.
    pub fn pod_ip(&self, allow_loopback: bool) -> Result<IpAddr, AddrError> {
        let ip = self
            .pod
            .ips
            .iter()
            .copied()
            .find(|ip| family_of(ip) == self.family)
            .ok_or_else(|| AddrError::NoAddress {
                pod: self.pod.name.clone(),
                family: self.family.as_str(),
            })?;
        if let Some(why) = crate::address::refusal(ip, allow_loopback) {
            return Err(AddrError::Unusable {
                pod: self.pod.name.clone(),
                ip,
                why,
            });
        }
        Ok(ip)
    }

    /// The port a pod-facing check connects to: the check's explicit number, a container port
    /// of this pod it names, or the resolved target port.
    pub fn pod_port(&self) -> Result<u16, AddrError> {
        // Webhooks dial no pod port and do not call this; the arm only keeps the match total.
        match self.check.dials() {
            Dials::TargetPort | Dials::Elsewhere => Ok(self.port.target_port),
            Dials::PodPort(IntOrString::Int(n)) => match u16::try_from(*n) {
                Ok(port) if port != 0 => Ok(port),
                _ => Err(AddrError::BadPortNumber(*n)),
            },
            Dials::PodPort(IntOrString::String(name)) => self
                .pod
                .ports
                .iter()
                .find(|p| &p.name == name && p.protocol.eq_ignore_ascii_case("TCP"))
                .map(|p| p.port)
                .ok_or_else(|| AddrError::UnknownPortName {
                    pod: self.pod.name.clone(),
                    name: name.clone(),
                }),
        }
    }

    /// The one address a pod-facing probe of this target may connect to.
    pub fn pod_addr(&self, allow_loopback: bool) -> Result<PodAddr, AddrError> {
        Ok(PodAddr(SocketAddr::new(
            self.pod_ip(allow_loopback)?,
            self.pod_port()?,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portmapper_api::check::TcpSocketCheck;

    fn target(ips: &[&str], check: NetworkCheck) -> Target {
        Target {
            pod: PoolPod {
                name: "p".into(),
                uid: "u".into(),
                ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
                ports: vec![ContainerPort {
                    name: "admin".into(),
                    port: 9000,
                    protocol: "TCP".into(),
                }],
                ..PoolPod::default()
            }
            .into(),
            service: "svc".into(),
            port: ServicePort {
                name: "http".into(),
                port: 80,
                protocol: "TCP".into(),
                target_port: 8080,
            },
            family: IpFamily::V4,
            position: CheckPosition::top(0),
            check: check.into(),
            settings: ProbeSettings::default(),
            initial_membership: Membership::Excluded,
        }
    }

    fn tcp(port: Option<IntOrString>) -> NetworkCheck {
        NetworkCheck::TcpSocket(TcpSocketCheck {
            port,
            timeout_seconds: None,
        })
    }

    #[test]
    fn address_is_the_pod_ip_of_the_family_and_the_resolved_port() {
        let t = target(&["fd00::5", "10.244.1.5"], tcp(None));
        assert_eq!(
            t.pod_addr(false).unwrap().socket_addr(),
            "10.244.1.5:8080".parse().unwrap()
        );
        let mut v6 = t.clone();
        v6.family = IpFamily::V6;
        assert_eq!(
            v6.pod_addr(false).unwrap().socket_addr(),
            "[fd00::5]:8080".parse().unwrap()
        );
    }

    #[test]
    fn explicit_and_named_ports_resolve_on_the_pod() {
        let t = target(&["10.244.1.5"], tcp(Some(IntOrString::Int(7000))));
        assert_eq!(t.pod_port().unwrap(), 7000);
        let t = target(
            &["10.244.1.5"],
            tcp(Some(IntOrString::String("admin".into()))),
        );
        assert_eq!(t.pod_port().unwrap(), 9000);
        let t = target(
            &["10.244.1.5"],
            tcp(Some(IntOrString::String("nope".into()))),
        );
        assert!(matches!(
            t.pod_port(),
            Err(AddrError::UnknownPortName { .. })
        ));
        let t = target(&["10.244.1.5"], tcp(Some(IntOrString::Int(70000))));
        assert_eq!(t.pod_port(), Err(AddrError::BadPortNumber(70000)));
    }

    #[test]
    fn unusable_ips_are_refused() {
        for ip in [
            "0.0.0.0",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "127.0.0.1",
            "100.100.100.200",
        ] {
            let t = target(&[ip], tcp(None));
            assert!(
                matches!(t.pod_addr(false), Err(AddrError::Unusable { .. })),
                "{ip}"
            );
        }
        assert!(target(&["127.0.0.1"], tcp(None)).pod_addr(true).is_ok());
        // IPv6 spellings of IPv4 addresses are refused, loopback allowed or not.
        for ip in ["::ffff:10.244.1.5", "::ffff:127.0.0.1"] {
            let mut t = target(&[ip], tcp(None));
            t.family = IpFamily::V6;
            assert!(
                matches!(t.pod_addr(true), Err(AddrError::Unusable { .. })),
                "{ip}"
            );
        }
        assert!(matches!(
            target(&["fd00::1"], tcp(None)).pod_addr(false),
            Err(AddrError::NoAddress { .. })
        ));
    }

    #[test]
    fn check_timeout_overrides_and_is_capped() {
        let mut t = target(&["10.244.1.5"], tcp(None));
        assert_eq!(t.timeout(), std::time::Duration::from_secs(1));
        t.check = NetworkCheck::TcpSocket(TcpSocketCheck {
            port: None,
            timeout_seconds: Some(120),
        })
        .into();
        assert_eq!(t.timeout(), crate::limits::MAX_TIMEOUT);
    }
}
