//! Field paths and field errors, rendered exactly like apimachinery's `field.Error`.

use std::fmt;

/// A path to a field, e.g. `endpoints[0].addresses[1]` or `metadata.labels[app]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// A root path such as `metadata` or `spec`.
    pub fn new(root: &str) -> Self {
        Self(root.to_owned())
    }

    /// `self.name`.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_owned())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// `self[index]`.
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// `self[key]` (map keys are not quoted, as in apimachinery).
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The rendered path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// apimachinery's `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// `FieldValueNotFound`.
    NotFound,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueTooLong`.
    TooLong,
    /// `FieldValueTooMany`.
    TooMany,
    /// `InternalError`.
    Internal,
    /// `FieldValueTypeInvalid`.
    TypeInvalid,
}

impl ErrorType {
    /// The human text (`ErrorType.String()` in Go).
    pub fn text(self) -> &'static str {
        match self {
            Self::NotFound => "Not found",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Internal => "Internal error",
        }
    }

    /// The `reason` of a `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotFound => "FieldValueNotFound",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Internal => "InternalError",
            Self::TypeInvalid => "FieldValueTypeInvalid",
        }
    }
}

/// The offending value of a field error, kept in the shape Go prints it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BadValue {
    /// Not printed at all (Go's `omitValue`).
    Omit,
    /// A string, printed Go-quoted (`%q`).
    Str(String),
    /// An integer, printed bare.
    Int(i64),
    /// A boolean, printed bare.
    Bool(bool),
    /// `null`.
    Null,
    /// A composite value, pre-rendered (Go prints these with `%#v`, which has no Rust equivalent;
    /// callers pass a readable rendering).
    Raw(String),
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        Self::Str(s.to_owned())
    }
}
impl From<String> for BadValue {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}
impl From<&String> for BadValue {
    fn from(s: &String) -> Self {
        Self::Str(s.clone())
    }
}
impl From<i64> for BadValue {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}
impl From<i32> for BadValue {
    fn from(v: i32) -> Self {
        Self::Int(i64::from(v))
    }
}
impl From<usize> for BadValue {
    fn from(v: usize) -> Self {
        Self::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<bool> for BadValue {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

/// One validation failure of one field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldError {
    /// What kind of failure.
    pub kind: ErrorType,
    /// The field path, rendered.
    pub field: String,
    /// The offending value.
    pub value: BadValue,
    /// Extra explanation.
    pub detail: String,
}

impl FieldError {
    fn new(kind: ErrorType, path: &FieldPath, value: BadValue, detail: impl Into<String>) -> Self {
        Self {
            kind,
            field: path.as_str().to_owned(),
            value,
            detail: detail.into(),
        }
    }

    /// `field.Required`.
    pub fn required(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, path, BadValue::Omit, detail)
    }

    /// `field.Invalid`.
    pub fn invalid(
        path: &FieldPath,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::Invalid, path, value.into(), detail)
    }

    /// `field.Duplicate`.
    pub fn duplicate(path: &FieldPath, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::Duplicate, path, value.into(), "")
    }

    /// `field.Forbidden`.
    pub fn forbidden(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, path, BadValue::Omit, detail)
    }

    /// `field.NotSupported`: the detail lists the quoted supported values in the order given.
    pub fn not_supported(path: &FieldPath, value: impl Into<BadValue>, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, path, value.into(), detail)
    }

    /// `field.TooLong` (the value is never printed).
    pub fn too_long(path: &FieldPath, max_length: usize) -> Self {
        let unit = if max_length == 1 { "byte" } else { "bytes" };
        Self::new(
            ErrorType::TooLong,
            path,
            BadValue::Omit,
            format!("may not be more than {max_length} {unit}"),
        )
    }

    /// `field.TooMany`.
    pub fn too_many(path: &FieldPath, actual: usize, max: usize) -> Self {
        let unit = if max == 1 { "item" } else { "items" };
        Self::new(
            ErrorType::TooMany,
            path,
            BadValue::from(actual),
            format!("must have at most {max} {unit}"),
        )
    }

    /// `field.InternalError`.
    pub fn internal(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, path, BadValue::Omit, detail)
    }

    /// The message without the field path (`ErrorBody()`; the `message` of a `StatusCause`).
    pub fn body(&self) -> String {
        let mut s = match (self.kind, &self.value) {
            (
                ErrorType::Required
                | ErrorType::Forbidden
                | ErrorType::TooLong
                | ErrorType::Internal,
                _,
            )
            | (_, BadValue::Omit) => self.kind.text().to_owned(),
            (_, value) => format!("{}: {}", self.kind.text(), render_value(value)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl std::error::Error for FieldError {}

fn render_value(value: &BadValue) -> String {
    match value {
        BadValue::Omit => String::new(),
        BadValue::Str(s) => go_quote(s),
        BadValue::Int(i) => i.to_string(),
        BadValue::Bool(b) => b.to_string(),
        BadValue::Null => "null".to_owned(),
        BadValue::Raw(s) => s.clone(),
    }
}

/// Quotes a string the way Go's `%q` does (`strconv.Quote`): printable characters verbatim,
/// `\a\b\f\n\r\t\v\\\"` escaped, other control characters as `\x..`, `\u....` or `\U........`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A list of field errors, in the order the apiserver produces them.
pub type ErrorList = Vec<FieldError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_renders_quoted_value_and_detail() {
        let p = FieldPath::new("endpoints")
            .index(0)
            .child("addresses")
            .index(0);
        let e = FieldError::invalid(
            &p,
            "127.0.0.1",
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        );
        assert_eq!(
            e.to_string(),
            r#"endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#
        );
    }

    #[test]
    fn too_many_renders_count_and_limit() {
        let e = FieldError::too_many(&FieldPath::new("endpoints"), 1001, 1000);
        assert_eq!(
            e.to_string(),
            "endpoints: Too many: 1001: must have at most 1000 items"
        );
        assert_eq!(e.body(), "Too many: 1001: must have at most 1000 items");
    }

    #[test]
    fn required_without_detail_has_no_trailing_colon() {
        let e = FieldError::required(&FieldPath::new("addressType"), "");
        assert_eq!(e.to_string(), "addressType: Required value");
    }

    #[test]
    fn not_supported_lists_quoted_values() {
        let e = FieldError::not_supported(
            &FieldPath::new("ports").index(0).child("protocol"),
            "ICMP",
            &["SCTP", "TCP", "UDP"],
        );
        assert_eq!(
            e.to_string(),
            r#"ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#
        );
    }

    #[test]
    fn too_long_never_prints_the_value() {
        let e = FieldError::too_long(&FieldPath::new("metadata").child("annotations"), 262144);
        assert_eq!(
            e.to_string(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
    }

    #[test]
    fn map_key_paths_use_brackets() {
        let p = FieldPath::new("metadata").child("labels").key("app");
        assert_eq!(p.as_str(), "metadata.labels[app]");
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }
}
