//! Fuzz targets (stable toolchain, proptest) for the untrusted input the planner reads from pods
//! and Services: the port-list annotation, pool keys read from annotations, pod IPs, and the
//! Service's labels and topology annotations. Property: planning never panics, every failure is
//! a typed [`PlanError`] with a message, and what is published is exactly what the rules allow.
//! Budget: `PORTMAPPER_FUZZ_CASES` (see `tests/support/fuzz_budget.rs`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use portmapper_api::KeySource;
use portmapper_core::PlanError;
use proptest::prelude::*;

use crate::fixtures::*;

#[path = "../../../../tests/support/fuzz_budget.rs"]
mod fuzz_budget;

/// Strings a hostile or careless pod owner writes: anything at all, near-miss port lists, and
/// very long values.
fn hostile_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("http".to_owned()),
        Just("https".to_owned()),
        Just("HTTP".to_owned()),
        Just(" http ".to_owned()),
        Just("\thttps\n".to_owned()),
        Just("http2".to_owned()),
        Just("htt".to_owned()),
        Just("\"http\"".to_owned()),
        Just("[\"http\"]".to_owned()),
        Just("http\u{0}".to_owned()),
        Just("\u{feff}http".to_owned()),
        Just("\u{a0}http\u{a0}".to_owned()),
        Just(String::new()),
        "\\PC{0,8}",
    ];
    let separator = prop_oneof![
        Just(","),
        Just(", "),
        Just(";"),
        Just(" "),
        Just(",,"),
        Just("\n")
    ];
    prop_oneof![
        4 => any::<String>(),
        4 => proptest::collection::vec((token, separator), 0..12).prop_map(|parts| {
            parts.into_iter().map(|(t, s)| format!("{t}{s}")).collect::<String>()
        }),
        1 => (1usize..20_000, any::<bool>()).prop_map(|(n, listed)| {
            let filler = "x,".repeat(n);
            if listed { format!("{filler}http") } else { filler }
        }),
    ]
}

/// What `portNames` must decide, written independently of the check: the comma-separated
/// entries, surrounding whitespace removed, compared exactly.
fn lists(value: &str, port: &str) -> bool {
    value.split(',').any(|entry| entry.trim() == port)
}

