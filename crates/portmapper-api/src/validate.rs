//! Validation of a PortMapping spec in Rust, with apiserver-style field errors.
//!
//! The CRD schema and its CEL rules reject these mistakes at admission; this repeats every one of
//! them (and adds the one a schema cannot say: the syntax of `pods.selector.matchLabels` keys) so
//! the operator reports `InvalidSpec` for objects that reached it anyway: an older CRD, clusters
//! without CEL, objects restored from backups, or `render` on local files. The catalogue of
//! which check is enforced where is in `docs/operator.md`.
//!
//! This module walks the spec and lists each field's rules; [`rules::check`] judges them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_validation::field::{FieldError, FieldPath};

use crate::check::{Check, CheckKind, EXACTLY_ONE_MESSAGE};
use crate::fields::KeySource;
use crate::rules::{self, FieldRule, Rule};
use crate::spec::{
    GATE_PREFIX_MESSAGE, GATE_TIMEOUT_MAX_SECONDS, MAX_NETWORK_CHECKS_IN_PORTS,
    MAX_NETWORK_CHECKS_PER_PORT, PER_PORT_MIN_ENDPOINTS_PER_SLICE, PER_PORT_SLICE_FLOOR_MESSAGE,
    PORT_NETWORK_CHECKS_MESSAGE, PORTS_NETWORK_CHECKS_MESSAGE, PortMappingSpec, ProbeSettings,
    SliceGrouping,
};

/// Every problem in `spec`, in field order. Empty means valid.
pub fn validate_spec(spec: &PortMappingSpec) -> Vec<FieldError> {
    rules::check(&spec_rules(spec))
}

/// The rules of `spec`'s fields, in field order.
pub fn spec_rules(spec: &PortMappingSpec) -> Vec<FieldRule<'_>> {
    let root = FieldPath::new("spec");
    let mut out = vec![FieldRule {
        path: root.child("serviceRef").child("name"),
        rule: Rule::Dns1123Label(&spec.service_ref.name),
    }];
    pods(&root.child("pods"), spec, &mut out);
    ports(&root.child("ports"), spec, &mut out);
    if let Some(checks) = &spec.default_checks {
        let period = spec.probe.period_seconds;
        self::checks(&root.child("defaultChecks"), checks, period, &mut out);
    }
    out.push(FieldRule {
        path: root.child("maxEndpointsPerSlice"),
        rule: between(spec.max_endpoints_per_slice, 1, 1000),
    });
    if spec.slice_grouping == SliceGrouping::PerPort {
        out.push(FieldRule {
            path: root.child("maxEndpointsPerSlice"),
            rule: Rule::AtLeast {
                value: spec.max_endpoints_per_slice.into(),
                min: PER_PORT_MIN_ENDPOINTS_PER_SLICE.into(),
                detail: PER_PORT_SLICE_FLOOR_MESSAGE,
            },
        });
    }
    probe(&root.child("probe"), &spec.probe, &mut out);
    if let Some(gate) = &spec.readiness_gate {
        let path = root.child("readinessGate");
        let condition_type = gate.condition_type.as_str();
        // The rule the API server applies to `spec.readinessGates[].conditionType`.
        out.push(FieldRule {
            path: path.child("conditionType"),
            rule: Rule::QualifiedName(condition_type),
        });
        out.push(FieldRule {
            path: path.child("conditionType"),
            rule: Rule::Contains {
                value: condition_type,
                part: "/",
                detail: GATE_PREFIX_MESSAGE,
            },
        });
        if let Some(timeout) = gate.timeout_seconds {
            out.push(FieldRule {
                path: path.child("timeoutSeconds"),
                rule: between(timeout, 1, GATE_TIMEOUT_MAX_SECONDS),
            });
        }
    }
    out
}

fn between<'a>(value: i32, min: i32, max: i32) -> Rule<'a> {
    Rule::Between {
        value: value.into(),
        min: min.into(),
        max: max.into(),
    }
}

/// `spec.pods`: the key, the pool value (label pools), the selector.
fn pods<'a>(path: &FieldPath, spec: &'a PortMappingSpec, out: &mut Vec<FieldRule<'a>>) {
    out.push(FieldRule {
        path: path.child("key"),
        rule: Rule::QualifiedName(&spec.pods.key),
    });
    if spec.pods.from == KeySource::Label {
        out.push(FieldRule {
            path: path.child("value"),
            rule: Rule::LabelValue(spec.pool_value()),
        });
    }
    if let Some(selector) = &spec.pods.selector {
        self::selector(&path.child("selector"), selector, out);
    }
}

/// `spec.ports`: names (DNS labels, unique) and each port's checks.
fn ports<'a>(path: &FieldPath, spec: &'a PortMappingSpec, out: &mut Vec<FieldRule<'a>>) {
    for (i, rule) in spec.ports.iter().enumerate() {
        let path = path.index(i);
        out.push(FieldRule {
            path: path.child("name"),
            rule: Rule::Dns1123Label(&rule.name),
        });
        out.push(FieldRule {
            path: path.child("name"),
            rule: Rule::Unique {
                value: &rule.name,
                earlier: spec.ports[..i].iter().map(|r| r.name.as_str()).collect(),
            },
        });
        let period = spec.probe.period_seconds;
        checks(&path.child("checks"), &rule.checks, period, out);
    }
    let in_ports: usize = spec.ports.iter().map(|r| network_checks(&r.checks)).sum();
    out.push(FieldRule {
        path: path.clone(),
        rule: at_most(
            in_ports,
            MAX_NETWORK_CHECKS_IN_PORTS,
            PORTS_NETWORK_CHECKS_MESSAGE,
        ),
    });
}

