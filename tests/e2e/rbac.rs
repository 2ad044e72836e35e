//! Least privilege, proven: the operator binary runs an end-to-end scenario against the
//! emulator (leader election on, legacy Endpoints, a selector migration with adoption and native
//! cleanup, a selector coming back, legacy Endpoints switched off, SIGTERM releasing the Lease)
//! while the emulator's request log records every request. The (verb, group, resource) set the
//! operator issued must equal what the rendered chart grants, apart from the listed rules no
//! API request can exercise.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::{Cluster, Proc, TempDir, bin, kubectl_available, repo};

const WAIT: Duration = Duration::from_secs(30);
const LEASE_NS: &str = "portmapper-system";
const LEASE: &str = "portmapper";

/// (verb, group, resource or resource/subresource).
type Access = (String, String, String);

/// Granted rules that no request can exercise, with why the chart still needs them.
const UNREACHABLE: &[(&str, &str, &str, &str)] = &[
    (
        "update",
        "portmapper.dev",
        "portmappings/finalizers",
        "not an API request: our slices and Endpoints set ownerReferences with blockOwnerDeletion: true \
     (portmapper-core planner/objects.rs owner_reference), and the OwnerReferencesPermissionEnforcement \
     admission plugin lets that through only for users who may update the owner's finalizers; \
     the emulator has no admission plugins",
    ),
    (
        "get",
        "discovery.k8s.io",
        "endpointslices",
        "only for a slice of ours that left our label-selected watch without our deleting it \
     (someone relabelled or deleted it), until the metadata watch of slices not ours shows it \
     (portmapper reconcile.rs read_names_in_doubt; crates/portmapper/tests/it/ownership.rs \
     covers it); this scenario never touches our slices",
    ),
];

fn access(verb: &str, group: &str, resource: &str) -> Access {
    (verb.into(), group.into(), resource.into())
}

/// Every (verb, group, resource) granted by the chart's Roles and ClusterRoles, with the
/// resourceNames a rule is limited to (empty = any name).
fn granted(objects: &[Value]) -> BTreeMap<Access, Vec<String>> {
    let mut out: BTreeMap<Access, Vec<String>> = BTreeMap::new();
    for o in objects {
        if !matches!(o["kind"].as_str(), Some("Role" | "ClusterRole")) {
            continue;
        }
        for rule in o["rules"].as_array().unwrap() {
            let names: Vec<String> = rule["resourceNames"]
                .as_array()
                .map(|n| n.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        let key = access(
                            v.as_str().unwrap(),
                            g.as_str().unwrap(),
                            r.as_str().unwrap(),
                        );
                        assert!(
                            !out.contains_key(&key),
                            "{key:?} is granted twice; keep one rule per access"
                        );
                        out.insert(key, names.clone());
                    }
                }
            }
        }
    }
    out
}

/// Whether some rule grants `key` for a request in `namespace` (empty: cluster-wide, e.g. an
/// all-namespaces watch): a ClusterRole rule anywhere, a Role rule only in its own namespace.
fn in_scope(objects: &[Value], key: &Access, namespace: &str) -> bool {
    objects.iter().any(|o| {
        let scope_ok = match o["kind"].as_str() {
            Some("ClusterRole") => true,
            Some("Role") => o["metadata"]["namespace"] == namespace,
            _ => false,
        };
        scope_ok
            && o["rules"].as_array().unwrap().iter().any(|rule| {
                let has = |field: &str, want: &str| {
                    rule[field].as_array().unwrap().iter().any(|v| v == want)
                };
                has("apiGroups", &key.1) && has("resources", &key.2) && has("verbs", &key.0)
            })
    })
}

/// Every request's accesses are granted where it was made (namespace scoping of Roles).
fn assert_scoped(objects: &[Value], requests: &[Value]) {
    for r in requests {
        let ns = r["namespace"].as_str().unwrap_or_default();
        for key in needs(r) {
            assert!(
                in_scope(objects, &key, ns),
                "{key:?} in namespace {ns:?} is not granted there: {r}"
            );
        }
    }
}

/// The operator's requests in the emulator's log (kubectl's are the test's own).
fn operator_requests(cluster: &Cluster) -> Vec<Value> {
    let log: Value =
        serde_json::from_str(&cluster.ok(&["get", "--raw", "/__emu/requests"])).unwrap();
    log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            !r["user_agent"]
                .as_str()
                .unwrap_or_default()
                .starts_with("kubectl")
        })
        .cloned()
        .collect()
}

