//! Damping: a membership flips only after enough consecutive results, like kubelet's probes.

use crate::outcome::Outcome;
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

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Abstain, Exclude, Include};

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
