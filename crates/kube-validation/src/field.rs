//! Field paths and field errors, rendered exactly like apimachinery's `field.Error`: the one
//! implementation behind the typed validation here and the JSON (CRD schema) validation of
//! `apiserver-semantics`.

use std::fmt;

use serde_json::Value;

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

impl AsRef<str> for FieldPath {
    fn as_ref(&self) -> &str {
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

    /// The error types that stop CEL evaluation upstream (`hasBlockingErr` in the CR strategy).
    pub fn blocks_cel(self) -> bool {
        matches!(
            self,
            Self::NotSupported | Self::Required | Self::TooLong | Self::TooMany | Self::TypeInvalid
        )
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
    /// `nil` (a nil pointer or interface): printed `null`.
    Null,
    /// A value printed as given: composites (JSON, see [`go_json`] for decoded JSON)
    /// and non-integer numbers.
    Raw(String),
}

/// A decoded JSON value as Go holds it (`interface{}`): strings, integers and booleans print as
/// such, other numbers bare, arrays and objects with `%#v`.
impl From<&Value> for BadValue {
    fn from(v: &Value) -> Self {
        match v {
            Value::Null => Self::Null,
            Value::String(s) => Self::Str(s.clone()),
            Value::Bool(b) => Self::Bool(*b),
            Value::Number(n) => n
                .as_i64()
                .map_or_else(|| Self::Raw(n.to_string()), Self::Int),
            composite => Self::Raw(go_json(composite)),
        }
    }
}
impl From<Value> for BadValue {
    fn from(v: Value) -> Self {
        Self::from(&v)
    }
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
    fn new<P: AsRef<str> + ?Sized>(
        kind: ErrorType,
        path: &P,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: path.as_ref().to_owned(),
            value,
            detail: detail.into(),
        }
    }

    /// `field.Required`.
    pub fn required<P: AsRef<str> + ?Sized>(path: &P, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, path, BadValue::Omit, detail)
    }

    /// `field.Invalid`.
    pub fn invalid<P: AsRef<str> + ?Sized>(
        path: &P,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::Invalid, path, value.into(), detail)
    }

    /// `field.TypeInvalid` (printed like `Invalid`, reason `FieldValueTypeInvalid`).
    pub fn type_invalid<P: AsRef<str> + ?Sized>(
        path: &P,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::TypeInvalid, path, value.into(), detail)
    }

    /// `field.Duplicate`.
    pub fn duplicate<P: AsRef<str> + ?Sized>(path: &P, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::Duplicate, path, value.into(), "")
    }

    /// `field.Forbidden`.
    pub fn forbidden<P: AsRef<str> + ?Sized>(path: &P, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, path, BadValue::Omit, detail)
    }

    /// `field.NotSupported`: the detail lists the quoted supported values in the order given.
    pub fn not_supported<P: AsRef<str> + ?Sized, S: AsRef<str>>(
        path: &P,
        value: impl Into<BadValue>,
        supported: &[S],
    ) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s.as_ref())).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, path, value.into(), detail)
    }

    /// `field.TooLong` (the value is never printed).
    pub fn too_long<P: AsRef<str> + ?Sized>(path: &P, max_length: usize) -> Self {
        let unit = if max_length == 1 { "byte" } else { "bytes" };
        Self::new(
            ErrorType::TooLong,
            path,
            BadValue::Omit,
            format!("may not be more than {max_length} {unit}"),
        )
    }

    /// `field.TooMany`.
    pub fn too_many<P: AsRef<str> + ?Sized>(path: &P, actual: usize, max: usize) -> Self {
        let unit = if max == 1 { "item" } else { "items" };
        Self::new(
            ErrorType::TooMany,
            path,
            BadValue::from(actual),
            format!("must have at most {max} {unit}"),
        )
    }

    /// `field.InternalError`.
    pub fn internal<P: AsRef<str> + ?Sized>(path: &P, detail: impl Into<String>) -> Self {
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

/// A decoded JSON number as Go prints it: apimachinery's JSON decoding (and CR decoding) keeps
/// integral numbers as int64, others become float64.
fn go_number(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None if n.is_u64() => n.to_string(),
        None => n.as_f64().map(|f| f.to_string()).unwrap_or_default(),
    }
}

/// `encoding/json` of a decoded JSON value (keys sorted, no spaces, `<`, `>` and `&` escaped):
/// how field errors print composite bad values since Kubernetes 1.34 (`ErrorBody`), e.g. a
/// duplicate list-map key or a Service's `clusterIPs`.
pub fn go_json(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::String(s) => go_json_string(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_json).collect();
            format!("[{}]", inner.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_json_string(k), go_json(&map[k.as_str()])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
    }
}

/// A JSON string as `encoding/json` writes it (HTML-safe).
fn go_json_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// A list of strings as a composite bad value (`["a","b"]`).
pub fn go_json_strings(values: &[String]) -> BadValue {
    BadValue::Raw(go_json(&Value::Array(
        values.iter().map(|v| Value::String(v.clone())).collect(),
    )))
}

/// Go's `%+v` (= `%v`) of a decoded JSON value (`map[k:v k2:[a b]]`, keys sorted as `fmt`
/// sorts map keys, strings bare, null as `<nil>`): what upstream prints for a strategic merge
/// patch in its strict-decoding 422.
pub fn go_plus_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_owned(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_plus_v).collect();
            format!("[{}]", inner.join(" "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_plus_v(&map[k.as_str()])))
                .collect();
            format!("map[{}]", inner.join(" "))
        }
    }
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
    fn json_bad_values_print_like_go_error_bodies() {
        use serde_json::json;
        let e = |v: Value| FieldError::invalid("f", v, "d").to_string();
        assert_eq!(e(json!("ab")), r#"f: Invalid value: "ab": d"#);
        assert_eq!(e(json!(11)), "f: Invalid value: 11: d");
        assert_eq!(e(json!(1.5)), "f: Invalid value: 1.5: d");
        assert_eq!(e(json!(true)), "f: Invalid value: true: d");
        assert_eq!(e(Value::Null), "f: Invalid value: null: d");
        assert_eq!(
            FieldError::duplicate("spec.ports[1]", json!({"name": "<http>", "n": [1, null]}))
                .to_string(),
            r#"spec.ports[1]: Duplicate value: {"n":[1,null],"name":"\u003chttp\u003e"}"#
        );
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }

    #[test]
    fn go_plus_v_prints_maps_sorted_with_bare_strings() {
        let v: Value = serde_json::from_str(
            r#"{"spec":{"ports":[{"targetport":8080,"port":80}],"x":null,"f":1.5,"b":true},"a":"s t"}"#,
        )
        .unwrap();
        assert_eq!(
            go_plus_v(&v),
            "map[a:s t spec:map[b:true f:1.5 ports:[map[port:80 targetport:8080]] x:<nil>]]"
        );
    }
}
