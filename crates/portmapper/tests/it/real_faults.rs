//! The real control plane's own faults, with nothing lost (issue 26 item 2): while pods churn
//! (20 changes a second, [`crate::churn`]), kill -9 kube-apiserver and start it again; kill -9
//! etcd and start it again; restart kube-apiserver with a single seat per priority level and
//! priority and fairness rejecting the operator's slice writes with 429; compact etcd so that
//! watches resume with 410; restart kube-apiserver under a leader and its standby.
//!
//! They run on a control plane of their own (etcd and kube-apiserver, no controllers: the
//! shared one must never see a fault), one at a time. The operator runs as a ServiceAccount
//! (a bound token, `cluster-admin` by a ClusterRoleBinding), not as the admin: `system:masters`
//! is exempt from priority and fairness. Each case measures what the emulator's fault matrix
//! does: blackouts and lasting duplicates (the invariant observer), the operator's write
//! attempts during the fault (the audit log), convergence after it, and writes by a deposed
//! leader.
//!
//! Rounds of each case: `PORTMAPPER_REAL_FAULT_ROUNDS` (1 in `make test`, 3 in `make soak`);
//! the throttled window: `PORTMAPPER_BACKOFF_SECONDS` (10, 60 in `make soak`).
//! `PORTMAPPER_REAL_FAULT_TRACE=1` prints the operator's requests from each fault on.
//! `PORTMAPPER_REAL_FAULT_DEBUG=1` writes the operator's debug log (and kube-runtime's) to stderr:
//! run `real_faults::` alone with it, as it installs the process's tracing subscriber.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper::http;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams, VersionMatch};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use test_support::realkube::ControlPlane;
use tokio::sync::{Mutex, MutexGuard};

use crate::backoff::{Attempts, at_most_one_per_second, attempts, most_requests};
use crate::churn::{self, Churn, Churned};
use crate::harness::*;
use crate::observer::Observer;
use crate::procs::{Operator, bound, env_count, seed};
use crate::requests::Request;

/// The target: converged within 5 s of the fault's end (the API server answering
/// again), and of the churn's last change. After an API-server restart the watches that failed
/// while it was down re-watch at once when the first of them is answered again
/// (`runtime/watch_recovery.rs`), not after what is left of their own backoff.
const CONVERGE: Duration = Duration::from_secs(5);
/// Churn before the fault begins, and after the API server answers again.
const AROUND: Duration = Duration::from_secs(1);
/// How long to wait for a restarted component.
const RESTART: Duration = Duration::from_secs(60);

/// This module's control plane, as it started (a test that failed half-way through a fault
/// leaves it to the next one to heal), and the lock that runs its tests one at a time.
async fn plane() -> (&'static ControlPlane, MutexGuard<'static, ()>) {
    static PLANE: OnceLock<(ControlPlane, Vec<String>)> = OnceLock::new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());
    let guard = ONE_AT_A_TIME.lock().await;
    let (plane, normal) = tokio::task::spawn_blocking(|| {
        PLANE.get_or_init(|| {
            let plane = ControlPlane::start("");
            let args = plane.state().components["kube-apiserver"].args.clone();
            (plane, args)
        })
    })
    .await
    .expect("the control plane starts");
    if !plane.running("etcd") {
        plane.start_component("etcd");
    }
    if !plane.running("kube-apiserver")
        || plane.state().components["kube-apiserver"].args != *normal
    {
        plane.kill9("kube-apiserver");
        plane.start_component_with("kube-apiserver", normal);
    }
    wait_ready(plane).await;
    (plane, guard)
}

