//! Fault injection (docs/emulator-spec.md §7): the rule model of §7.1 and the actions of the §7.2
//! catalogue. Rules are matched per request; the first matching rule whose `after`/`probability`
//! gates pass fires (and counts down `times`).

use std::sync::Mutex;

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};

/// What a rule matches (all set fields must match).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Match {
    /// Verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`).
    pub verbs: Vec<String>,
    /// API group (`""` = core).
    pub group: Option<String>,
    /// Resource plural.
    pub resource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Name glob (`*` and `?`).
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// Only watches (`true`) or only non-watches (`false`).
    pub watch: Option<bool>,
    /// Field manager of the request.
    pub field_manager: Option<String>,
    /// Patch type (`merge`, `json`, `strategic`, `apply`).
    pub patch_type: Option<String>,
    /// User-Agent prefix.
    pub user_agent: Option<String>,
}

/// How a watch connection is dropped.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum DropMode {
    /// Terminating chunk: a clean end of stream.
    #[default]
    Clean,
    /// Connection aborted without the terminating chunk.
    Abrupt,
    /// Half an event line, then abort.
    MidLine,
}

/// What happens when a rule fires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum FaultAction {
    /// Only the rule's `delayMs` latency.
    Delay,
    /// A Status error (429/500/502/503/504/...); 429/503 carry `Retry-After`.
    #[serde(rename_all = "camelCase")]
    Status {
        /// HTTP code.
        code: u16,
        /// Status reason (defaults by code).
        #[serde(default)]
        reason: Option<String>,
        /// Message.
        #[serde(default)]
        message: Option<String>,
        /// Retry-After seconds.
        #[serde(default)]
        retry_after_seconds: Option<u64>,
    },
    /// Headers, then the body stalls for `ms` before it is sent (client read timeouts).
    #[serde(rename_all = "camelCase")]
    SlowBody {
        /// Stall.
        ms: u64,
    },
    /// A real concurrent write (annotation bump, new RV, MODIFIED event) just before an
    /// update/patch is handled, so the client's RV is genuinely stale.
    StaleWrite,
    /// A plain 409 Conflict even if the RV matches.
    ConflictStatus,
    /// Create the target object just before handling the POST (→ 409 AlreadyExists).
    AlreadyExistsRace,
    /// Close the watch after `afterEvents` events or `afterMs`.
    #[serde(rename_all = "camelCase")]
    WatchDrop {
        /// Events delivered before the drop.
        #[serde(default)]
        after_events: Option<u64>,
        /// Time before the drop.
        #[serde(default)]
        after_ms: Option<u64>,
        /// How.
        #[serde(default)]
        mode: DropMode,
    },
    /// ERROR 410 Expired event (after `afterEvents` events), then close.
    #[serde(rename_all = "camelCase")]
    WatchGone {
        /// Events delivered first.
        #[serde(default)]
        after_events: u64,
    },
    /// ERROR event with another code (e.g. 500) after `afterEvents` events, then close: kube
    /// reports the error and re-watches from its last resourceVersion (no relist).
    #[serde(rename_all = "camelCase")]
    WatchError {
        /// Status code of the ERROR event.
        code: u16,
        /// Events delivered first.
        #[serde(default)]
        after_events: u64,
    },
    /// Keep the watch open and send nothing (no events, no bookmarks).
    WatchStall,
    /// Deliver each watch event `ms` late.
    #[serde(rename_all = "camelCase")]
    EventDelay {
        /// Delay.
        ms: u64,
    },
    /// Serve matching list/get requests that ask for `resourceVersion=0` ("any", which upstream
    /// may answer from a lagging watch cache) from the state `revisions` global revisions ago,
    /// clamped to the oldest revision the event history still holds. Other requests the rule
    /// matches are served normally (and still count as fired).
    #[serde(rename_all = "camelCase")]
    StaleList {
        /// How many global revisions the answer lags behind the current one.
        revisions: u64,
    },
    /// Bookmark control for matching watches.
    #[serde(rename_all = "camelCase")]
    Bookmarks {
        /// No bookmarks at all.
        #[serde(default)]
        disabled: bool,
        /// Cadence override.
        #[serde(default)]
        interval_ms: Option<u64>,
        /// Report an RV this much lower than the truth.
        #[serde(default)]
        lag: u64,
    },
}

