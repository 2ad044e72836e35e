//! Unknown fields in built-in objects: dropped as upstream's typed decoding drops them, with
//! `Warning` headers (Warn, the default), silently (Ignore) or a 400 (Strict); server-side apply
//! fails on them whatever `fieldValidation` says. Known fields of every served built-in survive.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{emu, kubectl_bin, kubectl_stdin};

/// Raw HTTP/1.0 request: (status, `Warning` header values, JSON body).
async fn call(
    emu: &kube_emulator::Emulator,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Vec<String>, Value) {
    let mut s = tokio::net::TcpStream::connect(emu.addr()).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let warnings = head
        .lines()
        .filter_map(|l| {
            l.strip_prefix("warning: ")
                .or_else(|| l.strip_prefix("Warning: "))
        })
        .map(|w| {
            let text = w
                .strip_prefix("299 - \"")
                .unwrap()
                .strip_suffix('"')
                .unwrap();
            text.replace("\\\"", "\"")
        })
        .collect();
    (
        code,
        warnings,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

const SVCS: &str = "/api/v1/namespaces/default/services";

fn svc_with_typos(name: &str) -> String {
    json!({"apiVersion":"v1","kind":"Service","metadata":{"name":name,"colour":"red"},
           "spec":{"selector":{"app":"web"},"ports":[{"port":80,"targetport":8080}]}})
    .to_string()
}

#[tokio::test]
async fn create_warns_by_default_ignores_silently_and_strict_rejects() {
    let emu = emu().await;
    let (code, warnings, obj) = call(
        &emu,
        "POST",
        SVCS,
        "application/json",
        &svc_with_typos("web"),
    )
    .await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(
        warnings,
        [
            "unknown field \"metadata.colour\"",
            "unknown field \"spec.ports[0].targetport\""
        ]
    );
    assert!(obj["metadata"].get("colour").is_none(), "{obj}");
    assert!(obj["spec"]["ports"][0].get("targetport").is_none(), "{obj}");
    // The typo did not reach the defaulting: targetPort defaults to the port.
    assert_eq!(obj["spec"]["ports"][0]["targetPort"], 80);

    let (code, warnings, obj) = call(
        &emu,
        "POST",
        &format!("{SVCS}?fieldValidation=Ignore"),
        "application/json",
        &svc_with_typos("web2"),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0), "{obj}");
    assert!(obj["metadata"].get("colour").is_none(), "{obj}");

    let (code, _, status) = call(
        &emu,
        "POST",
        &format!("{SVCS}?fieldValidation=Strict"),
        "application/json",
        &svc_with_typos("web3"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "Service in version \"v1\" cannot be handled as a Service: strict decoding error: unknown field \"metadata.colour\", unknown field \"spec.ports[0].targetport\""
    );
    assert!(emu.get("", "services", Some("default"), "web3").is_none());
}

#[tokio::test]
async fn updates_patches_and_status_writes_drop_unknown_fields_too() {
    let emu = emu().await;
    let ok = json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},
                    "spec":{"selector":{"app":"web"},"ports":[{"port":80}]}});
    let (code, _, created) = call(&emu, "POST", SVCS, "application/json", &ok.to_string()).await;
    assert_eq!(code, 201, "{created}");
    let item = format!("{SVCS}/web");

    // PUT: the same wrapped message as a create.
    let mut put = created.clone();
    put["spec"]["typo"] = json!(1);
    let (code, _, status) = call(
        &emu,
        "PUT",
        &format!("{item}?fieldValidation=Strict"),
        "application/json",
        &put.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "Service in version \"v1\" cannot be handled as a Service: strict decoding error: unknown field \"spec.typo\""
    );
    let (code, warnings, obj) =
        call(&emu, "PUT", &item, "application/json", &put.to_string()).await;
    assert_eq!(
        (code, warnings),
        (200, vec!["unknown field \"spec.typo\"".to_string()])
    );
    assert!(obj["spec"].get("typo").is_none(), "{obj}");

    // Merge and JSON patches: the bare strict error (400). Strategic merge patches: a 422 on the
    // field `patch`, whose value is the patch as Go prints it (upstream `applyPatchToObject`).
    for (ct, patch) in [
        (
            "application/merge-patch+json",
            json!({"spec":{"typo":2}}).to_string(),
        ),
        (
            "application/json-patch+json",
            json!([{"op":"add","path":"/spec/typo","value":2}]).to_string(),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"spec":{"ports":[{"port":80,"nodeport":1}]}}).to_string(),
        ),
    ] {
        let field = if ct.starts_with("application/strategic") {
            "spec.ports[0].nodeport"
        } else {
            "spec.typo"
        };
        let (code, _, status) = call(
            &emu,
            "PATCH",
            &format!("{item}?fieldValidation=Strict"),
            ct,
            &patch,
        )
        .await;
        if ct.starts_with("application/strategic") {
            assert_eq!(code, 422, "{ct}: {status}");
            assert_eq!(status["reason"], "Invalid");
            let invalid = format!(
                "Invalid value: \"map[spec:map[ports:[map[nodeport:1 port:80]]]]\": strict decoding error: unknown field \"{field}\""
            );
            assert_eq!(status["details"]["causes"][0]["field"], "patch");
            assert_eq!(status["details"]["causes"][0]["message"], invalid.as_str());
            assert_eq!(
                status["message"],
                format!(" \"\" is invalid: patch: {invalid}")
            );
        } else {
            assert_eq!(code, 400, "{ct}: {status}");
            assert_eq!(
                status["message"],
                format!("strict decoding error: unknown field \"{field}\""),
                "{ct}"
            );
        }
        let (code, warnings, obj) = call(&emu, "PATCH", &item, ct, &patch).await;
        assert_eq!(code, 200, "{ct}: {obj}");
        assert_eq!(warnings, [format!("unknown field \"{field}\"")], "{ct}");
        assert!(
            obj["spec"].get("typo").is_none() && obj["spec"]["ports"][0].get("nodeport").is_none(),
            "{ct}: {obj}"
        );
    }

    // /status: the whole body is decoded.
    let (code, warnings, obj) = call(
        &emu,
        "PATCH",
        &format!("{item}/status"),
        "application/merge-patch+json",
        &json!({"status":{"loadBalancer":{"ingress":[{"ip":"1.2.3.4","hostnam":"x"}]}}})
            .to_string(),
    )
    .await;
    assert_eq!(code, 200, "{obj}");
    assert_eq!(
        warnings,
        ["unknown field \"status.loadBalancer.ingress[0].hostnam\""]
    );
    assert_eq!(
        obj["status"]["loadBalancer"]["ingress"],
        json!([{"ip":"1.2.3.4"}])
    );
}

