//! Backoff that holds under churn (issue 26 item 3): persistent 500s or 409s on one
//! PortMapping's writes while its pods change 20 times a second (Ready flips and
//! port-annotation edits on random pods, [`crate::churn`]). The operator runs through its
//! production client; the fault rules match only its requests. Every write it attempts is
//! counted from the emulator's request log: at most [`most_requests`] in the window (the
//! ladder's passes: the first tries every object that differs, each later one is a probe of
//! one write, plus the status when it is news), no object attempted and failed twice within a
//! second, no blackout, and the slices hold the churn's final membership within 5 s of the
//! errors ending.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube_emulator::faults::{FaultAction, Rule};
use portmapper::reconcile::backoff::{Class, Policy};

use crate::churn::{self, Churn};
use crate::faults::on_slice_writes;
use crate::harness::*;
use crate::log_capture;
use crate::observer::Observer;
use crate::procs::{bound, env_count, seed};
use crate::requests::Request;

/// The target: converged within 5 s of the errors ending.
pub const CONVERGE: Duration = Duration::from_secs(5);

/// The operator's write attempts in a span of time, by what they wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    pub slices: usize,
    pub status: usize,
    pub events: usize,
    pub other: usize,
    /// Slice attempts the server answered with a 2xx.
    pub slices_through: usize,
    /// Attempts on each object written (slice name, `status`, or `events`).
    pub per_object: BTreeMap<String, usize>,
    /// The most attempts on one object within any one second.
    pub busiest_second: usize,
    /// The most failed attempts on one object within any one second.
    pub busiest_failed_second: usize,
}

impl Attempts {
    pub fn all(&self) -> usize {
        self.slices + self.status + self.events + self.other
    }
}

/// The writes whose User-Agent starts with `agent` answered in `[from, to]`, sorted by what
/// PortMapping `name` wrote.
pub fn attempts(
    requests: &[Request],
    agent: &str,
    name: &str,
    from: Timestamp,
    to: Timestamp,
) -> Attempts {
    let mut a = Attempts::default();
    // Per object: when each attempt was answered, and whether it failed.
    let mut times: BTreeMap<String, Vec<(Timestamp, bool)>> = BTreeMap::new();
    let slices = format!("{name}.");
    for r in requests
        .iter()
        .filter(|r| r.is_write() && r.user_agent.starts_with(agent) && r.at >= from && r.at <= to)
    {
        let object = if r.resource == "endpointslices" && r.name.starts_with(&slices) {
            a.slices += 1;
            a.slices_through += usize::from(r.succeeded());
            r.name.clone()
        } else if r.resource == "portmappings" && r.subresource == "status" {
            a.status += 1;
            "status".into()
        } else if r.resource == "events" {
            a.events += 1;
            "events".into()
        } else {
            a.other += 1;
            continue;
        };
        times
            .entry(object)
            .or_default()
            .push((r.at, !r.succeeded()));
    }
    for (object, mut at) in times {
        at.sort();
        a.per_object.insert(object, at.len());
        let all: Vec<Timestamp> = at.iter().map(|(t, _)| *t).collect();
        let failed: Vec<Timestamp> = at.iter().filter(|(_, f)| *f).map(|(t, _)| *t).collect();
        a.busiest_second = a.busiest_second.max(busiest_second(&all));
        a.busiest_failed_second = a.busiest_failed_second.max(busiest_second(&failed));
    }
    a
}

/// The most of `times` (sorted) within any one second.
fn busiest_second(times: &[Timestamp]) -> usize {
    let second = SignedDuration::from_secs(1);
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| t.duration_since(times[i]) < second)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Seconds of each fault: `PORTMAPPER_BACKOFF_SECONDS` (10 in `make test`, 60 in `make soak`).
fn window() -> Duration {
    Duration::from_secs(u64::try_from(env_count("PORTMAPPER_BACKOFF_SECONDS", 10)).unwrap())
}

/// The most write attempts a PortMapping may make on one object in `window` of persistent
/// errors: one a second, plus the first.
pub fn at_most_one_per_second(window: Duration) -> usize {
    usize::try_from(window.as_secs()).unwrap() + 1
}

/// The most write requests a PortMapping of one Service with two ports (two slices) may make
/// in `window` of persistent transient errors: at most [`Policy::most_attempts`] passes; the
/// first tries both slices and the status; every later one is a probe (one failed write) or a
/// status-only pass, and may add the status when it is news (the writes fail again after a
/// pass that found the slices as published and said so).
pub fn most_requests(window: Duration) -> usize {
    let passes = Policy::default().most_attempts(Class::Transient, window);
    3 + 2 * (passes - 1)
}

/// Which writes of the operator a fault meets.
#[derive(Clone, Copy)]
enum Meets {
    /// The slice writes of the PortMapping: its status reports go through.
    SliceWrites,
    /// Every write of the operator: slices, status, Events.
    EveryWrite,
}

