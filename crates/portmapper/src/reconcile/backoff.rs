//! Per-PortMapping retry backoff after failed reconciles (issue 11 item 10).
//!
//! kube-runtime's Controller requeues a failed object after whatever `error_policy` returns, but
//! any watch event for it (a pod flip, our own status write, a slice MODIFIED) schedules it again
//! at once, so a PortMapping whose writes keep failing was retried at the event rate. As
//! client-go's workqueue rate limiter does, every PortMapping has its own failure count and a
//! window (`not_before`); a reconcile that starts inside the window writes nothing and only
//! requeues itself for the window's end, so the events of the window only mark the PortMapping
//! dirty and the pass at its end carries them all.
//!
//! While the count is above zero, a pass is a probe ([`Backoffs::failing`], `execute.rs`): its
//! writes go one at a time and it stops at its first failure, as the native EndpointSlice
//! controller's sync returns at its first error, so a window costs one failed request, not one
//! per object that differs.
//!
//! Only a pass whose writes all went through forgets the count (`reconcile/mod.rs`): a pass
//! with nothing to write, or only the PortMapping's status, proves nothing about the writes that
//! failed, and forgetting there restarted the ladder from its bottom whenever the churn happened
//! to return to what was published. A count is also
//! forgotten once the PortMapping has gone [`Policy::forget_after`] past its last window without
//! failing again.
//!
//! The delay depends on what failed:
//! - **transient** (409 conflict, 5xx, 404, transport): `1 s · 2^(n-1)`, capped at 4 s: windows
//!   of 1 s, 2 s, 4 s, 4 s, … (client-go's `DefaultControllerRateLimiter` starts at 5 ms, whose
//!   bottom made ten attempts in the first 2.6 s under churn, and eight windows of the one-second
//!   minimum before it climbed). The cap bounds how long a Service stays stale after the API
//!   recovers (the target: converged ≤ 5 s after a fault ends) while holding a
//!   persistently failing PortMapping to one attempt every 3–4 s;
//! - **throttled** (429, or a 5xx naming a wait, e.g. 503 + `Retry-After`): the transient
//!   delay, but never less than the server's `retryAfterSeconds` (clamped to 60 s, so a hostile
//!   value cannot park a PortMapping);
//! - **permanent** (401, 403, 400, 422, an object we cannot encode): retrying soon cannot help
//!   (RBAC or admission must change first), so `10 s · 2^(n-1)`, capped at 5 minutes.
//!
//! A pass whose writes fail in several ways backs off as its most severe failure (a 403 beside
//! a 409 is not retried at the 409's rate; see [`Class::of`]).
//!
//! The exponent counts consecutive failures of the same class: a PortMapping that was throttled
//! and then hits a forbidden write starts the permanent ladder from its first step.
//!
//! One exception: a denial (401, 403) right after transient failures of the same PortMapping
//! (the API server was unreachable, and answers again) is retried once at the transient
//! ladder's next step. A restarted kube-apiserver answers 403 to every request until its
//! authorizer's cache has synced (about a second): on the permanent ladder that one denial
//! held the PortMapping 7.5–10 s after the server was back. A second denial in a row climbs
//! the permanent ladder.
//!
//! Jitter takes up to a quarter off each delay (never adds to it), so PortMappings that failed
//! together spread out and the caps stay upper bounds. A floor (the server's `Retry-After`, the
//! one-second minimum) is never shortened: up to a quarter of it is added instead.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use tokio::time::Instant;

use crate::runtime::error::Error;

pub use crate::runtime::error::Class;

/// The ladder a class climbs (a class change restarts it).
fn ladder(class: Class) -> Ladder {
    match class {
        Class::Transient | Class::Throttled { .. } => Ladder::Transient,
        Class::Permanent => Ladder::Permanent,
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ladder {
    Transient,
    Permanent,
}

/// The delays of each class.
#[derive(Clone, Debug)]
pub struct Policy {
    /// First delay after a transient failure.
    pub transient_base: Duration,
    /// Longest delay after transient failures.
    pub transient_cap: Duration,
    /// First delay after a permanent failure.
    pub permanent_base: Duration,
    /// Longest delay after permanent failures.
    pub permanent_cap: Duration,
    /// Longest `Retry-After` honoured.
    pub retry_after_cap: Duration,
    /// Shortest window after any failure: at most one attempt a second, whatever the churn.
    pub min_retry: Duration,
    /// A failure this long after the previous window ended starts its ladder over.
    pub forget_after: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            transient_base: Duration::from_secs(1),
            transient_cap: Duration::from_secs(4),
            permanent_base: Duration::from_secs(10),
            permanent_cap: Duration::from_secs(300),
            retry_after_cap: Duration::from_secs(60),
            min_retry: Duration::from_secs(1),
            forget_after: Duration::from_secs(60),
        }
    }
}

