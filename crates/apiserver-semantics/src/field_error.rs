//! Field errors: apimachinery's `field.Error` as `kube-validation` implements it once for both
//! crates (JSON bad values print through its `From<serde_json::Value>`, like Go's
//! `interface{}` values), and the 422 `Invalid` Status built from them (`errors.NewInvalid`).

use serde_json::{Value, json};

pub use kube_validation::field::{BadValue, ErrorType, FieldError, go_json, go_quote};

/// The 422 `Invalid` Status (`errors.NewInvalid`): message
/// `<Kind>.<group> "<name>" is invalid: <errors>`, `details.kind` is the Kind (not the resource).
pub fn invalid_status(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Value {
    let message = kube_validation::invalid_message(kind, group, name, errors);
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(kind));
    let causes = errors
        .iter()
        .map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field}))
        .collect();
    details.insert("causes".into(), Value::Array(causes));
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Invalid", "details": details, "code": 422
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_upstream_shapes() {
        assert_eq!(
            FieldError::invalid(
                "spec.name",
                "ab",
                "spec.name in body should be at least 3 chars long"
            )
            .to_string(),
            r#"spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long"#
        );
        assert_eq!(
            FieldError::required("spec.size", "").to_string(),
            "spec.size: Required value"
        );
        assert_eq!(
            FieldError::not_supported("spec.mode", "x", &["a", "b"]).to_string(),
            r#"spec.mode: Unsupported value: "x": supported values: "a", "b""#
        );
        assert_eq!(
            FieldError::too_many("endpoints", 1001, 1000).to_string(),
            "endpoints: Too many: 1001: must have at most 1000 items"
        );
        assert_eq!(
            FieldError::too_many("spec.c", 2, 1).to_string(),
            "spec.c: Too many: 2: must have at most 1 item"
        );
        assert_eq!(
            FieldError::too_long("spec.n", 63).to_string(),
            "spec.n: Too long: may not be more than 63 bytes"
        );
        assert_eq!(
            FieldError::duplicate("spec.ports[1]", json!({"name": "http"})).to_string(),
            r#"spec.ports[1]: Duplicate value: {"name":"http"}"#
        );
        assert_eq!(
            FieldError::invalid("<nil>", Value::Null, "x").to_string(),
            "<nil>: Invalid value: null: x"
        );
    }

    #[test]
    fn invalid_status_single_and_multiple() {
        let one = invalid_status(
            "discovery.k8s.io",
            "EndpointSlice",
            "web-x",
            &[FieldError::too_many("endpoints", 1001, 1000)],
        );
        assert_eq!(
            one["message"],
            r#"EndpointSlice.discovery.k8s.io "web-x" is invalid: endpoints: Too many: 1001: must have at most 1000 items"#
        );
        assert_eq!(one["details"]["causes"][0]["reason"], "FieldValueTooMany");
        assert_eq!(one["details"]["causes"][0]["field"], "endpoints");
        assert_eq!(one["details"]["kind"], "EndpointSlice");
        assert_eq!(one["code"], 422);
        let two = invalid_status(
            "",
            "Service",
            "s",
            &[
                FieldError::required("spec.ports", ""),
                FieldError::required("spec.ports", ""),
                FieldError::forbidden("spec.x", "no"),
            ],
        );
        assert_eq!(
            two["message"],
            r#"Service "s" is invalid: [spec.ports: Required value, spec.x: Forbidden: no]"#
        );
        assert!(two["details"].get("group").is_none());
    }
}
