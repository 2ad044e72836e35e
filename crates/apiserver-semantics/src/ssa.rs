//! Server-side apply (spec §4) and the managedFields bookkeeping of non-apply writes.

use crate::managed::Operation;
use crate::semantics::ObjectSchema;
use serde_json::Value;

/// The result of a successful apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The merged object with its new `metadata.managedFields`; the server still runs defaulting,
    /// validation and normalisation, then compares with the stored object for no-op detection.
    pub object: Value,
}

/// One field another manager owns that this apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Its entry's operation (Update managers print `using <apiVersion>`).
    pub operation: Operation,
    /// Its entry's apiVersion.
    pub api_version: String,
    /// Its entry's subresource.
    pub subresource: Option<String>,
    /// The conflicting path, rendered (`.metadata.labels.tier`).
    pub field: String,
}

/// All conflicts of a rejected apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

/// Why an apply was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ApplyError {
    /// 409: fields owned by other managers would change and `force` was not set.
    #[error("{}", .0.message())]
    Conflict(Conflicts),
    /// 400: the apply configuration itself is malformed.
    #[error("{0}")]
    BadRequest(String),
}

impl Conflicts {
    /// The Status message (`Apply failed with N conflict(s): ...`).
    pub fn message(&self) -> String {
        todo!("conflict message")
    }

    /// The 409 Status object of §4.6.
    pub fn to_status(&self) -> Value {
        todo!("conflict status")
    }
}

/// Server-side apply of `applied` (the request body, a complete apply configuration) by
/// `manager` onto `live` (the stored object with its managedFields, or `None` when it does not
/// exist yet). `subresource` is `Some("status")` for `/status`. `now` is the RFC 3339 time for
/// changed entries.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    schema: &dyn ObjectSchema,
    now: &str,
) -> Result<Applied, ApplyError> {
    let _ = (live, applied, manager, force, subresource, schema, now);
    todo!("apply")
}

/// managedFields bookkeeping of a non-apply write (create, update, any non-apply patch) by
/// `manager`: returns `new` with `metadata.managedFields` recomputed from `old` (None on create).
pub fn record_update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    schema: &dyn ObjectSchema,
    now: &str,
) -> Value {
    let _ = (old, new, manager, subresource, schema, now);
    todo!("record_update")
}

/// The manager name of a non-apply write: the `fieldManager` parameter, else the User-Agent up
/// to the first `/`, else `unknown`.
pub fn update_manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    match user_agent
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
    {
        Some(prefix) => prefix.to_owned(),
        None => "unknown".to_owned(),
    }
}
