//! What the tests of real consumers share (`istio.rs`, `contour.rs`): the control plane they run
//! on, the canonical example's objects, and a watch over a consumer's own xDS client.
//!
//! The consumers write to the API server (istiod its CA objects, leases and status; Contour
//! Ingress status), so they run on a control plane of their own, not the shared one whose audit
//! log other tests read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::realkube::ControlPlane;

use crate::env::{Cluster, Proc};

/// How long a consumer's view may take to show what the operator first publishes (the
/// operator's start included): a correctness bound, wide for a loaded 2-core machine.
pub(crate) const WAIT: Duration = Duration::from_secs(90);
/// How long a consumer's view may take to follow a change written through the API: a
/// correctness bound, wide for a loaded 2-core machine; the time taken is printed.
pub(crate) const FOLLOW: Duration = Duration::from_secs(30);

/// The canonical example: pod → the ports it serves (http → a, b, c; https → b, c, d).
pub(crate) const CANONICAL: [(&str, &str); 4] = [
    ("a", "http"),
    ("b", "http,https"),
    ("c", "http,https"),
    ("d", "https"),
];

/// A consumer's view of some clusters: cluster name → "address port HEALTH" of each endpoint.
pub(crate) type View = BTreeMap<String, BTreeSet<String>>;

/// The control plane the consumers run on, started by the first test that asks; it stops with
/// the test binary. etcd and kube-apiserver only: the operator writes the slices, and no test
/// here needs a controller of kube-controller-manager.
pub(crate) fn plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| ControlPlane::start(""))
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// `GET path` on `addr`: the status code and the body (0 when nothing answered).
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .is_err()
    {
        return (0, String::new());
    }
    let mut response = String::new();
    if stream.read_to_string(&mut response).is_err() {
        return (0, String::new());
    }
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

