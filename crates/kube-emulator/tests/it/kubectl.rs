//! kubectl conformance: the real kubectl against the emulator through a kubeconfig, asserting
//! kubectl's printed output. Skips loudly when kubectl is absent.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{kubectl, kubectl_bin, kubectl_stdin};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd], listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Ready, type: string, jsonPath: .status.ready}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: WidgetSpec is the desired state of a widget.
            properties:
              size: {type: integer, description: How big the widget is.}
              color: {type: string}
          status:
            type: object
            properties:
              ready: {type: string}
"#;

const WORKLOAD: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web}}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: test}
addressType: IPv4
endpoints:
- addresses: [10.1.0.5]
  conditions: {ready: true}
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: p1, labels: {app: web}}
spec:
  containers: [{name: c, image: nginx}]
"#;

macro_rules! kc {
    ($bin:expr, $emu:expr, $($arg:expr),+) => {{
        let (ok, out, err) = kubectl(&$bin, $emu.kubeconfig_path(), &[$($arg),+]).await;
        assert!(ok, "kubectl {:?} failed: {err}\n{out}", [$($arg),+]);
        out
    }};
}

fn table_rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[tokio::test]
async fn kubectl_crd_apply_get_explain_wait_patch_label() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let out = kc!(bin, emu, "get", "--raw", "/version");
    assert!(out.contains("\"gitVersion\":\"v1.34.0-emu\""), "{out}");
    let (ok, out, err) =
        kubectl_stdin(&bin, emu.kubeconfig_path(), &["apply", "-f", "-"], CRD).await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"
    );
    let out = kc!(
        bin,
        emu,
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s"
    );
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com condition met"
    );
    let w = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, labels: {tier: a}}\nspec: {size: 3}\n";
    let (ok, out, err) = kubectl_stdin(&bin, emu.kubeconfig_path(), &["apply", "-f", "-"], w).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "widget.example.com/w1 created");
    let (ok, out, err) = kubectl_stdin(
        &bin,
        emu.kubeconfig_path(),
        &["apply", "--server-side", "-f", "-"],
        &w.replace("w1", "w2").replace("size: 3", "size: 5"),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "widget.example.com/w2 serverside-applied");
    // Server-side Table with the CRD's printer columns.
    let out = kc!(bin, emu, "get", "widgets");
    let rows = table_rows(&out);
    assert_eq!(rows[0], vec!["NAME", "SIZE", "READY"]);
    assert_eq!(rows[1], vec!["w1", "3"]);
    assert_eq!(rows[2], vec!["w2", "5"]);
    // Status through the subresource, then the column shows it.
    kc!(
        bin,
        emu,
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":"yes"}}"#
    );
    let out = kc!(bin, emu, "get", "wd", "w1");
    assert_eq!(table_rows(&out)[1], vec!["w1", "3", "yes"]);
    // explain from the served OpenAPI v3 document.
    let out = kc!(bin, emu, "explain", "widget.spec");
    assert!(
        out.contains("WidgetSpec is the desired state of a widget."),
        "{out}"
    );
    assert!(
        out.contains("size\t<integer>") && out.contains("How big the widget is."),
        "{out}"
    );
    // Patches, label, annotate, selectors.
    kc!(
        bin,
        emu,
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"color":"red"}}"#
    );
    kc!(
        bin,
        emu,
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/size","value":4}]"#
    );
    let (ok, _, err) = kubectl(
        &bin,
        emu.kubeconfig_path(),
        &[
            "patch",
            "widget",
            "w1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"size":9}}"#,
        ],
    )
    .await;
    assert!(
        !ok && (err.contains("415")
            || err.contains("UnsupportedMediaType")
            || err.contains("unknown format")),
        "SMP on a CR must be rejected: {err}"
    );
    let out = kc!(bin, emu, "label", "widget", "w1", "env=prod");
    assert_eq!(out.trim(), "widget.example.com/w1 labeled");
    let out = kc!(bin, emu, "annotate", "widget", "w1", "note=hello");
    assert_eq!(out.trim(), "widget.example.com/w1 annotated");
    let out = kc!(bin, emu, "get", "widgets", "-l", "env=prod", "-o", "name");
    assert_eq!(out.trim(), "widget.example.com/w1");
    let out = kc!(
        bin,
        emu,
        "get",
        "widgets",
        "--field-selector",
        "metadata.name=w2",
        "-o",
        "name"
    );
    assert_eq!(out.trim(), "widget.example.com/w2");
    let out = kc!(
        bin,
        emu,
        "get",
        "widget",
        "w1",
        "-o",
        "jsonpath={.spec.size} {.spec.color} {.metadata.generation} {.metadata.annotations.note}"
    );
    assert_eq!(out.trim(), "4 red 3 hello");
    let out = kc!(bin, emu, "get", "widget", "w1", "-o", "yaml");
    assert!(
        out.contains("kind: Widget") && out.contains("  size: 4") && out.contains("ready: \"yes\""),
        "{out}"
    );
}