#[tokio::test]
async fn server_side_apply_fails_on_undeclared_fields_whatever_field_validation_says() {
    let emu = emu().await;
    let cfg = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"},"dta":{"k":"v"}})
        .to_string();
    for fv in ["Ignore", "Warn", "Strict"] {
        let (code, _, status) = call(
            &emu,
            "PATCH",
            &format!("/api/v1/namespaces/default/configmaps/c?fieldManager=m&fieldValidation={fv}"),
            "application/apply-patch+yaml",
            &cfg,
        )
        .await;
        assert_eq!(code, 500, "{fv}: {status}");
        assert!(status.get("reason").is_none(), "{status}");
        assert_eq!(
            status["message"],
            "failed to create typed patch object (default/c; /v1, Kind=ConfigMap): .dta: field not declared in schema"
        );
    }
    assert!(emu.get("", "configmaps", Some("default"), "c").is_none());
    // A custom resource's apply is pruned by its CRD schema instead (crd.rs): not affected.
}

#[tokio::test]
async fn kubectl_apply_of_a_service_with_a_typo_fails_with_kubectls_real_output() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = emu().await;
    let kc = emu.kubeconfig_path();
    let typo = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n  - port: 80\n    targetport: 8080\n";
    // kubectl ≥1.27 sends fieldValidation=Strict: a create is rejected.
    let (ok, _, stderr) = kubectl_stdin(&bin, kc, &["apply", "-f", "-"], typo).await;
    assert!(!ok);
    let line = "Error from server (BadRequest): error when creating \"STDIN\": Service in version \"v1\" cannot be handled as a Service: strict decoding error: unknown field \"spec.ports[0].targetport\"";
    assert!(stderr.lines().any(|l| l == line), "{stderr}");
    assert!(emu.get("", "services", Some("default"), "web").is_none());
    // An existing Service: client-side apply patches it (strategic merge), server-side apply
    // converts the configuration into the typed object.
    let fixed = typo.replace("targetport", "targetPort");
    let (ok, _, stderr) = kubectl_stdin(&bin, kc, &["apply", "-f", "-"], &fixed).await;
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = kubectl_stdin(&bin, kc, &["apply", "-f", "-"], typo).await;
    assert!(!ok);
    // kubectl prints only the 422's cause: the patch it sent as Go prints it, after the merge
    // consumed its `$setElementOrder/ports` and `ports` (kube-apiserver 1.37's words).
    let head = "The request is invalid: patch: Invalid value: \"map[metadata:map[annotations:map[kubectl.kubernetes.io/last-applied-configuration:{";
    let tail =
        "]] spec:map[]]\": strict decoding error: unknown field \"spec.ports[0].targetport\"";
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("warning"))
        .collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with(head) && lines[0].ends_with(tail),
        "{stderr}"
    );
    let (ok, _, stderr) =
        kubectl_stdin(&bin, kc, &["apply", "--server-side", "-f", "-"], typo).await;
    assert!(!ok);
    let line = "Error from server: failed to create typed patch object (default/web; /v1, Kind=Service): .spec.ports[port=80,protocol=\"TCP\"].targetport: field not declared in schema";
    assert!(stderr.lines().any(|l| l == line), "{stderr}");
    let svc = emu.get("", "services", Some("default"), "web").unwrap();
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"], 8080,
        "unchanged: {svc}"
    );
}

