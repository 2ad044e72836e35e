//! CRD `openAPIV3Schema` handling (spec §5.2–§5.5): structural check, pruning of unknown fields
//! and non-nullable nulls, defaulting, OpenAPI v3 value validation with kube-openapi's message
//! shapes, `x-kubernetes-list-type` invariants, and CEL `x-kubernetes-validations` through
//! `kube-cel`.
//!
//! Validation follows kube-openapi's validator order per node (type, junctors, string, format,
//! number, items, enum, object) and its early exits (first string failure only; a
//! min/maxProperties failure hides the node's children). Siblings come in schema key order,
//! where upstream iterates a Go map (random order); tests with one error per object are exact.
//! On update (`old` given) errors ratchet as in 1.33 (`CRDValidationRatcheting`): a node whose
//! value equals its correlated old value (by key for list-maps, by value for sets, never for
//! atomic list items) reports nothing, and CEL rules without `oldSelf` ratchet the same way.

use crate::field_error::{BadValue, FieldError, go_quote};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use tracing::debug;

/// The summary error upstream adds instead of running CEL when the object already failed a
/// blocking structural check (`hasBlockingErr`); its field is a nil path, printed `<nil>`.
pub const CEL_SKIPPED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

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

/// A CRD version's schema, checked structural, with patterns and CEL rules compiled once.
pub struct CrdValidator {
    schema: Value,
    patterns: HashMap<String, Regex>,
    cel: Option<kube_cel::CompiledSchema>,
    /// Schema `type` of the node declaring each CEL rule (upstream prints it as the bad value).
    rule_types: HashMap<String, String>,
}

impl std::fmt::Debug for CrdValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdValidator")
            .field("patterns", &self.patterns.len())
            .field("cel_rules", &self.rule_types.len())
            .finish()
    }
}

/// What pruning removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Unknown fields dropped, as paths (`spec.foo`, `spec.ports[0].bar`) for
    /// `Warning: 299 - "unknown field \"spec.foo\""` or a Strict-mode 400.
    pub unknown_fields: Vec<String>,
}

impl Pruned {
    /// The `Warning` header values (`unknown field "spec.foo"`), one per field.
    pub fn warnings(&self) -> Vec<String> {
        self.unknown_fields
            .iter()
            .map(|f| format!("unknown field {}", go_quote(f)))
            .collect()
    }

    /// The Strict-mode 400 message (`strict decoding error: unknown field "a", unknown field "b"`),
    /// or `None` when nothing was pruned.
    pub fn strict_error(&self) -> Option<String> {
        if self.unknown_fields.is_empty() {
            return None;
        }
        Some(format!(
            "strict decoding error: {}",
            self.warnings().join(", ")
        ))
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key) == Some(&Value::Bool(true))
}

fn str_of<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

fn props(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// `additionalProperties` as a schema (a boolean `true` means "anything").
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|a| a.is_object())
}