#[tokio::test]
async fn kubectl_builtins_server_side_apply_wide_status_and_gc() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let (ok, out, err) = kubectl_stdin(
        &bin,
        emu.kubeconfig_path(),
        &["apply", "--server-side", "-f", "-"],
        WORKLOAD,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "service/web serverside-applied\nendpointslice.discovery.k8s.io/web-1 serverside-applied\npod/p1 serverside-applied"
    );
    let out = kc!(bin, emu, "get", "endpointslices");
    let rows = table_rows(&out);
    assert_eq!(
        rows[0],
        vec!["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    );
    assert_eq!(&rows[1][..4], &["web-1", "IPv4", "8080", "10.1.0.5"]);
    let out = kc!(bin, emu, "get", "svc", "web", "-o", "wide");
    let rows = table_rows(&out);
    assert_eq!(
        rows[0],
        vec![
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
            "SELECTOR"
        ]
    );
    assert_eq!(rows[1][0], "web");
    assert_eq!(rows[1][1], "ClusterIP");
    assert!(rows[1][2].starts_with("10.96."), "{out}");
    assert_eq!(rows[1][4], "80/TCP");
    // Pod status through the subresource (no kubelet in the emulator).
    kc!(
        bin,
        emu,
        "patch",
        "pod",
        "p1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running","podIP":"10.244.0.7","podIPs":[{"ip":"10.244.0.7"}]}}"#
    );
    let out = kc!(bin, emu, "get", "pods", "-o", "wide");
    let rows = table_rows(&out);
    assert_eq!(rows[1][0], "p1");
    assert!(
        rows[1].contains(&"Running".to_string()) && rows[1].contains(&"10.244.0.7".to_string()),
        "{out}"
    );
    let out = kc!(
        bin,
        emu,
        "get",
        "pods",
        "--field-selector",
        "status.podIP=10.244.0.7",
        "-o",
        "name"
    );
    assert_eq!(out.trim(), "pod/p1");
    // Strategic merge patch on a built-in (ports keyed by port).
    kc!(
        bin,
        emu,
        "patch",
        "svc",
        "web",
        "--type=strategic",
        "-p",
        r#"{"spec":{"ports":[{"port":80,"name":"web"}]}}"#
    );
    let out = kc!(
        bin,
        emu,
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.spec.ports[0].name} {.spec.ports[0].targetPort} {.spec.ports[0].protocol}"
    );
    assert_eq!(out.trim(), "web 8080 TCP");
    // Garbage collection of dependents on delete.
    let uid = kc!(
        bin,
        emu,
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.metadata.uid}"
    );
    kc!(
        bin,
        emu,
        "patch",
        "endpointslice",
        "web-1",
        "--type=merge",
        "-p",
        &format!(
            r#"{{"metadata":{{"ownerReferences":[{{"apiVersion":"v1","kind":"Service","name":"web","uid":"{uid}","controller":true}}]}}}}"#
        )
    );
    let out = kc!(bin, emu, "delete", "svc", "web");
    assert_eq!(out.trim(), "service \"web\" deleted");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, out, err) = kubectl(
            &bin,
            emu.kubeconfig_path(),
            &["get", "endpointslice", "web-1"],
        )
        .await;
        if err.contains("NotFound") || err.contains("not found") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dependent slice not collected: {out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn kubectl_get_watch_prints_new_objects() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let kc = emu.kubeconfig_path().to_path_buf();
    let mut child = Command::new(&bin)
        .env("KUBECONFIG", &kc)
        .args(["get", "configmaps", "-w", "--request-timeout=0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: watched}\ndata: {a: b}\n";
    let (ok, _, err) = kubectl_stdin(&bin, &kc, &["apply", "-f", "-"], cm).await;
    assert!(ok, "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let found = loop {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push(l.clone());
            if l.split_whitespace().next() == Some("watched") {
                break true;
            }
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        found,
        "kubectl get -w never printed the new object: {seen:?}"
    );
}

#[tokio::test]
async fn kubectl_versions_basic_conformance() {
    let Some(_) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let mut tried = 0;
    // Versioned binaries sit on PATH or next to the (dispatcher) kubectl.
    let dir = Command::new("sh")
        .args(["-c", "dirname \"$(readlink -f \"$(command -v kubectl)\")\""])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    for minor in 27..=33 {
        let on_path = format!("kubectl.1.{minor}");
        let beside = format!("{dir}/kubectl.1.{minor}");
        let bin = if std::path::Path::new(&beside).exists() {
            beside
        } else {
            on_path
        };
        if Command::new(&bin)
            .arg("version")
            .arg("--client")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
        {
            tried += 1;
            let name = format!("v{minor}");
            let cm = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: b}}\n"
            );
            let (ok, out, err) =
                kubectl_stdin(&bin, emu.kubeconfig_path(), &["apply", "-f", "-"], &cm).await;
            assert!(
                ok && out.trim() == format!("configmap/{name} created"),
                "{bin}: {out} {err}"
            );
            let (ok, out, err) = kubectl_stdin(
                &bin,
                emu.kubeconfig_path(),
                &["apply", "--server-side", "--force-conflicts", "-f", "-"],
                &cm.replace("a: b", "a: c"),
            )
            .await;
            assert!(
                ok && out.trim() == format!("configmap/{name} serverside-applied"),
                "{bin}: {out} {err}"
            );
            let (ok, out, err) = kubectl(
                &bin,
                emu.kubeconfig_path(),
                &["get", "configmap", &name, "-o", "jsonpath={.data.a}"],
            )
            .await;
            assert!(ok && out == "c", "{bin}: {out} {err}");
            let (ok, out, err) =
                kubectl(&bin, emu.kubeconfig_path(), &["delete", "configmap", &name]).await;
            assert!(
                ok && out.trim() == format!("configmap \"{name}\" deleted"),
                "{bin}: {out} {err}"
            );
        }
    }
    eprintln!("kubectl version sweep: {tried} versioned binaries exercised");
    if tried == 0 {
        eprintln!(
            "\n==================== SKIPPED: no versioned kubectl.1.NN binaries on PATH ====================\n"
        );
    }
}

