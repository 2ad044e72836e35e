//! Field syntax shared by the spec and the checks: the name patterns and length bounds of the
//! schema, and where a key is read on a pod. Its own module so `spec` (which holds the checks)
//! and `check` both build on it without depending on each other.

use serde::{Deserialize, Serialize};

/// A Kubernetes qualified name (`[prefix/]name`, the syntax of label and annotation keys). The
/// exact length rules (prefix ≤ 253, name ≤ 63) are also checked in Rust by [`crate::validate`].
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A DNS-1123 label: the syntax of Service port names, and of Service names since Kubernetes
/// 1.36 (KEP-5311: `1st-api` is a valid Service name; older servers still want a leading letter,
/// and a PortMapping naming a Service they refused simply finds no Service).
pub const DNS1123_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
/// Longest qualified name: a 253-character prefix, '/', a 63-character name.
pub const QUALIFIED_NAME_MAX_LENGTH: u32 = 317;
/// CEL rule for what [`QUALIFIED_NAME_PATTERN`] cannot say: the prefix is at most 253
/// characters. A regex rather than `split`, which not every apiserver's CEL library has; cheap
/// because every field it is put on has `maxLength` [`QUALIFIED_NAME_MAX_LENGTH`]. The size
/// test first: only a value of 255 characters or more can break the rule, so the regex (which
/// some CEL libraries compile at every evaluation: it was most of the emulator's time when
/// 1,000 PortMappings wrote their status) runs only for those.
pub const QUALIFIED_NAME_PREFIX_RULE: &str = "size(self) < 255 || !self.matches('^[^/]{254,}/')";
/// Message of [`QUALIFIED_NAME_PREFIX_RULE`], worded as apimachinery's `IsDNS1123Subdomain`.
pub const QUALIFIED_NAME_PREFIX_MESSAGE: &str = "prefix part must be no more than 253 characters";
/// A label value (empty allowed), at most [`LABEL_VALUE_MAX_LENGTH`] characters.
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// Longest label value.
pub const LABEL_VALUE_MAX_LENGTH: u32 = 63;
/// An IANA service name (a named container port), apimachinery's `IsValidPortName` in one
/// regex: lowercase alphanumerics and single inner '-', with at least one letter. At most
/// [`IANA_SVC_NAME_MAX_LENGTH`] characters.
pub const IANA_SVC_NAME_PATTERN: &str = r"^([0-9]+-)*[0-9]*[a-z]([a-z0-9]|-[a-z0-9])*$";
/// Longest IANA service name.
pub const IANA_SVC_NAME_MAX_LENGTH: u32 = 15;
/// Most `matchLabels` entries and `matchExpressions` in `pods.selector`, and most `values` of
/// one expression: bounds so the selector's CEL rule has a known cost.
pub const SELECTOR_MAX_ENTRIES: u32 = 64;

/// Where a key is read on a pod.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum KeySource {
    /// `metadata.labels` (served by label-selector watches).
    #[default]
    Label,
    /// `metadata.annotations`.
    Annotation,
}

impl KeySource {
    /// `Annotation`, as a serde default.
    pub fn annotation() -> Self {
        Self::Annotation
    }
}
