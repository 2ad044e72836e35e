//! Discovery documents (docs/emulator-spec.md §1.8): legacy `/api`, `/apis`, group and
//! group-version lists, and the aggregated v2 form. Built from the served types, so CRDs appear
//! once Established.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::registry::ResourceType;

fn api_resource(rt: &ResourceType) -> Vec<Value> {
    let mut v = vec![json!({
        "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind,
        "verbs": rt.verbs(), "shortNames": rt.short_names, "categories": rt.categories,
    })];
    if rt.status_subresource {
        v.push(json!({"name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": ["get", "patch", "update"]}));
    }
    v
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

/// `/api/v1` or `/apis/{g}/{v}` (None = unknown group-version).
pub fn resource_list(types: &[Arc<ResourceType>], group: &str, version: &str) -> Option<Value> {
    let rts: Vec<&Arc<ResourceType>> = types
        .iter()
        .filter(|rt| rt.group == group && rt.version == version)
        .collect();
    if rts.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = rts.iter().flat_map(|rt| api_resource(rt)).collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn groups(types: &[Arc<ResourceType>]) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rt in types.iter().filter(|rt| !rt.group.is_empty()) {
        let vs = m.entry(rt.group.clone()).or_default();
        if !vs.contains(&rt.version) {
            vs.push(rt.version.clone());
        }
    }
    m
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn group_list(types: &[Arc<ResourceType>]) -> Value {
    let gs: Vec<Value> = groups(types)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{g}` (None = unknown).
pub fn group(types: &[Arc<ResourceType>], name: &str) -> Option<Value> {
    let gs = groups(types);
    let vs = gs.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// Aggregated discovery for `/api` (core=true) or `/apis`.
pub fn aggregated(types: &[Arc<ResourceType>], core: bool, version: &str) -> Value {
    let mut by_group: BTreeMap<String, BTreeMap<String, Vec<Value>>> = BTreeMap::new();
    for rt in types.iter().filter(|rt| rt.group.is_empty() == core) {
        let mut subs = Vec::new();
        if rt.status_subresource {
            subs.push(json!({"subresource": "status", "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind}, "verbs": ["get", "patch", "update"]}));
        }
        by_group.entry(rt.group.clone()).or_default().entry(rt.version.clone()).or_default().push(json!({
            "resource": rt.plural, "singularResource": rt.singular,
            "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
            "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "verbs": rt.verbs(), "shortNames": rt.short_names, "categories": rt.categories, "subresources": subs,
        }));
    }
    let items: Vec<Value> = by_group
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .into_iter()
                .map(|(v, rs)| json!({"version": v, "freshness": "Current", "resources": rs}))
                .collect();
            let md = if g.is_empty() {
                json!({})
            } else {
                json!({"name": g})
            };
            json!({"metadata": md, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items})
}
