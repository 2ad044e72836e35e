//! Validation of a PortMapping spec in Rust, with apiserver-style field errors.
//!
//! The CRD schema and its CEL rules reject these mistakes at admission; this repeats every one of
//! them (and adds the one a schema cannot say: the syntax of `pods.selector.matchLabels` keys) so
//! the operator reports `InvalidSpec` for objects that reached it anyway: an older CRD, clusters
//! without CEL, objects restored from backups, or `render` on local files. The catalogue of
//! which check is enforced where is in `docs/operator.md`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_validation::field::{FieldError, FieldPath};
use kube_validation::names;

use crate::check::{Check, CheckKind, LeafCheck};
use crate::fields::KeySource;
use crate::spec::{PortMappingSpec, ProbeSettings};

/// Every problem in `spec`, in field order. Empty means valid.
pub fn validate_spec(spec: &PortMappingSpec) -> Vec<FieldError> {
    let root = FieldPath::new("spec");
    let mut errs = Vec::new();
    let svc = root.child("serviceRef").child("name");
    for msg in names::is_dns1123_label(&spec.service_ref.name) {
        errs.push(FieldError::invalid(
            &svc,
            spec.service_ref.name.as_str(),
            msg,
        ));
    }
    errs.extend(validate_pods(&root.child("pods"), spec));
    errs.extend(validate_ports(&root.child("ports"), spec));
    if let Some(checks) = &spec.default_checks {
        errs.extend(validate_checks(
            &root.child("defaultChecks"),
            checks,
            spec.probe.period_seconds,
        ));
    }
    if !(1..=1000).contains(&spec.max_endpoints_per_slice) {
        errs.push(FieldError::invalid(
            &root.child("maxEndpointsPerSlice"),
            i64::from(spec.max_endpoints_per_slice),
            "must be between 1 and 1000, inclusive",
        ));
    }
    errs.extend(validate_probe(&root.child("probe"), &spec.probe));
    if let Some(gate) = &spec.readiness_gate {
        let path = root.child("readinessGate").child("conditionType");
        let value = gate.condition_type.as_str();
        // The rule the API server applies to `spec.readinessGates[].conditionType`.
        for msg in names::is_qualified_name(value) {
            errs.push(FieldError::invalid(&path, value, msg));
        }
        if !value.contains('/') {
            errs.push(FieldError::invalid(
                &path,
                value,
                crate::spec::GATE_PREFIX_MESSAGE,
            ));
        }
        let max = crate::spec::GATE_TIMEOUT_MAX_SECONDS;
        if let Some(timeout) = gate.timeout_seconds
            && !(1..=max).contains(&timeout)
        {
            errs.push(FieldError::invalid(
                &root.child("readinessGate").child("timeoutSeconds"),
                i64::from(timeout),
                format!("must be between 1 and {max}, inclusive"),
            ));
        }
    }
    errs
}

/// `spec.pods`: the key, the pool value (label pools), the selector.
fn validate_pods(pods: &FieldPath, spec: &PortMappingSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for msg in names::is_qualified_name(&spec.pods.key) {
        errs.push(FieldError::invalid(
            &pods.child("key"),
            spec.pods.key.as_str(),
            msg,
        ));
    }
    if spec.pods.from == KeySource::Label {
        let value = spec.pool_value();
        for msg in names::is_valid_label_value(value) {
            errs.push(FieldError::invalid(&pods.child("value"), value, msg));
        }
    }
    if let Some(selector) = &spec.pods.selector {
        errs.extend(validate_selector(&pods.child("selector"), selector));
    }
    errs
}

/// `spec.ports`: names (DNS labels, unique) and each port's checks.
fn validate_ports(ports: &FieldPath, spec: &PortMappingSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rule) in spec.ports.iter().enumerate() {
        let path = ports.index(i);
        for msg in names::is_dns1123_label(&rule.name) {
            errs.push(FieldError::invalid(
                &path.child("name"),
                rule.name.as_str(),
                msg,
            ));
        }
        if spec.ports[..i].iter().any(|r| r.name == rule.name) {
            errs.push(FieldError::duplicate(
                &path.child("name"),
                rule.name.as_str(),
            ));
        }
        errs.extend(validate_checks(
            &path.child("checks"),
            &rule.checks,
            spec.probe.period_seconds,
        ));
    }
    errs
}

