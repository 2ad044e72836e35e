//! CRD schemas on the wire: pruning with Warning headers, Strict field validation, defaults,
//! OpenAPI and CEL validation errors, structural-schema rejection, discovery on delete.

use serde_json::{Value, json};

use crate::common::{emu, raw};

fn crd(validations: Value) -> String {
    json!({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
      "metadata":{"name":"gadgets.example.com"},
      "spec":{"group":"example.com","scope":"Namespaced",
        "names":{"kind":"Gadget","plural":"gadgets"},
        "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
          "schema":{"openAPIV3Schema":{"type":"object","properties":{
            "spec":{"type":"object","x-kubernetes-validations":validations,"properties":{
              "replicas":{"type":"integer","maximum":10,"default":1},
              "mode":{"type":"string","enum":["a","b"]},
              "min":{"type":"integer"},"max":{"type":"integer"}}},
            "status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}})
    .to_string()
}

async fn post(emu: &kube_emulator::Emulator, path: &str, body: &str) -> (u16, Value, String) {
    let (code, resp) = raw(
        emu,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body,
    )
    .await;
    (
        code,
        serde_json::from_str(&resp).unwrap_or(Value::Null),
        resp,
    )
}

async fn established(emu: &kube_emulator::Emulator) {
    for _ in 0..100 {
        if raw(emu, "GET", "/apis/example.com/v1", &[], "").await.0 == 200 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("CRD never established");
}

#[tokio::test]
async fn crd_schema_prune_default_validate_cel() {
    let emu = emu().await;
    let (code, v, _) = post(
        &emu,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd(json!([{"rule":"self.min <= self.max","message":"min must not exceed max"}])),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    established(&emu).await;
    let path = "/apis/example.com/v1/namespaces/default/gadgets";
    // Unknown field pruned (Warn is the default), default applied.
    let mut s = tokio::net::TcpStream::connect(emu.addr()).await.unwrap();
    let body = r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1"},"spec":{"mode":"a","bogus":1,"min":1,"max":2}}"#;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(format!("POST {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    assert!(buf.starts_with("HTTP/1.0 201"), "{buf}");
    assert!(
        buf.to_lowercase()
            .contains("warning: 299 - \"unknown field \\\"spec.bogus\\\"\""),
        "{buf}"
    );
    let obj: Value = serde_json::from_str(buf.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert!(obj["spec"].get("bogus").is_none(), "pruned: {obj}");
    assert_eq!(obj["spec"]["replicas"], 1, "defaulted: {obj}");
    // Strict: 400.
    let (code, v, _) = post(
        &emu,
        &format!("{path}?fieldValidation=Strict"),
        &body.replace("g1", "g2"),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    // A create wraps the decoder's error, for custom resources as for built-ins.
    assert_eq!(
        v["message"],
        "Gadget in version \"v1\" cannot be handled as a Gadget: strict decoding error: unknown field \"spec.bogus\""
    );
    // OpenAPI validation: enum and maximum, upstream-shaped messages.
    let bad = r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g3"},"spec":{"mode":"x","replicas":11}}"#;
    let (code, v, _) = post(&emu, path, bad).await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["reason"], "Invalid");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Gadget.example.com \"g3\" is invalid: ["),
        "{msg}"
    );
    assert!(
        msg.contains("spec.mode: Unsupported value: \"x\": supported values: \"a\", \"b\""),
        "{msg}"
    );
    assert!(msg.contains("spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"), "{msg}");
    // CEL rule.
    let bad = r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g4"},"spec":{"mode":"a","min":5,"max":1}}"#;
    let (code, v, _) = post(&emu, path, bad).await;
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("min must not exceed max"),
        "{v}"
    );
    // Strategic merge patch on a CR → 415.
    let (code, v) = raw(
        &emu,
        "PATCH",
        &format!("{path}/g1"),
        &[("Content-Type", "application/strategic-merge-patch+json")],
        r#"{"spec":{"min":0}}"#,
    )
    .await;
    assert_eq!(code, 415, "{v}");
}

#[tokio::test]
async fn non_structural_crd_is_rejected_and_deleted_crd_stops_serving() {
    let emu = emu().await;
    let mut c: Value = serde_json::from_str(&crd(json!([]))).unwrap();
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["untyped"] =
        json!({"description":"no type"});
    let (code, v, _) = post(
        &emu,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &c.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    assert!(v["message"].as_str().unwrap().contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[untyped].type: Required value"), "{v}");
    let (code, v, _) = post(
        &emu,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd(json!([])),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    established(&emu).await;
    let (code, _, _) = post(
        &emu,
        "/apis/example.com/v1/namespaces/default/gadgets",
        r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{}}"#,
    )
    .await;
    assert_eq!(code, 201);
    let (code, _) = raw(
        &emu,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 200);
    for _ in 0..100 {
        if raw(
            &emu,
            "GET",
            "/apis/example.com/v1/namespaces/default/gadgets",
            &[],
            "",
        )
        .await
        .0 == 404
        {
            let (_, groups) = raw(&emu, "GET", "/apis", &[], "").await;
            assert!(!groups.contains("example.com"), "group gone from discovery");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("custom resources still served after CRD deletion");
}

#[tokio::test]
async fn status_subresource_writes_are_schema_checked() {
    let emu = emu().await;
    let mut c: Value = serde_json::from_str(&crd(json!([]))).unwrap();
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = json!({"type":"object","properties":{"phase":{"type":"string","enum":["Ready","Pending"]}}});
    let (code, v, _) = post(
        &emu,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &c.to_string(),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    established(&emu).await;
    let (code, _, _) = post(
        &emu,
        "/apis/example.com/v1/namespaces/default/gadgets",
        r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{}}"#,
    )
    .await;
    assert_eq!(code, 201);
    let status = "/apis/example.com/v1/namespaces/default/gadgets/g/status";
    let (code, body) = raw(
        &emu,
        "PATCH",
        status,
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"status":{"phase":"Bogus"}}"#,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("status.phase: Unsupported value: \\\"Bogus\\\""),
        "{body}"
    );
    let (code, body) = raw(
        &emu,
        "PATCH",
        status,
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"status":{"phase":"Ready","extra":1}}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["status"],
        json!({"phase":"Ready"}),
        "unknown status field pruned"
    );
}
