//! Scheduling, damping, initial membership and cancellation, on tokio's paused clock with a scripted
//! executor (no sockets: the paused clock would fire real I/O timeouts early).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portmapper_api::ProbeSettings;
use portmapper_probe::metrics::OutcomeLabels;
use portmapper_probe::{
    Cause, MappingKey, Membership, NoMetrics, Outcome, ProbeEvents, ProbeExecutor, ProbeFuture,
    ProbeResult, Prober, ProberConfig, PrometheusProbeMetrics, Target,
};
use tokio::time::Instant;

use crate::support::*;

/// Answers from a per-pod (or per `pod/port`) script; the last entry repeats. `Hang` never
/// answers.
#[derive(Default)]
pub(crate) struct Scripted {
    scripts: Mutex<HashMap<String, Vec<Step>>>,
    pub(crate) calls: Mutex<Vec<(String, Instant)>>,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) max_in_flight: AtomicUsize,
    dropped_in_flight: AtomicUsize,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    Answer(Outcome),
    /// Takes this long, then includes.
    Slow(Duration),
    Hang,
}

impl Scripted {
    pub(crate) fn script(&self, pod: &str, steps: &[Step]) {
        self.scripts
            .lock()
            .unwrap()
            .insert(pod.into(), steps.to_vec());
    }

    pub(crate) fn calls(&self, pod: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == pod)
            .count()
    }

    fn first_calls(&self) -> HashMap<String, Instant> {
        let mut first = HashMap::new();
        for (pod, at) in self.calls.lock().unwrap().iter() {
            first.entry(pod.clone()).or_insert(*at);
        }
        first
    }

    /// The next step of a target: from its `pod/port` script when there is one, else from its
    /// pod's.
    fn next(&self, target: &Target) -> Step {
        let mut scripts = self.scripts.lock().unwrap();
        let by_port = format!("{}/{}", target.pod.name, target.port.name);
        let key = if scripts.contains_key(&by_port) {
            by_port
        } else {
            target.pod.name.clone()
        };
        let script = scripts.get_mut(&key).expect("scripted pod");
        if script.len() > 1 {
            script.remove(0)
        } else {
            script[0]
        }
    }
}

/// Counts a probe in flight until dropped (finished or cancelled).
struct InFlight<'a>(&'a Scripted, bool);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.1 {
            self.0.dropped_in_flight.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl ProbeExecutor for Scripted {
    fn probe<'a>(&'a self, _mapping: &'a MappingKey, target: &'a Target) -> ProbeFuture<'a> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap()
                .push((target.pod.name.clone(), Instant::now()));
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let mut guard = InFlight(self, false);
            let outcome = match self.next(target) {
                Step::Answer(outcome) => outcome,
                Step::Slow(d) => {
                    tokio::time::sleep(d).await;
                    Outcome::Include
                }
                Step::Hang => std::future::pending().await,
            };
            guard.1 = true;
            let cause = match outcome {
                Outcome::Include => Cause::Healthy,
                Outcome::Exclude => Cause::Status,
                Outcome::Abstain => Cause::NoRoute,
            };
            ProbeResult::new(outcome, cause, format!("scripted {outcome}"))
        })
    }
}

/// A prober whose only bound is `concurrency` (the fair shares are as large): the fair
/// scheduler's own tests are in `fairness.rs`.
fn prober(exec: &Arc<Scripted>, concurrency: usize, start_jitter: bool) -> (Prober, ProbeEvents) {
    Prober::new(
        ProberConfig {
            concurrency,
            concurrency_per_namespace: Some(concurrency),
            concurrency_per_mapping: Some(concurrency),
            start_jitter,
        },
        exec.clone(),
        Arc::new(NoMetrics),
    )
    .unwrap()
}

pub(crate) fn pod_target(pod: &str, initial: Membership, success: i32, failure: i32) -> Target {
    let mut t = target("10.244.1.5:8080".parse().unwrap(), http_get("/"));
    std::sync::Arc::make_mut(&mut t.pod).name = pod.into();
    std::sync::Arc::make_mut(&mut t.pod).uid = format!("uid-{pod}");
    t.initial_membership = initial;
    t.settings = ProbeSettings {
        period_seconds: 10,
        timeout_seconds: 1,
        success_threshold: success,
        failure_threshold: failure,
    };
    t
}

