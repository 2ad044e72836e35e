//! Per-PortMapping retry backoff after failed reconciles (issue 11 item 10).
//!
//! kube-runtime's Controller requeues a failed object after whatever `error_policy` returns, but
//! any watch event for it (a pod flip, our own status write, a slice MODIFIED) schedules it again
//! at once, so a PortMapping whose writes keep failing was retried at the event rate. As
//! client-go's workqueue rate limiter does, every PortMapping has its own failure count and a
//! window (`not_before`); a reconcile that starts inside the window writes nothing and only
//! requeues itself for the window's end. A successful reconcile forgets the count.
//!
//! The delay depends on what failed:
//! - **transient** (409 conflict, 5xx, 404, transport): `5 ms · 2^(n-1)`, as client-go's
//!   `DefaultControllerRateLimiter`, but capped at 4 s instead of 1000 s. The cap bounds how
//!   long a Service stays stale after the API recovers (the target: converged ≤ 5 s
//!   after a fault ends) while holding a persistently failing PortMapping to one attempt every
//!   3–4 s (≤ 16 in 20 s, with the ladder's first ten attempts inside the first 4 s);
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
//! Jitter takes up to a quarter off each delay (never adds to it), so PortMappings that failed
//! together spread out and the caps stay upper bounds. A server's `Retry-After` is never
//! shortened: up to a quarter of it is added instead.

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
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            transient_base: Duration::from_millis(5),
            transient_cap: Duration::from_secs(4),
            permanent_base: Duration::from_secs(10),
            permanent_cap: Duration::from_secs(300),
            retry_after_cap: Duration::from_secs(60),
        }
    }
}

impl Policy {
    /// The window after the `n`th consecutive failure (1-based) of `class`, before jitter.
    pub fn delay(&self, class: Class, n: u32) -> Duration {
        let ladder = |base: Duration, cap: Duration| {
            // 2^(n-1) without overflow: 2^31 × 5 ms is already far past any cap.
            let factor = 1u32 << n.saturating_sub(1).min(31);
            base.saturating_mul(factor).min(cap)
        };
        match class {
            Class::Transient => ladder(self.transient_base, self.transient_cap),
            Class::Throttled { retry_after } => {
                let exponential = ladder(self.transient_base, self.transient_cap);
                retry_after.map_or(exponential, |ra| {
                    exponential.max(ra.min(self.retry_after_cap))
                })
            }
            Class::Permanent => ladder(self.permanent_base, self.permanent_cap),
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
    failures: u32,
    not_before: Instant,
    /// The previous error, to log once per change.
    last_error: String,
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
            failures: 0,
            not_before: now,
            last_error: String::new(),
        });
        if entry.ladder != ladder(class) {
            entry.ladder = ladder(class);
            entry.failures = 0;
        }
        entry.generation = generation;
        entry.failures = entry.failures.saturating_add(1);
        let n = entry.failures;
        let delay = match class {
            Class::Throttled {
                retry_after: Some(wait),
            } => {
                let wait = wait.min(self.policy.retry_after_cap);
                let ladder = self.jittered(self.policy.delay(Class::Transient, n));
                // Never sooner than the server asked; spread above its wait, so PortMappings
                // throttled together do not all come back in the same instant.
                ladder.max(wait + self.spread(wait))
            }
            _ => self.jittered(self.policy.delay(class, n)),
        };
        entry.not_before = now + delay;
        let changed = entry.last_error != message;
        entry.last_error = message;
        Some(Failure {
            delay,
            failures: entry.failures,
            changed,
        })
    }

    /// Records a successful reconcile: forgets the failures. Returns how many there were (so
    /// the recovery is logged once), None when there were none.
    pub fn succeeded(&self, pm: &ObjectRef<PortMapping>) -> Option<u32> {
        self.entries().remove(pm).map(|e| e.failures)
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
        // transient 5 ms.
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
    fn transient_delays_double_from_five_milliseconds_to_the_cap() {
        let p = Policy::default();
        let delays: Vec<u128> = (1..=12)
            .map(|n| p.delay(Class::Transient, n).as_millis())
            .collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 4000, 4000]
        );
        assert_eq!(p.delay(Class::Transient, u32::MAX), Duration::from_secs(4));
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
            Duration::from_millis(5)
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
            let full = Policy::default().delay(Class::Transient, n);
            assert_eq!(f.failures, n);
            assert!(
                f.delay <= full && f.delay >= full * 3 / 4,
                "{n}: {:?}",
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
        // After the success the ladder starts over.
        let f = b
            .failed(&pm(), G, &api_error(500, "InternalError", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (1, true));
        assert!(f.delay <= Duration::from_millis(5));
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
        // The transient ladder would allow ten attempts within the first 2.6 s; the server's
        // 1 s (plus up to a quarter) allows one per second: attempts at 0, 1–1.25 s, …, 4–5 s.
        let mut at = Duration::ZERO;
        let mut attempts = 0;
        while at < Duration::from_secs(5) {
            let f = b
                .failed(&pm(), G, &api_error(503, "ServiceUnavailable", 1), now + at)
                .unwrap();
            attempts += 1;
            assert!(
                f.delay >= Duration::from_secs(1) && f.delay <= Duration::from_millis(1250),
                "attempt {attempts}: {:?}",
                f.delay
            );
            assert_eq!(b.remaining(&pm(), G, now + at), Some(f.delay));
            at += f.delay;
        }
        assert!((4..=5).contains(&attempts), "{attempts} attempts in 5 s");
        // The same 503 without a wait climbs the transient ladder from 5 ms.
        let other = ObjectRef::new("other").within("ns");
        let f = b
            .failed(&other, G, &api_error(503, "ServiceUnavailable", 0), now)
            .unwrap();
        assert!(f.delay <= Duration::from_millis(5), "{:?}", f.delay);
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
            .failed(&pm(), G, &api_error(403, "Forbidden", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (1, true));
        assert!(f.delay >= Duration::from_millis(7500), "{:?}", f.delay);
        let f = b
            .failed(&pm(), G, &api_error(403, "Forbidden", 0), now)
            .unwrap();
        assert_eq!((f.failures, f.changed), (2, false));
        // Another PortMapping is unaffected.
        let other = ObjectRef::new("other").within("ns");
        assert_eq!(b.remaining(&other, G, now), None);
        assert_eq!(b.failed(&pm(), G, &Error::NotLeader, now), None);
        b.forget(&pm());
        assert_eq!(b.remaining(&pm(), G, now), None);
    }
}
