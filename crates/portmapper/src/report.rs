//! What a PortMapping reports for each outcome: its conditions, conflict resolution and the
//! Event reason of each planner warning. Pure, so the live reconcile and the offline
//! `portmapper render` preview report exactly the same status.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use kube_validation::field::FieldError;
use portmapper_api::PortMapping;
use portmapper_api::status::condition_types as ct;
use portmapper_core::planner::PlanWarning;
use portmapper_core::{ClaimRank, EventReason};

use crate::conditions::Desired;

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

/// The conditions of a PortMapping that lost its Service to an older one.
pub fn conflict(winner: &str, service: &str) -> Vec<Desired> {
    let message = format!(
        "PortMapping {winner} already publishes Service {service}; this one writes nothing until it is removed"
    );
    let mut conditions = stalled("ServiceClaimed", message.clone());
    conditions.push(Desired::new(ct::CONFLICT, true, "ServiceClaimed", message));
    conditions
}

/// Among the PortMappings of `pm`'s namespace naming the same Service, the one
/// [`portmapper_core::publisher`] names (the oldest by creation time, then name; being deleted
/// ones never win), as the running operator's index decides it. `Some(winner)` when that is
/// not `pm`.
pub fn conflict_winner<'a>(
    pm: &PortMapping,
    all: impl IntoIterator<Item = &'a PortMapping>,
) -> Option<String> {
    let ns = pm.namespace();
    let claims: Vec<(&PortMapping, ClaimRank, bool)> = all
        .into_iter()
        .filter(|p| p.namespace() == ns && p.spec.service_ref == pm.spec.service_ref)
        .map(|p| {
            (
                p,
                ClaimRank::of(p.meta()),
                p.meta().deletion_timestamp.is_some(),
            )
        })
        .collect();
    portmapper_core::publisher(
        claims
            .iter()
            .map(|(p, rank, deleting)| (*p, rank, *deleting)),
    )
    .filter(|winner| winner.uid() != pm.uid() || winner.name_any() != pm.name_any())
    .map(|winner| winner.name_any())
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

/// The conditions of a plan whose writes all succeeded: published, or — for an ExternalName
/// Service, which has no endpoints — stalled until the Service changes type (a PortMapping
/// that can publish nothing is not Ready).
pub fn planned(plan: &portmapper_core::Plan) -> Vec<Desired> {
    if plan.warnings.contains(&PlanWarning::ExternalName) {
        return stalled("ExternalName", PlanWarning::ExternalName.to_string());
    }
    published(&plan.summary)
}

/// `PortNotFound=True` (reason `UnknownPort`) while `spec.ports` names ports the Service lacks.
/// Ready is left to the outcome: the other ports still publish, and a condition that is only
/// there while something is wrong (as `Conflict`) is what `kubectl wait` and dashboards read.
pub fn port_not_found(plan: &portmapper_core::Plan) -> Option<Desired> {
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

/// Whether the Service still has a (non-empty) selector.
pub fn has_selector(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty())
}

/// The `SelectorMigration` condition while the Service still has a selector (its message is
/// also the `SelectorStillPresent` Warning Event's note).
pub fn selector_migration(service: &Service) -> Option<Desired> {
    has_selector(service).then(|| {
        let message = format!(
            "Service {} still has a selector: the native controller publishes its own EndpointSlices beside ours; remove the selector to finish the migration",
            service.name_any()
        );
        Desired::new(
            ct::SELECTOR_MIGRATION,
            true,
            EventReason::SelectorStillPresent.as_str(),
            message,
        )
    })
}

/// The condition reason (and Warning Event reason) of the Istio ambient caveat.
pub const ISTIO_AMBIENT: &str = EventReason::IstioAmbient.as_str();

/// The Warning Event reasons of the consumer caveats.
pub const CAVEATS: [EventReason; 2] = [EventReason::IstioAmbient, EventReason::LocalTrafficPolicy];

/// The consumers known to ignore this plan's per-port membership, each with its Warning Event
/// reason and message: published pods enrolled in Istio ambient (looked for only when `ambient`:
/// the pool has enrolled pods), and a Service that routes external traffic to local endpoints
/// only, with nodes that lack members of some ports.
pub fn consumer_caveats(
    plan: &portmapper_core::Plan,
    pods: &[&portmapper_core::PodRecord],
    service: &Service,
    ambient: bool,
) -> Vec<(EventReason, String)> {
    use portmapper_core::consumers::{istio_ambient, local_traffic_policy};
    let ambient = ambient
        .then(|| istio_ambient(plan, pods))
        .flatten()
        .map(|c| (EventReason::IstioAmbient, c.to_string()));
    let local = local_traffic_policy(plan, service)
        .map(|c| (EventReason::LocalTrafficPolicy, c.to_string()));
    ambient.into_iter().chain(local).collect()
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
/// in-memory warn-once set starts empty there).
pub fn already_reported(previous: &[Condition], desired: &Desired) -> bool {
    previous
        .iter()
        .any(|c| c.type_ == desired.type_ && c.status == "True" && c.reason == desired.reason)
}

/// The Warning Event reason of a planner warning.
pub fn warning_reason(warning: &PlanWarning) -> EventReason {
    warning.event_reason()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let caveat = Desired::new(ct::CONSUMER_CAVEAT, true, ISTIO_AMBIENT, "now");
        let previous = crate::conditions::merge(
            &[],
            std::slice::from_ref(&caveat),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        assert!(already_reported(&previous, &caveat));
        let other_reason = Desired::new(ct::CONSUMER_CAVEAT, true, "Other", "x");
        assert!(!already_reported(&previous, &other_reason));
        let was_false = crate::conditions::merge(
            &[],
            &[Desired::new(ct::CONSUMER_CAVEAT, false, ISTIO_AMBIENT, "")],
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
}
