//! Traffic, not only objects: kube-proxy (nftables mode, built from the same Kubernetes modules
//! as the control plane) routes each port of a Service to the members portmapper published, and
//! follows membership changes.
//!
//! The outer test re-runs this binary's inner tests in a network namespace of their own
//! (`unshare -n`): the control plane, the operator, kube-proxy (as node `node-a`, address
//! 10.0.0.10 on `lo`), the pods (a server per pod IP and port on `lo`, answering with the pod's
//! name) and the client all live there, so no packet leaves it. Each inner test counts, per
//! port, which pods new connections reach.

use test_support::{Inner, Sandbox, run_inner};

const ENV: &str = "PORTMAPPER_DATAPLANE_INNER";

#[test]
fn kube_proxy_routes_each_port_to_the_members_portmapper_publishes() {
    run_inner(
        Sandbox::NetworkNamespace,
        Inner {
            what: "kube-proxy routing",
            filter: "dataplane::inner::",
            exact: false,
            // One at a time: each test reports how fast routing follows a change.
            threads: 1,
            expect_passed: 4,
            env: ENV,
        },
    );
}

mod inner {
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use test_support::in_sandbox;
    use test_support::realkube;

    use super::ENV;
    use crate::env::{Cluster, Proc};

    const NODE_A: &str = "10.0.0.10";
    /// Node B's address is not on this namespace's `lo`: its pods are remote to kube-proxy.
    const NODE_B: &str = "10.0.0.11";
    const PROXY_METRICS: &str = "127.0.0.1:10249";
    const PROXY_HEALTHZ: &str = "127.0.0.1:10256";
    /// How long routing may take to follow a change published through the API: a correctness
    /// bound (routing that never follows fails it), wide for a loaded 2-core machine; the time
    /// taken is reported.
    const FOLLOW: Duration = Duration::from_secs(15);
    /// ... and a change a probe has to notice first (period 1 s, failure threshold 1).
    const FOLLOW_PROBE: Duration = Duration::from_secs(20);

    /// kube-proxy for `node-a`, started once per inner process on its control plane, and the
    /// external client's namespace.
    fn proxy() {
        static PROXY: OnceLock<(Proc, Proc)> = OnceLock::new();
        PROXY.get_or_init(|| (start_proxy(), external_host()));
    }

