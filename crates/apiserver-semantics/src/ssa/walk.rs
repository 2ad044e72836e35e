//! The three walks of structured-merge-diff over JSON plus schema knowledge: to-field-set,
//! merge and compare, and path removal for pruning.

use crate::fieldpath::{FieldSet, PathElement};
use crate::semantics::{ListType, MapType, ObjectSchema};
use serde_json::{Map, Value};

/// The path element of a list item, or `None` if it cannot be keyed.
pub(crate) fn item_element(
    item: &Value,
    lt: &ListType,
    names: &[&str],
    schema: &dyn ObjectSchema,
) -> Option<PathElement> {
    match lt {
        ListType::Atomic => None,
        ListType::Set => Some(PathElement::value(item)),
        ListType::Map(keys) => {
            let obj = item.as_object()?;
            let mut pairs = Vec::with_capacity(keys.len());
            for k in keys {
                match obj.get(k) {
                    Some(v) => pairs.push((k.clone(), v.clone())),
                    None => {
                        if let Some(d) = schema.key_default(names, k) {
                            pairs.push((k.clone(), d));
                        }
                    }
                }
            }
            Some(PathElement::key(&pairs))
        }
    }
}

/// Items keyed by element, first occurrence wins (as upstream ignores repeats).
pub(crate) fn index_items<'a>(
    items: &'a [Value],
    lt: &ListType,
    names: &[&str],
    schema: &dyn ObjectSchema,
) -> Vec<(PathElement, &'a Value)> {
    let mut out: Vec<(PathElement, &Value)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let pe = item_element(item, lt, names, schema).unwrap_or(PathElement::Index(i));
        if !out.iter().any(|(p, _)| *p == pe) {
            out.push((pe, item));
        }
    }
    out
}

/// `TypedValue.ToFieldSet`: leaves, list items, map keys; struct fields only through children.
pub fn to_field_set(v: &Value, schema: &dyn ObjectSchema) -> FieldSet {
    let mut set = FieldSet::new();
    field_set_walk(v, &mut Vec::new(), &mut Vec::new(), schema, &mut set);
    set
}

fn field_set_walk<'a>(
    v: &'a Value,
    names: &mut Vec<&'a str>,
    path: &mut Vec<PathElement>,
    schema: &dyn ObjectSchema,
    set: &mut FieldSet,
) {
    match v {
        Value::Array(items) => {
            let lt = schema.list_type(names);
            if lt == ListType::Atomic {
                set.insert(path);
                return;
            }
            for (pe, item) in index_items(items, &lt, names, schema) {
                names.push("[]");
                path.push(pe);
                if matches!(lt, ListType::Map(_)) {
                    field_set_walk(item, names, path, schema, set);
                }
                set.insert(path);
                path.pop();
                names.pop();
            }
        }
        Value::Object(m) => {
            if schema.map_type(names) == MapType::Atomic && !path.is_empty() {
                set.insert(path);
                return;
            }
            let is_map = schema.is_map(names);
            for (k, child) in m {
                names.push(k);
                path.push(PathElement::Field(k.clone()));
                field_set_walk(child, names, path, schema, set);
                if is_map {
                    set.insert(path);
                }
                path.pop();
                names.pop();
            }
        }
        _ => set.insert(path),
    }
}