/// Waits until `GET path` on `addr` answers 200, while `proc` runs; panics with the end of
/// `log` otherwise. The time taken.
pub(crate) fn wait_healthy(
    what: &str,
    proc: &mut Proc,
    addr: &str,
    path: &str,
    log: &std::path::Path,
    timeout: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        if http_get(addr, path).0 == 200 {
            return started.elapsed();
        }
        let exited = proc.0.try_wait().unwrap();
        if exited.is_some() || started.elapsed() > timeout {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            panic!(
                "{what} not healthy after {:?} (exit: {exited:?}); its log ends:\n{}",
                started.elapsed(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A pool pod serving `ports` (the `example.com/ports` annotation), bound to a node (none runs:
/// a graceful delete then leaves the pod Terminating until someone sends the final delete, as
/// a kubelet would during the grace period).
pub(crate) fn pod(name: &str, ports: &str, annotations: &[(&str, &str)]) -> Value {
    let mut all = json!({"example.com/ports": ports});
    for (key, value) in annotations {
        all[*key] = json!(value);
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"example.com/pool": "db"}, "annotations": all},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
}

/// Plays kubelet: the pod's IPs, Running, and its Ready condition.
pub(crate) fn set_status(cluster: &Cluster, name: &str, ips: &[String], ready: bool) {
    let ready = if ready { "True" } else { "False" };
    let pod_ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let status = json!({"status": {"phase": "Running", "podIP": ips[0], "podIPs": pod_ips,
        "conditions": [{"type": "Ready", "status": ready}, {"type": "ContainersReady", "status": ready}]}});
    cluster.ok(&[
        "patch",
        "pod",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

pub(crate) fn apply(cluster: &Cluster, object: &Value) {
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], object.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A selector-less Service with ports http 8080 and https 8443.
pub(crate) fn service(name: &str, dual_stack: bool) -> Value {
    let mut spec =
        json!({"ports": [{"name": "http", "port": 8080}, {"name": "https", "port": 8443}]});
    if dual_stack {
        spec["ipFamilyPolicy"] = json!("RequireDualStack");
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

/// The PortMapping of `service` over the `db` pool: ready pods, on the ports they list; `spec`
/// adds fields.
pub(crate) fn portmapping(service: &str, spec: Value) -> Value {
    let mut object = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": service},
        "spec": {"serviceRef": {"name": service}, "pods": {"key": "example.com/pool", "value": "db"},
                 "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]}});
    for (key, value) in spec.as_object().unwrap() {
        object["spec"][key] = value.clone();
    }
    object
}

/// Ports of each slice of a Service: one "ADDRESSTYPE port,port," line per slice, sorted.
pub(crate) fn slice_ports(cluster: &Cluster, service: &str) -> Vec<String> {
    let out = cluster.ok(&[
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={service}"),
        "-o",
        "jsonpath={range .items[*]}{.addressType} {range .ports[*]}{.name},{end}\n{end}",
    ]);
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// Asserts that `db` publishes port-set slices (one listing both ports, per family) and
/// `db-pp` per-port slices: both shapes are exercised.
pub(crate) fn assert_both_shapes(cluster: &Cluster) {
    assert_eq!(
        slice_ports(cluster, "db"),
        [
            "IPv4 http,",
            "IPv4 http,https,",
            "IPv4 https,",
            "IPv6 http,",
            "IPv6 http,https,",
            "IPv6 https,"
        ],
        "db's slices are not port sets"
    );
    assert_eq!(
        slice_ports(cluster, "db-pp"),
        ["IPv4 http,", "IPv4 https,", "IPv6 http,", "IPv6 https,"],
        "db-pp's slices are not per port"
    );
}

/// Switches `db` to per-port slices while it runs (every pod moves to new slices) and waits
/// until its slices are per port: the time from the API write.
pub(crate) fn switch_db_to_per_port(cluster: &Cluster) -> Duration {
    let since = Instant::now();
    cluster.ok(&[
        "patch",
        "pm",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"sliceGrouping":"PerPort"}}"#,
    ]);
    let per_port = ["IPv4 http,", "IPv4 https,", "IPv6 http,", "IPv6 https,"];
    loop {
        let ports = slice_ports(cluster, "db");
        if ports == per_port {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < FOLLOW,
            "db's slices are not per port after {FOLLOW:?}: {ports:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asserts that every slice of each of `services` lists `pod` draining: not ready, serving,
/// terminating.
pub(crate) fn assert_draining(cluster: &Cluster, services: &[&str], pod: &str) {
    for service in services {
        let conditions = cluster.ok(&[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={service}"),
            "-o",
            "jsonpath={range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready},{.conditions.serving},{.conditions.terminating} {end}",
        ]);
        assert!(
            conditions.contains(&format!("{pod}=false,true,true")),
            "{service}: {pod} is not published draining: {conditions}"
        );
    }
}

/// The canonical example in `cluster`, dual stack, pod IPs `10.244.<net>.N` and
/// `fd00:10:244::<net>:N`: `db` publishing port-set slices (the default) and `db-pp` one slice
/// set per port, over the same pool. Returns each pod's IPs.
pub(crate) fn canonical_dual_stack(
    cluster: &Cluster,
    net: u8,
) -> BTreeMap<&'static str, Vec<String>> {
    let ips: BTreeMap<&str, Vec<String>> = CANONICAL
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            (
                *name,
                vec![
                    format!("10.244.{net}.{}", i + 1),
                    format!("fd00:10:244::{net}:{}", i + 1),
                ],
            )
        })
        .collect();
    let mut items = vec![service("db", true), service("db-pp", true)];
    items.extend(CANONICAL.iter().map(|(name, ports)| pod(name, ports, &[])));
    apply(
        cluster,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    for (name, _) in CANONICAL {
        set_status(cluster, name, &ips[name], true);
    }
    apply(cluster, &portmapping("db", json!({})));
    apply(
        cluster,
        &portmapping("db-pp", json!({"sliceGrouping": "PerPort"})),
    );
    ips
}

/// The view a consumer should have: for each of `services`, each port's cluster (named by
/// `cluster_name(service, port)`) lists every address of each of the port's members, at the
/// port, with `health`.
pub(crate) fn expected(
    health: &str,
    services: &[&str],
    cluster_name: impl Fn(&str, (u16, &str)) -> String,
    ips: &BTreeMap<&str, Vec<String>>,
    members: &[((u16, &str), &[&str])],
) -> View {
    let mut view = View::new();
    for service in services {
        for (port, pods) in members {
            let set = view.entry(cluster_name(service, *port)).or_default();
            for pod in *pods {
                for ip in &ips[pod] {
                    set.insert(format!("{ip} {} {health}", port.0));
                }
            }
        }
    }
    view
}

/// A consumer's own xDS client, run as a process whose stdout is a stream of JSON values;
/// `fold` applies each value to the view.
pub(crate) struct Watch {
    what: &'static str,
    values: Receiver<Value>,
    view: View,
    fold: fn(&mut View, &Value),
    _proc: Proc,
}

impl Watch {
    pub(crate) fn spawn(
        what: &'static str,
        mut command: Command,
        log: &std::path::Path,
        fold: fn(&mut View, &Value),
    ) -> Self {
        let log = std::fs::File::create(log).unwrap();
        let mut child = command
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{what} starts: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, values) = channel();
        std::thread::spawn(move || {
            for value in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
                let Ok(value) = value else { break };
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Self {
            what,
            values,
            view: View::new(),
            fold,
            _proc: Proc(child),
        }
    }

    pub(crate) fn view(&self) -> &View {
        &self.view
    }

    /// Waits until the view is `want`; the time since `since`. Endpoints in both the view at
    /// the start and `want` must stay in every view received meanwhile: portmapper writes a
    /// pod's new slice before it takes the pod out of the old one, so a consumer that keeps per
    /// slice never loses a member that stays.
    pub(crate) fn wait_for(
        &mut self,
        want: &View,
        since: Instant,
        timeout: Duration,
        step: &str,
    ) -> Duration {
        let keep = intersection(&self.view, want);
        loop {
            if self.view == *want {
                return since.elapsed();
            }
            let Some(left) = timeout.checked_sub(since.elapsed()) else {
                panic!(
                    "{step}: {} does not see what portmapper published after {timeout:?}\n\
                     want: {want:#?}\n got: {:#?}",
                    self.what, self.view
                );
            };
            self.receive(left, &keep, step);
        }
    }

    /// Receives values for `window` (an observation period, not a bound), every view keeping
    /// `keep`, then asserts the view is `want`.
    pub(crate) fn observe(&mut self, want: &View, window: Duration, step: &str) {
        let keep = intersection(&self.view, want);
        let until = Instant::now() + window;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            self.receive(left, &keep, step);
        }
        assert_eq!(
            &self.view, want,
            "{step}: {} does not see what portmapper published",
            self.what
        );
    }

    fn receive(&mut self, timeout: Duration, keep: &View, step: &str) {
        match self.values.recv_timeout(timeout) {
            Ok(value) => {
                (self.fold)(&mut self.view, &value);
                let lost = difference(keep, &self.view);
                assert!(
                    lost.is_empty(),
                    "{step}: {} lost endpoints that stay members: {lost:#?}",
                    self.what
                );
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{step}: {}'s client exited", self.what)
            }
        }
    }
}

/// Per cluster, the endpoints in both views.
fn intersection(a: &View, b: &View) -> View {
    a.iter()
        .filter_map(|(name, set)| {
            let both: BTreeSet<String> = set.intersection(b.get(name)?).cloned().collect();
            Some((name.clone(), both))
        })
        .collect()
}

/// Per cluster, the endpoints of `a` that `b` lacks (clusters with none left out).
fn difference(a: &View, b: &View) -> View {
    a.iter()
        .filter_map(|(name, set)| {
            let empty = BTreeSet::new();
            let missing: BTreeSet<String> = set
                .difference(b.get(name).unwrap_or(&empty))
                .cloned()
                .collect();
            (!missing.is_empty()).then(|| (name.clone(), missing))
        })
        .collect()
}
