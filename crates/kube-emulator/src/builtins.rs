//! Built-in type behaviour: defaulting (docs/emulator-spec.md §6) and the validation call sites.
//! The validation rules themselves live in the `kube-validation` crate (one implementation shared
//! with the planner).

use serde_json::{Value, json};

use kube_validation::IpFamily;

use crate::error::{ApiError, Cause};
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

/// The service CIDRs' families, primary first: a dual-stack cluster as kube-apiserver's
/// `--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/112` (kind's dual-stack defaults).
pub const SERVICE_IP_FAMILIES: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

fn alloc_cluster_ip(st: &mut State, family: &str) -> String {
    // Sequential from offset 10, skipping the first addresses as kube does for the `kubernetes`
    // and DNS Services. No release: the ranges are far larger than any test.
    if family == "IPv6" {
        let n = st.next_cluster_ip_v6;
        st.next_cluster_ip_v6 += 1;
        let base = u128::from(std::net::Ipv6Addr::new(0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0));
        return std::net::Ipv6Addr::from(base + u128::from(n)).to_string();
    }
    let n = st.next_cluster_ip;
    st.next_cluster_ip += 1;
    let base = u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0));
    std::net::Ipv4Addr::from(base + n).to_string()
}

/// Apply type defaults. `old` is the stored object on update (fields the API refills from it).
pub fn default(
    st: &mut State,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    creating: bool,
) -> Result<(), ApiError> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "services") => return default_service(st, rt, obj, old, creating),
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
                for list in ["containers", "initContainers"] {
                    for c in spec
                        .get_mut(list)
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        for p in c
                            .get_mut("ports")
                            .and_then(Value::as_array_mut)
                            .into_iter()
                            .flatten()
                        {
                            set_default(p, "protocol", json!("TCP"));
                        }
                    }
                }
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
    Ok(())
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

fn default_service(
    st: &mut State,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    creating: bool,
) -> Result<(), ApiError> {
    let Some(spec) = obj.get_mut("spec") else {
        return Ok(());
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
        return Ok(());
    }
    set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    // clusterIP(s): refill from the stored object on update (upstream `patchAllocatedValues`),
    // and make the two fields agree (v1 defaulting).
    let str_of = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let mut ip = str_of(spec.get("clusterIP"));
    let mut ips: Vec<String> = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| str_of(Some(v))).collect())
        .unwrap_or_default();
    if let (false, Some(o)) = (creating, old) {
        if ip.is_empty() {
            ip = str_of(o.pointer("/spec/clusterIP"));
        }
        if ips.is_empty() {
            ips = o
                .pointer("/spec/clusterIPs")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|v| str_of(Some(v))).collect())
                .unwrap_or_default();
        }
    }
    if ips.is_empty() && !ip.is_empty() {
        ips = vec![ip.clone()];
    }
    if ip.is_empty()
        && let Some(first) = ips.first()
    {
        ip.clone_from(first);
    }
    if let Value::Object(m) = spec {
        if !ip.is_empty() {
            m.insert("clusterIP".into(), json!(ip));
        }
        if !ips.is_empty() {
            m.insert("clusterIPs".into(), json!(ips));
        }
    }
    // ipFamilyPolicy and ipFamilies as upstream's REST storage settles them, then one cluster IP
    // per family from that family's range.
    let Ok(mut typed) = serde_json::from_value::<k8s_openapi::api::core::v1::Service>(obj.clone())
    else {
        // Undecodable: validation reports it.
        return Ok(());
    };
    let old_typed = old.and_then(|o| serde_json::from_value(o.clone()).ok());
    let errs = kube_validation::init_ip_family_fields(
        &mut typed,
        old_typed.as_ref(),
        &SERVICE_IP_FAMILIES,
    );
    if !errs.is_empty() {
        let name = meta::str_at(obj, "/metadata/name").unwrap_or_default();
        return Err(crate::validation::invalid(rt, name, &errs));
    }
    let spec_t = typed.spec.unwrap_or_default();
    let families = spec_t.ip_families.unwrap_or_default();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    spec.insert("ipFamilyPolicy".into(), json!(spec_t.ip_family_policy));
    spec.insert("ipFamilies".into(), json!(families));
    if ip != "None" {
        // Invalid or mismatched user-given IPs are left to validation, which words them.
        let mut allocated = ips;
        for (i, family) in families.iter().enumerate() {
            if allocated.get(i).is_none_or(String::is_empty) {
                let new_ip = alloc_cluster_ip(st, family);
                if i < allocated.len() {
                    allocated[i] = new_ip;
                } else {
                    allocated.push(new_ip);
                }
            }
        }
        if let Some(first) = allocated.first() {
            spec.insert("clusterIP".into(), json!(first));
        }
        spec.insert("clusterIPs".into(), json!(allocated));
    }
    Ok(())
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

/// How a built-in timestamp field is serialised (docs/emulator-spec.md §2.2).
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
