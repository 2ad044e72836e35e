//! Network checks end to end through the operator: real servers on pod IPs, the real control
//! plane, the controller and its prober.
//!
//! EndpointSlice validation rejects loopback addresses, so pods need real-looking IPs. The outer
//! test re-runs this test binary under `unshare -n`, brings up `lo` and routes 10.244.0.0/16
//! locally; the inner tests then run there: the re-run binary starts a control plane of its own
//! on 127.0.0.1 (the outer one is out of reach) and the pod servers listen on 10.244.x.y, all
//! inside the namespace, which has no other interface, so no probe can leave it. Each inner
//! test uses its own 10.244.N.0/24 so they can run side by side.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use portmapper_probe::MembershipReview;
use portmapper_probe::metrics::OutcomeLabels;
use serde_json::{Value, json};
use test_support::{Inner, Sandbox, in_sandbox, run_inner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tonic_health::ServingStatus;

use crate::harness::*;

const ENV: &str = "PORTMAPPER_IT_IN_NETNS";
const INNER: &str = "probing::inner_";
/// Inner tests below; the outer test checks that every one of them ran and passed.
const INNER_TESTS: usize = 11;

#[test]
fn network_checks_through_the_operator_in_own_network_namespace() {
    run_inner(
        Sandbox::NetworkNamespace,
        Inner {
            what: "operator network-check tests",
            filter: INNER,
            exact: false,
            threads: 2,
            expect_passed: INNER_TESTS,
            env: ENV,
        },
    );
}

/// Whether this is the re-run inside the outer test's namespace.
fn in_netns() -> bool {
    in_sandbox(ENV)
}

fn ip(subnet: u8, host: u8) -> IpAddr {
    IpAddr::from([10, 244, subnet, host])
}

// ---- servers standing in for pods -------------------------------------------------------

/// A server task; dropping it closes the listener and every connection (the pod's port goes
/// down: connects are refused).
struct Server(JoinHandle<()>);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What an HTTP server answers: (status, body) for a request's path and body.
type Handler = Arc<dyn Fn(&str, &[u8]) -> (u16, String) + Send + Sync>;

/// A minimal HTTP/1.1 server: one request per connection, then close.
async fn http_server(addr: SocketAddr, handler: Handler) -> Server {
    let listener = TcpListener::bind(addr).await.unwrap();
    Server(tokio::spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            connections.spawn(answer(stream, handler));
        }
    }))
}

async fn answer(mut stream: TcpStream, handler: Handler) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let Ok(n) = stream.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let (status, body) = handler(&path, &buf[head_end..head_end + length]);
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn status(code: u16) -> Handler {
    Arc::new(move |_, _| (code, String::new()))
}

/// Accepts connections and never answers.
async fn hanging_server(addr: SocketAddr) -> Server {
    let listener = TcpListener::bind(addr).await.unwrap();
    Server(tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    }))
}

/// Accepts TCP connections and closes them.
async fn tcp_server(addr: SocketAddr) -> Server {
    let listener = TcpListener::bind(addr).await.unwrap();
    Server(tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    }))
}