impl CrdValidator {
    /// Builds the validator for `schema` (a version's `schema.openAPIV3Schema`). Errors list
    /// why the schema is not structural (or has an invalid pattern or CEL rule), with paths under
    /// `field_prefix` (e.g. `spec.versions[0].schema.openAPIV3Schema`), ready for a 422 on the CRD.
    pub fn new(schema: &Value, field_prefix: &str) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        structural_check(schema, field_prefix, Level::Root, &mut errors);
        let mut patterns = HashMap::new();
        let mut rule_types = HashMap::new();
        collect(
            schema,
            field_prefix,
            &mut patterns,
            &mut rule_types,
            &mut errors,
        );
        let cel = if rule_types.is_empty() {
            None
        } else {
            let compiled = kube_cel::compile_schema(schema);
            cel_compile_errors(&compiled, field_prefix, &mut errors);
            Some(compiled)
        };
        if errors.is_empty() {
            Ok(Self {
                schema: schema.clone(),
                patterns,
                cel,
                rule_types,
            })
        } else {
            Err(errors)
        }
    }

    /// The validator of `version` of a CRD object (errors under `spec.versions[i]...`).
    pub fn from_crd(crd: &Value, version: &str) -> Result<Self, Vec<FieldError>> {
        let versions = crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some((i, v)) = versions
            .iter()
            .enumerate()
            .find(|(_, v)| v["name"] == version)
        else {
            return Err(vec![FieldError::required(
                "spec.versions",
                format!("no version {version:?}"),
            )]);
        };
        let prefix = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v["schema"].get("openAPIV3Schema") {
            Some(s) => Self::new(s, &prefix),
            None => Err(vec![FieldError::required(&prefix, "")]),
        }
    }

    /// The schema this validator checks.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Drops unknown fields (and `null`s of non-nullable fields without default) in place.
    /// `apiVersion`, `kind` and ObjectMeta fields of `metadata` are kept at the root.
    pub fn prune(&self, object: &mut Value) -> Pruned {
        let mut pruned = Pruned::default();
        prune_node(object, &self.schema, "", true, &mut pruned.unknown_fields);
        if !pruned.unknown_fields.is_empty() {
            debug!(fields = ?pruned.unknown_fields, "pruned unknown fields");
        }
        pruned
    }

    /// Applies `default`s in place (after pruning, as upstream): a missing property, or a `null`
    /// one that is not nullable, gets its default when its parent exists; defaults are then
    /// themselves defaulted.
    pub fn apply_defaults(&self, object: &mut Value) {
        default_node(object, &self.schema);
    }

    /// OpenAPI v3 value validation, list-type invariants and CEL rules, in upstream's order and
    /// with its messages. `old` is the stored object on update (CEL transition rules, ratcheting).
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        self.validate_node(object, &self.schema, "", old, &mut errors);
        list_types(object, &self.schema, "", &mut errors);
        if let Some(cel) = &self.cel {
            if errors.iter().any(|e| e.kind.blocks_cel()) {
                errors.push(FieldError::invalid("<nil>", Value::Null, CEL_SKIPPED));
            } else if let Err(cel_errors) = kube_cel::validate_compiled(cel, object, old) {
                errors.extend(
                    cel_errors
                        .iter()
                        .filter(|e| !self.ratchets(e, object, old))
                        .map(|e| self.cel_error(e)),
                );
            }
        }
        errors
    }

    /// CEL ratcheting: a failing rule that does not use `oldSelf` is not an error when the value
    /// it checks is unchanged from the stored object (correlated by key for list-maps).
    fn ratchets(&self, e: &kube_cel::ValidationError, new: &Value, old: Option<&Value>) -> bool {
        let Some(old) = old else { return false };
        if e.rule.contains("oldSelf") {
            return false;
        }
        matches!(correlate(&self.schema, new, old, &e.field_path), Some((n, o)) if n == o)
    }

    fn cel_error(&self, e: &kube_cel::ValidationError) -> FieldError {
        let value = BadValue::Json(Value::String(
            self.rule_types.get(&e.rule).cloned().unwrap_or_default(),
        ));
        let field = if e.field_path.is_empty() {
            "<nil>"
        } else {
            &e.field_path
        };
        match e.reason.as_deref() {
            Some("FieldValueForbidden") => FieldError::forbidden(field, e.message.clone()),
            Some("FieldValueRequired") => FieldError::required(field, e.message.clone()),
            Some("FieldValueDuplicate") => FieldError::duplicate(field, value),
            _ => FieldError::invalid(field, value, e.message.clone()),
        }
    }

    /// Validation ratcheting (upstream `CRDValidationRatcheting`, on since 1.30, GA in 1.33):
    /// errors of a node whose value equals its correlated old value are dropped.
    fn validate_node(
        &self,
        v: &Value,
        s: &Value,
        path: &str,
        old: Option<&Value>,
        errs: &mut Vec<FieldError>,
    ) {
        let start = errs.len();
        self.validate_value(v, s, path, old, errs);
        if old.is_some_and(|o| o == v) {
            errs.truncate(start);
        }
    }

    fn validate_value(
        &self,
        v: &Value,
        s: &Value,
        path: &str,
        old: Option<&Value>,
        errs: &mut Vec<FieldError>,
    ) {
        let in_body = |p: &str| format!("{p} in body");
        if v.is_null() {
            if is_true(s, "nullable") || s.get("type").is_none() {
                return;
            }
            let t = str_of(s, "type").unwrap_or_default();
            errs.push(FieldError::type_invalid(
                path,
                "null",
                format!("{} must be of type {t}: \"null\"", in_body(path)),
            ));
            return;
        }
        if is_true(s, "x-kubernetes-int-or-string") {
            if !(v.is_string() || v.is_i64() || v.is_u64()) {
                errs.push(FieldError::type_invalid(
                    path,
                    type_name(v),
                    format!(
                        "{} must be of type integer,string: {}",
                        in_body(path),
                        go_quote(type_name(v))
                    ),
                ));
                return;
            }
        } else if let Some(t) = str_of(s, "type") {
            let ok = match t {
                "integer" => {
                    v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0)
                }
                "number" => v.is_number(),
                "string" => v.is_string(),
                "boolean" => v.is_boolean(),
                "array" => v.is_array(),
                "object" => v.is_object(),
                _ => true,
            };
            if !ok {
                errs.push(FieldError::type_invalid(
                    path,
                    type_name(v),
                    format!(
                        "{} must be of type {t}: {}",
                        in_body(path),
                        go_quote(type_name(v))
                    ),
                ));
                return;
            }
        }
        // Value validations of junctors (they may not add structure in a structural schema).
        if let Some(all) = s.get("allOf").and_then(Value::as_array) {
            for sub in all {
                self.validate_node(v, sub, path, old, errs);
            }
        }
        let passes = |sub: &Value| {
            let mut e = Vec::new();
            self.validate_node(v, sub, path, old, &mut e);
            e.is_empty()
        };
        if let Some(any) = s.get("anyOf").and_then(Value::as_array)
            && !any.iter().any(passes)
        {
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{path} must validate at least one schema (anyOf)"),
            ));
        }
        if let Some(one) = s.get("oneOf").and_then(Value::as_array)
            && one.iter().filter(|sub| passes(sub)).count() != 1
        {
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{path} must validate one and only one schema (oneOf)"),
            ));
        }
        if let Some(not) = s.get("not")
            && passes(not)
        {
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{path} must not validate the schema (not)"),
            ));
        }
        match v {
            Value::String(text) => self.validate_string(text, s, path, errs),
            Value::Number(_) => validate_number(v, s, path, errs),
            Value::Array(items) => {
                if let Some(item_schema) = s.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        let old_item = old
                            .and_then(Value::as_array)
                            .and_then(|o| correlate_item(s, item, o));
                        self.validate_node(item, item_schema, &index(path, i), old_item, errs);
                    }
                }
                if let Some(min) = s.get("minItems").and_then(Value::as_u64)
                    && (items.len() as u64) < min
                {
                    errs.push(FieldError::invalid(
                        path,
                        items.len(),
                        format!("{} should have at least {min} items", in_body(path)),
                    ));
                }
                if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                    && items.len() as u64 > max
                {
                    errs.push(FieldError::too_many(
                        path,
                        Some(items.len() as u64),
                        Some(max),
                    ));
                }
            }
            _ => {}
        }
        if let Some(allowed) = s.get("enum").and_then(Value::as_array)
            && !allowed.contains(v)
        {
            let values: Vec<String> = allowed
                .iter()
                .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_owned))
                .collect();
            errs.push(FieldError::not_supported(path, v, &values));
        }
        if let Value::Object(m) = v {
            // kube-openapi's objectValidator: a min/maxProperties failure is the only error of
            // the node; then additional properties, declared properties, and `required` last.
            if let Some(min) = s.get("minProperties").and_then(Value::as_u64)
                && (m.len() as u64) < min
            {
                errs.push(FieldError::invalid(
                    path,
                    m.len(),
                    format!("{} should have at least {min} properties", in_body(path)),
                ));
                return;
            }
            if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
                && m.len() as u64 > max
            {
                errs.push(FieldError::too_many(path, Some(m.len() as u64), Some(max)));
                return;
            }
            let properties = props(s);
            if let Some(a) = additional(s) {
                for (k, child) in m {
                    if properties.is_none_or(|p| !p.contains_key(k)) {
                        let old_child = old.and_then(|o| o.get(k));
                        self.validate_node(child, a, &join(path, k), old_child, errs);
                    }
                }
            }
            if let Some(p) = properties {
                // As upstream, the root's apiVersion/kind/metadata are checked against the schema
                // too (a CRD may restrict metadata.name); ObjectMeta itself is the server's.
                for (k, ps) in p {
                    if let Some(child) = m.get(k) {
                        let old_child = old.and_then(|o| o.get(k));
                        self.validate_node(child, ps, &join(path, k), old_child, errs);
                    }
                }
            }
            if let Some(required) = s.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str) {
                    if !m.contains_key(r) {
                        errs.push(FieldError::required(&join(path, r), ""));
                    }
                }
            }
        }
    }

    fn validate_string(&self, text: &str, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
        let chars = text.chars().count() as u64;
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            errs.push(FieldError::too_long(path, Some(max)));
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            errs.push(FieldError::invalid(
                path,
                text,
                format!("{path} in body should be at least {min} chars long"),
            ));
        }
        if let Some(p) = str_of(s, "pattern")
            && let Some(re) = self.patterns.get(p)
            && !re.is_match(text)
        {
            errs.push(FieldError::invalid(
                path,
                text,
                format!("{path} in body should match '{p}'"),
            ));
        }
        if let Some(format) = str_of(s, "format")
            && !format_ok(format, text)
        {
            errs.push(FieldError::type_invalid(
                path,
                text,
                format!(
                    "{path} in body must be of type {format}: {}",
                    go_quote(text)
                ),
            ));
        }
    }
}

