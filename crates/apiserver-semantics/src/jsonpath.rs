//! The JSONPath dialect of `additionalPrinterColumns` and `kubectl -o jsonpath` (k8s.io/client-go
//! `util/jsonpath`), the subset printer columns use: `.a.b`, `['a.b']`, `[0]`, `[-1]`, `[*]`,
//! `[0:2]`, `[0,2]`, `..name`, and filters `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `<=`,
//! `>`, `>=` and bare existence `[?(@.x)]`. Missing keys yield no match (AllowMissingKeys).

use serde_json::Value;

/// Why an expression could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid JSONPath {expr:?}: {reason}")]
pub struct JsonPathError {
    /// The expression.
    pub expr: String,
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Wildcard,
    Recursive(String),
    Index(i64),
    Union(Vec<i64>),
    Slice(Option<i64>, Option<i64>),
    Filter(Filter),
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    path: Vec<Step>,
    op: Option<(String, Value)>,
}

/// A parsed expression, reusable across objects.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses `expr` (with or without the surrounding `{}`).
    pub fn parse(expr: &str) -> Result<Self, JsonPathError> {
        let err = |reason: &str| JsonPathError {
            expr: expr.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = expr.trim();
        let inner = trimmed
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(trimmed)
            .trim();
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let steps = parse_steps(inner).map_err(|r| err(&r))?;
        Ok(Self { steps })
    }

    /// Every match in `object`, in document order.
    pub fn find<'a>(&self, object: &'a Value) -> Vec<&'a Value> {
        eval(&self.steps, vec![object])
    }
}

/// Evaluates `expr` against `object`; returns every match.
pub fn evaluate(expr: &str, object: &Value) -> Result<Vec<Value>, JsonPathError> {
    Ok(JsonPath::parse(expr)?
        .find(object)
        .into_iter()
        .cloned()
        .collect())
}

/// How the jsonpath printer renders one value: strings raw, scalars as text, composites as
/// compact JSON.
pub fn to_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn parse_steps(mut s: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    while !s.is_empty() {
        if let Some(rest) = s.strip_prefix("..") {
            let (name, rest) = take_name(rest);
            if name.is_empty() {
                return Err("expected a field name after '..'".into());
            }
            steps.push(Step::Recursive(name.to_owned()));
            s = rest;
        } else if let Some(rest) = s.strip_prefix('.') {
            if let Some(rest2) = rest.strip_prefix('*') {
                steps.push(Step::Wildcard);
                s = rest2;
                continue;
            }
            let (name, rest) = take_name(rest);
            if !name.is_empty() {
                steps.push(Step::Field(name.to_owned()));
            }
            s = rest;
        } else if let Some(rest) = s.strip_prefix('[') {
            let close = matching_bracket(rest).ok_or("unterminated '['")?;
            let body = rest[..close].trim();
            steps.push(parse_bracket(body)?);
            s = &rest[close + 1..];
        } else {
            let (name, rest) = take_name(s);
            if name.is_empty() {
                return Err(format!("unexpected {:?}", s.chars().next().unwrap_or(' ')));
            }
            steps.push(Step::Field(name.to_owned()));
            s = rest;
        }
    }
    Ok(steps)
}

fn take_name(s: &str) -> (&str, &str) {
    let end = s.find(['.', '[']).unwrap_or(s.len());
    (s[..end].trim(), &s[end..])
}

/// Index of the `]` closing the bracket whose body starts at `s` (quotes and parens respected).
fn matching_bracket(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ']') if depth == 0 => return Some(i),
            (None, ']') => depth -= 1,
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
}

fn parse_bracket(body: &str) -> Result<Step, String> {
    if body == "*" {
        return Ok(Step::Wildcard);
    }
    if let Some(name) = unquote(body) {
        return Ok(Step::Field(name.to_owned()));
    }
    if let Some(f) = body.strip_prefix("?(").and_then(|b| b.strip_suffix(')')) {
        return parse_filter(f.trim()).map(Step::Filter);
    }
    if body.contains(':') {
        let mut parts = body.splitn(3, ':');
        let num = |p: Option<&str>| -> Result<Option<i64>, String> {
            match p.map(str::trim) {
                None | Some("") => Ok(None),
                Some(n) => n
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("bad slice bound {n:?}")),
            }
        };
        return Ok(Step::Slice(num(parts.next())?, num(parts.next())?));
    }
    if body.contains(',') {
        let idx: Result<Vec<i64>, _> = body.split(',').map(|p| p.trim().parse::<i64>()).collect();
        return idx
            .map(Step::Union)
            .map_err(|_| format!("bad union {body:?}"));
    }
    body.parse()
        .map(Step::Index)
        .map_err(|_| format!("bad index {body:?}"))
}

fn parse_filter(f: &str) -> Result<Filter, String> {
    for op in ["==", "!=", "<=", ">=", "<", ">"] {
        if let Some((lhs, rhs)) = f.split_once(op) {
            let path = parse_filter_path(lhs.trim())?;
            let rhs = rhs.trim();
            let value = match unquote(rhs) {
                Some(s) => Value::String(s.to_owned()),
                None => {
                    serde_json::from_str(rhs).map_err(|_| format!("bad filter value {rhs:?}"))?
                }
            };
            return Ok(Filter {
                path,
                op: Some((op.to_owned(), value)),
            });
        }
    }
    Ok(Filter {
        path: parse_filter_path(f)?,
        op: None,
    })
}

