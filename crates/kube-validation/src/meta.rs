//! ObjectMeta rules (apimachinery `api/validation/objectmeta.go` plus the core finalizer rule).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::field::{BadValue, ErrorList, FieldError, FieldPath};
use crate::names::{is_qualified_name, is_valid_label_value, name_is_dns_label};

/// Validates a name (or, with `prefix`, a generateName prefix); returns the messages.
pub type NameFn = fn(&str, bool) -> Vec<String>;

/// Most bytes all annotation keys and values of one object may take together.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// Longest field manager name.
pub const MAX_FIELD_MANAGER_LENGTH: usize = 128;
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];
const FIELD_IMMUTABLE: &str = "field is immutable";

/// `ValidateLabels`: every key a qualified name, every value a label value. Errors carry the
/// path of the whole map, as upstream does.
pub fn validate_labels(labels: &BTreeMap<String, String>, path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    for (k, v) in labels {
        errs.extend(
            is_qualified_name(k)
                .into_iter()
                .map(|m| FieldError::invalid(path, k, m)),
        );
        errs.extend(
            is_valid_label_value(v)
                .into_iter()
                .map(|m| FieldError::invalid(path, v, m)),
        );
    }
    errs
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitive), total size ≤ 256 KiB.
pub fn validate_annotations(annotations: &BTreeMap<String, String>, path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations {
        errs.extend(
            is_qualified_name(&k.to_lowercase())
                .into_iter()
                .map(|m| FieldError::invalid(path, k, m)),
        );
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

fn owner_ref_text(r: &OwnerReference) -> String {
    format!(
        "{{apiVersion: {:?}, kind: {:?}, name: {:?}, uid: {:?}}}",
        r.api_version, r.kind, r.name, r.uid
    )
}

/// `ValidateOwnerReferences`.
pub fn validate_owner_references(refs: &[OwnerReference], path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in refs {
        let version = r.api_version.rsplit('/').next().unwrap_or_default();
        if version.is_empty() || r.api_version.split('/').count() > 2 {
            errs.push(FieldError::invalid(
                &path.child("apiVersion"),
                &r.api_version,
                "version must not be empty",
            ));
        }
        if r.kind.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("kind"),
                &r.kind,
                "kind must not be empty",
            ));
        }
        if r.name.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("name"),
                &r.name,
                "name must not be empty",
            ));
        }
        if r.uid.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("uid"),
                &r.uid,
                "uid must not be empty",
            ));
        }
        if r.api_version == "v1" && r.kind == "List" {
            errs.push(FieldError::invalid(
                path,
                BadValue::Raw(owner_ref_text(r)),
                "/v1, Kind=List is disallowed from being an owner",
            ));
        }
        if r.controller == Some(true) {
            let current = format!("{}/{}", r.kind, r.name);
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    BadValue::Raw(format!(
                        "[{}]",
                        refs.iter().map(owner_ref_text).collect::<Vec<_>>().join(", ")
                    )),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// `ValidateFinalizers` (plus the built-in-type rule that unqualified names must be standard).
pub fn validate_finalizers(finalizers: &[String], path: &FieldPath, builtin: bool) -> ErrorList {
    let mut errs = Vec::new();
    for f in finalizers {
        errs.extend(
            is_qualified_name(f)
                .into_iter()
                .map(|m| FieldError::invalid(path, f, m)),
        );
    }
    let orphan = finalizers.iter().any(|f| f == "orphan");
    let foreground = finalizers.iter().any(|f| f == "foregroundDeletion");
    if orphan && foreground {
        errs.push(FieldError::invalid(
            path,
            crate::field::go_json_strings(finalizers),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    if builtin {
        for (i, f) in finalizers.iter().enumerate() {
            if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f.as_str()) {
                errs.push(FieldError::invalid(
                    &path.index(i),
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    errs
}

/// The `Warning` headers the apiserver returns for custom-resource finalizers that are not
/// domain-qualified (they are accepted, unlike on built-in types).
pub fn finalizer_warnings(finalizers: &[String], path: &FieldPath) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| !f.contains('/'))
        .map(|f| {
            format!(
                "{path}: {}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers",
                crate::field::go_quote(f)
            )
        })
        .collect()
}

/// `ValidateObjectMeta` for an object being created or updated. `builtin` adds the rules
/// Kubernetes applies to its own types only (standard finalizer names).
pub fn validate_object_meta(
    meta: &ObjectMeta,
    requires_namespace: bool,
    name_fn: NameFn,
    path: &FieldPath,
    builtin: bool,
) -> ErrorList {
    let mut errs = Vec::new();
    if let Some(generate_name) = meta.generate_name.as_deref().filter(|g| !g.is_empty()) {
        errs.extend(
            name_fn(generate_name, true)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("generateName"), generate_name, m)),
        );
    }
    match meta.name.as_deref().filter(|n| !n.is_empty()) {
        None => errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        )),
        Some(name) => errs.extend(
            name_fn(name, false)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("name"), name, m)),
        ),
    }
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    if requires_namespace {
        if namespace.is_empty() {
            errs.push(FieldError::required(&path.child("namespace"), ""));
        } else {
            errs.extend(
                name_is_dns_label(namespace, false)
                    .into_iter()
                    .map(|m| FieldError::invalid(&path.child("namespace"), namespace, m)),
            );
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("namespace"),
            "not allowed on this type",
        ));
    }
    if let Some(generation) = meta.generation.filter(|g| *g < 0) {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            generation,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(labels) = &meta.labels {
        errs.extend(validate_labels(labels, &path.child("labels")));
    }
    if let Some(annotations) = &meta.annotations {
        errs.extend(validate_annotations(
            annotations,
            &path.child("annotations"),
        ));
    }
    if let Some(refs) = &meta.owner_references {
        errs.extend(validate_owner_references(
            refs,
            &path.child("ownerReferences"),
        ));
    }
    if let Some(finalizers) = &meta.finalizers {
        errs.extend(validate_finalizers(
            finalizers,
            &path.child("finalizers"),
            builtin,
        ));
    }
    if let Some(managed) = &meta.managed_fields {
        let mf_path = path.child("managedFields");
        for (i, entry) in managed.iter().enumerate() {
            let p = mf_path.index(i);
            let op = entry.operation.as_deref().unwrap_or_default();
            if op != "Apply" && op != "Update" {
                errs.push(FieldError::invalid(
                    &p.child("operation"),
                    op,
                    "must be `Apply` or `Update`",
                ));
            }
            if let Some(ft) = entry
                .fields_type
                .as_deref()
                .filter(|f| !f.is_empty() && *f != "FieldsV1")
            {
                errs.push(FieldError::invalid(
                    &p.child("fieldsType"),
                    ft,
                    "must be `FieldsV1`",
                ));
            }
            let manager = entry.manager.as_deref().unwrap_or_default();
            if manager.len() > MAX_FIELD_MANAGER_LENGTH {
                errs.push(FieldError::too_long(
                    &p.child("manager"),
                    MAX_FIELD_MANAGER_LENGTH,
                ));
            } else if manager.chars().any(char::is_control) {
                errs.push(FieldError::invalid(
                    &p.child("manager"),
                    manager,
                    "invalid characters",
                ));
            }
        }
    }
    errs
}

