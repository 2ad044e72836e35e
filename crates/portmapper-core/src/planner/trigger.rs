//! `endpoints.kubernetes.io/last-change-trigger-time` of a written slice: when the change that
//! caused the write happened, not when the operator wrote it (kube-proxy's
//! `network_programming_duration_seconds` is measured from it).
//!
//! The native controller (`pkg/controller/util/endpoint/trigger_time_tracker.go`) remembers, per
//! Service, the Ready `lastTransitionTime` of every pod at its previous sync, and stamps the
//! changes seen since then. The planner is pure and keeps no memory between passes, so the slice
//! being rewritten is that memory: its own trigger time says which changes it already reflects.
//! For every endpoint the write adds, changes or removes, the cause is the pod's latest
//! timestamped transition newer than that (creation, deletion request, `lastTransitionTime` of a
//! condition the port's checks read); when none is newer, the cause carries no timestamp (an
//! annotation or label edit, a probe verdict: `NetworkDecisions` carry no time, a pod that is
//! gone) and the operator's observation — `now`, the reconcile that saw it — stands in. A write
//! caused by the slice's metadata or port (a Service or PortMapping change) is stamped `now` too:
//! the caches keep no managedFields, so the reconcile is the first time the operator can name.
//! A created slice is stamped `now` for the same reason. The slice's trigger time is the latest
//! cause, never later than `now`.
//!
//! Upstream stamps the *earliest* change since its previous sync; issue 12 asks for the latest
//! cause of the write, which is what this does (equal whenever one change caused the write).

use std::collections::{HashMap, HashSet};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use portmapper_api::{Check, CheckKind, LeafCheck};

use super::objects::{ANNOTATION_TRIGGER_TIME, DesiredEndpoint};
use crate::check::read_condition;
use crate::compact_slice::{CompactEndpoint, CompactSlice};
use crate::membership::PortRules;
use crate::pod_record::PodRecord;

/// The pod conditions whose transitions can change a port's membership under `rules` (see
/// [`read_condition`]).
pub(crate) fn read_conditions<'a>(rules: PortRules<'a>) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    let mut add = |kind: CheckKind<'a>| match kind {
        CheckKind::Api(kind) => out.extend(read_condition(kind)),
        CheckKind::Network(_) => {}
        CheckKind::AnyOf(leaves) => {
            for kind in leaves.iter().filter_map(LeafCheck::kind) {
                if let CheckKind::Api(kind) = kind {
                    out.extend(read_condition(kind));
                }
            }
        }
    };
    for kind in rules.checks().iter().filter_map(Check::kind) {
        add(kind);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The latest timestamped transition of `pod` strictly after `after` (all of them without
/// `after`): creation, the deletion request, and the `lastTransitionTime` of `conditions`.
pub(crate) fn pod_transition(
    pod: &PodRecord,
    conditions: &[&str],
    after: Option<Timestamp>,
) -> Option<Timestamp> {
    // deletionTimestamp is when the grace period ends (in the future while terminating); the
    // request was made a grace period earlier.
    let deletion = pod.deletion_timestamp.map(|t| {
        let grace = pod.deletion_grace_period_seconds.unwrap_or(0).max(0);
        t.checked_sub(SignedDuration::from_secs(grace)).unwrap_or(t)
    });
    let condition_times = pod
        .conditions
        .iter()
        .filter(|c| conditions.contains(&&*c.type_))
        .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0));
    pod.creation_timestamp
        .into_iter()
        .chain(deletion)
        .chain(condition_times)
        .filter(|t| after.is_none_or(|a| *t > a))
        .max()
}

/// The trigger time a live slice carries, if it parses.
pub(crate) fn live_trigger_time(slice: &CompactSlice) -> Option<Timestamp> {
    slice
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_TRIGGER_TIME)?
        .parse()
        .ok()
}

/// One chunk about to be written.
pub(crate) struct WrittenChunk<'x, 'a> {
    /// The desired endpoints of its group.
    pub desired: &'x [DesiredEndpoint<'a>],
    /// Indices into `desired` of the chunk's endpoints.
    pub endpoints: &'x [usize],
    /// The live slice it rewrites (None: created).
    pub live: Option<&'x CompactSlice>,
    /// The live slice's metadata or port differ from the desired ones.
    pub drift: bool,
}