/// One field-rich object of every served built-in kind (collection path, object).
fn every_builtin() -> Vec<(&'static str, Value)> {
    let meta = |name: &str| json!({"name": name, "labels":{"app":"x"},"annotations":{"a":"b"},"finalizers":["example.com/keep"]});
    vec![
        (
            "/api/v1/namespaces",
            json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"rich","labels":{"a":"b"}},"spec":{"finalizers":["kubernetes"]}}),
        ),
        (
            "/api/v1/nodes",
            json!({"apiVersion":"v1","kind":"Node","metadata":meta("n1"),
            "spec":{"podCIDR":"10.244.0.0/24","podCIDRs":["10.244.0.0/24"],"providerID":"p","unschedulable":true,"taints":[{"key":"k","value":"v","effect":"NoSchedule"},
                // TaintNodesByCondition adds this one to a new Node unless it is there.
                {"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"}]}}),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion":"v1","kind":"Service","metadata":meta("svc"),
            "spec":{"type":"NodePort","selector":{"app":"x"},"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":60}},
                    "externalTrafficPolicy":"Local","publishNotReadyAddresses":true,"trafficDistribution":"PreferClose",
                    "ports":[{"name":"http","port":80,"targetPort":"web","protocol":"TCP","appProtocol":"http","nodePort":30080},
                             {"name":"dns","port":53,"targetPort":5353,"protocol":"UDP"}]}}),
        ),
        (
            "/api/v1/namespaces/default/endpoints",
            json!({"apiVersion":"v1","kind":"Endpoints","metadata":meta("ep"),
            "subsets":[{"addresses":[{"ip":"10.0.0.1","hostname":"h","nodeName":"n1","targetRef":{"kind":"Pod","namespace":"default","name":"p","uid":"u"}}],
                        "notReadyAddresses":[{"ip":"10.0.0.2"}],"ports":[{"name":"http","port":8080,"protocol":"TCP","appProtocol":"http"}]}]}),
        ),
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion":"v1","kind":"Pod","metadata":meta("pod"),
            "spec":{"containers":[{"name":"c","image":"nginx","args":["a"],"ports":[{"name":"web","containerPort":8080,"protocol":"TCP"}],
                    "env":[{"name":"A","value":"1"},{"name":"B","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}],
                    "resources":{"limits":{"cpu":"1","memory":"1Gi"},"requests":{"cpu":"100m"}},
                    "readinessProbe":{"httpGet":{"path":"/healthz","port":"web"},"periodSeconds":5},
                    "volumeMounts":[{"name":"cfg","mountPath":"/cfg","readOnly":true}],
                    "securityContext":{"runAsNonRoot":true,"capabilities":{"drop":["ALL"]}}}],
                    "volumes":[{"name":"cfg","configMap":{"name":"cm","items":[{"key":"k","path":"p"}]}}],
                    "nodeSelector":{"zone":"a"},"tolerations":[{"key":"k","operator":"Exists","effect":"NoSchedule"},
                // Tolerates what DefaultTolerationSeconds would add.
                {"operator":"Exists","effect":"NoExecute"}],
                    "affinity":{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"zone","labelSelector":{"matchLabels":{"app":"x"}}}}]}}}}),
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":meta("cm"),"data":{"k":"v"},"binaryData":{"b":"AAE="},"immutable":false}),
        ),
        (
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion":"v1","kind":"Secret","metadata":meta("sec"),"type":"Opaque","data":{"k":"dg=="}}),
        ),
        (
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"apiVersion":"v1","kind":"ServiceAccount","metadata":meta("sa"),
            "secrets":[{"name":"s"}],"imagePullSecrets":[{"name":"r"}],"automountServiceAccountToken":false}),
        ),
        (
            "/api/v1/namespaces/default/events",
            json!({"apiVersion":"v1","kind":"Event","metadata":meta("ev"),
            "involvedObject":{"kind":"Pod","namespace":"default","name":"pod","uid":"u"},"reason":"Started","message":"m","type":"Normal",
            "source":{"component":"kubelet","host":"n1"},"count":1,"firstTimestamp":"2030-01-01T00:00:00Z","lastTimestamp":"2030-01-01T00:00:00Z",
            "reportingComponent":"kubelet","reportingInstance":"n1"}),
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
            "metadata":{"name":"es","labels":{"kubernetes.io/service-name":"svc"}},"addressType":"IPv4",
            "endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true,"serving":true,"terminating":false},"hostname":"h","nodeName":"n1","zone":"a",
                          "targetRef":{"kind":"Pod","namespace":"default","name":"pod","uid":"u"},"hints":{"forZones":[{"name":"a"}]}}],
            "ports":[{"name":"http","port":8080,"protocol":"TCP","appProtocol":"http"}]}),
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":meta("lease"),
            "spec":{"holderIdentity":"me","leaseDurationSeconds":15,"acquireTime":"2030-01-01T00:00:00.000001Z","renewTime":"2030-01-01T00:00:01.000001Z","leaseTransitions":2}}),
        ),
        (
            "/apis/events.k8s.io/v1/namespaces/default/events",
            json!({"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":meta("ev2"),
            "eventTime":"2030-01-01T00:00:00.000001Z","reportingController":"example.com/ctl","reportingInstance":"ctl-1","action":"Reconcile",
            "reason":"Synced","type":"Normal","note":"n","regarding":{"kind":"Pod","namespace":"default","name":"pod"}}),
        ),
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json!({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
            "metadata":{"name":"gizmos.example.com"},
            "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","shortNames":["gz"],"categories":["all"]},
              "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
                "additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"}],
                "schema":{"openAPIV3Schema":{"type":"object","properties":{
                  "spec":{"type":"object","x-kubernetes-validations":[{"rule":"self.size >= 0","message":"m"}],
                    "properties":{"size":{"type":"integer","default":1,"minimum":0,"maximum":10},
                      "mode":{"type":"string","enum":["a","b"]},
                      "labels":{"type":"object","additionalProperties":{"type":"string"}},
                      "extra":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
                      "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["port"],
                        "items":{"type":"object","required":["port"],"properties":{"port":{"type":"integer"},"target":{"x-kubernetes-int-or-string":true}}}}}},
                  "status":{"type":"object","properties":{"ready":{"type":"boolean"}}}}}}}]}}),
        ),
    ]
}

