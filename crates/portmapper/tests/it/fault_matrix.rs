//! The rest of issue 11's fault matrix on the emulator while pods churn (`faults.rs` has 500,
//! 409, 403 and 429 on slice writes; `watches.rs` the reset storm and the stalled watch):
//! 503, the AlreadyExists race, watch drops (clean, abrupt, mid-line), watch 410, 300 ms of
//! latency, and API-server restarts with and without history. Each case uses `faults.rs`'s
//! world (pod a stays Ready throughout, so the observer fails on any blackout), churns for
//! [`WINDOW`] under the fault (pod c becomes Ready, pod b flips every 250 ms), counts the
//! operator's requests meanwhile from the emulator's request log, removes the fault, and
//! requires convergence within the 5 s plus the observer's invariants.
//!
//! Rounds of every timed case: `PORTMAPPER_MATRIX_ROUNDS` (1 by default, 3 in `make soak`).

use std::time::Duration;

use kube_emulator::History;
use kube_emulator::faults::{DropMode, FaultAction, Rule};
use tokio::time::Instant;

use crate::faults::{churn, operator_writes, wait_members_within, world};
use crate::harness::*;
use crate::observer::Observer;
use crate::procs::env_count;

/// How long each fault lasts while pods churn.
const WINDOW: Duration = Duration::from_secs(5);
/// Issue 11's target for convergence after a fault is removed.
const TARGET: Duration = Duration::from_secs(5);

/// The operator's requests since `from`, by kind.
#[derive(Debug, Default)]
struct Counts {
    watches: usize,
    lists: usize,
    slice_writes: usize,
    all: usize,
}

fn counts(h: &Harness, name: &str, from: Duration) -> Counts {
    let mine = h
        .emu()
        .requests()
        .filter(|r| r.since_start >= from && r.user_agent.starts_with(OPERATOR_USER_AGENT));
    Counts {
        watches: mine.iter().filter(|r| r.verb == "watch").count(),
        lists: mine.iter().filter(|r| r.verb == "list").count(),
        slice_writes: operator_writes(h, name, from, "slices").len(),
        all: mine.len(),
    }
}

/// Bound for convergence after watch resets end. The per-watch re-watch backoff
/// (`WatchBackoff`, 1 s doubling to 3 s, plus up to 25 % jitter) is not cut short when the
/// resets stop, so the first watch that can make progress opens up to one step (≤ 3.75 s) after
/// the fault ends, then relists; the target is 5 s, this leaves 2 s over it. Asserted in
/// `make soak`; `make test` asserts the correctness bound (`procs::bound`).
const AFTER_WATCH_RESETS: Duration = Duration::from_secs(7);

/// Waits for a, b and c published and Ready within `bound`; checks the observer.
async fn converged(
    h: &Harness,
    observer: &Observer,
    name: &str,
    case: &str,
    from: Instant,
    bound: Duration,
) {
    wait_members_within(h, name, &["a", "b", "c"], TARGET + Duration::from_secs(10)).await;
    let took = from.elapsed();
    // A wait, not a figure: the status follows the publication.
    eventually("Ready again", TARGET + Duration::from_secs(10), || async {
        is_ready(h, name).await.then_some(())
    })
    .await;
    let versions = observer.assert_held();
    observer.assert_final_state_is_the_plan(name).await;
    println!(
        "{case}: converged {took:?} after the fault ended; {versions} slice versions, no \
         blackout, no lasting duplicate"
    );
    // Correctness bound in `make test` (the target in `make soak`): see `procs::bound`.
    let bound = crate::procs::bound(bound, Duration::from_secs(12));
    assert!(
        took <= bound,
        "{case}: converged {took:?} after the fault (bound {bound:?})"
    );
}

/// Rounds of every timed case, each in a fresh world: `PORTMAPPER_MATRIX_ROUNDS` (1 in
/// `make test`; `make soak` runs `MATRIX_ROUNDS`).
fn rounds() -> usize {
    env_count("PORTMAPPER_MATRIX_ROUNDS", 1)
}

