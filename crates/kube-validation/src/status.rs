//! The apiserver's 422 `Invalid` error assembled from field errors.

use crate::field::FieldError;

/// One `details.causes[]` entry of a `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: String,
    /// The error without its field path.
    pub message: String,
    /// The field path.
    pub field: String,
}

/// A rejected write: what the apiserver answers with HTTP 422, reason `Invalid`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", invalid_message(.kind, .group, .name, .errors))]
pub struct InvalidError {
    /// Kind of the object, e.g. `EndpointSlice`.
    pub kind: String,
    /// API group, empty for core.
    pub group: String,
    /// Object name.
    pub name: String,
    /// Every field error, in order (duplicates kept, as in `details.causes`).
    pub errors: Vec<FieldError>,
}

impl InvalidError {
    /// Builds the error; `None` when `errors` is empty (the write is valid).
    pub fn from_errors(
        kind: &str,
        group: &str,
        name: &str,
        errors: Vec<FieldError>,
    ) -> Option<Self> {
        (!errors.is_empty()).then(|| Self {
            kind: kind.to_owned(),
            group: group.to_owned(),
            name: name.to_owned(),
            errors,
        })
    }

    /// The `details.causes` of the Status.
    pub fn causes(&self) -> Vec<StatusCause> {
        self.errors
            .iter()
            .map(|e| StatusCause {
                reason: e.kind.reason().to_owned(),
                message: e.body(),
                field: e.field.clone(),
            })
            .collect()
    }

    /// The `details.kind` / `details.group` qualified kind, e.g. `EndpointSlice.discovery.k8s.io`.
    pub fn qualified_kind(&self) -> String {
        qualified_kind(&self.kind, &self.group)
    }
}

fn qualified_kind(kind: &str, group: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

/// The Status `message` of a 422: `<Kind>.<group> "<name>" is invalid: <errors>`, where several
/// errors are comma-joined inside `[...]` and repeated messages are shown once.
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let head = format!(
        "{} {} is invalid",
        qualified_kind(kind, group),
        crate::field::go_quote(name)
    );
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        0 => head,
        1 => format!("{head}: {}", seen[0]),
        _ => format!("{head}: [{}]", seen.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::FieldPath;

    #[test]
    fn single_error_is_not_bracketed() {
        let e = FieldError::too_many(&FieldPath::new("endpoints"), 1001, 1000);
        assert_eq!(
            invalid_message("EndpointSlice", "discovery.k8s.io", "web-x", &[e]),
            r#"EndpointSlice.discovery.k8s.io "web-x" is invalid: endpoints: Too many: 1001: must have at most 1000 items"#
        );
    }

    #[test]
    fn several_errors_are_bracketed_and_deduplicated() {
        let p = FieldPath::new("subsets")
            .index(0)
            .child("addresses")
            .index(0)
            .child("ip");
        let bad = FieldError::invalid(&p, "x", "must be a valid IP address");
        let req = FieldError::required(&FieldPath::new("metadata").child("namespace"), "");
        let err = InvalidError::from_errors("Endpoints", "", "web", vec![bad.clone(), bad, req]);
        let Some(err) = err else {
            panic!("expected an error")
        };
        assert_eq!(
            err.to_string(),
            r#"Endpoints "web" is invalid: [subsets[0].addresses[0].ip: Invalid value: "x": must be a valid IP address, metadata.namespace: Required value]"#
        );
        assert_eq!(err.causes().len(), 3, "causes keep duplicates");
        assert_eq!(err.causes()[2].reason, "FieldValueRequired");
        assert_eq!(
            err.causes()[0].message,
            r#"Invalid value: "x": must be a valid IP address"#
        );
    }

    #[test]
    fn no_errors_means_valid() {
        assert!(InvalidError::from_errors("Lease", "coordination.k8s.io", "l", vec![]).is_none());
    }
}