/// Fields the server sets or drops itself (compared apart from the client's fields).
fn without_server_fields(mut v: Value) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "namespace",
        ] {
            m.remove(k);
        }
    }
    v
}

/// `sub` ⊆ `sup` (objects by key, everything else equal).
fn contained(sub: &Value, sup: &Value) -> bool {
    match (sub, sup) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| contained(v, w))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| contained(x, y))
        }
        _ => sub == sup,
    }
}

#[tokio::test]
async fn known_fields_of_every_served_builtin_survive_strict_round_trips() {
    let emu = emu().await;
    let all = every_builtin();
    let mut kinds: Vec<&str> = all
        .iter()
        .map(|(_, o)| o["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    // Every served built-in type (registry) is covered (core Event and events.k8s.io Event).
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "CustomResourceDefinition",
            "EndpointSlice",
            "Endpoints",
            "Event",
            "Event",
            "Lease",
            "Namespace",
            "Node",
            "Pod",
            "Secret",
            "Service",
            "ServiceAccount"
        ]
    );
    // Every request to v1 Endpoints is warned about its deprecation; no other warning may come.
    let unknown = |warnings: &[String]| {
        warnings
            .iter()
            .filter(|w| !w.contains("v1 Endpoints is deprecated"))
            .count()
    };
    for (path, obj) in all {
        let kind = obj["kind"].as_str().unwrap().to_string();
        let (code, warnings, created) = call(
            &emu,
            "POST",
            &format!("{path}?fieldValidation=Strict"),
            "application/json",
            &obj.to_string(),
        )
        .await;
        assert_eq!((code, unknown(&warnings)), (201, 0), "{kind}: {created}");
        let sent = without_server_fields(obj.clone());
        assert!(
            contained(&sent, &created),
            "{kind}: sent {sent}\nstored {created}"
        );
        // The stored object (with the server's defaults) is itself free of unknown fields:
        // writing it back strictly changes nothing and warns about nothing.
        let name = created["metadata"]["name"].as_str().unwrap();
        let item = format!("{path}/{name}");
        // The CRD controller writes its status (conditions, acceptedNames) just after the create.
        let mut created = created.clone();
        for _ in 0..100 {
            if kind != "CustomResourceDefinition" || created["status"]["conditions"].is_array() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            created = call(&emu, "GET", &item, "application/json", "").await.2;
        }
        let (code, warnings, put) = call(
            &emu,
            "PUT",
            &format!("{item}?fieldValidation=Strict"),
            "application/json",
            &created.to_string(),
        )
        .await;
        assert_eq!((code, unknown(&warnings)), (200, 0), "{kind}: {put}");
        assert_eq!(
            put["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
            "{kind}: no-op"
        );
        let mut cfg = without_server_fields(created.clone());
        if let Some(m) = cfg["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let (code, _, applied) = call(
            &emu,
            "PATCH",
            &format!("{item}?fieldManager=rt&force=true&fieldValidation=Strict"),
            "application/apply-patch+yaml",
            &cfg.to_string(),
        )
        .await;
        assert_eq!(code, 200, "{kind}: {applied}");
    }
}