/// The standard gRPC health service answering `status` for the empty service name.
async fn grpc_server(addr: SocketAddr, status: ServingStatus) -> Server {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter.set_service_status("", status).await;
    let listener = TcpListener::bind(addr).await.unwrap();
    Server(tokio::spawn(async move {
        let _reporter = reporter;
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            connections.spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

// ---- cluster objects and waits ----------------------------------------------------------

/// Service `name` with `ports`, two-or-more pool pods listing every port, running at `ips`.
async fn pool(h: &Harness, name: &str, ports: &[(&str, i32)], pods: &[(&str, IpAddr)]) {
    h.create(service(name, ports)).await;
    let listed = ports.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(",");
    for (pod_name, ip) in pods {
        h.create(pod(pod_name, name, &listed)).await;
        h.set_pod_status(pod_name, &[&ip.to_string()], true).await;
    }
}

/// A PortMapping whose listed ports require `portNames` and then their own checks, probing
/// every second and flipping after one result.
fn probed_portmapping(name: &str, ports: &[(&str, Value)]) -> Value {
    json!({
        "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name},
        "spec": {
            "serviceRef": {"name": name},
            "pods": {"key": "example.com/group"},
            // Read per port by slice name, as `harness::portmapping`.
            "sliceGrouping": "PerPort",
            "ports": ports.iter().map(|(port, check)| json!({
                "name": port,
                "checks": [{"portNames": {"key": "example.com/ports"}}, check],
            })).collect::<Vec<_>>(),
            "defaultChecks": [{"portNames": {"key": "example.com/ports"}}],
            "probe": {"periodSeconds": 1, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 1},
        },
    })
}

/// Waits until slice `<service>.<port>` holds exactly `want`.
async fn wait_members(h: &Harness, service: &str, port: &str, want: &[&str]) {
    let slice = format!("{service}.{port}");
    eventually(
        &format!("{slice} = {want:?}"),
        Duration::from_secs(20),
        || async {
            let m = h.membership(service).await;
            m.get(&slice)
                .is_some_and(|pods| pods.iter().map(String::as_str).eq(want.iter().copied()))
                .then_some(())
        },
    )
    .await;
}

/// The status reason of `pod` being out of `port`, once status lists it (and `matches` it).
async fn excluded_reason(
    h: &Harness,
    pm: &str,
    port: &str,
    pod: &str,
    matches: impl Fn(&str) -> bool,
) -> String {
    eventually(
        &format!("status reason for {pod} on {port}"),
        Duration::from_secs(20),
        || async {
            let status = h.portmapping(pm).await.status?;
            let port = status.ports.iter().find(|p| p.name == port)?;
            let excluded = port.excluded.iter().find(|e| e.pod == pod)?;
            matches(&excluded.reason).then(|| excluded.reason.clone())
        },
    )
    .await
}

fn probe_count(
    h: &Harness,
    check: &'static str,
    outcome: &'static str,
    cause: &'static str,
) -> u64 {
    h.metrics.probe.count(&OutcomeLabels {
        check,
        outcome,
        cause,
    })
}

// ---- the tests (inside the namespace) ---------------------------------------------------

/// The issue's end-to-end test: a pod's broker port goes down; the pod leaves the broker slice
/// and stays in the admin slice, status says why, and it returns when the port is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_server_going_down_moves_pod_out_of_one_port_only() {
    if !in_netns() {
        return;
    }
    let (a, b) = (ip(1, 1), ip(1, 2));
    let h = Harness::start().await;
    pool(
        &h,
        "kafka",
        &[("broker", 9092), ("admin", 8080)],
        &[("kafka-0", a), ("kafka-1", b)],
    )
    .await;
    let _a_broker = tcp_server((a, 9092).into()).await;
    let b_broker = tcp_server((b, 9092).into()).await;
    let _a_admin = http_server((a, 8080).into(), status(200)).await;
    let _b_admin = http_server((b, 8080).into(), status(200)).await;
    h.create(probed_portmapping(
        "kafka",
        &[
            ("broker", json!({"tcpSocket": {}})),
            ("admin", json!({"httpGet": {"path": "/healthz"}})),
        ],
    ))
    .await;
    wait_members(&h, "kafka", "broker", &["kafka-0", "kafka-1"]).await;
    wait_members(&h, "kafka", "admin", &["kafka-0", "kafka-1"]).await;

    drop(b_broker);
    wait_members(&h, "kafka", "broker", &["kafka-0"]).await;
    let reason = excluded_reason(&h, "kafka", "broker", "kafka-1", |r| r.contains("refused")).await;
    assert!(
        reason.starts_with("tcpSocket: ") && reason.contains("10.244.1.2:9092"),
        "{reason}"
    );
    assert!(reason.contains("refused"), "{reason}");
    let m = h.membership("kafka").await;
    assert_eq!(
        m["kafka.admin"],
        ["kafka-0", "kafka-1"],
        "the other port keeps the pod"
    );
    assert!(probe_count(&h, "tcpSocket", "exclude", "refused") >= 1);
    let exposed = h.metrics.encode().unwrap();
    assert!(
        exposed.contains(
            r#"portmapper_probe_results_total{check="httpGet",outcome="include",cause="healthy"}"#
        ),
        "{exposed}"
    );

    let _b_broker = tcp_server((b, 9092).into()).await;
    wait_members(&h, "kafka", "broker", &["kafka-0", "kafka-1"]).await;
}

/// A restarted controller seeds its probes from the live slices: nothing flaps, nothing is
/// rewritten, even though its prober starts with no results at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_restart_keeps_probed_memberships_without_writes() {
    if !in_netns() {
        return;
    }
    let (a, b) = (ip(7, 1), ip(7, 2));
    let mut h = Harness::start().await;
    pool(&h, "api", &[("web", 8080)], &[("api-0", a), ("api-1", b)]).await;
    let _a = http_server((a, 8080).into(), status(200)).await;
    let _b = http_server((b, 8080).into(), status(200)).await;
    h.create(probed_portmapping(
        "api",
        &[("web", json!({"httpGet": {"path": "/"}}))],
    ))
    .await;
    wait_members(&h, "api", "web", &["api-0", "api-1"]).await;
    // Converged: Ready, and the status no longer waits on first results.
    eventually("Ready", Duration::from_secs(20), || async {
        let status = h.portmapping("api").await.status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    let slices_before = h.slices("api").await;
    h.stop_controller().await;
    let before = h.operator_writes().await;
    let probed_before = probe_count(&h, "httpGet", "include", "healthy");
    h.run_controller();
    // The restarted prober has probed both pods, and two passes ran after that (counted, not
    // timed): whatever they would write is in the log by now.
    eventually(
        "both pods probed again",
        Duration::from_secs(20),
        || async {
            (probe_count(&h, "httpGet", "include", "healthy") >= probed_before + 2).then_some(())
        },
    )
    .await;
    h.passes(2).await;
    let writes: Vec<String> = h
        .operator_requests()
        .await
        .iter()
        .skip(before)
        .map(|r| format!("{} {}/{} {}", r.verb, r.resource, r.name, r.subresource))
        .collect();
    assert!(writes.is_empty(), "a restart rewrote: {writes:?}");
    let rv = |v: &[k8s_openapi::api::discovery::v1::EndpointSlice]| {
        v.iter()
            .map(|s| s.metadata.resource_version.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(rv(&slices_before), rv(&h.slices("api").await));
    assert!(
        probe_count(&h, "httpGet", "include", "healthy") >= probed_before + 2,
        "the restarted prober probed both pods"
    );
}

/// Probes that hang for their whole 30 s timeout hold no reconcile: a pod change on another
/// port reaches its slice while every probe is still in flight, and every reconcile is quick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_hanging_probes_do_not_delay_reconciles() {
    if !in_netns() {
        return;
    }
    let h = Harness::start().await;
    let pods: Vec<(String, IpAddr)> = (0..6u8)
        .map(|i| (format!("slow-{i}"), ip(2, i + 1)))
        .collect();
    let pod_refs: Vec<(&str, IpAddr)> = pods.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    pool(&h, "slow", &[("web", 8080), ("metrics", 9100)], &pod_refs).await;
    let mut hanging = Vec::new();
    for (_, addr) in &pods {
        hanging.push(hanging_server((*addr, 8080).into()).await);
    }
    let mut slow = probed_portmapping(
        "slow",
        &[(
            "web",
            json!({"httpGet": {"path": "/", "timeoutSeconds": 30}}),
        )],
    );
    // A check's timeout may not exceed the probe period (admission rejects it).
    slow["spec"]["probe"]["periodSeconds"] = json!(30);
    h.create(slow).await;
    let names: Vec<&str> = pods.iter().map(|(n, _)| n.as_str()).collect();
    wait_members(&h, "slow", "metrics", &names).await;
    // Status shows the web probes are running without a result.
    let reason = excluded_reason(&h, "slow", "web", "slow-0", |_| true).await;
    assert!(reason.contains("httpGet: no result yet"), "{reason}");

    let started = Instant::now();
    h.patch_pod(
        "slow-0",
        json!({"metadata": {"annotations": {"example.com/ports": "web"}}}),
    )
    .await;
    wait_members(&h, "slow", "metrics", &names[1..]).await;
    let latency = started.elapsed();
    // Correctness bound: a reconcile waiting on a probe would take the 30 s timeout; 20 s
    // leaves room for a loaded 2-core CI and still tells the two apart.
    assert!(
        latency < Duration::from_secs(20),
        "slice update took {latency:?} while probes hang"
    );
    let finished: u64 = ["timeout", "connection", "refused"]
        .iter()
        .map(|cause| probe_count(&h, "httpGet", "exclude", cause))
        .sum();
    assert_eq!(finished, 0, "the hanging probes were still in flight");

    // Correctness bound: every reconcile so far finished well within the probes' 30 s timeout
    // (8.192 s bucket: a reconcile that waited on a probe lands in the 32.768 s one).
    let exposed = h.metrics.encode().unwrap();
    let count = metric_value(&exposed, "portmapper_reconcile_duration_seconds_count");
    let within = exposed
        .lines()
        .filter(|l| l.starts_with("portmapper_reconcile_duration_seconds_bucket{le=\""))
        .filter_map(|l| {
            let le: f64 = l.split('"').nth(1)?.parse().ok()?;
            (le <= 8.2).then(|| l.rsplit(' ').next()?.parse::<f64>().ok())?
        })
        .fold(0.0, f64::max);
    assert!(count >= 2.0, "{exposed}");
    assert_eq!(within, count, "a reconcile took over 8 s:\n{exposed}");
    drop(hanging);
}

fn metric_value(exposed: &str, name: &str) -> f64 {
    exposed
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not exposed:\n{exposed}"))
}

/// One port with one network check, one pod that passes it and one that fails it.
async fn one_check(h: &Harness, name: &str, port: i32, check: Value, pods: [(&str, IpAddr); 2]) {
    pool(h, name, &[("p", port)], &pods).await;
    h.create(probed_portmapping(name, &[("p", check)])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_http_get_check() {
    if !in_netns() {
        return;
    }
    let (ok, bad) = (ip(3, 1), ip(3, 2));
    let _ok = http_server(
        (ok, 8080).into(),
        Arc::new(|path, _| (if path == "/ready" { 200 } else { 404 }, String::new())),
    )
    .await;
    let _bad = http_server((bad, 8080).into(), status(503)).await;
    let h = Harness::start().await;
    one_check(
        &h,
        "web",
        8080,
        json!({"httpGet": {"path": "/ready"}}),
        [("web-ok", ok), ("web-bad", bad)],
    )
    .await;
    wait_members(&h, "web", "p", &["web-ok"]).await;
    let reason = excluded_reason(&h, "web", "p", "web-bad", |r| r.contains("503")).await;
    assert!(
        reason.starts_with("httpGet: GET /ready answered HTTP 503"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_tcp_socket_check() {
    if !in_netns() {
        return;
    }
    let (ok, bad) = (ip(4, 1), ip(4, 2));
    let _ok = tcp_server((ok, 5432).into()).await;
    let h = Harness::start().await;
    one_check(
        &h,
        "db",
        5432,
        json!({"tcpSocket": {}}),
        [("db-ok", ok), ("db-bad", bad)],
    )
    .await;
    wait_members(&h, "db", "p", &["db-ok"]).await;
    let reason = excluded_reason(&h, "db", "p", "db-bad", |r| r.contains("refused")).await;
    assert!(
        reason.starts_with("tcpSocket: ") && reason.contains("10.244.4.2:5432"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_grpc_check() {
    if !in_netns() {
        return;
    }
    let (ok, bad) = (ip(5, 1), ip(5, 2));
    let _ok = grpc_server((ok, 50051).into(), ServingStatus::Serving).await;
    let _bad = grpc_server((bad, 50051).into(), ServingStatus::NotServing).await;
    let h = Harness::start().await;
    one_check(
        &h,
        "rpc",
        50051,
        json!({"grpc": {}}),
        [("rpc-ok", ok), ("rpc-bad", bad)],
    )
    .await;
    wait_members(&h, "rpc", "p", &["rpc-ok"]).await;
    let reason = excluded_reason(&h, "rpc", "p", "rpc-bad", |r| r.contains("NOT_SERVING")).await;
    assert!(reason.starts_with("grpc: "), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_webhook_check() {
    if !in_netns() {
        return;
    }
    let (ok, bad, hook) = (ip(6, 1), ip(6, 2), ip(6, 100));
    // The decider excludes pods in `drained`, and records what it was asked.
    let drained = Arc::new(Mutex::new(vec!["hook-bad".to_string()]));
    let reviews: Arc<Mutex<Vec<MembershipReview>>> = Arc::default();
    let handler: Handler = {
        let (drained, reviews) = (drained.clone(), reviews.clone());
        Arc::new(move |_, body| {
            let Ok(review) = serde_json::from_slice::<MembershipReview>(body) else {
                return (400, String::new());
            };
            let out = drained.lock().unwrap().contains(&review.pod.name);
            reviews.lock().unwrap().push(review);
            let answer = if out {
                json!({"decision": "Exclude", "reason": "drained by test"})
            } else {
                json!({"decision": "Include"})
            };
            (200, answer.to_string())
        })
    };
    let _hook = http_server((hook, 7000).into(), handler).await;
    let h = Harness::start().await;
    one_check(
        &h,
        "app",
        8080,
        json!({"webhook": {"url": format!("http://{hook}:7000/decide")}}),
        [("hook-ok", ok), ("hook-bad", bad)],
    )
    .await;
    wait_members(&h, "app", "p", &["hook-ok"]).await;
    // Before its first answer the pod reads "no result yet"; wait for the decider's reason.
    let reason = excluded_reason(&h, "app", "p", "hook-bad", |r| r.contains("drained")).await;
    assert_eq!(reason, "webhook: drained by test");
    {
        let reviews = reviews.lock().unwrap();
        let review = reviews
            .iter()
            .find(|r| r.pod.name == "hook-bad")
            .expect("the webhook was asked about hook-bad");
        assert_eq!(
            (
                review.namespace.as_str(),
                review.port_mapping.as_str(),
                review.service.as_str()
            ),
            (h.ns.as_str(), "app", "app")
        );
        assert_eq!((review.port.name.as_str(), review.port.number), ("p", 8080));
        assert_eq!(review.address, bad);
    }

    // The decider changes its mind: the pod joins.
    drained.lock().unwrap().clear();
    wait_members(&h, "app", "p", &["hook-bad", "hook-ok"]).await;
}

/// `anyOf` entries are probed at their own positions: one passing entry includes the pod; when
/// none passes, status lists every entry's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_any_of_network_checks() {
    if !in_netns() {
        return;
    }
    let (http_ok, tcp_ok, none) = (ip(8, 1), ip(8, 2), ip(8, 3));
    let _http = http_server((http_ok, 8080).into(), status(200)).await;
    let _half = http_server((tcp_ok, 8080).into(), status(500)).await;
    let _tcp = tcp_server((tcp_ok, 9999).into()).await;
    let _down = http_server((none, 8080).into(), status(500)).await;
    let h = Harness::start().await;
    pool(
        &h,
        "either",
        &[("p", 8080)],
        &[
            ("either-http", http_ok),
            ("either-tcp", tcp_ok),
            ("either-none", none),
        ],
    )
    .await;
    h.create(probed_portmapping(
        "either",
        &[(
            "p",
            json!({"anyOf": [{"httpGet": {"path": "/"}}, {"tcpSocket": {"port": 9999}}]}),
        )],
    ))
    .await;
    wait_members(&h, "either", "p", &["either-http", "either-tcp"]).await;
    let reason = excluded_reason(&h, "either", "p", "either-none", |r| {
        r.contains("none included")
    })
    .await;
    assert!(
        reason.starts_with("anyOf: none included (httpGet: GET / answered HTTP 500"),
        "{reason}"
    );
    assert!(
        reason.contains("tcpSocket: ") && reason.contains("10.244.8.3:9999"),
        "{reason}"
    );
}

/// A webhook that goes down abstains: what is published stays published (an operator-side
/// outage freezes memberships), and a pod that was out stays out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_webhook_outage_freezes_memberships() {
    if !in_netns() {
        return;
    }
    let (a, b, hook) = (ip(9, 1), ip(9, 2), ip(9, 100));
    let decider: Handler = Arc::new(|_, body| {
        let Ok(review) = serde_json::from_slice::<MembershipReview>(body) else {
            return (400, String::new());
        };
        let decision = if review.pod.name == "frozen-a" {
            "Include"
        } else {
            "Exclude"
        };
        (
            200,
            json!({"decision": decision, "reason": "decided"}).to_string(),
        )
    });
    let webhook = http_server((hook, 7000).into(), decider).await;
    let h = Harness::start().await;
    one_check(
        &h,
        "frozen",
        8080,
        json!({"webhook": {"url": format!("http://{hook}:7000/")}}),
        [("frozen-a", a), ("frozen-b", b)],
    )
    .await;
    wait_members(&h, "frozen", "p", &["frozen-a"]).await;
    let abstained_before = probe_count(&h, "webhook", "abstain", "webhookUnavailable");

    drop(webhook);
    eventually(
        "webhook calls abstaining",
        Duration::from_secs(20),
        || async {
            (probe_count(&h, "webhook", "abstain", "webhookUnavailable") >= abstained_before + 4)
                .then_some(())
        },
    )
    .await;
    let m = h.membership("frozen").await;
    assert_eq!(m["frozen.p"], ["frozen-a"], "memberships stay as they were");
    let reason = excluded_reason(&h, "frozen", "p", "frozen-b", |_| true).await;
    assert!(reason.starts_with("webhook: decided"), "{reason}");
}

/// An operator restarted while the webhook is down has no verdict for anyone: the published pod
/// is kept, the status lists it under `kept` with the reason, and `portmapper status` marks it
/// `~` (the other pod stays out, ✘).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_restart_during_a_webhook_outage_reports_kept_memberships() {
    if !in_netns() {
        return;
    }
    let (a, b, hook) = (ip(10, 1), ip(10, 2), ip(10, 100));
    let decider: Handler = Arc::new(|_, body| {
        let Ok(review) = serde_json::from_slice::<MembershipReview>(body) else {
            return (400, String::new());
        };
        let decision = if review.pod.name == "outage-a" {
            "Include"
        } else {
            "Exclude"
        };
        (
            200,
            json!({"decision": decision, "reason": "decided"}).to_string(),
        )
    });
    let webhook = http_server((hook, 7000).into(), decider).await;
    let mut h = Harness::start().await;
    one_check(
        &h,
        "outage",
        8080,
        json!({"webhook": {"url": format!("http://{hook}:7000/")}}),
        [("outage-a", a), ("outage-b", b)],
    )
    .await;
    wait_members(&h, "outage", "p", &["outage-a"]).await;
    let kept_now = |pm: &portmapper_api::PortMapping| {
        pm.status
            .as_ref()
            .and_then(|s| s.ports.iter().find(|p| p.name == "p"))
            .map(|p| (p.kept.clone(), p.kept_total))
    };
    assert_eq!(kept_now(&h.portmapping("outage").await), Some((vec![], 0)));

    h.stop_controller().await;
    drop(webhook);
    h.run_controller();
    let kept = eventually("outage-a kept", Duration::from_secs(20), || async {
        let (kept, total) = kept_now(&h.portmapping("outage").await)?;
        (total == 1).then_some(kept)
    })
    .await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].pod, "outage-a");
    assert!(
        kept[0].reason.starts_with("webhook: no verdict yet"),
        "{}",
        kept[0].reason
    );
    assert_eq!(h.membership("outage").await["outage.p"], ["outage-a"]);

    let out = crate::status::output(crate::status::status_cmd(&h, &["outage"])).await;
    let stdout = crate::status::text(&out.stdout);
    assert!(out.status.success(), "{}", crate::status::text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"outage-a  ~"), "{stdout}");
    assert!(lines.contains(&"outage-b  ✘"), "{stdout}");
    assert!(
        lines.contains(&format!("  ~ outage-a p: {}", kept[0].reason).as_str()),
        "{stdout}"
    );
}

// ---- a rolling restart of a gated pool whose port has a slow check ----------------------

/// Answers of the decider before it includes a new address: each pod's http membership lags
/// its readiness by that many probe periods.
const WARM_UP_ANSWERS: usize = 2;

/// One version of one of our slices, as the watcher saw it.
#[derive(Clone, Debug)]
struct SliceVersion {
    slice: String,
    ready: std::collections::BTreeSet<IpAddr>,
}

/// Records every version of the slices of `service` (deduplicated by resourceVersion, so a
/// relist adds nothing), in the order the watch delivered them.
fn watch_slices(h: &Harness, service: &str) -> (Arc<Mutex<Vec<SliceVersion>>>, JoinHandle<()>) {
    use futures::StreamExt;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::ResourceExt;
    use kube::runtime::watcher;

    let seen: Arc<Mutex<Vec<SliceVersion>>> = Arc::default();
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(h.client.clone(), &h.ns);
    let config =
        watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
    let task = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut versions = std::collections::HashSet::new();
            let mut stream = std::pin::pin!(watch(api, config));
            while let Some(event) = stream.next().await {
                let slice = match event {
                    Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
                    _ => continue,
                };
                if !versions.insert(slice.resource_version()) {
                    continue;
                }
                let ready = slice
                    .endpoints
                    .iter()
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .flat_map(|e| e.addresses.iter().filter_map(|a| a.parse().ok()))
                    .collect();
                seen.lock().unwrap().push(SliceVersion {
                    slice: slice.name_any(),
                    ready,
                });
            }
        })
    };
    (seen, task)
}

/// Plays kubelet for a gated pod: address and ContainersReady now, Ready only when
/// ContainersReady and every readiness gate are True (kubelet's rule), waiting for that.
async fn kubelet_until_ready(h: &Harness, name: &str, ip: IpAddr) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};

    let api: kube::Api<Pod> = kube::Api::namespaced(h.client.clone(), &h.ns);
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip.to_string(),
        "podIPs": [{"ip": ip.to_string()}],
        "conditions": [
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"},
        ],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    eventually(
        &format!("{name} Ready by kubelet's rule"),
        Duration::from_secs(30),
        || async {
            let pod = api.get(name).await.unwrap();
            let gates: Vec<String> = pod
                .spec
                .as_ref()
                .and_then(|s| s.readiness_gates.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|g| g.condition_type)
                .collect();
            let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
            let is_true = |t: &str| {
                conditions
                    .iter()
                    .any(|c| c.type_ == t && c.status == "True")
            };
            (is_true("ContainersReady") && gates.iter().all(|g| is_true(g))).then_some(())
        },
    )
    .await;
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(ready))
        .await
        .unwrap();
}

/// A StatefulSet-style rolling restart of a gated pool (each pod deleted, recreated under its
/// name with a new IP, the next restarted only once this one is Ready by kubelet's rule) whose
/// http port has a check slower than readiness: a decider webhook that includes a new address
/// only at its third answer. A watcher records every version of the slices. Without the gate
/// the driver moves on as soon as the containers are ready, while http still lacks the
/// restarted pod, and http drops to one member; with it, no port ever has fewer than two of its
/// three. And the gate flips in the reconcile that publishes the pod: no status write (the end
/// of a reconcile) between the slice write that publishes it and its gate write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only inside the network namespace made by network_checks_through_the_operator_in_own_network_namespace"]
async fn inner_rolling_restart_of_a_gated_pool_waits_for_a_slow_check() {
    use portmapper_core::PUBLISHED_GATE;

    if !in_netns() {
        return;
    }
    let hook = ip(11, 100);
    let answers: Arc<Mutex<std::collections::HashMap<IpAddr, usize>>> = Arc::default();
    let handler: Handler = {
        let answers = answers.clone();
        Arc::new(move |_, body| {
            let Ok(review) = serde_json::from_slice::<MembershipReview>(body) else {
                return (400, String::new());
            };
            let mut answers = answers.lock().unwrap();
            let n = answers.entry(review.address).or_default();
            *n += 1;
            let answer = if *n > WARM_UP_ANSWERS {
                json!({"decision": "Include"})
            } else {
                json!({"decision": "Exclude", "reason": "warming up"})
            };
            (200, answer.to_string())
        })
    };
    let _hook = http_server((hook, 7000).into(), handler).await;
    let h = Harness::start().await;
    let (versions, watch) = watch_slices(&h, "roll");
    h.create(service("roll", &[("http", 8080), ("https", 8443)]))
        .await;
    let gated = |name: &str| {
        let mut p = pod(name, "roll", "http,https");
        p["spec"]["readinessGates"] = json!([{"conditionType": PUBLISHED_GATE}]);
        p
    };
    let pool: Vec<(String, u8)> = (0..3u8).map(|i| (format!("roll-{i}"), 10 + i)).collect();
    let mut pm = probed_portmapping(
        "roll",
        &[(
            "http",
            json!({"webhook": {"url": format!("http://{hook}:7000/decide")}}),
        )],
    );
    // podReady first on both ports: what the gate must not deadlock on.
    pm["spec"]["ports"][0]["checks"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"podReady": {}}));
    pm["spec"]["defaultChecks"] =
        json!([{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]);
    h.create(pm).await;
    for (name, host) in &pool {
        h.create(gated(name)).await;
        kubelet_until_ready(&h, name, ip(11, *host)).await;
    }
    let everyone: Vec<&str> = pool.iter().map(|(n, _)| n.as_str()).collect();
    wait_members(&h, "roll", "http", &everyone).await;
    wait_members(&h, "roll", "https", &everyone).await;

    let mut restarted = Vec::new();
    for (name, host) in &pool {
        h.delete_pod(name).await;
        h.create(gated(name)).await;
        // A new address per generation, as a rescheduled pod gets.
        let new_ip = ip(11, host + 10);
        kubelet_until_ready(&h, name, new_ip).await;
        restarted.push((name.clone(), new_ip));
    }
    wait_members(&h, "roll", "http", &everyone).await;
    wait_members(&h, "roll", "https", &everyone).await;
    watch.abort();
    let versions = versions.lock().unwrap().clone();

    // Per port, once it had all three, the fewest ready members of any later version.
    for port in ["roll.http", "roll.https"] {
        let counts: Vec<usize> = versions
            .iter()
            .filter(|v| v.slice == port)
            .map(|v| v.ready.len())
            .skip_while(|n| *n < 3)
            .collect();
        let fewest = counts.iter().min().copied();
        assert_eq!(
            fewest,
            Some(2),
            "{port}: ready members per version {counts:?}"
        );
    }

    // Each slice write of ours is one version: the k-th version of a slice is the k-th
    // successful write to it in the request log.
    let writes: Vec<_> = h
        .operator_requests()
        .await
        .into_iter()
        .filter(|r| r.succeeded())
        .collect();
    let nth_write = |slice: &str, k: usize| {
        writes
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.resource == "endpointslices" && r.verb != "delete" && r.name == slice
            })
            .nth(k)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("no write {k} of {slice}"))
    };
    for (name, new_ip) in &restarted {
        // The write that published it on its last port.
        let published = ["roll.http", "roll.https"]
            .iter()
            .map(|slice| {
                let k = versions
                    .iter()
                    .filter(|v| v.slice == *slice)
                    .position(|v| v.ready.contains(new_ip))
                    .unwrap_or_else(|| panic!("{name} at {new_ip} never published on {slice}"));
                nth_write(slice, k)
            })
            .max()
            .unwrap();
        let gate = writes
            .iter()
            .rposition(|r| r.resource == "pods" && r.subresource == "status" && r.name == *name)
            .unwrap();
        let statuses_between = writes[published..gate]
            .iter()
            .filter(|r| r.resource == "portmappings" && r.subresource == "status")
            .count();
        assert!(
            published < gate,
            "{name}: gate written before its publication"
        );
        assert_eq!(
            statuses_between, 0,
            "{name}: the gate waited for another reconcile"
        );
    }
}
