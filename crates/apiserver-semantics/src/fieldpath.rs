//! Field paths and field sets as structured-merge-diff models them, with the `FieldsV1` wire
//! encoding (`f:`/`k:`/`v:`/`i:` keys, `.` for a node that is itself a member).

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Errors decoding a `FieldsV1` document.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FieldsV1Error {
    /// A key that is none of `f:`, `k:`, `v:`, `i:`, `.`.
    #[error("invalid FieldsV1 key {key:?}: {reason}")]
    BadKey {
        /// The offending key.
        key: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A value that is not a JSON object.
    #[error("FieldsV1 node under {key:?} is not an object")]
    NotObject {
        /// The key whose value was not an object.
        key: String,
    },
}

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A struct field or map key.
    Field(String),
    /// An associative-list item, by its key fields (sorted by name; values are JSON text so the
    /// element is orderable and hashable).
    Key(Vec<(String, String)>),
    /// A set item, by its JSON text.
    Value(String),
    /// A list index (only for lists that are neither atomic nor keyed; rare).
    Index(usize),
}

impl PathElement {
    /// An associative-list key from field name/value pairs.
    pub fn key(fields: &[(String, Value)]) -> Self {
        let mut pairs: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        pairs.sort();
        Self::Key(pairs)
    }

    /// A set item.
    pub fn value(v: &Value) -> Self {
        Self::Value(v.to_string())
    }

    /// The `FieldsV1` key of this element.
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            Self::Field(name) => format!("f:{name}"),
            Self::Key(pairs) => {
                // JSON object with sorted keys; values are already JSON text.
                let inner: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
                    .collect();
                format!("k:{{{}}}", inner.join(","))
            }
            Self::Value(v) => format!("v:{v}"),
            Self::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key.
    pub fn from_fields_v1_key(key: &str) -> Result<Self, FieldsV1Error> {
        let bad = |reason: &str| FieldsV1Error::BadKey {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(name) = key.strip_prefix("f:") {
            return Ok(Self::Field(name.to_owned()));
        }
        if let Some(json) = key.strip_prefix("k:") {
            let v: Value = serde_json::from_str(json).map_err(|e| bad(&e.to_string()))?;
            let Value::Object(map) = v else {
                return Err(bad("key is not a JSON object"));
            };
            let pairs: Vec<(String, Value)> = map.into_iter().collect();
            return Ok(Self::key(&pairs));
        }
        if let Some(json) = key.strip_prefix("v:") {
            let v: Value = serde_json::from_str(json).map_err(|e| bad(&e.to_string()))?;
            return Ok(Self::value(&v));
        }
        if let Some(idx) = key.strip_prefix("i:") {
            return idx
                .parse()
                .map(Self::Index)
                .map_err(|e: std::num::ParseIntError| bad(&e.to_string()));
        }
        Err(bad("unknown prefix"))
    }
}

impl fmt::Display for PathElement {
    /// structured-merge-diff's `PathElement.String()`: `.name`, `[k=v,...]`, `[=v]`, `[i]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Field(name) => write!(f, ".{name}"),
            Self::Key(pairs) => {
                let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", inner.join(","))
            }
            Self::Value(v) => write!(f, "[={v}]"),
            Self::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object root.
pub type Path = Vec<PathElement>;

/// Renders a path the way conflict messages print it (`.spec.ports[port=80,protocol="TCP"].name`).
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of paths, stored as a trie: `members` are the paths ending at this level, `children`
/// the sub-sets below an element (an element may be both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds a path (the empty path is ignored: the root is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether the exact path is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether the path or any path below it is a member.
    pub fn has_prefix(&self, path: &[PathElement]) -> bool {
        match path {
            [] => !self.is_empty(),
            [last] => {
                self.members.contains(last)
                    || self.children.get(last).is_some_and(|c| !c.is_empty())
            }
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has_prefix(rest)),
        }
    }

    /// Removes one exact path (not its descendants).
    pub fn remove(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.remove(last);
            }
            [first, rest @ ..] => {
                if let Some(c) = self.children.get_mut(first) {
                    c.remove(rest);
                    if c.is_empty() {
                        self.children.remove(first);
                    }
                }
            }
        }
    }

    /// All member paths, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for pe in keys {
            prefix.push(pe.clone());
            if self.members.contains(pe) {
                out.push(prefix.clone());
            }
            if let Some(c) = self.children.get(pe) {
                c.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        for p in other.paths() {
            out.insert(&p);
        }
        out
    }

    /// `self \ other` (exact paths).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for p in self.paths() {
            if !other.has(&p) {
                out.insert(&p);
            }
        }
        out
    }

    /// `self ∩ other` (exact paths).
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for p in self.paths() {
            if other.has(&p) {
                out.insert(&p);
            }
        }
        out
    }

    /// The `FieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for pe in keys {
            let child = self.children.get(pe).filter(|c| !c.is_empty());
            let node = match child {
                None => Value::Object(Map::new()),
                Some(c) => {
                    let mut inner = match c.to_fields_v1() {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    if self.members.contains(pe) {
                        inner.insert(".".to_owned(), Value::Object(Map::new()));
                    }
                    Value::Object(inner)
                }
            };
            map.insert(pe.to_fields_v1_key(), node);
        }
        Value::Object(map)
    }

    /// Decodes a `FieldsV1` JSON document.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, FieldsV1Error> {
        let Value::Object(map) = v else {
            return Err(FieldsV1Error::NotObject { key: String::new() });
        };
        let mut set = FieldSet::new();
        for (k, child) in map {
            if k == "." {
                continue;
            }
            let pe = PathElement::from_fields_v1_key(k)?;
            let Value::Object(cm) = child else {
                return Err(FieldsV1Error::NotObject { key: k.clone() });
            };
            if cm.is_empty() || cm.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let sub = FieldSet::from_fields_v1(child)?;
            if !sub.is_empty() {
                set.children.insert(pe, sub);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::Field(s.to_owned())
    }

    #[test]
    fn fields_v1_round_trip_with_dot_and_keys() {
        let doc = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}},
                           "f:ownerReferences": {"k:{\"uid\":\"5c1\"}": {}}},
            "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:targetPort": {}}}},
            "f:metadata2": {"f:finalizers": {"v:\"x\"": {}}}
        });
        let set = FieldSet::from_fields_v1(&doc).unwrap();
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(set.has(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.has(&[f("metadata")]));
        assert_eq!(set.to_fields_v1(), doc);
    }

    #[test]
    fn key_encoding_sorts_fields_and_renders_paths() {
        let pe = PathElement::key(&[
            ("protocol".into(), json!("TCP")),
            ("port".into(), json!(80)),
        ]);
        assert_eq!(pe.to_fields_v1_key(), r#"k:{"port":80,"protocol":"TCP"}"#);
        let path = vec![f("spec"), f("ports"), pe, f("targetPort")];
        assert_eq!(
            path_string(&path),
            r#".spec.ports[port=80,protocol="TCP"].targetPort"#
        );
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::value(&json!("x"))
            ]),
            r#".metadata.finalizers[="x"]"#
        );
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("a"), f("b")]);
        a.insert(&[f("a"), f("c")]);
        let mut b = FieldSet::new();
        b.insert(&[f("a"), f("c")]);
        b.insert(&[f("d")]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("a"), f("c")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("a"), f("b")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.has_prefix(&[f("a")]));
        let mut c = a.clone();
        c.remove(&[f("a"), f("b")]);
        c.remove(&[f("a"), f("c")]);
        assert!(c.is_empty());
        assert_eq!(c.to_fields_v1(), json!({}));
    }
}
