//! The structural-schema check of a CRD version and the compilation of its patterns and CEL
//! rules (errors are 422 causes on the CRD).

use super::{additional, is_true, join, props, str_of};
use crate::field_error::FieldError;
use regex::Regex;
use serde_json::Value;
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Level {
    Root,
    Item,
    Field,
}

/// apiextensions' structural-schema invariants (the subset that decides servability).
pub(super) fn structural_check(s: &Value, path: &str, level: Level, errs: &mut Vec<FieldError>) {
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
pub(super) fn collect(
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

pub(super) fn cel_compile_errors(
    c: &kube_cel::CompiledSchema,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
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
