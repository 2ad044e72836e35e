//! Field errors rendered exactly like apimachinery's `field.Error`, and the 422 `Invalid` Status
//! built from them (`errors.NewInvalid`).

use serde_json::{Value, json};
use std::fmt;

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

    /// The error types that stop CEL evaluation upstream (`hasBlockingErr` in the CR strategy).
    pub fn blocks_cel(self) -> bool {
        matches!(
            self,
            Self::NotSupported | Self::Required | Self::TooLong | Self::TooMany | Self::TypeInvalid
        )
    }
}

/// The offending value, kept in the shape Go prints it (`ErrorBody`).
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// Not printed at all (Go's `omitValue`).
    Omit,
    /// A JSON value: strings print Go-quoted, numbers/bools bare, `null` as `"null"`, objects and
    /// arrays the way Go's `%#v` prints `map[string]interface {}` / `[]interface {}`.
    Json(Value),
}

impl BadValue {
    fn render(&self) -> Option<String> {
        match self {
            Self::Omit => None,
            Self::Json(v) => Some(match v {
                Value::Null => go_quote("null"),
                Value::String(s) => go_quote(s),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => go_sharp_v(other),
            }),
        }
    }
}

impl From<Value> for BadValue {
    fn from(v: Value) -> Self {
        Self::Json(v)
    }
}
impl From<&Value> for BadValue {
    fn from(v: &Value) -> Self {
        Self::Json(v.clone())
    }
}
impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        Self::Json(Value::String(s.to_owned()))
    }
}
impl From<String> for BadValue {
    fn from(s: String) -> Self {
        Self::Json(Value::String(s))
    }
}
impl From<i64> for BadValue {
    fn from(v: i64) -> Self {
        Self::Json(Value::from(v))
    }
}
impl From<usize> for BadValue {
    fn from(v: usize) -> Self {
        Self::Json(Value::from(v))
    }
}

/// Go's `%q` for the strings we meet (ASCII escapes, UTF-8 kept as is).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{"k":"v"}`), which is what
/// upstream prints for composite bad values (e.g. duplicate list-map keys).
pub fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        // Decoded JSON numbers are int64 (CR decoding keeps integers) or float64.
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                n.to_string()
            } else {
                n.as_f64().map(|f| f.to_string()).unwrap_or_default()
            }
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_sharp_v_elem).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_quote(k), go_sharp_v_elem(&map[k.as_str()])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// Inside a composite, `%#v` prints interface elements with their dynamic type for numbers.
fn go_sharp_v_elem(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("{n}"),
        Value::Number(n) => format!("{}", n.as_f64().unwrap_or_default()),
        other => go_sharp_v(other),
    }
}

/// One validation failure of one field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What kind of failure.
    pub kind: ErrorType,
    /// The field path, rendered (`spec.ports[0].name`, `metadata.labels[app]`; `<nil>` for none).
    pub field: String,
    /// The offending value.
    pub value: BadValue,
    /// Extra explanation.
    pub detail: String,
}

impl FieldError {
    fn new(kind: ErrorType, field: &str, value: BadValue, detail: impl Into<String>) -> Self {
        Self {
            kind,
            field: field.to_owned(),
            value,
            detail: detail.into(),
        }
    }