/// `action` on the writes `meets` names for [`window`] while a pool of `pods` churns at 20
/// changes a second; then the fault and the churn end together.
async fn persistent_under_churn(
    name: &str,
    octet: u8,
    pods: usize,
    meets: Meets,
    action: FaultAction,
) {
    log_capture::install();
    let mut h = Harness::emulator().await;
    churn::pool(&h, name, octet, pods).await;
    h.run_operator_with(|_| {});
    churn::published(&h, name, pods, Duration::from_secs(15)).await;
    let observer = Observer::start(&h, &churn::must_serve(name)).await;
    let window = window();

    let from = Timestamp::now();
    let rule = match meets {
        Meets::SliceWrites => on_slice_writes(action, name),
        Meets::EveryWrite => {
            let mut rule = Rule::new(action).verbs(&["create", "update", "patch", "delete"]);
            rule.matcher.user_agent = Some(OPERATOR_USER_AGENT.into());
            rule
        }
    };
    let rule = h.emu().inject(rule);
    let churn = Churn::start(&h, name, octet, pods, churn::EVERY, seed(26));
    tokio::time::sleep(window).await;
    let (churned, members) = churn.stop(name).await;
    let fired = h.emu().faults().fired(&rule).unwrap_or(0);
    assert!(h.emu().faults().remove(&rule));
    let ended = Timestamp::now();
    let agent = Harness::operator_user_agent();
    let during = attempts(&h.requests().await, &agent, name, from, ended);
    let took = churn::converged(&h, &members, CONVERGE + Duration::from_secs(10)).await;
    let per_second = during.all() as f64 / window.as_secs_f64();
    println!(
        "{name}: {window:?} of the fault, {} pod changes ({} refused): operator write attempts \
         {during:?} = {} ({per_second:.2}/s), fault fired {fired}; converged {took:?} after \
         it ended",
        churned.changes,
        churned.refused,
        during.all()
    );
    observer.assert_held();
    observer.assert_final_state_is_the_plan(name).await;
    assert_eq!(
        during.slices_through, 0,
        "a slice write got through the fault"
    );
    assert!(during.slices > 0, "no slice write met the fault");
    // The ladder's passes (1, 1.5, 3, 3, … s apart at the shortest), each one probe after the
    // first: the requests follow, and stay within one a second over the window.
    let most = most_requests(window);
    assert!(
        during.all() <= most,
        "{} write requests in {window:?} (≤ {most}): {during:?}",
        during.all()
    );
    assert!(most <= at_most_one_per_second(window), "{most}");
    let passes = Policy::default().most_attempts(Class::Transient, window);
    assert!(
        during.slices <= passes + 1,
        "{} slice attempts in {window:?} (≤ {} passes, two slices in the first): {during:?}",
        during.slices,
        passes
    );
    assert_eq!(
        during.busiest_failed_second, 1,
        "an object failed twice within a second: {during:?}"
    );
    match meets {
        // Every attempt failed: no object was written twice within a second.
        Meets::EveryWrite => assert_eq!(during.busiest_second, 1, "{during:?}"),
        // The status report of a pass that found nothing to publish (the churn came back to
        // what is published) may precede the next failed attempt by less.
        Meets::SliceWrites => assert!(during.busiest_second <= 2, "{during:?}"),
    }
    assert_eq!(during.other, 0, "{during:?}");
    // Correctness bound (the 5 s target in `make soak`): the ladder's cap is 4 s, so a
    // PortMapping waiting past 12 s was held by something other than its last window.
    let bound = bound(CONVERGE, Duration::from_secs(12));
    assert!(
        took <= bound,
        "converged {took:?} after the errors ended (bound {bound:?})"
    );
}

fn internal_error() -> FaultAction {
    FaultAction::Status {
        code: 500,
        reason: None,
        message: None,
        retry_after_seconds: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_500s_on_slice_writes_under_churn_fail_each_slice_at_most_once_a_second() {
    let (pods, meets) = (churn::PODS, Meets::SliceWrites);
    persistent_under_churn("churn-500", 30, pods, meets, internal_error()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_409s_on_slice_writes_under_churn_fail_each_slice_at_most_once_a_second() {
    let (pods, meets) = (churn::PODS, Meets::SliceWrites);
    persistent_under_churn("churn-409", 31, pods, meets, FaultAction::ConflictStatus).await;
}

/// One pod changing 20 times a second keeps coming back to what is published: every pass that
/// found nothing to write forgot the failures, and the ladder restarted from 5 ms (22 attempts
/// on one slice in 10 s, 11 within one second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_500s_while_one_pod_flips_back_and_forth_fail_each_slice_at_most_once_a_second()
{
    persistent_under_churn("churn-one", 32, 1, Meets::SliceWrites, internal_error()).await;
}

/// The case, every write of the operator failing (its status and Events too): no
/// object is written twice within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_500s_on_every_write_under_churn_write_each_object_at_most_once_a_second() {
    persistent_under_churn("churn-all", 33, 1, Meets::EveryWrite, internal_error()).await;
}
