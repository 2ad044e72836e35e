//! Strategic merge patch for the built-in types this emulator serves (spec §2.5, P1).
//! Keyed lists use the patch merge keys of the served types; other lists are replaced, which is
//! what upstream does for lists without a merge strategy.

use serde_json::{Map, Value};

/// Patch merge key for a list field at `path` (dot-joined field names, list indices omitted).
fn merge_key(path: &str) -> Option<&'static str> {
    let last = path.rsplit('.').next().unwrap_or(path);
    match (path, last) {
        ("metadata.ownerReferences", _) => Some("uid"),
        (
            _,
            "containers"
            | "initContainers"
            | "ephemeralContainers"
            | "volumes"
            | "env"
            | "volumeMounts",
        ) => Some("name"),
        (_, "imagePullSecrets" | "hostAliases") => {
            Some(if last == "hostAliases" { "ip" } else { "name" })
        }
        (p, "ports") if p.contains("ontainers") => Some("containerPort"),
        ("spec.ports", _) => Some("port"),
        (_, "conditions") => Some("type"),
        (_, "tolerations") => None,
        _ => None,
    }
}

/// Primitive lists with merge strategy (union).
fn is_merge_primitive(path: &str) -> bool {
    path == "metadata.finalizers"
}

/// Apply a strategic merge patch to `target`.
pub fn apply(target: &mut Value, patch: &Value) -> Result<(), String> {
    merge_obj(target, patch, "")
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn merge_obj(target: &mut Value, patch: &Value, path: &str) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut v = patch.clone();
        if let Value::Object(m) = &mut v {
            m.remove("$patch");
        }
        *target = v;
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove: Vec<Value> = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(a)) = t.get_mut(field) {
                a.retain(|x| !remove.contains(x));
            }
            continue;
        }
        let sub = join(path, k);
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match v {
            Value::Object(_) => merge_obj(t.entry(k.clone()).or_insert(Value::Null), v, &sub)?,
            Value::Array(items) => {
                let cur = t.entry(k.clone()).or_insert(Value::Null);
                merge_list(cur, items, &sub)?;
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

fn merge_list(cur: &mut Value, items: &[Value], path: &str) -> Result<(), String> {
    if is_merge_primitive(path) {
        let mut out: Vec<Value> = cur.as_array().cloned().unwrap_or_default();
        for i in items {
            if !out.contains(i) {
                out.push(i.clone());
            }
        }
        *cur = Value::Array(out);
        return Ok(());
    }
    let Some(key) = merge_key(path) else {
        *cur = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect());
        return Ok(());
    };
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *cur = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect());
        return Ok(());
    }
    let mut out: Vec<Value> = cur.as_array().cloned().unwrap_or_default();
    for item in items {
        let Some(kv) = item.get(key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {key}"
            ));
        };
        let pos = out.iter().position(|o| o.get(key) == Some(kv));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                out.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => merge_obj(&mut out[i], item, path)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                merge_obj(&mut fresh, item, path)?;
                out.push(fresh);
            }
        }
    }
    *cur = Value::Array(out);
    Ok(())
}

fn is_directive(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.len() == 1 && m.contains_key("$patch"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keyed_lists_and_directives() {
        let mut svc = json!({"metadata":{"finalizers":["a"],"labels":{"x":"1"}},
            "spec":{"ports":[{"port":80,"name":"http"},{"port":443,"name":"https"}]}});
        apply(
            &mut svc,
            &json!({"metadata":{"finalizers":["b"],"labels":{"x":null,"y":"2"}},
                    "spec":{"ports":[{"port":80,"name":"web"},{"port":443,"$patch":"delete"}]}}),
        )
        .unwrap();
        assert_eq!(svc["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(svc["metadata"]["labels"], json!({"y":"2"}));
        assert_eq!(svc["spec"]["ports"], json!([{"port":80,"name":"web"}]));
    }
}
