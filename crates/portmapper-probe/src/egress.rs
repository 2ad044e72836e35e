//! The webhook egress policy: which URL hosts a PortMapping's webhook may name.
//!
//! A webhook URL is the one destination a tenant chooses, and the operator calls it from its own
//! network position. The operator's administrator bounds it here: a host name must match one of
//! the allowed host patterns, an IP-literal host must lie in one of the allowed CIDRs. Either way
//! the address finally dialled must also pass [`crate::address::refusal`] (no loopback,
//! link-local, metadata, …), whatever the policy says.
//!
//! Host patterns are exact names (`decider.platform.svc`) or `*.` followed by a suffix
//! (`*.svc` matches any name ending in `.svc`); `*` alone matches every name. The label
//! `{namespace}` stands for the PortMapping's namespace, so the default,
//! [`DEFAULT_ALLOWED_HOSTS`], admits only Services of the PortMapping's own namespace.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

/// The default host patterns: Services of the PortMapping's own namespace, by their
/// namespace-qualified names. A tenant can then reach nothing through the operator that it
/// cannot reach from its own namespace: not another namespace's Services (which may admit the
/// operator's namespace), not the internet, not node or metadata addresses.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 2] =
    ["*.{namespace}.svc", "*.{namespace}.svc.cluster.local"];

/// The placeholder label for the PortMapping's namespace.
const NAMESPACE: &str = "{namespace}";

/// A host pattern or CIDR the policy could not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EgressError {
    /// Not a host name, `*.suffix` or `*`.
    #[error(
        "webhook host pattern {0:?}: want a DNS name, `*.` and a suffix, or `*` (labels of a-z, 0-9, '-', or {{namespace}})"
    )]
    Host(String),
    /// Not an `address/prefix`.
    #[error("webhook CIDR {0:?}: want an address/prefix such as 10.96.0.0/12 or fd00::/108")]
    Cidr(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: every name.
    Any,
    /// An exact name, lower case.
    Exact(String),
    /// `*.suffix`: stored as `.suffix`, lower case.
    Suffix(String),
}

impl HostPattern {
    fn parse(text: &str) -> Result<Self, EgressError> {
        let lower = text.trim().to_ascii_lowercase();
        if lower == "*" {
            return Ok(Self::Any);
        }
        // A trailing dot (an absolute name) matches the same hosts.
        let (suffix, name) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest.strip_suffix('.').unwrap_or(rest).to_owned()),
            None => (false, lower.strip_suffix('.').unwrap_or(&lower).to_owned()),
        };
        let label_ok = |l: &str| {
            l == NAMESPACE
                || (!l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        };
        if name.is_empty() || !name.split('.').all(label_ok) {
            return Err(EgressError::Host(text.to_owned()));
        }
        Ok(if suffix {
            Self::Suffix(format!(".{name}"))
        } else {
            Self::Exact(name)
        })
    }

    fn matches(&self, host: &str, namespace: &str) -> bool {
        let fill = |p: &str| p.replace(NAMESPACE, namespace);
        match self {
            Self::Any => true,
            Self::Exact(name) => host == fill(name),
            Self::Suffix(suffix) => {
                let suffix = fill(suffix);
                host.len() > suffix.len() && host.ends_with(&suffix)
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Exact(name) => f.write_str(name),
            Self::Suffix(suffix) => write!(f, "*{suffix}"),
        }
    }
}

/// Which webhook URL hosts the operator calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookEgress {
    hosts: Vec<HostPattern>,
    cidrs: Vec<IpNet>,
}

impl Default for WebhookEgress {
    /// [`DEFAULT_ALLOWED_HOSTS`], and no IP-literal hosts.
    fn default() -> Self {
        Self::new(DEFAULT_ALLOWED_HOSTS, [""; 0]).unwrap_or_else(|_| Self::deny_all())
    }
}

