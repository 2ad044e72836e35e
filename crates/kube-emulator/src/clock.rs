//! The emulator's clock (docs/emulator-spec.md §7.1): the source of every time the server sets —
//! `creationTimestamp`, `deletionTimestamp`, managedFields `time`, controller-written condition
//! times, Table ages — and of the time-based expiry of the event history and of `continue`
//! tokens. Tests install a manual clock and move it, so time-dependent behaviour is exercised
//! without waiting.
//!
//! Network timing (watch `timeoutSeconds`, bookmark cadence, fault delays, restart windows) and
//! the request log's timestamps stay on real time: they measure what clients do in real time.

use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// A shared clock: system time (the default) or a manual one that only moves when told.
#[derive(Debug)]
pub struct Clock {
    mode: Mutex<Mode>,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// System time plus an offset: `set`/`advance` on a system clock skew it, and it keeps running.
    System(SignedDuration),
    /// Frozen at this instant until set or advanced.
    Manual(Timestamp),
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

fn saturating_add(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(if d.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self {
            mode: Mutex::new(Mode::System(SignedDuration::ZERO)),
        }
    }

    /// A manual clock standing at `at`.
    pub fn manual(at: Timestamp) -> Self {
        Self {
            mode: Mutex::new(Mode::Manual(at)),
        }
    }

    fn mode(&self) -> std::sync::MutexGuard<'_, Mode> {
        // The mode is a plain value: a poisoned lock still holds a consistent one.
        self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the clock only moves when set or advanced.
    pub fn is_manual(&self) -> bool {
        matches!(*self.mode(), Mode::Manual(_))
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        match *self.mode() {
            Mode::System(offset) => saturating_add(Timestamp::now(), offset),
            Mode::Manual(at) => at,
        }
    }

    /// The current time as Kubernetes serialises `metav1.Time` (RFC 3339, UTC, seconds).
    pub fn now_rfc3339(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Time passed since `then` (zero if the clock was set back before it).
    pub fn elapsed(&self, then: Timestamp) -> Duration {
        let d = self.now().duration_since(then);
        if d.is_negative() {
            Duration::ZERO
        } else {
            d.unsigned_abs()
        }
    }

    /// Jump to `at` (a system clock keeps running from there).
    pub fn set(&self, at: Timestamp) {
        let mut m = self.mode();
        *m = match *m {
            Mode::System(_) => Mode::System(at.duration_since(Timestamp::now())),
            Mode::Manual(_) => Mode::Manual(at),
        };
    }

    /// Move by `by` (negative moves back).
    pub fn advance(&self, by: SignedDuration) {
        let mut m = self.mode();
        *m = match *m {
            Mode::System(offset) => Mode::System(offset.saturating_add(by)),
            Mode::Manual(at) => Mode::Manual(saturating_add(at, by)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let t0: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let c = Clock::manual(t0);
        assert!(c.is_manual());
        assert_eq!(c.now(), t0);
        c.advance(SignedDuration::from_millis(90_500));
        assert_eq!(c.now_rfc3339(), "2030-01-01T00:01:30Z");
        assert_eq!(c.elapsed(t0), Duration::from_millis(90_500));
        c.set("2029-12-31T23:59:00Z".parse().unwrap());
        assert_eq!(c.elapsed(t0), Duration::ZERO, "set back before t0");
    }

    #[test]
    fn system_clock_is_skewed_by_set_and_advance_and_keeps_running() {
        let c = Clock::system();
        assert!(!c.is_manual());
        let real = Timestamp::now();
        assert!(c.now().duration_since(real).unsigned_abs() < Duration::from_secs(5));
        c.advance(SignedDuration::from_hours(24));
        let skew = c.now().duration_since(Timestamp::now());
        assert!((skew - SignedDuration::from_hours(24)).unsigned_abs() < Duration::from_secs(5));
        let target: Timestamp = "2040-06-01T12:00:00Z".parse().unwrap();
        c.set(target);
        assert!(c.now().duration_since(target).unsigned_abs() < Duration::from_secs(5));
    }
}