/// One rule (JSON shape of docs/emulator-spec.md §7.1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Id (generated if empty).
    #[serde(default)]
    pub id: String,
    /// Matcher.
    #[serde(default, rename = "match")]
    pub matcher: Match,
    /// FaultAction.
    pub action: FaultAction,
    /// Fire this many times, then the rule is removed (None = forever).
    #[serde(default)]
    pub times: Option<u64>,
    /// Probability per matching request (seeded RNG).
    #[serde(default = "one")]
    pub probability: f64,
    /// Skip the first N matches.
    #[serde(default)]
    pub after: u64,
    /// Latency added before handling.
    #[serde(default)]
    pub delay_ms: u64,
}

fn one() -> f64 {
    1.0
}

impl Rule {
    /// A rule with the given action matching everything; refine with the builder methods.
    pub fn new(action: FaultAction) -> Self {
        Self {
            id: String::new(),
            matcher: Match::default(),
            action,
            times: None,
            probability: 1.0,
            after: 0,
            delay_ms: 0,
        }
    }
    /// Restrict to verbs.
    pub fn verbs(mut self, v: &[&str]) -> Self {
        self.matcher.verbs = v.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Restrict to a group/resource.
    pub fn resource(mut self, group: &str, resource: &str) -> Self {
        self.matcher.group = Some(group.into());
        self.matcher.resource = Some(resource.into());
        self
    }
    /// Restrict to a namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.matcher.namespace = Some(ns.into());
        self
    }
    /// Restrict to a name glob.
    pub fn name(mut self, glob: &str) -> Self {
        self.matcher.name = Some(glob.into());
        self
    }
    /// Only watches / non-watches.
    pub fn watch(mut self, w: bool) -> Self {
        self.matcher.watch = Some(w);
        self
    }
    /// Restrict to a field manager.
    pub fn field_manager(mut self, m: &str) -> Self {
        self.matcher.field_manager = Some(m.into());
        self
    }
    /// Fire N times.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }
    /// Skip first N matches.
    pub fn after(mut self, n: u64) -> Self {
        self.after = n;
        self
    }
    /// Probability.
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = p;
        self
    }
    /// Latency.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }
}

/// The request facts rules match on.
#[derive(Debug, Clone, Default)]
pub struct RequestFacts {
    /// Verb.
    pub verb: String,
    /// Group.
    pub group: String,
    /// Resource.
    pub resource: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Subresource.
    pub subresource: String,
    /// Is a watch.
    pub watch: bool,
    /// Field manager.
    pub field_manager: String,
    /// Patch type.
    pub patch_type: String,
    /// User agent.
    pub user_agent: String,
}

/// Simple glob with `*` and `?`.
pub fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

impl Match {
    fn matches(&self, f: &RequestFacts) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == &f.verb))
            && eq(&self.group, &f.group)
            && eq(&self.resource, &f.resource)
            && eq(&self.namespace, &f.namespace)
            && self.name.as_deref().is_none_or(|g| glob(g, &f.name))
            && eq(&self.subresource, &f.subresource)
            && self.watch.is_none_or(|w| w == f.watch)
            && eq(&self.field_manager, &f.field_manager)
            && eq(&self.patch_type, &f.patch_type)
            && self
                .user_agent
                .as_deref()
                .is_none_or(|u| f.user_agent.starts_with(u))
    }
}

#[derive(Debug)]
struct Armed {
    rule: Rule,
    seen: u64,
    fired: u64,
}

/// The rule set with its seeded RNG.
#[derive(Debug)]
pub struct Faults {
    inner: Mutex<(Vec<Armed>, StdRng, u64)>,
}

