//! Label selectors (full grammar, docs/emulator-spec.md §3.1) and field selectors (§3.2).

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<(String, Op)>);

fn parse_err(msg: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {msg}"))
}

fn split_top_level(s: &str) -> Vec<String> {
    // Commas inside `( … )` belong to a value set.
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn valid_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    });
    name_ok && prefix_ok
}

fn valid_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn parse_set(rest: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            let lit = rest.split_whitespace().next().unwrap_or_default();
            parse_err(format!("found '{lit}' expected: '('"))
        })?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if vals.is_empty() {
        return Err(parse_err(
            "for 'in', 'notin' operators, values set can't be empty",
        ));
    }
    for v in &vals {
        if !valid_value(v) {
            return Err(parse_err(format!("invalid label value: {v:?}")));
        }
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parse the selector grammar.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top_level(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(parse_err("found '', expected: identifier"));
            }
            let (key, op) = if let Some(k) = p.strip_prefix('!') {
                (k.trim().to_string(), Op::NotExists)
            } else if let Some((k, v)) = p.split_once("!=") {
                (k.trim().to_string(), Op::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once("==") {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('=') {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('>') {
                let n = v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| parse_err(format!("invalid integer value: {v}")))?;
                (k.trim().to_string(), Op::Gt(n))
            } else if let Some((k, v)) = p.split_once('<') {
                let n = v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| parse_err(format!("invalid integer value: {v}")))?;
                (k.trim().to_string(), Op::Lt(n))
            } else if let Some(idx) = find_word(p, "notin") {
                (
                    p[..idx].trim().to_string(),
                    Op::NotIn(parse_set(&p[idx + 5..])?),
                )
            } else if let Some(idx) = find_word(p, "in") {
                (
                    p[..idx].trim().to_string(),
                    Op::In(parse_set(&p[idx + 2..])?),
                )
            } else {
                (p.to_string(), Op::Exists)
            };
            if !valid_key(&key) {
                return Err(parse_err(format!("invalid label key {key:?}")));
            }
            if let Op::Eq(v) | Op::NotEq(v) = &op
                && !valid_value(v)
            {
                return Err(parse_err(format!("invalid label value: {v:?}")));
            }
            reqs.push((key, op));
        }
        Ok(Self(reqs))
    }

    /// True if the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Match against an object's labels.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|(k, op)| match op {
            Op::Eq(v) => get(k) == Some(v.as_str()),
            Op::NotEq(v) => get(k) != Some(v.as_str()),
            Op::In(vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Op::NotIn(vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Op::Exists => get(k).is_some(),
            Op::NotExists => get(k).is_none(),
            Op::Gt(n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Op::Lt(n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

fn find_word(p: &str, word: &str) -> Option<usize> {
    // `key in (…)`: the operator is a whitespace-delimited word (what follows must be a set).
    let bytes = p.as_bytes();
    let mut start = 0;
    while let Some(i) = p[start..].find(word).map(|i| i + start) {
        let before_ok = i > 0 && bytes[i - 1].is_ascii_whitespace();
        let after = &p[i + word.len()..];
        if before_ok && (after.starts_with('(') || after.starts_with(char::is_whitespace)) {
            return Some(i);
        }
        start = i + word.len();
    }
    None
}

/// A parsed field selector (`=`, `==`, `!=`; comma = AND; `\` escapes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            cur.push('\\');
            cur.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// Field selector fields supported per resource (beyond metadata.name/namespace).
fn extra_fields(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.host",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        _ => &[],
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    let path = match field {
        "spec.host" => "/spec/nodeName".to_string(),
        "source" => "/source/component".to_string(),
        f => format!("/{}", f.replace('.', "/")),
    };
    match obj.pointer(&path) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.get("ip").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(","),
        _ => match field {
            "spec.hostNetwork" | "spec.unschedulable" => "false".into(),
            _ => String::new(),
        },
    }
}

impl FieldSelector {
    /// Parse and check the fields are supported for the resource.
    pub fn parse(s: &str, group: &str, resource: &str, namespaced: bool) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_unescaped(s, ',') {
            let (field, eq, val) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim().to_string();
            let supported = field == "metadata.name"
                || (namespaced && field == "metadata.namespace")
                || extra_fields(group, resource).contains(&field.as_str());
            if !supported {
                // The conversion function of types without field labels of their own words it
                // so; types with some answer `field label not supported`.
                let msg = if extra_fields(group, resource).is_empty() {
                    format!(
                        "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )
                } else {
                    format!("field label not supported: {field}")
                };
                return Err(ApiError::bad_request(msg));
            }
            reqs.push((field, eq, unescape(val)));
        }
        Ok(Self(reqs))
    }

    /// Match an object.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(f, eq, v)| (field_value(obj, f) == *v) == *eq)
    }

    /// True if no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn grammar() {
        let o = obj(json!({"app": "web", "tier": "3"}));
        let t = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(t("app=web"));
        assert!(t("app==web,tier"));
        assert!(t("app in (web, db)"));
        assert!(!t("app notin (web)"));
        assert!(t("x notin (web)"));
        assert!(t("!x"));
        assert!(!t("!app"));
        assert!(t("tier>2"));
        assert!(!t("tier<2"));
        assert!(t("app!=db"));
        assert!(!t("app!=web"));
        // `!=` also selects objects without the label (the operator's watch of slices not
        // managed by it relies on this, as on a real API server).
        assert!(t("endpointslice.kubernetes.io/managed-by!=portmapper.dev"));
        assert!(t(""));
        assert!(LabelSelector::parse("app in ()").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn fields() {
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=a", "", "pods", true)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", "", "pods", true)
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("spec.foo=a", "", "services", true).is_err());
    }
}
