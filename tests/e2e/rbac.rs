//! Least privilege, proven on the real API server: the rendered chart is installed, and the
//! operator binary runs as the chart's ServiceAccount (a token from `kubectl create token`), so
//! kube-apiserver's RBAC authorizes every request. It runs an end-to-end scenario (leader
//! election on, legacy Endpoints, a selector migration with adoption and native cleanup beside the
//! real EndpointSlice controller, a selector coming back, legacy Endpoints switched off, SIGTERM
//! releasing the Lease) while the audit log records every request. No request may be denied, and
//! the (verb, group, resource) set the operator issued must equal what the chart grants, apart
//! from the listed rules no API request can exercise.
//!
//! An operator that watches every namespace would also manage the other tests' PortMappings, so
//! the cluster-wide scenarios run one at a time on a control plane of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use test_support::realkube::{AuditEvent, CONTROLLERS, ControlPlane};

use crate::env::{Cluster, Proc, TempDir, bin, kubectl_available, repo};

const WAIT: Duration = Duration::from_secs(30);

/// The control plane of the cluster-wide scenarios, and the lock that runs them one at a time.
pub(crate) fn cluster_wide() -> (&'static ControlPlane, std::sync::MutexGuard<'static, ()>) {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    (
        PLANE.get_or_init(|| ControlPlane::start(CONTROLLERS)),
        guard,
    )
}

/// The chart, installed for real in its release namespace, and a kubeconfig that acts as its
/// ServiceAccount in the test's namespace.
pub(crate) struct Install {
    pub(crate) objects: Vec<Value>,
    pub(crate) namespace: String,
    /// The Lease the chart's Role names (the Deployment's `PORTMAPPER_LEASE_NAME`).
    lease: String,
    user: String,
    pub(crate) kubeconfig: std::path::PathBuf,
}

/// Renders the chart as release `pm-<test namespace>` in `<test namespace>-system`, applies it
/// (server-side, as Helm would create it) and issues a token for its ServiceAccount.
pub(crate) fn install(cluster: &Cluster, dir: &TempDir, values: &Value) -> Option<Install> {
    let release = format!("pm-{}", cluster.namespace);
    let namespace = format!("{}-system", cluster.namespace);
    let objects = crate::chart::render(&release, &namespace, values)?;
    cluster.ok(&["create", "namespace", &namespace]);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let out = cluster.kubectl_stdin(
        &["apply", "--server-side", "--field-manager=helm", "-f", "-"],
        list.to_string().as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let account = objects
        .iter()
        .find(|o| o["kind"] == "ServiceAccount")
        .and_then(|o| o["metadata"]["name"].as_str())
        .expect("the chart creates a ServiceAccount")
        .to_string();
    let token = cluster.ok(&[
        "create",
        "token",
        &account,
        "-n",
        &namespace,
        "--duration=2h",
    ]);
    let kubeconfig = dir.0.join("operator.kubeconfig");
    cluster
        .plane()
        .kubeconfig_with_token(token.trim(), &cluster.namespace, &kubeconfig);
    let lease = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .flat_map(|o| {
            o["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .iter()
        })
        .find(|e| e["name"] == "PORTMAPPER_LEASE_NAME")
        .and_then(|e| e["value"].as_str())
        .unwrap_or_default()
        .to_string();
    Some(Install {
        lease,
        objects,
        user: format!("system:serviceaccount:{namespace}:{account}"),
        namespace,
        kubeconfig,
    })
}

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
     admission plugin, which clusters enable, lets that through only for users who may update the \
     owner's finalizers; it is an authorization check inside a write, not a request of its own",
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
        if !matches!(o["kind"].as_str(), Some("Role" | "ClusterRole")) || for_users(o) {
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

/// Whether `role` is one of the chart's roles for users (aggregated into `edit` and `view`),
/// not the operator's.
fn for_users(role: &Value) -> bool {
    role["metadata"]["labels"].as_object().is_some_and(|l| {
        l.keys()
            .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
    })
}

/// Whether some rule grants `key` for a request in `namespace` (empty: cluster-wide, e.g. an
/// all-namespaces watch): a ClusterRole rule anywhere, a Role rule only in its own namespace.
fn in_scope(objects: &[Value], key: &Access, namespace: &str) -> bool {
    objects.iter().any(|o| {
        let scope_ok = match o["kind"].as_str() {
            _ if for_users(o) => false,
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
fn assert_scoped(objects: &[Value], requests: &[AuditEvent]) {
    for r in requests {
        let ns = &r.object_ref.namespace;
        for key in needs(r) {
            assert!(
                in_scope(objects, &key, ns),
                "{key:?} in namespace {ns:?} is not granted there: {r:?}"
            );
        }
    }
}

/// The operator's requests in the audit log: those of the chart's ServiceAccount.
fn operator_requests(cluster: &Cluster, install: &Install) -> Vec<AuditEvent> {
    cluster
        .plane()
        .audit()
        .into_iter()
        .filter(|e| e.user.username == install.user)
        .collect()
}

/// Requests the API server refused to authorize.
fn assert_none_denied(requests: &[AuditEvent]) {
    let denied: Vec<String> = requests
        .iter()
        .filter(|e| e.response_status.code == 403)
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect();
    assert!(denied.is_empty(), "RBAC denied the operator: {denied:#?}");
}

/// What one request needed authorized. A server-side apply that creates the object (201
/// Created) is authorized as `create` too (Kubernetes docs, Server-Side Apply, "RBAC and
/// permissions"): only an apply can create with a PATCH.
fn needs(e: &AuditEvent) -> Vec<Access> {
    let o = &e.object_ref;
    if o.resource.is_empty() {
        return Vec::new(); // discovery, /version: granted to every authenticated user
    }
    let resource = if o.subresource.is_empty() {
        o.resource.clone()
    } else {
        format!("{}/{}", o.resource, o.subresource)
    };
    let mut out = vec![access(&e.verb, &o.api_group, &resource)];
    if e.verb == "patch" && e.response_status.code == 201 {
        out.push(access("create", &o.api_group, &resource));
    }
    out
}

fn used(requests: &[AuditEvent]) -> BTreeSet<Access> {
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

/// A Service with a selector, published by the real EndpointSlice controller, two pods on a
/// Node, the leftover Endpoints object of the native Endpoints controller (which does not run
/// here), and a PortMapping with legacy Endpoints that names the Service.
fn native_world(cluster: &Cluster) {
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web", "example.com/pool": "web"}},
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
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1",
                "labels": {"topology.kubernetes.io/zone": "zone-a"}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}},
            pod("web-1"), gated("web-2"),
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web",
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"}},
                "subsets": [{"addresses": [{"ip": "10.244.0.1"}], "ports": [{"name": "http", "port": 8080}]}]},
        ]}),
    );
    set_pod_status(cluster, "web-1", "10.244.0.1");
    set_pod_status(cluster, "web-2", "10.244.0.2");
    cluster.eventually(&native_slices(), WAIT, |out| !out.trim().is_empty());
    apply_json(
        cluster,
        json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": "web"},
            "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "example.com/pool"},
                "legacyEndpoints": true, "ports": [{"name": "http", "checks": [{"podReady": {}}]}]}}),
    );
}

