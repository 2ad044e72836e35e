//! `/openapi/v3` plumbing: the root index and per-group-version documents with the operations
//! kubectl inspects (a PATCH operation carrying `x-kubernetes-group-version-kind` and the
//! `fieldValidation` query parameter makes kubectl validate server-side). Component schemas come
//! from [`crate::semantics`] (the `apiserver-semantics` crate); without them a permissive schema
//! is served so kubectl still works.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::registry::ResourceType;

fn gv_path(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        format!("api/{}", rt.version)
    } else {
        format!("apis/{}/{}", rt.group, rt.version)
    }
}

/// Stable hash for `?hash=` (changes when the served set changes, so kubectl's cache refreshes).
fn hash(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016X}")
}

/// Schema component name of a type (upstream style `io.k8s.api.core.v1.ConfigMap` is not needed).
pub fn schema_name(rt: &ResourceType) -> String {
    let g = if rt.group.is_empty() {
        "core".to_string()
    } else {
        rt.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{g}.{}.{}", rt.version, rt.kind)
}

fn docs(types: &[Arc<ResourceType>]) -> BTreeMap<String, Vec<Arc<ResourceType>>> {
    let mut m: BTreeMap<String, Vec<Arc<ResourceType>>> = BTreeMap::new();
    for rt in types {
        m.entry(gv_path(rt)).or_default().push(rt.clone());
    }
    m
}

fn gv_doc(path: &str, rts: &[Arc<ResourceType>]) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for rt in rts {
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let name = schema_name(rt);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let op = |id: &str| {
            json!({"operationId": format!("{id}{}", rt.kind), "x-kubernetes-group-version-kind": gvk, "parameters": params,
                   "requestBody": {"content": {"application/json": {"schema": reference}}},
                   "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}}})
        };
        let base = if rt.namespaced {
            format!("/{path}/namespaces/{{namespace}}/{}", rt.plural)
        } else {
            format!("/{path}/{}", rt.plural)
        };
        paths.insert(
            base.clone(),
            json!({"post": op("create"), "get": op("list")}),
        );
        paths.insert(format!("{base}/{{name}}"), json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}));
        if rt.status_subresource {
            paths.insert(format!("{base}/{{name}}/status"), json!({"get": op("readStatus"), "put": op("replaceStatus"), "patch": op("patchStatus")}));
        }
        let mut schema = crate::semantics::schema_for(rt).unwrap_or_else(|| {
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                   "description": format!("{} (schema not emulated by kube-emulator)", rt.kind)})
        });
        if let Value::Object(m) = &mut schema {
            m.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
        schemas.insert(name, schema);
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.34.0"}, "paths": paths, "components": {"schemas": schemas}})
}

/// `/openapi/v3` (empty `sub`) or `/openapi/v3/<gv path>`; None = 404.
pub fn v3(types: &[Arc<ResourceType>], sub: &str) -> Option<Value> {
    let d = docs(types);
    if sub.is_empty() {
        let paths: Map<String, Value> = d
            .iter()
            .map(|(p, rts)| (p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash(&gv_doc(p, rts).to_string()))})))
            .collect();
        return Some(json!({"paths": paths}));
    }
    d.get(sub).map(|rts| gv_doc(sub, rts))
}

/// `/openapi/v2` as the gnostic `openapi_v2.Document` protobuf (what kubectl ≤1.27 asks for with
/// `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): swagger, info and empty
/// paths/definitions. kubectl then falls back to its compiled-in patch metadata for built-ins and
/// to merge patches for custom resources, as it does against servers without a schema for a kind.
pub fn v2_protobuf() -> Vec<u8> {
    fn field(out: &mut Vec<u8>, num: u8, bytes: &[u8]) {
        out.push((num << 3) | 2);
        // Lengths here are < 128, a single varint byte.
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
    }
    let mut info = Vec::new();
    field(&mut info, 1, b"Kubernetes");
    field(&mut info, 2, b"v1.34.0");
    let mut doc = Vec::new();
    field(&mut doc, 1, b"2.0");
    field(&mut doc, 2, &info);
    field(&mut doc, 8, &[]);
    field(&mut doc, 9, &[]);
    doc
}