/// What one logged request needs authorized. The emulator has no authorizer, so this applies
/// the API server's rule: a server-side apply that creates the object (201 Created) is
/// authorized as `create` too (Kubernetes docs, Server-Side Apply, "RBAC and permissions").
fn needs(r: &Value) -> Vec<Access> {
    let verb = r["verb"].as_str().unwrap_or_default();
    if verb.is_empty() {
        return Vec::new(); // discovery, /version: granted to every authenticated user
    }
    let resource = r["resource"].as_str().unwrap();
    let sub = r["subresource"].as_str().unwrap_or_default();
    let resource = if sub.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{sub}")
    };
    let group = r["group"].as_str().unwrap();
    let mut out = vec![access(verb, group, &resource)];
    if verb == "patch" && r["patch_type"] == "apply" && r["status"] == 201 {
        out.push(access("create", group, &resource));
    }
    out
}

fn used(requests: &[Value]) -> BTreeSet<Access> {
    requests.iter().flat_map(needs).collect()
}

fn set_pod_status(cluster: &Cluster, pod: &str, ip: &str) {
    // ContainersReady too: web-2 is gated on publication, and podReady reads it for a gated pod.
    let patch = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}});
    cluster.ok(&[
        "patch",
        "pod",
        pod,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
}

fn apply_json(cluster: &Cluster, objects: Value) {
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], objects.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Service with a selector and the leftovers of the native controllers (there is no
/// kube-controller-manager in the emulator): their slice and the Endpoints object.
fn native_world(cluster: &Cluster) {
    let crds = repo().join("charts/portmapper/crds");
    cluster.ok(&["apply", "-f", crds.to_str().unwrap()]);
    cluster.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/portmappings.portmapper.dev",
        "--timeout=20s",
    ]);
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web", "example.com/pool": "web"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                "ports": [{"name": "http", "containerPort": 8080}]}]}})
    };
    // web-2 opts in to the publication gate: the operator patches its pods/status.
    let gated = |name: &str| {
        let mut p = pod(name);
        p["spec"]["readinessGates"] = json!([{"conditionType": "portmapper.dev/published"}]);
        p
    };
    apply_json(
        cluster,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1",
                "labels": {"topology.kubernetes.io/zone": "zone-a"}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}},
            pod("web-1"), gated("web-2"),
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": "default",
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"}},
                "subsets": [{"addresses": [{"ip": "10.244.0.1"}], "ports": [{"name": "http", "port": 8080}]}]},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "web-abcde",
                "namespace": "default", "labels": {"kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.0.1"]}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
        ]}),
    );
    set_pod_status(cluster, "web-1", "10.244.0.1");
    set_pod_status(cluster, "web-2", "10.244.0.2");
    apply_json(
        cluster,
        json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "example.com/pool"},
                "legacyEndpoints": true, "ports": [{"name": "http", "checks": [{"podReady": {}}]}]}}),
    );
}

fn operator(cluster: &Cluster, dir: &TempDir, extra: &[&str]) -> Proc {
    let log = std::fs::File::create(dir.0.join("operator.log")).unwrap();
    let child = Command::new(bin("portmapper"))
        .args([
            "run",
            "--log-format",
            "json",
            "--http-addr",
            "127.0.0.1:0",
            "--resync-seconds",
            "2",
            "--kubeconfig",
        ])
        .arg(&cluster.kubeconfig)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("portmapper starts");
    Proc(child)
}

/// The operator's HTTP address, from its JSON log.
fn http_addr(log: &str) -> String {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "serving /metrics, /healthz and /readyz")
        .and_then(|l| l["addr"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no HTTP address in the operator log:\n{log}"))
}

/// A plain HTTP/1.0 GET on loopback: (status, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The chart's probe paths are served, and every operator metric the documented alerts use is exposed.
fn check_probes_and_alert_metrics(log: &str) {
    let addr = http_addr(log);
    assert_eq!(http_get(&addr, "/healthz"), (200, "ok\n".to_string()));
    // The readinessProbe: ready once the caches have synced (the scenario ran, so they have).
    assert_eq!(http_get(&addr, "/readyz"), (200, "ok\n".to_string()));
    let (status, metrics) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    let families: BTreeSet<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let docs = std::fs::read_to_string(repo().join("docs/install.md")).unwrap();
    let alerts = docs
        .split("kind: PrometheusRule")
        .nth(1)
        .expect("docs/install.md has example alerts");
    let alerts = alerts.split("```").next().unwrap();
    let mut used = BTreeSet::new();
    for token in alerts.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if token.starts_with("portmapper_") {
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| token.strip_suffix(s))
                .unwrap_or(token);
            used.insert(family.to_string());
        }
    }
    assert!(used.len() >= 5, "{used:?}");
    // A labelled family appears in /metrics only once it has a sample (no collision or error
    // happened here): those must at least be registered under that name in the operator.
    let source = std::fs::read_to_string(repo().join("crates/portmapper/src/metrics.rs")).unwrap();
    let registered = |family: &str| {
        family
            .strip_prefix("portmapper_")
            .is_some_and(|name| source.contains(&format!("\"{name}\"")))
    };
    let missing: Vec<&String> = used
        .iter()
        .filter(|f| !families.contains(f.as_str()) && !registered(f))
        .collect();
    assert!(
        missing.is_empty(),
        "alerts in docs/install.md use metrics the operator neither exposes nor registers: {missing:?}\n{metrics}"
    );
}

