//! Built-in type behaviour: defaulting (spec §6) and the validation call sites. The validation rules
//! themselves live in the `kube-validation` crate (one implementation shared with the planner).

use serde_json::{Value, json};

use crate::error::Cause;
use crate::meta;
use crate::registry::ResourceType;
use crate::store::State;

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Value::Object(m) = obj
        && m.get(key).is_none_or(Value::is_null)
    {
        m.insert(key.to_string(), v);
    }
}

fn alloc_cluster_ip(st: &mut State) -> String {
    // 10.96.0.0/12; skip .0 and the first few addresses like kube does for the `kubernetes` service.
    let n = st.next_cluster_ip;
    st.next_cluster_ip += 1;
    let base: u32 = (10 << 24) | (96 << 16);
    let ip = base + n;
    format!(
        "{}.{}.{}.{}",
        ip >> 24,
        (ip >> 16) & 0xff,
        (ip >> 8) & 0xff,
        ip & 0xff
    )
}

/// Apply type defaults. `old` is the stored object on update (fields the API refills from it).
pub fn default(
    st: &mut State,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    creating: bool,
) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "services") => default_service(st, obj, old, creating),
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
            let m = meta::meta_mut(obj);
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            if creating {
                set_default(obj, "spec", json!({}));
                if let Some(spec) = obj.get_mut("spec") {
                    set_default(spec, "finalizers", json!(["kubernetes"]));
                }
            }
        }
        ("", "secrets") => set_default(obj, "type", json!("Opaque")),
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec") {
                set_default(spec, "restartPolicy", json!("Always"));
                set_default(spec, "dnsPolicy", json!("ClusterFirst"));
                set_default(spec, "schedulerName", json!("default-scheduler"));
                set_default(spec, "terminationGracePeriodSeconds", json!(30));
                set_default(spec, "securityContext", json!({}));
                set_default(spec, "enableServiceLinks", json!(true));
            }
        }
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

fn default_service(st: &mut State, obj: &mut Value, old: Option<&Value>, creating: bool) {
    let Some(spec) = obj.get_mut("spec") else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    let external_name = ty == "ExternalName";
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for (i, p) in ports.iter_mut().enumerate() {
            set_default(p, "protocol", json!("TCP"));
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            set_default(p, "targetPort", port);
            if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
                let old_np = old
                    .and_then(|o| o.pointer(&format!("/spec/ports/{i}/nodePort")))
                    .cloned();
                if p.get("nodePort").is_none_or(Value::is_null) {
                    let np = old_np.unwrap_or_else(|| {
                        let n = st.next_node_port;
                        st.next_node_port = if n >= 32767 { 30000 } else { n + 1 };
                        json!(n)
                    });
                    if let Value::Object(m) = p {
                        m.insert("nodePort".into(), np);
                    }
                }
            }
        }
    }
    if external_name {
        return;
    }
    set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    // clusterIP: refill from the stored object on update, else allocate (None = headless).
    let old_ip = old.and_then(|o| o.pointer("/spec/clusterIP")).cloned();
    let old_ips = old.and_then(|o| o.pointer("/spec/clusterIPs")).cloned();
    if spec
        .get("clusterIP")
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
    {
        let ip = match old_ip {
            Some(ip) if !creating => ip,
            _ => json!(alloc_cluster_ip(st)),
        };
        if let Value::Object(m) = spec {
            m.insert("clusterIP".into(), ip);
        }
    }
    if spec.get("clusterIPs").is_none_or(Value::is_null) {
        let ips = match old_ips {
            Some(ips) if !creating => ips,
            _ => json!([spec.get("clusterIP").cloned().unwrap_or(Value::Null)]),
        };
        if let Value::Object(m) = spec {
            m.insert("clusterIPs".into(), ips);
        }
    }
    set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
    set_default(spec, "ipFamilies", json!(["IPv4"]));
}

/// Checks of the CRD definition itself (spec §5.1); everything else is in [`crate::validation`].
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

/// How a built-in timestamp field is serialised (spec §2.2).
#[derive(Clone, Copy)]
enum TimeKind {
    /// `metav1.Time`: RFC 3339, seconds.
    Seconds,
    /// `metav1.MicroTime`: RFC 3339 with exactly 6 fractional digits.
    Micros,
}

fn time_fields(rt: &ResourceType) -> &'static [(&'static str, TimeKind)] {
    use TimeKind::{Micros, Seconds};
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("coordination.k8s.io", "leases") => {
            &[("/spec/acquireTime", Micros), ("/spec/renewTime", Micros)]
        }
        ("events.k8s.io", "events") => &[
            ("/eventTime", Micros),
            ("/series/lastObservedTime", Micros),
            ("/deprecatedFirstTimestamp", Seconds),
            ("/deprecatedLastTimestamp", Seconds),
        ],
        ("", "events") => &[
            ("/eventTime", Micros),
            ("/series/lastObservedTime", Micros),
            ("/firstTimestamp", Seconds),
            ("/lastTimestamp", Seconds),
        ],
        _ => &[],
    }
}

fn render_time(ts: jiff::Timestamp, kind: TimeKind) -> String {
    let base = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    match kind {
        TimeKind::Seconds => format!("{base}Z"),
        TimeKind::Micros => format!("{base}.{:06}Z", ts.subsec_microsecond()),
    }
}

/// Normalise built-in time fields like the apiserver's typed round trip: `Time` truncated to
/// seconds, `MicroTime` with 6 fractional digits, `status.conditions[*]` times as `Time`.
/// Unparsable values are left alone (validation reports them).
pub fn normalise_times(rt: &ResourceType, obj: &mut Value) {
    if !rt.builtin {
        return;
    }
    for (ptr, kind) in time_fields(rt) {
        if let Some(v) = obj.pointer_mut(ptr)
            && let Some(ts) = v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok())
        {
            *v = json!(render_time(ts, *kind));
        }
    }
    if let Some(conds) = obj
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conds {
            for k in [
                "lastTransitionTime",
                "lastProbeTime",
                "lastHeartbeatTime",
                "lastUpdateTime",
            ] {
                if let Some(v) = c.get_mut(k)
                    && let Some(ts) = v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok())
                {
                    *v = json!(render_time(ts, TimeKind::Seconds));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_and_second_times() {
        let rt = crate::registry::builtins()
            .into_iter()
            .find(|r| r.plural == "leases")
            .unwrap();
        let mut l = json!({"spec": {"renewTime": "2026-01-02T03:04:05.123456789Z", "acquireTime": "2026-01-02T03:04:05Z"}});
        normalise_times(&rt, &mut l);
        assert_eq!(l["spec"]["renewTime"], "2026-01-02T03:04:05.123456Z");
        assert_eq!(l["spec"]["acquireTime"], "2026-01-02T03:04:05.000000Z");
        let rt = crate::registry::builtins()
            .into_iter()
            .find(|r| r.plural == "pods")
            .unwrap();
        let mut p = json!({"status": {"conditions": [{"type": "Ready", "lastTransitionTime": "2026-01-02T03:04:05.9Z"}]}});
        normalise_times(&rt, &mut p);
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-02T03:04:05Z"
        );
    }
}