impl Policy {
    /// The window after the `n`th consecutive failure (1-based) of `class`, before jitter: the
    /// ladder's step, but never below the floor.
    pub fn delay(&self, class: Class, n: u32) -> Duration {
        self.step(class, n).max(self.floor(class))
    }

    /// The shortest the `n`th window of `class` can be once jittered (see [`Backoffs::failed`]):
    /// the step less a quarter, but never below the floor.
    pub fn shortest(&self, class: Class, n: u32) -> Duration {
        (self.step(class, n) * 3 / 4).max(self.floor(class))
    }

    /// The most passes that can start within `span` (the first included) while every pass of
    /// a PortMapping fails with `class`: one at the end of each window, each as short as its
    /// jitter allows. With the probe (one failed request per pass) it bounds the requests.
    pub fn most_attempts(&self, class: Class, span: Duration) -> usize {
        let (mut at, mut n, mut attempts) = (Duration::ZERO, 1, 1);
        loop {
            at += self.shortest(class, n);
            if at > span {
                return attempts;
            }
            attempts += 1;
            n += 1;
        }
    }

    /// The ladder's step for the `n`th consecutive failure of `class`.
    fn step(&self, class: Class, n: u32) -> Duration {
        let ladder = |base: Duration, cap: Duration| {
            // 2^(n-1) without overflow: 2^31 × 1 s is already far past any cap.
            let factor = 1u32 << n.saturating_sub(1).min(31);
            base.saturating_mul(factor).min(cap)
        };
        match class {
            Class::Transient | Class::Throttled { .. } => {
                ladder(self.transient_base, self.transient_cap)
            }
            Class::Permanent => ladder(self.permanent_base, self.permanent_cap),
        }
    }

    /// The shortest window after a failure of `class`: [`Policy::min_retry`], or the server's
    /// wait (up to its cap) when longer.
    fn floor(&self, class: Class) -> Duration {
        match class {
            Class::Throttled {
                retry_after: Some(wait),
            } => wait.min(self.retry_after_cap).max(self.min_retry),
            _ => self.min_retry,
        }
    }
}

/// What [`Backoffs::failed`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Wait this long before the next attempt (jitter applied).
    pub delay: Duration,
    /// Consecutive failures on the current ladder, this one included.
    pub failures: u32,
    /// The error differs from the previous failure's (or there was none): worth a warning.
    /// Repeats of one error are logged at debug level only.
    pub changed: bool,
}

#[derive(Debug)]
struct Entry {
    /// The PortMapping's `metadata.generation` at the failure: a new spec is tried at once.
    generation: Option<i64>,
    ladder: Ladder,
    /// The last failure's class (its step and floor open a held window again).
    class: Class,
    failures: u32,
    not_before: Instant,
    /// The previous error, to log once per change.
    last_error: String,
    /// A denial of this failing stretch was already retried at the transient pace.
    graced: bool,
}

/// The failure counts and windows of every PortMapping (shared by all reconciles).
#[derive(Debug, Default)]
pub struct Backoffs {
    policy: Policy,
    entries: Mutex<HashMap<ObjectRef<PortMapping>, Entry>>,
    random: RandomState,
    draws: AtomicU64,
}

impl Backoffs {
    /// Backoffs following `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<PortMapping>, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `pm` (at `generation`) must still wait before a reconcile may write (None: it
    /// may now). A spec changed since the failure is tried at once: the change may be the fix
    /// (a 422 waits up to 5 minutes otherwise), and spec changes are made by people, not loops.
    pub fn remaining(
        &self,
        pm: &ObjectRef<PortMapping>,
        generation: Option<i64>,
        now: Instant,
    ) -> Option<Duration> {
        let entries = self.entries();
        let entry = entries.get(pm)?;
        if entry.generation != generation {
            return None;
        }
        let left = entry.not_before.checked_duration_since(now)?;
        (!left.is_zero()).then_some(left)
    }

