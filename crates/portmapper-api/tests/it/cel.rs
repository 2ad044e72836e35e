//! The CRD's CEL rules, evaluated client-side with kube's validator (the same rules the
//! apiserver evaluates at admission).

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use portmapper_api::PortMapping;
use serde_json::{Value, json};

use crate::fixtures::{VALID, json as to_json};

fn schema() -> Value {
    let crd = PortMapping::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap();
    serde_json::to_value(schema).unwrap()
}

fn errors(obj: &Value) -> Vec<String> {
    match Validator::new().validate(&schema(), obj, None) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.to_string().lines().map(str::to_string).collect(),
    }
}

#[test]
fn valid_portmapping_passes_every_rule() {
    assert_eq!(errors(&to_json(VALID)), Vec::<String>::new());
}

#[test]
fn label_pool_value_must_be_a_label_value() {
    let mut obj = to_json(VALID);
    obj["spec"]["pods"]["value"] = json!("has spaces, commas");
    let errs = errors(&obj);
    assert!(
        errs.iter()
            .any(|e| e.contains("must be a valid label value")),
        "{errs:?}"
    );
}

#[test]
fn annotation_pool_value_may_be_any_string() {
    let mut obj = to_json(VALID);
    obj["spec"]["pods"]["from"] = json!("Annotation");
    obj["spec"]["pods"]["value"] = json!("has spaces, commas");
    assert_eq!(errors(&obj), Vec::<String>::new());
}

/// The timing rules spell out the defaults, so they hold on objects nobody defaulted (this
/// validator, unlike the apiserver, does not apply schema defaults first).
#[test]
fn timing_rules_work_with_either_side_omitted() {
    let with_probe = |probe: Value| {
        let mut obj = to_json(VALID);
        obj["spec"]["probe"] = probe;
        errors(&obj)
    };
    let rejected = |errs: Vec<String>| {
        errs.iter()
            .any(|e| e.contains("timeoutSeconds must not exceed periodSeconds"))
    };
    assert!(
        rejected(with_probe(json!({"timeoutSeconds": 11}))),
        "default period 10"
    );
    assert!(!rejected(with_probe(json!({"timeoutSeconds": 10}))));
    assert!(
        !rejected(with_probe(json!({"periodSeconds": 1}))),
        "default timeout 1"
    );
    assert!(!rejected(with_probe(json!({}))));

    // No probe at all: a check's own timeout is compared with the default period.
    let mut obj = to_json(VALID);
    obj["spec"]["ports"][1]["checks"][0]["anyOf"][1]["tcpSocket"]["timeoutSeconds"] = json!(11);
    assert!(obj["spec"].get("probe").is_none());
    let errs = errors(&obj);
    assert!(
        errs.iter()
            .any(|e| e.contains("a check's timeoutSeconds must not exceed probe.periodSeconds")),
        "{errs:?}"
    );
    obj["spec"]["ports"][1]["checks"][0]["anyOf"][1]["tcpSocket"]["timeoutSeconds"] = json!(10);
    assert_eq!(errors(&obj), Vec::<String>::new());
}
