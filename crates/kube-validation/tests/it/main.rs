//! Property tests: the hand-written name matchers agree with apimachinery's regular
//! expressions (generated from the very patterns the error messages quote), and IP handling is
//! consistent with the standard library's parser.

use std::net::IpAddr;

use kube_validation::field::FieldPath;
use kube_validation::ip::{canonical_ip, parse_ip_sloppy, validate_endpoint_ip};
use kube_validation::names::{
    is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_label_value, is_valid_port_name,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn dns1123_labels_from_the_regex_are_accepted(s in "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?") {
        prop_assert!(is_dns1123_label(&s).is_empty());
        prop_assert!(is_dns1123_subdomain(&s).is_empty());
    }

    #[test]
    fn dns1123_subdomains_from_the_regex_are_accepted(s in "[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?){0,5}") {
        prop_assert!(is_dns1123_subdomain(&s).is_empty());
    }

    #[test]
    fn dns1035_labels_from_the_regex_are_accepted(s in "[a-z]([-a-z0-9]{0,61}[a-z0-9])?") {
        prop_assert!(is_dns1035_label(&s).is_empty());
    }

    #[test]
    fn qualified_names_from_the_regex_are_accepted(
        prefix in proptest::option::of("[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,10}){0,3}"),
        name in "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?",
    ) {
        let key = match prefix { Some(p) => format!("{p}/{name}"), None => name.clone() };
        prop_assert!(is_qualified_name(&key).is_empty(), "{key}");
        prop_assert!(is_valid_label_value(&name).is_empty());
    }

    #[test]
    fn any_string_outside_the_label_alphabet_is_rejected(s in "[a-z0-9]{0,5}[^-a-z0-9][a-z0-9]{0,5}") {
        prop_assert!(!is_dns1123_label(&s).is_empty());
        prop_assert!(!is_dns1123_subdomain(&s).is_empty() || s.contains('.'));
    }

    #[test]
    fn labels_longer_than_63_are_rejected(s in "[a-z]{64,80}") {
        prop_assert!(!is_dns1123_label(&s).is_empty());
        prop_assert!(!is_valid_label_value(&s).is_empty());
        prop_assert!(is_dns1123_subdomain(&s).is_empty());
    }

    #[test]
    fn iana_port_names_never_accept_double_hyphens(a in "[a-z]{1,6}", b in "[a-z]{1,6}") {
        let name = format!("{a}--{b}");
        prop_assert!(!is_valid_port_name(&name).is_empty());
        let single = format!("{a}-{b}");
        prop_assert_eq!(is_valid_port_name(&single).is_empty(), single.len() <= 15);
    }

    #[test]
    fn canonical_ips_parse_back_to_the_same_address(ip in any::<IpAddr>()) {
        let text = ip.to_string();
        let canonical = canonical_ip(&text);
        prop_assert!(canonical.is_some());
        let reparsed = parse_ip_sloppy(canonical.as_deref().unwrap_or_default());
        match ip {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
                prop_assert_eq!(reparsed, v6.to_ipv4_mapped().map(IpAddr::V4));
            }
            _ => prop_assert_eq!(reparsed, Some(ip)),
        }
    }

    #[test]
    fn special_address_classes_are_always_rejected(last in 0u8..=255, host in 1u16..=0xffff) {
        let p = FieldPath::new("ip");
        prop_assert_eq!(validate_endpoint_ip(&p, &format!("127.1.2.{last}")).len(), 1);
        prop_assert_eq!(validate_endpoint_ip(&p, &format!("169.254.9.{last}")).len(), 1);
        prop_assert_eq!(validate_endpoint_ip(&p, &format!("224.0.0.{last}")).len(), 1);
        prop_assert_eq!(validate_endpoint_ip(&p, &format!("fe80::{host:x}")).len(), 1);
        prop_assert_eq!(validate_endpoint_ip(&p, &format!("ff02::{host:x}")).len(), 1);
        let ok4 = format!("10.2.3.{last}");
        let ok6 = format!("fd00::{host:x}");
        prop_assert!(validate_endpoint_ip(&p, &ok4).is_empty());
        prop_assert!(validate_endpoint_ip(&p, &ok6).is_empty());
    }
}
