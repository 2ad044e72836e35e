//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

use serde_json::Value;

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// 400: the patch document cannot be decoded.
    #[error("{0}")]
    BadRequest(String),
    /// 422: an operation failed (missing path, failed `test`, bad directive). Upstream answers
    /// with a generic message; this text says which operation failed, for logs.
    #[error("{0}")]
    Invalid(String),
    /// 415: strategic merge patch on a type that has no patch strategy (custom resources).
    #[error("{0}")]
    UnsupportedMediaType(String),
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let _ = (target, patch);
    todo!("merge_patch")
}

/// RFC 6902 JSON patch with evanphx/json-patch quirks (`test` of a missing path against `null`
/// succeeds).
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let _ = (target, patch);
    todo!("json_patch")
}

/// Strategic merge patch for a built-in kind (`group` `""` for core). Lists with a patch merge
/// key merge by it, `$patch: replace|delete|merge`, `$deleteFromPrimitiveList/<f>`,
/// `$setElementOrder/<f>` and `$retainKeys` directives are honoured; lists of unknown fields
/// are replaced. A kind without a strategy answers [`PatchError::UnsupportedMediaType`].
pub fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    group: &str,
    kind: &str,
) -> Result<Value, PatchError> {
    let _ = (target, patch, group, kind);
    todo!("strategic_merge_patch")
}
