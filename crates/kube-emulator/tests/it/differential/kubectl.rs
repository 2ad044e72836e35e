//! kubectl 1.37 against both servers: create, client-side and server-side apply, patches of every
//! kind, conflicts, invalid objects and deletes, compared on exit status, stdout and stderr.

use super::harness::{Kubectl, Pair};

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8080}
";

const SERVICE_V2: &str = "apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8081}
  - {name: https, port: 443}
";

const MAPPING: &str = "apiVersion: portmapper.dev/v1alpha1
kind: PortMapping
metadata: {name: broker}
spec:
  serviceRef: {name: web}
  pods: {key: example.com/group}
  ports:
  - name: http
    checks: [{podReady: {}}]
";

const BAD_MAPPING: &str = "apiVersion: portmapper.dev/v1alpha1
kind: PortMapping
metadata: {name: bad}
spec:
  serviceRef: {name: web}
  pods: {key: example.com/group}
  probe: {timeoutSeconds: 20, periodSeconds: 5}
";

const SLICE: &str = "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-http
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.1.0.5]
  conditions: {ready: true}
ports:
- {name: http, port: 8080}
";

const ENDPOINTS: &str = "apiVersion: v1
kind: Endpoints
metadata: {name: legacy}
subsets:
- addresses: [{ip: 10.1.0.5}]
  ports: [{port: 8080}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_client_side() {
    let mut p = Pair::new("kubectl").await;
    let step = |args: &[&str]| Kubectl::new(args);
    p.kubectl("create", step(&["create", "-f", "-"]).stdin(SERVICE))
        .await;
    p.kubectl("create again", step(&["create", "-f", "-"]).stdin(SERVICE))
        .await;
    p.kubectl(
        "apply over a create",
        step(&["apply", "-f", "-"]).stdin(SERVICE_V2),
    )
    .await;
    p.kubectl(
        "apply unchanged",
        step(&["apply", "-f", "-"]).stdin(SERVICE_V2),
    )
    .await;
    p.kubectl(
        "get as JSON",
        step(&["get", "service", "web", "-o", "json"]),
    )
    .await;
    p.kubectl(
        "merge patch",
        step(&[
            "patch",
            "service",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"sessionAffinity":"ClientIP"}}"#,
        ]),
    )
    .await;
    p.kubectl(
        "json patch",
        step(&[
            "patch",
            "service",
            "web",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/spec/ports/1"}]"#,
        ]),
    )
    .await;
    p.kubectl(
        "strategic patch",
        step(&[
            "patch",
            "service",
            "web",
            "-p",
            r#"{"spec":{"ports":[{"port":90,"name":"alt"}]}}"#,
        ]),
    )
    .await;
    p.kubectl(
        "label and annotate",
        step(&["label", "service", "web", "owner=team-a"]),
    )
    .await;
    p.kubectl(
        "a bad patch",
        step(&[
            "patch",
            "service",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"ports":[{"port":0}]}}"#,
        ]),
    )
    .await;
    p.kubectl("apply a slice", step(&["apply", "-f", "-"]).stdin(SLICE))
        .await;
    p.kubectl(
        "apply Endpoints (warned)",
        step(&["apply", "-f", "-"]).stdin(ENDPOINTS),
    )
    .await;
    p.kubectl(
        "get Endpoints",
        step(&["get", "endpoints", "legacy", "-o", "json"]),
    )
    .await;
    p.kubectl(
        "apply a PortMapping",
        step(&["apply", "-f", "-"]).stdin(MAPPING),
    )
    .await;
    p.kubectl(
        "patch a PortMapping strategically",
        step(&[
            "patch",
            "portmapping",
            "broker",
            "-p",
            r#"{"spec":{"publishNotReadyAddresses":true}}"#,
        ]),
    )
    .await;
    p.kubectl(
        "an invalid PortMapping",
        step(&["apply", "-f", "-"]).stdin(BAD_MAPPING),
    )
    .await;
    p.kubectl(
        "get a missing one",
        step(&["get", "portmapping", "missing", "-o", "json"]),
    )
    .await;
    p.kubectl("delete", step(&["delete", "service", "web"]))
        .await;
    p.kubectl(
        "delete by file",
        step(&["delete", "-f", "-"]).stdin(MAPPING),
    )
    .await;
    p.kubectl("delete a missing one", step(&["delete", "service", "web"]))
        .await;
    p.finish();
}

const TYPO: &str = "apiVersion: v1
kind: Service
metadata:
  name: typo
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetport: 8080
";

const TYPO_MAPPING: &str = "apiVersion: portmapper.dev/v1alpha1
kind: PortMapping
metadata: {name: typo}
spec:
  serviceRef: {name: web}
  pods: {key: example.com/group}
  prob: {periodSeconds: 5}
";

/// kubectl sends `fieldValidation=Strict`: unknown fields fail creates (400) and client-side
/// applies (the strategic merge patch's 422), and server-side applies whatever it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_unknown_fields() {
    let mut p = Pair::new("kubectl-strict").await;
    let step = |args: &[&str]| Kubectl::new(args);
    p.kubectl(
        "create with a typo",
        step(&["create", "-f", "-"]).stdin(TYPO),
    )
    .await;
    let fixed = TYPO.replace("targetport", "targetPort");
    p.kubectl(
        "apply the fixed one",
        step(&["apply", "-f", "-"]).stdin(&fixed),
    )
    .await;
    p.kubectl(
        "apply with the typo",
        step(&["apply", "-f", "-"]).stdin(TYPO),
    )
    .await;
    p.kubectl(
        "server-side apply with the typo",
        step(&["apply", "--server-side", "-f", "-"]).stdin(TYPO),
    )
    .await;
    p.kubectl(
        "a custom resource with a typo",
        step(&["create", "-f", "-"]).stdin(TYPO_MAPPING),
    )
    .await;
    p.kubectl(
        "a custom resource with a typo, not strict",
        step(&["create", "--validate=warn", "-f", "-"]).stdin(TYPO_MAPPING),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side() {
    let mut p = Pair::new("kubectl-ssa").await;
    let step = |args: &[&str]| Kubectl::new(args);
    p.kubectl(
        "server-side apply",
        step(&["apply", "--server-side", "-f", "-"]).stdin(SERVICE),
    )
    .await;
    p.kubectl(
        "another manager conflicts",
        step(&[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            "-",
        ])
        .stdin(SERVICE_V2),
    )
    .await;
    p.kubectl(
        "forced",
        step(&[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--force-conflicts",
            "-f",
            "-",
        ])
        .stdin(SERVICE_V2),
    )
    .await;
    p.kubectl(
        "server-side apply of a PortMapping",
        step(&["apply", "--server-side", "-f", "-"]).stdin(MAPPING),
    )
    .await;
    p.kubectl(
        "an invalid one",
        step(&["apply", "--server-side", "-f", "-"]).stdin(BAD_MAPPING),
    )
    .await;
    p.kubectl(
        "the managed fields",
        step(&[
            "get",
            "service",
            "web",
            "-o",
            "json",
            "--show-managed-fields",
        ]),
    )
    .await;
    p.kubectl(
        "dry run",
        step(&["apply", "--server-side", "--dry-run=server", "-f", "-"]).stdin(SLICE),
    )
    .await;
    p.finish();
}
