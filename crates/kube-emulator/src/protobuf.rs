//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded to the JSON the rest
//! of the emulator handles. kubectl's typed generators (`create namespace|configmap|secret|
//! service|serviceaccount`, `auth can-i`) send them; kube-rs never does.
//!
//! The envelope is upstream's: the 4-byte magic `k8s\0`, then a `runtime.Unknown` whose
//! `typeMeta` names the kind and whose `raw` holds the typed message. The message types are
//! kube-rs's `k8s-pb`; each kind is converted field by field into the `k8s-openapi` type, whose
//! serde shape is the JSON one. Go encodes every non-pointer field, so an empty string, zero
//! number, `false`, empty list or map on the wire is an unset `omitempty` field in JSON; pointer
//! fields (`immutable`, `allocateLoadBalancerNodePorts`, …) keep what was sent.
//!
//! Only the kinds kubectl sends as protobuf to resources the emulator serves are decoded; any
//! other kind answers 415 naming them (send JSON, as every other client does).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::authorization::v1 as authz;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::api::authorization::v1 as pb_authz;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

/// The protobuf media type of Kubernetes objects.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// The kinds decoded, as `(apiVersion, kind)`.
pub const KINDS: &[(&str, &str)] = &[
    ("v1", "Namespace"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"),
];

/// Whether a `Content-Type` is the Kubernetes protobuf one (parameters ignored).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Decode an enveloped protobuf object to its JSON form (with `apiVersion` and `kind`).
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        // Upstream's protobuf serializer words it so.
        return Err(ApiError::bad_request(format!(
            "provided data does not appear to be a protobuf message, expected prefix {MAGIC:?}"
        )));
    };
    let unknown = Unknown::decode(rest).map_err(malformed)?;
    let tm = unknown.type_meta.unwrap_or_default();
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(ApiError::unsupported_media(
            "application/json, application/yaml (kube-emulator does not decode a content-encoded protobuf Unknown)",
        ));
    }
    let raw = unknown.raw.unwrap_or_default();
    let raw = raw.as_slice();
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => json(namespace(
            pb_core::Namespace::decode(raw).map_err(malformed)?,
        )),
        ("v1", "ConfigMap") => json(config_map(
            pb_core::ConfigMap::decode(raw).map_err(malformed)?,
        )),
        ("v1", "Secret") => json(secret(pb_core::Secret::decode(raw).map_err(malformed)?)),
        ("v1", "Service") => json(service(pb_core::Service::decode(raw).map_err(malformed)?)),
        ("v1", "ServiceAccount") => json(service_account(
            pb_core::ServiceAccount::decode(raw).map_err(malformed)?,
        )),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => json(self_access_review(
            pb_authz::SelfSubjectAccessReview::decode(raw).map_err(malformed)?,
        )),
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => json(self_rules_review(
            pb_authz::SelfSubjectRulesReview::decode(raw).map_err(malformed)?,
        )),
        _ => {
            let decoded: Vec<String> = KINDS.iter().map(|(_, k)| k.to_string()).collect();
            Err(ApiError::unsupported_media(&format!(
                "application/json, application/yaml (kube-emulator decodes protobuf bodies only for {}; \
                 send {kind} {api_version} as JSON)",
                decoded.join(", ")
            )))
        }
    }
}

fn malformed(e: prost::DecodeError) -> ApiError {
    ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
}

fn json<T: Serialize>(obj: T) -> Result<Value, ApiError> {
    serde_json::to_value(obj).map_err(|e| ApiError::internal(format!("encoding as JSON: {e}")))
}

// Go's zero values are `omitempty` fields left unset.
fn s(v: Option<String>) -> Option<String> {
    v.filter(|x| !x.is_empty())
}

fn req(v: Option<String>) -> String {
    v.unwrap_or_default()
}

fn list<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn list_of<A, B>(v: Vec<A>, f: impl FnMut(A) -> B) -> Option<Vec<B>> {
    list(v.into_iter().map(f).collect())
}

fn map<V>(m: BTreeMap<String, V>) -> Option<BTreeMap<String, V>> {
    (!m.is_empty()).then_some(m)
}

