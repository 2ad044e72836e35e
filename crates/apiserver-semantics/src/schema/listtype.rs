//! `x-kubernetes-list-type` invariants (apiextensions `listtype` validation): set items and
//! list-map keys must be unique.

use super::{additional, index, join, props, str_of};
use crate::field_error::FieldError;
use serde_json::{Map, Value};

/// Indices of the second appearance of each repeated value (upstream reports only that one).
fn second_appearances<T: PartialEq>(values: &[T]) -> Vec<usize> {
    (0..values.len())
        .filter(|&i| values[..i].iter().filter(|v| **v == values[i]).count() == 1)
        .collect()
}

/// `x-kubernetes-list-type` invariants (apiextensions `listtype` validation).
pub(super) fn list_types(v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    match v {
        Value::Array(items) => {
            match str_of(s, "x-kubernetes-list-type") {
                Some("set") => {
                    for i in second_appearances(items) {
                        errs.push(FieldError::duplicate(&index(path, i), &items[i]));
                    }
                }
                Some("map") => list_map(items, s, path, errs),
                _ => {}
            }
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    list_types(item, is, &index(path, i), errs);
                }
            }
        }
        Value::Object(m) => {
            if let Some(a) = additional(s) {
                for (k, child) in m {
                    list_types(child, a, &format!("{path}[{k}]"), errs);
                }
            }
            if let Some(p) = props(s) {
                for (k, child) in m {
                    if let Some(ps) = p.get(k) {
                        list_types(child, ps, &join(path, k), errs);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Keys of a list-type map must be unique; a missing key counts as one "unspecified" key.
fn list_map(items: &[Value], s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if let Some((i, bad)) = items
        .iter()
        .enumerate()
        .find(|(_, x)| !x.is_object() && !x.is_null())
    {
        errs.push(FieldError::invalid(
            &index(path, i),
            bad,
            "must be an object for an array of list-type map",
        ));
        return;
    }
    let key_fields: Vec<&str> = s
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let keys: Vec<Map<String, Value>> = items
        .iter()
        .map(|x| {
            key_fields
                .iter()
                .filter_map(|k| x.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect()
        })
        .collect();
    for i in second_appearances(&keys) {
        errs.push(FieldError::duplicate(
            &index(path, i),
            Value::Object(keys[i].clone()),
        ));
    }
}
