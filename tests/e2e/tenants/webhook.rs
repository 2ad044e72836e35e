//! A tenant's webhooks reach only what the operator's egress policy allows (threat analysis M3,
//! M4), on the real API server with the chart's flags:
//! - loopback spelled as an IPv4-mapped IPv6 address is read as the IPv4 address it is, even
//!   under a policy that admits every IPv6 literal, refused, and no connection reaches the
//!   listener behind it (the address rule alone is tested in `portmapper-probe`'s `safety.rs`);
//! - an address outside the allowed CIDRs is refused without a connection, and the status says
//!   it was the policy;
//! - an allowed server answering 2xx with something that is not a decision document is not
//!   echoed into the PortMapping's status or Events.
//!
//! Webhook addresses must not be loopback, so the outer test re-runs the inner one in a network
//! namespace of its own (`unshare -n`, 10.244.0.0/16 routed to `lo`), as `probing.rs` does.

use test_support::{Inner, Sandbox, run_inner};

const ENV: &str = "PORTMAPPER_TENANT_WEBHOOK_INNER";

#[test]
fn a_tenants_webhooks_reach_only_what_the_egress_policy_allows_and_echo_nothing() {
    run_inner(
        Sandbox::NetworkNamespace,
        Inner {
            what: "tenant webhook egress",
            filter: "tenants::webhook::inner::",
            exact: false,
            threads: 1,
            expect_passed: 1,
            env: ENV,
        },
    );
}

mod inner {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Value, json};
    use test_support::in_sandbox;

    use super::ENV;
    use crate::tenants::{Tenant, World, portmapping, service};

    /// Answers every request `200 text/plain` with a secret; counts connections.
    fn server(addr: &str, body: &'static str) -> Arc<AtomicUsize> {
        let listener = TcpListener::bind(addr).expect("the server listens");
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().map_while(Result::ok) {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 65536];
                let _ = stream.read(&mut buf);
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
            }
        });
        seen
    }

    /// Tenant `t`'s Service and PortMapping `name` (port 8080) checked by a webhook at `url`,
    /// and one Ready pod.
    fn mapping(t: &Tenant<'_>, name: &str, url: &str, ip: &str) {
        t.create(&service(name, [8080]));
        let checks = json!({"defaultChecks": [{"webhook": {"url": url}}]});
        t.create(&portmapping(name, "example.com/group", checks));
        t.ready_pod(
            &format!("{name}-1"),
            json!({"example.com/group": name}),
            json!({}),
            ip,
        );
    }

    /// The reason `name`'s status gives for its pod, once it names the webhook's answer.
    fn reason(t: &Tenant<'_>, name: &str) -> String {
        let deadline = std::time::Instant::now() + crate::tenants::WAIT;
        loop {
            let pm: Value =
                serde_json::from_str(&t.ok(&["get", "pm", name, "-o", "json"])).unwrap();
            let reason = pm["status"]["ports"][0]["excluded"][0]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            // An abstaining webhook's reason carries its cause: `… (webhook: <cause>) …`.
            if reason.contains("(webhook:") {
                return reason;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name}'s status never gave the webhook's reason: {}",
                pm["status"]
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    #[test]
    #[ignore = "run in a network namespace by the outer test"]
    fn webhooks_are_held_to_the_egress_policy() {
        if !in_sandbox(ENV) {
            return;
        }
        // 127.0.0.1 behind the mapped spelling; an allowed server with a secret; a server
        // outside the allowed CIDRs.
        let loopback = server("127.0.0.1:18190", "SECRET=loopback");
        let allowed = server("10.244.200.3:18090", "SECRET=hunter2");
        let outside = server("10.244.201.1:18091", "SECRET=outside");
        let egress = json!({"webhookEgress": {"allowedCIDRs": ["10.244.200.0/24", "::/0"]}});
        let Some(world) = World::start("tenant-webhook", &egress, &[]) else {
            eprintln!("SKIPPED tenant webhook egress: no chart or kubectl here");
            return;
        };
        let a = world.tenant("a");

        mapping(
            &a,
            "echo",
            "http://10.244.200.3:18090/internal/token",
            "10.244.1.1",
        );
        let echo = reason(&a, "echo");
        assert!(
            allowed.load(Ordering::SeqCst) > 0,
            "the allowed server was never called"
        );
        assert!(echo.contains("not a decision document"), "{echo}");
        let status = a.ok(&["get", "pm", "echo", "-o", "jsonpath={.status}"]);
        let events = a.ok(&["get", "events", "-o", "json"]);
        assert!(
            !status.contains("hunter2") && !events.contains("hunter2"),
            "{status}"
        );

        mapping(
            &a,
            "mapped",
            "http://[::ffff:127.0.0.1]:18190/quitquitquit",
            "10.244.1.2",
        );
        let mapped = reason(&a, "mapped");
        // Read as the IPv4 address it spells (canonicalised), so IPv4's rules apply: refused.
        let refused_as_v4 = mapped.contains("127.0.0.1")
            && (mapped.contains("no allowed address") || mapped.contains("egress policy"));
        assert!(refused_as_v4, "{mapped}");

        mapping(&a, "outside", "http://10.244.201.1:18091/", "10.244.1.3");
        let refused = reason(&a, "outside");
        assert!(refused.contains("egress policy"), "{refused}");

        assert_eq!(loopback.load(Ordering::SeqCst), 0, "loopback was reached");
        assert_eq!(
            outside.load(Ordering::SeqCst),
            0,
            "an address outside the policy was reached"
        );
    }
}