fn bytes_map(m: BTreeMap<String, Vec<u8>>) -> Option<BTreeMap<String, ByteString>> {
    map(m.into_iter().map(|(k, v)| (k, ByteString(v))).collect())
}

fn nonzero_i32(v: Option<i32>) -> Option<i32> {
    v.filter(|x| *x != 0)
}

fn nonzero_i64(v: Option<i64>) -> Option<i64> {
    v.filter(|x| *x != 0)
}

fn truthy(v: Option<bool>) -> Option<bool> {
    v.filter(|x| *x)
}

/// A zero `metav1.Time` (Go encodes one for every non-pointer time) is JSON `null`.
fn time(t: Option<pb_meta::Time>) -> Option<meta::Time> {
    let t = t?;
    let (secs, nanos) = (t.seconds.unwrap_or(0), t.nanos.unwrap_or(0));
    if secs == 0 && nanos == 0 {
        return None;
    }
    k8s_openapi::jiff::Timestamp::new(secs, nanos)
        .ok()
        .map(meta::Time)
}

fn object_meta(m: Option<pb_meta::ObjectMeta>) -> meta::ObjectMeta {
    let Some(m) = m else {
        return meta::ObjectMeta::default();
    };
    meta::ObjectMeta {
        name: s(m.name),
        generate_name: s(m.generate_name),
        namespace: s(m.namespace),
        self_link: s(m.self_link),
        uid: s(m.uid),
        resource_version: s(m.resource_version),
        generation: nonzero_i64(m.generation),
        creation_timestamp: time(m.creation_timestamp),
        deletion_timestamp: time(m.deletion_timestamp),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: map(m.labels),
        annotations: map(m.annotations),
        owner_references: list_of(m.owner_references, |o| meta::OwnerReference {
            api_version: req(o.api_version),
            kind: req(o.kind),
            name: req(o.name),
            uid: req(o.uid),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        }),
        finalizers: list(m.finalizers),
        managed_fields: list_of(m.managed_fields, |e| meta::ManagedFieldsEntry {
            manager: s(e.manager),
            operation: s(e.operation),
            api_version: s(e.api_version),
            time: time(e.time),
            fields_type: s(e.fields_type),
            fields_v1: e
                .fields_v1
                .and_then(|f| f.raw)
                .and_then(|raw| serde_json::from_slice(&raw).ok())
                .map(meta::FieldsV1),
            subresource: s(e.subresource),
        }),
    }
}

