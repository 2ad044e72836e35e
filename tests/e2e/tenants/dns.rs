//! One tenant's webhook host names that never resolve cannot starve another tenant's lookups
//! (threat analysis M5). The operator resolves webhook hosts with the system resolver on a
//! fixed number of threads, a quarter of them per namespace: tenant a's 512 webhook targets
//! at names its resolver never answers hold a's share only, and tenant b's webhook, found by
//! name, still decides b's new pod at once.
//!
//! The outer test re-runs the inner one in a network namespace of its own (`unshare -n`): there
//! the test answers DNS at the address `/etc/resolv.conf` names (added to `lo`), for b's name
//! only, and never for a's, so no packet, DNS included, leaves the namespace.

use test_support::{Inner, Sandbox, run_inner};

const ENV: &str = "PORTMAPPER_TENANT_DNS_INNER";

#[test]
fn webhook_names_that_never_resolve_do_not_starve_another_tenants_lookups() {
    run_inner(
        Sandbox::NetworkNamespace,
        Inner {
            what: "tenant DNS lookups",
            filter: "tenants::dns::inner::",
            exact: false,
            threads: 1,
            expect_passed: 1,
            env: ENV,
        },
    );
}

mod inner {
    use std::net::{Ipv4Addr, UdpSocket};
    use std::process::Command;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use test_support::in_sandbox;

    use super::ENV;
    use crate::tenants::probing::inner::{decider, publish_latency};
    use crate::tenants::{World, portmapping, service};