    /// A host outside the node: a network namespace of its own, joined to ours by a veth pair,
    /// at 10.0.0.100. Its connections to node A's address are external traffic to kube-proxy, as
    /// a load balancer's would be. A shell that waits on its stdin holds the namespace: it ends
    /// when this process does (the pipe closes), and it keeps no pipe of the outer test open.
    fn external_host() -> Proc {
        let holder = Command::new("unshare")
            .args(["-n", "sh", "-c", "read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare -n sh");
        let pid = holder.id();
        // The holder must have entered its namespace before the veth end moves there.
        let deadline = Instant::now() + Duration::from_secs(10);
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        while std::fs::read_link(format!("/proc/{pid}/ns/net")).ok() == Some(own.clone()) {
            assert!(
                Instant::now() < deadline,
                "unshare never made its namespace"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        sh(&format!(
            "ip link add ext0 type veth peer name ext1 && ip link set ext1 netns {pid} \
             && ip addr add 10.0.0.1/24 dev ext0 && ip link set ext0 up \
             && nsenter -t {pid} -n sh -c 'ip link set lo up && ip addr add 10.0.0.100/24 dev ext1 && ip link set ext1 up'"
        ));
        EXTERNAL.set(pid).unwrap();
        Proc(holder)
    }

    static EXTERNAL: OnceLock<u32> = OnceLock::new();

    /// Pods reached by `n` new connections from the external host (`-`: nobody answered).
    fn sample_from_outside(addr: SocketAddr, n: usize) -> BTreeMap<String, usize> {
        let pid = EXTERNAL.get().expect("the external host is up").to_string();
        let client = format!(
            "import socket\nfor _ in range({n}):\n    try:\n        c = socket.create_connection(('{}', {}), timeout=0.5)\n        c.settimeout(1)\n        print(c.recv(100).decode().strip() or '-')\n    except OSError:\n        print('-')",
            addr.ip(),
            addr.port()
        );
        let out = Command::new("nsenter")
            .args(["-t", &pid, "-n", "python3", "-c", &client])
            .output()
            .expect("nsenter python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut hits = BTreeMap::new();
        for pod in String::from_utf8_lossy(&out.stdout).lines() {
            *hits.entry(pod.to_string()).or_insert(0) += 1;
        }
        hits
    }

    fn start_proxy() -> Proc {
        let nft = Command::new("nft").arg("--version").output();
        assert!(
            nft.is_ok_and(|o| o.status.success()),
            "kube-proxy's nftables mode needs the nft command: install Debian's nftables (make test does)"
        );
        sh(&format!(
            "ip addr add {NODE_A}/32 dev lo && ip route add 10.96.0.0/16 dev lo"
        ));
        let plane = realkube::shared();
        let admin = Cluster::realkube("nodes");
        for (node, address) in [("node-a", NODE_A), ("node-b", NODE_B)] {
            apply(
                &admin,
                &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
                "labels": {"kubernetes.io/hostname": node, "topology.kubernetes.io/zone": "zone-a"}}}),
            );
            let status =
                json!({"status": {"addresses": [{"type": "InternalIP", "address": address}]}});
            admin.ok(&[
                "patch",
                "node",
                node,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ]);
        }
        let log = std::fs::File::create(plane.dir().join("kube-proxy.log")).unwrap();
        let child = Command::new(realkube::binary())
            .arg("kube-proxy")
            .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
            .args([
                "--proxy-mode=nftables",
                "--hostname-override=node-a",
                "--cluster-cidr=10.244.0.0/16",
                "--nodeport-addresses=primary",
                // No conntrack sysctl writes: the namespace's defaults are fine for a test.
                "--conntrack-max-per-core=0",
            ])
            .arg(format!("--metrics-bind-address={PROXY_METRICS}"))
            .arg(format!("--healthz-bind-address={PROXY_HEALTHZ}"))
            // It lives as long as this process, which never drops a static.
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kube-proxy starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(PROXY_HEALTHZ, "/healthz").0 != 200 {
            assert!(Instant::now() < deadline, "kube-proxy never became healthy");
            std::thread::sleep(Duration::from_millis(100));
        }
        Proc(child)
    }

    fn sh(script: &str) {
        let out = Command::new("sh").args(["-c", script]).output().unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn apply(cluster: &Cluster, object: &Value) {
        let out = cluster.kubectl_stdin(&["apply", "-f", "-"], object.to_string().as_bytes());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A pod's servers: one listener per port on the pod's IP, answering with the pod's name.
    struct Pod {
        stops: BTreeMap<u16, Arc<AtomicBool>>,
    }

    impl Pod {
        fn serve(name: &str, ip: &str, ports: &[u16]) -> Self {
            let stops = ports
                .iter()
                .map(|&port| (port, listen(name, ip, port)))
                .collect();
            Self { stops }
        }

        fn stop(&self, port: u16) {
            self.stops[&port].store(true, Ordering::SeqCst);
        }
    }

    impl Drop for Pod {
        fn drop(&mut self) {
            for stop in self.stops.values() {
                stop.store(true, Ordering::SeqCst);
            }
        }
    }

    fn listen(name: &str, ip: &str, port: u16) -> Arc<AtomicBool> {
        let listener = TcpListener::bind((ip, port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (name, stopped) = (format!("{name}\n"), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.write_all(name.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        stop
    }

    /// Which pod a new connection to `addr` reaches; `None` when none answers.
    fn reach(addr: SocketAddr) -> Option<String> {
        let mut conn = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut name = String::new();
        conn.read_to_string(&mut name).ok()?;
        Some(name.trim().to_string()).filter(|n| !n.is_empty())
    }

    /// Pods reached by `n` new connections, with counts (`-` for a connection nobody answered).
    fn sample(addr: SocketAddr, n: usize) -> BTreeMap<String, usize> {
        let mut hits = BTreeMap::new();
        for _ in 0..n {
            let pod = reach(addr).unwrap_or_else(|| "-".into());
            *hits.entry(pod).or_insert(0) += 1;
        }
        hits
    }

    /// Waits until new connections to `addr` reach exactly `members` (every one of them, no
    /// other pod, none unanswered) and returns how long that took.
    fn follows(addr: SocketAddr, members: &[&str], within: Duration) -> Duration {
        let start = Instant::now();
        let want: BTreeSet<&str> = members.iter().copied().collect();
        loop {
            let hits = sample(addr, 12 * members.len().max(1));
            if hits.keys().map(String::as_str).collect::<BTreeSet<_>>() == want {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{addr}: want exactly {want:?}, new connections reached {hits:?}"
            );
        }
    }

    /// A Service's address for port `port`: its ClusterIP, or node A's address and the NodePort.
    fn address(cluster: &Cluster, service: &str, port: usize, node_port: bool) -> SocketAddr {
        let get = |path: &str| {
            cluster.ok(&["get", "svc", service, "-o", &format!("jsonpath={{{path}}}")])
        };
        let (ip, number) = if node_port {
            (
                NODE_A.to_string(),
                get(&format!(".spec.ports[{port}].nodePort")),
            )
        } else {
            (
                get(".spec.clusterIP"),
                get(&format!(".spec.ports[{port}].port")),
            )
        };
        format!("{ip}:{number}").parse().unwrap()
    }

    fn pod(name: &str, node: &str, pool: &str, ports: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"example.com/pool": pool},
                         "annotations": {"example.com/ports": ports}},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
    }

    /// Plays kubelet: the pod's IP, Running, and its Ready condition. Played: a Ready flip in
    /// one write, measured against routing, with servers on `lo` instead of containers (each
    /// test starts in seconds; the real node's rollout routes through kube-proxy too).
    fn set_status(cluster: &Cluster, name: &str, ip: &str, ready: bool) {
        let ready = if ready { "True" } else { "False" };
        let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
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

    fn service(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
    }

    fn portmapping(service: &str, spec: Value) -> Value {
        let mut object = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": service},
            "spec": {"serviceRef": {"name": service}, "pods": {"key": "example.com/pool"},
                     "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]}});
        object["spec"]
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        object
    }

    /// Creates the pods (all on `node`), makes them Ready at `10.244.<block>.<i+1>`, and starts
    /// their servers on every one of `ports`, members or not: a connection routed to a pod
    /// that is not a port's member would be answered, and seen.
    fn pods(
        cluster: &Cluster,
        block: u8,
        pool: &str,
        specs: &[(&str, &str, &str)],
        ports: &[u16],
    ) -> Vec<Pod> {
        let mut servers = Vec::new();
        for (i, (name, node, member_of)) in specs.iter().enumerate() {
            let ip = format!("10.244.{block}.{}", i + 1);
            apply(cluster, &pod(name, node, pool, member_of));
            set_status(cluster, name, &ip, true);
            servers.push(Pod::serve(name, &ip, ports));
        }
        servers
    }

    #[test]
    #[ignore = "run in a network namespace by the outer test"]
    fn each_port_reaches_exactly_its_members_and_follows_changes() {
        if !in_sandbox(ENV) {
            return;
        }
        proxy();
        let cluster = Cluster::realkube("routing");
        apply(
            &cluster,
            &service(
                "web",
                json!({"type": "NodePort", "ports": [
            {"name": "http", "port": 80, "targetPort": 8080},
            {"name": "https", "port": 443, "targetPort": 8443}]}),
            ),
        );
        let servers = pods(
            &cluster,
            1,
            "web",
            &[
                ("a", "node-a", "http"),
                ("b", "node-a", "http,https"),
                ("c", "node-a", "http,https"),
                ("d", "node-a", "https"),
            ],
            &[8080, 8443],
        );
        // https also needs the pod's own server to answer a TCP probe.
        apply(
            &cluster,
            &portmapping(
                "web",
                json!({
            "probe": {"periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1},
            "ports": [{"name": "https", "checks": [{"podReady": {}},
                {"portNames": {"key": "example.com/ports"}}, {"tcpSocket": {"port": 8443}}]}]}),
            ),
        );
        let _operator = cluster.operator();
        let http = address(&cluster, "web", 0, false);
        let https = address(&cluster, "web", 1, false);
        follows(http, &["a", "b", "c"], Duration::from_secs(30));
        follows(https, &["b", "c", "d"], Duration::from_secs(30));
        follows(address(&cluster, "web", 0, true), &["a", "b", "c"], FOLLOW);
        follows(address(&cluster, "web", 1, true), &["b", "c", "d"], FOLLOW);

        let mut report = Vec::new();
        cluster.ok(&[
            "annotate",
            "pod",
            "a",
            "example.com/ports=http,https",
            "--overwrite",
        ]);
        report.push((
            "annotation edit",
            follows(https, &["a", "b", "c", "d"], FOLLOW),
        ));
        set_status(&cluster, "b", "10.244.1.2", false);
        report.push(("Ready flip", follows(http, &["a", "c"], FOLLOW)));
        follows(https, &["a", "c", "d"], FOLLOW);
        cluster.ok(&["delete", "pod", "c", "--grace-period=0", "--force"]);
        report.push(("pod deletion", follows(http, &["a"], FOLLOW)));
        follows(https, &["a", "d"], FOLLOW);
        servers[3].stop(8443);
        report.push(("probe failure", follows(https, &["a"], FOLLOW_PROBE)));
        follows(http, &["a"], FOLLOW);
        // The same routing from per-port slices, after a live switch of the shape.
        cluster.ok(&[
            "patch",
            "pm",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"sliceGrouping":"PerPort"}}"#,
        ]);
        let per_port = cluster.eventually(
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
                "-o",
                "name",
            ],
            FOLLOW,
            |o| o.lines().count() == 2 && o.contains("/web.http\n"),
        );
        assert!(per_port.contains("/web.https"), "{per_port}");
        follows(http, &["a"], FOLLOW);
        follows(https, &["a"], FOLLOW);
        for (change, took) in &report {
            eprintln!("routing followed the {change} in {} ms", took.as_millis());
        }
        report_programming_duration();
    }

    /// kube-proxy's own measure of how long a change took to reach its rules, from the
    /// slices' `endpoints.kubernetes.io/last-change-trigger-time`: it checks that our trigger
    /// times are honest (a trigger time later than the change would shorten it).
    fn report_programming_duration() {
        let (status, metrics) = http_get(PROXY_METRICS, "/metrics");
        assert_eq!(status, 200);
        let series = |suffix: &str| -> Vec<(String, f64)> {
            metrics
                .lines()
                .filter(|l| {
                    l.starts_with(&format!(
                        "kubeproxy_network_programming_duration_seconds{suffix}"
                    ))
                })
                .filter_map(|l| {
                    let (name, value) = l.rsplit_once(' ')?;
                    Some((name.to_string(), value.parse().ok()?))
                })
                .collect()
        };
        let count = series("_count").first().map_or(0.0, |s| s.1);
        let sum = series("_sum").first().map_or(0.0, |s| s.1);
        assert!(
            count >= 4.0,
            "kube-proxy observed {count} programming durations:\n{metrics}"
        );
        let quantile = |q: f64| {
            series("_bucket")
                .iter()
                .find(|(name, value)| *value >= q * count && !name.contains("+Inf"))
                .and_then(|(name, _)| {
                    name.split("le=\"")
                        .nth(1)?
                        .split('"')
                        .next()
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "+Inf".into())
        };
        eprintln!(
            "kube-proxy network programming: {count} changes, mean {:.3} s, p50 <= {} s, p99 <= {} s",
            sum / count,
            quantile(0.5),
            quantile(0.99)
        );
        // Correctness bound (kube-proxy's figure is printed above): programming slower than the
        // routing bound on average means routing did not follow.
        assert!(
            sum / count < FOLLOW.as_secs_f64(),
            "programming took {} s on average",
            sum / count
        );
    }

    #[test]
    #[ignore = "run in a network namespace by the outer test"]
    fn draining_endpoints_get_no_new_connections_while_others_are_ready() {
        if !in_sandbox(ENV) {
            return;
        }
        proxy();
        let cluster = Cluster::realkube("draining");
        apply(
            &cluster,
            &service(
                "drain",
                json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
            ),
        );
        let _servers = pods(
            &cluster,
            2,
            "drain",
            &[("e1", "node-a", "http"), ("e2", "node-a", "http")],
            &[8080],
        );
        apply(&cluster, &portmapping("drain", json!({})));
        let _operator = cluster.operator();
        let http = address(&cluster, "drain", 0, false);
        follows(http, &["e1", "e2"], Duration::from_secs(30));
        // No kubelet finishes the delete: e1 stays Terminating (and Ready), as a pod does
        // during its grace period, and is published serving but not ready.
        cluster.ok(&["delete", "pod", "e1", "--wait=false"]);
        let conditions = cluster.eventually(
            &["get", "endpointslices", "-l", "kubernetes.io/service-name=drain", "-o",
              "jsonpath={range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready},{.conditions.serving},{.conditions.terminating} {end}"],
            Duration::from_secs(30),
            |out| out.contains("e1=false,true,true"),
        );
        assert!(conditions.contains("e2=true,true,"), "{conditions}");
        follows(http, &["e2"], FOLLOW);
        let hits = sample(http, 60);
        assert_eq!(hits.keys().collect::<Vec<_>>(), ["e2"], "{hits:?}");
    }

    /// Kubernetes 1.34's conformance tests for service proxies: a selector-less Service whose
    /// ports each have a slice of their own, written here by portmapper, (1) with the same pod IP
    /// behind both ports and (2) with a different pod IP behind each.
    #[test]
    #[ignore = "run in a network namespace by the outer test"]
    fn per_port_slices_with_the_same_and_with_different_pod_ips_are_routed() {
        if !in_sandbox(ENV) {
            return;
        }
        proxy();
        let cluster = Cluster::realkube("conformance");
        let ports = json!({"ports": [{"name": "portname1", "port": 80, "targetPort": 8080},
                                     {"name": "portname2", "port": 81, "targetPort": 8081}]});
        apply(&cluster, &service("same-ips", ports.clone()));
        apply(&cluster, &service("different-ips", ports));
        let _servers = pods(
            &cluster,
            3,
            "same-ips",
            &[("p1", "node-a", "portname1,portname2")],
            &[8080, 8081],
        );
        let _others = pods(
            &cluster,
            4,
            "different-ips",
            &[("p2", "node-a", "portname1"), ("p3", "node-a", "portname2")],
            &[8080, 8081],
        );
        // One slice per port, as the conformance cases have them (the other tests here route
        // the default, port-set slices).
        let per_port = json!({"sliceGrouping": "PerPort"});
        apply(&cluster, &portmapping("same-ips", per_port.clone()));
        apply(&cluster, &portmapping("different-ips", per_port));
        let _operator = cluster.operator();
        for (service, first, second) in [("same-ips", "p1", "p1"), ("different-ips", "p2", "p3")] {
            let slices = cluster.eventually(
                &[
                    "get",
                    "endpointslices",
                    "-l",
                    &format!("kubernetes.io/service-name={service}"),
                    "-o",
                    "name",
                ],
                Duration::from_secs(30),
                |out| out.lines().count() == 2,
            );
            assert!(slices.contains(&format!("{service}.portname1")), "{slices}");
            follows(
                address(&cluster, service, 0, false),
                &[first],
                Duration::from_secs(30),
            );
            follows(address(&cluster, service, 1, false), &[second], FOLLOW);
        }
    }

    /// The eTP=Local caveat (docs/consumers.md): kube-proxy's health-check node port counts a
    /// node's ready endpoints across every port of the Service. Node A's only pod serves http,
    /// so node A passes the load balancer's health check, and https connections sent to it are
    /// dropped.
    #[test]
    #[ignore = "run in a network namespace by the outer test"]
    fn with_local_traffic_policy_a_node_serving_one_port_passes_the_health_check_for_all() {
        if !in_sandbox(ENV) {
            return;
        }
        proxy();
        let cluster = Cluster::realkube("etp-local");
        apply(
            &cluster,
            &service(
                "lb",
                json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080},
                      {"name": "https", "port": 443, "targetPort": 8443}]}),
            ),
        );
        let _servers = pods(
            &cluster,
            5,
            "lb",
            &[("l1", "node-a", "http"), ("l2", "node-b", "http,https")],
            &[8080, 8443],
        );
        apply(&cluster, &portmapping("lb", json!({})));
        let _operator = cluster.operator();
        follows(
            address(&cluster, "lb", 1, false),
            &["l2"],
            Duration::from_secs(30),
        );
        // Both ports programmed: l1 and l2 are in different slices (port sets), each written
        // on its own.
        follows(address(&cluster, "lb", 0, false), &["l1", "l2"], FOLLOW);
        // From outside, node A's NodePorts reach its local endpoints only: l1 for http, and
        // nobody for https (node A has no https member).
        let http = sample_from_outside(address(&cluster, "lb", 0, true), 12);
        assert_eq!(
            http,
            BTreeMap::from([("l1".to_string(), 12)]),
            "http through node A"
        );
        let health_port = cluster.ok(&[
            "get",
            "svc",
            "lb",
            "-o",
            "jsonpath={.spec.healthCheckNodePort}",
        ]);
        let (status, body) = http_get(&format!("{NODE_A}:{health_port}"), "/");
        let health: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (status, &health["localEndpoints"]),
            (200, &json!(1)),
            "{body}"
        );
        let https = sample_from_outside(address(&cluster, "lb", 1, true), 6);
        assert_eq!(
            https,
            BTreeMap::from([("-".to_string(), 6)]),
            "https through node A"
        );
        // portmapper says so: the condition, and one Warning Event naming the port and node.
        let reason = "jsonpath={.status.conditions[?(@.type==\"ConsumerCaveat\")].reason}";
        cluster.eventually(&["get", "pm", "lb", "-o", reason], FOLLOW, |out| {
            out == "LocalTrafficPolicy"
        });
        let notes = cluster.eventually(
            &[
                "get",
                "events",
                "--field-selector",
                "reason=LocalTrafficPolicy",
                "-o",
                "jsonpath={range .items[*]}{.type} {.message}{\"\\n\"}{end}",
            ],
            FOLLOW,
            |out| !out.is_empty(),
        );
        assert_eq!(notes.lines().count(), 1, "{notes}");
        assert!(
            notes.starts_with("Warning ") && notes.contains("port https on 1 node(s): node-a ("),
            "{notes}"
        );
    }

    /// A plain HTTP/1.0 GET: (status, body).
    fn http_get(addr: &str, path: &str) -> (u16, String) {
        let Ok(mut stream) = TcpStream::connect(addr) else {
            return (0, String::new());
        };
        let _ = write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
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
}
