//! Object metadata helpers: server-populated fields, normalisation (docs/emulator-spec.md
//! §2.1–2.2), conversions.

use rand::Rng;
use serde_json::{Map, Value, json};

/// A new lowercase hyphenated UUIDv4.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` (truncated to 58 chars) + 5 random chars from the upstream alphabet.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let p: String = prefix.chars().take(58).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{p}{suffix}")
}

/// Read a string at a JSON pointer.
pub fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// `metadata` as a mutable map (created if missing or not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Value::Object(root) = obj else {
        unreachable!("just made an object")
    };
    let m = root.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    match m {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// Drop empty/null metadata collections (rule 7) and other null metadata members.
pub fn normalise(obj: &mut Value) {
    let m = meta_mut(obj);
    for k in [
        "finalizers",
        "labels",
        "annotations",
        "ownerReferences",
        "managedFields",
    ] {
        let empty = match m.get(k) {
            None => false,
            Some(Value::Null) => true,
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(_) => false,
        };
        if empty {
            m.remove(k);
        }
    }
    m.retain(|_, v| !v.is_null());
    m.remove("selfLink");
}

/// Current finalizers.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Replace finalizers (empty list removes the field).
pub fn set_finalizers(obj: &mut Value, f: &[String]) {
    let m = meta_mut(obj);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

/// Object resourceVersion parsed as a number (0 when absent).
pub fn rv_of(obj: &Value) -> u64 {
    str_at(obj, "/metadata/resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Set `metadata.resourceVersion`.
pub fn set_rv(obj: &mut Value, rv: u64) {
    meta_mut(obj).insert("resourceVersion".into(), json!(rv.to_string()));
}

/// Convert to `PartialObjectMetadata` (rule 9).
pub fn to_partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Whether two objects have the same spec part: everything but metadata, apiVersion, kind
/// (and status when `drop_status`). Compared in place: these run on every update, and a copy of
/// an EndpointSlice of 100 endpoints was a tenth of an apply's time.
pub fn same_spec_part(a: &Value, b: &Value, drop_status: bool) -> bool {
    let skip =
        |k: &str| matches!(k, "metadata" | "apiVersion" | "kind") || (drop_status && k == "status");
    same_except(a, b, skip)
}

/// Whether two objects are equal but for `metadata.managedFields`.
pub fn same_without_managed_fields(a: &Value, b: &Value) -> bool {
    same_except(a, b, |k| k == "metadata")
        && match (a.get("metadata"), b.get("metadata")) {
            (Some(ma), Some(mb)) => same_except(ma, mb, |k| k == "managedFields"),
            (ma, mb) => ma == mb,
        }
}

/// Whether two objects' `managedFields` are equal but for every entry's `time` (ownership
/// without bookkeeping noise).
pub fn same_managed_fields_sans_time(a: &Value, b: &Value) -> bool {
    let (ea, eb) = (
        a.pointer("/metadata/managedFields"),
        b.pointer("/metadata/managedFields"),
    );
    match (ea, eb) {
        (Some(Value::Array(ea)), Some(Value::Array(eb))) => {
            ea.len() == eb.len()
                && ea
                    .iter()
                    .zip(eb)
                    .all(|(x, y)| same_except(x, y, |k| k == "time"))
        }
        (ea, eb) => ea.unwrap_or(&Value::Null) == eb.unwrap_or(&Value::Null),
    }
}

/// Equal as JSON, ignoring the top-level keys `skip` names (non-objects compare whole).
fn same_except(a: &Value, b: &Value, skip: impl Fn(&str) -> bool) -> bool {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            let kept =
                |m: &'_ serde_json::Map<String, Value>| m.iter().filter(|(k, _)| !skip(k)).count();
            kept(ma) == kept(mb)
                && ma
                    .iter()
                    .filter(|(k, _)| !skip(k))
                    .all(|(k, v)| mb.get(k) == Some(v))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value, spec: Value, time: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "K",
               "metadata": {"name": "a", "labels": labels,
                            "managedFields": [{"manager": "m", "time": time}]},
               "spec": spec, "status": {"s": 1}})
    }

    #[test]
    fn in_place_comparisons_ignore_exactly_what_they_name() {
        let a = obj(json!({"x": "1"}), json!({"p": 1}), "t1");
        // Only the managed fields' times differ.
        let b = obj(json!({"x": "1"}), json!({"p": 1}), "t2");
        assert!(same_without_managed_fields(&a, &b));
        assert!(same_managed_fields_sans_time(&a, &b));
        assert!(same_spec_part(&a, &b, true));
        // A label: not the spec, but the object.
        let c = obj(json!({"x": "2"}), json!({"p": 1}), "t1");
        assert!(same_spec_part(&a, &c, true));
        assert!(!same_without_managed_fields(&a, &c));
        // The spec.
        let d = obj(json!({"x": "1"}), json!({"p": 2}), "t1");
        assert!(!same_spec_part(&a, &d, true));
        // The status counts only when asked to.
        let mut e = a.clone();
        e["status"] = json!({"s": 2});
        assert!(same_spec_part(&a, &e, true));
        assert!(!same_spec_part(&a, &e, false));
        // A key present on one side only.
        let mut f = a.clone();
        f["extra"] = json!(null);
        assert!(!same_spec_part(&a, &f, true));
        assert!(!same_without_managed_fields(&a, &f));
        // Another manager is not a time.
        let mut g = a.clone();
        g["metadata"]["managedFields"][0]["manager"] = json!("n");
        assert!(!same_managed_fields_sans_time(&a, &g));
        assert!(same_without_managed_fields(&a, &g));
    }
}
