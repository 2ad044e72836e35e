//! The small JSONPath dialect of `additionalPrinterColumns` (`.a.b`, `[0]`, `[*]`, `[?(@.k=="v")]`).

use serde_json::Value;

/// Evaluates `expr` (with or without `{}` braces) against `object`; returns every match.
pub fn evaluate(expr: &str, object: &Value) -> Result<Vec<Value>, String> {
    let _ = (expr, object);
    todo!("jsonpath")
}