/// [`under_once`] for every round, with `check` on each round's request counts and firings.
async fn under(name: &str, case: &str, rule: Rule, check: impl Fn(&Counts, u64)) {
    let rounds = rounds();
    for round in 1..=rounds {
        let case = format!("{case} (round {round}/{rounds})");
        let (c, fired) = under_once(name, &case, rule.clone()).await;
        check(&c, fired);
    }
}

/// `rule` (restricted to the operator's requests) for [`WINDOW`] while pods churn; returns the
/// request counts and how often it fired, after removing it and checking convergence.
async fn under_once(name: &str, case: &str, mut rule: Rule) -> (Counts, u64) {
    let (h, observer) = world(name).await;
    let on_watches = rule.matcher.watch == Some(true);
    let bound = if matches!(rule.action, FaultAction::WatchDrop { .. }) {
        AFTER_WATCH_RESETS
    } else {
        TARGET
    };
    rule.matcher.user_agent = Some(OPERATOR_USER_AGENT.into());
    let from = h.emu().requests().elapsed();
    let id = h.emu().inject(rule);
    if on_watches {
        // Rules apply to watches opened after them, and the operator's are long-lived: a 1 ms
        // blip (state and history kept) closes every connection, so each watch is re-opened
        // under the rule.
        h.emu()
            .restart(Duration::from_millis(1), History::Keep)
            .await;
    }
    let seen = churn(&h, name, WINDOW, "").await;
    let c = counts(&h, name, from);
    let fired = h.emu().faults().fired(&id).unwrap_or(0);
    assert!(h.emu().faults().remove(&id));
    let ended = Instant::now();
    println!(
        "{case}: {WINDOW:?} with {} pod flips: fired {fired}, operator requests {} ({} watches, \
         {} lists, {} slice writes)",
        seen.flips, c.all, c.watches, c.lists, c.slice_writes
    );
    converged(&h, &observer, name, case, ended, bound).await;
    (c, fired)
}

fn watches(action: FaultAction) -> Rule {
    Rule::new(action).watch(true)
}

/// 503 with `Retry-After: 1` on the slice writes. The server names a wait, so the
/// PortMapping's backoff waits it out as a 429's (`backoff.rs`, unit test
/// `a_503_naming_a_wait_is_not_retried_before_it`): at most one attempt per 1–1.25 s, ≤ 6 in
/// the 5 s (the transient ladder alone made 10–11), and the client does not retry it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slice_writes_answered_503_with_retry_after_are_spaced_and_converge() {
    let rule = crate::faults::on_slice_writes(
        FaultAction::Status {
            code: 503,
            reason: None,
            message: None,
            retry_after_seconds: Some(1),
        },
        "unavail",
    );
    under("unavail", "503 + Retry-After", rule, |c, fired| {
        every_slice_write_met_the_503(c, fired, 6);
    })
    .await;
}

/// Every slice write of the window met the 503, and there were 1 to `most` of them.
fn every_slice_write_met_the_503(c: &Counts, fired: u64, most: usize) {
    assert_eq!(
        fired as usize, c.slice_writes,
        "every slice write met the 503"
    );
    assert!(
        (1..=most).contains(&c.slice_writes),
        "{} slice writes in {WINDOW:?} (≤ {most})",
        c.slice_writes
    );
}

/// 503 naming no wait (`Retry-After: 0`; the emulator adds `Retry-After: 1` to a 503 that names
/// none, as an API server shedding load does): the client may retry it twice within ~60 ms
/// (`ShortRetry`), then the PortMapping's transient ladder backs off: ≤ 3 attempts per pass,
/// about 11 passes in 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slice_writes_answered_503_without_retry_after_back_off_and_converge() {
    let rule = crate::faults::on_slice_writes(
        FaultAction::Status {
            code: 503,
            reason: None,
            message: None,
            retry_after_seconds: Some(0),
        },
        "unavail-bare",
    );
    under(
        "unavail-bare",
        "503 without Retry-After",
        rule,
        |c, fired| {
            every_slice_write_met_the_503(c, fired, 40);
        },
    )
    .await;
}