/// The old item an array item correlates with: by key for list-maps, by value for sets, none
/// for atomic lists (their items are never ratcheted, as upstream).
fn correlate_item<'o>(list_schema: &Value, item: &Value, old: &'o [Value]) -> Option<&'o Value> {
    match str_of(list_schema, "x-kubernetes-list-type") {
        Some("set") => old.iter().find(|o| *o == item),
        Some("map") => {
            let keys: Vec<&str> = list_schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            old.iter()
                .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
        }
        _ => None,
    }
}

/// Resolves a rendered field path (`spec.ports[0].name`) in the new object and its correlated
/// place in the old one.
fn correlate<'a, 'o>(
    schema: &Value,
    new: &'a Value,
    old: &'o Value,
    path: &str,
) -> Option<(&'a Value, &'o Value)> {
    let (mut s, mut n, mut o) = (schema, new, old);
    for seg in path.split('.').filter(|x| !x.is_empty()) {
        let (name, indexes) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            s = props(s).and_then(|p| p.get(name)).or(additional(s))?;
            n = n.get(name)?;
            o = o.get(name)?;
        }
        for idx in indexes.split(']').filter(|x| !x.is_empty()) {
            let i: usize = idx.trim_start_matches('[').parse().ok()?;
            let item = n.as_array()?.get(i)?;
            o = correlate_item(s, item, o.as_array()?)?;
            n = item;
            s = s.get("items")?;
        }
    }
    Some((n, o))
}

