//! IP address rules: Go's `ParseIPSloppy` syntax, the address-family checks, and the
//! "non-special" rule (`ValidateEndpointIP`) that rejects addresses a Service cannot route to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::field::{ErrorList, FieldError, FieldPath};

/// The address family of an IP, as EndpointSlices name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    /// `IPv4`.
    V4,
    /// `IPv6`.
    V6,
}

impl IpFamily {
    /// The `addressType` / `ipFamilies` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }

    /// Parses `IPv4` / `IPv6`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(Self::V4),
            "IPv6" => Some(Self::V6),
            _ => None,
        }
    }
}

/// Parses an IP the way Kubernetes' `netutils.ParseIPSloppy` does: IPv4 octets may carry leading
/// zeros (read as decimal). IPv4-mapped IPv6 addresses are returned as IPv4, as Go's `To4` sees them.
pub fn parse_ip_sloppy(value: &str) -> Option<IpAddr> {
    if let Some(v4) = parse_ipv4_sloppy(value) {
        return Some(IpAddr::V4(v4));
    }
    if !value.contains(':') {
        return None;
    }
    let v6: Ipv6Addr = value.parse().ok()?;
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

fn parse_ipv4_sloppy(value: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = value.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse::<u8>().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv4Addr::from(octets))
}

/// The canonical text of an IP (dotted quad for IPv4 and IPv4-mapped IPv6, RFC 5952 for IPv6),
/// or `None` when it does not parse.
pub fn canonical_ip(value: &str) -> Option<String> {
    parse_ip_sloppy(value).map(|ip| ip.to_string())
}

/// The family of an IP string, or `None` when it does not parse.
pub fn ip_family(value: &str) -> Option<IpFamily> {
    parse_ip_sloppy(value).map(|ip| match ip {
        IpAddr::V4(_) => IpFamily::V4,
        IpAddr::V6(_) => IpFamily::V6,
    })
}

/// Why an address may not be an endpoint (unspecified, loopback, link-local, link-local
/// multicast), in the apiserver's words; `None` when it may.
pub fn special_ip_reasons(ip: IpAddr, original: &str) -> Vec<String> {
    let mut reasons = Vec::new();
    let (unspecified, loopback, link_local, ll_multicast) = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (
                v4.is_unspecified(),
                o[0] == 127,
                o[0] == 169 && o[1] == 254,
                o[0] == 224 && o[1] == 0 && o[2] == 0,
            )
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (
                v6.is_unspecified(),
                v6.is_loopback(),
                s[0] & 0xffc0 == 0xfe80,
                // Go's IsLinkLocalMulticast: ff with scope 2 (ffx2::/16).
                s[0] & 0xff0f == 0xff02,
            )
        }
    };
    if unspecified {
        reasons.push(format!("may not be unspecified ({original})"));
    }
    if loopback {
        reasons.push("may not be in the loopback range (127.0.0.0/8, ::1/128)".to_owned());
    }
    if link_local {
        reasons.push("may not be in the link-local range (169.254.0.0/16, fe80::/10)".to_owned());
    }
    if ll_multicast {
        reasons.push(
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".to_owned(),
        );
    }
    reasons
}

/// The message for a value that is no IP at all (`parseIP`).
pub const NOT_AN_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// `IsValidIPForLegacyField` with strict validation (the `StrictIPCIDRValidation` gate, on by
/// default since 1.36): any IP `ParseIPSloppy` reads, but no leading zeros and no IPv4-mapped
/// IPv6 addresses.
pub fn validate_ip(path: &FieldPath, value: &str) -> ErrorList {
    if parse_ip_sloppy(value).is_none() {
        return vec![FieldError::invalid(path, value, NOT_AN_IP)];
    }
    let mut errs = Vec::new();
    match value.parse::<IpAddr>() {
        Err(_) => errs.push(FieldError::invalid(path, value, "must not have leading 0s")),
        Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some() => errs.push(FieldError::invalid(
            path,
            value,
            "must not be an IPv4-mapped IPv6 address",
        )),
        Ok(_) => {}
    }
    errs
}

