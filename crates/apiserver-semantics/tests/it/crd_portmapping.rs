//! Loads the real PortMapping CRD and checks it against good and bad objects.

use serde_json::Value;

pub fn portmapping_crd() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/portmapper.dev_portmappings.yaml"
    ))
    .expect("read the PortMapping CRD");
    serde_yaml::from_str(&text).expect("parse the PortMapping CRD")
}

#[test]
fn crd_file_loads() {
    let crd = portmapping_crd();
    assert_eq!(crd["spec"]["names"]["kind"], "PortMapping");
}
