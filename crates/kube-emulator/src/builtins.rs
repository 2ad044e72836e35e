//! Built-in type behaviour: defaulting (docs/emulator-spec.md §6) and the validation call sites.
//! The validation rules themselves live in the `kube-validation` crate (one implementation shared
//! with the planner).

use serde_json::{Value, json};

use crate::error::Cause;
use crate::meta;
use crate::registry::ResourceType;

use crate::defaults::set_default;

/// Apply the type's defaulting functions (`SetDefaults_*` of k8s.io/kubernetes/pkg/apis/*/v1):
/// what they set belongs to the writer's managedFields entry, unlike what [`crate::strategy`]
/// sets afterwards.
pub fn default(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "services") => default_service(obj),
        ("discovery.k8s.io", "endpointslices") => {
            if let Some(ports) = obj.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_default(p, "name", json!(""));
                    set_default(p, "protocol", json!("TCP"));
                }
            }
        }
        ("", "endpoints") => {
            if let Some(subsets) = obj.get_mut("subsets").and_then(Value::as_array_mut) {
                for s in subsets {
                    if let Some(ports) = s.get_mut("ports").and_then(Value::as_array_mut) {
                        for p in ports {
                            set_default(p, "protocol", json!("TCP"));
                        }
                    }
                }
            }
        }
        ("", "namespaces") => {
            let name = meta::str_at(obj, "/metadata/name")
                .unwrap_or_default()
                .to_string();
            if !name.is_empty() {
                let m = meta::meta_mut(obj);
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Value::Object(l) = labels {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            if let Some(status) = obj.get_mut("status") {
                set_default(status, "phase", json!("Active"));
            }
        }
        ("", "secrets") => set_default(obj, "type", json!("Opaque")),
        ("", "pods") => crate::podspec::default_pod(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            if let Some(spec) = obj.get_mut("spec") {
                if let Some(names) = spec.get_mut("names") {
                    let kind = names
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    set_default(names, "singular", json!(kind.to_lowercase()));
                    set_default(names, "listKind", json!(format!("{kind}List")));
                }
                set_default(spec, "conversion", json!({"strategy": "None"}));
            }
        }
        _ => {}
    }
}

/// Initial status of built-ins with a status subresource (client status is reset on create).
pub fn initial_status(rt: &ResourceType) -> Option<Value> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "services") => Some(json!({"loadBalancer": {}})),
        ("", "namespaces") => Some(json!({"phase": "Active"})),
        // As upstream: a created Pod starts Pending whatever status the client sent; tests (there
        // is no kubelet) set podIP/conditions through /status.
        ("", "pods") => Some(json!({"phase": "Pending"})),
        ("apiextensions.k8s.io", "customresourcedefinitions") => Some(json!({})),
        _ => None,
    }
}

/// `SetDefaults_Service`: what a Service's writer owns. Cluster IPs, IP families and node ports
/// are the REST storage's ([`crate::strategy`]).
fn default_service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec") else {
        return;
    };
    set_default(spec, "sessionAffinity", json!("None"));
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            if let Value::Object(m) = spec {
                m.remove("sessionAffinityConfig");
            }
        }
        Some("ClientIP")
            if spec
                .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                .is_none_or(Value::is_null) =>
        {
            if let Value::Object(m) = spec {
                m.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    set_default(spec, "type", json!("ClusterIP"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
            let unset = p
                .get("targetPort")
                .is_none_or(|t| t.is_null() || *t == json!(0) || *t == json!(""));
            if unset && let Value::Object(m) = p {
                let port = m.get("port").cloned().unwrap_or(json!(0));
                m.insert("targetPort".into(), port);
            }
        }
    }
    let externally_accessible = matches!(ty.as_str(), "NodePort" | "LoadBalancer")
        || spec
            .get("externalIPs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
    if externally_accessible {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

/// Checks of the CRD definition itself (docs/emulator-spec.md §5.1); everything else is in
/// [`crate::validation`].
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let _ = old;
    if rt.group == "apiextensions.k8s.io" {
        validate_crd(obj)
    } else {
        Vec::new()
    }
}

fn validate_crd(obj: &Value) -> Vec<Cause> {
    let mut c = crate::semantics::crd_schema_errors(obj);
    let name = meta::str_at(obj, "/metadata/name").unwrap_or_default();
    let plural = meta::str_at(obj, "/spec/names/plural").unwrap_or_default();
    let group = meta::str_at(obj, "/spec/group").unwrap_or_default();
    if plural.is_empty() {
        c.push(Cause::new(
            "FieldValueRequired",
            "Required value",
            "spec.names.plural",
        ));
    }
    if meta::str_at(obj, "/spec/names/kind")
        .unwrap_or_default()
        .is_empty()
    {
        c.push(Cause::new(
            "FieldValueRequired",
            "Required value",
            "spec.names.kind",
        ));
    }
    if name != format!("{plural}.{group}") {
        c.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
            "metadata.name",
        ));
    }
    match meta::str_at(obj, "/spec/scope") {
        Some("Namespaced" | "Cluster") => {}
        other => c.push(Cause::new(
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {:?}: supported values: \"Cluster\", \"Namespaced\"",
                other.unwrap_or_default()
            ),
            "spec.scope",
        )),
    }
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        c.push(Cause::new(
            "FieldValueRequired",
            "Required value: must have exactly one version marked as storage version",
            "spec.versions",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .count();
        if storage != 1 {
            c.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {storage}: must have exactly one version marked as storage version"),
                "spec.versions",
            ));
        }
    }
    c
}