impl WebhookEgress {
    /// A policy from host patterns and CIDRs; empty entries are skipped, so an empty list
    /// refuses every host of that kind.
    pub fn new<H, C>(
        hosts: impl IntoIterator<Item = H>,
        cidrs: impl IntoIterator<Item = C>,
    ) -> Result<Self, EgressError>
    where
        H: AsRef<str>,
        C: AsRef<str>,
    {
        let hosts = hosts
            .into_iter()
            .filter(|h| !h.as_ref().trim().is_empty())
            .map(|h| HostPattern::parse(h.as_ref()))
            .collect::<Result<_, _>>()?;
        let cidrs = cidrs
            .into_iter()
            .filter(|c| !c.as_ref().trim().is_empty())
            .map(|c| {
                let text = c.as_ref().trim();
                text.parse::<IpNet>()
                    .map(|net| net.trunc())
                    .map_err(|_| EgressError::Cidr(text.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { hosts, cidrs })
    }

    /// Every host name and every IP literal (tests; the address rule still applies).
    pub fn allow_all() -> Self {
        Self {
            hosts: vec![HostPattern::Any],
            cidrs: vec![IpNet::V4(Default::default()), IpNet::V6(Default::default())],
        }
    }

    /// No webhook at all.
    pub fn deny_all() -> Self {
        Self {
            hosts: Vec::new(),
            cidrs: Vec::new(),
        }
    }

    /// Why a webhook of a PortMapping in `namespace` may not call `host` (as written in the
    /// URL, brackets removed), or `None` when it may.
    pub fn refusal(&self, host: &str, namespace: &str) -> Option<String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            if self.cidrs.iter().any(|net| net.contains(&ip)) {
                return None;
            }
            return Some(format!(
                "webhook address {ip} is outside the operator's webhook egress policy (--webhook-allowed-cidrs: {})",
                self.cidrs_text()
            ));
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if self.hosts.iter().any(|p| p.matches(&host, namespace)) {
            return None;
        }
        Some(format!(
            "webhook host {host} is outside the operator's webhook egress policy (--webhook-allowed-hosts: {})",
            self.hosts_text(namespace)
        ))
    }

    /// The host patterns, `{namespace}` filled in.
    fn hosts_text(&self, namespace: &str) -> String {
        if self.hosts.is_empty() {
            return "none".into();
        }
        let shown: Vec<String> = self
            .hosts
            .iter()
            .map(|p| p.to_string().replace(NAMESPACE, namespace))
            .collect();
        shown.join(",")
    }

    fn cidrs_text(&self) -> String {
        if self.cidrs.is_empty() {
            return "none".into();
        }
        let shown: Vec<String> = self.cidrs.iter().map(IpNet::to_string).collect();
        shown.join(",")
    }
}

impl fmt::Display for WebhookEgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hosts {}; IP addresses in {}",
            self.hosts_text(NAMESPACE),
            self.cidrs_text()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_admits_services_of_the_own_namespace_only() {
        let policy = WebhookEgress::default();
        for host in [
            "decider.shop.svc",
            "decider.shop.svc.cluster.local",
            "Decider.Shop.SVC.",
            "pod-0.headless.shop.svc.cluster.local",
        ] {
            assert_eq!(policy.refusal(host, "shop"), None, "{host}");
        }
        for host in [
            "decider.other.svc",
            "admin.tenant-b.svc.cluster.local",
            "shop.svc",
            "decider",
            "decider.shop",
            "example.com",
            "decider.shop.svc.evil.com",
            "metadata.google.internal",
            "10.96.0.10",
            "::ffff:127.0.0.1",
        ] {
            let why = policy.refusal(host, "shop").expect(host);
            assert!(why.contains("webhook egress policy"), "{why}");
        }
        let why = policy.refusal("decider.other.svc", "shop").unwrap();
        assert!(
            why.ends_with("(--webhook-allowed-hosts: *.shop.svc,*.shop.svc.cluster.local)"),
            "{why}"
        );
    }

    #[test]
    fn cidrs_admit_ip_literals_in_canonical_form() {
        let policy =
            WebhookEgress::new(["decider.platform.svc"], ["10.96.0.0/12", "fd00::/64"]).unwrap();
        assert_eq!(policy.refusal("10.96.0.10", "shop"), None);
        assert_eq!(policy.refusal("::ffff:10.96.0.10", "shop"), None);
        assert_eq!(policy.refusal("fd00::10", "shop"), None);
        assert!(policy.refusal("10.112.0.1", "shop").is_some());
        assert_eq!(policy.refusal("decider.platform.svc", "shop"), None);
        assert!(policy.refusal("x.decider.platform.svc", "shop").is_some());
    }

    #[test]
    fn patterns_are_checked() {
        for bad in [
            "*",
            "*.",
            "a.*.b",
            "a..b",
            "http://x",
            "x_y.svc",
            "*.{ns}.svc",
        ] {
            let result = WebhookEgress::new([bad], [""; 0]);
            if bad == "*" {
                assert!(result.is_ok());
            } else {
                assert_eq!(result, Err(EgressError::Host(bad.into())), "{bad}");
            }
        }
        assert_eq!(
            WebhookEgress::new([""; 0], ["10.0.0.0"]),
            Err(EgressError::Cidr("10.0.0.0".into()))
        );
        let none = WebhookEgress::new([""], [""]).unwrap();
        assert_eq!(none, WebhookEgress::deny_all());
        assert!(
            none.refusal("decider.shop.svc", "shop")
                .unwrap()
                .contains(": none)")
        );
    }
}
