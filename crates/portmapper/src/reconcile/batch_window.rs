//! The batch window: a change that follows a PortMapping's last write closely (within a fifth
//! of the window: a burst, such as a rolling restart) waits until the window after that write
//! has passed, and whatever else arrives meanwhile is planned with it, so a slice the burst
//! touches several times is written once. A change after a quiet spell is published at once, so
//! a flip's latency is unchanged. The native controller's counterpart is
//! `--endpointslice-updates-batch-period`, which delays every sync instead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use tokio::time::Instant;

/// `--batch-window-ms` unless set: a rolling restart's changes arrive tens of milliseconds
/// apart and share writes over it; a change more than a fifth of it after the last write (any
/// change a person makes) is written at once.
pub const DEFAULT_BATCH_WINDOW_MS: u64 = 500;

/// [`DEFAULT_BATCH_WINDOW_MS`] as a duration.
pub fn default_batch_window() -> Duration {
    Duration::from_millis(DEFAULT_BATCH_WINDOW_MS)
}

/// A change this soon after a write (as a fraction of the window) is taken as part of a burst.
const BURST_DIVISOR: u32 = 5;

/// One PortMapping's last write, and the end of the batch it opened, if any.
#[derive(Debug, Clone, Copy)]
struct Last {
    wrote: Instant,
    batch_until: Option<Instant>,
}

/// Per PortMapping, its last writing pass and the batch under way.
#[derive(Debug, Default)]
pub struct BatchWindows {
    /// How long after a write a burst is gathered (zero: never).
    window: Duration,
    last: Mutex<HashMap<ObjectRef<PortMapping>, Last>>,
}

impl BatchWindows {
    /// Windows of `window` (zero turns batching off).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last: Mutex::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<PortMapping>, Last>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a pass of `pm` starting at `now` waits: until the end of the batch under way,
    /// or of the one this pass opens by following the last write within a burst's interval.
    pub fn remaining(&self, pm: &ObjectRef<PortMapping>, now: Instant) -> Option<Duration> {
        let mut map = self.map();
        let last = map.get_mut(pm)?;
        let until = match last.batch_until {
            Some(until) => until,
            None if now.saturating_duration_since(last.wrote) < self.window / BURST_DIVISOR => {
                let until = last.wrote + self.window;
                last.batch_until = Some(until);
                until
            }
            None => return None,
        };
        let rest = until.saturating_duration_since(now);
        (!rest.is_zero()).then_some(rest)
    }

    /// A pass of `pm` that wrote ended at `now`: the batch it carried, if any, is done.
    pub fn wrote(&self, pm: &ObjectRef<PortMapping>, now: Instant) {
        if self.window.is_zero() {
            return;
        }
        let mut map = self.map();
        // Entries past their window decide nothing: drop them, so the map holds only the
        // PortMappings written within the last window.
        map.retain(|_, l| now.saturating_duration_since(l.wrote) < self.window);
        map.insert(
            pm.clone(),
            Last {
                wrote: now,
                batch_until: None,
            },
        );
    }

    /// Forgets `pm` (deleted, or no longer ours).
    pub fn forget(&self, pm: &ObjectRef<PortMapping>) {
        self.map().remove(pm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm(name: &str) -> ObjectRef<PortMapping> {
        ObjectRef::new(name).within("default")
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_change_soon_after_a_write_waits_for_the_window_and_so_does_the_rest_of_the_batch() {
        let w = BatchWindows::new(MS(500));
        let t0 = Instant::now();
        let at = |ms| t0 + MS(ms);
        assert_eq!(w.remaining(&pm("a"), t0), None, "nothing written yet");
        w.wrote(&pm("a"), t0);
        // Within a fifth of the window: a burst; the batch lasts until the window's end.
        assert_eq!(w.remaining(&pm("a"), at(50)), Some(MS(450)));
        assert_eq!(w.remaining(&pm("b"), at(50)), None, "per PortMapping");
        // Past the burst interval but inside the open batch: still waits.
        assert_eq!(w.remaining(&pm("a"), at(300)), Some(MS(200)));
        assert_eq!(w.remaining(&pm("a"), at(500)), None, "the batch's pass");
        w.wrote(&pm("a"), at(500));
        assert_eq!(
            w.remaining(&pm("a"), at(560)),
            Some(MS(440)),
            "the next burst"
        );
    }

    #[test]
    fn a_change_after_the_burst_interval_is_written_at_once() {
        let w = BatchWindows::new(MS(500));
        let t0 = Instant::now();
        w.wrote(&pm("a"), t0);
        assert_eq!(w.remaining(&pm("a"), t0 + MS(100)), None);
        assert_eq!(w.remaining(&pm("a"), t0 + MS(300)), None);
        w.wrote(&pm("b"), t0 + MS(600));
        assert_eq!(w.map().len(), 1, "a's passed window is dropped");
        w.forget(&pm("b"));
        assert_eq!(w.remaining(&pm("b"), t0 + MS(601)), None);
    }

    #[test]
    fn a_zero_window_never_waits() {
        let w = BatchWindows::new(Duration::ZERO);
        let t0 = Instant::now();
        w.wrote(&pm("a"), t0);
        assert_eq!(w.remaining(&pm("a"), t0), None);
        assert!(w.map().is_empty());
    }
}