    /// `field.Required`.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, BadValue::Omit, detail)
    }

    /// `field.Invalid`.
    pub fn invalid(field: &str, value: impl Into<BadValue>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, value.into(), detail)
    }

    /// `field.TypeInvalid`.
    pub fn type_invalid(
        field: &str,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::TypeInvalid, field, value.into(), detail)
    }

    /// `field.Duplicate`.
    pub fn duplicate(field: &str, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::Duplicate, field, value.into(), "")
    }

    /// `field.Forbidden`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, BadValue::Omit, detail)
    }

    /// `field.NotSupported`: `supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: impl Into<BadValue>, supported: &[String]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, value.into(), detail)
    }

    /// `field.TooLong` (value omitted by `ErrorBody`).
    pub fn too_long(field: &str, max_bytes: Option<u64>) -> Self {
        let detail = match max_bytes {
            Some(1) => "may not be more than 1 byte".to_owned(),
            Some(n) => format!("may not be more than {n} bytes"),
            None => "value is too long".to_owned(),
        };
        Self::new(ErrorType::TooLong, field, BadValue::Omit, detail)
    }

    /// `field.TooMany`.
    pub fn too_many(field: &str, actual: Option<u64>, max: Option<u64>) -> Self {
        let detail = match max {
            Some(1) => "must have at most 1 item".to_owned(),
            Some(n) => format!("must have at most {n} items"),
            None => "has too many items".to_owned(),
        };
        let value = actual.map_or(BadValue::Omit, |a| BadValue::Json(Value::from(a)));
        Self::new(ErrorType::TooMany, field, value, detail)
    }

    /// `field.InternalError`.
    pub fn internal(field: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, field, BadValue::Omit, detail)
    }

    /// Go's `ErrorBody()`: the message without the field path.
    pub fn body(&self) -> String {
        let mut s = match self.kind {
            ErrorType::Required
            | ErrorType::Forbidden
            | ErrorType::TooLong
            | ErrorType::Internal => self.kind.text().to_owned(),
            _ => match self.value.render() {
                None => self.kind.text().to_owned(),
                Some(v) => format!("{}: {v}", self.kind.text()),
            },
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The `StatusCause` JSON of this error.
    pub fn cause(&self) -> Value {
        json!({"reason": self.kind.reason(), "message": self.body(), "field": self.field})
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The aggregate text upstream prints: one error bare, several as `[a, b]`; duplicates dropped.
pub fn aggregate_message(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let s = e.to_string();
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    match seen.len() {
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// The 422 `Invalid` Status (`errors.NewInvalid`): message
/// `<Kind>.<group> "<name>" is invalid: <errors>`, `details.kind` is the Kind (not the resource).
pub fn invalid_status(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Value {
    let qualified = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let message = if errors.is_empty() {
        format!("{qualified} {} is invalid", go_quote(name))
    } else {
        format!(
            "{qualified} {} is invalid: {}",
            go_quote(name),
            aggregate_message(errors)
        )
    };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(kind));
    details.insert(
        "causes".into(),
        Value::Array(errors.iter().map(FieldError::cause).collect()),
    );
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Invalid", "details": details, "code": 422
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_upstream_shapes() {
        assert_eq!(
            FieldError::invalid(
                "spec.name",
                "ab",
                "spec.name in body should be at least 3 chars long"
            )
            .to_string(),
            r#"spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long"#
        );
        assert_eq!(
            FieldError::required("spec.size", "").to_string(),
            "spec.size: Required value"
        );
        assert_eq!(
            FieldError::not_supported("spec.mode", "x", &["a".into(), "b".into()]).to_string(),
            r#"spec.mode: Unsupported value: "x": supported values: "a", "b""#
        );
        assert_eq!(
            FieldError::too_many("endpoints", Some(1001), Some(1000)).to_string(),
            "endpoints: Too many: 1001: must have at most 1000 items"
        );
        assert_eq!(
            FieldError::too_many("spec.c", Some(2), Some(1)).to_string(),
            "spec.c: Too many: 2: must have at most 1 item"
        );
        assert_eq!(
            FieldError::too_long("spec.n", Some(63)).to_string(),
            "spec.n: Too long: may not be more than 63 bytes"
        );
        assert_eq!(
            FieldError::duplicate("spec.ports[1]", json!({"name": "http"})).to_string(),
            r#"spec.ports[1]: Duplicate value: map[string]interface {}{"name":"http"}"#
        );
        assert_eq!(
            FieldError::invalid("<nil>", Value::Null, "x").to_string(),
            r#"<nil>: Invalid value: "null": x"#
        );
    }

    #[test]
    fn invalid_status_single_and_multiple() {
        let one = invalid_status(
            "discovery.k8s.io",
            "EndpointSlice",
            "web-x",
            &[FieldError::too_many("endpoints", Some(1001), Some(1000))],
        );
        assert_eq!(
            one["message"],
            r#"EndpointSlice.discovery.k8s.io "web-x" is invalid: endpoints: Too many: 1001: must have at most 1000 items"#
        );
        assert_eq!(one["details"]["causes"][0]["reason"], "FieldValueTooMany");
        assert_eq!(one["details"]["causes"][0]["field"], "endpoints");
        assert_eq!(one["details"]["kind"], "EndpointSlice");
        assert_eq!(one["code"], 422);
        let two = invalid_status(
            "",
            "Service",
            "s",
            &[
                FieldError::required("spec.ports", ""),
                FieldError::required("spec.ports", ""),
                FieldError::forbidden("spec.x", "no"),
            ],
        );
        assert_eq!(
            two["message"],
            r#"Service "s" is invalid: [spec.ports: Required value, spec.x: Forbidden: no]"#
        );
        assert!(two["details"].get("group").is_none());
    }
}
