//! The conditions a PortMapping reports for each outcome, and the messages they carry: one
//! function per outcome, so every caller (the live reconcile, `portmapper render`) reports the
//! same triplet with the same words.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_validation::field::FieldError;
use portmapper_api::PortMapping;
use portmapper_api::status::condition_types as ct;

use super::conditions::Desired;
use crate::planner::migration::has_selector;
use crate::planner::{Plan, PlanWarning};
use crate::{ClaimRank, EventReason};

/// Why a PortMapping's pool is not watched: its label key is over its namespace's cap.
pub fn pod_watches_message(namespace: &str, key: &str, cap: usize) -> String {
    format!(
        "pod label key {key:?} is not watched: the operator watches at most {cap} label keys \
         per namespace (--max-pod-watches-per-namespace), and older PortMappings of namespace \
         {namespace} use {cap} others"
    )
}

/// Ready=False, Reconciling=False, Stalled=True: a user must change something.
pub fn stalled(reason: &str, message: String) -> Vec<Desired> {
    vec![
        Desired::new(ct::READY, false, reason, message.clone()),
        Desired::new(ct::RECONCILING, false, reason, "waiting for a change"),
        Desired::new(ct::STALLED, true, reason, message),
    ]
}

/// The `InvalidSpec` message for these validation errors, `None` when there are none.
pub fn invalid_spec_message(errors: &[FieldError]) -> Option<String> {
    (!errors.is_empty()).then(|| {
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// The message of a PortMapping that lost its Service to an older one (`winner`).
pub fn conflict_message(winner: &str, service: &str) -> String {
    format!(
        "PortMapping {winner} already publishes Service {service}; this one writes nothing until it is removed"
    )
}

/// The conditions of a PortMapping that lost its Service to an older one.
pub fn conflict(winner: &str, service: &str) -> Vec<Desired> {
    let message = conflict_message(winner, service);
    let mut conditions = stalled("ServiceClaimed", message.clone());
    conditions.push(Desired::new(ct::CONFLICT, true, "ServiceClaimed", message));
    conditions
}

/// Among the PortMappings of `pm`'s namespace naming the same Service, the one
/// [`crate::publisher`] names (the oldest by creation time, then name; being deleted ones
/// never win), as the running operator's index decides it. `Some(winner)` when that is not
/// `pm`.
pub fn conflict_winner<'a>(
    pm: &PortMapping,
    all: impl IntoIterator<Item = &'a PortMapping>,
) -> Option<String> {
    let ns = &pm.metadata.namespace;
    let claims: Vec<(&PortMapping, ClaimRank, bool)> = all
        .into_iter()
        .filter(|p| &p.metadata.namespace == ns && p.spec.service_ref == pm.spec.service_ref)
        .map(|p| {
            (
                p,
                ClaimRank::of(&p.metadata),
                p.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect();
    crate::publisher(
        claims
            .iter()
            .map(|(p, rank, deleting)| (*p, rank, *deleting)),
    )
    .filter(|winner| {
        winner.metadata.uid != pm.metadata.uid || winner.metadata.name != pm.metadata.name
    })
    .map(|winner| winner.metadata.name.clone().unwrap_or_default())
}

/// The `ServiceNotFound` message.
pub fn service_not_found_message(namespace: &str, service: &str) -> String {
    format!("Service {namespace}/{service} does not exist; no endpoints are published")
}

/// Ready=True, Reconciling=False, Stalled=False after every write succeeded.
pub fn published(summary: &str) -> Vec<Desired> {
    let message = format!(
        "published {}",
        if summary.is_empty() {
            "no ports"
        } else {
            summary
        }
    );
    vec![
        Desired::new(ct::READY, true, "Published", message),
        Desired::new(ct::RECONCILING, false, "Published", "up to date"),
        Desired::new(ct::STALLED, false, "Published", "up to date"),
    ]
}

/// The conditions of a plan: a slice it wants at a name someone else holds makes it stalled
/// (`NameCollision`, every collision named); otherwise published, or, for an ExternalName
/// Service, which has no endpoints, stalled until the Service changes type (a PortMapping
/// that can publish nothing is not Ready).
pub fn planned(plan: &Plan) -> Vec<Desired> {
    if !plan.collisions.is_empty() {
        return name_collision(plan);
    }
    if plan.warnings.contains(&PlanWarning::ExternalName) {
        return stalled("ExternalName", PlanWarning::ExternalName.to_string());
    }
    published(&plan.summary)
}

/// Ready=False, Reconciling=False, Stalled=True (`NameCollision`): names the plan wants are
/// held by others, and only their holders can free them.
fn name_collision(plan: &Plan) -> Vec<Desired> {
    let message = plan
        .collisions
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    const REASON: &str = "NameCollision";
    vec![
        Desired::new(ct::READY, false, REASON, message.clone()),
        Desired::new(
            ct::RECONCILING,
            false,
            REASON,
            "waiting for the name to be freed",
        ),
        Desired::new(ct::STALLED, true, REASON, message),
    ]
}

/// The reason of [`apply_failed`]'s conditions.
pub const APPLY_FAILED: &str = "ApplyFailed";

/// Ready=False, Reconciling=True, Stalled=False (`ApplyFailed`): writes failed (`failure`
/// names each) and are retried.
pub fn apply_failed(failure: &str) -> Vec<Desired> {
    vec![
        Desired::new(ct::READY, false, APPLY_FAILED, failure),
        Desired::new(
            ct::RECONCILING,
            true,
            APPLY_FAILED,
            "retrying the failed writes",
        ),
        Desired::new(ct::STALLED, false, APPLY_FAILED, "retrying"),
    ]
}

/// `PortNotFound=True` (reason `UnknownPort`) while `spec.ports` names ports the Service lacks.
/// Ready is left to the outcome: the other ports still publish, and a condition that is only
/// there while something is wrong (as `Conflict`) is what `kubectl wait` and dashboards read.
pub fn port_not_found(plan: &Plan) -> Option<Desired> {
    plan.warnings.iter().find_map(|w| {
        matches!(w, PlanWarning::UnknownPort { .. }).then(|| {
            Desired::new(
                ct::PORT_NOT_FOUND,
                true,
                EventReason::UnknownPort.as_str(),
                w.to_string(),
            )
        })
    })
}

/// The `SelectorMigration` condition while the Service still has a selector (its message is
/// also the `SelectorStillPresent` Warning Event's note).
pub fn selector_migration(service: &Service) -> Option<Desired> {
    has_selector(service).then(|| {
        let message = format!(
            "Service {} still has a selector: the native controller publishes its own EndpointSlices beside ours; remove the selector to finish the migration",
            service.metadata.name.as_deref().unwrap_or_default()
        );
        Desired::new(
            ct::SELECTOR_MIGRATION,
            true,
            EventReason::SelectorStillPresent.as_str(),
            message,
        )
    })
}

/// `ConsumerCaveat=True` while a consumer is known to ignore this plan's per-port membership,
/// with the first caveat's reason and every caveat's message. Absent otherwise, like
/// `SelectorMigration`.
pub fn consumer_caveat(caveats: &[(EventReason, String)]) -> Option<Desired> {
    let (reason, _) = caveats.first()?;
    let message = caveats
        .iter()
        .map(|(_, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("; also: ");
    Some(Desired::new(
        ct::CONSUMER_CAVEAT,
        true,
        reason.as_str(),
        message,
    ))
}

/// Whether `previous` already reports `desired` as True with the same reason: the Event of a
/// caveat goes out on the transition only, also across restarts and leader changes (the
/// in-memory warn-once ledger starts empty there).
pub fn already_reported(previous: &[Condition], desired: &Desired) -> bool {
    previous
        .iter()
        .any(|c| c.type_ == desired.type_ && c.status == "True" && c.reason == desired.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::conditions::merge;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn pm(name: &str, service: &str, created: Option<i64>) -> PortMapping {
        let mut pm = test_support::port_mapping(name, "ns", test_support::spec(service, "g"));
        pm.metadata.creation_timestamp = created.map(|s| Time(Timestamp::from_second(s).unwrap()));
        pm
    }

    #[test]
    fn oldest_then_name_wins_the_service() {
        let a = pm("a", "svc", Some(20));
        let b = pm("b", "svc", Some(10));
        let c = pm("c", "other", Some(1));
        let all = [a.clone(), b.clone(), c.clone()];
        assert_eq!(conflict_winner(&a, &all), Some("b".into()));
        assert_eq!(conflict_winner(&b, &all), None);
        assert_eq!(conflict_winner(&c, &all), None);
        // Without creation times (offline manifests) the name decides.
        let (x, y) = (pm("x", "svc", None), pm("y", "svc", None));
        let all = [y.clone(), x.clone()];
        assert_eq!(conflict_winner(&y, &all), Some("x".into()));
        assert_eq!(conflict_winner(&x, &all), None);
    }

    #[test]
    fn a_caveat_already_true_with_its_reason_is_not_announced_again() {
        let ambient = EventReason::IstioAmbient.as_str();
        let caveat = Desired::new(ct::CONSUMER_CAVEAT, true, ambient, "now");
        let previous = merge(
            &[],
            std::slice::from_ref(&caveat),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        assert!(already_reported(&previous, &caveat));
        let other_reason = Desired::new(ct::CONSUMER_CAVEAT, true, "Other", "x");
        assert!(!already_reported(&previous, &other_reason));
        let was_false = merge(
            &[],
            &[Desired::new(ct::CONSUMER_CAVEAT, false, ambient, "")],
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        assert!(!already_reported(&was_false, &caveat));
        assert!(!already_reported(&[], &caveat));
    }

    #[test]
    fn published_names_the_summary() {
        let c = published("http 1/2");
        assert_eq!(c[0].message, "published http 1/2");
        assert!(c[0].status);
        assert_eq!(published("")[0].message, "published no ports");
    }

    #[test]
    fn every_triplet_sets_ready_reconciling_and_stalled_in_that_order() {
        for triplet in [
            stalled("X", "m".into()),
            published("s"),
            apply_failed("f"),
            conflict("w", "s")[..3].to_vec(),
        ] {
            let types: Vec<&str> = triplet.iter().map(|d| d.type_).collect();
            assert_eq!(types, [ct::READY, ct::RECONCILING, ct::STALLED]);
        }
    }
}
