//! The API server answering the watches again after it did not: every watch of the process
//! waits out its own re-watch backoff (`watch_health.rs`, 1 s doubling to 3 s), so after an
//! API-server restart the watches came back one by one, up to 3.75 s after the server
//! answered. The first watch request answered again is a [`Recovery`]: the watches still
//! waiting out a pause that began before it re-watch at once. Only an answer (a 2xx) wakes
//! them, so a watch of a server that is still down keeps its backoff; and a recovery counts
//! at most once per `min_gap`, so a server that answers one request and fails the next cannot
//! make the watches spin.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Whether watch requests failed since the server last answered one, and a count of the
/// recoveries (the generation a pause compares with).
pub struct Recovery {
    min_gap: Duration,
    /// A watch request failed (no answer, or a 5xx) since the last recovery.
    down: AtomicBool,
    generation: watch::Sender<u64>,
    last: Mutex<Option<Instant>>,
}

impl Recovery {
    /// Recoveries at most once per `min_gap`.
    pub fn new(min_gap: Duration) -> Self {
        Self {
            min_gap,
            down: AtomicBool::new(false),
            generation: watch::channel(0).0,
            last: Mutex::new(None),
        }
    }

    /// Recoveries so far.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// A watch request got no answer, or a server error.
    pub fn failed(&self) {
        self.down.store(true, Ordering::Release);
    }

    /// A watch request was answered (2xx). True when it is a recovery: requests failed since
    /// the last one, and that one is `min_gap` old.
    pub fn answered(&self) -> bool {
        if !self.down.load(Ordering::Acquire) {
            return false;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < self.min_gap)
            || !self.down.swap(false, Ordering::AcqRel)
        {
            return false;
        }
        *last = Some(Instant::now());
        self.generation.send_modify(|g| *g += 1);
        true
    }

    /// Sleeps `pause`, cut short by a recovery after generation `since` (one that came
    /// before the call included). True when it was cut short.
    pub async fn pause(&self, pause: Duration, since: u64) -> bool {
        let mut generation = self.generation.subscribe();
        let recovered = async {
            // The sender lives as long as `self`: an error cannot happen while this runs.
            if generation.wait_for(|g| *g > since).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => false,
            () = recovered => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_answer_after_failures_wakes_the_pauses_that_began_before_it() {
        let r = std::sync::Arc::new(Recovery::new(Duration::from_secs(1)));
        // Answers while nothing failed are no recovery.
        assert!(!r.answered());
        r.failed();
        let since = r.generation();
        let waiting = {
            let r = r.clone();
            tokio::spawn(async move { r.pause(Duration::from_secs(600), since).await })
        };
        tokio::task::yield_now().await;
        assert!(r.answered(), "the first answer after a failure");
        assert!(!r.answered(), "a second answer is no news");
        assert!(waiting.await.unwrap(), "the pause was cut short");
        // A pause that begins after the recovery, from a failure before it, ends at once.
        assert!(r.pause(Duration::from_secs(600), since).await);
        assert_eq!(r.generation(), 1);
    }

    #[tokio::test]
    async fn without_an_answer_a_pause_lasts_and_recoveries_are_spaced() {
        let r = Recovery::new(Duration::from_secs(600));
        r.failed();
        // A server still down answers nothing: the pause lasts.
        assert!(!r.pause(Duration::from_millis(20), r.generation()).await);
        assert!(r.answered());
        // Failing and answering in turn within `min_gap`: no further recovery.
        for _ in 0..10 {
            r.failed();
            assert!(!r.answered());
        }
        assert_eq!(r.generation(), 1);
        // Without a gap, each answer after a failure is one.
        let r = Recovery::new(Duration::ZERO);
        for _ in 0..10 {
            r.failed();
            assert!(r.answered());
        }
        assert_eq!(r.generation(), 10);
    }
}
