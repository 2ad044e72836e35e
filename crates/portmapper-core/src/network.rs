//! Results of network checks (httpGet, tcpSocket, grpc, webhook), produced outside the planner
//! by the prober and handed in as decisions keyed by (pod UID, Service port name, IP family,
//! check position).

use std::collections::HashMap;
use std::net::IpAddr;

use kube_validation::IpFamily;

use crate::decision::Verdict;

pub use portmapper_api::network_key::{CheckPosition, NetworkKey};

/// One network check result the plan depends on: a (pod, Service port, family, check position)
/// the planner looks up, with what the prober needs to probe it. A lookup is reported while the
/// pod is a candidate and the port's other (non-network) checks leave the network checks a say,
/// whether or not a result exists yet: a check without a result is probed so it gets one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkLookup {
    /// Where the result goes.
    pub key: NetworkKey,
    /// The pod: its index in the planner input's `pods`.
    pub pod: usize,
    /// The Service port: its index in the Service's `spec.ports`.
    pub service_port: usize,
    /// The address to probe (the pod's address of `key.family`).
    pub address: IpAddr,
    /// The Service port's target port on this pod.
    pub target_port: i32,
    /// Whether the live slices publish this (pod, port, family) now: the prober's seed for a
    /// new target, read by the rule Abstain keeps by.
    pub published: bool,
}

/// The latest network check results. A missing entry reads as Abstain ("no result yet").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetworkDecisions {
    // Keyed by pod UID first so a lookup needs no allocation.
    by_pod: HashMap<String, Vec<(String, IpFamily, CheckPosition, Verdict)>>,
}

impl NetworkDecisions {
    /// No results at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records (or replaces) one result.
    pub fn insert(&mut self, key: NetworkKey, verdict: Verdict) {
        let entries = self.by_pod.entry(key.pod_uid).or_default();
        match entries
            .iter_mut()
            .find(|(p, f, pos, _)| *p == key.port_name && *f == key.family && *pos == key.position)
        {
            Some(entry) => entry.3 = verdict,
            None => entries.push((key.port_name, key.family, key.position, verdict)),
        }
    }

    /// The result for one evaluation, if the prober has one.
    pub fn get(
        &self,
        pod_uid: &str,
        port_name: &str,
        family: IpFamily,
        position: CheckPosition,
    ) -> Option<&Verdict> {
        self.by_pod.get(pod_uid)?.iter().find_map(|(p, f, pos, v)| {
            (p == port_name && *f == family && *pos == position).then_some(v)
        })
    }

    /// Number of results held.
    pub fn len(&self) -> usize {
        self.by_pod.values().map(Vec::len).sum()
    }

    /// Whether no result is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromIterator<(NetworkKey, Verdict)> for NetworkDecisions {
    fn from_iter<T: IntoIterator<Item = (NetworkKey, Verdict)>>(iter: T) -> Self {
        let mut d = Self::new();
        for (k, v) in iter {
            d.insert(k, v);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str, port: &str, family: IpFamily, index: usize) -> NetworkKey {
        NetworkKey {
            pod_uid: uid.into(),
            port_name: port.into(),
            family,
            position: CheckPosition {
                index,
                any_of: None,
            },
        }
    }

    #[test]
    fn lookup_distinguishes_port_family_and_position() {
        let mut d = NetworkDecisions::new();
        d.insert(key("u1", "http", IpFamily::V4, 1), Verdict::INCLUDE);
        d.insert(
            key("u1", "http", IpFamily::V6, 1),
            Verdict::exclude("refused"),
        );
        let pos = CheckPosition {
            index: 1,
            any_of: None,
        };
        assert_eq!(
            d.get("u1", "http", IpFamily::V4, pos),
            Some(&Verdict::INCLUDE)
        );
        assert_eq!(
            d.get("u1", "http", IpFamily::V6, pos).map(|v| v.reason()),
            Some("refused")
        );
        assert_eq!(d.get("u1", "https", IpFamily::V4, pos), None);
        assert_eq!(
            d.get(
                "u1",
                "http",
                IpFamily::V4,
                CheckPosition {
                    index: 0,
                    any_of: None
                }
            ),
            None
        );
        assert_eq!(d.get("u2", "http", IpFamily::V4, pos), None);
    }

    #[test]
    fn insert_replaces_previous_result() {
        let mut d = NetworkDecisions::new();
        d.insert(key("u1", "http", IpFamily::V4, 0), Verdict::INCLUDE);
        d.insert(key("u1", "http", IpFamily::V4, 0), Verdict::exclude("503"));
        assert_eq!(d.len(), 1);
        assert_eq!(
            d.get("u1", "http", IpFamily::V4, CheckPosition::default())
                .map(|v| v.decision),
            Some(crate::Decision::Exclude)
        );
    }
}
