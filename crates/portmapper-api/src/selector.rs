//! The schema of `spec.pods.selector`. The field stays k8s-openapi's `LabelSelector` (what the
//! operator hands to the pod watch), but its generated schema validates nothing; this mirror
//! adds what apimachinery's `ValidateLabelSelector` checks, so the apiserver rejects a bad
//! selector at admission instead of the operator reporting `InvalidSpec` later.
//!
//! `matchLabels` keys are the one part left to [`crate::validate`]: a structural schema cannot
//! constrain map keys (no `propertyNames`), and a CEL rule over them has no size bound the
//! apiserver's cost estimator can use.

// Schema-only types: never constructed, read only by schemars.
#![allow(dead_code)]

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::fields::{
    LABEL_VALUE_MAX_LENGTH, LABEL_VALUE_PATTERN, QUALIFIED_NAME_MAX_LENGTH, QUALIFIED_NAME_PATTERN,
    QUALIFIED_NAME_PREFIX_MESSAGE, QUALIFIED_NAME_PREFIX_RULE, SELECTOR_MAX_ENTRIES,
};

/// A label selector: every `matchLabels` entry and every `matchExpressions` requirement must
/// match (they are ANDed). An empty selector matches every pod of the pool.
#[derive(Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SelectorSchema {
    /// Label requirements, ANDed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = SELECTOR_MAX_ENTRIES))]
    match_expressions: Vec<RequirementSchema>,
    /// `{key: value}` pairs, each equivalent to a `matchExpressions` entry with operator `In`
    /// and that one value. Keys must be label keys: the operator checks them (`InvalidSpec`),
    /// since a schema cannot constrain map keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = SELECTOR_MAX_ENTRIES))]
    match_labels: BTreeMap<String, LabelValue>,
}

/// A label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric
/// (or empty).
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub(crate) struct LabelValue(
    #[schemars(length(max = LABEL_VALUE_MAX_LENGTH), regex(pattern = LABEL_VALUE_PATTERN))] String,
);

/// How a requirement relates its key to its values.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) enum Operator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present, whatever its value.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One requirement: a key, an operator and, for `In`/`NotIn` only, values.
#[derive(Serialize, Deserialize, KubeSchema)]
#[x_kube(
    validation = kube::core::Rule::new(
        "!(self.operator == 'In' || self.operator == 'NotIn') || has(self.values) && size(self.values) > 0"
    )
    .message("must be specified when `operator` is 'In' or 'NotIn'")
    .reason(kube::core::Reason::FieldValueRequired)
    .field_path(".values"),
    validation = kube::core::Rule::new(
        "!(self.operator == 'Exists' || self.operator == 'DoesNotExist') || !has(self.values) || size(self.values) == 0"
    )
    .message("may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    .reason(kube::core::Reason::FieldValueForbidden)
    .field_path(".values")
)]
pub(crate) struct RequirementSchema {
    /// The label key the requirement applies to.
    #[schemars(
        length(min = 1, max = QUALIFIED_NAME_MAX_LENGTH),
        regex(pattern = QUALIFIED_NAME_PATTERN)
    )]
    #[x_kube(validation = kube::core::Rule::new(QUALIFIED_NAME_PREFIX_RULE).message(QUALIFIED_NAME_PREFIX_MESSAGE))]
    key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    operator: Operator,
    /// Values for `In` and `NotIn` (at least one); must be empty for `Exists` and
    /// `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = SELECTOR_MAX_ENTRIES))]
    values: Vec<LabelValue>,
}
