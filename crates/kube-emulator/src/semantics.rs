//! Call sites for the pure algorithms owned by the `apiserver-semantics` crate: server-side apply /
//! managedFields, CRD structural schema (prune, default, validate incl. CEL), Table rendering and
//! OpenAPI documents. The server only calls the functions of this module, so wiring the crate in is
//! a change here and nowhere else. Until it is wired, minimal stand-ins keep requests working and
//! say so in `docs/emulator.md`.

use apiserver_semantics::{BuiltinSchema, CrdSchema, ObjectSchema, ssa};
use serde_json::Value;

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

/// How unknown fields are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop silently.
    Ignore,
    /// Drop with a `Warning` header (default).
    #[default]
    Warn,
    /// 400 BadRequest.
    Strict,
}

impl FieldValidation {
    /// From the query parameter.
    pub fn parse(p: Option<&str>) -> Result<Self, ApiError> {
        match p {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// Where an object with unknown fields came from: the handlers word a Strict failure
/// differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A create or update (PUT) body: the decode error is wrapped (`transformDecodeError`).
    Body,
    /// The result of a merge or JSON patch: the bare strict error (400).
    Patch,
    /// The result of this strategic merge patch: a 422 on the field `patch` whose value is the
    /// patch as Go prints it (`applyPatchToObject`).
    StrategicPatch(&'a Value),
}

/// The Strict-mode error of an object with unknown fields, as the request's handler words it.
fn strict_error(rt: &ResourceType, msg: String, from: Decoded<'_>) -> ApiError {
    match from {
        Decoded::Patch => ApiError::bad_request(msg),
        Decoded::Body => ApiError::bad_request(apiserver_semantics::typed::strict_decode_message(
            &rt.version,
            &rt.kind,
            &msg,
        )),
        Decoded::StrategicPatch(patch) => ApiError::invalid(
            "",
            "",
            "",
            vec![Cause::new(
                "FieldValueInvalid",
                format!(
                    "Invalid value: {}: {msg}",
                    kube_validation::field::go_quote(&kube_validation::field::go_plus_v(
                        &consumed(patch)
                    ))
                ),
                "patch",
            )],
        ),
    }
}

/// A strategic merge patch as upstream holds it after applying it (the map its 422 prints):
/// `mergePatchIntoOriginal` deletes each `$setElementOrder/<f>` directive and the list `<f>` it
/// merged.
fn consumed(patch: &Value) -> Value {
    let Value::Object(m) = patch else {
        return patch.clone();
    };
    let ordered: Vec<&str> = m
        .keys()
        .filter_map(|k| k.strip_prefix("$setElementOrder/"))
        .collect();
    Value::Object(
        m.iter()
            .filter(|(k, _)| !k.starts_with("$setElementOrder/") && !ordered.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), consumed(v)))
            .collect(),
    )
}

/// Unknown fields of a decoded object. Built-ins: dropped, as decoding into the Go type drops
/// them, with one `Warning` each (`Warn`), silently (`Ignore`), or an error (`Strict`). Custom
/// resources: only the `Strict` error is decided here, worded for the handler; their pruning
/// and warnings are [`crd_admit`]'s.
pub fn unknown_fields(
    rt: &ResourceType,
    obj: &mut Value,
    fv: FieldValidation,
    from: Decoded<'_>,
) -> Result<Vec<String>, ApiError> {
    if let Some(crd) = &rt.crd {
        if fv != FieldValidation::Strict {
            return Ok(Vec::new());
        }
        let Some(v) = crd.validator.as_ref() else {
            return Ok(Vec::new());
        };
        return match v.prune(&mut obj.clone()).strict_error() {
            Some(msg) => Err(strict_error(rt, msg, from)),
            None => Ok(Vec::new()),
        };
    }
    let pruned = apiserver_semantics::typed::prune_unknown(&rt.group, &rt.version, &rt.kind, obj);
    if let Some(msg) = crate::times::decode_error(rt, obj) {
        return Err(decode_error(rt, msg, obj, from));
    }
    let Some(pruned) = pruned else {
        return Ok(Vec::new());
    };
    match fv {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(pruned.warnings()),
        FieldValidation::Strict => match pruned.strict_error() {
            None => Ok(Vec::new()),
            Some(msg) => Err(strict_error(rt, msg, from)),
        },
    }
}

/// A body the Go type cannot hold (a time that does not parse), as each handler words it: a
/// create or PUT body fails to decode (400); a patch result fails to apply, a 422 on the field
/// `patch` whose value is the patched object (`applyPatchToObject`).
fn decode_error(rt: &ResourceType, msg: String, obj: &Value, from: Decoded<'_>) -> ApiError {
    match from {
        Decoded::Body => ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {msg}",
            kind = rt.kind,
            version = rt.version
        )),
        Decoded::Patch | Decoded::StrategicPatch(_) => ApiError::invalid(
            "",
            "",
            "",
            vec![Cause::new(
                "FieldValueInvalid",
                format!(
                    "Invalid value: {}: {msg}",
                    kube_validation::field::go_quote(&kube_validation::field::go_json(obj))
                ),
                "patch",
            )],
        ),
    }
}

