//! Pure Kubernetes apiserver semantics over `serde_json::Value`, for the in-memory apiserver
//! emulator (`kube-emulator`). No I/O, no async: every function takes values and returns values.
//!
//! # Server-side apply ([`ssa`])
//! ```text
//! ssa::apply(live: Option<&Value>, applied: &Value, manager: &str, force: bool,
//!            subresource: Option<&str>, schema: &dyn ObjectSchema, now: &str)
//!     -> Result<ssa::Applied { object }, ssa::ApplyError::{Conflict(Conflicts), BadRequest}>
//! ssa::record_update(old: Option<&Value>, new: &Value, manager, subresource, schema, now) -> Value
//! ssa::update_manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String
//! Conflicts::to_status() -> Value   // the 409 Status of spec §4.6
//! ```
//! `schema` is a [`semantics::BuiltinSchema::for_kind(group, kind)`](semantics::BuiltinSchema) or a
//! [`semantics::CrdSchema::new(open_api_v3_schema, has_status_subresource)`](semantics::CrdSchema).
//! The returned object carries `metadata.managedFields`; run defaulting, validation and
//! normalisation on it, then compare with the stored object for no-op detection (§2.4).
//! Call `record_update` for every create/update/non-apply patch (including `/status`).
//!
//! # Patches ([`patch`])
//! `merge_patch(target, patch) -> Value`, `json_patch(target, patch) -> Result<Value, PatchError>`,
//! `strategic_merge_patch(target, patch, group, kind) -> Result<Value, PatchError>`.
//!
//! # CRD schemas ([`schema`])
//! `CrdValidator::new(open_api_v3_schema, "spec.versions[0].schema.openAPIV3Schema")` (structural
//! check), then per request: `prune(&mut obj) -> Pruned`, `apply_defaults(&mut obj)`,
//! `validate(&obj, old) -> Vec<FieldError>`; render with
//! [`field_error::invalid_status`]`(group, kind, name, &errors)`.
//!
//! # Tables and OpenAPI ([`table`], [`openapi`])
//! `table::render(&TableSource, objects, IncludeObject, resource_version, continue, now) -> Value`;
//! `openapi::v2(crds)`, `openapi::v3_index(crds)`, `openapi::v3_group_version(crds, group, version)`.

pub mod field_error;
pub mod fieldpath;
pub mod jsonpath;
pub mod managed;
pub mod openapi;
pub mod patch;
pub mod schema;
pub mod semantics;
pub mod ssa;
pub mod table;

pub use field_error::{FieldError, invalid_status};
pub use semantics::{BuiltinSchema, CrdSchema, ListType, MapType, ObjectSchema};
