//! Loads the real PortMapping CRD and runs good and bad PortMappings through the same pipeline
//! the emulator uses (prune → default → validate), asserting apiserver-identical messages.

use apiserver_semantics::field_error::invalid_status;
use apiserver_semantics::schema::{CEL_SKIPPED, CrdValidator};
use serde_json::{Value, json};

pub fn portmapping_crd() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/portmapper.dev_portmappings.yaml"
    ))
    .expect("read the PortMapping CRD");
    serde_yaml::from_str(&text).expect("parse the PortMapping CRD")
}

fn validator() -> CrdValidator {
    CrdValidator::from_crd(&portmapping_crd(), "v1alpha1").expect("the CRD schema is structural")
}

fn pm(spec: Value) -> Value {
    json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn good_spec() -> Value {
    json!({
        "serviceRef": {"name": "web"},
        "pods": {"key": "app.kubernetes.io/name", "value": "web"},
        "ports": [
            {"name": "http", "checks": [
                {"podReady": {}},
                {"anyOf": [{"httpGet": {"path": "/healthz", "port": 8080}}, {"tcpSocket": {}}]}]},
            {"name": "metrics", "checks": [{"portNames": {"key": "example.com/ports"}}]}
        ]
    })
}

/// The admission pipeline; returns the error strings and the stored object.
fn admit(mut obj: Value) -> (Vec<String>, Value) {
    let v = validator();
    v.prune(&mut obj);
    v.apply_defaults(&mut obj);
    let errs = v.validate(&obj, None);
    (errs.iter().map(ToString::to_string).collect(), obj)
}

#[test]
fn good_portmapping_passes_and_gets_defaults() {
    let (errs, stored) = admit(pm(good_spec()));
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(stored["spec"]["maxEndpointsPerSlice"], 100);
    assert_eq!(stored["spec"]["pods"]["from"], "Label");
    assert_eq!(
        stored["spec"]["probe"],
        json!({"failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1})
    );
    assert_eq!(
        stored["spec"]["ports"][1]["checks"][0]["portNames"]["from"],
        "Annotation"
    );
}

#[test]
fn two_kinds_in_one_check_is_too_many_and_blocks_cel() {
    let mut spec = good_spec();
    spec["ports"][0]["checks"][0] = json!({"podReady": {}, "tcpSocket": {}});
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![
            "spec.ports[0].checks[0]: Too many: 2: must have at most 1 item".to_owned(),
            format!("<nil>: Invalid value: null: {CEL_SKIPPED}"),
        ]
    );
}

// A check's kind count is the schema's alone (min/maxProperties): a CEL rule for it would cost
// kube-apiserver a schema copy per `has()` on every write, status writes included.
#[test]
fn empty_check_fails_min_properties() {
    let mut spec = good_spec();
    spec["ports"][0]["checks"][0] = json!({});
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![
            "spec.ports[0].checks[0]: Invalid value: 0: spec.ports[0].checks[0] in body should have at least 1 properties",
        ]
    );
}

#[test]
fn two_kinds_in_an_any_of_entry_is_too_many() {
    let mut spec = good_spec();
    spec["ports"][0]["checks"][1]["anyOf"][0] = json!({"podReady": {}, "grpc": {"port": 9000}});
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![
            "spec.ports[0].checks[1].anyOf[0]: Too many: 2: must have at most 1 item".to_owned(),
            format!("<nil>: Invalid value: null: {CEL_SKIPPED}"),
        ]
    );
}

#[test]
fn bad_pool_key_fails_its_pattern() {
    let mut spec = good_spec();
    spec["pods"]["key"] = json!("bad key!");
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![
            r#"spec.pods.key: Invalid value: "bad key!": spec.pods.key in body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'"#
        ]
    );
}

#[test]
fn bad_label_value_fails_the_pods_cel_rule() {
    let mut spec = good_spec();
    spec["pods"]["value"] = json!("not a label value");
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![
            r#"spec.pods: Invalid value: pods.value must be a valid label value (at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric) when pods.from is Label"#
        ]
    );
    // The same value is fine for an annotation pool.
    let mut spec = good_spec();
    spec["pods"]["value"] = json!("not a label value");
    spec["pods"]["from"] = json!("Annotation");
    assert!(admit(pm(spec)).0.is_empty());
}

#[test]
fn out_of_range_max_endpoints_per_slice() {
    let mut spec = good_spec();
    spec["maxEndpointsPerSlice"] = json!(1001);
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![
            "spec.maxEndpointsPerSlice: Invalid value: 1001: spec.maxEndpointsPerSlice in body should be less than or equal to 1000"
        ]
    );
}

#[test]
fn duplicate_port_names_are_a_list_map_duplicate() {
    let mut spec = good_spec();
    spec["ports"][1]["name"] = json!("http");
    let (errs, _) = admit(pm(spec));
    assert_eq!(
        errs,
        vec![r#"spec.ports[1]: Duplicate value: {"name":"http"}"#]
    );
}

#[test]
fn missing_required_and_unknown_fields() {
    let mut obj = pm(json!({"serviceRef": {}, "bogus": true}));
    let v = validator();
    let pruned = v.prune(&mut obj);
    assert_eq!(pruned.unknown_fields, vec!["spec.bogus"]);
    v.apply_defaults(&mut obj);
    let errs = v.validate(&obj, None);
    let status = invalid_status("portmapper.dev", "PortMapping", "web", &errs);
    assert_eq!(
        status["message"],
        format!(
            r#"PortMapping.portmapper.dev "web" is invalid: [spec.serviceRef.name: Required value, spec.pods: Required value, <nil>: Invalid value: null: {CEL_SKIPPED}]"#
        )
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.serviceRef.name"
    );
}
