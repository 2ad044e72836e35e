//! Schema knowledge that server-side apply needs: list types (`atomic`/`set`/`map` + keys), map
//! types (`granular`/`atomic`), struct-vs-map objects, and whether the type has `/status`.
//!
//! Paths given to [`ObjectSchema`] are field names from the object root, with `[]` standing for
//! "an item of the list here" (e.g. `["spec", "ports", "[]", "name"]`).

use serde_json::Value;

/// `+listType` / `x-kubernetes-list-type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The whole list is one value (the default).
    Atomic,
    /// Items are scalars, each one owned separately (`v:` elements).
    Set,
    /// Items are objects keyed by these fields (`k:` elements).
    Map(Vec<String>),
}

/// `+mapType` / `x-kubernetes-map-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Each key is owned separately (the default).
    Granular,
    /// The whole map is one value.
    Atomic,
}

/// What SSA needs to know about a type's schema.
pub trait ObjectSchema {
    /// Semantics of the list at `path`.
    fn list_type(&self, path: &[&str]) -> ListType;
    /// Semantics of the object at `path`.
    fn map_type(&self, path: &[&str]) -> MapType;
    /// `true` when the object at `path` is a map (its keys are owned members, like labels);
    /// `false` for a struct (only its fields' values are owned).
    fn is_map(&self, path: &[&str]) -> bool;
    /// Whether the type has a `/status` subresource (then `status` is a reset field of the main
    /// endpoint and the only field of `/status`).
    fn has_status_subresource(&self) -> bool;
}

/// Built-in types: the markers of k8s.io/api that matter for the emulated kinds (§4.4); other
/// fields fall back to atomic lists and struct objects.
#[derive(Clone, Debug)]
pub struct BuiltinSchema {
    group: String,
    kind: String,
}

impl BuiltinSchema {
    /// Schema knowledge for a built-in kind (`group` is `""` for core).
    pub fn for_kind(group: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            kind: kind.to_owned(),
        }
    }
}

/// A CRD version's `openAPIV3Schema`, read for `x-kubernetes-list-type`,
/// `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`, `additionalProperties` and
/// `x-kubernetes-preserve-unknown-fields`; `metadata` follows ObjectMeta's markers.
#[derive(Clone, Debug)]
pub struct CrdSchema {
    schema: Value,
    status_subresource: bool,
}

impl CrdSchema {
    /// From a version's `schema.openAPIV3Schema` and whether it declares `subresources.status`.
    pub fn new(open_api_v3_schema: &Value, status_subresource: bool) -> Self {
        Self {
            schema: open_api_v3_schema.clone(),
            status_subresource,
        }
    }
}