/// Network checks of a list, each `anyOf` entry counted ([`Check::network_positions`]).
fn network_checks(checks: &[Check]) -> usize {
    checks.iter().map(Check::network_positions).sum()
}

fn at_most<'a>(value: usize, max: usize, detail: &'static str) -> Rule<'a> {
    let wide = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    Rule::AtMost {
        value: wide(value),
        max: wide(max),
        detail,
    }
}

fn probe<'a>(path: &FieldPath, probe: &ProbeSettings, out: &mut Vec<FieldRule<'a>>) {
    for (field, value, max) in [
        ("periodSeconds", probe.period_seconds, 3600),
        ("timeoutSeconds", probe.timeout_seconds, 60),
        ("successThreshold", probe.success_threshold, 100),
        ("failureThreshold", probe.failure_threshold, 100),
    ] {
        out.push(FieldRule {
            path: path.child(field),
            rule: between(value, 1, max),
        });
    }
    // A probe that may outlive its period would overlap the next one; kubelet-style timing
    // needs timeout <= period.
    out.push(FieldRule {
        path: path.child("timeoutSeconds"),
        rule: Rule::NotAbove {
            value: probe.timeout_seconds.into(),
            max: probe.period_seconds.into(),
            bound: "periodSeconds",
        },
    });
}

/// A list of checks; `period` is `spec.probe.periodSeconds`, which bounds every timeout.
fn checks<'a>(path: &FieldPath, checks: &'a [Check], period: i32, out: &mut Vec<FieldRule<'a>>) {
    out.push(FieldRule {
        path: path.clone(),
        rule: at_most(
            network_checks(checks),
            MAX_NETWORK_CHECKS_PER_PORT,
            PORT_NETWORK_CHECKS_MESSAGE,
        ),
    });
    for (i, check) in checks.iter().enumerate() {
        let path = path.index(i);
        let Some(kind) = check.kind() else {
            out.push(exactly_one(path, &check.kinds()));
            continue;
        };
        let CheckKind::AnyOf(leaves) = kind else {
            self::kind(&path, kind, period, out);
            continue;
        };
        let path = path.child("anyOf");
        out.push(FieldRule {
            path: path.clone(),
            rule: Rule::NotEmpty {
                len: leaves.len(),
                detail: "anyOf needs at least one check",
            },
        });
        for (j, leaf) in leaves.iter().enumerate() {
            match leaf.kind() {
                Some(kind) => self::kind(&path.index(j), kind, period, out),
                None => out.push(exactly_one(path.index(j), &leaf.kinds())),
            }
        }
    }
}

/// The rule of a check (or leaf) that sets no kind or several.
fn exactly_one<'a>(path: FieldPath, kinds: &[CheckKind<'_>]) -> FieldRule<'a> {
    FieldRule {
        path,
        rule: Rule::ExactlyOne {
            set: kinds.iter().map(CheckKind::name).collect(),
            detail: EXACTLY_ONE_MESSAGE,
        },
    }
}

/// The rules of one kind's parameters, at `path.<kind>`.
fn kind<'a>(path: &FieldPath, kind: CheckKind<'a>, period: i32, out: &mut Vec<FieldRule<'a>>) {
    let path = path.child(kind.name());
    match kind {
        CheckKind::Api(kind) => kind.rules(&path, period, out),
        CheckKind::Network(kind) => kind.rules(&path, period, out),
        // Its entries are validated one by one as leaves.
        CheckKind::AnyOf(_) => {}
    }
}

/// apimachinery's `ValidateLabelSelector`: key syntax, operators and their values.
fn selector<'a>(path: &FieldPath, selector: &'a LabelSelector, out: &mut Vec<FieldRule<'a>>) {
    for (k, v) in selector.match_labels.iter().flatten() {
        let path = path.child("matchLabels");
        out.push(FieldRule {
            path: path.clone(),
            rule: Rule::QualifiedName(k),
        });
        out.push(FieldRule {
            path,
            rule: Rule::LabelValue(v),
        });
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let path = path.child("matchExpressions").index(i);
        out.push(FieldRule {
            path: path.child("key"),
            rule: Rule::QualifiedName(&req.key),
        });
        let values = req.values.as_deref().unwrap_or_default();
        let rule = match req.operator.as_str() {
            "In" | "NotIn" => Rule::NotEmpty {
                len: values.len(),
                detail: "must be specified when `operator` is 'In' or 'NotIn'",
            },
            "Exists" | "DoesNotExist" => Rule::Empty {
                len: values.len(),
                detail: "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            },
            other => Rule::OneOf {
                value: other,
                supported: &["In", "NotIn", "Exists", "DoesNotExist"],
            },
        };
        let field = if matches!(rule, Rule::OneOf { .. }) {
            "operator"
        } else {
            "values"
        };
        out.push(FieldRule {
            path: path.child(field),
            rule,
        });
        for (j, v) in values.iter().enumerate() {
            out.push(FieldRule {
                path: path.child("values").index(j),
                rule: Rule::LabelValue(v),
            });
        }
    }
}