#[tokio::test]
async fn kubectl_server_dry_run_changes_nothing() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dry}\ndata: {a: b}\n";
    let (ok, out, err) = kubectl_stdin(
        &bin,
        emu.kubeconfig_path(),
        &["apply", "--dry-run=server", "-f", "-"],
        cm,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "configmap/dry created (server dry run)");
    let (ok, _, err) = kubectl(&bin, emu.kubeconfig_path(), &["get", "configmap", "dry"]).await;
    assert!(
        !ok && (err.contains("NotFound") || err.contains("not found")),
        "{err}"
    );
    let rv = emu.resource_version();
    let (ok, out, err) =
        kubectl_stdin(&bin, emu.kubeconfig_path(), &["apply", "-f", "-"], cm).await;
    assert!(ok && out.trim() == "configmap/dry created", "{out} {err}");
    assert!(emu.resource_version() > rv);
    let rv = emu.resource_version();
    let out = kc!(bin, emu, "delete", "configmap", "dry", "--dry-run=server");
    assert_eq!(out.trim(), "configmap \"dry\" deleted (server dry run)");
    assert_eq!(emu.resource_version(), rv, "dry-run delete wrote nothing");
    kc!(bin, emu, "get", "configmap", "dry");
}

/// The project's own CRD and demo manifests through kubectl, as a user trying PortMappings
/// without a cluster would.
#[tokio::test]
async fn kubectl_portmapping_crd_demo_manifests_columns_and_explain() {
    let Some(bin) = kubectl_bin() else { return };
    let emu = crate::common::emu().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let crd = root.join("crds/portmapper.dev_portmappings.yaml");
    let demo = root.join("examples/demo");
    let out = kc!(
        bin,
        emu,
        "apply",
        "--server-side",
        "-f",
        crd.to_str().unwrap()
    );
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/portmappings.portmapper.dev serverside-applied"
    );
    kc!(
        bin,
        emu,
        "wait",
        "--for=condition=Established",
        "crd/portmappings.portmapper.dev",
        "--timeout=10s"
    );
    let out = kc!(bin, emu, "apply", "-f", demo.to_str().unwrap());
    assert!(
        out.contains("service/my-service created")
            && out.contains("portmapping.portmapper.dev/my-service created"),
        "{out}"
    );
    let out = kc!(bin, emu, "get", "portmappings");
    let rows = table_rows(&out);
    assert_eq!(
        &rows[0][..4],
        &["NAME", "SERVICE", "PORTS", "READY"],
        "{out}"
    );
    assert_eq!(&rows[1][..2], &["my-service", "my-service"], "{out}");
    let out = kc!(bin, emu, "explain", "portmapping.spec");
    assert!(
        out.contains("KIND:       PortMapping") || out.contains("KIND:     PortMapping"),
        "{out}"
    );
    assert!(out.contains("serviceRef") && out.contains("ports"), "{out}");
    let out = kc!(
        bin,
        emu,
        "get",
        "pods",
        "-l",
        "example.com/group=my-service",
        "-o",
        "name"
    );
    assert_eq!(out.lines().count(), 4, "{out}");
    // Status written the way the operator does (server-side apply on /status) shows in the columns.
    let status = r#"{"apiVersion":"portmapper.dev/v1alpha1","kind":"PortMapping","metadata":{"name":"my-service"},"status":{"summary":"http 3/3, https 3/3","conditions":[{"type":"Ready","status":"True","reason":"Published","message":"ok","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}"#;
    let (ok, _, err) = kubectl_stdin(
        &bin,
        emu.kubeconfig_path(),
        &[
            "apply",
            "--server-side",
            "--subresource=status",
            "--field-manager=portmapper.dev",
            "-f",
            "-",
        ],
        status,
    )
    .await;
    if ok {
        let out = kc!(bin, emu, "get", "portmapping", "my-service");
        let row = &table_rows(&out)[1];
        assert!(row.contains(&"True".to_string()), "{out}");
    } else {
        // kubectl < 1.28 has no --subresource for apply.
        assert!(err.contains("subresource"), "{err}");
    }
}
