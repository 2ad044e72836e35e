//! What the planner, the index and the prober read of a pool pod, and nothing else: the compact
//! record a pod watch keeps instead of k8s-openapi's `Pod`.
//!
//! A `Pod` costs 2,176 bytes however empty (its spec and status are inline structs of every
//! field the API has), a kept `Container` another 2 KiB, and each of its label and annotation
//! maps a 0.5 KiB B-tree node for one entry. At 10,000 pool pods that was most of the
//! operator's memory. A record is built once per watch event, by moving the fields it keeps out
//! of the `Pod`, except the strings a pool's pods repeat (namespace, labels, annotations, node,
//! phase, conditions), which it takes from the [interned](crate::interned) table instead, and is
//! read by every pass.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::interned::{intern, intern_opt};

/// A pool pod as membership and rendering read it: identity, labels, annotations, deletion,
/// scheduling, readiness gates, hostname/subdomain, the containers that declare ports, phase,
/// addresses, conditions and container readiness. Empty strings stand for absent fields, as the
/// planner treats them alike.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRecord {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (interned).
    pub namespace: Arc<str>,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`: changes with every change of the pod.
    pub resource_version: String,
    /// `metadata.generation`: the gate condition's `observedGeneration`.
    pub generation: Option<i64>,
    /// `metadata.labels`.
    pub labels: Pairs,
    /// `metadata.annotations`.
    pub annotations: Pairs,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Timestamp>,
    /// `metadata.deletionTimestamp`: set while the pod terminates.
    pub deletion_timestamp: Option<Timestamp>,
    /// `metadata.deletionGracePeriodSeconds`: with the deletion timestamp it dates the request.
    pub deletion_grace_period_seconds: Option<i64>,
    /// `spec.nodeName` ([interned](crate::interned): a node runs many pods).
    pub node_name: Option<Arc<str>>,
    /// `spec.hostname`.
    pub hostname: Option<String>,
    /// `spec.subdomain`.
    pub subdomain: Option<String>,
    /// `spec.readinessGates[*].conditionType`.
    pub readiness_gates: Vec<String>,
    /// `spec.containers` that declare ports (one that declares none resolves no port).
    pub containers: Vec<PortedContainer>,
    /// `spec.initContainers` that declare ports.
    pub init_containers: Vec<PortedContainer>,
    /// `status.phase` (interned).
    pub phase: Option<Arc<str>>,
    /// `status.podIP`.
    pub pod_ip: Option<String>,
    /// `status.podIPs[*].ip`.
    pub pod_ips: Vec<String>,
    /// `status.conditions`, without `lastProbeTime` (nothing reads it).
    pub conditions: Box<[Condition]>,
    /// `status.containerStatuses` (name, ready).
    pub container_statuses: Vec<ContainerReadiness>,
    /// `status.initContainerStatuses` (name, ready).
    pub init_container_statuses: Vec<ContainerReadiness>,
}

/// A pod condition as a record keeps it: its type, status and reason are
/// [interned](crate::interned) (every pod has the same few), as is its message (kubelet's and
/// a gate's repeat too).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Condition {
    /// `type`.
    pub type_: Arc<str>,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: Arc<str>,
    /// `reason`.
    pub reason: Option<Arc<str>>,
    /// `message`.
    pub message: Option<Arc<str>>,
    /// `lastTransitionTime`.
    pub last_transition_time: Option<Time>,
    /// `observedGeneration`.
    pub observed_generation: Option<i64>,
}

impl From<PodCondition> for Condition {
    fn from(c: PodCondition) -> Self {
        Self {
            type_: intern(&c.type_),
            status: intern(&c.status),
            reason: intern_opt(c.reason),
            message: intern_opt(c.message),
            last_transition_time: c.last_transition_time,
            observed_generation: c.observed_generation,
        }
    }
}

/// A container that declares ports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortedContainer {
    /// Its name.
    pub name: String,
    /// Its declared ports.
    pub ports: Vec<ContainerPort>,
    /// `restartPolicy: Always`: an init container that keeps running (a sidecar).
    pub restart_always: bool,
}

/// A container's readiness as its status reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerReadiness {
    /// The container's name.
    pub name: String,
    /// `ready`.
    pub ready: bool,
}

/// A string map as a sorted list: labels and annotations of a pod hold a few entries, for which
/// a list is a fraction of a B-tree's node and a binary search as fast as its lookup. Keys and
/// values are [interned](crate::interned): the pods of a pool repeat them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs(Box<[(Arc<str>, Arc<str>)]>);

impl Pairs {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Pairs {
    /// Later entries of a repeated key win, as in a map.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<Arc<str>, Arc<str>> = iter
            .into_iter()
            .map(|(k, v)| (intern(k.as_ref()), intern(v.as_ref())))
            .collect();
        Self(map.into_iter().collect())
    }
}

impl From<Pod> for PodRecord {
    fn from(pod: Pod) -> Self {
        let meta = pod.metadata;
        let spec = pod.spec.unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let PodSpec {
            containers,
            init_containers,
            node_name,
            readiness_gates,
            hostname,
            subdomain,
            ..
        } = spec;
        let PodStatus {
            phase,
            pod_ip,
            pod_ips,
            conditions,
            container_statuses,
            init_container_statuses,
            ..
        } = status;
        PodRecord {
            name: meta.name.unwrap_or_default(),
            namespace: intern(meta.namespace.as_deref().unwrap_or_default()),
            uid: meta.uid.unwrap_or_default(),
            resource_version: meta.resource_version.unwrap_or_default(),
            generation: meta.generation,
            labels: meta.labels.into_iter().flatten().collect(),
            annotations: meta.annotations.into_iter().flatten().collect(),
            creation_timestamp: meta.creation_timestamp.map(|t| t.0),
            deletion_timestamp: meta.deletion_timestamp.map(|t| t.0),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            node_name: intern_opt(node_name),
            hostname,
            subdomain,
            readiness_gates: readiness_gates
                .into_iter()
                .flatten()
                .map(|g| g.condition_type)
                .collect(),
            containers: ported(containers),
            init_containers: ported(init_containers.unwrap_or_default()),
            phase: intern_opt(phase),
            pod_ip,
            pod_ips: pod_ips.into_iter().flatten().map(|p| p.ip).collect(),
            conditions: conditions
                .into_iter()
                .flatten()
                .map(Condition::from)
                .collect(),
            container_statuses: readiness(container_statuses),
            init_container_statuses: readiness(init_container_statuses),
        }
    }
}

impl From<&Pod> for PodRecord {
    fn from(pod: &Pod) -> Self {
        PodRecord::from(pod.clone())
    }
}

fn ported(containers: Vec<Container>) -> Vec<PortedContainer> {
    containers
        .into_iter()
        .filter_map(|c| {
            let ports = c.ports.filter(|p| !p.is_empty())?;
            Some(PortedContainer {
                name: c.name,
                ports,
                restart_always: c.restart_policy.as_deref() == Some("Always"),
            })
        })
        .collect::<Vec<_>>()
        .fitted()
}

fn readiness(statuses: Option<Vec<ContainerStatus>>) -> Vec<ContainerReadiness> {
    statuses
        .into_iter()
        .flatten()
        .map(|s| ContainerReadiness {
            name: s.name,
            ready: s.ready,
        })
        .collect::<Vec<_>>()
        .fitted()
}

/// A collected vector in a buffer of its own size: `collect` may reuse the source's buffer in
/// place, and the buffer of one 2 KiB `Container` would stay with the small record it became.
trait Fitted {
    fn fitted(self) -> Self;
}

impl<T> Fitted for Vec<T> {
    fn fitted(mut self) -> Self {
        self.shrink_to_fit();
        self
    }
}

impl PodRecord {
    /// Containers whose ports count: regular containers, then restartable (sidecar) init
    /// containers.
    pub fn serving_containers(&self) -> impl Iterator<Item = &PortedContainer> {
        let sidecars = self.init_containers.iter().filter(|c| c.restart_always);
        self.containers.iter().chain(sidecars)
    }

    /// The condition of `type_`, if the pod reports it.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| *c.type_ == *type_)
    }

    /// Whether the pod lists `condition_type` among its readiness gates.
    pub fn has_gate(&self, condition_type: &str) -> bool {
        self.readiness_gates.iter().any(|g| g == condition_type)
    }

    /// Whether the pod reports any IP address.
    pub fn has_ip(&self) -> bool {
        self.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()) || !self.pod_ips.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodIP, PodReadinessGate};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    #[test]
    fn a_record_keeps_what_membership_reads_and_drops_the_rest() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                resource_version: Some("7".into()),
                labels: Some([("app".to_owned(), "web".to_owned())].into()),
                annotations: Some(
                    [
                        ("b".to_owned(), "2".to_owned()),
                        ("a".to_owned(), "1".to_owned()),
                    ]
                    .into(),
                ),
                creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
                deletion_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
                deletion_grace_period_seconds: Some(30),
                owner_references: Some(vec![OwnerReference::default()]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "app".into(),
                        image: Some("pause".into()),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: 8080,
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    },
                    Container {
                        name: "no-ports".into(),
                        ..Container::default()
                    },
                ],
                init_containers: Some(vec![
                    Container {
                        name: "sidecar".into(),
                        restart_policy: Some("Always".into()),
                        ports: Some(vec![ContainerPort {
                            container_port: 9090,
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    },
                    Container {
                        name: "setup".into(),
                        ports: Some(vec![ContainerPort {
                            container_port: 1,
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    },
                ]),
                readiness_gates: Some(vec![PodReadinessGate {
                    condition_type: "example.com/gate".into(),
                }]),
                node_name: Some("n1".into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ips: Some(vec![PodIP {
                    ip: "10.0.0.1".into(),
                }]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(Timestamp::UNIX_EPOCH)),
                    ..PodCondition::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    ready: true,
                    image: "pause".into(),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        };
        let r = PodRecord::from(&pod);
        assert_eq!((r.name.as_str(), &*r.namespace), ("p", "ns"));
        assert_eq!((r.uid.as_str(), r.resource_version.as_str()), ("u", "7"));
        assert_eq!(r.labels.get("app"), Some("web"));
        assert_eq!(
            r.annotations.iter().collect::<Vec<_>>(),
            [("a", "1"), ("b", "2")]
        );
        assert_eq!(r.creation_timestamp, Some(Timestamp::UNIX_EPOCH));
        assert_eq!(r.deletion_timestamp, Some(Timestamp::UNIX_EPOCH));
        let ready = r.condition("Ready").expect("the Ready condition is kept");
        assert_eq!(
            ready.last_transition_time,
            Some(Time(Timestamp::UNIX_EPOCH))
        );
        assert_eq!(r.deletion_grace_period_seconds, Some(30));
        assert_eq!(r.node_name.as_deref(), Some("n1"));
        assert!(r.has_gate("example.com/gate"));
        let names: Vec<&str> = r.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["app"], "a container without ports resolves nothing");
        // Two containers came in; the buffer kept fits the one left (memory per pool pod).
        assert_eq!(r.containers.capacity(), 1);
        let serving: Vec<&str> = r.serving_containers().map(|c| c.name.as_str()).collect();
        assert_eq!(
            serving,
            ["app", "sidecar"],
            "only restartable init containers serve"
        );
        assert_eq!(r.init_containers.len(), 2);
        assert_eq!(r.pod_ips, ["10.0.0.1"]);
        assert!(r.has_ip());
        assert_eq!(
            r.container_statuses,
            [ContainerReadiness {
                name: "app".into(),
                ready: true
            }]
        );
    }

    #[test]
    fn pairs_find_every_key_and_the_last_of_a_repeated_one() {
        let p: Pairs = [("b", "1"), ("a", "2"), ("c", "3"), ("a", "4")]
            .into_iter()
            .collect();
        assert_eq!(p.len(), 3);
        assert_eq!(p.get("a"), Some("4"));
        assert_eq!(p.get("b"), Some("1"));
        assert_eq!(p.get("c"), Some("3"));
        assert_eq!(p.get("d"), None);
        assert!(Pairs::default().get("a").is_none());
    }
}
