//! Identical probes run once. Two targets of one PortMapping whose probes would send the same
//! request (same pod, family and target port, the same check with the same settings, and for a
//! webhook the same Service port, which its review names) become one prober target; the others
//! read its result under their own keys. A tenant repeating one check sixteen times in an
//! `anyOf` costs one probe per pod, not sixteen.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use portmapper_api::NetworkKey;
use portmapper_probe::{MappingKey, Membership, NetworkCheck, Target, TargetResult};

/// Per PortMapping, the targets probed through another (alias → the target probed).
#[derive(Default)]
pub struct ProbeAliases(Mutex<HashMap<MappingKey, HashMap<NetworkKey, NetworkKey>>>);

/// What makes two targets' probes the same request, apart from the check itself.
#[derive(PartialEq, Eq, Hash)]
struct Request {
    pod_uid: String,
    family: portmapper_api::IpFamily,
    target_port: u16,
    /// The Service port, for webhooks only (their review names it).
    service_port: Option<i32>,
}

impl Request {
    fn of(target: &Target) -> Self {
        let webhook = matches!(*target.check, NetworkCheck::Webhook(_));
        Self {
            pod_uid: target.pod.uid.clone(),
            family: target.family,
            target_port: target.port.target_port,
            service_port: webhook.then_some(target.port.port),
        }
    }
}

/// Splits `targets` into the ones to probe and the aliases of the others. A probed target
/// starts `Included` when any of its aliases is published, so no published member flaps.
pub fn dedupe(targets: Vec<Target>) -> (Vec<Target>, HashMap<NetworkKey, NetworkKey>) {
    let mut probed: Vec<Target> = Vec::with_capacity(targets.len());
    let mut by_request: HashMap<Request, Vec<usize>> = HashMap::new();
    let mut aliases = HashMap::new();
    for target in targets {
        let same = by_request.entry(Request::of(&target)).or_default();
        let found = same
            .iter()
            .copied()
            .find(|&i| probed[i].check == target.check && probed[i].settings == target.settings);
        match found {
            Some(i) => {
                if target.initial_membership == Membership::Included {
                    probed[i].initial_membership = Membership::Included;
                }
                aliases.insert(target.key(), probed[i].key());
            }
            None => {
                same.push(probed.len());
                probed.push(target);
            }
        }
    }
    (probed, aliases)
}

impl ProbeAliases {
    /// Records `mapping`'s aliases (none: forgets it).
    pub fn set(&self, mapping: &MappingKey, aliases: HashMap<NetworkKey, NetworkKey>) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if aliases.is_empty() {
            all.remove(mapping);
        } else {
            all.insert(mapping.clone(), aliases);
        }
    }

    /// Forgets `mapping`'s aliases.
    pub fn forget(&self, mapping: &MappingKey) {
        self.set(mapping, HashMap::new());
    }

    /// Keeps only the aliases of PortMappings `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&MappingKey) -> bool) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|k, _| keep(k));
    }

    /// Adds to `results` each alias's result: the result of the target probed for it.
    pub fn expand(&self, mapping: &MappingKey, results: &mut HashMap<NetworkKey, TargetResult>) {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(aliases) = all.get(mapping) else {
            return;
        };
        for (alias, probed) in aliases {
            if let Some(result) = results.get(probed).cloned() {
                results.insert(alias.clone(), result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portmapper_api::check::{TcpSocketCheck, WebhookCheck};
    use portmapper_api::{CheckPosition, IpFamily, ProbeSettings};
    use portmapper_probe::{PoolPod, ServicePort};
    use std::sync::Arc;

    fn target(uid: &str, port: &str, number: i32, index: usize, check: NetworkCheck) -> Target {
        Target {
            pod: Arc::new(PoolPod {
                name: uid.into(),
                uid: uid.into(),
                ips: vec!["10.0.0.1".parse().unwrap()],
                ..PoolPod::default()
            }),
            service: "svc".into(),
            port: ServicePort {
                name: port.into(),
                port: number,
                protocol: "TCP".into(),
                target_port: 8080,
            },
            family: IpFamily::V4,
            position: CheckPosition {
                index: 0,
                any_of: Some(index),
            },
            check: Arc::new(check),
            settings: ProbeSettings::default(),
            initial_membership: Membership::Excluded,
        }
    }

    fn tcp() -> NetworkCheck {
        NetworkCheck::TcpSocket(TcpSocketCheck::default())
    }

    fn webhook() -> NetworkCheck {
        NetworkCheck::Webhook(WebhookCheck {
            url: "https://decider.example/".into(),
            timeout_seconds: None,
            ca_bundle: None,
        })
    }

    #[test]
    fn sixteen_identical_checks_of_a_pod_are_probed_once_and_read_sixteen_times() {
        let targets: Vec<Target> = (0..16)
            .map(|i| target("a", "http", 80, i, tcp()))
            .chain([target("b", "http", 80, 0, tcp())])
            .collect();
        let (probed, aliases) = dedupe(targets.clone());
        assert_eq!(probed.len(), 2, "one per pod");
        assert_eq!(aliases.len(), 15);
        let store = ProbeAliases::default();
        let mapping = MappingKey::new("ns", "pm");
        store.set(&mapping, aliases);
        let result = TargetResult {
            membership: Membership::Included,
            reason: "connected".into(),
            last: None,
            successes: 1,
            failures: 0,
            probes: 1,
        };
        let mut results = HashMap::from([(probed[0].key(), result.clone())]);
        store.expand(&mapping, &mut results);
        assert!(targets[..16].iter().all(|t| results[&t.key()] == result));
        assert!(
            !results.contains_key(&targets[16].key()),
            "pod b has its own probe"
        );
    }

    #[test]
    fn webhooks_of_different_service_ports_and_different_checks_stay_apart() {
        let targets = vec![
            target("a", "http", 80, 0, webhook()),
            target("a", "https", 443, 0, webhook()),
            target("a", "http", 80, 1, tcp()),
            target("a", "https", 443, 1, tcp()),
        ];
        let (probed, aliases) = dedupe(targets);
        // The tcpSocket probes of both ports dial the same target port: one probe.
        assert_eq!(probed.len(), 3);
        assert_eq!(aliases.len(), 1);
    }

    #[test]
    fn a_published_alias_makes_its_probe_start_included() {
        let mut published = target("a", "http", 80, 1, tcp());
        published.initial_membership = Membership::Included;
        let (probed, _) = dedupe(vec![target("a", "http", 80, 0, tcp()), published]);
        assert_eq!(probed[0].initial_membership, Membership::Included);
    }
}