fn condition(c: pb_meta::Condition) -> meta::Condition {
    meta::Condition {
        type_: req(c.r#type),
        status: req(c.status),
        observed_generation: nonzero_i64(c.observed_generation),
        last_transition_time: time(c.last_transition_time)
            .unwrap_or(meta::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
        reason: req(c.reason),
        message: req(c.message),
    }
}

fn namespace(n: pb_core::Namespace) -> core::Namespace {
    core::Namespace {
        metadata: object_meta(n.metadata),
        spec: n.spec.map(|sp| core::NamespaceSpec {
            finalizers: list(sp.finalizers),
        }),
        status: n.status.map(|st| core::NamespaceStatus {
            phase: s(st.phase),
            conditions: list_of(st.conditions, |c| core::NamespaceCondition {
                type_: req(c.r#type),
                status: req(c.status),
                last_transition_time: time(c.last_transition_time),
                reason: s(c.reason),
                message: s(c.message),
            }),
        }),
    }
}

fn config_map(c: pb_core::ConfigMap) -> core::ConfigMap {
    core::ConfigMap {
        metadata: object_meta(c.metadata),
        immutable: c.immutable,
        data: map(c.data),
        binary_data: bytes_map(c.binary_data),
    }
}

fn secret(x: pb_core::Secret) -> core::Secret {
    core::Secret {
        metadata: object_meta(x.metadata),
        immutable: x.immutable,
        data: bytes_map(x.data),
        string_data: map(x.string_data),
        type_: s(x.r#type),
    }
}

fn int_or_string(v: k8s_pb::apimachinery::pkg::util::intstr::IntOrString) -> Option<IntOrString> {
    // Type 0 is Int, 1 is String (intstr.Type). A zero Int is an unset targetPort.
    match v.r#type.unwrap_or(0) {
        1 => s(v.str_val).map(IntOrString::String),
        _ => nonzero_i32(v.int_val).map(IntOrString::Int),
    }
}

fn service(x: pb_core::Service) -> core::Service {
    core::Service {
        metadata: object_meta(x.metadata),
        spec: x.spec.map(|sp| core::ServiceSpec {
            ports: list_of(sp.ports, |p| core::ServicePort {
                name: s(p.name),
                protocol: s(p.protocol),
                app_protocol: p.app_protocol,
                port: p.port.unwrap_or(0),
                target_port: p.target_port.and_then(int_or_string),
                node_port: nonzero_i32(p.node_port),
            }),
            selector: map(sp.selector),
            cluster_ip: s(sp.cluster_ip),
            cluster_ips: list(sp.cluster_ips),
            type_: s(sp.r#type),
            external_ips: list(sp.external_ips),
            session_affinity: s(sp.session_affinity),
            load_balancer_ip: s(sp.load_balancer_ip),
            load_balancer_source_ranges: list(sp.load_balancer_source_ranges),
            external_name: s(sp.external_name),
            external_traffic_policy: s(sp.external_traffic_policy),
            health_check_node_port: nonzero_i32(sp.health_check_node_port),
            publish_not_ready_addresses: truthy(sp.publish_not_ready_addresses),
            session_affinity_config: sp.session_affinity_config.map(|c| {
                core::SessionAffinityConfig {
                    client_ip: c.client_ip.map(|ip| core::ClientIPConfig {
                        timeout_seconds: ip.timeout_seconds,
                    }),
                }
            }),
            ip_families: list(sp.ip_families),
            ip_family_policy: sp.ip_family_policy,
            allocate_load_balancer_node_ports: sp.allocate_load_balancer_node_ports,
            load_balancer_class: sp.load_balancer_class,
            internal_traffic_policy: sp.internal_traffic_policy,
            traffic_distribution: sp.traffic_distribution,
        }),
        status: x.status.map(|st| core::ServiceStatus {
            load_balancer: st.load_balancer.map(|lb| core::LoadBalancerStatus {
                ingress: list_of(lb.ingress, |i| core::LoadBalancerIngress {
                    ip: s(i.ip),
                    hostname: s(i.hostname),
                    ip_mode: i.ip_mode,
                    ports: list_of(i.ports, |p| core::PortStatus {
                        port: p.port.unwrap_or(0),
                        protocol: req(p.protocol),
                        error: p.error,
                    }),
                }),
            }),
            conditions: list_of(st.conditions, condition),
        }),
    }
}

fn service_account(x: pb_core::ServiceAccount) -> core::ServiceAccount {
    core::ServiceAccount {
        metadata: object_meta(x.metadata),
        secrets: list_of(x.secrets, |r| core::ObjectReference {
            api_version: s(r.api_version),
            field_path: s(r.field_path),
            kind: s(r.kind),
            name: s(r.name),
            namespace: s(r.namespace),
            resource_version: s(r.resource_version),
            uid: s(r.uid),
        }),
        image_pull_secrets: list_of(x.image_pull_secrets, |r| core::LocalObjectReference {
            name: req(r.name),
        }),
        automount_service_account_token: x.automount_service_account_token,
    }
}

fn requirement_values(v: Vec<String>) -> Option<Vec<String>> {
    list(v)
}

fn resource_attributes(a: pb_authz::ResourceAttributes) -> authz::ResourceAttributes {
    authz::ResourceAttributes {
        namespace: s(a.namespace),
        verb: s(a.verb),
        group: s(a.group),
        version: s(a.version),
        resource: s(a.resource),
        subresource: s(a.subresource),
        name: s(a.name),
        field_selector: a.field_selector.map(|f| authz::FieldSelectorAttributes {
            raw_selector: s(f.raw_selector),
            requirements: list_of(f.requirements, |r| meta::FieldSelectorRequirement {
                key: req(r.key),
                operator: req(r.operator),
                values: requirement_values(r.values),
            }),
        }),
        label_selector: a.label_selector.map(|l| authz::LabelSelectorAttributes {
            raw_selector: s(l.raw_selector),
            requirements: list_of(l.requirements, |r| meta::LabelSelectorRequirement {
                key: req(r.key),
                operator: req(r.operator),
                values: requirement_values(r.values),
            }),
        }),
    }
}

fn self_access_review(x: pb_authz::SelfSubjectAccessReview) -> authz::SelfSubjectAccessReview {
    let spec = x.spec.unwrap_or_default();
    authz::SelfSubjectAccessReview {
        metadata: object_meta(x.metadata),
        spec: authz::SelfSubjectAccessReviewSpec {
            resource_attributes: spec.resource_attributes.map(resource_attributes),
            non_resource_attributes: spec.non_resource_attributes.map(|n| {
                authz::NonResourceAttributes {
                    path: s(n.path),
                    verb: s(n.verb),
                }
            }),
        },
        // A client's status is ignored: the server computes it.
        status: None,
    }
}

fn self_rules_review(x: pb_authz::SelfSubjectRulesReview) -> authz::SelfSubjectRulesReview {
    authz::SelfSubjectRulesReview {
        metadata: object_meta(x.metadata),
        spec: authz::SelfSubjectRulesReviewSpec {
            namespace: x.spec.and_then(|sp| s(sp.namespace)),
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC.to_vec(), u.encode_to_vec()].concat()
    }

    fn pb_meta(name: &str) -> pb_meta::ObjectMeta {
        pb_meta::ObjectMeta {
            name: Some(name.into()),
            // Go sends every non-pointer field: empty strings and a zero time.
            namespace: Some(String::new()),
            generate_name: Some(String::new()),
            creation_timestamp: Some(pb_meta::Time {
                seconds: Some(0),
                nanos: Some(0),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn config_map_zero_values_are_unset_and_bytes_are_base64() {
        let cm = pb_core::ConfigMap {
            metadata: Some(pb_meta("c")),
            data: [("a".to_string(), "b".to_string())].into(),
            binary_data: [("bin".to_string(), vec![0u8, 1, 2])].into(),
            immutable: None,
        };
        let v = decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).expect("decodes");
        assert_eq!(
            v,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c"}, "data": {"a": "b"}, "binaryData": {"bin": "AAEC"}})
        );
    }

    #[test]
    fn service_ports_and_target_ports() {
        let svc = pb_core::Service {
            metadata: Some(pb_meta("web")),
            spec: Some(pb_core::ServiceSpec {
                ports: vec![pb_core::ServicePort {
                    name: Some("80-8080".into()),
                    protocol: Some("TCP".into()),
                    port: Some(80),
                    target_port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                        r#type: Some(0),
                        int_val: Some(8080),
                        str_val: Some(String::new()),
                    }),
                    node_port: Some(0),
                    app_protocol: None,
                }],
                selector: [("app".to_string(), "web".to_string())].into(),
                r#type: Some("ClusterIP".into()),
                cluster_ip: Some(String::new()),
                publish_not_ready_addresses: Some(false),
                ..Default::default()
            }),
            status: Some(pb_core::ServiceStatus {
                load_balancer: Some(Default::default()),
                conditions: vec![],
            }),
        };
        let v = decode(&envelope("v1", "Service", svc.encode_to_vec())).expect("decodes");
        assert_eq!(
            v["spec"],
            serde_json::json!({"ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                "selector": {"app": "web"}, "type": "ClusterIP"})
        );
    }

    #[test]
    fn other_kinds_and_bad_envelopes() {
        let e = decode(&envelope("v1", "Pod", vec![])).expect_err("not decoded");
        assert_eq!(e.code, 415);
        assert!(e.message.contains("send Pod v1 as JSON"), "{}", e.message);
        let e = decode(b"{}").expect_err("no magic");
        assert_eq!(e.code, 400);
        let e = decode(b"k8s\0\xff\xff").expect_err("garbage");
        assert_eq!(e.code, 400);
    }
}
