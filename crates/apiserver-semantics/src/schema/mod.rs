//! CRD `openAPIV3Schema` handling (docs/emulator-spec.md §5.2–§5.5): structural check, pruning of
//! unknown fields and non-nullable nulls, defaulting, OpenAPI v3 value validation with
//! kube-openapi's message shapes, `x-kubernetes-list-type` invariants, and CEL
//! `x-kubernetes-validations` through `kube-cel`.
//!
//! Validation follows kube-openapi's validator order per node (type, junctors, string, format,
//! number, items, enum, object) and its early exits (first string failure only; a
//! min/maxProperties failure hides the node's children). Siblings come in schema key order,
//! where upstream iterates a Go map (random order); tests with one error per object are exact.
//! On update (`old` given) errors ratchet as in 1.33 (`CRDValidationRatcheting`): a node whose
//! value equals its correlated old value (by key for list-maps, by value for sets, never for
//! atomic list items) reports nothing, and CEL rules without `oldSelf` ratchet the same way.

use crate::field_error::{FieldError, go_quote};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use tracing::debug;

mod defaults;
mod listtype;
mod prune;
mod structural;
mod validate;

use defaults::default_node;
use prune::prune_node;
use structural::{Level, cel_compile_errors, collect, structural_check};

/// The summary error upstream adds instead of running CEL when the object already failed a
/// blocking structural check (`hasBlockingErr`); its field is a nil path, printed `<nil>`.
pub const CEL_SKIPPED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

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
            vec!["spec: Invalid value: a must not exceed b"]
        );
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 1, "b": 7}}), None)),
            vec!["spec: Forbidden: no sevens"]
        );
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 1, "b": 8}}), None)),
            vec!["spec: Invalid value: failed rule: self.b != 8"]
        );
        // maxLength is blocking: CEL is skipped with upstream's summary error.
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 3, "b": 2, "n": "long"}}), None)),
            vec![
                "spec.n: Too long: may not be more than 2 bytes".to_owned(),
                format!("<nil>: Invalid value: null: {CEL_SKIPPED}"),
            ]
        );
        // maximum is not blocking: both errors.
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"a": 6, "b": 2}}), None)),
            vec![
                "spec.a: Invalid value: 6: spec.a in body should be less than or equal to 5",
                "spec: Invalid value: a must not exceed b",
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
                "spec.ports[0]: Invalid value: unlucky",
            ]
        );
    }

    #[test]
    fn cel_errors_name_map_entries_with_brackets() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "limits": {"type": "object", "additionalProperties": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= 0", "message": "must not be negative"}]}}}}}});
        let v = CrdValidator::new(&s, "").unwrap();
        assert_eq!(
            msgs(&v.validate(&json!({"spec": {"limits": {"cpu": -1}}}), None)),
            vec!["spec.limits[cpu]: Invalid value: -1: must not be negative"]
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