fn parse_filter_path(p: &str) -> Result<Vec<Step>, String> {
    let rest = p
        .strip_prefix('@')
        .ok_or_else(|| format!("filter must start with '@': {p:?}"))?;
    parse_steps(rest)
}

fn index_of(len: usize, i: i64) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let idx = if i < 0 { len + i } else { i };
    (0..len)
        .contains(&idx)
        .then(|| usize::try_from(idx).ok())
        .flatten()
}

fn eval<'a>(steps: &[Step], mut current: Vec<&'a Value>) -> Vec<&'a Value> {
    for step in steps {
        let mut next = Vec::new();
        for v in current {
            apply_step(step, v, &mut next);
        }
        current = next;
    }
    current
}

fn apply_step<'a>(step: &Step, v: &'a Value, out: &mut Vec<&'a Value>) {
    match step {
        Step::Field(name) => {
            if let Some(c) = v.get(name.as_str()) {
                out.push(c);
            }
        }
        Step::Wildcard => match v {
            Value::Array(items) => out.extend(items.iter()),
            Value::Object(m) => out.extend(m.values()),
            _ => {}
        },
        Step::Recursive(name) => recurse(v, name, out),
        Step::Index(i) => {
            if let Value::Array(items) = v
                && let Some(idx) = index_of(items.len(), *i)
            {
                out.push(&items[idx]);
            }
        }
        Step::Union(idx) => {
            if let Value::Array(items) = v {
                out.extend(
                    idx.iter()
                        .filter_map(|i| index_of(items.len(), *i))
                        .map(|i| &items[i]),
                );
            }
        }
        Step::Slice(start, end) => {
            if let Value::Array(items) = v {
                let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                let clamp = |b: i64| if b < 0 { (len + b).max(0) } else { b.min(len) };
                let s = clamp(start.unwrap_or(0));
                let e = clamp(end.unwrap_or(len));
                for i in s..e {
                    if let Ok(i) = usize::try_from(i) {
                        out.push(&items[i]);
                    }
                }
            }
        }
        Step::Filter(f) => {
            let candidates: Vec<&Value> = match v {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            for c in candidates {
                if filter_matches(f, c) {
                    out.push(c);
                }
            }
        }
    }
}

fn recurse<'a>(v: &'a Value, name: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            if let Some(c) = m.get(name) {
                out.push(c);
            }
            for c in m.values() {
                recurse(c, name, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|c| recurse(c, name, out)),
        _ => {}
    }
}

fn filter_matches(f: &Filter, item: &Value) -> bool {
    let found = eval(&f.path, vec![item]);
    let Some((op, want)) = &f.op else {
        return !found.is_empty();
    };
    found.iter().any(|got| compare(got, op, want))
}

fn compare(got: &Value, op: &str, want: &Value) -> bool {
    match op {
        "==" => loose_eq(got, want),
        "!=" => !loose_eq(got, want),
        _ => {
            let ord = match (got.as_f64(), want.as_f64()) {
                (Some(a), Some(b)) => a.partial_cmp(&b),
                _ => match (got.as_str(), want.as_str()) {
                    (Some(a), Some(b)) => Some(a.cmp(b)),
                    _ => None,
                },
            };
            matches!(
                (op, ord),
                ("<", Some(std::cmp::Ordering::Less))
                    | (
                        "<=",
                        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
                    )
                    | (">", Some(std::cmp::Ordering::Greater))
                    | (
                        ">=",
                        Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
                    )
            )
        }
    }
}

fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]},
            "status": {"conditions": [
                {"type": "Reconciling", "status": "False"},
                {"type": "Ready", "status": "True"}]}})
    }

    #[test]
    fn paths_filters_and_indexes() {
        let o = obj();
        assert_eq!(evaluate(".metadata.name", &o).unwrap(), vec![json!("web")]);
        assert_eq!(
            evaluate("{.metadata.name}", &o).unwrap(),
            vec![json!("web")]
        );
        assert_eq!(
            evaluate(r#".status.conditions[?(@.type=="Ready")].status"#, &o).unwrap(),
            vec![json!("True")]
        );
        assert_eq!(
            evaluate(".spec.ports[*].port", &o).unwrap(),
            vec![json!(80), json!(443)]
        );
        assert_eq!(
            evaluate(".spec.ports[-1].name", &o).unwrap(),
            vec![json!("https")]
        );
        assert_eq!(
            evaluate(".spec.ports[0:1].name", &o).unwrap(),
            vec![json!("http")]
        );
        assert_eq!(
            evaluate(".spec.ports[?(@.port > 100)].name", &o).unwrap(),
            vec![json!("https")]
        );
        assert_eq!(
            evaluate(".metadata.labels['app.kubernetes.io/name']", &o).unwrap(),
            vec![json!("web")]
        );
        assert_eq!(evaluate("..port", &o).unwrap(), vec![json!(80), json!(443)]);
        assert!(evaluate(".status.missing.deep", &o).unwrap().is_empty());
        assert!(evaluate(".spec.ports[", &o).is_err());
        assert_eq!(to_text(&json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(to_text(&json!(1.5)), "1.5");
    }
}
