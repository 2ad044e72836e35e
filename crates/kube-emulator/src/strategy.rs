//! What a real API server sets after defaulting, and so outside every managedFields entry: the
//! registry strategies' `PrepareForCreate`/`PrepareForUpdate`, the Service REST storage's
//! cluster IP and node port allocation, and the default mutating admission plugins
//! (`Priority`, `DefaultTolerationSeconds`, `TaintNodesByCondition`). None of it runs for
//! subresource writes, as upstream.

use std::net::IpAddr;

use serde_json::{Value, json};

use kube_validation::IpFamily;

use crate::defaults::set_default;
use crate::error::ApiError;
use crate::meta;
use crate::registry::GroupResource;
use crate::registry::ResourceType;
use crate::store::State;

/// The service CIDRs, primary first: a dual-stack cluster as kube-apiserver's
/// `--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112` (kind's dual-stack defaults, and
/// the real control plane the differential test runs).
pub const SERVICE_IP_FAMILIES: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

/// Whether [`prepare`] changes objects of this type (the caller then keeps the defaulted object
/// for the managedFields computation).
pub fn applies(rt: &ResourceType, sub: Option<&str>) -> bool {
    sub.is_none()
        && rt.group.is_empty()
        && matches!(
            rt.plural.as_str(),
            "namespaces" | "services" | "pods" | "nodes"
        )
}

/// Sets what the strategy, the REST storage and admission set on a create (`old` None) or an
/// update of the main resource.
pub fn prepare(
    st: &mut State,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    match rt.plural.as_str() {
        "namespaces" => prepare_namespace(obj, old),
        "services" => prepare_service(st, rt, obj, old)?,
        "pods" => prepare_pod(obj, old),
        "nodes" if old.is_none() => taint_not_ready(obj),
        _ => {}
    }
    Ok(())
}

/// The namespace strategy: `kubernetes` finalizer on create, finalizers kept on update (only
/// `/finalize` changes them).
fn prepare_namespace(obj: &mut Value, old: Option<&Value>) {
    set_default(obj, "spec", json!({}));
    let finalizers = match old {
        None => Some(json!(["kubernetes"])),
        Some(o) => o.pointer("/spec/finalizers").cloned(),
    };
    if let Some(Value::Object(spec)) = obj.get_mut("spec") {
        match finalizers {
            Some(f) => spec.insert("finalizers".into(), f),
            None => spec.remove("finalizers"),
        };
    }
}

/// `TaintNodesByCondition`: a new Node is `node.kubernetes.io/not-ready:NoSchedule` until its
/// (absent) node controller clears it.
fn taint_not_ready(obj: &mut Value) {
    set_default(obj, "spec", json!({}));
    let Some(spec) = obj.get_mut("spec") else {
        return;
    };
    set_default(spec, "taints", json!([]));
    if let Some(Value::Array(taints)) = spec.get_mut("taints") {
        let present = taints
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/not-ready" && t["effect"] == "NoSchedule");
        if !present {
            taints.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}));
        }
    }
}

/// `Priority` (no PriorityClass: priority 0, preempting lower priorities),
/// `DefaultTolerationSeconds` (tolerate not-ready and unreachable nodes for 300 s) and, on
/// create, the pod strategy's QoS class.
fn prepare_pod(obj: &mut Value, old: Option<&Value>) {
    let Some(spec) = obj.get_mut("spec") else {
        return;
    };
    match old {
        None => {
            set_default(spec, "priority", json!(0));
            set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
        }
        Some(o) => {
            for key in ["priority", "preemptionPolicy"] {
                if let Some(v) = o.pointer(&format!("/spec/{key}")) {
                    set_default(spec, key, v.clone());
                }
            }
        }
    }
    add_default_tolerations(spec);
    if old.is_none() {
        let qos = qos_class(spec);
        if let Some(Value::Object(status)) = obj.get_mut("status") {
            status.insert("qosClass".into(), json!(qos));
        }
    }
}