fn validate_number(v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(x) = v.as_f64() else { return };
    // Go prints the bound with %v: integers bare, floats shortest.
    let bound = |b: &Value| match b.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => format!("{f}"),
        None => b.to_string(),
    };
    // kube-openapi's numberValidator order: multipleOf, maximum, minimum.
    if let Some(mult) = s.get("multipleOf")
        && let Some(m) = mult.as_f64()
        && m > 0.0
        && ((x / m) - (x / m).round()).abs() > 1e-9
    {
        errs.push(FieldError::invalid(
            path,
            v,
            format!("{path} in body should be a multiple of {}", bound(mult)),
        ));
    }
    if let Some(max) = s.get("maximum") {
        let exclusive = is_true(s, "exclusiveMaximum");
        let m = max.as_f64().unwrap_or(f64::INFINITY);
        if (exclusive && x >= m) || (!exclusive && x > m) {
            let op = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{path} in body should be {op} {}", bound(max)),
            ));
        }
    }
    if let Some(min) = s.get("minimum") {
        let exclusive = is_true(s, "exclusiveMinimum");
        let m = min.as_f64().unwrap_or(f64::NEG_INFINITY);
        if (exclusive && x <= m) || (!exclusive && x < m) {
            let op = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                v,
                format!("{path} in body should be {op} {}", bound(min)),
            ));
        }
    }
}

