//! Call sites for the pure algorithms owned by the `apiserver-semantics` crate: server-side apply /
//! managedFields, CRD structural schema (prune, default, validate incl. CEL), Table rendering and
//! OpenAPI documents. The server only calls the functions of this module, so wiring the crate in is
//! a change here and nowhere else. Until it is wired, minimal stand-ins keep requests working and
//! say so in `docs/emulator.md`.

use serde_json::{Map, Value, json};

use crate::error::Cause;
use crate::registry::ResourceType;

/// One field-manager conflict reported by apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Conflicting manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion of the manager entry.
    pub api_version: String,
    /// Field path, `.metadata.labels.x` style.
    pub path: String,
}

/// Inputs shared by managed-field operations.
#[derive(Debug, Clone)]
pub struct ManagerCtx<'a> {
    /// Field manager.
    pub manager: &'a str,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// `None` = main resource, `Some("status")`.
    pub subresource: Option<&'a str>,
    /// RFC 3339 time for new/changed entries.
    pub now: &'a str,
    /// The resource type (schema for CRs).
    pub rt: &'a ResourceType,
}

/// Record an `Update` operation by `ctx.manager` turning `old` (None = create) into `new`.
pub fn record_update(old: Option<&Value>, new: &mut Value, ctx: &ManagerCtx<'_>) {
    let entries = old
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .cloned()
        .unwrap_or(Value::Array(Vec::new()));
    let mut entries = match entries {
        Value::Array(a) => a,
        _ => Vec::new(),
    };
    if !entries.iter().any(|e| same_entry(e, ctx, "Update")) {
        entries.push(entry(ctx, "Update"));
    }
    set_managed(new, entries);
}

/// Server-side apply: merge `config` into `live` (None = create) for `ctx.manager`.
/// Returns the merged object (with managedFields) or the conflicts when `force` is false.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    force: bool,
    ctx: &ManagerCtx<'_>,
) -> Result<Value, Vec<Conflict>> {
    let _ = force;
    let mut merged = live.cloned().unwrap_or_else(|| json!({}));
    merge_into(&mut merged, config);
    let mut entries = match live.and_then(|o| o.pointer("/metadata/managedFields")) {
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    };
    if !entries.iter().any(|e| same_entry(e, ctx, "Apply")) {
        entries.push(entry(ctx, "Apply"));
    }
    set_managed(&mut merged, entries);
    Ok(merged)
}

/// CRD schema handling on write: prune unknown fields, apply defaults, validate (OpenAPI + CEL).
/// Returns warnings (pruned fields) or the validation causes.
pub fn crd_admit(
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<Vec<String>, Vec<Cause>> {
    let _ = (rt, obj, old);
    Ok(Vec::new())
}

/// Table for `kubectl get` (None = the caller falls back to Name/Age).
pub fn table(rt: &ResourceType, objs: &[&Value], include_object: &str) -> Option<Value> {
    let _ = (rt, objs, include_object);
    None
}

/// `/openapi/v2` document for the served types.
pub fn openapi_v2(types: &[&ResourceType]) -> Value {
    let _ = types;
    json!({"swagger":"2.0","info":{"title":"Kubernetes","version":"v1.34.0"},"paths":{},"definitions":{}})
}

/// OpenAPI v3 schema of one served type (None = permissive stand-in).
pub fn schema_for(rt: &ResourceType) -> Option<Value> {
    rt.crd
        .as_ref()
        .map(|c| c.schema.clone())
        .filter(|s| !s.is_null())
}

fn same_entry(e: &Value, ctx: &ManagerCtx<'_>, op: &str) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(ctx.manager)
        && e.get("operation").and_then(Value::as_str) == Some(op)
        && e.get("subresource").and_then(Value::as_str) == ctx.subresource
}

fn entry(ctx: &ManagerCtx<'_>, op: &str) -> Value {
    let mut m = Map::new();
    m.insert("manager".into(), json!(ctx.manager));
    m.insert("operation".into(), json!(op));
    m.insert("apiVersion".into(), json!(ctx.api_version));
    m.insert("time".into(), json!(ctx.now));
    m.insert("fieldsType".into(), json!("FieldsV1"));
    m.insert("fieldsV1".into(), json!({}));
    if let Some(s) = ctx.subresource {
        m.insert("subresource".into(), json!(s));
    }
    Value::Object(m)
}

fn set_managed(obj: &mut Value, entries: Vec<Value>) {
    crate::meta::meta_mut(obj).insert("managedFields".into(), Value::Array(entries));
}

fn merge_into(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_into(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}
