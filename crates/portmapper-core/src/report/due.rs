//! When a changed status is written: at once when what kstatus, Flux and Argo CD read changed
//! (a condition's type, status, reason or message, or `observedGeneration`), and after a window
//! when only the counts changed (the ports, the summary, the slice count, and the Ready message
//! `published <summary>` that repeats the summary): the first change of the counts holds the
//! status for the window, and the pass that looks again at its end writes what the counts are
//! then. A burst of flips of one PortMapping costs one status write per window, a flip undone
//! within the window (a pod's readiness blinking) none, and the counts lag by at most the
//! window. The operator decides it before executing a pass, with the time since the counts
//! were first held.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use portmapper_api::PortMappingStatus;
use portmapper_api::status::condition_types as ct;

/// When the status a pass computed is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusDue {
    /// It says what the server holds: nothing to write.
    Unchanged,
    /// Written by this pass.
    Now,
    /// Only its counts changed: held back this long (until the window that the first held
    /// change opened ends), then written by the pass that looks again.
    Held(Duration),
}

/// When `next` is written over `previous` (the status the server holds, as far as the
/// operator knows), with the counts held for `held_for` already (`None`: not held), and one
/// counts write per `window` (zero: every change at once).
pub fn status_due(
    previous: &PortMappingStatus,
    next: &PortMappingStatus,
    held_for: Option<Duration>,
    window: Duration,
) -> StatusDue {
    if previous == next {
        return StatusDue::Unchanged;
    }
    if !counts_only(previous, next) || window.is_zero() {
        return StatusDue::Now;
    }
    match held_for {
        None => StatusDue::Held(window),
        Some(held) if held < window => StatusDue::Held(window - held),
        Some(_) => StatusDue::Now,
    }
}

/// Whether `previous` and `next` differ only in their counts: the same `observedGeneration`
/// and the same conditions, but for the message of a Ready condition published on both sides
/// (`published <summary>`, the summary again).
fn counts_only(previous: &PortMappingStatus, next: &PortMappingStatus) -> bool {
    previous.observed_generation == next.observed_generation
        && previous.conditions.len() == next.conditions.len()
        && previous
            .conditions
            .iter()
            .zip(&next.conditions)
            .all(|(p, n)| p == n || same_but_the_summary(p, n))
}

/// A Ready condition that says `Published` on both sides, whose message alone differs.
fn same_but_the_summary(previous: &Condition, next: &Condition) -> bool {
    let published = |c: &Condition| c.type_ == ct::READY && c.reason == PUBLISHED;
    published(previous)
        && published(next)
        && Condition {
            message: next.message.clone(),
            ..previous.clone()
        } == *next
}

/// The reason of a Ready condition whose message is the summary.
const PUBLISHED: &str = "Published";

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use portmapper_api::PortStatus;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    fn published(ready: i32) -> PortMappingStatus {
        let summary = format!("http {ready}/4");
        PortMappingStatus {
            observed_generation: Some(1),
            conditions: vec![
                condition(
                    "Ready",
                    "True",
                    "Published",
                    &format!("published {summary}"),
                ),
                condition("Reconciling", "False", "Published", "up to date"),
                condition("Stalled", "False", "Published", "up to date"),
            ],
            ports: vec![PortStatus {
                name: "http".into(),
                ready,
                candidates: 4,
                ..PortStatus::default()
            }],
            summary: Some(summary),
            endpoint_slices: Some(1),
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const WINDOW: Duration = Duration::from_millis(500);

    #[test]
    fn the_same_status_is_never_written() {
        let s = published(3);
        assert_eq!(status_due(&s, &s, None, WINDOW), StatusDue::Unchanged);
        assert_eq!(
            status_due(&s, &s, Some(MS(1)), WINDOW),
            StatusDue::Unchanged
        );
    }

    #[test]
    fn counts_wait_for_the_window_their_first_change_opened_and_no_longer() {
        let (before, after) = (published(3), published(2));
        assert_eq!(
            status_due(&before, &after, None, WINDOW),
            StatusDue::Held(WINDOW),
            "the first change of the counts opens the window"
        );
        assert_eq!(
            status_due(&before, &after, Some(MS(100)), WINDOW),
            StatusDue::Held(MS(400))
        );
        assert_eq!(
            status_due(&before, &after, Some(MS(500)), WINDOW),
            StatusDue::Now
        );
        assert_eq!(
            status_due(&before, &after, None, Duration::ZERO),
            StatusDue::Now,
            "no window"
        );
        let mut slices = published(3);
        slices.endpoint_slices = Some(2);
        assert_eq!(
            status_due(&before, &slices, Some(MS(100)), WINDOW),
            StatusDue::Held(MS(400))
        );
        assert_eq!(
            status_due(&before, &published(3), Some(MS(600)), WINDOW),
            StatusDue::Unchanged,
            "a flip undone within the window writes nothing"
        );
    }

    #[test]
    fn what_kstatus_reads_is_written_at_once() {
        let before = published(3);
        let now = |next: &PortMappingStatus| status_due(&before, next, Some(MS(1)), WINDOW);
        let mut generation = published(2);
        generation.observed_generation = Some(2);
        assert_eq!(now(&generation), StatusDue::Now, "observedGeneration");
        let mut flipped = published(2);
        flipped.conditions[0] = condition("Ready", "False", "ApplyFailed", "x");
        assert_eq!(now(&flipped), StatusDue::Now, "Ready's status and reason");
        let mut reconciling = published(3);
        reconciling.conditions[1].message = "retrying".into();
        assert_eq!(
            now(&reconciling),
            StatusDue::Now,
            "another condition's message"
        );
        let mut added = published(2);
        added
            .conditions
            .push(condition("PortNotFound", "True", "UnknownPort", "x"));
        assert_eq!(now(&added), StatusDue::Now, "a condition appears");
        let mut moved = published(2);
        moved.conditions[0].last_transition_time = Time(Timestamp::now());
        assert_eq!(now(&moved), StatusDue::Now, "a transition time");
    }
}