fn published(p: &portmapper_core::Plan, slice: &str) -> Vec<String> {
    p.slices
        .iter()
        .find(|s| s.slice.metadata.name.as_deref() == Some(slice))
        .map(|s| pod_names(&s.full()))
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(fuzz_budget::config())]

    /// The port-list annotation: any value plans, and a pod is published on a port exactly
    /// when its list names it; an excluded pod always carries a reason naming the check.
    #[test]
    fn fuzz_port_list_annotation(values in proptest::collection::vec(hostile_text(), 1..6)) {
        let pods = values
            .iter()
            .enumerate()
            .map(|(i, v)| PodBuilder::new(&format!("p{i}"), &[&format!("10.0.0.{}", i + 1)]).ports(v).build())
            .collect();
        let w = World::new(port_mapping(&["http", "https"]), web_service(), pods);
        let p = w.try_plan().map_err(|e| TestCaseError::fail(format!("plan failed: {e}")))?;
        for port in ["http", "https"] {
            let want: Vec<String> = values
                .iter()
                .enumerate()
                .filter(|(_, v)| lists(v, port))
                .map(|(i, _)| format!("p{i}"))
                .collect();
            prop_assert_eq!(published(&p, &format!("web.{port}")), want);
        }
        for status in &p.ports {
            for e in &status.excluded {
                prop_assert!(e.reason.starts_with("portNames: "), "{:?}", e.reason);
                // The reason names the key and the port, never the (possibly huge) value.
                prop_assert!(e.reason.len() < 200, "{} bytes", e.reason.len());
            }
        }
    }

    /// Pools keyed by an annotation: a pod is in the pool exactly when the value equals the
    /// Service name; anything else, however long or strange, leaves it out without error.
    #[test]
    fn fuzz_pool_annotation(values in proptest::collection::vec(
        prop_oneof![Just("web".to_owned()), Just(" web".to_owned()), Just("WEB".to_owned()), hostile_text()], 1..6)
    ) {
        let mut pm = port_mapping(&[]);
        pm.spec.pods.from = KeySource::Annotation;
        let pods = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut pod = PodBuilder::new(&format!("p{i}"), &[&format!("10.0.0.{}", i + 1)]).build();
                pod.metadata.labels = None;
                pod.metadata.annotations = Some(BTreeMap::from([(GROUP_KEY.to_owned(), v.clone())]));
                pod
            })
            .collect();
        let w = World::new(pm, service(vec![sport("http", 80, None)]), pods);
        let p = w.try_plan().map_err(|e| TestCaseError::fail(format!("plan failed: {e}")))?;
        let want: Vec<String> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.as_str() == "web")
            .map(|(i, _)| format!("p{i}"))
            .collect();
        prop_assert_eq!(published(&p, "web.http"), want.clone());
        prop_assert_eq!(p.ports[0].candidates, want.len() as i32);
    }

    /// Pod IPs: whatever a pod's status claims, only parseable addresses of the slice's family
    /// that the API accepts are published, in canonical form; the rest are excluded with
    /// a reason or never candidates.
    #[test]
    fn fuzz_pod_ips(ips in proptest::collection::vec(proptest::collection::vec(prop_oneof![
        Just("10.0.0.9".to_owned()),
        Just("127.0.0.1".to_owned()),
        Just("::1".to_owned()),
        Just("169.254.169.254".to_owned()),
        Just("fe80::1".to_owned()),
        Just("fe80::1%eth0".to_owned()),
        Just("::ffff:10.0.0.1".to_owned()),
        Just("0.0.0.0".to_owned()),
        Just("::".to_owned()),
        Just("224.0.0.1".to_owned()),
        Just("255.255.255.255".to_owned()),
        Just("010.000.000.001".to_owned()),
        Just("10.0.0.1:80".to_owned()),
        Just("FD00:0:0::0001".to_owned()),
        Just(String::new()),
        any::<[u8; 4]>().prop_map(|b| IpAddr::from(b).to_string()),
        any::<[u8; 16]>().prop_map(|b| IpAddr::from(b).to_string()),
        "\\PC{0,24}",
    ], 0..4), 1..5), dual in any::<bool>()) {
        let mut svc = service(vec![sport("http", 80, None)]);
        if dual {
            svc.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
        }
        let pods = ips
            .iter()
            .enumerate()
            .map(|(i, list)| {
                let refs: Vec<&str> = list.iter().map(String::as_str).collect();
                PodBuilder::new(&format!("p{i}"), &refs).ports("http").build()
            })
            .collect();
        let w = World::new(port_mapping(&["http"]), svc, pods);
        let p = w.try_plan().map_err(|e| TestCaseError::fail(format!("plan failed: {e}")))?;
        for planned in &p.slices {
            let v6 = planned.slice.address_type == "IPv6";
            for e in &planned.full().endpoints {
                for a in &e.addresses {
                    let ip: IpAddr = a.parse().map_err(|_| TestCaseError::fail(format!("published {a:?}")))?;
                    prop_assert_eq!(ip.is_ipv6(), v6, "{} in a {} slice", a, planned.slice.address_type);
                    prop_assert_eq!(ip.to_string(), a.clone(), "not canonical");
                    prop_assert!(!(ip.is_loopback() || ip.is_unspecified()), "{}", a);
                    // Link-local unicast and multicast, as the API server refuses them (other
                    // multicast it accepts, and so do we).
                    let link_local = match ip {
                        IpAddr::V4(v4) => v4.is_link_local() || v4.octets()[..3] == [224, 0, 0],
                        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80 || v6.segments()[0] & 0xff0f == 0xff02,
                    };
                    prop_assert!(!link_local, "{}", a);
                }
            }
        }
        for status in &p.ports {
            for e in &status.excluded {
                prop_assert!(!e.reason.is_empty());
            }
        }
    }

    /// The Service's labels and annotations are copied or read by the planner: any value
    /// either plans (with our ownership labels intact) or fails with a typed error.
    #[test]
    fn fuzz_service_labels_and_topology_annotations(
        labels in proptest::collection::btree_map(prop_oneof![
            Just("endpointslice.kubernetes.io/managed-by".to_owned()),
            Just("kubernetes.io/service-name".to_owned()),
            Just("service.kubernetes.io/headless".to_owned()),
            Just("app".to_owned()),
            "\\PC{0,70}",
        ], hostile_text(), 0..4),
        annotations in proptest::collection::btree_map(prop_oneof![
            Just("service.kubernetes.io/topology-mode".to_owned()),
            Just("service.kubernetes.io/topology-aware-hints".to_owned()),
            "\\PC{0,20}",
        ], prop_oneof![Just("Auto".to_owned()), Just("auto".to_owned()), Just("Disabled".to_owned()), hostile_text()], 0..3),
    ) {
        let mut svc = web_service();
        svc.metadata.labels = Some(labels);
        svc.metadata.annotations = Some(annotations);
        let w = World::new(port_mapping(&["http", "https"]), svc, seed_pods());
        match w.try_plan() {
            Ok(p) => {
                for planned in &p.slices {
                    let l = planned.slice.metadata.labels.clone().unwrap_or_default();
                    prop_assert_eq!(l.get("endpointslice.kubernetes.io/managed-by").map(String::as_str), Some("portmapper.dev"));
                    prop_assert_eq!(l.get("kubernetes.io/service-name").map(String::as_str), Some("web"));
                }
            }
            Err(e) => {
                prop_assert!(matches!(e, PlanError::InvalidRender { .. }), "{:?}", e);
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}
