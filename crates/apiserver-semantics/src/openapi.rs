//! `/openapi/v2` and `/openapi/v3` documents from CRD schemas plus minimal built-ins.

use serde_json::Value;

/// The `/openapi/v2` Swagger document: the CRDs' schemas (served versions) plus minimal
/// built-in definitions.
pub fn v2(crds: &[Value]) -> Value {
    let _ = crds;
    todo!("v2")
}

/// The `/openapi/v3` index: `{"paths": {"apis/<g>/<v>": {"serverRelativeURL": ...}}}`.
pub fn v3_index(crds: &[Value]) -> Value {
    let _ = crds;
    todo!("v3_index")
}

/// One `/openapi/v3/apis/<group>/<version>` (or `api/v1`) document; `None` if unknown.
pub fn v3_group_version(crds: &[Value], group: &str, version: &str) -> Option<Value> {
    let _ = (crds, group, version);
    todo!("v3_group_version")
}