/// The AlreadyExists race (the object created just before a POST is handled) on every create
/// the operator sends. A slice's POST is answered 409: a failed write, and the retry, planned
/// from the cache that by then shows the raced slice (the very object the POST carried), finds
/// nothing to write. The race meets the operator's Event POSTs too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_already_exists_race_costs_one_failed_create_and_no_retry_storm() {
    let (h, observer) = world("race").await;
    let mut rule = Rule::new(FaultAction::AlreadyExistsRace).verbs(&["create"]);
    rule.matcher.user_agent = Some(OPERATOR_USER_AGENT.into());
    let id = h.emu().inject(rule);
    let from = h.emu().requests().elapsed();
    h.create(service("race-2", &[("http", 8080)])).await;
    ready_pods(&h, "race-2", &[("race-2-a", "http", "10.244.3.1")]).await;
    h.create(portmapping("race-2", "race-2")).await;
    eventually("race-2 published", TARGET, || async {
        (h.membership("race-2").await.get("race-2.http")? == &["race-2-a"]).then_some(())
    })
    .await;
    let slice_writes = || {
        h.emu().requests().filter(|r| {
            r.since_start >= from
                && r.resource == "endpointslices"
                && matches!(r.verb.as_str(), "create" | "update" | "patch")
                && r.user_agent.starts_with(OPERATOR_USER_AGENT)
        })
    };
    eventually("the race met the slice's POST", TARGET, || async {
        slice_writes().iter().any(|r| r.status == 409).then_some(())
    })
    .await;
    // Settled: whatever retry the backoff sends has gone out by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = slice_writes();
    println!(
        "AlreadyExists race on the slice: {:?}",
        writes
            .iter()
            .map(|r| (r.verb.clone(), r.status))
            .collect::<Vec<_>>()
    );
    // One create, refused; the raced slice is ours as it stands, so the retry, after the
    // backoff, writes nothing (here, alone: exactly that) or, on a loaded machine, an update
    // of the raced slice if the plan moved meanwhile: no retry storm.
    let first = writes.first().map(|r| (r.verb.as_str(), r.status));
    assert_eq!(first, Some(("create", 409)), "{writes:?}");
    assert!(writes.len() <= 3, "{writes:?}");
    // The operator's POSTs are its Events: a `ports` entry naming no Service port makes it
    // send an `UnknownPort` Warning, and the race creates that Event first, so the POST gets
    // 409 AlreadyExists. The Event exists once, the race costs no retry storm, and the slice
    // stays published.
    let pms: kube::Api<portmapper_api::PortMapping> =
        kube::Api::namespaced(h.client.clone(), &h.ns);
    let from = h.emu().requests().elapsed();
    pms.patch(
        "race-2",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&serde_json::json!({"spec": {"ports": [
            {"name": "htttp", "checks": [{"podReady": {}}]}
        ]}})),
    )
    .await
    .unwrap();
    eventually("the UnknownPort Event", TARGET, || async {
        (!h.events("UnknownPort").await.is_empty()).then_some(())
    })
    .await;
    // The rule counts as fired when it takes the request, before the answer is logged: wait for
    // the logged answer itself.
    let event_posts = || {
        h.emu().requests().filter(|r| {
            r.since_start >= from
                && r.verb == "create"
                && r.resource == "events"
                && r.user_agent.starts_with(OPERATOR_USER_AGENT)
        })
    };
    eventually("the race met the Event's POST", TARGET, || async {
        event_posts().iter().any(|r| r.status == 409).then_some(())
    })
    .await;
    assert!(h.emu().faults().fired(&id).unwrap_or(0) > 0);
    let posts = event_posts();
    println!(
        "AlreadyExists race on the Event: {} POSTs ({:?}), {} UnknownPort Event(s)",
        posts.len(),
        posts.iter().map(|r| r.status).collect::<Vec<_>>(),
        h.events("UnknownPort").await.len()
    );
    assert!(
        posts.iter().any(|r| r.status == 409),
        "the POST met AlreadyExists: {posts:?}"
    );
    assert!(
        posts.len() <= 3,
        "{} Event POSTs after the race",
        posts.len()
    );
    assert_eq!(
        h.membership("race-2").await.get("race-2.http"),
        Some(&vec!["race-2-a".to_string()])
    );
    println!(
        "AlreadyExists race: fired {} times on the operator's POSTs; the new slice was applied",
        h.emu().faults().fired(&id).unwrap_or(0)
    );
    observer.assert_held();
    observer.assert_final_state_is_the_plan("race").await;
    observer.assert_final_state_is_the_plan("race-2").await;
}