/// SIGTERM (not SIGKILL): the operator finishes and releases the Lease, as in a rollout.
fn terminate(proc: &mut Proc) {
    let pid = proc.0.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while proc.0.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "operator ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn condition(cluster: &Cluster, type_: &str) -> String {
    let out = cluster.kubectl(&[
        "get",
        "pm",
        "web",
        "-o",
        &format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}"),
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_condition(cluster: &Cluster, type_: &str, want: &str, log: &dyn Fn() -> String) {
    let deadline = std::time::Instant::now() + WAIT;
    while condition(cluster, type_) != want {
        assert!(
            std::time::Instant::now() < deadline,
            "{type_} never became {want:?}; operator log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn endpoints_manager(cluster: &Cluster) -> String {
    let out = cluster.kubectl(&[
        "get",
        "endpoints",
        "web",
        "-o",
        "jsonpath={.metadata.labels.endpointslice\\.kubernetes\\.io/managed-by}",
    ]);
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        "<absent>".into()
    }
}

fn wait_for(what: &str, log: &dyn Fn() -> String, pred: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !pred() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out: {what}; operator log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn chart_rbac_grants_exactly_what_the_operator_uses() {
    if !kubectl_available() {
        return;
    }
    if std::env::var("PORTMAPPER_E2E_KUBECONFIG").is_ok() {
        eprintln!(
            "SKIPPED: the RBAC usage test needs the emulator's request log, not a real cluster"
        );
        return;
    }
    let Some(chart) = crate::chart::render("portmapper", LEASE_NS, &json!({})) else {
        return;
    };
    let cluster = Cluster::emulator("rbac");
    let dir = TempDir::new("rbac-operator");
    let log = || std::fs::read_to_string(dir.0.join("operator.log")).unwrap_or_default();
    native_world(&cluster);
    let mut op = operator(
        &cluster,
        &dir,
        &[
            "--leader-elect=true",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            LEASE,
            "--identity",
            "rbac-test",
            "--lease-duration-seconds",
            "4",
            "--lease-grace-seconds",
            "2",
        ],
    );

    // Leader: the Lease is ours, and the migration is published beside the native slices.
    cluster.eventually(
        &[
            "get",
            "lease",
            LEASE,
            "-n",
            LEASE_NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        WAIT,
        |out| out == "rbac-test",
    );
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    cluster.eventually(
        &["get", "endpointslice", "web.http", "-o", "name"],
        WAIT,
        |o| !o.is_empty(),
    );

    // Selector removed: the abandoned Endpoints object is adopted (annotations stripped with a
    // merge patch, then applied) and the native slice deleted.
    cluster.ok(&[
        "patch",
        "svc",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/selector"}]"#,
    ]);
    wait_for("Endpoints adopted", &log, || {
        endpoints_manager(&cluster) == "portmapper.dev"
    });
    wait_for("native slice deleted", &log, || {
        !cluster
            .kubectl(&["get", "endpointslice", "web-abcde"])
            .status
            .success()
    });
    wait_condition(&cluster, "SelectorMigration", "", &log);

    // The selector comes back (a warning again) and goes again.
    cluster.ok(&[
        "patch",
        "svc",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"app":"web"}}}"#,
    ]);
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    cluster.ok(&[
        "patch",
        "svc",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/selector"}]"#,
    ]);
    wait_condition(&cluster, "SelectorMigration", "", &log);

    // legacyEndpoints off: ours is deleted.
    cluster.ok(&[
        "patch",
        "pm",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"legacyEndpoints":false}}"#,
    ]);
    wait_for("legacy Endpoints deleted", &log, || {
        endpoints_manager(&cluster) == "<absent>"
    });
    wait_condition(&cluster, "Ready", "True", &log);
    check_probes_and_alert_metrics(&log());

    terminate(&mut op);
    cluster.eventually(
        &[
            "get",
            "lease",
            LEASE,
            "-n",
            LEASE_NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        WAIT,
        |out| out != "rbac-test",
    );

    let requests = operator_requests(&cluster);
    let used = used(&requests);
    let granted = granted(&chart);
    let unreachable: BTreeSet<Access> = UNREACHABLE
        .iter()
        .map(|(v, g, r, _)| access(v, g, r))
        .collect();

    let denied: Vec<&Access> = used.iter().filter(|a| !granted.contains_key(*a)).collect();
    let unused: Vec<&Access> = granted
        .keys()
        .filter(|a| !used.contains(*a) && !unreachable.contains(*a))
        .collect();
    let stale: Vec<&Access> = unreachable.iter().filter(|a| used.contains(*a)).collect();
    eprintln!("operator used {} accesses:", used.len());
    for a in &used {
        eprintln!("  {a:?}");
    }
    assert!(
        denied.is_empty(),
        "the chart does not grant what the operator used: {denied:?}"
    );
    assert!(
        unused.is_empty(),
        "the chart grants what the scenario never used (drop it, or justify it in UNREACHABLE): {unused:?}"
    );
    assert!(
        stale.is_empty(),
        "UNREACHABLE lists accesses the scenario did use: {stale:?}"
    );
    for a in &unreachable {
        assert!(
            granted.contains_key(a),
            "UNREACHABLE lists {a:?}, which the chart does not grant"
        );
    }

    assert_scoped(&chart, &requests);
    // Name-limited rules: every request under them named an allowed object, and the Lease
    // requests stayed in the release namespace the Role is bound in.
    for r in &requests {
        for key in needs(r) {
            let names = &granted[&key];
            if !names.is_empty() {
                // A list or watch is authorized by name through its metadata.name field
                // selector, as kube-apiserver's RBAC does.
                let query = r["query"].as_str().unwrap_or_default();
                let by_selector = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name%3D"))
                    .map(str::to_string);
                let name = match r["name"].as_str().unwrap() {
                    "" => by_selector.unwrap_or_default(),
                    n => n.to_string(),
                };
                assert!(names.contains(&name), "{r}");
            }
        }
        if r["resource"] == "leases" {
            assert_eq!(r["namespace"], LEASE_NS, "{r}");
        }
    }
}

#[test]
fn without_node_lookups_and_leader_election_no_node_or_lease_access() {
    if !kubectl_available() || std::env::var("PORTMAPPER_E2E_KUBECONFIG").is_ok() {
        return;
    }
    let values =
        json!({"nodeLookups": false, "leaderElection": {"enabled": false}, "replicaCount": 1});
    let Some(reduced) = crate::chart::render("portmapper", LEASE_NS, &values) else {
        return;
    };
    let Some(full) = crate::chart::render("portmapper", LEASE_NS, &json!({})) else {
        return;
    };
    let cluster = Cluster::emulator("rbac-reduced");
    let dir = TempDir::new("rbac-reduced-operator");
    let log = || std::fs::read_to_string(dir.0.join("operator.log")).unwrap_or_default();
    native_world(&cluster);
    let mut op = operator(
        &cluster,
        &dir,
        &["--leader-elect=false", "--node-lookups=false"],
    );
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    terminate(&mut op);

    let used = used(&operator_requests(&cluster));
    let touched: Vec<&Access> = used
        .iter()
        .filter(|a| a.2 == "nodes" || a.2 == "leases")
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    // The reduced chart is the full chart minus exactly the Node and Lease rules.
    let (reduced, full) = (granted(&reduced), granted(&full));
    let dropped: BTreeSet<&str> = full
        .keys()
        .filter(|a| !reduced.contains_key(*a))
        .map(|a| a.2.as_str())
        .collect();
    assert_eq!(dropped, BTreeSet::from(["leases", "nodes"]));
    assert!(reduced.keys().all(|a| full.contains_key(a)));
    assert!(
        used.iter().all(|a| reduced.contains_key(a)),
        "{used:?} vs {reduced:?}"
    );
}

#[test]
fn with_watch_namespace_every_request_fits_the_namespaced_roles() {
    if !kubectl_available() || std::env::var("PORTMAPPER_E2E_KUBECONFIG").is_ok() {
        return;
    }
    let values = json!({"watchNamespace": "default"});
    let Some(chart) = crate::chart::render("portmapper", LEASE_NS, &values) else {
        return;
    };
    assert!(
        !chart
            .iter()
            .any(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "portmapper"),
        "watchNamespace renders Roles"
    );
    let cluster = Cluster::emulator("rbac-scoped");
    let dir = TempDir::new("rbac-scoped-operator");
    let log = || std::fs::read_to_string(dir.0.join("operator.log")).unwrap_or_default();
    native_world(&cluster);
    let mut op = operator(
        &cluster,
        &dir,
        &[
            "--watch-namespace",
            "default",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            LEASE,
        ],
    );
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    cluster.ok(&[
        "patch",
        "svc",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/selector"}]"#,
    ]);
    wait_for("Endpoints adopted", &log, || {
        endpoints_manager(&cluster) == "portmapper.dev"
    });
    terminate(&mut op);
    let requests = operator_requests(&cluster);
    assert!(!requests.is_empty());
    // Namespaced resources only in `default` (Role), Nodes cluster-wide (ClusterRole), the Lease
    // in the release namespace (Role).
    assert_scoped(&chart, &requests);
}