/// Waits until the API server of `plane` answers `/readyz` with `ok`; returns when it did.
async fn wait_ready(plane: &ControlPlane) -> Timestamp {
    let kubeconfig = Kubeconfig::read_from(plane.kubeconfig()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let deadline = tokio::time::Instant::now() + RESTART;
    loop {
        let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
        if let Ok(text) = client.request_text(request).await
            && text.trim() == "ok"
        {
            return Timestamp::now();
        }
        if tokio::time::Instant::now() > deadline {
            let log = &plane.state().components["kube-apiserver"].log;
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "the API server not ready in {RESTART:?}; its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rounds() -> usize {
    env_count("PORTMAPPER_REAL_FAULT_ROUNDS", 1)
}

/// A ServiceAccount `account` of the test's namespace bound to `cluster-admin`, and a
/// kubeconfig (under the test's directory) that authenticates with a token of it.
async fn service_account(h: &Harness, account: &str) -> (Config, PathBuf) {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
    h.api::<ServiceAccount>()
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-{account}", h.ns)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": h.ns}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(h.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 7200}}))
            .unwrap();
    let token = h
        .api::<ServiceAccount>()
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .expect("a token")
        .token;
    let path = h
        .kubeconfig_path()
        .with_file_name(format!("{account}.kubeconfig"));
    h.plane().kubeconfig_with_token(&token, &h.ns, &path);
    let kubeconfig = Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    (config, path)
}

/// Waits until the test's API server answers `/readyz` with `ok` again.
async fn api_answers(h: &Harness) -> Timestamp {
    wait_ready(h.plane()).await
}

/// A world on this module's plane: the churn pool of `name`, the operator as a ServiceAccount
/// in process (production client), published, observed.
async fn world(plane: &'static ControlPlane, name: &str, octet: u8) -> (Harness, Observer) {
    if std::env::var_os("PORTMAPPER_REAL_FAULT_DEBUG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("portmapper=debug,kube_runtime=debug")
            .with_writer(std::io::stderr)
            .try_init();
    }
    let mut h = Harness::new_on(plane).await;
    let (config, _) = service_account(&h, "portmapper").await;
    churn::pool(&h, name, octet, churn::PODS).await;
    h.run_operator_as(config, |_| {});
    churn::published(&h, name, churn::PODS, Duration::from_secs(30)).await;
    let observer = Observer::start(&h, &churn::must_serve(name)).await;
    (h, observer)
}

/// What one fault case measured.
#[derive(Debug)]
struct Figures {
    churned: Churned,
    /// The operator's writes from the fault's start until the API server answered again.
    during: Attempts,
    /// From the fault's start until the API server answered again.
    outage: Duration,
    /// From the API server answering again, and from the churn's last change, to the slices
    /// holding the final membership.
    since_back: Duration,
    since_churn: Duration,
    /// The operator's LISTs after the fault began (relists: a watch resumed with 410).
    relists: usize,
}

