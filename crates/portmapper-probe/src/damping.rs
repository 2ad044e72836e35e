//! Damping: a membership flips only after enough consecutive results, like kubelet's probes.

use crate::outcome::Outcome;
use crate::prober::TargetResult;
use crate::target::Membership;

/// The damped state of one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Damper {
    membership: Membership,
    successes: u32,
    failures: u32,
    success_threshold: u32,
    failure_threshold: u32,
}

impl Damper {
    /// Starts at `initial` with no results counted.
    pub(crate) fn new(initial: Membership, success_threshold: u32, failure_threshold: u32) -> Self {
        Self {
            membership: initial,
            successes: 0,
            failures: 0,
            success_threshold: success_threshold.max(1),
            failure_threshold: failure_threshold.max(1),
        }
    }

    pub(crate) fn membership(&self) -> Membership {
        self.membership
    }

    /// Consecutive Include results counted so far.
    pub(crate) fn successes(&self) -> u32 {
        self.successes
    }

    /// Consecutive Exclude results counted so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// New thresholds apply from the next result; the streaks so far are kept.
    pub(crate) fn set_thresholds(&mut self, success_threshold: u32, failure_threshold: u32) {
        self.success_threshold = success_threshold.max(1);
        self.failure_threshold = failure_threshold.max(1);
    }

    /// Counts one result; returns whether the membership flipped.
    ///
    /// Abstain neither counts nor breaks a streak: it says nothing about the pod.
    pub(crate) fn observe(&mut self, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Include => {
                self.successes = self.successes.saturating_add(1);
                self.failures = 0;
                if self.membership == Membership::Excluded
                    && self.successes >= self.success_threshold
                {
                    self.membership = Membership::Included;
                    return true;
                }
            }
            Outcome::Exclude => {
                self.failures = self.failures.saturating_add(1);
                self.successes = 0;
                if self.membership == Membership::Included
                    && self.failures >= self.failure_threshold
                {
                    self.membership = Membership::Excluded;
                    return true;
                }
            }
            Outcome::Abstain => {}
        }
        false
    }
}

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

    fn run(damper: &mut Damper, outcomes: &[Outcome]) -> Vec<bool> {
        outcomes.iter().map(|o| damper.observe(*o)).collect()
    }

    #[test]
    fn included_flips_after_failure_threshold_consecutive_failures() {
        let mut d = Damper::new(Membership::Included, 1, 3);
        assert_eq!(
            run(&mut d, &[Exclude, Exclude, Include, Exclude, Exclude]),
            [false, false, false, false, false]
        );
        assert_eq!(d.membership(), Membership::Included);
        assert!(d.observe(Exclude));
        assert_eq!(d.membership(), Membership::Excluded);
        // Further failures change nothing.
        assert!(!d.observe(Exclude));
    }

    #[test]
    fn excluded_flips_after_success_threshold() {
        let mut d = Damper::new(Membership::Excluded, 2, 3);
        assert_eq!(
            run(&mut d, &[Include, Exclude, Include, Include]),
            [false, false, false, true]
        );
        assert_eq!(d.membership(), Membership::Included);
    }

    #[test]
    fn thresholds_below_one_are_clamped() {
        // Zero means one: a single result flips, never "already flipped before any result".
        let mut d = Damper::new(Membership::Included, 0, 0);
        assert_eq!(d, Damper::new(Membership::Included, 1, 1));
        assert_eq!(
            d.membership(),
            Membership::Included,
            "the initial membership holds"
        );
        assert!(!d.observe(Include));
        assert!(d.observe(Exclude));
        assert_eq!(d.membership(), Membership::Excluded);
        assert!(d.observe(Include));
        assert_eq!(d.membership(), Membership::Included);
        // Updated thresholds are clamped too.
        let mut e = Damper::new(Membership::Excluded, 5, 5);
        e.set_thresholds(0, 0);
        assert_eq!(e, Damper::new(Membership::Excluded, 1, 1));
        assert!(e.observe(Include));
    }

    #[test]
    fn abstain_holds_state_and_streaks() {
        let mut d = Damper::new(Membership::Included, 1, 2);
        assert_eq!(
            run(&mut d, &[Abstain, Abstain, Exclude, Abstain, Abstain]),
            [false; 5]
        );
        assert_eq!(d.membership(), Membership::Included);
        assert_eq!(d.failures(), 1);
        assert!(
            d.observe(Exclude),
            "abstain did not break the failure streak"
        );
        let mut e = Damper::new(Membership::Excluded, 1, 1);
        assert_eq!(run(&mut e, &[Abstain; 10]), [false; 10]);
        assert_eq!(e.membership(), Membership::Excluded);
    }
}