    /// Whether `pm` has failed since its last success: its next pass is a probe.
    pub fn failing(&self, pm: &ObjectRef<PortMapping>) -> bool {
        self.entries().get(pm).is_some_and(|e| e.failures > 0)
    }

    /// Records a failed reconcile of `pm` and opens its next window; `None` when the error is
    /// not a failure of the object (see [`Class::of`]).
    pub fn failed(
        &self,
        pm: &ObjectRef<PortMapping>,
        generation: Option<i64>,
        err: &Error,
        now: Instant,
    ) -> Option<Failure> {
        let class = Class::of(err)?;
        let message = err.to_string();
        let mut entries = self.entries();
        let entry = entries.entry(pm.clone()).or_insert_with(|| Entry {
            generation,
            ladder: ladder(class),
            class,
            failures: 0,
            not_before: now,
            last_error: String::new(),
            graced: false,
        });
        let stale = now.saturating_duration_since(entry.not_before) > self.policy.forget_after;
        let class = if class == Class::Permanent
            && Class::denied(err)
            && entry.ladder == Ladder::Transient
            && entry.failures > 0
            && !stale
            && !entry.graced
        {
            // The server was just unreachable: see the module doc.
            entry.graced = true;
            Class::Transient
        } else {
            class
        };
        if stale {
            entry.graced = false;
        }
        if entry.ladder != ladder(class) || stale {
            entry.ladder = ladder(class);
            entry.failures = 0;
        }
        entry.generation = generation;
        entry.class = class;
        entry.failures = entry.failures.saturating_add(1);
        let n = entry.failures;
        // Never sooner than the floor (the server's wait, the minimum); spread above it, so
        // PortMappings failing together do not all come back in the same instant.
        let floor = self.policy.floor(class);
        let delay = self
            .jittered(self.policy.step(class, n))
            .max(floor + self.spread(floor));
        entry.not_before = now + delay;
        let changed = entry.last_error != message;
        entry.last_error = message;
        Some(Failure {
            delay,
            failures: entry.failures,
            changed,
        })
    }

    /// Records a reconcile whose writes all went through: forgets the failures. Returns how
    /// many there were (so the recovery is logged once), None when there were none. (A pass
    /// that wrote nothing must not call this: it proves nothing about the server.)
    pub fn succeeded(&self, pm: &ObjectRef<PortMapping>) -> Option<u32> {
        self.entries().remove(pm).map(|e| e.failures)
    }

    /// Records a pass of a failing `pm` that wrote only its status, and that went through: it
    /// proves nothing about the writes that failed, so the failures are kept, and the window
    /// of the last failure opens again (its step, without climbing): otherwise the next event
    /// would retry them at once, and a churn that keeps returning to what is published would
    /// run a pass a second at the bottom of the ladder.
    pub fn held(&self, pm: &ObjectRef<PortMapping>, now: Instant) {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(pm) else {
            return;
        };
        let floor = self.policy.floor(entry.class);
        let delay = self
            .jittered(self.policy.step(entry.class, entry.failures))
            .max(floor + self.spread(floor));
        entry.not_before = entry.not_before.max(now + delay);
    }

    /// Forgets a deleted PortMapping.
    pub fn forget(&self, pm: &ObjectRef<PortMapping>) {
        self.entries().remove(pm);
    }

    /// Takes up to a quarter off `d`.
    fn jittered(&self, d: Duration) -> Duration {
        d.saturating_sub(self.spread(d))
    }

    /// A random duration below a quarter of `d`.
    fn spread(&self, d: Duration) -> Duration {
        let draw = self.draws.fetch_add(1, Ordering::Relaxed);
        let quarter = u64::try_from(d.as_micros() / 4).unwrap_or(u64::MAX);
        let micros = self
            .random
            .hash_one(draw)
            .checked_rem(quarter.max(1))
            .unwrap_or(0);
        Duration::from_micros(micros)
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;
    use kube::core::response::StatusDetails;

    use super::*;

    fn api_error(code: u16, reason: &str, retry_after: u32) -> Error {
        let mut status = Status::failure("injected", reason).with_code(code);
        if retry_after > 0 {
            status = status.with_details(StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: retry_after,
            });
        }
        Error::kube(
            "applying EndpointSlice ns/web.http",
            kube::Error::Api(status.boxed()),
        )
    }

    const G: Option<i64> = Some(1);

