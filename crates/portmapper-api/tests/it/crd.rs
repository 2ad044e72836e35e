//! The generated CRD: what users and tools rely on is present, and the committed file is current.

use kube::CustomResourceExt;
use portmapper_api::PortMapping;

#[test]
fn committed_crd_matches_the_types() {
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/portmapper.dev_portmappings.yaml"
    ))
    .expect("crds/portmapper.dev_portmappings.yaml exists");
    assert_eq!(
        committed,
        portmapper_api::crd::crd_yaml().unwrap(),
        "crds/ is stale: run `make crds`"
    );
}

#[test]
fn crd_has_printer_columns_short_name_and_status_subresource() {
    let crd = PortMapping::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["pm".to_string()]));
    let version = &crd.spec.versions[0];
    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Service", "Ports", "Ready", "Age"]);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
}

#[test]
fn conditions_and_port_rules_merge_by_key() {
    let yaml = portmapper_api::crd::crd_yaml().unwrap();
    let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let props = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    assert_eq!(
        props["status"]["properties"]["conditions"]["x-kubernetes-list-type"],
        "map"
    );
    assert_eq!(
        props["status"]["properties"]["conditions"]["x-kubernetes-list-map-keys"][0],
        "type"
    );
    assert_eq!(
        props["spec"]["properties"]["ports"]["x-kubernetes-list-type"],
        "map"
    );
    assert_eq!(
        props["spec"]["properties"]["ports"]["x-kubernetes-list-map-keys"][0],
        "name"
    );
}

#[test]
fn spec_defaults_are_in_the_schema() {
    let yaml = portmapper_api::crd::crd_yaml().unwrap();
    let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let spec = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["maxEndpointsPerSlice"]["default"], 100);
    assert_eq!(spec["nativeCleanup"]["default"], true);
    assert_eq!(spec["terminatingEndpoints"]["default"], "Drain");
    assert_eq!(spec["pods"]["properties"]["from"]["default"], "Label");
}

#[test]
fn probe_thresholds_have_a_schema_minimum_of_one() {
    // The apiserver rejects `successThreshold: 0` / `failureThreshold: 0` at admission through
    // these bounds (no CEL rule is involved).
    let yaml = portmapper_api::crd::crd_yaml().unwrap();
    let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let probe = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["probe"];
    for field in ["successThreshold", "failureThreshold"] {
        let p = &probe["properties"][field];
        assert_eq!(p["type"], "integer", "{field}");
        assert_eq!(p["minimum"], 1.0, "{field}");
        assert_eq!(p["maximum"], 100.0, "{field}");
        assert!(p.get("exclusiveMinimum").is_none(), "{field}");
    }
    assert_eq!(probe["properties"]["successThreshold"]["default"], 1);
    assert_eq!(probe["properties"]["failureThreshold"]["default"], 3);
}
