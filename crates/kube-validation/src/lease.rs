//! coordination.k8s.io/v1 Lease validation (`pkg/apis/coordination/validation`).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use crate::field::{ErrorList, FieldError, FieldPath};
use crate::meta::{validate_object_meta, validate_object_meta_update};
use crate::names::{is_qualified_name, name_is_dns_subdomain};

/// Strategies Kubernetes defines (unqualified names must be one of these).
pub const LEASE_STRATEGIES: [&str; 1] = ["OldestEmulationVersion"];

/// Validates a Lease being created.
pub fn validate_lease(lease: &Lease) -> ErrorList {
    let mut errs = validate_object_meta(
        &lease.metadata,
        true,
        name_is_dns_subdomain,
        &FieldPath::new("metadata"),
        true,
    );
    if let Some(spec) = &lease.spec {
        errs.extend(validate_lease_spec(spec, &FieldPath::new("spec")));
    }
    errs
}

/// Validates a Lease update (metadata update rules, then the spec).
pub fn validate_lease_update(new: &Lease, old: &Lease) -> ErrorList {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &FieldPath::new("metadata"));
    if let Some(spec) = &new.spec {
        errs.extend(validate_lease_spec(spec, &FieldPath::new("spec")));
    }
    errs
}

/// `ValidateLeaseSpec`.
pub fn validate_lease_spec(spec: &LeaseSpec, path: &FieldPath) -> ErrorList {
    let mut errs = Vec::new();
    if let Some(d) = spec.lease_duration_seconds.filter(|d| *d <= 0) {
        errs.push(FieldError::invalid(
            &path.child("leaseDurationSeconds"),
            d,
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec.lease_transitions.filter(|t| *t < 0) {
        errs.push(FieldError::invalid(
            &path.child("leaseTransitions"),
            t,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(strategy) = &spec.strategy {
        // Upstream reports this under `spec.strategy.strategy`; kept for fidelity.
        let p = path.child("strategy").child("strategy");
        if strategy.contains('/') {
            errs.extend(
                is_qualified_name(strategy)
                    .into_iter()
                    .map(|m| FieldError::invalid(&p, strategy, m)),
            );
        } else if !LEASE_STRATEGIES.contains(&strategy.as_str()) {
            errs.push(FieldError::not_supported(&p, strategy, &LEASE_STRATEGIES));
        }
    }
    let has_strategy = spec.strategy.as_deref().is_some_and(|s| !s.is_empty());
    if spec
        .preferred_holder
        .as_deref()
        .is_some_and(|h| !h.is_empty())
        && !has_strategy
    {
        errs.push(FieldError::forbidden(
            &path.child("preferredHolder"),
            "may only be specified if `strategy` is defined",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lease(spec: LeaseSpec) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("portmapper-leader".into()),
                namespace: Some("kube-system".into()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        }
    }

    fn msgs(l: &Lease) -> Vec<String> {
        validate_lease(l).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_lease_passes() {
        assert!(
            msgs(&lease(LeaseSpec {
                holder_identity: Some("pod-a".into()),
                lease_duration_seconds: Some(15),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }))
            .is_empty()
        );
    }

    #[test]
    fn lease_duration_must_be_positive() {
        assert_eq!(
            msgs(&lease(LeaseSpec {
                lease_duration_seconds: Some(0),
                ..LeaseSpec::default()
            })),
            vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]
        );
    }

    #[test]
    fn lease_transitions_not_negative() {
        assert_eq!(
            msgs(&lease(LeaseSpec {
                lease_transitions: Some(-1),
                ..LeaseSpec::default()
            })),
            vec!["spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"]
        );
    }

    #[test]
    fn strategy_known_or_qualified() {
        assert!(
            msgs(&lease(LeaseSpec {
                strategy: Some("OldestEmulationVersion".into()),
                ..LeaseSpec::default()
            }))
            .is_empty()
        );
        assert!(
            msgs(&lease(LeaseSpec {
                strategy: Some("example.com/mine".into()),
                ..LeaseSpec::default()
            }))
            .is_empty()
        );
        assert_eq!(
            msgs(&lease(LeaseSpec {
                strategy: Some("Newest".into()),
                ..LeaseSpec::default()
            })),
            vec![
                r#"spec.strategy.strategy: Unsupported value: "Newest": supported values: "OldestEmulationVersion""#
            ]
        );
    }

    #[test]
    fn preferred_holder_needs_strategy() {
        assert_eq!(
            msgs(&lease(LeaseSpec {
                preferred_holder: Some("pod-b".into()),
                ..LeaseSpec::default()
            })),
            vec!["spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"]
        );
    }

    #[test]
    fn update_without_resource_version_rejected() {
        let old = lease(LeaseSpec::default());
        let errs = validate_lease_update(&old.clone(), &old);
        assert_eq!(
            errs[0].to_string(),
            r#"metadata.resourceVersion: Invalid value: "": must be specified for an update"#
        );
    }
}