    fn pm() -> ObjectRef<PortMapping> {
        ObjectRef::new("web").within("ns")
    }

    #[test]
    fn errors_are_classified_by_what_retrying_can_achieve() {
        assert_eq!(
            Class::of(&api_error(409, "Conflict", 0)),
            Some(Class::Transient)
        );
        assert_eq!(
            Class::of(&api_error(500, "InternalError", 0)),
            Some(Class::Transient)
        );
        // A server error naming a wait is waited out; without one it stays transient.
        assert_eq!(
            Class::of(&api_error(503, "ServiceUnavailable", 1)),
            Some(Class::Throttled {
                retry_after: Some(Duration::from_secs(1))
            })
        );
        assert_eq!(
            Class::of(&api_error(504, "Timeout", 2)),
            Some(Class::Throttled {
                retry_after: Some(Duration::from_secs(2))
            })
        );
        assert_eq!(
            Class::of(&api_error(503, "ServiceUnavailable", 0)),
            Some(Class::Transient)
        );
        // A wait on a 409 or a 4xx other than 429 changes nothing.
        assert_eq!(
            Class::of(&api_error(409, "Conflict", 5)),
            Some(Class::Transient)
        );
        assert_eq!(
            Class::of(&api_error(403, "Forbidden", 5)),
            Some(Class::Permanent)
        );
        assert_eq!(
            Class::of(&api_error(429, "TooManyRequests", 3)),
            Some(Class::Throttled {
                retry_after: Some(Duration::from_secs(3))
            })
        );
        assert_eq!(
            Class::of(&api_error(429, "TooManyRequests", 0)),
            Some(Class::Throttled { retry_after: None })
        );
        for (code, reason) in [
            (403, "Forbidden"),
            (401, "Unauthorized"),
            (422, "Invalid"),
            (400, "BadRequest"),
        ] {
            assert_eq!(
                Class::of(&api_error(code, reason, 0)),
                Some(Class::Permanent),
                "{code}"
            );
        }
        assert_eq!(Class::of(&Error::NotLeader), None);
    }

    fn combined(errors: Vec<Error>) -> Error {
        Error::combine(errors).expect("two or more errors combine")
    }

    #[test]
    fn several_failures_back_off_as_the_most_severe() {
        let conflict = || api_error(409, "Conflict", 0);
        let forbidden = || api_error(403, "Forbidden", 0);
        // A 403 beside a 409, in either order, is permanent.
        for errors in [vec![conflict(), forbidden()], vec![forbidden(), conflict()]] {
            let err = combined(errors);
            assert_eq!(Class::of(&err), Some(Class::Permanent), "{err}");
        }
        // So its first window is the permanent ladder's 10 s (less up to a quarter), not the
        // transient ladder's 1 s.
        let b = Backoffs::default();
        let now = Instant::now();
        let f = b
            .failed(&pm(), G, &combined(vec![conflict(), forbidden()]), now)
            .unwrap();
        assert_eq!(f.failures, 1);
        assert!(
            f.delay >= Duration::from_millis(7500) && f.delay <= Duration::from_secs(10),
            "{:?}",
            f.delay
        );
        // A 429 beside a 409 is throttled, and keeps the server's wait.
        assert_eq!(
            Class::of(&combined(vec![
                conflict(),
                api_error(429, "TooManyRequests", 3)
            ])),
            Some(Class::Throttled {
                retry_after: Some(Duration::from_secs(3))
            })
        );
        // Of several waits, the longest; a 429 without one does not drop it.
        assert_eq!(
            Class::of(&combined(vec![
                api_error(429, "TooManyRequests", 0),
                api_error(503, "ServiceUnavailable", 5),
                api_error(429, "TooManyRequests", 3),
            ])),
            Some(Class::Throttled {
                retry_after: Some(Duration::from_secs(5))
            })
        );
        // A permanent failure outranks a throttle.
        assert_eq!(
            Class::of(&combined(vec![
                api_error(429, "TooManyRequests", 3),
                forbidden()
            ])),
            Some(Class::Permanent)
        );
        // `NotLeader` members are ignored, unless every member is one.
        assert_eq!(
            Class::of(&combined(vec![Error::NotLeader, conflict()])),
            Some(Class::Transient)
        );
        let not_leading = combined(vec![Error::NotLeader, Error::NotLeader]);
        assert_eq!(Class::of(&not_leading), None);
        assert_eq!(b.failed(&pm(), G, &not_leading, now), None);
    }