/// Server-side apply of a built-in converts the configuration into the typed object first: an
/// undeclared field fails the request whatever `fieldValidation` says, with upstream's 500 and
/// empty reason (the error is not an API status upstream).
pub fn builtin_apply_fields(rt: &ResourceType, config: &Value) -> Result<(), ApiError> {
    if rt.crd.is_some() {
        return Ok(());
    }
    match apiserver_semantics::typed::apply_undeclared_fields(
        &rt.group,
        &rt.version,
        &rt.kind,
        config,
    ) {
        Some(msg) => Err(ApiError::new(500, "", msg)),
        None => Ok(()),
    }
}

/// Server-side apply of a built-in whose configuration holds a time its Go type does not parse:
/// upstream's 500 from converting the merged object.
pub fn builtin_apply_times(rt: &ResourceType, config: &Value) -> Result<(), ApiError> {
    if let Some(msg) = crate::times::decode_error(rt, config) {
        let gvk = format!("{}, Kind={}", rt.api_version(), rt.kind);
        let gvk = if rt.group.is_empty() {
            format!("/{gvk}")
        } else {
            gvk
        };
        let ns = crate::meta::str_at(config, "/metadata/namespace").unwrap_or_default();
        let name = crate::meta::str_at(config, "/metadata/name").unwrap_or_default();
        return Err(ApiError::new(
            500,
            "",
            format!(
                "failed to convert new object ({ns}/{name}; {gvk}) to proper version: unable to convert unstructured object to {gvk}: {msg}"
            ),
        ));
    }
    Ok(())
}

/// CRD schema handling on write: prune unknown fields, apply defaults, validate (OpenAPI + CEL).
/// Returns the `Warning` texts, or the 400 (Strict) / 422 Status.
pub fn crd_admit(
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    fv: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let Some(v) = rt.crd.as_ref().and_then(|c| c.validator.clone()) else {
        return Ok(Vec::new());
    };
    let pruned = v.prune(obj);
    let warnings = match fv {
        FieldValidation::Ignore => Vec::new(),
        FieldValidation::Warn => pruned.warnings(),
        FieldValidation::Strict => match pruned.strict_error() {
            Some(msg) => return Err(ApiError::bad_request(msg)),
            None => Vec::new(),
        },
    };
    v.apply_defaults(obj);
    let errors = v.validate(obj, old);
    if errors.is_empty() {
        return Ok(warnings);
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(from_status(apiserver_semantics::invalid_status(
        &rt.group, &rt.kind, name, &errors,
    )))
}

/// Structural-schema errors of every version of a CRD object (422 causes on the CRD).
pub fn crd_schema_errors(crd: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    for (i, v) in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let prefix = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v.pointer("/schema/openAPIV3Schema") {
            None => out.push(Cause::new(
                "FieldValueRequired",
                "Required value: schemas are required",
                prefix,
            )),
            Some(schema) => {
                if let Err(errs) = apiserver_semantics::schema::CrdValidator::new(schema, &prefix) {
                    out.extend(
                        errs.iter()
                            .map(|e| Cause::new(e.kind.reason(), e.body(), e.field.clone())),
                    );
                }
            }
        }
    }
    out
}

/// An ApiError from a Status value built by `apiserver-semantics`.
pub fn from_status(status: Value) -> ApiError {
    let code = status.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
    let reason = status
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = status
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut e = ApiError::new(code, reason, message);
    e.details = status.get("details").cloned();
    e
}

/// `/openapi/v2` for the Established CRDs plus built-ins.
pub fn openapi_v2(crds: &[Value]) -> Value {
    apiserver_semantics::openapi::v2(crds)
}

/// `/openapi/v3` index (`sub` empty) or one group-version document (`api/v1`, `apis/g/v`).
pub fn openapi_v3(crds: &[Value], sub: &str) -> Option<Value> {
    if sub.is_empty() {
        return Some(apiserver_semantics::openapi::v3_index(crds));
    }
    let (group, version) = match sub.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), (*v).to_string()),
        ["apis", g, v] => ((*g).to_string(), (*v).to_string()),
        _ => return None,
    };
    apiserver_semantics::openapi::v3_group_version(crds, &group, &version)
}