/// `TypedValue.Merge(lhs, rhs)`: rhs (the configuration) wins for leaves and atomic values;
/// granular objects merge per key; sets and map-lists merge per item in upstream's order.
pub(crate) fn merge_values<'a>(
    lhs: Option<&Value>,
    rhs: &'a Value,
    names: &mut Vec<&'a str>,
    schema: &dyn ObjectSchema,
) -> Value {
    match (lhs, rhs) {
        (Some(Value::Object(l)), Value::Object(r)) => {
            if schema.map_type(names) == MapType::Atomic && !names.is_empty() {
                return rhs.clone();
            }
            let mut out = l.clone();
            for (k, rv) in r {
                names.push(k);
                let merged = merge_values(l.get(k), rv, names, schema);
                names.pop();
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(r)) => {
            let lt = schema.list_type(names);
            if lt == ListType::Atomic {
                return rhs.clone();
            }
            names.push("[]");
            let out = merge_list(l, r, &lt, names, schema);
            names.pop();
            Value::Array(out)
        }
        _ => rhs.clone(),
    }
}

/// [`merge_values`] into an owned value, so live parts the configuration does not touch are
/// not copied (the result is the live copy).
pub(crate) fn merge_in_place<'a>(
    slot: &mut Value,
    rhs: &'a Value,
    names: &mut Vec<&'a str>,
    schema: &dyn ObjectSchema,
) {
    match (&mut *slot, rhs) {
        (Value::Object(l), Value::Object(r)) => {
            if schema.map_type(names) == MapType::Atomic {
                *slot = rhs.clone();
                return;
            }
            for (k, rv) in r {
                names.push(k);
                match l.get_mut(k) {
                    Some(child) => merge_in_place(child, rv, names, schema),
                    None => {
                        l.insert(k.clone(), rv.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(_), Value::Array(_)) => {
            let merged = merge_values(Some(slot), rhs, names, schema);
            *slot = merged;
        }
        _ => *slot = rhs.clone(),
    }
}

/// Upstream's list merge order: shared items in the configuration's order, live-only items
/// kept where they were.
pub(crate) fn merge_list<'a>(
    l: &[Value],
    r: &'a [Value],
    lt: &ListType,
    names: &mut Vec<&'a str>,
    schema: &dyn ObjectSchema,
) -> Vec<Value> {
    let parent = &names[..names.len() - 1];
    let lhs = index_items(l, lt, parent, schema);
    let rhs = index_items(r, lt, parent, schema);
    let in_lhs = |pe: &PathElement| lhs.iter().find(|(p, _)| p == pe).map(|(_, v)| *v);
    let in_rhs = |pe: &PathElement| rhs.iter().any(|(p, _)| p == pe);
    let shared: Vec<&PathElement> = rhs
        .iter()
        .map(|(p, _)| p)
        .filter(|p| in_lhs(p).is_some())
        .collect();
    let mut next_shared = 0usize;
    let mut merged_rhs: Vec<&PathElement> = Vec::new();
    let mut out = Vec::with_capacity(l.len() + r.len());
    let (mut li, mut ri) = (0usize, 0usize);
    let merge_item = |lv: Option<&Value>, rv: &'a Value, names: &mut Vec<&'a str>| -> Value {
        if matches!(lt, ListType::Map(_)) {
            merge_values(lv, rv, names, schema)
        } else {
            rv.clone()
        }
    };
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lhs[li].0;
            if *pe == rhs[ri].0 {
                merged_rhs.push(pe);
                out.push(merge_item(Some(lhs[li].1), rhs[ri].1, names));
                li += 1;
                ri += 1;
                next_shared += 1;
                continue;
            }
            if in_rhs(pe) && shared.get(next_shared).is_some_and(|s| *s != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = &lhs[li].0;
            if !in_rhs(pe) {
                out.push(lhs[li].1.clone());
                li += 1;
                continue;
            } else if merged_rhs.contains(&pe) {
                li += 1;
                continue;
            }
        }
        if ri < rhs.len() {
            let pe = &rhs[ri].0;
            merged_rhs.push(pe);
            out.push(merge_item(in_lhs(pe), rhs[ri].1, names));
            ri += 1;
            if shared.get(next_shared).is_some_and(|s| *s == pe) {
                next_shared += 1;
            }
        }
    }
    out
}

/// `TypedValue.Compare`: paths added, modified and removed from `lhs` to `rhs`.
#[derive(Default, Debug)]
pub(crate) struct Comparison {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

pub(crate) fn compare(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    schema: &dyn ObjectSchema,
) -> Comparison {
    let mut c = Comparison::default();
    compare_walk(lhs, rhs, &mut Vec::new(), &mut Vec::new(), schema, &mut c);
    c
}

fn leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &[PathElement], c: &mut Comparison) {
    match (lhs, rhs) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(l), Some(r)) if l != r => c.modified.insert(path),
        _ => {}
    }
}

static EMPTY_LIST: Value = Value::Array(Vec::new());
static EMPTY_MAP: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::Object(Map::new()));

/// A nil slice or map (`null`) compared with a list or object is an empty one: the typed
/// comparison sees the field exist on both sides (no `.` added or removed for it).
fn nil_as_empty<'a>(v: Option<&'a Value>, other: Option<&'a Value>) -> Option<&'a Value> {
    match (v, other) {
        (Some(Value::Null), Some(Value::Array(_))) => Some(&EMPTY_LIST),
        (Some(Value::Null), Some(Value::Object(_))) => Some(&*EMPTY_MAP),
        _ => v,
    }
}