/// The string formats kube-openapi checks that CRDs use in practice; unknown formats pass.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok() && s.len() == 10,
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            let ip_ok = ip.parse::<std::net::IpAddr>();
            match (ip_ok, bits.parse::<u8>()) {
                (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
                (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
                _ => false,
            }
        }),
        "uuid" => {
            let parts: Vec<&str> = s.split('-').collect();
            parts.len() == 5
                && [8, 4, 4, 4, 12]
                    .iter()
                    .zip(&parts)
                    .all(|(n, p)| p.len() == *n)
                && parts
                    .iter()
                    .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "hostname" => {
            !s.is_empty()
                && s.len() <= 253
                && s.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                })
        }
        "byte" => {
            s.len().is_multiple_of(4)
                && s.trim_end_matches('=')
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
        }
        _ => true,
    }
}

fn prune_node(v: &mut Value, s: &Value, path: &str, root: bool, pruned: &mut Vec<String>) {
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

fn default_node(v: &mut Value, s: &Value) {
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

/// Indices of the second appearance of each repeated value (upstream reports only that one).
fn second_appearances<T: PartialEq>(values: &[T]) -> Vec<usize> {
    (0..values.len())
        .filter(|&i| values[..i].iter().filter(|v| **v == values[i]).count() == 1)
        .collect()
}

/// `x-kubernetes-list-type` invariants (apiextensions `listtype` validation).
fn list_types(v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
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

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

/// apiextensions' structural-schema invariants (the subset that decides servability).
fn structural_check(s: &Value, path: &str, level: Level, errs: &mut Vec<FieldError>) {
    let Some(m) = s.as_object() else {
        errs.push(FieldError::invalid(path, s, "must be an object"));
        return;
    };
    let int_or_string = is_true(s, "x-kubernetes-int-or-string");
    let preserve = is_true(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = is_true(s, "x-kubernetes-embedded-resource");
    let t = str_of(s, "type").unwrap_or_default();
    if t.is_empty() && !int_or_string && !preserve && !embedded {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(&join(path, "type"), detail));
    }
    if level == Level::Root && !t.is_empty() && t != "object" {
        errs.push(FieldError::invalid(
            &join(path, "type"),
            t,
            "must be object at the root",
        ));
    }
    if int_or_string && !t.is_empty() {
        errs.push(FieldError::invalid(
            &join(path, "type"),
            t,
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    if t == "array" && s.get("items").is_none() {
        errs.push(FieldError::required(
            &join(path, "items"),
            "must be specified",
        ));
    }
    if is_true(s, "uniqueItems") {
        errs.push(FieldError::forbidden(
            &join(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if props(s).is_some_and(|p| !p.is_empty())
        && s.get("additionalProperties").is_some_and(|a| a != false)
    {
        errs.push(FieldError::forbidden(
            &join(path, "additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if let Some(p) = props(s) {
        for (k, child) in p {
            if level == Level::Root && k == "metadata" {
                metadata_check(
                    child,
                    &format!("{}[metadata]", join(path, "properties")),
                    errs,
                );
                continue;
            }
            structural_check(
                child,
                &format!("{}[{k}]", join(path, "properties")),
                Level::Field,
                errs,
            );
        }
    }
    if let Some(items) = m.get("items") {
        structural_check(items, &join(path, "items"), Level::Item, errs);
    }
    if let Some(a) = additional(s) {
        structural_check(a, &join(path, "additionalProperties"), Level::Field, errs);
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = m.get(junctor).and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                junctor_check(sub, &format!("{}[{i}]", join(path, junctor)), errs);
            }
        }
    }
    if let Some(not) = m.get("not") {
        junctor_check(not, &join(path, "not"), errs);
    }
}

/// A resource's `metadata` schema may only restrict `name` and `generateName` (strings).
fn metadata_check(s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(m) = s.as_object() else { return };
    let only_names = m.iter().all(|(k, v)| match k.as_str() {
        "type" => v == "object",
        "properties" => v.as_object().is_some_and(|p| {
            p.iter().all(|(pk, pv)| {
                matches!(pk.as_str(), "name" | "generateName")
                    && str_of(pv, "type").is_none_or(|t| t == "string")
            })
        }),
        _ => false,
    });
    if !only_names {
        errs.push(FieldError::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

/// Inside `allOf`/`anyOf`/`oneOf`/`not` only value validations are allowed.
fn junctor_check(s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(m) = s.as_object() else { return };
    for (k, v) in m {
        let forbidden = matches!(
            k.as_str(),
            "type" | "default" | "nullable" | "additionalProperties"
        ) || k.starts_with("x-kubernetes-");
        if forbidden {
            errs.push(FieldError::forbidden(
                &join(path, k),
                "must be empty to be structural",
            ));
        }
        match k.as_str() {
            "properties" => {
                if let Some(p) = v.as_object() {
                    for (pk, ps) in p {
                        junctor_check(ps, &format!("{}[{pk}]", join(path, "properties")), errs);
                    }
                }
            }
            "items" => junctor_check(v, &join(path, "items"), errs),
            _ => {}
        }
    }
}

/// Compiles `pattern`s and records the type of every node carrying CEL rules.
fn collect(
    s: &Value,
    path: &str,
    patterns: &mut HashMap<String, Regex>,
    rule_types: &mut HashMap<String, String>,
    errs: &mut Vec<FieldError>,
) {
    let Some(m) = s.as_object() else { return };
    if let Some(p) = str_of(s, "pattern")
        && !patterns.contains_key(p)
    {
        match Regex::new(p) {
            Ok(re) => {
                patterns.insert(p.to_owned(), re);
            }
            Err(e) => errs.push(FieldError::invalid(
                &join(path, "pattern"),
                p,
                format!("must be a valid regular expression, but isn't: {e}"),
            )),
        }
    }
    if let Some(rules) = m.get("x-kubernetes-validations").and_then(Value::as_array) {
        let t = str_of(s, "type").unwrap_or_default();
        for r in rules {
            if let Some(rule) = str_of(r, "rule") {
                rule_types.insert(rule.to_owned(), t.to_owned());
            }
        }
    }
    if let Some(p) = props(s) {
        for (k, child) in p {
            collect(
                child,
                &format!("{}[{k}]", join(path, "properties")),
                patterns,
                rule_types,
                errs,
            );
        }
    }
    if let Some(items) = m.get("items") {
        collect(items, &join(path, "items"), patterns, rule_types, errs);
    }
    if let Some(a) = additional(s) {
        collect(
            a,
            &join(path, "additionalProperties"),
            patterns,
            rule_types,
            errs,
        );
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = m.get(junctor).and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                collect(
                    sub,
                    &format!("{}[{i}]", join(path, junctor)),
                    patterns,
                    rule_types,
                    errs,
                );
            }
        }
    }
}

fn cel_compile_errors(c: &kube_cel::CompiledSchema, path: &str, errs: &mut Vec<FieldError>) {
    for (i, e) in c.compilation_errors().into_iter().enumerate() {
        errs.push(FieldError::invalid(
            &format!("{}[{i}].rule", join(path, "x-kubernetes-validations")),
            Value::String(String::new()),
            format!("compilation failed: {e}"),
        ));
    }
    for (k, child) in &c.properties {
        cel_compile_errors(child, &format!("{}[{k}]", join(path, "properties")), errs);
    }
    if let Some(items) = &c.items {
        cel_compile_errors(items, &join(path, "items"), errs);
    }
    if let Some(a) = &c.additional_properties {
        cel_compile_errors(a, &join(path, "additionalProperties"), errs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "replicas": {"type": "integer", "maximum": 10},
                "name": {"type": "string", "minLength": 3, "maxLength": 5},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "image": {"type": "string", "pattern": "^[a-z]+$"},
                "size": {"type": "integer"},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "maxItems": 2, "x-kubernetes-list-type": "set",
                         "items": {"type": "string"}},
                "opt": {"type": "string", "nullable": true},
                "probe": {"type": "object", "default": {},
                          "properties": {"period": {"type": "integer", "default": 10}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "status": {"type": "object", "nullable": true}}})
    }

    #[test]
    fn validation_messages_match_upstream_shapes() {
        let v = CrdValidator::new(&schema(), "").unwrap();
        let obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"},
            "spec": {"replicas": "string", "name": "ab", "mode": "x", "image": "X"}});
        assert_eq!(
            msgs(&v.validate(&obj, None)),
            vec![
                r#"spec.image: Invalid value: "X": spec.image in body should match '^[a-z]+$'"#,
                r#"spec.mode: Unsupported value: "x": supported values: "a", "b""#,
                r#"spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long"#,
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
                r#"spec.size: Required value"#,
            ]
        );
        let obj = json!({"spec": {"size": 1, "replicas": 11, "name": "abcdef",
            "tags": ["a", "b", "a", "a"], "when": "yesterday"}});
        assert_eq!(
            msgs(&v.validate(&obj, None)),
            vec![
                r#"spec.name: Too long: may not be more than 5 bytes"#,
                r#"spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"#,
                r#"spec.tags: Too many: 4: must have at most 2 items"#,
                r#"spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday""#,
                r#"spec.tags[2]: Duplicate value: "a""#,
            ]
        );
        let ok = json!({"spec": {"size": 1, "when": "2026-01-02T03:04:05Z", "opt": null}});
        assert!(v.validate(&ok, None).is_empty());
    }

    #[test]
    fn pruning_reports_unknown_fields_and_drops_non_nullable_nulls() {
        let v = CrdValidator::new(&schema(), "").unwrap();
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "n", "bogus": 1},
            "spec": {"size": 1, "foo": 1, "replicas": null, "opt": null,
                     "free": {"any": {"thing": 1}}, "labels": {"a": "b"},
                     "probe": {"period": 5, "extra": true}},
            "status": null, "top": 1});
        let pruned = v.prune(&mut obj);
        assert_eq!(
            pruned.unknown_fields,
            vec!["metadata.bogus", "spec.foo", "spec.probe.extra", "top"]
        );
        assert_eq!(pruned.warnings()[0], r#"unknown field "metadata.bogus""#);
        assert_eq!(
            pruned.strict_error().unwrap(),
            r#"strict decoding error: unknown field "metadata.bogus", unknown field "spec.foo", unknown field "spec.probe.extra", unknown field "top""#
        );
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"},
                "spec": {"size": 1, "opt": null, "free": {"any": {"thing": 1}},
                         "labels": {"a": "b"}, "probe": {"period": 5}},
                "status": null})
        );
    }

    #[test]
    fn defaults_apply_under_existing_parents_and_recurse_into_defaults() {
        let v = CrdValidator::new(&schema(), "").unwrap();
        let mut obj = json!({"spec": {"size": 1}});
        v.apply_defaults(&mut obj);
        assert_eq!(obj, json!({"spec": {"size": 1, "probe": {"period": 10}}}));
        let mut none = json!({"metadata": {}});
        v.apply_defaults(&mut none);
        assert_eq!(none, json!({"metadata": {}}), "no spec, no nested defaults");
    }

    #[test]
    fn structural_errors() {
        let bad = json!({"type": "object", "properties": {
            "spec": {"properties": {"x": {"type": "array"}}},
            "list": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
            "both": {"type": "object", "properties": {"a": {"type": "string"}},
                     "additionalProperties": {"type": "string"}},
            "j": {"type": "string", "anyOf": [{"type": "string"}]}}});
        let errs = CrdValidator::new(&bad, "spec.versions[0].schema.openAPIV3Schema").unwrap_err();
        let p = "spec.versions[0].schema.openAPIV3Schema.properties";
        assert_eq!(
            msgs(&errs),
            vec![
                format!(
                    "{p}[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
                ),
                format!("{p}[j].anyOf[0].type: Forbidden: must be empty to be structural"),
                format!(
                    "{p}[list].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
                ),
                format!(
                    "{p}[spec].type: Required value: must not be empty for specified object fields"
                ),
                format!("{p}[spec].properties[x].items: Required value: must be specified"),
            ]
        );
    }

    #[test]
    fn metadata_schema_may_only_restrict_names() {
        let ok = json!({"type": "object", "properties": {"metadata": {"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 10}}}}});
        let v = CrdValidator::new(&ok, "s").unwrap();
        assert_eq!(
            msgs(&v.validate(
                &json!({"metadata": {"name": "much-too-long", "uid": "x"}}),
                None
            )),
            vec!["metadata.name: Too long: may not be more than 10 bytes"]
        );
        let bad = json!({"type": "object", "properties": {"metadata": {"type": "object",
            "properties": {"labels": {"type": "object"}}}}});
        assert_eq!(
            msgs(&CrdValidator::new(&bad, "s").unwrap_err()),
            vec![
                "s.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            ]
        );
    }

    #[test]
    fn cel_rules_evaluate_with_messages_reasons_and_blocking() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "integer", "maximum": 5}, "b": {"type": "integer"},
                           "n": {"type": "string", "maxLength": 2}},
            "x-kubernetes-validations": [
                {"rule": "self.a <= self.b", "message": "a must not exceed b"},
                {"rule": "self.b != 7", "reason": "FieldValueForbidden", "message": "no sevens"},
                {"rule": "self.b != 8"}]}}});
        let v = CrdValidator::new(&s, "").unwrap();
        assert!(
            v.validate(&json!({"spec": {"a": 1, "b": 2}}), None)
                .is_empty()
        );
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 3, "b": 2}}), None)),
            vec![r#"spec: Invalid value: "object": a must not exceed b"#]
        );
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 1, "b": 7}}), None)),
            vec!["spec: Forbidden: no sevens"]
        );
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 1, "b": 8}}), None)),
            vec![r#"spec: Invalid value: "object": failed rule: self.b != 8"#]
        );
        // maxLength is blocking: CEL is skipped with upstream's summary error.
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 3, "b": 2, "n": "long"}}), None)),
            vec![
                "spec.n: Too long: may not be more than 2 bytes".to_owned(),
                format!(r#"<nil>: Invalid value: "null": {CEL_SKIPPED}"#),
            ]
        );
        // maximum is not blocking: both errors.
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 6, "b": 2}}), None)),
            vec![
                "spec.a: Invalid value: 6: spec.a in body should be less than or equal to 5",
                r#"spec: Invalid value: "object": a must not exceed b"#,
            ]
        );
    }

    #[test]
    fn unchanged_invalid_values_ratchet_on_update() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "maximum": 10},
            "name": {"type": "string"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer", "maximum": 100}},
                    "x-kubernetes-validations": [{"rule": "self.port != 13", "message": "unlucky"}]}},
            "atomic": {"type": "array", "items": {"type": "integer", "maximum": 5}}}}}});
        let v = CrdValidator::new(&s, "").unwrap();
        let old = json!({"spec": {"replicas": 11, "name": "a",
            "ports": [{"name": "x", "port": 500}, {"name": "y", "port": 13}], "atomic": [9, 1]}});
        // Create: everything is reported.
        assert_eq!(v.validate(&old, None).len(), 4);
        // Update touching only `name` (and reordering the list-map): all ratcheted.
        let mut upd = old.clone();
        upd["spec"]["name"] = json!("b");
        upd["spec"]["ports"] = json!([{"name": "y", "port": 13}, {"name": "x", "port": 500}]);
        assert!(
            v.validate(&upd, Some(&old)).is_empty(),
            "{:?}",
            msgs(&v.validate(&upd, Some(&old)))
        );
        // Changed values are checked again; atomic list items are not correlated.
        let mut worse = old.clone();
        worse["spec"]["replicas"] = json!(12);
        worse["spec"]["ports"][1]["port"] = json!(14);
        worse["spec"]["ports"][0]["port"] = json!(13);
        worse["spec"]["atomic"] = json!([9, 2]);
        assert_eq!(
            msgs(&v.validate(&worse, Some(&old))),
            vec![
                "spec.atomic[0]: Invalid value: 9: spec.atomic[0] in body should be less than or equal to 5",
                "spec.replicas: Invalid value: 12: spec.replicas in body should be less than or equal to 10",
                r#"spec.ports[0]: Invalid value: "object": unlucky"#,
            ]
        );
    }

    #[test]
    fn bad_cel_rule_is_a_crd_error() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a <="}]}}});
        let errs = CrdValidator::new(&s, "p").unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .field
                .starts_with("p.properties[spec].x-kubernetes-validations[0].rule"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn validator_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CrdValidator>();
    }
}
