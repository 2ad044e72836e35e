//! `docs/reference.md`: the PortMapping field reference, generated from the CRD's OpenAPI schema
//! (the same schema `crds/` holds), so the documentation cannot drift from what the API server
//! enforces. `make crds` writes it; a test fails when the committed file is stale.

use std::fmt::Write as _;

use kube::CustomResourceExt;
use serde_json::{Map, Value};

use crate::PortMapping;
use crate::crd::CrdError;

/// One documented object: its path and properties, so a later identical (or narrower) object
/// refers to it instead of repeating every row.
struct Documented {
    path: String,
    properties: Map<String, Value>,
}

struct Writer {
    out: String,
    documented: Vec<Documented>,
}

fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// A Markdown code span that survives backticks in `text`.
fn code(text: &str) -> String {
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

fn type_of(schema: &Value) -> String {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int or string".to_owned();
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("any");
    match ty {
        "array" => format!(
            "[]{}",
            schema
                .get("items")
                .map(type_of)
                .unwrap_or_else(|| "any".into())
        ),
        "object" if schema.get("properties").is_none() => {
            match schema.get("additionalProperties") {
                Some(v) => format!("map[string]{}", type_of(v)),
                None => "object".to_owned(),
            }
        }
        "integer" => match schema.get("format").and_then(Value::as_str) {
            Some(f) => format!("integer ({f})"),
            None => "integer".to_owned(),
        },
        other => other.to_owned(),
    }
}

/// Constraints the API server enforces on a field, in words.
fn constraints(schema: &Value, required: bool) -> Vec<String> {
    let mut out = Vec::new();
    if required {
        out.push("**required**".to_owned());
    }
    // Bounds are serialised as floats (`60.0`); every bound here is whole.
    #[allow(clippy::cast_possible_truncation)]
    let num = |k: &str| schema.get(k).and_then(Value::as_f64).map(|n| n as i64);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    match (num("minimum"), num("maximum")) {
        (Some(a), Some(b)) => out.push(format!("{a}–{b}")),
        (Some(a), None) => out.push(format!("≥ {a}")),
        (None, Some(b)) => out.push(format!("≤ {b}")),
        _ => {}
    }
    match (num("minLength"), num("maxLength")) {
        (Some(a), Some(b)) => out.push(format!("length {a}–{b}")),
        (None, Some(b)) => out.push(format!("length ≤ {b}")),
        (Some(a), None) => out.push(format!("length ≥ {a}")),
        _ => {}
    }
    match (num("minItems"), num("maxItems")) {
        (Some(a), Some(b)) => out.push(format!("{a}–{b} items")),
        (None, Some(b)) => out.push(format!("at most {b} items")),
        (Some(a), None) => out.push(format!("at least {a} items")),
        _ => {}
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        out.push(format!("pattern {}", code(p)));
    }
    if let Some(keys) = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
    {
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        out.push(format!("unique by `{}`", keys.join("`, `")));
    }
    if schema.get("minProperties").is_some() && schema.get("maxProperties").is_some() {
        out.push("exactly one field set".to_owned());
    } else if let Some(max) = num("maxProperties") {
        out.push(format!("at most {max} entries"));
    }
    out.extend(rules(schema));
    out
}

/// The messages of a schema's CEL rules, naming the field a rule reports on when it is not the
/// schema's own.
fn rules(schema: &Value) -> Vec<String> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|rule| {
            let m = rule.get("message").and_then(Value::as_str)?;
            Some(match rule.get("fieldPath").and_then(Value::as_str) {
                Some(field) => format!("rule on `{}`: {m}", field.trim_start_matches('.')),
                None => format!("rule: {m}"),
            })
        })
        .collect()
}

/// The object schema below a field: itself, or its array items.
fn object_below(schema: &Value) -> Option<&Map<String, Value>> {
    let target = match schema.get("type").and_then(Value::as_str) {
        Some("array") => schema.get("items")?,
        _ => schema,
    };
    target.get("properties").and_then(Value::as_object)
}

impl Writer {
    /// A documented object this one repeats (same fields, or a subset of at least two of them).
    fn same_as(&self, properties: &Map<String, Value>) -> Option<(String, Vec<String>)> {
        if properties.len() < 2 {
            return None;
        }
        self.documented.iter().find_map(|d| {
            let subset = properties
                .iter()
                .all(|(k, v)| d.properties.get(k) == Some(v));
            subset.then(|| {
                let missing = d
                    .properties
                    .keys()
                    .filter(|k| !properties.contains_key(*k))
                    .cloned()
                    .collect();
                (d.path.clone(), missing)
            })
        })
    }

