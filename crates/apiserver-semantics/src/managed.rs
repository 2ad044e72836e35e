//! `metadata.managedFields` entries: decoding, encoding and identity (manager, operation,
//! subresource, and apiVersion for Update entries — upstream's `BuildManagerIdentifier`).

use crate::fieldpath::FieldSet;

/// `operation` of a managedFields entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (create, update, patch).
    Update,
}

/// One decoded managedFields entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedFieldsEntry {
    /// `manager`.
    pub manager: String,
    /// `operation`.
    pub operation: Operation,
    /// `apiVersion`.
    pub api_version: String,
    /// `time` (RFC 3339, seconds).
    pub time: Option<String>,
    /// `fieldsV1`, decoded.
    pub fields: FieldSet,
    /// `subresource` (`Some("status")` for `/status` writes).
    pub subresource: Option<String>,
}