fn add_default_tolerations(spec: &mut Value) {
    let tolerates = |tolerations: &[Value], key: &str| {
        tolerations.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or_default();
            let e = t.get("effect").and_then(Value::as_str).unwrap_or_default();
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    set_default(spec, "tolerations", json!([]));
    if let Some(Value::Array(tolerations)) = spec.get_mut("tolerations") {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !tolerates(tolerations, key) {
                tolerations.push(json!({"key": key, "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// `ComputePodQOS` over CPU and memory: BestEffort without requests or limits, Guaranteed when
/// every container's requests equal its limits, Burstable otherwise.
fn qos_class(spec: &Value) -> &'static str {
    let mut pod = "";
    for list in ["initContainers", "containers"] {
        for c in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let class = container_qos(c.get("resources").unwrap_or(&Value::Null));
            if class == "Burstable" {
                return class;
            }
            if pod.is_empty() {
                pod = class;
            } else if pod != class {
                return "Burstable";
            }
        }
    }
    if pod.is_empty() { "BestEffort" } else { pod }
}

fn container_qos(resources: &Value) -> &'static str {
    let empty = |k: &str| {
        resources
            .get(k)
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty())
    };
    if empty("requests") && empty("limits") {
        return "BestEffort";
    }
    let mut class = "";
    for res in ["cpu", "memory"] {
        let req = resources.pointer(&format!("/requests/{res}"));
        let lim = resources.pointer(&format!("/limits/{res}"));
        let this = match (req, lim) {
            (None, None) => "BestEffort",
            (Some(r), Some(l)) if r == l => "Guaranteed",
            _ => "Burstable",
        };
        if this == "Burstable" {
            return this;
        }
        if class.is_empty() {
            class = this;
        } else if class != this {
            return "Burstable";
        }
    }
    class
}

fn str_of(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

fn strings_of(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().map(|v| str_of(Some(v))).collect())
        .unwrap_or_default()
}

fn needs_cluster_ip(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
}

fn needs_node_port(svc: &Value) -> bool {
    match svc.pointer("/spec/type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => {
            svc.pointer("/spec/allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false)
        }
        _ => false,
    }
}

/// The Service REST storage: `patchAllocatedValues` and `normalizeClusterIPs` (keep what was
/// allocated when a client leaves it out, keep `clusterIP` and `clusterIPs` in sync), IP family
/// fields, then one cluster IP per family and a node port per port where needed.
fn prepare_service(
    st: &mut State,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if obj.get("spec").is_none_or(|s| !s.is_object()) {
        return Ok(());
    }
    if let Some(o) = old {
        patch_allocated_values(obj, o);
    }
    normalize_cluster_ips(obj, old);
    let name = meta::str_at(obj, "/metadata/name")
        .unwrap_or_default()
        .to_string();
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
        return Err(crate::validation::invalid(rt, &name, &errs));
    }
    let spec_t = typed.spec.unwrap_or_default();
    let families = spec_t.ip_families.unwrap_or_default();
    let old_ips = strings_of(old.and_then(|o| o.pointer("/spec/clusterIPs")));
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return Ok(());
    }
    spec.insert("ipFamilyPolicy".into(), json!(spec_t.ip_family_policy));
    spec.insert("ipFamilies".into(), json!(families));
    let ips = strings_of(spec.get("clusterIPs"));
    if str_of(spec.get("clusterIP")) != "None" {
        let allocated = allocate_cluster_ips(st, &ips, &old_ips, &families)
            .map_err(|detail| cluster_ips_invalid(rt, &name, &ips, &detail))?;
        if let Some(first) = allocated.first() {
            spec.insert("clusterIP".into(), json!(first));
        }
        spec.insert("clusterIPs".into(), json!(allocated));
    }
    if needs_node_port(obj) {
        allocate_node_ports(st, obj);
    }
    Ok(())
}

fn cluster_ips_invalid(rt: &ResourceType, name: &str, ips: &[String], detail: &str) -> ApiError {
    let err = kube_validation::FieldError::invalid(
        "spec.clusterIPs",
        kube_validation::field::go_json_strings(ips),
        detail,
    );
    crate::validation::invalid(rt, name, &[err])
}

/// One cluster IP per family: given ones must lie in that family's range and be free.
fn allocate_cluster_ips(
    st: &mut State,
    given: &[String],
    old: &[String],
    families: &[String],
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, family) in families.iter().enumerate() {
        match given.get(i).filter(|ip| !ip.is_empty()) {
            None => out.push(alloc_cluster_ip(st, family)),
            // Kept, not checked: the old object's, and what no IP parser reads (validation
            // reports those as upstream's `initIPFamilyFields` does, before allocation).
            Some(ip) if old.contains(ip) || kube_validation::ip::parse_ip_sloppy(ip).is_none() => {
                out.push(ip.clone())
            }
            Some(ip) => {
                check_cluster_ip(st, ip)
                    .map_err(|reason| format!("failed to allocate IP {ip}: {reason}"))?;
                out.push(ip.clone());
            }
        }
    }
    Ok(out)
}

