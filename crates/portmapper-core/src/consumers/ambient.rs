//! Istio ambient mode: istiod gives a pod every port of each Service whose EndpointSlices name it
//! by `targetRef` (istio/istio `pilot/pkg/serviceregistry/ambient/workloads.go`, under
//! `kube/controller/ambient/` up to 1.29: `matchingServicesWithoutSelectors`, then
//! `constructServices` over all Service ports), so for ambient clients a pod published on one
//! port of a PortMapping is a backend of all of them; `tests/e2e/istio.rs` shows it with istiod.
//! Pods enrolled in ambient carry `ambient.istio.io/redirection: enabled`, set by the Istio CNI
//! once redirection works (istio/istio `pkg/config/constants/constants.go`,
//! `AmbientRedirectionEnabled`); that annotation is the signal, so no new watch is needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::compact_slice::CompactSlice;
use crate::planner::Plan;
use crate::pod_record::PodRecord;

/// The pod annotation the Istio CNI sets on pods it enrolled in ambient mode.
pub const AMBIENT_REDIRECTION_ANNOTATION: &str = "ambient.istio.io/redirection";
/// Its value once redirection is in place (`pending` and anything else mean "not captured").
pub const AMBIENT_REDIRECTION_ENABLED: &str = "enabled";

/// Most pod names a message lists per port; the counts stay exact.
const MAX_NAMED: usize = 5;

/// A port whose published members are fewer than the pods named in the Service's slices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WidenedPort {
    /// Service port name (its number when unnamed).
    pub port: String,
    /// Pods published on this port.
    pub members: usize,
    /// Pods named on other ports but not on this one, which ambient also sends this port to.
    pub extra: Vec<String>,
}

/// Istio ambient ignores the per-port membership of this PortMapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IstioAmbientCaveat {
    /// Published pods enrolled in ambient, sorted.
    pub ambient_pods: Vec<String>,
    /// Every port ambient widens, sorted by port.
    pub ports: Vec<WidenedPort>,
}

/// The caveat, given the pods published per port and the pods enrolled in ambient: `Some` when
/// at least one published pod is enrolled and the ports do not all have the same members.
/// A port with no member at all counts (ambient gives it every published pod). Pods are
/// identified by name, as `targetRef.name`.
pub fn istio_ambient_caveat<P: AsRef<str>, Q: AsRef<str> + Ord>(
    members: &BTreeMap<P, BTreeSet<Q>>,
    ambient: &BTreeSet<Q>,
) -> Option<IstioAmbientCaveat> {
    let union: BTreeSet<&Q> = members.values().flatten().collect();
    let ambient_pods: Vec<String> = union
        .iter()
        .filter(|pod| ambient.contains(**pod))
        .map(|pod| (**pod).as_ref().to_owned())
        .collect();
    if ambient_pods.is_empty() {
        return None;
    }
    let ports: Vec<WidenedPort> = members
        .iter()
        .filter(|(_, pods)| pods.len() < union.len())
        .map(|(port, pods)| WidenedPort {
            port: port.as_ref().to_owned(),
            members: pods.len(),
            extra: union
                .iter()
                .filter(|pod| !pods.contains(**pod))
                .map(|pod| (**pod).as_ref().to_owned())
                .collect(),
        })
        .collect();
    (!ports.is_empty()).then_some(IstioAmbientCaveat {
        ambient_pods,
        ports,
    })
}

/// Pods named (by `targetRef.name`) in the slices of each port, across families and chunks,
/// whatever their conditions: ambient reads the name, not `ready`. Every port a slice lists
/// counts (a port-set slice lists several). Ports are keyed by name, else by number; a
/// placeholder slice gives its ports an empty set.
pub fn port_members<'a>(
    slices: impl IntoIterator<Item = &'a CompactSlice>,
) -> BTreeMap<String, BTreeSet<&'a str>> {
    let mut members: BTreeMap<String, BTreeSet<&'a str>> = BTreeMap::new();
    for slice in slices {
        let named = || slice.endpoints.iter().filter_map(|e| e.target_ref()?.name);
        for key in super::port_keys(slice) {
            members.entry(key).or_default().extend(named());
        }
    }
    members
}

/// Whether the pod is enrolled in ambient mode.
pub fn is_ambient(pod: &PodRecord) -> bool {
    pod.annotations.get(AMBIENT_REDIRECTION_ANNOTATION) == Some(AMBIENT_REDIRECTION_ENABLED)
}