fn between(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

/// Churns [`AROUND`], runs `fault` (which returns once the API server answers again), churns
/// [`AROUND`] more, then checks convergence and the observer.
/// `fault` is not polled before then: it begins when it is awaited.
async fn around(
    h: &Harness,
    observer: &Observer,
    name: &str,
    octet: u8,
    fault: impl std::future::Future<Output = Timestamp>,
) -> Figures {
    let churn = Churn::start(h, name, octet, churn::PODS, churn::EVERY, seed(26));
    tokio::time::sleep(AROUND).await;
    let began = Timestamp::now();
    let back = fault.await;
    tokio::time::sleep(AROUND).await;
    let (churned, members) = churn.stop(name).await;
    let since_churn = churn::converged(h, &members, CONVERGE + Duration::from_secs(20)).await;
    let since_back = between(back, Timestamp::now());
    let requests = h.requests().await;
    if std::env::var_os("PORTMAPPER_REAL_FAULT_TRACE").is_some() {
        for r in requests
            .iter()
            .filter(|r| r.user_agent.starts_with(OPERATOR_USER_AGENT) && r.at >= began)
        {
            println!(
                "TRACE {} {} {}/{} {} {} (back {})",
                r.at, r.verb, r.resource, r.subresource, r.name, r.code, back
            );
        }
    }
    let during = attempts(&requests, OPERATOR_USER_AGENT, name, began, back);
    let relists = requests
        .iter()
        .filter(|r| {
            r.user_agent.starts_with(OPERATOR_USER_AGENT) && r.verb == "list" && r.at >= began
        })
        .count();
    observer.assert_held();
    observer.assert_final_state_is_the_plan(name).await;
    Figures {
        churned,
        during,
        outage: between(began, back),
        since_back,
        since_churn,
        relists,
    }
}

fn report(case: &str, f: &Figures) {
    println!(
        "{case}: outage {:?}; {} pod changes ({} refused); operator writes during it {:?}; \
         {} operator LISTs since; converged {:?} after the churn's last change ({:?} after the \
         API server answered again); no blackout, no lasting duplicate",
        f.outage,
        f.churned.changes,
        f.churned.refused,
        f.during,
        f.relists,
        f.since_churn,
        f.since_back
    );
    // Correctness bounds (the 5 s target in `make soak`): the operator's own waits are capped
    // at 4 s (a write window) and 3.75 s (a re-watch), so 12 s is only exceeded by a wait that
    // is not ours to take (kube's 30 s watch backoff, a resync) or by no convergence at all.
    let bound = bound(CONVERGE, Duration::from_secs(12));
    assert!(
        f.since_churn <= bound,
        "{case}: converged {:?} after the churn ended (bound {bound:?})",
        f.since_churn
    );
    assert!(
        f.since_back <= bound,
        "{case}: converged {:?} after the API server answered again (bound {bound:?})",
        f.since_back
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_api_server_loses_nothing() {
    let (plane, _one) = plane().await;
    for round in 1..=rounds() {
        let name = format!("kill-api-{round}");
        let (h, observer) = world(plane, &name, 40).await;
        let f = around(&h, &observer, &name, 40, async {
            plane.kill9("kube-apiserver");
            tokio::time::sleep(AROUND).await;
            plane.start_component("kube-apiserver");
            api_answers(&h).await
        })
        .await;
        report(&format!("kill -9 kube-apiserver (round {round})"), &f);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_etcd_loses_nothing() {
    let (plane, _one) = plane().await;
    for round in 1..=rounds() {
        let name = format!("kill-etcd-{round}");
        let (h, observer) = world(plane, &name, 41).await;
        let f = around(&h, &observer, &name, 41, async {
            plane.kill9("etcd");
            tokio::time::sleep(AROUND).await;
            plane.start_component("etcd");
            tokio::task::spawn_blocking(move || plane.wait_etcd_healthy(RESTART))
                .await
                .unwrap();
            api_answers(&h).await
        })
        .await;
        report(&format!("kill -9 etcd (round {round})"), &f);
    }
}

/// A watch from `version` on pods of the test's namespace: whether it is answered 410 Gone.
async fn watch_expired(h: &Harness, version: &str) -> bool {
    use futures::StreamExt;
    let api = h.api::<k8s_openapi::api::core::v1::Pod>();
    let Ok(stream) = api.watch(&kube::api::WatchParams::default(), version).await else {
        return false;
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(kube::api::WatchEvent::Error(e)) => return e.code == 410,
            Err(kube::Error::Api(e)) => return e.code == 410,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacting_etcd_makes_watches_resume_with_410_and_loses_nothing() {
    let (plane, _one) = plane().await;
    for round in 1..=rounds() {
        let name = format!("compact-{round}");
        let (h, observer) = world(plane, &name, 42).await;
        let before = h
            .api::<k8s_openapi::api::core::v1::Pod>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .expect("a list resourceVersion");
        let mut at = 0;
        let f = around(&h, &observer, &name, 42, async {
            at = tokio::task::spawn_blocking(move || plane.compact_etcd())
                .await
                .unwrap();
            // The watch cache of a running API server still serves the old versions; a new
            // one starts from etcd's compacted history.
            plane.kill9("kube-apiserver");
            plane.start_component("kube-apiserver");
            api_answers(&h).await
        })
        .await;
        assert!(
            !tokio::task::spawn_blocking(move || plane.etcd_serves_revision(at - 1))
                .await
                .unwrap(),
            "etcd still serves revision {} after compacting at {at}",
            at - 1
        );
        assert!(
            watch_expired(&h, &before).await,
            "a watch from resourceVersion {before} was not answered 410 Gone"
        );
        assert!(f.relists > 0, "the operator never relisted: {f:?}");
        report(
            &format!("etcd compacted at {at} + API server restart (round {round})"),
            &f,
        );
    }
}

/// A priority level with a single seat that rejects instead of queueing, and a FlowSchema
/// that puts the operator's slice writes and a flooder's LISTs of ConfigMaps in it (names
/// carry the namespace: both are cluster-scoped).
async fn throttle(h: &Harness, flooder: &str) -> (String, String) {
    let level = format!("{}-throttled", h.ns);
    let plc: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": level},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"},
        }},
    }))
    .unwrap();
    Api::<PriorityLevelConfiguration>::all(h.client.clone())
        .create(&PostParams::default(), &plc)
        .await
        .unwrap();
    let account = |name: &str| json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": h.ns, "name": name}});
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": level},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": 500,
            "rules": [
                {"subjects": [account("portmapper")], "resourceRules": [{
                    "verbs": ["create", "update", "patch", "delete"],
                    "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "namespaces": [h.ns],
                }]},
                {"subjects": [account(flooder)], "resourceRules": [{
                    "verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"],
                    "namespaces": [h.ns],
                }]},
            ],
        },
    }))
    .unwrap();
    Api::<FlowSchema>::all(h.client.clone())
        .create(&PostParams::default(), &schema)
        .await
        .unwrap();
    (level.clone(), level)
}