impl Default for Faults {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Faults {
    /// Empty rule set with an RNG seed.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Mutex::new((Vec::new(), StdRng::seed_from_u64(seed), 0)),
        }
    }

    /// Add a rule; returns its id.
    pub fn add(&self, mut rule: Rule) -> String {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.2 += 1;
        if rule.id.is_empty() {
            rule.id = format!("r{}", g.2);
        }
        let id = rule.id.clone();
        g.0.push(Armed {
            rule,
            seen: 0,
            fired: 0,
        });
        id
    }

    /// Remove one rule.
    pub fn remove(&self, id: &str) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let before = g.0.len();
        g.0.retain(|a| a.rule.id != id);
        g.0.len() != before
    }

    /// Remove all rules.
    pub fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clear();
    }

    /// Reseed the RNG.
    pub fn seed(&self, seed: u64) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1 = StdRng::seed_from_u64(seed);
    }

    /// Current rules with fire counts.
    pub fn list(&self) -> Vec<(Rule, u64)> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .iter()
            .map(|a| (a.rule.clone(), a.fired))
            .collect()
    }

    /// How often a rule fired (None = unknown id; removed rules are unknown).
    pub fn fired(&self, id: &str) -> Option<u64> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .iter()
            .find(|a| a.rule.id == id)
            .map(|a| a.fired)
    }

    /// All rules that fire for this request (every matching rule is evaluated, so a latency rule
    /// and a status rule can combine).
    pub fn evaluate(&self, f: &RequestFacts) -> Vec<Rule> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (rules, rng, _) = &mut *g;
        let mut out = Vec::new();
        for a in rules.iter_mut() {
            if !a.rule.matcher.matches(f) {
                continue;
            }
            a.seen += 1;
            if a.seen <= a.rule.after {
                continue;
            }
            if a.rule.probability < 1.0 && rng.random::<f64>() >= a.rule.probability {
                continue;
            }
            a.fired += 1;
            out.push(a.rule.clone());
        }
        rules.retain(|a| a.rule.times.is_none_or(|t| a.fired < t));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_works() {
        assert!(glob("web-*", "web-abc"));
        assert!(!glob("web-*", "db-abc"));
        assert!(glob("a?c", "abc"));
        assert!(glob("*", ""));
    }

    #[test]
    fn times_after_probability() {
        let f = Faults::new(7);
        f.add(
            Rule::new(FaultAction::Delay)
                .verbs(&["get"])
                .times(2)
                .after(1),
        );
        let facts = RequestFacts {
            verb: "get".into(),
            ..Default::default()
        };
        let fired: Vec<usize> = (0..5).map(|_| f.evaluate(&facts).len()).collect();
        assert_eq!(fired, vec![0, 1, 1, 0, 0]);
        let f = Faults::new(7);
        f.add(Rule::new(FaultAction::Delay).probability(0.5));
        let n: usize = (0..1000).map(|_| f.evaluate(&facts).len()).sum();
        assert!((350..650).contains(&n), "{n}");
    }

    #[test]
    fn rule_json_shape() {
        let r: Rule = serde_json::from_str(
            r#"{"id":"r1","match":{"verbs":["update","patch"],"group":"discovery.k8s.io","resource":"endpointslices","namespace":"ns","name":"web-*"},
                "action":{"type":"status","code":429,"reason":"TooManyRequests","retryAfterSeconds":1},"times":3,"probability":1.0,"after":0,"delayMs":0}"#,
        )
        .unwrap();
        assert_eq!(r.times, Some(3));
        let stale: FaultAction =
            serde_json::from_str(r#"{"type":"staleList","revisions":5}"#).unwrap();
        assert_eq!(stale, FaultAction::StaleList { revisions: 5 });
        assert!(matches!(
            r.action,
            FaultAction::Status {
                code: 429,
                retry_after_seconds: Some(1),
                ..
            }
        ));
    }
}