async fn watch_drop(name: &str, mode: DropMode) {
    let rule = watches(FaultAction::WatchDrop {
        after_events: Some(1),
        after_ms: None,
        mode,
    });
    under(name, &format!("watch drop {mode:?}"), rule, |c, fired| {
        assert!(fired > 0, "no watch was dropped");
        // Re-watches are paced (issue 11 item 9: ≤ 60 in 20 s of resets, all watches).
        assert!(
            c.watches <= 60,
            "{} watch requests in {WINDOW:?}",
            c.watches
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_dropped_cleanly_are_resumed_and_converge() {
    watch_drop("drop-clean", DropMode::Clean).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_dropped_abruptly_are_resumed_and_converge() {
    watch_drop("drop-abrupt", DropMode::Abrupt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_dropped_mid_line_are_resumed_and_converge() {
    watch_drop("drop-midline", DropMode::MidLine).await;
}

/// 410 Gone on every watch after one event: every watch relists; the slice tracker (issue 11
/// item 7) keeps the plans from duplicating endpoints meanwhile (the observer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_expiring_with_410_relist_and_converge_without_duplicates() {
    let rule = watches(FaultAction::WatchGone { after_events: 1 });
    under("gone", "watch 410", rule, |c, fired| {
        assert!(fired > 0, "no watch met the 410");
        assert!(c.lists > 0, "no relist after 410");
        assert!(
            c.watches <= 60,
            "{} watch requests in {WINDOW:?}",
            c.watches
        );
    })
    .await;
}

/// 300 ms on every request of the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_ms_of_latency_on_every_request_converges() {
    let mut rule = Rule::new(FaultAction::Delay);
    rule.delay_ms = 300;
    under("slow", "300 ms latency", rule, |c, fired| {
        assert!(fired > 0, "no request was delayed");
        assert!(c.slice_writes > 0, "the churn wrote nothing under latency");
    })
    .await;
}

/// The API server restarts (1 s down, every connection closed), keeping or dropping its event
/// history, between pod churn before and after it (the test's own requests would fail while
/// it is down).
async fn restart(name: &str, history: History) {
    let rounds = rounds();
    for round in 1..=rounds {
        restart_once(
            name,
            history,
            &format!("API-server restart ({history:?} history, round {round}/{rounds})"),
        )
        .await;
    }
}

async fn restart_once(name: &str, history: History, case: &str) {
    let (h, observer) = world(name).await;
    let from = h.emu().requests().elapsed();
    let seen = churn(&h, name, Duration::from_secs(1), "").await;
    h.emu().restart(Duration::from_secs(1), history).await;
    // Changes after the restart: only a resumed (Keep) or relisted (Drop) watch sees them.
    let after = churn(&h, name, Duration::from_secs(2), "").await;
    let ended = Instant::now();
    let c = counts(&h, name, from);
    println!(
        "{case}: {} pod flips around it: operator requests {} ({} watches, {} lists, {} slice \
         writes)",
        seen.flips + after.flips,
        c.all,
        c.watches,
        c.lists,
        c.slice_writes
    );
    converged(&h, &observer, name, case, ended, TARGET).await;
    if history == History::Drop {
        assert!(c.lists > 0, "no relist after the history was dropped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_keeping_history_converges() {
    restart("restart-keep", History::Keep).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_dropping_history_converges() {
    restart("restart-drop", History::Drop).await;
}
