//! The verdict of a target's damped results: what the planner reads of a network check.

use crate::outcome::Outcome;
use crate::prober::TargetResult;
use crate::target::Membership;

impl TargetResult {
    /// What the damped result says of the pod, with why: `Include`, `Exclude` (the reason of
    /// the results that excluded it, or of a passing pod still earning its way in: not
    /// `success_threshold` probes in a row yet), or `Abstain` while only abstaining results
    /// came in (no Include or Exclude counted: nothing is known about the pod, so what is
    /// published stays). `None` before its first probe.
    pub fn decided(&self, success_threshold: u32) -> Option<(Outcome, String)> {
        let last = self.last.as_ref()?;
        if self.successes == 0 && self.failures == 0 {
            return Some((
                Outcome::Abstain,
                format!("no verdict yet ({})", last.reason),
            ));
        }
        Some(match self.membership {
            Membership::Included => (Outcome::Include, String::new()),
            Membership::Excluded => {
                let reason = match last.outcome {
                    Outcome::Exclude => self.reason.clone(),
                    Outcome::Include => format!(
                        "{} ({} of {success_threshold} consecutive successes needed)",
                        last.reason, self.successes
                    ),
                    Outcome::Abstain => {
                        format!("{} (latest probe abstained: {})", self.reason, last.reason)
                    }
                };
                (Outcome::Exclude, reason)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Cause, ProbeResult};
    use Outcome::{Abstain, Exclude, Include};

    fn result(membership: Membership, last: ProbeResult, s: u32, f: u32) -> TargetResult {
        TargetResult {
            membership,
            reason: last.reason.clone(),
            last: Some(last),
            successes: s,
            failures: f,
            probes: 1,
        }
    }

    #[test]
    fn decisions_follow_damped_membership_and_keep_reasons() {
        let refused = ProbeResult::exclude(
            Cause::Refused,
            "connect to 10.244.0.1:9092: connection refused",
        );
        let healthy = ProbeResult::include(Cause::Healthy, "GET / answered HTTP 200");
        let down = ProbeResult::abstain(Cause::NoRoute, "no route");
        assert_eq!(
            result(Membership::Excluded, refused.clone(), 0, 1).decided(1),
            Some((
                Exclude,
                "connect to 10.244.0.1:9092: connection refused".into()
            ))
        );
        assert_eq!(
            result(Membership::Included, refused, 0, 1).decided(1),
            Some((Include, String::new())),
            "below failureThreshold the pod stays in"
        );
        assert_eq!(
            result(Membership::Excluded, healthy, 1, 0).decided(3),
            Some((
                Exclude,
                "GET / answered HTTP 200 (1 of 3 consecutive successes needed)".into()
            ))
        );
        assert_eq!(
            result(Membership::Excluded, down.clone(), 0, 0)
                .decided(1)
                .map(|(o, _)| o),
            Some(Abstain),
            "only abstentions: nothing known"
        );
        let mut never = result(Membership::Included, down, 0, 0);
        never.last = None;
        assert_eq!(never.decided(1), None);
    }
}