/// Holds the throttled level's one seat: LISTs asking for a resourceVersion far ahead, which
/// the watch cache holds for up to 3 s each before answering 504, from two tasks. One holds the
/// seat while the other's LISTs are rejected at once and sent again a millisecond later, so the
/// seat is taken again as soon as it is let go: with a single task, the moment between one 504
/// and the next LIST left it free, and on a loaded machine an operator write now and then got
/// through.
fn flood(mut config: Config, ns: &str, running: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    // None held back by the client: kube's default retries (each 504 after waiting its
    // `Retry-After`) would leave the seat free a quarter of the time.
    config.default_retry = false;
    let api: Api<ConfigMap> = Api::namespaced(Client::try_from(config).unwrap(), ns);
    let one = |api: Api<ConfigMap>, running: Arc<AtomicBool>| async move {
        let mut sent = 0;
        let params = ListParams {
            resource_version: Some("999999999".into()),
            version_match: Some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        };
        while running.load(Ordering::Relaxed) {
            // Answered 504 (`Too large resource version`) after 3 s when it held the seat, 429
            // at once when the other task did.
            if api.list(&params).await.is_err_and(|e| is_status(&e, 429)) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sent += 1;
        }
        sent
    };
    let (a, b) = (
        tokio::spawn(one(api.clone(), running.clone())),
        tokio::spawn(one(api, running)),
    );
    tokio::spawn(async move { a.await.unwrap() + b.await.unwrap() })
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The API server's in-flight limits cut from 400 + 200 to 20 + 10 seats: the throttled level
/// (1 share of 246) gets exactly one, and every built-in level keeps at least one. (At 1 + 1
/// the built-in levels may lend their only seat and be left with none: a ServiceAccount's LIST
/// then waits in the queue until the next 10 s rebalancing, measured 8 s, instead of being
/// served or rejected.)
const TINY: &[&str] = &[
    "--max-requests-inflight=20",
    "--max-mutating-requests-inflight=10",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_fairness_429s_are_backed_off_and_lose_nothing() {
    let (plane, _one) = plane().await;
    let normal = plane.state().components["kube-apiserver"].args.clone();
    for round in 1..=rounds() {
        let name = format!("apf-{round}");
        let (h, observer) = world(plane, &name, 43).await;
        let (flooder, _) = service_account(&h, "flooder").await;
        let (level, schema) = throttle(&h, "flooder").await;
        let window = Duration::from_secs(
            u64::try_from(env_count("PORTMAPPER_BACKOFF_SECONDS", 10)).unwrap(),
        );
        let mut floods = 0;
        let f = around(&h, &observer, &name, 43, async {
            plane.kill9("kube-apiserver");
            plane.start_component_with("kube-apiserver", &plane.args_with("kube-apiserver", TINY));
            api_answers(&h).await;
            let running = Arc::new(AtomicBool::new(true));
            let flooding = flood(flooder, &h.ns, running.clone());
            let from = Timestamp::now();
            tokio::time::sleep(window).await;
            running.store(false, Ordering::Relaxed);
            // The throttle ends when the last flood LIST has let go of the seat.
            floods = flooding.await.unwrap();
            let to = Timestamp::now();
            let agent = Harness::operator_user_agent();
            let throttled = attempts(&h.requests().await, &agent, &name, from, to);
            let rejected = h
                .requests()
                .await
                .iter()
                .filter(|r| r.user_agent == agent && r.code == 429 && r.at >= from && r.at <= to)
                .count();
            println!("{name}: {window:?} throttled: operator writes {throttled:?}, {rejected} answered 429");
            assert!(rejected > 0, "priority and fairness rejected nothing: {throttled:?}");
            // The ladder's passes (each 429 names `Retry-After: 1`, no longer than the ladder's
            // steps), each one probe after the first: no object twice within a second, and
            // at most one request a second over the window.
            let most = most_requests(window);
            assert_eq!(throttled.busiest_second, 1, "{throttled:?}");
            assert!(
                throttled.all() <= most,
                "{} write requests in {window:?} (≤ {most}): {throttled:?}",
                throttled.all()
            );
            assert!(most <= at_most_one_per_second(window));
            assert_eq!(throttled.slices_through, 0, "a slice write got through: {throttled:?}");
            to
        })
        .await;
        report(
            &format!("priority and fairness 429s (round {round}, {floods} flood LISTs)"),
            &f,
        );
        Api::<FlowSchema>::all(h.client.clone())
            .delete(&schema, &DeleteParams::default())
            .await
            .unwrap();
        Api::<PriorityLevelConfiguration>::all(h.client.clone())
            .delete(&level, &DeleteParams::default())
            .await
            .unwrap();
        plane.kill9("kube-apiserver");
        plane.start_component_with("kube-apiserver", &normal);
        api_answers(&h).await;
    }
}

/// Writes other than the Lease's by identity (User-Agent), in log order.
fn object_writes(requests: &[Request]) -> Vec<&Request> {
    requests
        .iter()
        .filter(|r| {
            r.is_write() && r.resource != "leases" && r.user_agent.starts_with(OPERATOR_USER_AGENT)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_under_a_leader_and_its_standby_has_one_writer() {
    let (plane, _one) = plane().await;
    for round in 1..=rounds() {
        let name = format!("leader-{round}");
        let h = Harness::new_on(plane).await;
        let (_, kubeconfig) = service_account(&h, "portmapper").await;
        churn::pool(&h, &name, 44, churn::PODS).await;
        let election = [
            "--leader-elect=true",
            "--lease-duration-seconds",
            "4",
            "--lease-grace-seconds",
            "1",
        ];
        let a = Operator::start_as(&h, &format!("{name}-a"), &election, &kubeconfig);
        let b = Operator::start_as(&h, &format!("{name}-b"), &election, &kubeconfig);
        churn::published(&h, &name, churn::PODS, Duration::from_secs(30)).await;
        let observer = Observer::start(&h, &churn::must_serve(&name)).await;
        let f = around(&h, &observer, &name, 44, async {
            plane.kill9("kube-apiserver");
            // Down past the Lease (4 s): the leader's deadline passes while it cannot renew.
            tokio::time::sleep(Duration::from_secs(6)).await;
            plane.start_component("kube-apiserver");
            api_answers(&h).await
        })
        .await;
        let requests = h.requests().await;
        let writes = object_writes(&requests);
        let mut runs: Vec<(String, usize)> = Vec::new();
        for r in &writes {
            match runs.last_mut() {
                Some((ua, n)) if *ua == r.user_agent => *n += 1,
                _ => runs.push((r.user_agent.clone(), 1)),
            }
        }
        // Writes by an identity after another identity wrote: a deposed leader's.
        let mut seen = std::collections::BTreeSet::new();
        let deposed: usize = runs
            .iter()
            .filter(|(ua, _)| !seen.insert(ua.clone()))
            .map(|(_, n)| n)
            .sum();
        report(
            &format!("API server restart under a leader and a standby (round {round})"),
            &f,
        );
        println!("writers in order: {runs:?}; writes by a deposed leader: {deposed}");
        assert_eq!(
            deposed,
            0,
            "a deposed leader wrote: {runs:?}\n{}\n{}",
            a.log_text(),
            b.log_text()
        );
    }
}
