//! Server-side apply of PortMapping status through `/status` with the real CRD's list semantics
//! (`status.conditions` is a list-map keyed by `type`), as an operator does it.

use crate::crd_portmapping::portmapping_crd;
use apiserver_semantics::CrdSchema;
use apiserver_semantics::ssa::{self, ApplyError};
use serde_json::{Value, json};

fn schema() -> CrdSchema {
    CrdSchema::from_crd(&portmapping_crd(), "v1alpha1").expect("v1alpha1 has a schema")
}

fn stored(mut o: Value, rv: &str) -> Value {
    o["metadata"]["uid"] = json!("0b7c");
    o["metadata"]["resourceVersion"] = json!(rv);
    o["metadata"]["generation"] = json!(1);
    o
}

fn status_config(ready: &str, summary: &str) -> Value {
    json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "web", "namespace": "default"},
        "status": {"observedGeneration": 1, "summary": summary,
            "conditions": [{"type": "Ready", "status": ready, "reason": "Published",
                            "message": "", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}})
}

#[test]
fn operator_status_apply_round_trip() {
    let schema = schema();
    let created = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "app"}}});
    let live = stored(
        ssa::record_update(
            None,
            &created,
            "kubectl-client-side-apply",
            None,
            &schema,
            "2026-01-02T03:00:00Z",
        ),
        "10",
    );

    // The operator applies status: a second entry with subresource status; spec untouched.
    let out = ssa::apply(
        Some(&live),
        &status_config("True", "http 1/1"),
        "portmapper",
        true,
        Some("status"),
        &schema,
        "2026-01-02T03:01:00Z",
    )
    .expect("status apply")
    .object;
    assert_eq!(out["spec"], live["spec"]);
    let mf = out["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields");
    assert_eq!(mf.len(), 2);
    let status_entry = mf
        .iter()
        .find(|e| e["manager"] == "portmapper")
        .expect("operator entry");
    assert_eq!(status_entry["subresource"], "status");
    assert_eq!(status_entry["operation"], "Apply");
    assert_eq!(
        status_entry["fieldsV1"],
        json!({"f:status": {"f:observedGeneration": {}, "f:summary": {},
            "f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:type": {}, "f:status": {},
                "f:reason": {}, "f:message": {}, "f:lastTransitionTime": {}}}}})
    );

    // Re-applying the same status is a no-op: identical object, same entry time.
    let live = stored(out, "11");
    let again = ssa::apply(
        Some(&live),
        &status_config("True", "http 1/1"),
        "portmapper",
        true,
        Some("status"),
        &schema,
        "2026-01-02T03:02:00Z",
    )
    .expect("status re-apply")
    .object;
    assert_eq!(again, live);

    // Someone else (kubectl edit on /status) changes the summary; a non-forced apply conflicts,
    // naming the Update manager and its subresource.
    let mut edited = live.clone();
    edited["status"]["summary"] = json!("manual");
    let live = stored(
        ssa::record_update(
            Some(&live),
            &edited,
            "kubectl-edit",
            Some("status"),
            &schema,
            "2026-01-02T03:03:00Z",
        ),
        "12",
    );
    let err = ssa::apply(
        Some(&live),
        &status_config("True", "http 1/1"),
        "portmapper",
        false,
        Some("status"),
        &schema,
        "2026-01-02T03:04:00Z",
    )
    .expect_err("conflict");
    let ApplyError::Conflict(c) = err else {
        panic!("expected a conflict")
    };
    assert_eq!(
        c.message(),
        "Apply failed with 1 conflict: conflict with \"kubectl-edit\" with subresource \"status\" using portmapper.dev/v1alpha1: .status.summary"
    );
    // A changed condition with force takes it back.
    let forced = ssa::apply(
        Some(&live),
        &status_config("False", "http 0/1"),
        "portmapper",
        true,
        Some("status"),
        &schema,
        "2026-01-02T03:04:00Z",
    )
    .expect("forced")
    .object;
    assert_eq!(forced["status"]["conditions"][0]["status"], "False");
    assert_eq!(forced["status"]["summary"], "http 0/1");
    let managers: Vec<&str> = forced["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|e| e["manager"].as_str().expect("manager"))
        .collect();
    assert!(!managers.contains(&"kubectl-edit"), "{managers:?}");
}
