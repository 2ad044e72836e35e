//! Rust-side validation: the same mistakes the schema rejects, with apiserver-style messages.

use portmapper_api::validate::validate_spec;

use crate::fixtures::{VALID, parse};

fn messages(yaml_edit: impl FnOnce(&mut portmapper_api::PortMappingSpec)) -> Vec<String> {
    let mut pm = parse(VALID);
    yaml_edit(&mut pm.spec);
    validate_spec(&pm.spec)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn valid_spec_has_no_errors() {
    assert_eq!(messages(|_| {}), Vec::<String>::new());
}

#[test]
fn bad_pool_key_is_reported_on_its_field() {
    let errs = messages(|s| s.pods.key = "-bad/".into());
    assert!(
        errs.iter()
            .any(|e| e.starts_with("spec.pods.key: Invalid value: \"-bad/\"")),
        "{errs:?}"
    );
}

#[test]
fn qualified_name_part_longer_than_63_is_rejected() {
    let errs = messages(|s| s.pods.key = format!("example.com/{}", "a".repeat(64)));
    assert!(
        errs.iter()
            .any(|e| e.contains("must be no more than 63 characters")),
        "{errs:?}"
    );
}

#[test]
fn duplicate_port_rules_are_reported() {
    let errs = messages(|s| {
        let dup = s.ports[0].clone();
        s.ports.push(dup);
    });
    assert!(
        errs.iter()
            .any(|e| e == "spec.ports[2].name: Duplicate value: \"http\""),
        "{errs:?}"
    );
}

#[test]
fn two_kinds_in_one_check_are_named() {
    let errs = messages(|s| s.ports[0].checks[0].not_terminating = Some(Default::default()));
    assert!(
        errs.iter().any(
            |e| e.contains("spec.ports[0].checks[0]") && e.contains("podReady, notTerminating")
        ),
        "{errs:?}"
    );
}

#[test]
fn out_of_range_numbers_are_reported() {
    let errs = messages(|s| {
        s.max_endpoints_per_slice = 1001;
        s.probe.timeout_seconds = 0;
    });
    assert!(
        errs.iter()
            .any(|e| e.starts_with("spec.maxEndpointsPerSlice: Invalid value: 1001")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("spec.probe.timeoutSeconds: Invalid value: 0")),
        "{errs:?}"
    );
}

#[test]
fn webhook_url_needs_a_scheme_and_host() {
    let errs = messages(|s| {
        s.ports[0].checks[0] = portmapper_api::Check {
            webhook: Some(portmapper_api::check::WebhookCheck {
                url: "ftp://x".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    });
    assert!(
        errs.iter()
            .any(|e| e.contains("spec.ports[0].checks[0].webhook.url")),
        "{errs:?}"
    );
}

#[test]
fn selector_operator_must_be_known() {
    let errs = messages(|s| {
        s.pods.selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: "tier".into(),
                        operator: "Equals".into(),
                        values: Some(vec!["a".into()]),
                    },
                ]),
                ..Default::default()
            },
        )
    });
    assert!(
        errs.iter().any(|e| e.contains(
            "spec.pods.selector.matchExpressions[0].operator: Unsupported value: \"Equals\""
        )),
        "{errs:?}"
    );
}

#[test]
fn probe_thresholds_below_one_are_rejected() {
    let errs = messages(|s| {
        s.probe.success_threshold = 0;
        s.probe.failure_threshold = 0;
    });
    assert_eq!(
        errs,
        vec![
            "spec.probe.successThreshold: Invalid value: 0: must be between 1 and 100, inclusive",
            "spec.probe.failureThreshold: Invalid value: 0: must be between 1 and 100, inclusive",
        ]
    );
    let errs = messages(|s| {
        s.probe.success_threshold = -1;
        s.probe.failure_threshold = 101;
    });
    assert_eq!(
        errs,
        vec![
            "spec.probe.successThreshold: Invalid value: -1: must be between 1 and 100, inclusive",
            "spec.probe.failureThreshold: Invalid value: 101: must be between 1 and 100, inclusive",
        ]
    );
    assert_eq!(
        messages(|s| {
            s.probe.success_threshold = 1;
            s.probe.failure_threshold = 100;
        }),
        Vec::<String>::new(),
        "the bounds themselves are valid"
    );
}

#[test]
fn zero_thresholds_written_in_yaml_parse_and_are_caught_by_validation() {
    // The typed client does not enforce the schema's minimum: an object that got past
    // admission (no schema validation, restored from a backup) deserialises, and validation
    // is what reports it.
    let yaml = format!("{VALID}  probe: {{successThreshold: 0, failureThreshold: 0}}\n");
    let pm = parse(&yaml);
    assert_eq!(
        (
            pm.spec.probe.success_threshold,
            pm.spec.probe.failure_threshold
        ),
        (0, 0)
    );
    let errs: Vec<String> = validate_spec(&pm.spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    // Omitted, they default to 1 and 3.
    let pm = parse(VALID);
    assert_eq!(
        (
            pm.spec.probe.success_threshold,
            pm.spec.probe.failure_threshold
        ),
        (1, 3)
    );
}

#[test]
fn probe_timeout_above_period_is_reported_with_the_period() {
    let errs = messages(|s| {
        s.probe.period_seconds = 2;
        s.probe.timeout_seconds = 5;
    });
    assert_eq!(
        errs,
        vec!["spec.probe.timeoutSeconds: Invalid value: 5: must not exceed periodSeconds (2)"]
    );
    assert_eq!(
        messages(|s| {
            s.probe.period_seconds = 5;
            s.probe.timeout_seconds = 5;
        }),
        Vec::<String>::new(),
        "equal is fine"
    );
}

#[test]
fn check_timeout_above_period_is_reported_on_the_check() {
    let errs = messages(|s| {
        s.probe.period_seconds = 5;
        s.ports[1].checks[0].any_of.as_mut().unwrap()[1]
            .tcp_socket
            .as_mut()
            .unwrap()
            .timeout_seconds = Some(6);
    });
    assert_eq!(
        errs,
        vec![
            "spec.ports[1].checks[0].anyOf[1].tcpSocket.timeoutSeconds: Invalid value: 6: must not exceed spec.probe.periodSeconds (5)"
        ]
    );
}

#[test]
fn ca_bundle_needs_a_certificate_block() {
    let with_ca = |ca: &str| {
        messages(|s| {
            s.ports[0].checks[0] = portmapper_api::Check {
                webhook: Some(portmapper_api::check::WebhookCheck {
                    url: "https://decider.example.com/".into(),
                    ca_bundle: Some(ca.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
    };
    let bad = vec![
        "spec.ports[0].checks[0].webhook.caBundle: Invalid value: \"<redacted>\": must contain at least one PEM certificate",
    ];
    assert_eq!(with_ca("garbage"), bad);
    assert_eq!(with_ca("-----BEGIN CERTIFICATE-----\nMIIB"), bad);
    assert_eq!(
        with_ca("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----"),
        bad
    );
    assert_eq!(
        with_ca("-----BEGIN CERTIFICATE-----\nno!\n-----END CERTIFICATE-----"),
        bad
    );
    assert_eq!(
        with_ca(
            "# a comment\n-----BEGIN CERTIFICATE-----\nno!\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\r\nMIIB+/=\r\n-----END CERTIFICATE-----\r\n"
        ),
        Vec::<String>::new(),
        "one good block is enough, as for the schema's pattern"
    );
}
