//! The batch window: after a pass of a PortMapping wrote, the next pass of it waits until the
//! window has passed. A change after a quiet spell is published at once (a flip's latency is
//! unchanged); the changes of a burst (a rolling restart) that arrive within the window land in
//! one pass, so a slice they share is written once. The native controller's counterpart is
//! `--endpointslice-updates-batch-period`, which delays every sync instead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use tokio::time::Instant;

/// When each PortMapping's last writing pass ended.
#[derive(Debug, Default)]
pub struct BatchWindows {
    /// How long after a writing pass the next one waits (zero: never).
    window: Duration,
    last_write: Mutex<HashMap<ObjectRef<PortMapping>, Instant>>,
}

impl BatchWindows {
    /// Windows of `window` (zero turns batching off).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last_write: Mutex::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<PortMapping>, Instant>> {
        self.last_write.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a pass of `pm` starting at `now` waits: the rest of the window its last
    /// writing pass opened, if any.
    pub fn remaining(&self, pm: &ObjectRef<PortMapping>, now: Instant) -> Option<Duration> {
        let last = *self.map().get(pm)?;
        let rest = (last + self.window).saturating_duration_since(now);
        (!rest.is_zero()).then_some(rest)
    }

    /// A pass of `pm` that wrote ended at `now`.
    pub fn wrote(&self, pm: &ObjectRef<PortMapping>, now: Instant) {
        if self.window.is_zero() {
            return;
        }
        let mut map = self.map();
        // Entries whose window has passed decide nothing: drop them so the map holds only the
        // PortMappings written within the last window.
        map.retain(|_, at| now.saturating_duration_since(*at) < self.window);
        map.insert(pm.clone(), now);
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

    #[test]
    fn a_pass_waits_for_the_rest_of_the_window_its_last_write_opened() {
        let w = BatchWindows::new(Duration::from_millis(200));
        let t0 = Instant::now();
        assert_eq!(w.remaining(&pm("a"), t0), None, "nothing written yet");
        w.wrote(&pm("a"), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            w.remaining(&pm("a"), at(50)),
            Some(Duration::from_millis(150))
        );
        assert_eq!(w.remaining(&pm("b"), at(50)), None, "per PortMapping");
        assert_eq!(
            w.remaining(&pm("a"), at(200)),
            None,
            "the window has passed"
        );
        w.wrote(&pm("b"), at(300));
        assert_eq!(w.map().len(), 1, "a's passed window is dropped");
        w.forget(&pm("b"));
        assert_eq!(w.remaining(&pm("b"), at(301)), None);
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
