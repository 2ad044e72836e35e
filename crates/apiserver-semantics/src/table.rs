//! Server-side `Table` output (spec §5.7).

use serde_json::Value;

/// A column of a Table.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// `name`.
    pub name: String,
    /// `type`: integer, number, boolean, string, date.
    pub type_: String,
    /// `format` (`name` for the Name column).
    pub format: String,
    /// `description`.
    pub description: String,
    /// `priority` (0 = shown without `-o wide`).
    pub priority: i64,
    /// JSONPath for CRD columns; `None` for built-in computed columns.
    pub json_path: Option<String>,
}

/// `includeObject` of a Table request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No `object` in rows.
    None,
    /// PartialObjectMetadata (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// Where a Table's columns come from.
#[derive(Clone, Debug, PartialEq)]
pub enum TableSource {
    /// A CRD version: Name, then its `additionalPrinterColumns` (or Age when it has none).
    Crd(Vec<Column>),
    /// A built-in kind (`group` `""` for core): kubectl's columns for known kinds, else Name+Age.
    Builtin {
        /// API group.
        group: String,
        /// Kind.
        kind: String,
    },
}

/// Columns of a CRD version (`spec.versions[i]`), from `additionalPrinterColumns`.
pub fn crd_columns(crd_version: &Value) -> Vec<Column> {
    let _ = crd_version;
    todo!("crd_columns")
}

/// Renders a `meta.k8s.io/v1` Table of `objects`. `resource_version` (and `continue_token`) go
/// to the list metadata; `now` (RFC 3339) is the reference for ages.
pub fn render(
    source: &TableSource,
    objects: &[Value],
    include: IncludeObject,
    resource_version: &str,
    continue_token: Option<&str>,
    now: &str,
) -> Value {
    let _ = (
        source,
        objects,
        include,
        resource_version,
        continue_token,
        now,
    );
    todo!("render")
}