    #[test]
    fn transient_delays_double_from_one_second_to_the_cap() {
        let p = Policy::default();
        let delays: Vec<u128> = (1..=6)
            .map(|n| p.delay(Class::Transient, n).as_millis())
            .collect();
        assert_eq!(delays, [1000, 2000, 4000, 4000, 4000, 4000]);
        assert_eq!(p.delay(Class::Transient, u32::MAX), Duration::from_secs(4));
    }

    /// The bounds of the `n`th window of `class` once jittered: the ladder's step less up to a
    /// quarter, or the floor plus up to a quarter, whichever is later.
    fn window_bounds(class: Class, n: u32) -> (Duration, Duration) {
        let p = Policy::default();
        let (step, floor) = (p.step(class, n), p.floor(class));
        ((step * 3 / 4).max(floor), step.max(floor * 5 / 4))
    }

    #[test]
    fn throttling_honours_retry_after_up_to_its_cap() {
        let p = Policy::default();
        let ra = |s| Class::Throttled {
            retry_after: Some(Duration::from_secs(s)),
        };
        assert_eq!(p.delay(ra(1), 1), Duration::from_secs(1));
        // Past the server's value the ladder takes over, so a storm backs off further.
        assert_eq!(p.delay(ra(1), 12), Duration::from_secs(4));
        assert_eq!(p.delay(ra(30), 12), Duration::from_secs(30));
        assert_eq!(p.delay(ra(3600), 1), Duration::from_secs(60));
        assert_eq!(
            p.delay(Class::Throttled { retry_after: None }, 1),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn permanent_failures_are_not_retried_fast() {
        let p = Policy::default();
        assert_eq!(p.delay(Class::Permanent, 1), Duration::from_secs(10));
        assert_eq!(p.delay(Class::Permanent, 2), Duration::from_secs(20));
        assert_eq!(p.delay(Class::Permanent, 9), Duration::from_secs(300));
    }

    #[test]
    fn a_failure_opens_a_jittered_window_that_a_success_closes() {
        let b = Backoffs::default();
        let now = Instant::now();
        assert_eq!(b.remaining(&pm(), G, now), None);
        let mut last = None;
        for n in 1..=12 {
            let f = b
                .failed(&pm(), G, &api_error(500, "InternalError", 0), now)
                .unwrap();
            let (low, high) = window_bounds(Class::Transient, n);
            assert_eq!(f.failures, n);
            assert!(
                f.delay >= low && f.delay <= high,
                "{n}: {:?} not in {low:?}..={high:?}",
                f.delay
            );
            assert_eq!(b.remaining(&pm(), G, now), Some(f.delay));
            // Only the first of identical failures is worth a warning.
            assert_eq!(f.changed, n == 1);
            last = Some(f);
        }
        let last = last.unwrap();
        assert_eq!(b.remaining(&pm(), G, now + last.delay), None);
        assert_eq!(b.succeeded(&pm()), Some(12));
        assert_eq!(b.remaining(&pm(), G, now), None);
        assert_eq!(b.succeeded(&pm()), None);
        // After the success the ladder starts over, at the floor.
        let f = b
            .failed(&pm(), G, &api_error(500, "InternalError", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (1, true));
        let (low, high) = window_bounds(Class::Transient, 1);
        assert!(f.delay >= low && f.delay <= high, "{:?}", f.delay);
    }

    /// Issue 26 item 3: pods change every 50 ms for 20 s while every write fails; a pass runs at
    /// each change (as the watch events trigger them) and at each window's end (as the error
    /// policy requeues). Passes inside a window write nothing; a pass outside one either has
    /// nothing to write (the churn came back to what is published: it must not forget the
    /// failures) or writes and fails.
    #[test]
    fn under_churn_a_failing_portmapping_attempts_at_most_once_a_second() {
        let b = Backoffs::default();
        let start = Instant::now();
        let window = Duration::from_secs(20);
        let (mut attempts, mut at, mut draws) = (Vec::new(), Duration::ZERO, 0_u32);
        while at < window {
            let now = start + at;
            if b.remaining(&pm(), G, now).is_none() {
                draws += 1;
                // Every third pass finds nothing to write.
                if draws % 3 != 0 {
                    b.failed(&pm(), G, &api_error(500, "InternalError", 0), now);
                    attempts.push(at);
                }
            }
            at += Duration::from_millis(50);
        }
        let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| *g >= Duration::from_secs(1)),
            "attempts closer than 1 s: {attempts:?}"
        );
        // Windows of at least 1, 1.5, 3, 3, … s: 8 attempts in 20 s at most.
        let most = Policy::default().most_attempts(Class::Transient, window);
        assert_eq!(most, 8);
        assert!(
            attempts.len() <= most,
            "{} attempts in 20 s",
            attempts.len()
        );
        // The ladder climbed past its floor (passes with nothing to write did not reset it).
        assert!(
            gaps.iter().any(|g| *g >= Duration::from_secs(3)),
            "the ladder never climbed: {attempts:?}"
        );
    }

    #[test]
    fn the_most_attempts_follow_the_shortest_windows() {
        let p = Policy::default();
        let shortest: Vec<u128> = (1..=4)
            .map(|n| p.shortest(Class::Transient, n).as_millis())
            .collect();
        assert_eq!(shortest, [1000, 1500, 3000, 3000]);
        // At 0, 1, 2.5, 5.5, 8.5 s; then every 3 s.
        assert_eq!(
            p.most_attempts(Class::Transient, Duration::from_secs(10)),
            5
        );
        assert_eq!(
            p.most_attempts(Class::Transient, Duration::from_secs(60)),
            22
        );
        // A throttle naming 1 s waits at least that.
        let throttled = Class::Throttled {
            retry_after: Some(Duration::from_secs(1)),
        };
        assert_eq!(p.most_attempts(throttled, Duration::from_secs(10)), 5);
        // Every window drawn lies within the bounds this takes.
        let b = Backoffs::default();
        let now = Instant::now();
        for n in 1..=8 {
            let f = b
                .failed(&pm(), G, &api_error(500, "InternalError", 0), now)
                .unwrap();
            assert!(f.delay >= p.shortest(Class::Transient, n), "{n}: {f:?}");
        }
    }

    #[test]
    fn a_failure_long_after_the_last_window_starts_the_ladder_over() {
        let b = Backoffs::default();
        let now = Instant::now();
        let mut last = None;
        for _ in 0..10 {
            last = b.failed(&pm(), G, &api_error(500, "InternalError", 0), now);
        }
        let last = last.unwrap();
        assert_eq!(last.failures, 10);
        // Just inside `forget_after` past the window: the ladder climbs on.
        let soon = now + last.delay + Duration::from_secs(59);
        let f = b
            .failed(&pm(), G, &api_error(500, "InternalError", 0), soon)
            .unwrap();
        assert_eq!(f.failures, 11);
        let later = soon + f.delay + Duration::from_secs(61);
        let f = b
            .failed(&pm(), G, &api_error(500, "InternalError", 0), later)
            .unwrap();
        assert_eq!(f.failures, 1);
    }

    #[test]
    fn a_new_generation_is_tried_at_once_and_keeps_the_count() {
        let b = Backoffs::default();
        let now = Instant::now();
        let f = b
            .failed(&pm(), G, &api_error(422, "Invalid", 0), now)
            .unwrap();
        assert_eq!(b.remaining(&pm(), G, now), Some(f.delay));
        assert_eq!(b.remaining(&pm(), Some(2), now), None);
        // Failing again at the new generation climbs on, from the new generation's window.
        let f = b
            .failed(&pm(), Some(2), &api_error(422, "Invalid", 0), now)
            .unwrap();
        assert_eq!(f.failures, 2);
        assert_eq!(b.remaining(&pm(), Some(2), now), Some(f.delay));
    }

    #[test]
    fn a_throttled_window_is_never_shorter_than_the_servers_wait() {
        let b = Backoffs::default();
        let now = Instant::now();
        for n in 1..=12u32 {
            let f = b
                .failed(&pm(), G, &api_error(429, "TooManyRequests", 1), now)
                .unwrap();
            assert_eq!(f.failures, n);
            // The later of the server's 1 s (plus up to a quarter) and the ladder's step (less
            // up to a quarter): 1–1.25 s at first, the ladder's 4 s cap in the end.
            let full = Policy::default().delay(Class::Transient, n);
            let low = Duration::from_secs(1).max(full * 3 / 4);
            let high = Duration::from_millis(1250).max(full);
            assert!(
                f.delay >= low && f.delay <= high,
                "{n}: {:?} not in {low:?}..={high:?}",
                f.delay
            );
        }
    }

    #[test]
    fn a_503_naming_a_wait_is_not_retried_before_it() {
        let b = Backoffs::default();
        let now = Instant::now();
        // The server's 1 s (plus up to a quarter), then the ladder when it waits longer: at 0,
        // 1–1.25 s, 2.5–3.25 s, then 3–4 s later.
        let class = Class::Throttled {
            retry_after: Some(Duration::from_secs(1)),
        };
        let mut at = Duration::ZERO;
        let mut attempts = 0;
        while at < Duration::from_secs(5) {
            let f = b
                .failed(&pm(), G, &api_error(503, "ServiceUnavailable", 1), now + at)
                .unwrap();
            attempts += 1;
            let (low, high) = window_bounds(class, attempts);
            assert!(
                f.delay >= low && f.delay <= high,
                "attempt {attempts}: {:?} not in {low:?}..={high:?}",
                f.delay
            );
            assert!(f.delay >= Duration::from_secs(1), "{:?}", f.delay);
            assert_eq!(b.remaining(&pm(), G, now + at), Some(f.delay));
            at += f.delay;
        }
        assert_eq!(attempts, 3, "attempts in 5 s");
        // The same 503 without a wait is transient: the one-second floor, then the ladder.
        let other = ObjectRef::new("other").within("ns");
        let f = b
            .failed(&other, G, &api_error(503, "ServiceUnavailable", 0), now)
            .unwrap();
        let (low, high) = window_bounds(Class::Transient, 1);
        assert!(f.delay >= low && f.delay <= high, "{:?}", f.delay);
    }

    #[test]
    fn a_different_error_is_a_change_and_a_class_change_restarts_the_ladder() {
        let b = Backoffs::default();
        let now = Instant::now();
        for _ in 0..5 {
            b.failed(&pm(), G, &api_error(500, "InternalError", 0), now);
        }
        let f = b
            .failed(&pm(), G, &api_error(409, "Conflict", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (6, true));
        let f = b
            .failed(&pm(), G, &api_error(422, "Invalid", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (1, true));
        assert!(f.delay >= Duration::from_millis(7500), "{:?}", f.delay);
        let f = b
            .failed(&pm(), G, &api_error(422, "Invalid", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (2, false));
        // Another PortMapping is unaffected.
        let other = ObjectRef::new("other").within("ns");
        assert_eq!(b.remaining(&other, G, now), None);
        assert_eq!(b.failed(&pm(), G, &Error::NotLeader, now), None);
        b.forget(&pm());
        assert_eq!(b.remaining(&pm(), G, now), None);
    }
    /// A restarted kube-apiserver answers 403 until its authorizer's cache has synced: the
    /// first denial after transient failures (the server unreachable) is retried at the
    /// transient pace, not 7.5–10 s later; the next climbs the permanent ladder.
    #[test]
    fn a_denial_right_after_transient_failures_is_retried_at_the_transient_pace_once() {
        let b = Backoffs::default();
        let now = Instant::now();
        let forbidden = || api_error(403, "Forbidden", 0);
        b.failed(&pm(), G, &api_error(503, "ServiceUnavailable", 0), now);
        let f = b.failed(&pm(), G, &forbidden(), now).unwrap();
        let (low, high) = window_bounds(Class::Transient, 2);
        assert_eq!(f.failures, 2, "still on the transient ladder");
        assert!(f.delay >= low && f.delay <= high, "{:?}", f.delay);
        let f = b.failed(&pm(), G, &forbidden(), now).unwrap();
        assert_eq!(f.failures, 1, "the permanent ladder's first step");
        assert!(f.delay >= Duration::from_millis(7500), "{:?}", f.delay);
        // Once per failing stretch: back to transient, a denial is permanent at once.
        b.failed(&pm(), G, &api_error(500, "InternalError", 0), now);
        let f = b.failed(&pm(), G, &forbidden(), now).unwrap();
        assert!(f.delay >= Duration::from_millis(7500), "{:?}", f.delay);
        // Only a denial: an invalid object after transient failures is permanent at once.
        let other = ObjectRef::new("other").within("ns");
        b.failed(&other, G, &api_error(500, "InternalError", 0), now);
        let f = b
            .failed(&other, G, &api_error(422, "Invalid", 0), now)
            .unwrap();
        assert!(f.delay >= Duration::from_millis(7500), "{:?}", f.delay);
    }
}