fn compare_walk<'a>(
    lhs: Option<&'a Value>,
    rhs: Option<&'a Value>,
    names: &mut Vec<&'a str>,
    path: &mut Vec<PathElement>,
    schema: &dyn ObjectSchema,
    c: &mut Comparison,
) {
    let (lhs, rhs) = (nil_as_empty(lhs, rhs), nil_as_empty(rhs, lhs));
    let either = rhs.or(lhs);
    match either {
        Some(Value::Object(_)) => {
            let l = lhs.and_then(Value::as_object);
            let r = rhs.and_then(Value::as_object);
            let type_mismatch = (lhs.is_some() && l.is_none()) || (rhs.is_some() && r.is_none());
            let both_empty = l.is_none_or(Map::is_empty) && r.is_none_or(Map::is_empty);
            if type_mismatch
                || both_empty
                || (schema.map_type(names) == MapType::Atomic && !path.is_empty())
            {
                leaf(lhs, rhs, path, c);
                return;
            }
            let mut keys: Vec<&'a String> = l.map(|m| m.keys().collect()).unwrap_or_default();
            for k in r.map(|m| m.keys().collect::<Vec<_>>()).unwrap_or_default() {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let in_metadata = names.len() == 1 && names[0] == "metadata";
            for k in keys {
                if in_metadata && k == "managedFields" {
                    continue;
                }
                names.push(k);
                path.push(PathElement::Field(k.clone()));
                compare_walk(
                    l.and_then(|m| m.get(k)),
                    r.and_then(|m| m.get(k)),
                    names,
                    path,
                    schema,
                    c,
                );
                path.pop();
                names.pop();
            }
        }
        Some(Value::Array(_)) => {
            let l = lhs.and_then(Value::as_array);
            let r = rhs.and_then(Value::as_array);
            let type_mismatch = (lhs.is_some() && l.is_none()) || (rhs.is_some() && r.is_none());
            let both_empty = l.is_none_or(Vec::is_empty) && r.is_none_or(Vec::is_empty);
            let lt = schema.list_type(names);
            if type_mismatch || both_empty || lt == ListType::Atomic {
                leaf(lhs, rhs, path, c);
                return;
            }
            let li = l
                .map(|v| index_items(v, &lt, names, schema))
                .unwrap_or_default();
            let ri = r
                .map(|v| index_items(v, &lt, names, schema))
                .unwrap_or_default();
            names.push("[]");
            for (pe, rv) in &ri {
                let lv = li.iter().find(|(p, _)| p == pe).map(|(_, v)| *v);
                path.push(pe.clone());
                if matches!(lt, ListType::Map(_)) {
                    compare_walk(lv, Some(*rv), names, path, schema, c);
                } else {
                    leaf(lv, Some(*rv), path, c);
                }
                path.pop();
            }
            for (pe, lv) in &li {
                if ri.iter().any(|(p, _)| p == pe) {
                    continue;
                }
                path.push(pe.clone());
                if matches!(lt, ListType::Map(_)) {
                    compare_walk(Some(*lv), None, names, path, schema, c);
                } else {
                    leaf(Some(*lv), None, path, c);
                }
                path.pop();
            }
            names.pop();
        }
        _ => {
            leaf(lhs, rhs, path, c);
            return;
        }
    }
    // A container that appeared or disappeared is itself added/removed (this is where the
    // `.` members of Update entries come from).
    match (lhs, rhs) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        _ => {}
    }
}

/// Removes the node at `path` from `v` (map key, list item by key or value, index).
pub(crate) fn remove_path<'a>(
    v: &mut Value,
    path: &'a [PathElement],
    names: &mut Vec<&'a str>,
    schema: &dyn ObjectSchema,
) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    match (first, v) {
        (PathElement::Field(k), Value::Object(m)) => {
            if rest.is_empty() {
                m.remove(k);
            } else if let Some(child) = m.get_mut(k) {
                names.push(k);
                remove_path(child, rest, names, schema);
                names.pop();
            }
        }
        (pe, Value::Array(items)) => {
            let lt = schema.list_type(names);
            let pos = items.iter().enumerate().position(|(i, item)| {
                let elem = item_element(item, &lt, names, schema).unwrap_or(PathElement::Index(i));
                elem == *pe
            });
            if let Some(i) = pos {
                if rest.is_empty() {
                    items.remove(i);
                } else {
                    names.push("[]");
                    remove_path(&mut items[i], rest, names, schema);
                    names.pop();
                }
            }
        }
        _ => {}
    }
}
