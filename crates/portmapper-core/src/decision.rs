//! The tri-state membership decision and its AND / OR combinators.

use std::sync::Arc;

/// What one check (or a combination of checks) says about one (pod, port, address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The pod backs the port at this address.
    Include,
    /// The pod does not back the port at this address.
    Exclude,
    /// The check cannot tell (e.g. no probe result yet, or the controller cannot reach the pod
    /// network): whatever is published for this (pod, port, family) stays as it is.
    Abstain,
}

/// A decision with the reason behind it, naming the check (`podReady: pod is not Ready`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// The decision.
    pub decision: Decision,
    /// Why, for Exclude and Abstain (Include carries none, to keep the hot path allocation-free).
    /// Shared: a remembered verdict's reason is reported at every pass without a copy.
    pub reason: Option<Arc<str>>,
}

impl Verdict {
    /// Include, without a reason.
    pub const INCLUDE: Verdict = Verdict {
        decision: Decision::Include,
        reason: None,
    };

    /// Exclude, saying why.
    pub fn exclude(reason: impl Into<Arc<str>>) -> Self {
        Self {
            decision: Decision::Exclude,
            reason: Some(reason.into()),
        }
    }

    /// Abstain, saying why.
    pub fn abstain(reason: impl Into<Arc<str>>) -> Self {
        Self {
            decision: Decision::Abstain,
            reason: Some(reason.into()),
        }
    }

    /// The reason, or an empty string.
    pub fn reason(&self) -> &str {
        self.reason.as_deref().unwrap_or_default()
    }
}

/// AND of lazily evaluated checks: the first Exclude wins at once (later checks are not
/// evaluated); otherwise any Abstain makes the result Abstain (the first one's reason);
/// otherwise Include. No checks at all → Include.
pub fn all_of<I>(verdicts: I) -> Verdict
where
    I: IntoIterator<Item = Verdict>,
{
    let mut abstain: Option<Verdict> = None;
    for verdict in verdicts {
        match verdict.decision {
            Decision::Exclude => return verdict,
            Decision::Abstain => {
                abstain.get_or_insert(verdict);
            }
            Decision::Include => {}
        }
    }
    abstain.unwrap_or(Verdict::INCLUDE)
}

/// OR of lazily evaluated checks: the first Include wins at once; otherwise any Abstain makes
/// the result Abstain; otherwise Exclude, listing every reason. No checks → Exclude.
pub fn any_of<I>(verdicts: I) -> Verdict
where
    I: IntoIterator<Item = Verdict>,
{
    let mut abstain: Option<Verdict> = None;
    let mut reasons: Vec<String> = Vec::new();
    for verdict in verdicts {
        match verdict.decision {
            Decision::Include => return verdict,
            Decision::Abstain => {
                abstain.get_or_insert(verdict);
            }
            Decision::Exclude => reasons.push(verdict.reason().to_owned()),
        }
    }
    match abstain {
        Some(a) => Verdict::abstain(format!("anyOf: {}", a.reason())),
        None => Verdict::exclude(format!("anyOf: none included ({})", reasons.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc() -> Verdict {
        Verdict::INCLUDE
    }
    fn exc(r: &str) -> Verdict {
        Verdict::exclude(r)
    }
    fn abs(r: &str) -> Verdict {
        Verdict::abstain(r)
    }

    #[test]
    fn all_of_empty_includes() {
        assert_eq!(all_of(Vec::new()), Verdict::INCLUDE);
    }

    #[test]
    fn all_of_exclude_short_circuits_before_later_checks() {
        let mut evaluated = 0;
        let checks = [exc("first"), inc(), abs("x")];
        let v = all_of(checks.into_iter().inspect(|_| evaluated += 1));
        assert_eq!(v, exc("first"));
        assert_eq!(evaluated, 1);
    }

    #[test]
    fn all_of_exclude_beats_earlier_abstain() {
        assert_eq!(all_of([abs("a"), exc("e")]).decision, Decision::Exclude);
    }

    #[test]
    fn all_of_abstain_without_exclude_abstains_with_first_reason() {
        assert_eq!(all_of([inc(), abs("a"), abs("b")]), abs("a"));
    }

    #[test]
    fn all_of_every_include_includes() {
        assert_eq!(all_of([inc(), inc()]), Verdict::INCLUDE);
    }

    #[test]
    fn any_of_include_short_circuits() {
        let mut evaluated = 0;
        let v = any_of(
            [exc("a"), inc(), abs("b")]
                .into_iter()
                .inspect(|_| evaluated += 1),
        );
        assert_eq!(v.decision, Decision::Include);
        assert_eq!(evaluated, 2);
    }

    #[test]
    fn any_of_abstain_beats_exclude() {
        assert_eq!(any_of([exc("a"), abs("b")]).decision, Decision::Abstain);
    }

    #[test]
    fn any_of_all_exclude_lists_every_reason() {
        let v = any_of([exc("podReady: not ready"), exc("httpGet: 503")]);
        assert_eq!(v.decision, Decision::Exclude);
        assert_eq!(
            v.reason(),
            "anyOf: none included (podReady: not ready; httpGet: 503)"
        );
    }

    #[test]
    fn any_of_empty_excludes() {
        assert_eq!(any_of(Vec::new()).decision, Decision::Exclude);
    }
}
