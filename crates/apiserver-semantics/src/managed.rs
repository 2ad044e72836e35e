//! `metadata.managedFields` entries: decoding, encoding and identity (manager, operation,
//! subresource, and apiVersion for Update entries — upstream's `BuildManagerIdentifier`).

use crate::fieldpath::FieldSet;
use serde_json::{Map, Value};

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

impl Operation {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// Errors decoding `metadata.managedFields`.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ManagedFieldsError {
    /// Not a list of objects.
    #[error("metadata.managedFields must be a list of objects")]
    NotAList,
    /// An entry without a usable `operation`.
    #[error("managedFields[{index}]: invalid operation {operation:?}")]
    BadOperation {
        /// Index of the entry.
        index: usize,
        /// The value found.
        operation: String,
    },
    /// An entry whose `fieldsV1` cannot be decoded.
    #[error("managedFields[{index}].fieldsV1: {source}")]
    BadFields {
        /// Index of the entry.
        index: usize,
        /// The decoding error.
        source: crate::fieldpath::FieldsV1Error,
    },
}

impl ManagedFieldsEntry {
    /// Whether `other` is the same manager identity (upstream's `BuildManagerIdentifier`:
    /// manager, operation, subresource, and apiVersion for Update entries only).
    pub fn same_identity(&self, other: &ManagedFieldsEntry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// The wire JSON of this entry.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager.clone()));
        m.insert(
            "operation".into(),
            Value::String(self.operation.as_str().into()),
        );
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), Value::String(s.clone()));
        }
        Value::Object(m)
    }
}

/// Decodes `metadata.managedFields` of `object` (absent → empty).
pub fn decode(object: &Value) -> Result<Vec<ManagedFieldsEntry>, ManagedFieldsError> {
    let Some(list) = object.get("metadata").and_then(|m| m.get("managedFields")) else {
        return Ok(Vec::new());
    };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let items = list.as_array().ok_or(ManagedFieldsError::NotAList)?;
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if !item.is_object() {
            return Err(ManagedFieldsError::NotAList);
        }
        let operation = match item.get("operation").and_then(Value::as_str) {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            other => {
                return Err(ManagedFieldsError::BadOperation {
                    index,
                    operation: other.unwrap_or_default().to_owned(),
                });
            }
        };
        let fields = match item.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(f) => FieldSet::from_fields_v1(f)
                .map_err(|source| ManagedFieldsError::BadFields { index, source })?,
        };
        let text = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
        out.push(ManagedFieldsEntry {
            manager: text("manager").unwrap_or_default(),
            operation,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            fields,
            subresource: text("subresource").filter(|s| !s.is_empty()),
        });
    }
    Ok(out)
}

/// Upstream's order (`sortEncodedManagedFields`): operation (Apply first), time, manager,
/// apiVersion, subresource.
pub fn sort(entries: &mut [ManagedFieldsEntry]) {
    entries.sort_by(|p, q| {
        p.operation
            .cmp(&q.operation)
            .then_with(|| {
                p.time
                    .as_deref()
                    .unwrap_or("")
                    .cmp(q.time.as_deref().unwrap_or(""))
            })
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
}

/// Encodes entries (sorted, empty ones dropped) into `object.metadata.managedFields`, removing
/// the key when nothing is left.
pub fn encode_into(object: &mut Value, mut entries: Vec<ManagedFieldsEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    sort(&mut entries);
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(ManagedFieldsEntry::to_json).collect()),
        );
    }
}