fn membership(prober: &Prober, t: &Target) -> Membership {
    prober.result(&mapping(), &t.key()).unwrap().membership
}

/// Lets every runnable task run, without moving the paused clock.
pub(crate) async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Lets the paused clock run for `d` plus 1 ms (timers round deadlines up to the next
/// millisecond). With no I/O pending, tokio jumps straight to each due timer, so every probe
/// runs at its exact scheduled instant.
pub(crate) async fn advance(d: Duration) {
    tokio::time::sleep(d + Duration::from_millis(1)).await;
    settle().await;
}

const PERIOD: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn included_target_flips_after_failure_threshold_and_notifies_once() {
    let exec = Arc::new(Scripted::default());
    exec.script("a", &[Step::Answer(Outcome::Exclude)]);
    let (prober, mut events) = prober(&exec, 4, false);
    let t = pod_target("a", Membership::Included, 1, 3);
    prober.set_targets(&mapping(), [t.clone()]);
    settle().await;
    assert_eq!(exec.calls("a"), 1);
    assert_eq!(membership(&prober, &t), Membership::Included);
    advance(PERIOD).await;
    assert_eq!(exec.calls("a"), 2);
    assert_eq!(membership(&prober, &t), Membership::Included);
    assert!(events.try_recv().is_err(), "no flip yet");
    advance(PERIOD).await;
    assert_eq!(exec.calls("a"), 3);
    let result = prober.result(&mapping(), &t.key()).unwrap();
    assert_eq!(result.membership, Membership::Excluded);
    assert_eq!(result.reason, "scripted exclude");
    assert_eq!(events.try_recv().unwrap(), mapping());
    // Further identical results change nothing and notify nothing.
    advance(PERIOD * 3).await;
    assert_eq!(exec.calls("a"), 6);
    assert!(events.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn initially_included_healthy_target_never_notifies() {
    let exec = Arc::new(Scripted::default());
    exec.script("a", &[Step::Answer(Outcome::Include)]);
    let (prober, mut events) = prober(&exec, 4, false);
    let t = pod_target("a", Membership::Included, 1, 3);
    prober.set_targets(&mapping(), [t.clone()]);
    let before = prober.result(&mapping(), &t.key()).unwrap();
    assert_eq!(
        before.membership,
        Membership::Included,
        "included before any probe"
    );
    assert_eq!(before.probes, 0);
    advance(PERIOD * 5).await;
    assert_eq!(exec.calls("a"), 6);
    assert_eq!(membership(&prober, &t), Membership::Included);
    assert!(
        events.try_recv().is_err(),
        "a restart that confirms the slice must not notify"
    );
}

#[tokio::test(start_paused = true)]
async fn excluded_target_is_included_after_success_threshold() {
    let exec = Arc::new(Scripted::default());
    exec.script(
        "a",
        &[
            Step::Answer(Outcome::Include),
            Step::Answer(Outcome::Exclude),
            Step::Answer(Outcome::Include),
            Step::Answer(Outcome::Include),
        ],
    );
    let (prober, mut events) = prober(&exec, 4, false);
    let t = pod_target("a", Membership::Excluded, 2, 3);
    prober.set_targets(&mapping(), [t.clone()]);
    settle().await;
    advance(PERIOD).await;
    advance(PERIOD).await;
    assert_eq!(exec.calls("a"), 3);
    assert_eq!(membership(&prober, &t), Membership::Excluded);
    assert!(events.try_recv().is_err());
    advance(PERIOD).await;
    assert_eq!(membership(&prober, &t), Membership::Included);
    assert_eq!(events.try_recv().unwrap(), mapping());
}

#[tokio::test(start_paused = true)]
async fn abstain_holds_membership() {
    let exec = Arc::new(Scripted::default());
    exec.script("in", &[Step::Answer(Outcome::Abstain)]);
    exec.script("out", &[Step::Answer(Outcome::Abstain)]);
    let (prober, mut events) = prober(&exec, 4, false);
    let included = pod_target("in", Membership::Included, 1, 1);
    let excluded = pod_target("out", Membership::Excluded, 1, 1);
    prober.set_targets(&mapping(), [included.clone(), excluded.clone()]);
    advance(PERIOD * 10).await;
    assert_eq!(exec.calls("in"), 11);
    assert_eq!(membership(&prober, &included), Membership::Included);
    assert_eq!(membership(&prober, &excluded), Membership::Excluded);
    let last = prober
        .result(&mapping(), &included.key())
        .unwrap()
        .last
        .unwrap();
    assert_eq!(last.outcome, Outcome::Abstain);
    assert!(events.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn unchanged_targets_keep_schedule_and_streaks_across_set_targets() {
    let exec = Arc::new(Scripted::default());
    exec.script("a", &[Step::Answer(Outcome::Exclude)]);
    exec.script("b", &[Step::Answer(Outcome::Include)]);
    let (prober, mut events) = prober(&exec, 4, false);
    let a = pod_target("a", Membership::Included, 1, 3);
    prober.set_targets(&mapping(), [a.clone()]);
    advance(PERIOD).await;
    assert_eq!(prober.result(&mapping(), &a.key()).unwrap().failures, 2);

    // The next reconcile lists `a` again (with a new check timeout and a stale initial membership) and a new
    // target `b`. `a` keeps its streak and is not probed again out of turn.
    let mut a2 = a.clone();
    a2.settings.timeout_seconds = 5;
    a2.initial_membership = Membership::Excluded;
    let b = pod_target("b", Membership::Excluded, 1, 3);
    advance(Duration::from_secs(3)).await;
    prober.set_targets(&mapping(), [a2.clone(), b.clone()]);
    settle().await;
    assert_eq!(exec.calls("a"), 2, "schedule kept");
    assert_eq!(exec.calls("b"), 1, "new target probed at once");
    let state = prober.result(&mapping(), &a.key()).unwrap();
    assert_eq!(
        (state.membership, state.failures),
        (Membership::Included, 2)
    );
    advance(Duration::from_secs(7)).await;
    assert_eq!(exec.calls("a"), 3);
    assert_eq!(membership(&prober, &a), Membership::Excluded);
    // Two flips (b included, a excluded), one event each.
    assert_eq!(events.try_recv().unwrap(), mapping());
    assert_eq!(events.try_recv().unwrap(), mapping());
    assert!(events.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn removed_targets_are_cancelled_in_flight_and_forgotten() {
    let exec = Arc::new(Scripted::default());
    exec.script("hangs", &[Step::Hang]);
    exec.script("stays", &[Step::Answer(Outcome::Include)]);
    let (prober, _events) = prober(&exec, 4, false);
    let hangs = pod_target("hangs", Membership::Included, 1, 3);
    let stays = pod_target("stays", Membership::Included, 1, 3);
    prober.set_targets(&mapping(), [hangs.clone(), stays.clone()]);
    settle().await;
    assert_eq!(exec.in_flight.load(Ordering::SeqCst), 1);
    prober.set_targets(&mapping(), [stays.clone()]);
    settle().await;
    assert_eq!(exec.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(
        exec.dropped_in_flight.load(Ordering::SeqCst),
        1,
        "in-flight probe cancelled"
    );
    assert!(prober.result(&mapping(), &hangs.key()).is_none());
    advance(PERIOD * 3).await;
    assert_eq!(exec.calls("hangs"), 1, "no probe after removal");
    assert_eq!(exec.calls("stays"), 4);

    prober.remove_mapping(&mapping());
    assert!(prober.mapping_keys().is_empty());
    assert!(prober.results(&mapping()).is_empty());
    advance(PERIOD * 3).await;
    assert_eq!(exec.calls("stays"), 4);
}

#[tokio::test(start_paused = true)]
async fn recreated_pod_starts_from_its_new_initial_membership() {
    let exec = Arc::new(Scripted::default());
    exec.script("a", &[Step::Answer(Outcome::Exclude)]);
    let (prober, _events) = prober(&exec, 4, false);
    let old = pod_target("a", Membership::Included, 1, 1);
    prober.set_targets(&mapping(), [old.clone()]);
    settle().await;
    assert_eq!(membership(&prober, &old), Membership::Excluded);
    let mut new = old.clone();
    std::sync::Arc::make_mut(&mut new.pod).uid = "uid-a-2".into();
    new.initial_membership = Membership::Included;
    exec.script("a", &[Step::Hang]);
    prober.set_targets(&mapping(), [new.clone()]);
    settle().await;
    assert!(prober.result(&mapping(), &old.key()).is_none());
    assert_eq!(membership(&prober, &new), Membership::Included);
}

#[tokio::test(start_paused = true)]
async fn concurrency_bound_is_global() {
    let exec = Arc::new(Scripted::default());
    for i in 0..10 {
        exec.script(&format!("p{i}"), &[Step::Slow(Duration::from_millis(500))]);
    }
    let (prober, _events) = prober(&exec, 3, false);
    let targets: Vec<Target> = (0..10)
        .map(|i| pod_target(&format!("p{i}"), Membership::Excluded, 1, 3))
        .collect();
    prober.set_targets(&mapping(), targets[..5].to_vec());
    prober.set_targets(&MappingKey::new("shop", "other"), targets[5..].to_vec());
    settle().await;
    assert_eq!(exec.in_flight.load(Ordering::SeqCst), 3);
    // Ten half-second probes, three at a time: four waves.
    advance(Duration::from_millis(1900)).await;
    let probed: usize = (0..10).map(|i| exec.calls(&format!("p{i}"))).sum();
    assert_eq!(probed, 10);
    assert_eq!(exec.max_in_flight.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn start_jitter_spreads_initially_included_targets_over_one_period() {
    let exec = Arc::new(Scripted::default());
    let targets: Vec<Target> = (0..50)
        .map(|i| {
            exec.script(&format!("p{i}"), &[Step::Answer(Outcome::Include)]);
            pod_target(&format!("p{i}"), Membership::Included, 1, 3)
        })
        .collect();
    let (prober, _events) = prober(&exec, 64, true);
    let start = Instant::now();
    prober.set_targets(&mapping(), targets);
    advance(PERIOD).await;
    let first: Vec<Duration> = exec.first_calls().values().map(|t| *t - start).collect();
    assert_eq!(
        first.len(),
        50,
        "every target probed within the first period"
    );
    assert!(
        first
            .iter()
            .all(|d| *d <= PERIOD + Duration::from_millis(1))
    );
    let early = first.iter().filter(|d| **d < PERIOD / 2).count();
    assert!(
        (10..=40).contains(&early),
        "{early} of 50 in the first half: not spread"
    );
}

#[tokio::test(start_paused = true)]
async fn a_changed_period_restarts_the_schedule_but_keeps_membership() {
    let exec = Arc::new(Scripted::default());
    exec.script("a", &[Step::Answer(Outcome::Exclude)]);
    let (prober, _events) = prober(&exec, 4, false);
    let a = pod_target("a", Membership::Included, 1, 5);
    prober.set_targets(&mapping(), [a.clone()]);
    settle().await;
    let mut faster = a.clone();
    faster.settings.period_seconds = 2;
    prober.set_targets(&mapping(), [faster]);
    settle().await;
    advance(Duration::from_secs(2)).await;
    advance(Duration::from_secs(2)).await;
    // 1 probe at t=0, then the new schedule: t=0 (restart), 2, 4.
    assert_eq!(exec.calls("a"), 4);
    let state = prober.result(&mapping(), &a.key()).unwrap();
    assert_eq!(
        (state.membership, state.failures),
        (Membership::Included, 4)
    );
    advance(Duration::from_secs(2)).await;
    assert_eq!(membership(&prober, &a), Membership::Excluded);
}

#[tokio::test(start_paused = true)]
async fn every_finished_probe_is_counted_by_outcome_and_cause() {
    let exec = Arc::new(Scripted::default());
    exec.script(
        "a",
        &[
            Step::Answer(Outcome::Include),
            Step::Answer(Outcome::Exclude),
            Step::Answer(Outcome::Abstain),
            Step::Hang,
        ],
    );
    let metrics = Arc::new(PrometheusProbeMetrics::default());
    let (prober, _events) = Prober::new(
        ProberConfig {
            concurrency: 4,
            start_jitter: false,
            ..ProberConfig::default()
        },
        exec.clone(),
        metrics.clone(),
    )
    .unwrap();
    prober.set_targets(&mapping(), [pod_target("a", Membership::Included, 1, 3)]);
    advance(PERIOD * 3).await;
    let count = |outcome: &'static str, cause: &'static str| {
        metrics.count(&OutcomeLabels {
            check: "httpGet",
            outcome,
            cause,
        })
    };
    assert_eq!(count("include", "healthy"), 1);
    assert_eq!(count("exclude", "status"), 1);
    assert_eq!(count("abstain", "noRoute"), 1);
    // The hanging fourth probe is cut by the prober's guard after timeout + grace: a timeout.
    advance(Duration::from_secs(2)).await;
    assert_eq!(count("exclude", "timeout"), 1);
}

#[tokio::test(start_paused = true)]
async fn two_ports_of_one_pod_keep_separate_streaks() {
    let exec = Arc::new(Scripted::default());
    exec.script("a/http", &[Step::Answer(Outcome::Exclude)]);
    exec.script(
        "a/https",
        &[
            Step::Answer(Outcome::Exclude),
            Step::Answer(Outcome::Exclude),
            Step::Answer(Outcome::Include),
        ],
    );
    let (prober, mut events) = prober(&exec, 4, false);
    let mut http = pod_target("a", Membership::Included, 1, 3);
    http.port.name = "http".into();
    let mut https = http.clone();
    https.port.name = "https".into();
    https.port.port = 8443;
    assert_ne!(http.key(), https.key());
    prober.set_targets(&mapping(), [http.clone(), https.clone()]);
    settle().await;
    advance(PERIOD).await;
    assert_eq!(exec.calls("a"), 4, "two probes of each port");
    let streaks = |t: &Target| {
        let r = prober.result(&mapping(), &t.key()).unwrap();
        (r.membership, r.successes, r.failures, r.probes)
    };
    // One shared streak would have counted four failures and excluded both.
    assert_eq!(streaks(&http), (Membership::Included, 0, 2, 2));
    assert_eq!(streaks(&https), (Membership::Included, 0, 2, 2));
    assert!(events.try_recv().is_err());
    advance(PERIOD).await;
    assert_eq!(streaks(&http), (Membership::Excluded, 0, 3, 3));
    assert_eq!(
        streaks(&https),
        (Membership::Included, 1, 0, 3),
        "https's success reset its own streak only"
    );
    assert_eq!(prober.results(&mapping()).len(), 2);
    assert_eq!(events.try_recv().unwrap(), mapping());
    assert!(events.try_recv().is_err(), "one flip, one event");
}

#[tokio::test(start_paused = true)]
async fn thresholds_below_one_act_as_one() {
    let exec = Arc::new(Scripted::default());
    exec.script(
        "a",
        &[
            Step::Answer(Outcome::Exclude),
            Step::Answer(Outcome::Include),
        ],
    );
    let (prober, mut events) = prober(&exec, 4, false);
    let t = pod_target("a", Membership::Included, 0, -1);
    prober.set_targets(&mapping(), [t.clone()]);
    assert_eq!(
        membership(&prober, &t),
        Membership::Included,
        "the initial membership holds until a result"
    );
    settle().await;
    assert_eq!(exec.calls("a"), 1);
    assert_eq!(membership(&prober, &t), Membership::Excluded);
    assert_eq!(events.try_recv().unwrap(), mapping());
    advance(PERIOD).await;
    assert_eq!(exec.calls("a"), 2);
    assert_eq!(membership(&prober, &t), Membership::Included);
    assert_eq!(events.try_recv().unwrap(), mapping());
}
