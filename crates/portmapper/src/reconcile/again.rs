//! When a pass looks again besides the resync: soon while something it waits for is pending,
//! and just past the deadline of a held gate.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::reconcile::gather::PENDING_RETRY;

/// Look again a second past `deadline` (when the first held gate times out; the plan's clock
/// is whole timestamps, the server's transition times whole seconds), unless the resync or
/// `again` comes sooner.
pub fn at_deadline(
    resync: Duration,
    again: Option<Duration>,
    deadline: Option<Timestamp>,
) -> Option<Duration> {
    let Some(deadline) = deadline else {
        return again;
    };
    let wait = Duration::try_from(Timestamp::now().duration_until(deadline)).unwrap_or_default()
        + Duration::from_secs(1);
    let wait = again.map_or(wait, |a| a.min(wait));
    (wait < resync).then_some(wait)
}

/// Look again soon (something we wait for, probe results or the pool's pods, is pending),
/// unless the resync comes sooner.
pub fn soon(resync: Duration) -> Option<Duration> {
    (PENDING_RETRY < resync).then_some(PENDING_RETRY)
}
