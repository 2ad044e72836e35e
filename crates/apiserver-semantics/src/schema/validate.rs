//! OpenAPI v3 value validation with kube-openapi's messages and order, `x-kubernetes-list-type`
//! invariants, CEL rules through `kube-cel`, and update ratcheting.

use super::listtype::list_types;
use super::{
    CEL_SKIPPED, CrdValidator, additional, index, is_true, join, props, str_of, type_name,
};
use crate::field_error::{BadValue, FieldError, go_quote};
use serde_json::Value;

impl CrdValidator {
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
                        .map(|e| self.cel_error(e, object)),
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

    /// A failed rule as upstream reports it: on an object or a list the value is omitted
    /// (`Invalid value: <message>`), on a scalar it is the value the rule saw.
    fn cel_error(&self, e: &kube_cel::ValidationError, object: &Value) -> FieldError {
        let value = match self.rule_types.get(&e.rule).map(String::as_str) {
            Some("object" | "array") | None => BadValue::Omit,
            Some(_) => value_at(object, &e.field_path).map_or(BadValue::Omit, BadValue::from),
        };
        let rendered = cel_field_path(&self.schema, &e.field_path);
        let field = if rendered.is_empty() {
            "<nil>"
        } else {
            &rendered
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
                    errs.push(FieldError::too_many(path, items.len(), to_usize(max)));
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
                errs.push(FieldError::too_many(path, m.len(), to_usize(max)));
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
            errs.push(FieldError::too_long(path, to_usize(max)));
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

/// Upstream CEL errors name map entries `labels[key]` (`field.Path.Key`); kube-cel writes
/// `labels.key`. Re-render the path by walking the schema.
fn cel_field_path(schema: &Value, path: &str) -> String {
    let mut s = Some(schema);
    let mut out = String::new();
    for seg in path.split('.').filter(|x| !x.is_empty()) {
        let (name, indexes) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            let node = s;
            let declared = node.and_then(|n| props(n)).and_then(|p| p.get(name));
            match (declared, node.and_then(additional)) {
                (None, Some(a)) => {
                    out.push_str(&format!("[{name}]"));
                    s = Some(a);
                }
                _ => {
                    out = join(&out, name);
                    s = declared;
                }
            }
        }
        out.push_str(indexes);
        for _ in indexes.matches('[') {
            s = s.and_then(|n| n.get("items"));
        }
    }
    out
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

/// The value at a field path (`spec.ports[0].name`).
fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut n = v;
    for seg in path.split('.').filter(|x| !x.is_empty()) {
        let (name, indexes) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            n = n.get(name)?;
        }
        for idx in indexes.split(']').filter(|x| !x.is_empty()) {
            let idx = idx.trim_start_matches('[');
            n = match idx.parse::<usize>() {
                Ok(i) => n.as_array()?.get(i)?,
                Err(_) => n.get(idx.trim_matches('"'))?,
            };
        }
    }
    Some(n)
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

/// A schema limit as a count (limits beyond `usize` are unreachable anyway).
fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
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
