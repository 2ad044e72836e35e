//! Structural pruning: unknown fields and `null`s of non-nullable fields without a default.

use super::{additional, index, is_true, join, props};
use serde_json::Value;

/// ObjectMeta's JSON fields: everything else under a resource's `metadata` is pruned.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

pub(super) fn prune_node(
    v: &mut Value,
    s: &Value,
    path: &str,
    root: bool,
    pruned: &mut Vec<String>,
) {
    match v {
        Value::Object(m) => {
            let embedded = root || is_true(s, "x-kubernetes-embedded-resource");
            let preserve = is_true(s, "x-kubernetes-preserve-unknown-fields");
            let properties = props(s);
            let add = additional(s);
            let add_any = s.get("additionalProperties") == Some(&Value::Bool(true));
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                if embedded && matches!(k.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                if embedded && k == "metadata" {
                    if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                        let meta_keys: Vec<String> = meta.keys().cloned().collect();
                        for mk in meta_keys {
                            if !OBJECT_META_FIELDS.contains(&mk.as_str()) {
                                meta.remove(&mk);
                                pruned.push(join(&child_path, &mk));
                            }
                        }
                    }
                    continue;
                }
                let child_schema = properties.and_then(|p| p.get(&k)).or(add);
                match child_schema {
                    Some(cs) => {
                        let null_dropped = m.get(&k).is_some_and(Value::is_null)
                            && !is_true(cs, "nullable")
                            && cs.get("default").is_none();
                        if null_dropped {
                            m.remove(&k);
                        } else if let Some(child) = m.get_mut(&k) {
                            prune_node(child, cs, &child_path, false, pruned);
                        }
                    }
                    None if preserve || add_any => {}
                    None => {
                        m.remove(&k);
                        pruned.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(item, item_schema, &index(path, i), false, pruned);
                }
            }
        }
        _ => {}
    }
}
