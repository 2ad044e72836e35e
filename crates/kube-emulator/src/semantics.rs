//! Call sites for the pure algorithms owned by the `apiserver-semantics` crate: server-side apply /
//! managedFields, CRD structural schema (prune, default, validate incl. CEL), Table rendering and
//! OpenAPI documents. The server only calls the functions of this module, so wiring the crate in is
//! a change here and nowhere else. Until it is wired, minimal stand-ins keep requests working and
//! say so in `docs/emulator.md`.

use apiserver_semantics::{BuiltinSchema, CrdSchema, ObjectSchema, ssa};
use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::registry::ResourceType;

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

fn schema(rt: &ResourceType) -> Box<dyn ObjectSchema> {
    match &rt.crd {
        Some(c) => Box::new(CrdSchema::new(&c.schema, rt.status_subresource)),
        None => Box::new(BuiltinSchema::for_kind(&rt.group, &rt.kind)),
    }
}

/// Record an `Update` operation by `ctx.manager` turning `old` (None = create) into `new`.
pub fn record_update(old: Option<&Value>, new: &mut Value, ctx: &ManagerCtx<'_>) {
    *new = ssa::record_update(
        old,
        new,
        ctx.manager,
        ctx.subresource,
        schema(ctx.rt).as_ref(),
        ctx.now,
    );
}

/// Server-side apply of `config` onto `live` (None = create) by `ctx.manager`: the merged object
/// with managedFields, or the 409/400 Status.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    force: bool,
    ctx: &ManagerCtx<'_>,
) -> Result<Value, ApiError> {
    match ssa::apply(
        live,
        config,
        ctx.manager,
        force,
        ctx.subresource,
        schema(ctx.rt).as_ref(),
        ctx.now,
    ) {
        Ok(a) => Ok(a.object),
        Err(ssa::ApplyError::Conflict(c)) => {
            let status = c.to_status();
            let mut e = ApiError::new(409, "Conflict", c.message());
            e.details = status.get("details").cloned();
            Err(e)
        }
        Err(ssa::ApplyError::BadRequest(m)) => Err(ApiError::bad_request(m)),
    }
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
