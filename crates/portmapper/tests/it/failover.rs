//! Failover between two real `portmapper run` processes with leader election on and a short
//! Lease (4 s, grace 1 s), while a pod flips every 200 ms so the leader always has something
//! to write: kill -9, SIGTERM and SIGSTOP/SIGCONT of the leader. `leader.rs` covers the
//! election in process (a stuck leader's deadline, the gate, default identities); here the
//! signals reach real processes. Every write is attributed by User-Agent
//! (`portmapper/<version> (<identity>)`) from the real API server's audit log, and the writers
//! must form one run each: no write by an old identity after the next leader's first write.
//!
//! Rounds of the three faults: `PORTMAPPER_FAILOVER_ROUNDS` (1 by default, 10 in `make soak`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::harness::*;
use crate::observer::Observer;
use crate::procs::{Operator, bound, env_count};
use crate::requests::Request;

const SVC: &str = "fo";
const LEASE_SECONDS: u64 = 4;
const ELECTION: &[&str] = &[
    "--leader-elect=true",
    "--lease-duration-seconds",
    "4",
    "--lease-grace-seconds",
    "1",
];

fn start(h: &Harness, identity: &str) -> Operator {
    Operator::start(h, identity, ELECTION)
}

/// Writes other than to the Lease, by anyone running the operator, in log order.
async fn object_writes(h: &Harness) -> Vec<Request> {
    h.requests()
        .await
        .into_iter()
        .filter(|r| {
            r.is_write() && r.resource != "leases" && r.user_agent.starts_with(OPERATOR_USER_AGENT)
        })
        .collect()
}

/// How long after `from` the server answered at `at`.
fn since(from: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(from)).unwrap_or_default()
}

/// The first object write by `op` answered at or after `from`.
async fn first_write_after(
    h: &Harness,
    op: &Operator,
    from: Timestamp,
    within: Duration,
) -> Timestamp {
    eventually(
        &format!("a write by {} after {from:?}", op.identity),
        within,
        || async {
            object_writes(h)
                .await
                .into_iter()
                .find(|r| r.user_agent == op.user_agent && r.at >= from)
                .map(|r| r.at)
        },
    )
    .await
}

/// `op` is the active writer: it writes two pod flips from now on (so a fault hits a leader
/// busy writing, not an idle one).
async fn writing(h: &Harness, op: &Operator) {
    let from = Timestamp::now();
    let first = first_write_after(h, op, from, Duration::from_secs(20)).await;
    first_write_after(
        h,
        op,
        first + Duration::from_micros(1),
        Duration::from_secs(20),
    )
    .await;
}

/// `op` is running as a standby: it has asked for the Lease at least once.
async fn is_standby(h: &Harness, op: &Operator) {
    eventually(
        &format!("{} polling the Lease", op.identity),
        Duration::from_secs(20),
        || async {
            h.requests()
                .await
                .iter()
                .any(|r| r.user_agent == op.user_agent && r.resource == "leases")
                .then_some(())
        },
    )
    .await;
}

async fn holder(h: &Harness) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(h.client.clone(), &h.ns);
    api.get_opt("portmapper")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|s| !s.is_empty())
}