/// `kubectl get` of the native EndpointSlice controller's slices of Service web.
fn native_slices() -> [&'static str; 5] {
    [
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io",
        "-o=name",
    ]
}

fn operator(install: &Install, dir: &TempDir, extra: &[&str]) -> Proc {
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
        .arg(&install.kubeconfig)
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
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
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
    let source =
        std::fs::read_to_string(repo().join("crates/portmapper/src/runtime/metrics.rs")).unwrap();
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
    if !kubectl_available() || std::env::var("PORTMAPPER_E2E_KUBECONFIG").is_ok() {
        return;
    }
    let (plane, _one_at_a_time) = cluster_wide();
    let cluster = Cluster::on(plane, "rbac");
    let dir = TempDir::new("rbac-operator");
    let Some(install) = install(&cluster, &dir, &json!({})) else {
        return;
    };
    let log = || std::fs::read_to_string(dir.0.join("operator.log")).unwrap_or_default();
    native_world(&cluster);
    let lease_ns = install.namespace.as_str();
    let mut op = operator(
        &install,
        &dir,
        &[
            "--leader-elect=true",
            "--lease-namespace",
            lease_ns,
            "--lease-name",
            &install.lease,
            "--identity",
            "rbac-test",
            "--lease-duration-seconds",
            "4",
            "--lease-grace-seconds",
            "2",
        ],
    );
    let holder = [
        "get",
        "lease",
        &install.lease,
        "-n",
        lease_ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ];

    // Leader: the Lease is ours, and the migration is published beside the native slices.
    cluster.eventually(&holder, WAIT, |out| out == "rbac-test");
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    cluster.eventually(
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=portmapper.dev",
            "-o",
            "name",
        ],
        WAIT,
        |o| !o.is_empty(),
    );

    // web-1 turns unready and leaves our slice: an update (a PUT at the version the watch
    // showed).
    let unready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    cluster.ok(&[
        "patch",
        "pod",
        "web-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        &unready.to_string(),
    ]);
    cluster.eventually(
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=portmapper.dev",
            "-o",
            "jsonpath={.items[*].endpoints[*].targetRef.name}",
        ],
        WAIT,
        |o| !o.contains("web-1"),
    );

    // Selector removed: the abandoned Endpoints object is adopted (annotations stripped with a
    // merge patch, then applied) and the native slices deleted.
    remove_selector(&cluster);
    wait_for("Endpoints adopted", &log, || {
        endpoints_manager(&cluster) == "portmapper.dev"
    });
    cluster.eventually(&native_slices(), WAIT, |out| out.trim().is_empty());
    wait_condition(&cluster, "SelectorMigration", "", &log);

    // The selector comes back (the native controller publishes again, a warning again) and goes.
    cluster.ok(&[
        "patch",
        "svc",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"app":"web"}}}"#,
    ]);
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    remove_selector(&cluster);
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
    cluster.eventually(&holder, WAIT, |out| out != "rbac-test");

    let requests = operator_requests(&cluster, &install);
    assert_none_denied(&requests);
    let used = used(&requests);
    let granted = granted(&install.objects);
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

    assert_scoped(&install.objects, &requests);
    assert_names_allowed(&granted, &requests);
    for r in requests
        .iter()
        .filter(|r| r.object_ref.resource == "leases")
    {
        assert_eq!(r.object_ref.namespace, lease_ns, "{r:?}");
    }
}