/// The trigger time of one written chunk (see the module docs).
pub(crate) fn chunk_trigger_time(
    chunk: &WrittenChunk<'_, '_>,
    pool: &[&PodRecord],
    conditions: &[&str],
    now: Timestamp,
) -> Timestamp {
    // A slice that did not exist is caused by the PortMapping, the Service or a new slice set
    // (a port, a family, a target): none of them carries a time in the inputs, and pods' old
    // transitions were never waiting for this slice, so the observation stands.
    let Some(live) = chunk.live else {
        return now;
    };
    let after = live_trigger_time(live);
    let live_endpoints: &[CompactEndpoint] = &live.endpoints;
    let live_by_uid: HashMap<&str, &CompactEndpoint> = live_endpoints
        .iter()
        .filter_map(|e| Some((e.target_uid()?, e)))
        .collect();
    // A cause without a timestamp of its own was observed by this reconcile.
    let cause = |pod: Option<&PodRecord>| {
        pod.and_then(|p| pod_transition(p, conditions, after))
            .unwrap_or(now)
    };
    let mut latest: Option<Timestamp> = None;
    let mut note = |t: Timestamp| latest = Some(latest.map_or(t, |l| l.max(t)));
    if chunk.drift {
        note(now);
    }
    let mut kept: HashSet<&str> = HashSet::new();
    for &i in chunk.endpoints {
        let d = &chunk.desired[i];
        kept.insert(d.uid());
        match live_by_uid.get(d.uid()) {
            Some(l) if d.same_as(l) => {}
            _ => note(cause(Some(d.facts.pod))),
        }
    }
    let removed: Vec<&str> = live_endpoints
        .iter()
        .map(|e| e.target_uid().unwrap_or_default())
        .filter(|uid| !kept.contains(uid))
        .collect();
    // A flip removes one endpoint or a few: scanning the pool for them is cheaper than a map of
    // every pool pod per written chunk (10,000 hashed UIDs for one pod at 10,000 pods).
    let find = |uid: &str| pool.iter().copied().find(|p| p.uid == uid);
    if removed.len() <= 8 {
        for uid in removed {
            note(cause(find(uid)));
        }
    } else {
        let by_uid: HashMap<&str, &PodRecord> = pool
            .iter()
            .filter(|p| !p.uid.is_empty())
            .map(|p| (p.uid.as_str(), *p))
            .collect();
        for uid in removed {
            note(cause(by_uid.get(uid).copied()));
        }
    }
    // Never later than the write (clocks of kubelets may run ahead of ours).
    latest.unwrap_or(now).min(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use portmapper_api::Check;
    use portmapper_api::check::{LeafCheck, PodConditionCheck};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn pod(created: i64, conditions: &[(&str, i64)]) -> PodRecord {
        Pod {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(ts(created))),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, at)| PodCondition {
                            type_: (*t).into(),
                            status: "True".into(),
                            last_transition_time: Some(Time(ts(*at))),
                            ..PodCondition::default()
                        })
                        .collect(),
                ),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
        .into()
    }

    #[test]
    fn only_the_conditions_the_checks_read_count() {
        let p = pod(100, &[("Ready", 200), ("example.com/joined", 300)]);
        assert_eq!(pod_transition(&p, &["Ready"], None), Some(ts(200)));
        assert_eq!(
            pod_transition(&p, &["Ready", "example.com/joined"], None),
            Some(ts(300))
        );
        assert_eq!(pod_transition(&p, &[], None), Some(ts(100)));
        // Only transitions after what the slice already reflects.
        assert_eq!(pod_transition(&p, &["Ready"], Some(ts(200))), None);
    }

    #[test]
    fn the_deletion_request_is_the_deletion_timestamp_minus_the_grace_period() {
        let mut p = pod(100, &[]);
        p.deletion_timestamp = Some(ts(530));
        p.deletion_grace_period_seconds = Some(30);
        assert_eq!(pod_transition(&p, &[], None), Some(ts(500)));
    }

    #[test]
    fn read_conditions_walk_any_of_and_name_each_condition_once() {
        let check = |c: PodConditionCheck| Check {
            pod_condition: Some(c),
            ..Check::default()
        };
        let joined = PodConditionCheck {
            type_: "example.com/joined".into(),
            ..PodConditionCheck::default()
        };
        let any_of = Check {
            any_of: Some(vec![
                LeafCheck {
                    pod_ready: Some(Default::default()),
                    ..LeafCheck::default()
                },
                LeafCheck {
                    container_ready: Some(Default::default()),
                    ..LeafCheck::default()
                },
            ]),
            ..Check::default()
        };
        let checks = vec![Check::pod_ready(), check(joined), any_of];
        assert_eq!(
            read_conditions(PortRules::Checks(&checks)),
            vec!["ContainersReady", "Ready", "example.com/joined"]
        );
        assert!(read_conditions(PortRules::PublishNothing).is_empty());
    }
}