fn check_cluster_ip(st: &State, ip: &str) -> Result<(), &'static str> {
    let in_range = match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => {
            let o = v4.octets();
            o[0] == 10 && o[1] == 96 && !(o[2] == 0 && o[3] == 0) && !(o[2] == 255 && o[3] == 255)
        }
        Ok(IpAddr::V6(v6)) => {
            let s = v6.segments();
            s[..7] == [0xfd00, 0x10, 0x96, 0, 0, 0, 0] && s[7] != 0
        }
        Err(_) => false,
    };
    if !in_range {
        return Err("the provided network does not match the current range");
    }
    let services = GroupResource::new("", "services");
    let taken = st.objects.get(&services).is_some_and(|all| {
        all.values().any(|s| {
            strings_of(s.pointer("/spec/clusterIPs"))
                .iter()
                .any(|x| x == ip)
        })
    });
    if taken {
        return Err("provided IP is already allocated");
    }
    Ok(())
}

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

fn allocate_node_ports(st: &mut State, obj: &mut Value) {
    for p in obj
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if p.get("nodePort")
            .is_none_or(|n| n.is_null() || *n == json!(0))
        {
            let n = st.next_node_port;
            st.next_node_port = if n >= 32767 { 30000 } else { n + 1 };
            if let Value::Object(m) = p {
                m.insert("nodePort".into(), json!(n));
            }
        }
    }
}

/// `patchAllocatedValues`: cluster IPs and node ports a client left out are kept.
fn patch_allocated_values(obj: &mut Value, old: &Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(obj) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if str_of(spec.get("clusterIP")).is_empty()
            && let Some(ip) = old.pointer("/spec/clusterIP")
        {
            spec.insert("clusterIP".into(), ip.clone());
        }
        if strings_of(spec.get("clusterIPs")).is_empty()
            && let Some(ips) = old
                .pointer("/spec/clusterIPs")
                .filter(|v| !strings_of(Some(v)).is_empty())
        {
            spec.insert("clusterIPs".into(), ips.clone());
        }
    }
    if needs_node_port(old) && needs_node_port(obj) {
        let port_of = |p: &Value| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        let old_ports: Vec<(String, i64)> = old
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| (str_of(p.get("name")), port_of(p)))
            .collect();
        let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else {
            return;
        };
        let used: Vec<i64> = ports
            .iter()
            .map(port_of)
            .filter(|n| *n != 0 && old_ports.iter().any(|(_, o)| o == n))
            .collect();
        for p in ports.iter_mut() {
            if port_of(p) != 0 {
                continue;
            }
            let name = str_of(p.get("name"));
            if let Some((_, n)) = old_ports.iter().find(|(o, _)| *o == name)
                && *n != 0
                && !used.contains(n)
                && let Value::Object(m) = p
            {
                m.insert("nodePort".into(), json!(n));
            }
        }
    }
}

/// `normalizeClusterIPs`: on create a lone `clusterIP` fills `clusterIPs`; on update a changed
/// `clusterIP` with unchanged `clusterIPs` replaces them (validation then refuses the change),
/// a cleared one clears them.
fn normalize_cluster_ips(obj: &mut Value, old: Option<&Value>) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let ip = str_of(spec.get("clusterIP"));
    let ips = strings_of(spec.get("clusterIPs"));
    let Some(old) = old else {
        if !ip.is_empty() && ips.is_empty() {
            spec.insert("clusterIPs".into(), json!([ip]));
        }
        return;
    };
    let old_ip = str_of(old.pointer("/spec/clusterIP"));
    let old_ips = strings_of(old.pointer("/spec/clusterIPs"));
    let mut ips = ips;
    if !old_ips.is_empty() && ips.is_empty() && old_ip == ip {
        ips.clone_from(&old_ips);
        spec.insert("clusterIPs".into(), json!(ips));
    }
    if old_ip != ip && ips == old_ips {
        if !old_ip.is_empty() && ip.is_empty() {
            spec.remove("clusterIPs");
        } else {
            spec.insert("clusterIPs".into(), json!([ip]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_classes() {
        let pod = |res: Value| json!({"containers": [{"name": "a", "resources": res}]});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        let guaranteed = json!({"requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&pod(guaranteed)), "Guaranteed");
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
    }

    #[test]
    fn default_tolerations_are_added_once() {
        let mut spec = json!({"tolerations": [{"key": "node.kubernetes.io/unreachable",
            "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]});
        add_default_tolerations(&mut spec);
        add_default_tolerations(&mut spec);
        let keys: Vec<&str> = spec["tolerations"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t["key"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/unreachable",
                "node.kubernetes.io/not-ready"
            ]
        );
    }
}
