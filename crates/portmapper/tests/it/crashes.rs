//! Crash-restart (issue 11): the real `portmapper` binary is killed with SIGKILL at seeded
//! random points while pods churn (flips and deletions, some while it is down), then
//! restarted. After each restart: no orphan and no duplicate slice, the slices converge to the
//! pods' membership, and once converged the operator writes nothing (the API server's audit
//! log, by the process's User-Agent, across two further reconcile passes). It runs on the
//! real control plane.
//!
//! Rounds: `PORTMAPPER_CRASH_ROUNDS` (3 by default, 30 in `make soak`); choices from
//! `PORTMAPPER_SEED` (printed, so a failure replays).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use tokio::time::Instant;

use crate::harness::*;
use crate::observer::Observer;
use crate::procs::{Operator, Rng, env_count, seed};
use crate::requests::Request;

const SVC: &str = "crash";
const PODS: usize = 8;
/// Generous bound for convergence after a restart (the figures are printed).
const CONVERGE: Duration = Duration::from_secs(30);

fn pod_name(i: usize) -> String {
    format!("{SVC}-{i}")
}

fn ip(i: usize) -> String {
    format!("10.244.1.{}", i + 1)
}

/// Pod → Some(ready) while it exists.
type Pods = BTreeMap<usize, Option<bool>>;

/// One churn step on pods 1.. (pod 0 stays Ready): a readiness flip (4 in 5) or a deletion /
/// recreation.
async fn churn_step(h: &Harness, rng: &mut Rng, pods: &mut Pods) {
    let i = usize::try_from(rng.range(1, PODS as u64)).unwrap();
    let state = pods[&i];
    match (state, rng.range(0, 5)) {
        (None, _) => {
            h.create(pod(&pod_name(i), SVC, "http")).await;
            h.set_pod_status(&pod_name(i), &[&ip(i)], true).await;
            pods.insert(i, Some(true));
        }
        (Some(_), 0) => {
            h.delete_pod(&pod_name(i)).await;
            pods.insert(i, None);
        }
        (Some(ready), _) => {
            h.set_pod_status(&pod_name(i), &[&ip(i)], !ready).await;
            pods.insert(i, Some(!ready));
        }
    }
}

async fn churn_for(h: &Harness, rng: &mut Rng, pods: &mut Pods, d: Duration) -> usize {
    let started = Instant::now();
    let mut steps = 0;
    while started.elapsed() < d {
        churn_step(h, rng, pods).await;
        steps += 1;
        // Pacing the churn of the real process's inputs at random intervals.
        tokio::time::sleep(Duration::from_millis(rng.range(20, 120))).await;
    }
    steps
}

/// Ready pods, sorted by name (the expected membership of the one slice).
fn expected(pods: &Pods) -> Vec<String> {
    let mut v: Vec<String> = pods
        .iter()
        .filter(|(_, s)| **s == Some(true))
        .map(|(i, _)| pod_name(*i))
        .collect();
    v.sort();
    v
}

