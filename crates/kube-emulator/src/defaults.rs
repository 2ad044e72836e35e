//! Setting a field only when the writer left it out: what every defaulting function does.

use serde_json::Value;

/// Sets `key` of the object `obj` to `v` unless it holds a non-null value.
pub(crate) fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Value::Object(m) = obj
        && m.get(key).is_none_or(Value::is_null)
    {
        m.insert(key.to_string(), v);
    }
}
