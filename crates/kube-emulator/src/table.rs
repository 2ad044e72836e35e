//! `meta.k8s.io/v1` Table responses for `kubectl get` (spec §5.7). Column logic beyond Name/Age
//! comes from `apiserver-semantics` (via [`crate::semantics::table`]); this is the fallback.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceType;

/// Human age like kubectl's (`5s`, `3m`, `2h`, `4d`).
pub fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<invalid>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Render a Table for objects of one type.
pub fn render(rt: &ResourceType, objs: &[&Value], include_object: &str, rv: u64) -> Value {
    if let Some(t) = crate::semantics::table(rt, objs, include_object) {
        return t;
    }
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let name = meta::str_at(o, "/metadata/name").unwrap_or_default();
            let created = meta::str_at(o, "/metadata/creationTimestamp").unwrap_or_default();
            let object = match include_object {
                "None" => Value::Null,
                "Object" => (*o).clone(),
                _ => meta::to_partial(o),
            };
            json!({"cells": [name, age(created)], "object": object})
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0},
        ],
        "rows": rows,
    })
}
