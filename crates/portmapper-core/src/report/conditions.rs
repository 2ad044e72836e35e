//! Condition bookkeeping: merge by type and keep `lastTransitionTime` unless the status flips,
//! so an unchanged outcome produces a byte-identical status (and therefore no write).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition as the reconcile decides it, before timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Desired {
    /// A condition of `type_` with `status`.
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The conditions to publish: one per desired type, in the order given, with
/// `lastTransitionTime` carried over from `previous` when the status did not change. Types in
/// `previous` that are not desired any more are dropped.
pub fn merge(
    previous: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    desired
        .iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" };
            let transition = previous
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: d.type_.to_string(),
                status: status.to_string(),
                reason: d.reason.clone(),
                message: truncate(&d.message, 32 * 1024),
                last_transition_time: transition,
                observed_generation: generation,
            }
        })
        .collect()
}

/// Condition messages are capped by the API (32 KiB); cut at a character boundary.
fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn unchanged_status_keeps_last_transition_time() {
        let first = merge(
            &[],
            &[Desired::new("Ready", true, "Published", "ok")],
            Some(1),
            ts(100),
        );
        let second = merge(
            &first,
            &[Desired::new("Ready", true, "Published", "still ok")],
            Some(2),
            ts(200),
        );
        assert_eq!(second[0].last_transition_time, Time(ts(100)));
        assert_eq!(second[0].message, "still ok");
        assert_eq!(second[0].observed_generation, Some(2));
    }

    #[test]
    fn flipped_status_moves_last_transition_time() {
        let first = merge(
            &[],
            &[Desired::new("Ready", true, "Published", "ok")],
            Some(1),
            ts(100),
        );
        let second = merge(
            &first,
            &[Desired::new("Ready", false, "ServiceNotFound", "gone")],
            Some(1),
            ts(200),
        );
        assert_eq!(second[0].last_transition_time, Time(ts(200)));
        assert_eq!(second[0].status, "False");
    }

    #[test]
    fn conditions_not_desired_any_more_are_dropped() {
        let first = merge(
            &[],
            &[Desired::new("Conflict", true, "ServiceClaimed", "x")],
            Some(1),
            ts(1),
        );
        let second = merge(
            &first,
            &[Desired::new("Ready", true, "Published", "ok")],
            Some(1),
            ts(2),
        );
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].type_, "Ready");
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(40_000);
        let merged = merge(&[], &[Desired::new("Ready", false, "X", long)], None, ts(1));
        assert!(merged[0].message.len() <= 32 * 1024);
        assert!(merged[0].message.ends_with("..."));
    }
}