/// Single writer at every moment: consecutive writes by one identity form one run, and no
/// identity has two runs. Returns the writers in order.
async fn assert_single_writer(h: &Harness) -> Vec<(String, usize)> {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for r in object_writes(h).await {
        match runs.last_mut() {
            Some((ua, n)) if *ua == r.user_agent => *n += 1,
            _ => runs.push((r.user_agent.clone(), 1)),
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (ua, _) in &runs {
        assert!(
            seen.insert(ua.clone()),
            "{ua} wrote again after another leader: {runs:?}"
        );
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_sigterm_and_sigstop_of_the_leader_hand_over_to_a_single_writer() {
    let h = Harness::new().await;
    h.create(service(SVC, &[("http", 8080)])).await;
    ready_pods(
        &h,
        SVC,
        &[
            ("fo-0", "http", "10.244.2.1"),
            ("fo-1", "http", "10.244.2.2"),
        ],
    )
    .await;
    h.create(portmapping(SVC, SVC)).await;
    let observer = Observer::start(&h, &[(SVC, "http")]).await;

    let a = start(&h, "fo-a");
    let b = start(&h, "fo-b");
    let leader = eventually("a leader", Duration::from_secs(20), || holder(&h)).await;
    let (leader, standby) = if leader == a.identity { (a, b) } else { (b, a) };
    eventually("published", Duration::from_secs(20), || async {
        (h.membership(SVC).await.get("fo.http")? == &["fo-0", "fo-1"]).then_some(())
    })
    .await;
    is_standby(&h, &standby).await;

    // fo-1 flips every 200 ms (fo-0 stays Ready, so the port must never go dark).
    let churning = Arc::new(AtomicBool::new(true));
    let churn = {
        let (api, churning) = (
            Api::<Pod>::namespaced(h.client.clone(), &h.ns),
            churning.clone(),
        );
        tokio::spawn(async move {
            let mut ready = true;
            let mut flips = 0_usize;
            while churning.load(Ordering::Relaxed) {
                ready = !ready;
                let status = json!({"status": {"phase": "Running", "podIP": "10.244.2.2",
                    "podIPs": [{"ip": "10.244.2.2"}],
                    "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
                api.patch_status("fo-1", &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .unwrap();
                flips += 1;
                // Pacing: the leader always has a write to make when a signal hits it.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            flips
        })
    };

    let rounds = env_count("PORTMAPPER_FAILOVER_ROUNDS", 1);
    println!("failover: {rounds} round(s) of kill -9, SIGTERM, SIGSTOP/SIGCONT");
    let (mut leader, mut standby) = (leader, standby);
    let mut figures = Vec::new();
    for round in 1..=rounds {
        // 1. kill -9: the standby writes within the Lease duration + 2 s.
        writing(&h, &leader).await;
        let t0 = Timestamp::now();
        leader.kill9();
        let first = first_write_after(&h, &standby, t0, Duration::from_secs(20)).await;
        let kill9 = since(t0, first);
        println!(
            "kill -9 of {}: {} wrote {kill9:?} later",
            leader.identity, standby.identity
        );
        // Correctness bound: the Lease expires after LEASE_SECONDS; 3 Leases (the target,
        // Lease + 2 s, in `make soak`) is only exceeded if the standby missed the expiry.
        let expiry = bound(
            Duration::from_secs(LEASE_SECONDS + 2),
            Duration::from_secs(3 * LEASE_SECONDS),
        );
        assert!(kill9 <= expiry, "takeover after kill -9 took {kill9:?}");

        // 2. SIGTERM: the released Lease is taken by a running standby within 2 s.
        leader = standby;
        standby = start(&h, &format!("fo-{round}c"));
        is_standby(&h, &standby).await;
        writing(&h, &leader).await;
        let t0 = Timestamp::now();
        leader.signal("TERM");
        let first = first_write_after(&h, &standby, t0, Duration::from_secs(20)).await;
        let sigterm = since(t0, first);
        println!(
            "SIGTERM of {}: {} wrote {sigterm:?} later",
            leader.identity, standby.identity
        );
        // Correctness bound: a takeover that waited for the Lease to expire comes at least
        // LEASE_SECONDS - retry period (about 3.3 s) after the SIGTERM; 3 s tells the release
        // from it with a second to spare over the 2 s target (asserted in `make soak`).
        assert!(
            sigterm <= bound(Duration::from_secs(2), Duration::from_secs(3)),
            "takeover after SIGTERM took {sigterm:?}"
        );
        assert!(
            leader.wait_exit(Duration::from_secs(10)).await,
            "SIGTERM exits 0\n{}",
            leader.log_text()
        );

        // 3. SIGSTOP until the standby has taken over, then SIGCONT: the resumed ex-leader writes
        // nothing (its deadline passed while it was stopped).
        let paused = standby;
        standby = start(&h, &format!("fo-{round}d"));
        is_standby(&h, &standby).await;
        writing(&h, &paused).await;
        let t0 = Timestamp::now();
        paused.signal("STOP");
        let first = first_write_after(&h, &standby, t0, Duration::from_secs(20)).await;
        let sigstop = since(t0, first);
        println!(
            "SIGSTOP of {}: {} wrote {sigstop:?} later",
            paused.identity, standby.identity
        );
        // Correctness bound: as for kill -9.
        assert!(sigstop <= expiry, "takeover after SIGSTOP took {sigstop:?}");
        let resumed = Timestamp::now();
        paused.signal("CONT");
        // Proof it runs again: a request of its own (the Lease) after SIGCONT; then two more
        // writes by the new leader, so anything the ex-leader sent on resuming is in the log.
        eventually(
            "the ex-leader's first request after SIGCONT",
            Duration::from_secs(20),
            || async {
                h.requests()
                    .await
                    .iter()
                    .any(|r| r.user_agent == paused.user_agent && r.at >= resumed)
                    .then_some(())
            },
        )
        .await;
        let after = Timestamp::now();
        let next = first_write_after(&h, &standby, after, Duration::from_secs(20)).await;
        first_write_after(
            &h,
            &standby,
            next + Duration::from_micros(1),
            Duration::from_secs(20),
        )
        .await;
        // What the ex-leader sent once it ran again, judged by when the server received it,
        // not when it answered: the status PATCH that follows a pass's slice write is often
        // still under way when SIGSTOP is sent (the last one answered 3-54 ms before it in 18
        // runs), and under load one was answered after it. A stopped process sends nothing,
        // so a request received before SIGCONT left before SIGSTOP, while it led (one still
        // being answered when the new leader wrote would show in `assert_single_writer`).
        let stale: Vec<_> = object_writes(&h)
            .await
            .into_iter()
            .filter(|r| r.user_agent == paused.user_agent && r.received >= resumed)
            .collect();
        assert!(
            stale.is_empty(),
            "the paused ex-leader wrote after SIGCONT at {resumed} (SIGSTOP at {t0}, the \
             standby's first write answered at {first}): {stale:?}"
        );
        figures.push((kill9, sigterm, sigstop));
        // The resumed ex-leader is a standby now; it goes, so every identity writes in one
        // run only, and a fresh standby waits for the next round.
        drop(paused);
        if round < rounds {
            leader = standby;
            standby = start(&h, &format!("fo-{}a", round + 1));
            is_standby(&h, &standby).await;
        }
    }
    churning.store(false, Ordering::Relaxed);
    let flips = churn.await.unwrap();

    let runs = assert_single_writer(&h).await;
    let versions = observer.assert_held();
    // Within the bound after the churn's last flip.
    observer.assert_final_state_is_the_plan(SVC).await;
    println!(
        "failover: {rounds} round(s), (kill -9, SIGTERM, SIGSTOP) takeovers {figures:?}; \
         {flips} pod flips; writers in order {runs:?}; {versions} slice versions, no blackout, \
         no lasting duplicate"
    );
}
