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

/// Object without `metadata` and (optionally) `status`: what generation compares.
pub fn spec_part(obj: &Value, drop_status: bool) -> Value {
    let mut o = obj.clone();
    if let Value::Object(m) = &mut o {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if drop_status {
            m.remove("status");
        }
    }
    o
}

/// Strip `managedFields` for comparisons that must ignore bookkeeping.
pub fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    o
}

/// `managedFields` with every entry's `time` removed (ownership without bookkeeping noise).
pub fn managed_fields_sans_time(obj: &Value) -> Value {
    let mut mf = obj
        .pointer("/metadata/managedFields")
        .cloned()
        .unwrap_or(Value::Null);
    if let Value::Array(entries) = &mut mf {
        for e in entries {
            if let Value::Object(m) = e {
                m.remove("time");
            }
        }
    }
    mf
}
