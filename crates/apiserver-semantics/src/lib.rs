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
//! ssa::revert_timestamp_only_changes(new: &mut Value, old: &Value) -> bool
//! Conflicts::to_status() -> Value   // the 409 Status of docs/emulator-spec.md §4.6
//! ```
//! `schema` is a [`semantics::BuiltinSchema::for_kind(group, kind)`](semantics::BuiltinSchema) or a
//! [`semantics::CrdSchema::new(open_api_v3_schema, has_status_subresource)`](semantics::CrdSchema).
//! Order in the server, as upstream:
//! - apply: `ssa::apply` → type defaults → validation → status/generation rules → normalisation
//!   → `revert_timestamp_only_changes(&mut obj, &stored)` → no-op check against the stored object.
//! - create/update/patch: build the new object → type defaults → `ssa::record_update(old, new,
//!   manager, ...)` (defaulted fields become the writer's, as upstream) → validation → ... →
//!   `revert_timestamp_only_changes` → no-op check.
//!
//! `ApplyError::Conflict(c)` → 409 with `c.to_status()`; `ApplyError::BadRequest(m)` → 400.
//!
//! # Patches ([`patch`])
//! `merge_patch(target, patch) -> Value`, `json_patch(target, patch) -> Result<Value, PatchError>`,
//! `strategic_merge_patch(target, patch, group, kind) -> Result<Value, PatchError>`.
//!
//! # CRD schemas ([`schema`])
//! `CrdValidator::from_crd(crd, version)` or `CrdValidator::new(open_api_v3_schema, field_prefix)`
//! checks the schema is structural and compiles patterns and CEL rules (milliseconds: build it
//! once per CRD version and keep it, e.g. in an `Arc`, until the CRD changes; it is
//! `Send + Sync`). Per request: `prune(&mut obj) -> Pruned` (warnings / strict error),
//! `apply_defaults(&mut obj)`, `validate(&obj, old) -> Vec<FieldError>`; render with
//! [`field_error::invalid_status`]`(group, kind, name, &errors)`.
//!
//! Costs are measured by `cargo bench -p apiserver-semantics` (benches/semantics.rs).
//!
//! # Unknown fields of built-ins ([`typed`])
//! `typed::prune_unknown(group, version, kind, &mut obj) -> Option<Pruned>` (decoding into the Go
//! type: warnings / strict error as for CRs, `typed::strict_decode_message` wraps the latter for
//! creates and PUTs); `typed::apply_undeclared_fields(group, version, kind, &config)` (the 500
//! message of server-side apply's typed conversion).
//!
//! # Tables and OpenAPI ([`table`], [`openapi`])
//! `table::render(&TableSource, objects, IncludeObject, resource_version, continue, now) -> Value`;
//! `openapi::v2(crds)`, `openapi::v3_index(crds)`, `openapi::v3_group_version(crds, group, version)`.
//!
//! # Where this differs from a real apiserver (for `docs/emulator.md`)
//! - SSA: one served version per resource (no per-version field-set conversion); only the
//!   list/map markers in [`semantics`] are known for built-ins (other built-in lists are atomic,
//!   objects structs); `null` in an apply configuration means "not set, not owned"; unions,
//!   managed-field count caps and the client-side-apply → server-side-apply migration
//!   (`lastAppliedManager`) are not modelled; equality is JSON equality.
//! - CRD validation: sibling errors come in schema order (upstream: Go map order); CEL
//!   failures print as 1.37's (no value on objects and lists, the value on scalars); CEL cost
//!   limits are not enforced; `kube-cel` gaps (`sortBy`, `cel.bind`, two-variable
//!   comprehensions) fail closed.
//! - Strategic merge patch: patch strategies of the served built-ins only; other lists replace.
//! - Tables: printers for EndpointSlice, Service, Pod, Lease, Endpoints, Namespace, Event,
//!   ConfigMap, Secret; others get the default Name/Created At table.
//! - OpenAPI: CRD schemas in full; the served built-ins from k8s-openapi's schemas, with the
//!   strategic-merge patch metadata of [`patch`] added (no `x-kubernetes-list-type` markers);
//!   `/openapi/v2` only as JSON (kubectl reads v2 as protobuf).
//!
//! # Go's encoding of built-ins ([`goshape`])
//! `goshape::fill(group, kind, &mut obj)` gives an object the shape of a stored built-in (empty
//! lists nil, fields without `omitempty` and value structs written); `goshape::empty` is the empty
//! object server-side apply compares a create against.

pub mod field_error;
pub mod fieldpath;
pub mod goshape;
pub mod jsonpath;
pub mod managed;
pub mod openapi;
pub mod patch;
pub mod schema;
pub mod semantics;
pub mod ssa;
pub mod table;
pub mod typed;

pub use field_error::{FieldError, invalid_status};
pub use semantics::{BuiltinSchema, CrdSchema, ListType, MapType, ObjectSchema};
