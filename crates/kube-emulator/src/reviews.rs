//! `authorization.k8s.io/v1` access reviews, answered as an API server started with
//! `--authorization-mode=AlwaysAllow` answers them: the emulator authorizes nothing, so every
//! request is allowed and the rules are `*`. Reviews are create-only and never stored (as
//! upstream); `kubectl auth can-i` posts them.

use serde_json::{Value, json};

use crate::error::ApiError;

/// The review resources, namespaced or not as upstream.
const REVIEWS: &[(&str, &str, bool)] = &[
    ("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
    ("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
    ("subjectaccessreviews", "SubjectAccessReview", false),
    (
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        true,
    ),
];

/// The group of the review resources.
pub const GROUP: &str = "authorization.k8s.io";

/// `(plural, kind, namespaced)` of a review resource.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<(&'static str, bool)> {
    if group != GROUP || version != "v1" {
        return None;
    }
    REVIEWS
        .iter()
        .find(|(p, _, _)| *p == plural)
        .map(|(_, k, n)| (*k, *n))
}

/// Every review resource, for discovery: `(plural, kind, namespaced)`.
pub fn all() -> &'static [(&'static str, &'static str, bool)] {
    REVIEWS
}

/// Answer a POSTed review: the object with the status an AlwaysAllow authorizer computes.
pub fn answer(kind: &str, mut obj: Value) -> Result<Value, ApiError> {
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => {}
        Some(k) if k == kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({kind})"
            )));
        }
    }
    let status = if kind == "SelfSubjectRulesReview" {
        // AlwaysAllow's RulesFor: everything, and the list is complete.
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false
        })
    } else {
        json!({"allowed": true})
    };
    let Some(m) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    m.insert("apiVersion".into(), json!(format!("{GROUP}/v1")));
    m.insert("kind".into(), json!(kind));
    m.entry("metadata").or_insert_with(|| json!({}));
    m.insert("status".into(), status);
    Ok(obj)
}