/// (name, uid) of the Ready pods as the API has them now: a pod deleted and recreated under
/// the same name is another endpoint (its targetRef uid changes), so names alone would call a
/// stale slice converged.
async fn ready_refs(h: &Harness, pods: &Pods) -> Vec<(String, String)> {
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    let want = expected(pods);
    let mut refs: Vec<(String, String)> = api
        .list(&kube::api::ListParams::default().labels(&format!("example.com/group={SVC}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| want.contains(&p.name_any()))
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    refs.sort();
    refs
}

/// (name, uid) of the endpoints of `crash.http`.
async fn published_refs(h: &Harness) -> Option<Vec<(String, String)>> {
    let slice = h
        .slices(SVC)
        .await
        .into_iter()
        .find(|s| s.name_any() == format!("{SVC}.http"))?;
    let mut refs: Vec<(String, String)> = slice
        .endpoints
        .iter()
        .filter_map(|e| {
            let t = e.target_ref.as_ref()?;
            Some((t.name.clone()?, t.uid.clone()?))
        })
        .collect();
    refs.sort();
    Some(refs)
}

/// The summary the status reports once it describes these pods (`http <ready>/<present>`).
fn expected_summary(pods: &Pods) -> String {
    let present = pods.values().filter(|s| s.is_some()).count();
    format!("http {}/{present}", expected(pods).len())
}

/// No orphan (every slice of ours is `crash.http`, of this Service, controlled by the live
/// PortMapping) and no duplicate (an address at most once).
async fn assert_no_orphan_or_duplicate(h: &Harness, round: usize) {
    let pm_uid = h.portmapping(SVC).await.uid().unwrap();
    let api: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(h.client.clone(), &h.ns);
    let ours = api
        .list(&kube::api::ListParams::default().labels(portmapper::controller::MANAGED_BY_SELECTOR))
        .await
        .unwrap()
        .items;
    let names: Vec<String> = ours.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, vec![format!("{SVC}.http")], "round {round}: slices");
    let mut seen = BTreeSet::new();
    for s in &ours {
        let owners = s.owner_references();
        assert!(
            owners
                .iter()
                .any(|o| o.uid == pm_uid && o.controller == Some(true)),
            "round {round}: {} not controlled by the PortMapping: {owners:?}",
            s.name_any()
        );
        for e in &s.endpoints {
            for a in &e.addresses {
                assert!(seen.insert(a.clone()), "round {round}: {a} twice");
            }
        }
    }
}

/// The writes of the process with `user_agent`, in log order.
async fn writes_by(h: &Harness, user_agent: &str) -> Vec<Request> {
    h.requests()
        .await
        .into_iter()
        .filter(|r| r.is_write() && r.user_agent == user_agent)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_during_churn_restarts_cleanly() {
    let rounds = env_count("PORTMAPPER_CRASH_ROUNDS", 3);
    let seed = seed(0x11_c4a5);
    println!("crash-restart: {rounds} rounds, PORTMAPPER_SEED={seed}");
    // Kill points from their own stream: the churn draws a timing-dependent number of values,
    // and the kill points must not depend on it.
    let mut kills = Rng::new(seed);
    let mut rng = Rng::new(seed ^ 0x5eed_c4a5);
    let h = Harness::new().await;
    h.create(service(SVC, &[("http", 8080)])).await;
    let mut pods: Pods = BTreeMap::new();
    for i in 0..PODS {
        h.create(pod(&pod_name(i), SVC, "http")).await;
        h.set_pod_status(&pod_name(i), &[&ip(i)], true).await;
        pods.insert(i, Some(true));
    }
    h.create(portmapping(SVC, SVC)).await;
    // Pod 0 is left alone by the churn, so the port must never go dark, crashes included
    // (the slices outlive the process).
    let observer = Observer::start(&h, &[(SVC, "http")]).await;

    let mut op = Operator::start(&h, "crash-0", &["--leader-elect=false"]);
    let mut converge_figures = Vec::new();
    for round in 1..=rounds {
        // Kill somewhere in the first 2.5 s: during start-up, the initial lists, a write, or
        // steady state.
        let kill_after = Duration::from_millis(kills.range(0, 2_500));
        let steps = churn_for(&h, &mut rng, &mut pods, kill_after).await;
        op.kill9();
        let writes_before = writes_by(&h, &op.user_agent).await.len();
        // Changes while no operator runs: only a relist after the restart sees them.
        let down_steps = kills.range(0, 4);
        for _ in 0..down_steps {
            churn_step(&h, &mut rng, &mut pods).await;
        }
        op = Operator::start(&h, &format!("crash-{round}"), &["--leader-elect=false"]);
        let started = Instant::now();
        let want = ready_refs(&h, &pods).await;
        let summary = expected_summary(&pods);
        eventually(
            &format!("round {round}: {SVC}.http = {want:?} and status {summary:?}"),
            CONVERGE,
            || async {
                let ok = published_refs(&h).await.as_ref() == Some(&want);
                let pm = h.portmapping(SVC).await;
                let reported = pm.status.and_then(|s| s.summary);
                (ok && reported.as_deref() == Some(summary.as_str())).then_some(())
            },
        )
        .await;
        let took = started.elapsed();
        converge_figures.push(took);
        assert_no_orphan_or_duplicate(&h, round).await;
        observer.assert_final_state_is_the_plan(SVC).await;

        // Zero writes once converged: two complete reconcile passes (1 s resync) later, the
        // restarted process has written nothing more.
        let writes = writes_by(&h, &op.user_agent).await.len();
        let passes = eventually("metrics", CONVERGE, || op.reconciles()).await;
        eventually("two more reconciles", CONVERGE, || async {
            (op.reconciles().await? >= passes + 2.0).then_some(())
        })
        .await;
        let late = writes_by(&h, &op.user_agent).await.split_off(writes);
        assert!(
            late.is_empty(),
            "round {round}: writes after convergence: {late:#?}\n{}",
            op.log_text()
        );
        println!(
            "round {round}: killed after {kill_after:?} ({steps} churn steps, {writes_before} \
             writes by that process), {down_steps} changes while down, \
             converged {took:?} after the restart to {} ready pods, {writes} writes by the new \
             process, 0 after convergence",
            want.len()
        );
    }
    let versions = observer.assert_held();
    let max = converge_figures.iter().max().copied().unwrap_or_default();
    println!(
        "crash-restart: {rounds} kill -9 restarts survived, {versions} slice versions observed, no \
         blackout, no lasting duplicate, slowest convergence {max:?}"
    );
}
