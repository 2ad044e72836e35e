//! The pod as the pod watches decode it: only the fields a [`PodRecord`] keeps. Every other
//! field of the API's object — `managedFields` above all, then env, volumes, probes, resources
//! and the container states — is skipped by the decoder without being built. Decoding whole
//! `Pod`s spent most of the operator's first 0.5 s at 10,000 pods on `managedFields` alone
//! (its `fieldsV1` is decoded as a JSON value tree), only to drop it.
//!
//! A [`WirePod`] becomes a record through the one conversion, `PodRecord::from(Pod)`, so the
//! two cannot disagree on what a record holds; a test decodes the same JSON both ways.

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, Pod, PodCondition, PodIP, PodReadinessGate, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use portmapper_core::PodRecord;
use serde::{Deserialize, Deserializer};

/// A pod, decoded for its record (see the module doc). The watch's `Resource` is the `Pod`'s.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WirePod {
    #[serde(default, deserialize_with = "metadata")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

fn metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<WireMeta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        labels: m.labels,
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    })
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    containers: Option<Vec<WireContainer>>,
    init_containers: Option<Vec<WireContainer>>,
    node_name: Option<String>,
    readiness_gates: Option<Vec<PodReadinessGate>>,
    hostname: Option<String>,
    subdomain: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainer {
    #[serde(default)]
    name: String,
    ports: Option<Vec<ContainerPort>>,
    restart_policy: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<Vec<PodIP>>,
    conditions: Option<Vec<PodCondition>>,
    container_statuses: Option<Vec<WireContainerStatus>>,
    init_container_statuses: Option<Vec<WireContainerStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct WireContainerStatus {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ready: bool,
}

impl k8s_openapi::Resource for WirePod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for WirePod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl WirePod {
    /// The `Pod` holding what was decoded (everything a record reads).
    fn into_pod(self) -> Pod {
        let containers = |list: Option<Vec<WireContainer>>| -> Vec<Container> {
            list.into_iter()
                .flatten()
                .map(|c| Container {
                    name: c.name,
                    ports: c.ports,
                    restart_policy: c.restart_policy,
                    ..Container::default()
                })
                .collect()
        };
        let statuses = |list: Option<Vec<WireContainerStatus>>| {
            list.map(|l| {
                l.into_iter()
                    .map(|s| ContainerStatus {
                        name: s.name,
                        ready: s.ready,
                        ..ContainerStatus::default()
                    })
                    .collect()
            })
        };
        Pod {
            metadata: self.metadata,
            spec: self.spec.map(|s| PodSpec {
                init_containers: s
                    .init_containers
                    .is_some()
                    .then(|| containers(s.init_containers)),
                containers: containers(s.containers),
                node_name: s.node_name,
                readiness_gates: s.readiness_gates,
                hostname: s.hostname,
                subdomain: s.subdomain,
                ..PodSpec::default()
            }),
            status: self.status.map(|s| PodStatus {
                phase: s.phase,
                pod_ip: s.pod_ip,
                pod_ips: s.pod_ips,
                conditions: s.conditions,
                container_statuses: statuses(s.container_statuses),
                init_container_statuses: statuses(s.init_container_statuses),
                ..PodStatus::default()
            }),
        }
    }
}

impl From<WirePod> for PodRecord {
    fn from(pod: WirePod) -> Self {
        PodRecord::from(pod.into_pod())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A pod as the API server sends it: managedFields, fields a record ignores, a sidecar.
    fn full_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                "generateName": "web-", "generation": 3,
                "labels": {"app": "web", "example.com/group": "web"},
                "annotations": {"example.com/ports": "http,https"},
                "creationTimestamp": "2026-12-01T10:00:00Z",
                "deletionTimestamp": "2026-12-01T11:00:00Z",
                "deletionGracePeriodSeconds": 30,
                "finalizers": ["x/y"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                     "uid": "rs", "controller": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                                   "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}}}]
            },
            "spec": {
                "nodeName": "node-1", "hostname": "web-0", "subdomain": "web",
                "readinessGates": [{"conditionType": "portmapper.dev/published"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "initContainers": [
                    {"name": "setup", "image": "busybox", "command": ["true"]},
                    {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                     "ports": [{"name": "admin", "containerPort": 9901, "protocol": "TCP"}]}
                ],
                "containers": [
                    {"name": "app", "image": "web:1", "env": [{"name": "A", "value": "b"}],
                     "ports": [{"name": "http", "containerPort": 8080},
                               {"name": "https", "containerPort": 8443, "protocol": "TCP"}],
                     "readinessProbe": {"httpGet": {"path": "/", "port": 8080}}},
                    {"name": "logger", "image": "fluent"}
                ]
            },
            "status": {
                "phase": "Running", "podIP": "10.244.0.5", "hostIP": "192.0.2.1",
                "podIPs": [{"ip": "10.244.0.5"}, {"ip": "fd00::5"}],
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:01:00Z"},
                    {"type": "ContainersReady", "status": "False", "reason": "x", "message": "y"}
                ],
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 1, "image": "web:1", "imageID": "i",
                     "state": {"running": {"startedAt": "2026-12-01T10:00:30Z"}}},
                    {"name": "logger", "ready": false, "restartCount": 0, "image": "f", "imageID": "j"}
                ],
                "initContainerStatuses": [
                    {"name": "proxy", "ready": true, "restartCount": 0, "image": "envoy", "imageID": "k"}
                ]
            }
        })
    }

    fn both_ways(json: Value) -> (PodRecord, PodRecord) {
        let pod: Pod = serde_json::from_value(json.clone()).expect("a Pod");
        let wire: WirePod = serde_json::from_value(json).expect("a WirePod");
        (PodRecord::from(pod), PodRecord::from(wire))
    }

    #[test]
    fn a_wire_pod_makes_the_record_a_whole_pod_makes() {
        let (whole, wire) = both_ways(full_pod());
        assert_eq!(wire, whole);
        // The fixture is not trivially empty: the fields a record reads are there.
        assert_eq!(wire.serving_containers().count(), 2);
        assert_eq!(wire.pod_ips.len(), 2);
        assert!(wire.deletion_timestamp.is_some());
    }

    #[test]
    fn missing_and_null_parts_make_the_same_record_too() {
        let mut bare = full_pod();
        bare["status"] = Value::Null;
        bare["spec"]["initContainers"] = Value::Null;
        bare["metadata"]["labels"] = Value::Null;
        let (whole, wire) = both_ways(bare);
        assert_eq!(wire, whole);
        let minimal = json!({"metadata": {"name": "p", "namespace": "n"}});
        let (whole, wire) = both_ways(minimal);
        assert_eq!(wire, whole);
    }

    #[test]
    fn the_watch_reads_pods_where_pods_are() {
        use kube::Resource;
        assert_eq!(
            WirePod::url_path(&(), Some("shop")),
            Pod::url_path(&(), Some("shop"))
        );
        assert_eq!(WirePod::kind(&()), "Pod");
        let wire: WirePod = serde_json::from_value(full_pod()).expect("a WirePod");
        assert_eq!(wire.meta().resource_version.as_deref(), Some("42"));
        assert!(wire.meta().managed_fields.is_none(), "never decoded");
    }
}
