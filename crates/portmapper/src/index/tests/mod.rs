//! Synchronous tests of the index, one file per kind (the pattern of linkerd2's
//! `policy-controller/k8s/index` tests).

mod departed;
mod foreign;
mod nodes;
mod pod_watches;
mod pods;
mod portmappings;
mod slices;

use super::*;
pub(super) use crate::index::own_writes::Answered;
pub(super) use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::core::v1::{ObjectReference, PodSpec};
use k8s_openapi::api::discovery::v1::Endpoint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PartialObjectMeta;
use portmapper_api::PortMappingSpec;
use portmapper_core::ownership::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
pub(super) use std::time::Instant;

pub(super) const KEY: &str = "example.com/group";

pub(super) fn spec(service: &str, from: KeySource, value: Option<&str>) -> PortMappingSpec {
    serde_json::from_value(serde_json::json!({
        "serviceRef": {"name": service},
        "pods": {"key": KEY, "from": from, "value": value},
    }))
    .expect("spec")
}

pub(super) fn pm(
    ns: &str,
    name: &str,
    service: &str,
    from: KeySource,
    created: i64,
) -> PortMapping {
    let mut pm = PortMapping::new(name, spec(service, from, None));
    pm.metadata.namespace = Some(ns.into());
    pm.metadata.uid = Some(format!("uid-{name}"));
    pm.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).expect("time")));
    pm
}

pub(super) fn pod(
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Pod {
    let map = |kv: &[(&str, &str)]| {
        Some(
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    };
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(format!("pod-uid-{name}")),
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{name}")),
            ..PodSpec::default()
        }),
        status: None,
    }
}

pub(super) fn slice(
    ns: &str,
    name: &str,
    owner: Option<&PortMapping>,
    pods: &[&Pod],
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            labels: Some(
                [
                    (
                        LABEL_MANAGED_BY.to_owned(),
                        portmapper_api::MANAGER.to_owned(),
                    ),
                    (LABEL_SERVICE_NAME.to_owned(), "web".to_owned()),
                ]
                .into(),
            ),
            owner_references: owner.map(|pm| {
                vec![OwnerReference {
                    api_version: format!("{}/v1alpha1", portmapper_api::GROUP),
                    kind: "PortMapping".into(),
                    name: pm.name_any(),
                    uid: pm.uid().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: pods
            .iter()
            .map(|p| Endpoint {
                addresses: vec!["10.0.0.1".into()],
                target_ref: Some(ObjectReference {
                    uid: p.uid(),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: None,
    }
}

pub(super) fn names(mut keys: Vec<PmKey>) -> Vec<String> {
    keys.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    keys.into_iter()
        .map(|k| format!("{}/{}", k.namespace.unwrap_or_default(), k.name))
        .collect()
}

/// The label watch of namespace a.
pub(super) fn label() -> PodSource {
    label_in("a")
}

pub(super) fn label_in(ns: &str) -> PodSource {
    PodSource::Label {
        namespace: ns.into(),
        key: KEY.into(),
    }
}

/// Two PortMappings of Service web in ns a, one of api in ns a, one of web in ns b.
pub(super) fn index() -> Index {
    let mut index = Index::new();
    for pm in [
        pm("a", "web-1", "web", KeySource::Label, 10),
        pm("a", "web-2", "web", KeySource::Label, 20),
        pm("a", "api", "api", KeySource::Label, 10),
        pm("b", "web", "web", KeySource::Label, 10),
    ] {
        index.apply_portmapping(&pm);
    }
    index
}

pub(super) fn foreign(
    ns: &str,
    name: &str,
    manager: Option<&str>,
) -> PartialObjectMeta<EndpointSlice> {
    PartialObjectMeta::<EndpointSlice> {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: manager.map(|m| [(LABEL_MANAGED_BY.to_owned(), m.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Default::default()
    }
}