    const DECIDER_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 200, 2);
    const DECIDER: &str = "10.244.200.2:18081";

    /// The operator's webhook lookups in flight per namespace: a quarter of its 16.
    const SHARE: usize = 4;
    /// Queries one lookup sends per try: A and AAAA, in parallel.
    const QUERIES_PER_TRY: usize = 2;

    /// The first IPv4 nameserver of `/etc/resolv.conf`, and its `timeout` option (glibc's
    /// wait for an answer before it tries again; 5 s by default).
    fn nameserver() -> Option<(Ipv4Addr, Duration)> {
        let conf = std::fs::read_to_string("/etc/resolv.conf").ok()?;
        let timeout = conf
            .split_whitespace()
            .find_map(|w| w.strip_prefix("timeout:"))
            .and_then(|t| t.parse().ok())
            .unwrap_or(5);
        let address = conf
            .lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .find_map(|a| a.trim().parse().ok())?;
        Some((address, Duration::from_secs(timeout)))
    }

    /// When each unanswered query arrived.
    type Unanswered = Arc<Mutex<Vec<Instant>>>;

    /// The most queries that arrived within any `window`.
    fn most_within(unanswered: &Unanswered, window: Duration) -> usize {
        let at = unanswered.lock().unwrap().clone();
        (0..at.len())
            .map(|i| at[i..].iter().take_while(|&&t| t - at[i] < window).count())
            .max()
            .unwrap_or(0)
    }

    /// Answers A queries for `name` with `ip` (AAAA with no address), and never answers any
    /// other name; records when each query it leaves unanswered arrived.
    fn dns(at: Ipv4Addr, name: String, ip: Ipv4Addr) -> Unanswered {
        let socket = UdpSocket::bind((at, 53)).expect("the DNS server binds port 53");
        let dropped = Unanswered::default();
        let counted = dropped.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                match answer(&buf[..n], &name, ip) {
                    Some(reply) => {
                        let _ = socket.send_to(&reply, from);
                    }
                    None => counted.lock().unwrap().push(Instant::now()),
                }
            }
        });
        dropped
    }

    /// The reply to a one-question query for `name` (type A: `ip`; any other type: none).
    fn answer(query: &[u8], name: &str, ip: Ipv4Addr) -> Option<Vec<u8>> {
        let (mut labels, mut at) = (Vec::new(), 12);
        loop {
            let len = usize::from(*query.get(at)?);
            at += 1;
            if len == 0 {
                break;
            }
            labels.push(String::from_utf8_lossy(query.get(at..at + len)?).to_lowercase());
            at += len;
        }
        if labels.join(".") != name.trim_end_matches('.') {
            return None;
        }
        let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
        let question_end = at + 4;
        let mut reply = query.get(..question_end)?.to_vec();
        reply[2] = 0x81; // a response, recursion desired
        reply[3] = 0x80; // recursion available, NOERROR
        let a = qtype == 1;
        reply[6..8].copy_from_slice(&u16::from(a).to_be_bytes());
        reply[8..12].fill(0);
        if a {
            // The question's name (pointer to offset 12), A, IN, TTL 5 s, 4 bytes.
            reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
            reply.extend_from_slice(&ip.octets());
        }
        Some(reply)
    }

    fn webhook(host: &str, timeout_seconds: u32) -> Value {
        json!({"webhook": {"url": format!("http://{host}/review"),
                           "timeoutSeconds": timeout_seconds}})
    }

    fn threads(world: &World) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", world.operator_pid()))
            .expect("the operator runs");
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("a thread count")
    }

    #[test]
    #[ignore = "run in a network namespace by the outer test"]
    fn a_tenants_lookups_find_a_slot_while_another_tenants_names_never_resolve() {
        if !in_sandbox(ENV) {
            return;
        }
        let Some((resolver, retry)) = nameserver() else {
            eprintln!("SKIPPED tenant DNS lookups: no IPv4 nameserver in /etc/resolv.conf");
            return;
        };
        if !resolver.is_loopback() {
            let add = format!("ip addr add {resolver}/32 dev lo");
            let out = Command::new("sh").args(["-c", &add]).output().unwrap();
            assert!(
                out.status.success(),
                "{add}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        decider(DECIDER);
        // The decider stands at a pod-network address: the chart's `webhookEgress.allowedCIDRs`,
        // as an administrator would set it. Host names are the default policy's.
        let egress = json!({"webhookEgress": {"allowedCIDRs": ["10.244.200.0/24"]}});
        let Some(world) = World::start("tenant-dns", &egress, &[]) else {
            eprintln!("SKIPPED tenant DNS lookups: no chart or kubectl here");
            return;
        };
        let b = world.tenant("b");
        let decider_host = format!("decider.{}.svc.cluster.local", b.namespace);
        let unanswered = dns(resolver, decider_host.clone(), DECIDER_IP);
        b.create(&service("web", [8080]));
        let port = DECIDER.rsplit(':').next().unwrap();
        b.create(&portmapping(
            "web",
            "example.com/group",
            json!({"defaultChecks": [webhook(&format!("{decider_host}:{port}"), 2)],
                   "probe": {"periodSeconds": 2}}),
        ));
        let first = publish_latency(&world, &b, "web-1", "10.244.1.1", 0);
        let watch = b.watch_published("web");
        eprintln!(
            "victim's first pod published by a webhook found by name in {} ms",
            first.as_millis()
        );

        // The attack: 16 names × 8 ports × 4 pods = 512 targets, every second, at names the
        // resolver never answers (glibc waits 5 s per try, twice, per lookup).
        let a = world.tenant("a");
        a.create(&service("hog", 9000..9008));
        let checks: Vec<Value> = (0..16)
            .map(|i| webhook(&format!("x{i}.{}.svc.cluster.local", a.namespace), 1))
            .collect();
        a.create(&portmapping(
            "hog",
            "example.com/group",
            json!({"defaultChecks": checks, "probe": {"periodSeconds": 1}}),
        ));
        for i in 1..=4 {
            a.ready_pod(
                &format!("hog-{i}"),
                json!({"example.com/group": "hog"}),
                json!({}),
                &format!("10.244.2.{i}"),
            );
        }
        world.wait_for("the attacker's lookups hanging", || {
            unanswered.lock().unwrap().len() >= SHARE * QUERIES_PER_TRY
        });
        // Two of glibc's tries: every slot the attacker could take is taken, and retried.
        std::thread::sleep(2 * retry);
        let attacked = publish_latency(&world, &b, "web-2", "10.244.1.2", 1);
        let threads = threads(&world);
        // A lookup's tries are `retry` apart and a slot is freed only when its lookup ends, so
        // within less than `retry` each slot the attacker holds sends one try at most.
        let window = retry - Duration::from_millis(500);
        let most = most_within(&unanswered, window);
        eprintln!(
            "victim's new pod published in {} ms while another tenant's names never resolve \
             ({} queries unanswered, at most {most} within {window:?}); operator threads: {threads}",
            attacked.as_millis(),
            unanswered.lock().unwrap().len()
        );
        assert!(
            most <= SHARE * QUERIES_PER_TRY,
            "{most} lookups of one tenant in flight at once, over its share of {SHARE}"
        );
        // Lookups are bounded (16 threads), not one blocked thread per attempt.
        assert!(threads < 64, "the operator runs {threads} threads");
        let fewest = watch.fewest();
        assert!(
            fewest.get("p8080").is_some_and(|&n| n >= 1),
            "the victim's port emptied during the attack: {fewest:?}"
        );
    }
}
