//! What the two servers' answers are compared on: server-set values masked, then a path-by-path
//! diff of the rest, less the differences a case allows with a reason.

use serde_json::{Map, Value};

/// Keys whose values each server sets for itself (ids, revisions, times, allocations): their
/// presence is compared, their value is not.
const SERVER_SET: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "clusterIP",
    "clusterIPs",
    "nodePort",
    "healthCheckNodePort",
    "continue",
];

/// Masks the values each server chooses for itself, anywhere in `v`.
pub fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            mask_generated_name(map);
            for (key, child) in map.iter_mut() {
                if SERVER_SET.contains(&key.as_str()) && !child.is_null() {
                    *child = mask(child);
                } else if key == "managedFields" {
                    mask_managed_times(child);
                    normalize(child);
                } else {
                    normalize(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::String(s) => *s = mask_record_version(&mask_uuids(s)),
        _ => {}
    }
}

/// `"<set>"` for a scalar, the same for each element of a list (so counts still compare).
fn mask(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(mask).collect()),
        Value::String(s) if s == "None" || s.is_empty() => v.clone(),
        _ => Value::String("<set>".into()),
    }
}

fn mask_managed_times(v: &mut Value) {
    if let Value::Array(entries) = v {
        for entry in entries {
            if let Some(time) = entry.get_mut("time") {
                *time = Value::String("<set>".into());
            }
        }
    }
}

/// A name the server generated from `generateName` differs in its random suffix.
fn mask_generated_name(map: &mut Map<String, Value>) {
    let Some(prefix) = map.get("generateName").and_then(Value::as_str) else {
        return;
    };
    let prefix = prefix.to_string();
    if let Some(Value::String(name)) = map.get_mut("name")
        && name.starts_with(&prefix)
        && name.len() > prefix.len()
    {
        *name = format!("{prefix}<generated>");
    }
}

/// A delete precondition's conflict quotes the stored resourceVersion (`in record (N)`).
fn mask_record_version(s: &str) -> String {
    const AT: &str = "ResourceVersion in record (";
    let Some(start) = s.find(AT).map(|i| i + AT.len()) else {
        return s.to_string();
    };
    let digits = s[start..].bytes().take_while(u8::is_ascii_digit).count();
    format!("{}<rv>{}", &s[..start], &s[start + digits..])
}

/// Replaces every UUID (8-4-4-4-12 hex digits) in `s` with `<uid>`: messages quote uids.
pub fn mask_uuids(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        if is_uuid_at(bytes, i) {
            out.push_str("<uid>");
            i += 36;
        } else {
            let ch = s[i..].chars().next().unwrap_or_default();
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    out
}

fn is_uuid_at(b: &[u8], i: usize) -> bool {
    if i + 36 > b.len() {
        return false;
    }
    b[i..i + 36].iter().enumerate().all(|(k, c)| {
        if matches!(k, 8 | 13 | 18 | 23) {
            *c == b'-'
        } else {
            c.is_ascii_hexdigit()
        }
    })
}

/// One difference: the path in the compared value, and what each server answered there.
#[derive(Debug, Clone)]
pub struct Difference {
    pub path: String,
    pub real: Option<Value>,
    pub emu: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map_or("<absent>".to_string(), Value::to_string);
        write!(
            f,
            "{}:\n      real: {}\n      emu:  {}",
            self.path,
            show(&self.real),
            show(&self.emu)
        )
    }
}

/// Every path where `real` and `emu` differ (objects by key, arrays by index).
pub fn diff(real: &Value, emu: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk("", Some(real), Some(emu), &mut out);
    out
}

fn walk(path: &str, real: Option<&Value>, emu: Option<&Value>, out: &mut Vec<Difference>) {
    match (real, emu) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                walk(&join(path, k), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                walk(&format!("{path}[{i}]"), a.get(i), b.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference {
            path: path.to_string(),
            real: a.cloned(),
            emu: b.cloned(),
        }),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A difference a case expects, with the reason it is kept.
#[derive(Debug, Clone)]
pub struct Allowance {
    /// A path prefix (`body.message`, `body.items[*].status`); `*` matches one key or index.
    pub path: String,
    pub reason: String,
}

impl Allowance {
    /// Whether `path` is this allowance's path or lies under it.
    pub fn covers(&self, path: &str) -> bool {
        let want: Vec<&str> = split(&self.path);
        let got: Vec<&str> = split(path);
        got.len() >= want.len() && want.iter().zip(&got).all(|(w, g)| *w == "*" || w == g)
    }
}

/// `a.b[0].c` → `["a", "b", "0", "c"]`.
fn split(path: &str) -> Vec<&str> {
    path.split(['.', '[', ']'])
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_server_set_values_and_keeps_their_presence() {
        let mut v = json!({"metadata": {"name": "web-x7k2p", "generateName": "web-",
            "uid": "0b3f1d1e-8c43-4b8e-9d6a-2f1e3c4d5a6b", "resourceVersion": "12"},
            "spec": {"clusterIPs": ["10.96.0.7"], "clusterIP": "None"},
            "message": "UID in object meta: 0b3f1d1e-8c43-4b8e-9d6a-2f1e3c4d5a6b"});
        normalize(&mut v);
        assert_eq!(
            v,
            json!({"metadata": {"name": "web-<generated>", "generateName": "web-",
                "uid": "<set>", "resourceVersion": "<set>"},
                "spec": {"clusterIPs": ["<set>"], "clusterIP": "None"},
                "message": "UID in object meta: <uid>"})
        );
    }

    #[test]
    fn diff_names_each_differing_path() {
        let d = diff(
            &json!({"a": {"b": 1, "c": [1, 2]}}),
            &json!({"a": {"b": 2, "c": [1]}, "d": true}),
        );
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["a.b", "a.c[1]", "d"]);
    }

    #[test]
    fn allowances_cover_their_subtree_with_wildcards() {
        let a = Allowance {
            path: "body.items[*].status".into(),
            reason: String::new(),
        };
        assert!(a.covers("body.items[3].status.phase"));
        assert!(!a.covers("body.items[3].spec"));
        assert!(!a.covers("body.items"));
    }
}
