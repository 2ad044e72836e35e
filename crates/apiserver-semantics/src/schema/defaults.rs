//! Structural defaulting (upstream `structuraldefaulting.Default`).

use super::{additional, is_true, props};
use serde_json::Value;

pub(super) fn default_node(v: &mut Value, s: &Value) {
    match v {
        Value::Object(m) => {
            if let Some(properties) = props(s) {
                for (k, ps) in properties {
                    let Some(d) = ps.get("default") else { continue };
                    let missing = match m.get(k) {
                        None => true,
                        Some(Value::Null) => !is_true(ps, "nullable"),
                        Some(_) => false,
                    };
                    if missing {
                        m.insert(k.clone(), d.clone());
                    }
                }
            }
            let add = additional(s);
            for (k, child) in m.iter_mut() {
                if let Some(ps) = props(s).and_then(|p| p.get(k)) {
                    default_node(child, ps);
                } else if let Some(a) = add {
                    if child.is_null()
                        && !is_true(a, "nullable")
                        && let Some(d) = a.get("default")
                    {
                        *child = d.clone();
                    }
                    default_node(child, a);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for item in items.iter_mut() {
                    if item.is_null()
                        && !is_true(is, "nullable")
                        && let Some(d) = is.get("default")
                    {
                        *item = d.clone();
                    }
                    default_node(item, is);
                }
            }
        }
        _ => {}
    }
}