fn immutable<T: PartialEq>(
    new: &T,
    old: &T,
    path: &FieldPath,
    shown: BadValue,
) -> Option<FieldError> {
    (new != old).then(|| FieldError::invalid(path, shown, FIELD_IMMUTABLE))
}

/// `ValidateObjectMetaUpdate`: identity and lifecycle fields the server owns may not change,
/// a resourceVersion is required, generation may not decrease, no finalizer may be added to an
/// object being deleted. Run it together with [`validate_object_meta`] on the new object.
pub fn validate_object_meta_update(
    new: &ObjectMeta,
    old: &ObjectMeta,
    path: &FieldPath,
) -> ErrorList {
    let mut errs = Vec::new();
    if old.deletion_timestamp.is_some() {
        let old_f = old.finalizers.as_deref().unwrap_or_default();
        for f in new.finalizers.as_deref().unwrap_or_default() {
            if !old_f.contains(f) {
                errs.push(FieldError::forbidden(
                    &path.child("finalizers"),
                    format!("no new finalizers can be added if the object is being deleted, found new finalizers [\"{f}\"]"),
                ));
            }
        }
    }
    let rv = new.resource_version.as_deref().unwrap_or_default();
    if rv.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("resourceVersion"),
            rv,
            "must be specified for an update",
        ));
    }
    let (new_gen, old_gen) = (new.generation.unwrap_or(0), old.generation.unwrap_or(0));
    if new_gen < old_gen {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            new_gen,
            "must not be decremented",
        ));
    }
    let text = |s: &Option<String>| BadValue::from(s.clone().unwrap_or_default());
    let time = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| match t {
        Some(t) => BadValue::Raw(t.0.to_string()),
        None => BadValue::Null,
    };
    let fields = [
        immutable(&new.name, &old.name, &path.child("name"), text(&new.name)),
        immutable(
            &new.namespace,
            &old.namespace,
            &path.child("namespace"),
            text(&new.namespace),
        ),
        immutable(&new.uid, &old.uid, &path.child("uid"), text(&new.uid)),
        immutable(
            &new.creation_timestamp,
            &old.creation_timestamp,
            &path.child("creationTimestamp"),
            time(&new.creation_timestamp),
        ),
        immutable(
            &new.deletion_timestamp,
            &old.deletion_timestamp,
            &path.child("deletionTimestamp"),
            time(&new.deletion_timestamp),
        ),
        immutable(
            &new.deletion_grace_period_seconds,
            &old.deletion_grace_period_seconds,
            &path.child("deletionGracePeriodSeconds"),
            new.deletion_grace_period_seconds
                .map_or(BadValue::Null, BadValue::Int),
        ),
    ];
    errs.extend(fields.into_iter().flatten());
    errs
}