fn remove_selector(cluster: &Cluster) {
    cluster.ok(&[
        "patch",
        "svc",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/selector"}]"#,
    ]);
}

/// Name-limited rules: every request under them named an allowed object. A list or watch is
/// authorized by name through its `metadata.name` field selector, as kube-apiserver's RBAC does.
fn assert_names_allowed(granted: &BTreeMap<Access, Vec<String>>, requests: &[AuditEvent]) {
    for r in requests {
        for key in needs(r) {
            let names = &granted[&key];
            if names.is_empty() {
                continue;
            }
            let query = r.request_uri.split_once('?').map_or("", |(_, q)| q);
            let by_selector = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name%3D"));
            let name = match r.object_ref.name.as_str() {
                "" => by_selector.unwrap_or_default(),
                n => n,
            };
            assert!(names.iter().any(|n| n == name), "{r:?}");
        }
    }
}

#[test]
fn without_node_lookups_and_leader_election_no_node_or_lease_access() {
    if !kubectl_available() || std::env::var("PORTMAPPER_E2E_KUBECONFIG").is_ok() {
        return;
    }
    let (plane, _one_at_a_time) = cluster_wide();
    let cluster = Cluster::on(plane, "rbac-reduced");
    let dir = TempDir::new("rbac-reduced-operator");
    let values =
        json!({"nodeLookups": false, "leaderElection": {"enabled": false}, "replicaCount": 1});
    let Some(install) = install(&cluster, &dir, &values) else {
        return;
    };
    let release = format!("pm-{}", cluster.namespace);
    let full =
        crate::chart::render(&release, &install.namespace, &json!({})).expect("the chart renders");
    let log = || std::fs::read_to_string(dir.0.join("operator.log")).unwrap_or_default();
    native_world(&cluster);
    let mut op = operator(
        &install,
        &dir,
        &["--leader-elect=false", "--node-lookups=false"],
    );
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    terminate(&mut op);

    let requests = operator_requests(&cluster, &install);
    assert_none_denied(&requests);
    let used = used(&requests);
    let touched: Vec<&Access> = used
        .iter()
        .filter(|a| a.2 == "nodes" || a.2 == "leases")
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    // The reduced chart is the full chart minus exactly the Node and Lease rules.
    let (reduced, full) = (granted(&install.objects), granted(&full));
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
    // Scoped to its namespace, this operator can share the control plane.
    let cluster = Cluster::realkube("rbac-scoped");
    let dir = TempDir::new("rbac-scoped-operator");
    let values = json!({"watchNamespace": cluster.namespace});
    let Some(install) = install(&cluster, &dir, &values) else {
        return;
    };
    assert!(
        !install.objects.iter().any(|o| o["kind"] == "ClusterRole"
            && o["metadata"]["name"] == format!("pm-{}", cluster.namespace)),
        "watchNamespace renders Roles"
    );
    let log = || std::fs::read_to_string(dir.0.join("operator.log")).unwrap_or_default();
    native_world(&cluster);
    let mut op = operator(
        &install,
        &dir,
        &[
            "--watch-namespace",
            &cluster.namespace,
            "--lease-namespace",
            &install.namespace,
            "--lease-name",
            &install.lease,
        ],
    );
    wait_condition(&cluster, "SelectorMigration", "True", &log);
    remove_selector(&cluster);
    wait_for("Endpoints adopted", &log, || {
        endpoints_manager(&cluster) == "portmapper.dev"
    });
    terminate(&mut op);
    let requests = operator_requests(&cluster, &install);
    assert!(!requests.is_empty());
    assert_none_denied(&requests);
    // Namespaced resources only in the test's namespace (Role), Nodes cluster-wide
    // (ClusterRole), the Lease in the release namespace (Role).
    assert_scoped(&install.objects, &requests);
}