/// Names of the pods enrolled in ambient mode.
pub fn ambient_pods<'a>(pods: &[&'a PodRecord]) -> BTreeSet<&'a str> {
    pods.iter()
        .filter(|p| is_ambient(p))
        .map(|p| p.name.as_str())
        .collect()
}

/// The Istio ambient caveat of a plan: what its slices publish, against the pool pods.
pub fn istio_ambient(plan: &Plan, pods: &[&PodRecord]) -> Option<IstioAmbientCaveat> {
    let ambient = ambient_pods(pods);
    // Every reconcile asks; without an enrolled pod (the common case) the member sets, which
    // cost a pass over every endpoint, are not built at all.
    if ambient.is_empty() {
        return None;
    }
    let members = port_members(plan.slices.iter().map(|s| s.slice.as_ref()));
    istio_ambient_caveat(&members, &ambient)
}

fn names(pods: &[String]) -> String {
    super::names(pods, MAX_NAMED)
}

impl fmt::Display for IstioAmbientCaveat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Istio ambient mode is in use (pods {} carry {AMBIENT_REDIRECTION_ANNOTATION}={AMBIENT_REDIRECTION_ENABLED}) and ambient sends every port to every pod named in any of this Service's EndpointSlices, ignoring per-port membership: ",
            names(&self.ambient_pods)
        )?;
        for (i, port) in self.ports.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "port {} ({} published) also reaches {}",
                port.port,
                port.members,
                names(&port.extra)
            )?;
        }
        f.write_str(" (see docs/consumers.md, Istio ambient)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectReference, Pod};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const PODS: [&str; 3] = ["a", "b", "c"];
    const PORTS: [&str; 3] = ["http", "https", "metrics"];

    /// The subset of `PODS` encoded by the low bits of `mask`.
    fn subset(mask: usize) -> BTreeSet<&'static str> {
        PODS.iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, p)| *p)
            .collect()
    }

    /// Every assignment of member sets to 1, 2 and 3 ports, and every set of ambient pods
    /// (including pods that are not published): the caveat is reported exactly when a
    /// published pod is enrolled and the ports differ, it names exactly the ports that lack
    /// some published pod, and for each exactly the pods it lacks.
    #[test]
    fn exhaustive_over_three_pods_and_up_to_three_ports() {
        let mut reported = 0;
        let mut cases = 0;
        for n_ports in 1..=PORTS.len() {
            for assignment in 0..(1usize << (PODS.len() * n_ports)) {
                let members: BTreeMap<&str, BTreeSet<&str>> = (0..n_ports)
                    .map(|i| (PORTS[i], subset((assignment >> (i * PODS.len())) & 0b111)))
                    .collect();
                let union: BTreeSet<&str> = members.values().flatten().copied().collect();
                for ambient_mask in 0..(1usize << PODS.len()) {
                    cases += 1;
                    let ambient = subset(ambient_mask);
                    let got = istio_ambient_caveat(&members, &ambient);
                    let enrolled = union.iter().any(|p| ambient.contains(p));
                    let differ = members.values().any(|m| m != &union);
                    assert_eq!(
                        got.is_some(),
                        enrolled && differ,
                        "members {members:?}, ambient {ambient:?}"
                    );
                    let Some(caveat) = got else { continue };
                    reported += 1;
                    let want_ambient: Vec<String> = union
                        .intersection(&ambient)
                        .map(|p| p.to_string())
                        .collect();
                    assert_eq!(caveat.ambient_pods, want_ambient);
                    let want_ports: Vec<WidenedPort> = members
                        .iter()
                        .filter(|(_, m)| *m != &union)
                        .map(|(port, m)| WidenedPort {
                            port: port.to_string(),
                            members: m.len(),
                            extra: union.difference(m).map(|p| p.to_string()).collect(),
                        })
                        .collect();
                    assert_eq!(caveat.ports, want_ports);
                }
            }
        }
        // 1 port: 8 × 8; 2 ports: 64 × 8; 3 ports: 512 × 8.
        assert_eq!(cases, 8 * 8 + 64 * 8 + 512 * 8);
        // A single port never differs from itself; the count pins that cases were reported.
        assert!(reported > 0);
    }

    #[test]
    fn no_ports_no_caveat() {
        let members: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        assert_eq!(istio_ambient_caveat(&members, &subset(0b111)), None);
    }

    fn slice(port: Option<&str>, number: i32, family: &str, pods: &[&str]) -> CompactSlice {
        EndpointSlice {
            address_type: family.into(),
            endpoints: pods
                .iter()
                .map(|p| Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some((*p).into()),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: port.map(Into::into),
                port: Some(number),
                ..EndpointPort::default()
            }]),
            ..EndpointSlice::default()
        }
        .into()
    }

    #[test]
    fn members_merge_families_and_chunks_and_keep_empty_ports() {
        let slices = [
            slice(Some("http"), 80, "IPv4", &["a", "b"]),
            slice(Some("http"), 80, "IPv4", &["c"]),
            slice(Some("http"), 80, "IPv6", &["a", "d"]),
            slice(Some("https"), 443, "IPv4", &[]),
            slice(None, 9000, "IPv4", &["a"]),
        ];
        let members = port_members(&slices);
        let want: BTreeMap<String, BTreeSet<&str>> = [
            ("http".to_string(), BTreeSet::from(["a", "b", "c", "d"])),
            ("https".to_string(), BTreeSet::new()),
            ("9000".to_string(), BTreeSet::from(["a"])),
        ]
        .into_iter()
        .collect();
        assert_eq!(members, want);
    }

    #[test]
    fn every_port_of_a_port_set_slice_counts() {
        let mut both = slice(Some("http"), 80, "IPv4", &["a", "b"]);
        both.ports.get_or_insert_default().push(EndpointPort {
            name: Some("https".into()),
            port: Some(443),
            ..EndpointPort::default()
        });
        let slices = [both, slice(Some("https"), 443, "IPv4", &["c"])];
        let members = port_members(&slices);
        assert_eq!(members["http"], BTreeSet::from(["a", "b"]));
        assert_eq!(members["https"], BTreeSet::from(["a", "b", "c"]));
        let portless = CompactSlice {
            ports: None,
            ..slice(None, 0, "IPv4", &["a"])
        };
        assert_eq!(port_members(&[portless])[""], BTreeSet::from(["a"]));
    }

    fn pod(name: &str, redirection: Option<&str>) -> PodRecord {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: redirection
                    .map(|v| [(AMBIENT_REDIRECTION_ANNOTATION.to_string(), v.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
        .into()
    }

    #[test]
    fn only_enabled_redirection_counts_as_enrolled() {
        let pods = [
            pod("a", Some("enabled")),
            pod("b", Some("pending")),
            pod("c", Some("disabled")),
            pod("d", None),
        ];
        let refs: Vec<&PodRecord> = pods.iter().collect();
        assert_eq!(ambient_pods(&refs), BTreeSet::from(["a"]));
    }

    #[test]
    fn a_plan_is_read_through_its_slices_and_the_pool_annotations() {
        use crate::planner::{PlannedSlice, WriteAction};
        use std::sync::Arc;
        let plan = Plan {
            slices: [
                slice(Some("http"), 80, "IPv4", &["a", "b"]),
                slice(Some("https"), 443, "IPv4", &["b"]),
            ]
            .into_iter()
            .map(|s| PlannedSlice {
                slice: Arc::new(s),
                action: WriteAction::Unchanged,
                withdraws: false,
            })
            .collect(),
            ..Plan::default()
        };
        let enrolled = [pod("a", Some("enabled")), pod("b", None)];
        let refs: Vec<&PodRecord> = enrolled.iter().collect();
        let caveat = istio_ambient(&plan, &refs).unwrap();
        assert_eq!(caveat.ambient_pods, ["a"]);
        assert_eq!(
            caveat.ports,
            [WidenedPort {
                port: "https".into(),
                members: 1,
                extra: vec!["a".into()],
            }]
        );
        let plain = [pod("a", None), pod("b", Some("pending"))];
        let refs: Vec<&PodRecord> = plain.iter().collect();
        assert_eq!(istio_ambient(&plan, &refs), None);
    }

    #[test]
    fn message_names_ports_and_pods_and_bounds_the_lists() {
        let many: BTreeSet<String> = (0..8).map(|i| format!("p{i}")).collect();
        let members: BTreeMap<&str, BTreeSet<String>> = [
            ("http", BTreeSet::from(["p0".to_string()])),
            ("https", many.clone()),
        ]
        .into();
        let caveat = istio_ambient_caveat(&members, &many).unwrap();
        assert_eq!(
            caveat.to_string(),
            "Istio ambient mode is in use (pods p0, p1, p2, p3, p4 and 3 more carry \
             ambient.istio.io/redirection=enabled) and ambient sends every port to every pod \
             named in any of this Service's EndpointSlices, ignoring per-port membership: port \
             http (1 published) also reaches p1, p2, p3, p4, p5 and 2 more (see \
             docs/consumers.md, Istio ambient)"
        );
    }
}