    fn fields(&mut self, path: &str, schema: &Value) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        self.documented.push(Documented {
            path: path.to_owned(),
            properties: properties.clone(),
        });
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for (name, field) in properties {
            let field_path = format!("{path}.{name}");
            let mut description = field
                .get("description")
                .and_then(Value::as_str)
                .map(escape)
                .unwrap_or_default();
            let mut notes = constraints(field, required.contains(&name.as_str()));
            if let Some(items) = field.get("items") {
                notes.extend(
                    constraints(items, false)
                        .into_iter()
                        .map(|c| format!("each item: {c}")),
                );
            }
            if let Some(values) = field.get("additionalProperties").filter(|v| v.is_object()) {
                notes.extend(
                    constraints(values, false)
                        .into_iter()
                        .map(|c| format!("each value: {c}")),
                );
            }
            if !notes.is_empty() {
                let _ = write!(description, " <br>{}", escape(&notes.join("; ")));
            }
            let default = field
                .get("default")
                .map(|d| format!("`{d}`"))
                .unwrap_or_default();
            let _ = writeln!(
                self.out,
                "| `{field_path}` | {} | {default} | {description} |",
                escape(&type_of(field))
            );
            if let Some(props) = object_below(field) {
                let child = if field.get("type").and_then(Value::as_str) == Some("array") {
                    format!("{field_path}[]")
                } else {
                    field_path.clone()
                };
                match self.same_as(props) {
                    Some((same, missing)) => {
                        let except = if missing.is_empty() {
                            String::new()
                        } else {
                            format!(" except `{}`", missing.join("`, `"))
                        };
                        let _ = writeln!(
                            self.out,
                            "| `{child}.*` | | | The fields of `{same}`{except}. |"
                        );
                    }
                    // Depth first: an object's fields follow its own row.
                    None => {
                        let target = match field.get("items") {
                            Some(items) => items,
                            None => field,
                        };
                        self.fields(&child, target);
                    }
                }
            }
        }
    }
}

/// The reference page as Markdown.
pub fn reference_markdown() -> Result<String, CrdError> {
    let crd = serde_json::to_value(PortMapping::crd()).map_err(CrdError::Json)?;
    let root = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or(Value::Null);
    let mut w = Writer {
        out: String::new(),
        documented: Vec::new(),
    };
    w.out.push_str(
        "<!-- Generated by `make crds` (cargo run -p portmapper-api --bin crdgen -- --markdown) from the\n     CRD schema in crds/portmapper.dev_portmappings.yaml. Do not edit. -->\n\n",
    );
    w.out.push_str("# PortMapping reference\n\n");
    let _ = writeln!(
        w.out,
        "`{}/v1alpha1`, kind `PortMapping` (short name `pm`, namespaced). {}\n",
        crate::GROUP,
        root.get("description")
            .and_then(Value::as_str)
            .map(escape)
            .unwrap_or_default()
    );
    w.out.push_str(
        "Every field the API server accepts, with the constraints it enforces (schema and CEL \
         rules). A row `x.*` means the object at `x` has the same fields as an object documented \
         above. See [concepts](concepts.md) for what the fields mean together and \
         [membership checks](membership-checks.md) for the network checks.\n",
    );
    for section in ["spec", "status"] {
        let Some(schema) = root.pointer(&format!("/properties/{section}")) else {
            continue;
        };
        let _ = writeln!(w.out, "\n## `{section}`\n");
        if let Some(d) = schema.get("description").and_then(Value::as_str) {
            let _ = writeln!(w.out, "{}\n", escape(d));
        }
        for rule in rules(schema) {
            let _ = writeln!(w.out, "- {}", escape(&rule.replacen("rule", "Rule", 1)));
        }
        if schema.get("x-kubernetes-validations").is_some() {
            w.out.push('\n');
        }
        w.out
            .push_str("| Field | Type | Default | Description |\n| --- | --- | --- | --- |\n");
        w.fields(section, schema);
    }
    Ok(w.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `make crds` regenerates it; this catches a type change without a regeneration.
    #[test]
    fn committed_reference_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reference.md");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        let generated = reference_markdown().unwrap();
        assert!(
            committed == generated,
            "docs/reference.md is out of date; run `make crds` and commit the result"
        );
    }

    #[test]
    fn every_spec_field_is_documented() {
        let page = reference_markdown().unwrap();
        for field in [
            "`spec.serviceRef.name`",
            "`spec.pods.key`",
            "`spec.defaultChecks[].httpGet.path`",
            "`spec.ports[].checks[].*`",
            "`spec.defaultChecks[].anyOf[].*`",
            "`spec.probe.failureThreshold`",
            "`status.ports[].excluded[].reason`",
        ] {
            assert!(page.contains(field), "{field} missing");
        }
    }
}
