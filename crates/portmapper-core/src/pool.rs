//! Pool membership: does pod P belong to PortMapping M? (key/from/value, plus the optional
//! LabelSelector). Pure, so the operator's pod index and the planner agree by construction.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use portmapper_api::{KeySource, PortMappingSpec};

use crate::pod_record::{Pairs, PodRecord};

/// A LabelSelector the API would not accept as a selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// An operator other than In, NotIn, Exists, DoesNotExist.
    #[error(
        "spec.pods.selector: operator {operator:?} on key {key:?} is not one of In, NotIn, Exists, DoesNotExist"
    )]
    UnknownOperator {
        /// The key of the requirement.
        key: String,
        /// The operator given.
        operator: String,
    },
    /// In/NotIn without values, or Exists/DoesNotExist with values.
    #[error("spec.pods.selector: operator {operator} on key {key:?} {problem}")]
    BadValues {
        /// The key of the requirement.
        key: String,
        /// The operator given.
        operator: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Reads a label or annotation of a pod.
pub fn pod_key_value<'a>(pod: &'a PodRecord, key: &str, from: KeySource) -> Option<&'a str> {
    match from {
        KeySource::Label => pod.labels.get(key),
        KeySource::Annotation => pod.annotations.get(key),
    }
}

/// Whether `labels` satisfy `selector` (matchLabels AND every matchExpression). An empty
/// selector matches everything, as in Kubernetes.
pub fn selector_matches(selector: &LabelSelector, labels: &Pairs) -> Result<bool, SelectorError> {
    let get = |k: &str| labels.get(k);
    let mut matched = true;
    for (k, v) in selector.match_labels.iter().flatten() {
        matched &= get(k) == Some(v.as_str());
    }
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        let bad = |problem| SelectorError::BadValues {
            key: req.key.clone(),
            operator: req.operator.clone(),
            problem,
        };
        let ok = match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(bad("needs at least one value"));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(bad("takes no values"));
            }
            "In" => get(&req.key).is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" => get(&req.key).is_none_or(|v| values.iter().all(|x| x != v)),
            "Exists" => get(&req.key).is_some(),
            "DoesNotExist" => get(&req.key).is_none(),
            other => {
                return Err(SelectorError::UnknownOperator {
                    key: req.key.clone(),
                    operator: other.to_owned(),
                });
            }
        };
        matched &= ok;
    }
    Ok(matched)
}

/// Whether `pod` is in the pool of a PortMapping living in `namespace`: same namespace, its
/// label or annotation `pods.key` equals `pods.value` (default: the Service name), and it
/// matches `pods.selector` when one is set. An invalid selector is an error, never a match.
pub fn pod_in_pool(
    spec: &PortMappingSpec,
    namespace: &str,
    pod: &PodRecord,
) -> Result<bool, SelectorError> {
    if !pod.namespace.is_empty() && *pod.namespace != *namespace {
        return Ok(false);
    }
    if pod_key_value(pod, &spec.pods.key, spec.pods.from) != Some(spec.pool_value()) {
        // Still validate the selector so an invalid one is reported whatever the pods.
        if let Some(selector) = &spec.pods.selector {
            selector_matches(selector, &Pairs::default())?;
        }
        return Ok(false);
    }
    match &spec.pods.selector {
        Some(selector) => selector_matches(selector, &pod.labels),
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn spec(
        from: KeySource,
        value: Option<&str>,
        selector: Option<LabelSelector>,
    ) -> PortMappingSpec {
        let mut spec = test_support::spec("web", "example.com/group");
        spec.pods.from = from;
        spec.pods.value = value.map(Into::into);
        spec.pods.selector = selector;
        spec
    }

    fn pod(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> PodRecord {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            })
        };
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("shop".into()),
                labels: map(labels),
                annotations: map(annotations),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
        .into()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn label_key_defaults_value_to_service_name() {
        let s = spec(KeySource::Label, None, None);
        assert_eq!(
            pod_in_pool(&s, "shop", &pod(&[("example.com/group", "web")], &[])),
            Ok(true)
        );
        assert_eq!(
            pod_in_pool(&s, "shop", &pod(&[("example.com/group", "other")], &[])),
            Ok(false)
        );
        assert_eq!(
            pod_in_pool(&s, "shop", &pod(&[], &[("example.com/group", "web")])),
            Ok(false)
        );
    }

    #[test]
    fn annotation_key_reads_annotations() {
        let s = spec(KeySource::Annotation, Some("g1"), None);
        assert_eq!(
            pod_in_pool(&s, "shop", &pod(&[], &[("example.com/group", "g1")])),
            Ok(true)
        );
        assert_eq!(
            pod_in_pool(&s, "shop", &pod(&[("example.com/group", "g1")], &[])),
            Ok(false)
        );
    }

    #[test]
    fn other_namespace_never_in_pool() {
        let s = spec(KeySource::Label, None, None);
        assert_eq!(
            pod_in_pool(&s, "other", &pod(&[("example.com/group", "web")], &[])),
            Ok(false)
        );
    }

    #[test]
    fn selector_is_anded_with_the_key() {
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("tier".to_owned(), "broker".to_owned())])),
            match_expressions: Some(vec![req("canary", "DoesNotExist", &[])]),
        };
        let s = spec(KeySource::Label, None, Some(sel));
        let base = [("example.com/group", "web"), ("tier", "broker")];
        assert_eq!(pod_in_pool(&s, "shop", &pod(&base, &[])), Ok(true));
        assert_eq!(
            pod_in_pool(&s, "shop", &pod(&[("example.com/group", "web")], &[])),
            Ok(false)
        );
        let canary = [
            ("example.com/group", "web"),
            ("tier", "broker"),
            ("canary", "1"),
        ];
        assert_eq!(pod_in_pool(&s, "shop", &pod(&canary, &[])), Ok(false));
    }

    #[test]
    fn selector_operators_in_notin_exists() {
        let labels: Pairs = [("zone", "a")].into_iter().collect();
        let sel = |r| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![r]),
        };
        assert_eq!(
            selector_matches(&sel(req("zone", "In", &["a", "b"])), &labels),
            Ok(true)
        );
        assert_eq!(
            selector_matches(&sel(req("zone", "NotIn", &["a"])), &labels),
            Ok(false)
        );
        assert_eq!(
            selector_matches(&sel(req("other", "NotIn", &["a"])), &labels),
            Ok(true)
        );
        assert_eq!(
            selector_matches(&sel(req("zone", "Exists", &[])), &labels),
            Ok(true)
        );
        assert_eq!(
            selector_matches(&LabelSelector::default(), &Pairs::default()),
            Ok(true)
        );
    }

    #[test]
    fn invalid_selector_is_an_error_not_a_match() {
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req("zone", "Near", &["a"])]),
        };
        let s = spec(KeySource::Label, None, Some(sel));
        assert!(pod_in_pool(&s, "shop", &pod(&[("example.com/group", "web")], &[])).is_err());
        assert!(pod_in_pool(&s, "shop", &pod(&[], &[])).is_err());
        let empty_in = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req("zone", "In", &[])]),
        };
        assert!(selector_matches(&empty_in, &Pairs::default()).is_err());
    }
}
