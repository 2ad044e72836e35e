//! Which IP addresses the operator may ever connect to: one rule for pod IPs and webhook
//! addresses alike, so a spelling refused for one is refused for the other.
//!
//! Every address is canonicalised first (`::ffff:127.0.0.1` is `127.0.0.1`), and the
//! alternate IPv6 spellings of IPv4 addresses are refused outright: no pod has one, and a
//! webhook can name the IPv4 address itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Cloud metadata services outside the link-local ranges: AWS IMDS over IPv6 (a ULA) and
/// Alibaba Cloud's (in the shared 100.64/10 range). The link-local ones (169.254.169.254,
/// `fd00:ec2::254`'s IPv4 twin, GCP, Azure, OpenStack) are refused as link-local.
const METADATA: [IpAddr; 2] = [
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// The NAT64 well-known prefix `64:ff9b::/96` (RFC 6052): the last 32 bits are an IPv4
/// address a NAT64 gateway connects to.
const NAT64_WELL_KNOWN: [u16; 6] = [0x64, 0xff9b, 0, 0, 0, 0];

/// Why the operator must never connect to `ip`, or `None` when it may. `allow_loopback` admits
/// loopback (tests only: no pod or webhook of a cluster lives on the operator's loopback).
pub fn refusal(ip: IpAddr, allow_loopback: bool) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4, allow_loopback),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                // Canonicalised, the mapped address says what it really is.
                return Some(refusal_v4(v4, allow_loopback).unwrap_or("IPv4-mapped IPv6"));
            }
            let segments = v6.segments();
            if segments[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified() {
                // `::a.b.c.d`, the deprecated IPv4-compatible form.
                return Some("IPv4-compatible IPv6");
            }
            if segments[..6] == NAT64_WELL_KNOWN {
                let [a, b, c, d] = v6.octets()[12..] else {
                    return Some("NAT64");
                };
                return refusal_v4(Ipv4Addr::new(a, b, c, d), false)
                    .map(|_| "NAT64 of a refused IPv4 address");
            }
            refusal_v6(v6, allow_loopback)
        }
    }
}

fn refusal_v4(v4: Ipv4Addr, allow_loopback: bool) -> Option<&'static str> {
    if v4.is_loopback() {
        return (!allow_loopback).then_some("loopback");
    }
    if v4.octets()[0] == 0 {
        // 0.0.0.0/8: "this network"; Linux connects 0.0.0.0 to the local host.
        return Some("unspecified");
    }
    if v4.is_multicast() {
        return Some("multicast");
    }
    if v4.is_broadcast() {
        return Some("broadcast");
    }
    if v4.is_link_local() {
        return Some("link-local");
    }
    METADATA
        .contains(&IpAddr::V4(v4))
        .then_some("cloud metadata")
}

fn refusal_v6(v6: Ipv6Addr, allow_loopback: bool) -> Option<&'static str> {
    if v6.is_loopback() {
        return (!allow_loopback).then_some("loopback");
    }
    if v6.is_unspecified() {
        return Some("unspecified");
    }
    if v6.is_multicast() {
        return Some("multicast");
    }
    if v6.is_unicast_link_local() {
        return Some("link-local");
    }
    METADATA
        .contains(&IpAddr::V6(v6))
        .then_some("cloud metadata")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(ip: &str) -> Option<&'static str> {
        refusal(ip.parse().unwrap(), false)
    }

    #[test]
    fn refused_addresses_in_every_spelling() {
        for (ip, reason) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:7f00:1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("169.254.169.254", "link-local"),
            ("::ffff:169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("fd00:ec2::254", "cloud metadata"),
            ("100.100.100.200", "cloud metadata"),
            ("::ffff:100.100.100.200", "cloud metadata"),
            ("64:ff9b::a9fe:a9fe", "NAT64 of a refused IPv4 address"),
            ("64:ff9b::7f00:1", "NAT64 of a refused IPv4 address"),
            ("::7f00:1", "IPv4-compatible IPv6"),
            ("::ffff:10.0.0.1", "IPv4-mapped IPv6"),
        ] {
            assert_eq!(why(ip), Some(reason), "{ip}");
        }
    }

    #[test]
    fn pod_and_service_addresses_are_usable() {
        for ip in [
            "10.244.1.5",
            "100.64.0.1",
            "192.168.1.1",
            "fd00::1",
            "fd00:ec2::253",
            "2001:db8::1",
            "64:ff9b::a00:1",
        ] {
            assert_eq!(why(ip), None, "{ip}");
        }
        assert_eq!(
            refusal("::ffff:127.0.0.1".parse().unwrap(), true),
            Some("IPv4-mapped IPv6")
        );
        assert_eq!(refusal("127.0.0.1".parse().unwrap(), true), None);
        assert_eq!(refusal("::1".parse().unwrap(), true), None);
    }
}