fn validate_probe(path: &FieldPath, probe: &ProbeSettings) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (field, value, max) in [
        ("periodSeconds", probe.period_seconds, 3600),
        ("timeoutSeconds", probe.timeout_seconds, 60),
        ("successThreshold", probe.success_threshold, 100),
        ("failureThreshold", probe.failure_threshold, 100),
    ] {
        if !(1..=max).contains(&value) {
            errs.push(FieldError::invalid(
                &path.child(field),
                i64::from(value),
                format!("must be between 1 and {max}, inclusive"),
            ));
        }
    }
    // A probe that may outlive its period would overlap the next one; kubelet-style timing
    // needs timeout <= period.
    if probe.timeout_seconds > probe.period_seconds {
        errs.push(FieldError::invalid(
            &path.child("timeoutSeconds"),
            i64::from(probe.timeout_seconds),
            format!("must not exceed periodSeconds ({})", probe.period_seconds),
        ));
    }
    errs
}

fn validate_checks(path: &FieldPath, checks: &[Check], period: i32) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, check) in checks.iter().enumerate() {
        let path = path.index(i);
        let kinds = check.kinds();
        if kinds.len() != 1 {
            errs.push(exactly_one(&path, &kinds));
            continue;
        }
        if let Some(CheckKind::AnyOf(leaves)) = check.kind() {
            let any = path.child("anyOf");
            if leaves.is_empty() {
                errs.push(FieldError::required(&any, "anyOf needs at least one check"));
            }
            for (j, leaf) in leaves.iter().enumerate() {
                errs.extend(validate_leaf(&any.index(j), leaf, period));
            }
        } else if let Some(kind) = check.kind() {
            errs.extend(validate_kind(&path, kind, period));
        }
    }
    errs
}

fn validate_leaf(path: &FieldPath, leaf: &LeafCheck, period: i32) -> Vec<FieldError> {
    let kinds = leaf.kinds();
    match leaf.kind() {
        Some(kind) => validate_kind(path, kind, period),
        None => vec![exactly_one(path, &kinds)],
    }
}

fn exactly_one(path: &FieldPath, kinds: &[CheckKind<'_>]) -> FieldError {
    if kinds.is_empty() {
        FieldError::required(path, "each check must set exactly one kind")
    } else {
        let names: Vec<&str> = kinds.iter().map(CheckKind::name).collect();
        FieldError::forbidden(
            path,
            format!(
                "each check must set exactly one kind, this one sets {}",
                names.join(", ")
            ),
        )
    }
}

fn validate_kind(path: &FieldPath, kind: CheckKind<'_>, period: i32) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = path.child(kind.name());
    match kind {
        CheckKind::Api(kind) => kind.validate(&path, period, &mut errs),
        CheckKind::Network(kind) => kind.validate(&path, period, &mut errs),
        // Its entries are validated one by one as leaves.
        CheckKind::AnyOf(_) => {}
    }
    errs
}

/// apimachinery's `ValidateLabelSelector`: key syntax, operators and their values.
fn validate_selector(path: &FieldPath, selector: &LabelSelector) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        let p = path.child("matchLabels");
        for msg in names::is_qualified_name(k) {
            errs.push(FieldError::invalid(&p, k.as_str(), msg));
        }
        for msg in names::is_valid_label_value(v) {
            errs.push(FieldError::invalid(&p, v.as_str(), msg));
        }
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = path.child("matchExpressions").index(i);
        for msg in names::is_qualified_name(&req.key) {
            errs.push(FieldError::invalid(&p.child("key"), req.key.as_str(), msg));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        &p.child("values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        &p.child("values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &p.child("operator"),
                other,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            )),
        }
        for (j, v) in values.iter().enumerate() {
            for msg in names::is_valid_label_value(v) {
                errs.push(FieldError::invalid(
                    &p.child("values").index(j),
                    v.as_str(),
                    msg,
                ));
            }
        }
    }
    errs
}