/// `ValidateImmutableField` for a string field.
pub fn validate_immutable_str(new: &str, old: &str, path: &FieldPath) -> ErrorList {
    immutable(&new, &old, path, BadValue::from(new))
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::name_is_dns_subdomain;

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            ..ObjectMeta::default()
        }
    }

    fn check(m: &ObjectMeta) -> Vec<String> {
        validate_object_meta(
            m,
            true,
            name_is_dns_subdomain,
            &FieldPath::new("metadata"),
            true,
        )
        .iter()
        .map(ToString::to_string)
        .collect()
    }

    #[test]
    fn name_or_generate_name_is_required() {
        let mut m = meta("x");
        m.name = None;
        assert_eq!(
            check(&m),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
    }

    #[test]
    fn name_must_be_dns_subdomain() {
        let errs = check(&meta("Web_1"));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with(
            "metadata.name: Invalid value: \"Web_1\": a lowercase RFC 1123 subdomain"
        ));
    }

    #[test]
    fn namespace_required_for_namespaced_types() {
        let mut m = meta("x");
        m.namespace = None;
        assert_eq!(check(&m), vec!["metadata.namespace: Required value"]);
    }

    #[test]
    fn namespace_forbidden_for_cluster_scoped_types() {
        let errs = validate_object_meta(
            &meta("x"),
            false,
            name_is_dns_subdomain,
            &FieldPath::new("metadata"),
            true,
        );
        assert_eq!(
            errs[0].to_string(),
            "metadata.namespace: Forbidden: not allowed on this type"
        );
    }

    #[test]
    fn label_keys_and_values_are_checked_against_the_map_path() {
        let mut m = meta("x");
        m.labels = Some(BTreeMap::from([(
            "ok/k".to_owned(),
            "bad value".to_owned(),
        )]));
        let errs = check(&m);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with(
                "metadata.labels: Invalid value: \"bad value\": a valid label must be"
            )
        );
    }

    #[test]
    fn annotation_keys_are_case_insensitive_and_size_capped() {
        let mut m = meta("x");
        m.annotations = Some(BTreeMap::from([(
            "Example.com/Key".to_owned(),
            "v".repeat(300_000),
        )]));
        assert_eq!(
            check(&m),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }

    #[test]
    fn only_one_controller_owner_reference() {
        let r = |name: &str| OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(true),
            ..OwnerReference::default()
        };
        let mut m = meta("x");
        m.owner_references = Some(vec![r("a"), r("b")]);
        let errs = validate_object_meta(
            &m,
            true,
            name_is_dns_subdomain,
            &FieldPath::new("metadata"),
            true,
        );
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .detail
                .contains("Found \"true\" in references for Service/a and Service/b")
        );
    }

    #[test]
    fn owner_reference_requires_uid_and_version() {
        let mut m = meta("x");
        m.owner_references = Some(vec![OwnerReference {
            api_version: "portmapper.dev/".into(),
            kind: "PortMapping".into(),
            name: "pm".into(),
            ..OwnerReference::default()
        }]);
        let errs = check(&m);
        assert_eq!(
            errs,
            vec![
                "metadata.ownerReferences.apiVersion: Invalid value: \"portmapper.dev/\": version must not be empty",
                "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty",
            ]
        );
    }

    #[test]
    fn unqualified_custom_finalizer_rejected_on_builtin_types() {
        let mut m = meta("x");
        m.finalizers = Some(vec![
            "mine".into(),
            "example.com/ok".into(),
            "kubernetes".into(),
        ]);
        assert_eq!(
            check(&m),
            vec![
                "metadata.finalizers[0]: Invalid value: \"mine\": name is neither a standard finalizer name nor is it fully qualified"
            ]
        );
    }

    #[test]
    fn custom_resource_finalizers_without_domain_only_warn() {
        let mut m = meta("x");
        m.finalizers = Some(vec!["mine".into(), "example.com/ok".into()]);
        let errs = validate_object_meta(
            &m,
            true,
            name_is_dns_subdomain,
            &FieldPath::new("metadata"),
            false,
        );
        assert!(errs.is_empty());
        assert_eq!(
            finalizer_warnings(
                m.finalizers.as_deref().unwrap_or_default(),
                &FieldPath::new("metadata").child("finalizers")
            ),
            vec![
                r#"metadata.finalizers: "mine": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"#
            ]
        );
    }

    #[test]
    fn update_requires_resource_version_and_keeps_identity() {
        let mut old = meta("x");
        old.uid = Some("u1".into());
        let mut new = meta("y");
        new.uid = Some("u2".into());
        let errs: Vec<String> =
            validate_object_meta_update(&new, &old, &FieldPath::new("metadata"))
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            errs,
            vec![
                "metadata.resourceVersion: Invalid value: \"\": must be specified for an update",
                "metadata.name: Invalid value: \"y\": field is immutable",
                "metadata.uid: Invalid value: \"u2\": field is immutable",
            ]
        );
    }
}