/// `IsValidIP`: [`validate_ip`], then the canonical form.
pub fn validate_ip_strict(path: &FieldPath, value: &str) -> ErrorList {
    let errs = validate_ip(path, value);
    if !errs.is_empty() {
        return errs;
    }
    match canonical_ip(value) {
        Some(c) if c != value => vec![FieldError::invalid(
            path,
            value,
            format!("must be in canonical form ({})", crate::field::go_quote(&c)),
        )],
        _ => Vec::new(),
    }
}

/// `ValidateEndpointIP` / `ValidateNonSpecialIP`.
pub fn validate_endpoint_ip(path: &FieldPath, value: &str) -> ErrorList {
    match parse_ip_sloppy(value) {
        None => vec![FieldError::invalid(
            path,
            value,
            "must be a valid IP address",
        )],
        Some(ip) => special_ip_reasons(ip, value)
            .into_iter()
            .map(|reason| FieldError::invalid(path, value, reason))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> FieldPath {
        FieldPath::new("endpoints")
            .index(0)
            .child("addresses")
            .index(0)
    }

    #[test]
    fn loopback_v4_message_matches_apiserver() {
        let errs = validate_endpoint_ip(&p(), "127.0.0.1");
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            r#"endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#
        );
    }

    #[test]
    fn loopback_v6_rejected() {
        assert_eq!(validate_endpoint_ip(&p(), "::1").len(), 1);
    }

    #[test]
    fn unspecified_names_the_address() {
        let errs = validate_endpoint_ip(&p(), "0.0.0.0");
        assert_eq!(errs[0].detail, "may not be unspecified (0.0.0.0)");
        assert_eq!(validate_endpoint_ip(&p(), "::").len(), 1);
    }

    #[test]
    fn link_local_unicast_rejected() {
        assert_eq!(
            validate_endpoint_ip(&p(), "169.254.1.2")[0].detail,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
        );
        assert_eq!(validate_endpoint_ip(&p(), "fe80::1").len(), 1);
        assert_eq!(validate_endpoint_ip(&p(), "febf::1").len(), 1);
        assert!(validate_endpoint_ip(&p(), "fec0::1").is_empty());
    }

    #[test]
    fn link_local_multicast_rejected() {
        assert_eq!(validate_endpoint_ip(&p(), "224.0.0.251").len(), 1);
        assert_eq!(validate_endpoint_ip(&p(), "ff02::1").len(), 1);
        assert!(validate_endpoint_ip(&p(), "224.0.1.1").is_empty());
    }

    #[test]
    fn ordinary_pod_ips_accepted() {
        assert!(validate_endpoint_ip(&p(), "10.244.0.5").is_empty());
        assert!(validate_endpoint_ip(&p(), "fd00::5").is_empty());
    }

    #[test]
    fn garbage_is_not_an_ip() {
        assert_eq!(
            validate_endpoint_ip(&p(), "foo")[0].detail,
            "must be a valid IP address"
        );
        assert_eq!(validate_ip(&p(), "1.2.3")[0].detail, NOT_AN_IP);
        assert_eq!(validate_ip(&p(), "1.2.3.256").len(), 1);
    }

    #[test]
    fn strict_legacy_ips_refuse_leading_zeros_and_mapped_addresses() {
        assert!(validate_ip(&p(), "10.0.0.1").is_empty());
        assert_eq!(
            validate_ip(&p(), "010.0.0.1")[0].detail,
            "must not have leading 0s"
        );
        assert_eq!(
            validate_ip(&p(), "::ffff:10.0.0.1")[0].detail,
            "must not be an IPv4-mapped IPv6 address"
        );
        assert_eq!(
            validate_ip_strict(&p(), "FD00::1")[0].detail,
            r#"must be in canonical form ("fd00::1")"#
        );
    }

    #[test]
    fn sloppy_ipv4_leading_zeros_parse_as_decimal() {
        assert_eq!(canonical_ip("010.001.0.9").as_deref(), Some("10.1.0.9"));
    }

    #[test]
    fn canonical_form_compresses_ipv6_and_unmaps_ipv4() {
        assert_eq!(canonical_ip("FD00:0:0::0001").as_deref(), Some("fd00::1"));
        assert_eq!(canonical_ip("::ffff:10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(ip_family("::ffff:10.0.0.1"), Some(IpFamily::V4));
    }
}
