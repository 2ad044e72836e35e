//! What a PortMapping reports after a pass: its status (conditions, per-port status, summary)
//! and its Events, computed from the plan (or from why there is none) by pure functions. The
//! live reconcile and the offline `portmapper render` both call [`Report::of_plan`] and
//! [`Report::of_stall`], so they report the same conditions, in the same order, with the same
//! words; [`after_writes`] gives the status of a pass whose writes failed.

pub mod conditions;
pub mod due;
pub mod status;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use portmapper_api::status::condition_types as ct;
use portmapper_api::{PortMappingStatus, PortStatus};

pub use conditions::{Desired, merge};
pub use due::{StatusDue, status_due};

use crate::events::{EventReason, PlannedEvent};
use crate::planner::migration::Step;
use crate::planner::{GateTimeout, Plan, PlanWarning};
use crate::pod_record::PodRecord;

/// Why a pass publishes nothing new.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The spec fails validation (every error named).
    InvalidSpec(String),
    /// An older PortMapping publishes the Service.
    ServiceClaimed {
        /// That PortMapping.
        winner: String,
        /// The Service.
        service: String,
    },
    /// The Service does not exist: everything published is taken back.
    ServiceNotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        service: String,
    },
    /// The planner refused (a bug or a broken input: nothing is written).
    PlanFailed(String),
    /// Its pool's label key is over its namespace's cap on pod watches: its pods are not
    /// watched, so it plans nothing and keeps what it published.
    TooManyPodWatches {
        /// The namespace.
        namespace: String,
        /// Its pool's label key.
        key: String,
        /// The cap (`--max-pod-watches-per-namespace`).
        cap: usize,
    },
    /// It asks for more than one of the operator's budgets allows
    /// ([`crate::budget`]): what it published stays, nothing new is probed or written.
    OverBudget(crate::budget::OverBudget),
}

impl Stall {
    /// The reason of the conditions and of the gated pods' condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "InvalidSpec",
            Self::ServiceClaimed { .. } => "ServiceClaimed",
            Self::ServiceNotFound { .. } => "ServiceNotFound",
            Self::PlanFailed(_) => "PlanFailed",
            Self::TooManyPodWatches { .. } => "TooManyPodWatches",
            Self::OverBudget(over) => over.budget.reason(),
        }
    }

    /// The conditions it reports.
    pub fn conditions(&self) -> Vec<Desired> {
        match self {
            Self::InvalidSpec(message) | Self::PlanFailed(message) => {
                status::stalled(self.reason(), message.clone())
            }
            Self::ServiceClaimed { winner, service } => status::conflict(winner, service),
            Self::ServiceNotFound { namespace, service } => status::stalled(
                self.reason(),
                status::service_not_found_message(namespace, service),
            ),
            Self::TooManyPodWatches {
                namespace,
                key,
                cap,
            } => status::stalled(
                self.reason(),
                status::pod_watches_message(namespace, key, *cap),
            ),
            Self::OverBudget(over) => status::stalled(self.reason(), over.message()),
        }
    }

    /// The message of the publication gates it sets False on pods its slices do not publish.
    pub fn gate_message(&self, portmapping: &str) -> String {
        let detail = match self {
            Self::ServiceClaimed { winner, service } => {
                format!("PortMapping {winner} publishes Service {service}")
            }
            Self::InvalidSpec(message) | Self::PlanFailed(message) => message.clone(),
            Self::ServiceNotFound { namespace, service } => {
                status::service_not_found_message(namespace, service)
            }
            Self::OverBudget(over) => over.message(),
            Self::TooManyPodWatches {
                namespace,
                key,
                cap,
            } => status::pod_watches_message(namespace, key, *cap),
        };
        format!("PortMapping {portmapping} publishes nothing new: {detail}")
    }
}

/// The status a pass reports, before timestamps.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedStatus {
    /// In order: Ready, Reconciling, Stalled (and Conflict), then PortNotFound,
    /// SelectorMigration and ConsumerCaveat when they apply.
    pub conditions: Vec<Desired>,
    /// What it says of the published ports.
    pub publication: Publication,
}

/// What a status says of the published ports.
#[derive(Clone, Debug, PartialEq)]
pub enum Publication {
    /// What a plan publishes.
    Planned {
        /// Status per Service port.
        ports: Vec<PortStatus>,
        /// `http 3/4, https 2/4`.
        summary: String,
        /// The slices it publishes.
        endpoint_slices: i32,
    },
    /// Nothing is published any more.
    Withdrawn,
    /// Nothing new is planned: the ports, summary and slice count stay as they are.
    Unchanged,
}

impl PlannedStatus {
    /// The status to write, given the one the server holds: conditions merged (a condition's
    /// `lastTransitionTime` moves only when its status flips), ports as [`Publication`] says.
    pub fn to_status(
        &self,
        previous: &PortMappingStatus,
        generation: Option<i64>,
        now: Timestamp,
    ) -> PortMappingStatus {
        let (ports, summary, endpoint_slices) = match &self.publication {
            Publication::Planned {
                ports,
                summary,
                endpoint_slices,
            } => (
                ports.clone(),
                Some(summary.clone()).filter(|s| !s.is_empty()),
                Some(*endpoint_slices),
            ),
            Publication::Withdrawn => (Vec::new(), None, Some(0)),
            Publication::Unchanged => (
                previous.ports.clone(),
                previous.summary.clone(),
                previous.endpoint_slices,
            ),
        };
        PortMappingStatus {
            observed_generation: generation,
            conditions: merge(&previous.conditions, &self.conditions, generation, now),
            ports,
            summary,
            endpoint_slices,
        }
    }
}

/// The status of a pass whose writes failed (`failure` names every failed write), given the
/// conditions the server holds (`previous`): a plan reports `ApplyFailed` in place of its
/// Ready/Reconciling/Stalled triplet, unless it is stalled on a name collision, which only the
/// name's holder can end. A pass that publishes nothing new reports nothing: its error is
/// retried, and the status keeps what it said.
///
/// The ports, summary and slice count stay what was last reported: the plan's were not
/// published. And while the status already says `ApplyFailed`, its message stays: a failing
/// stretch writes its status when the failure is news, not whenever the churn changes the plan
/// or which write failed first (a backing-off pass stops at its first failure).
pub fn after_writes(
    planned: &PlannedStatus,
    failure: &str,
    previous: &[Condition],
) -> Option<PlannedStatus> {
    if !matches!(planned.publication, Publication::Planned { .. }) {
        return None;
    }
    let collision = planned
        .conditions
        .iter()
        .any(|c| c.type_ == ct::STALLED && c.reason == "NameCollision");
    if collision {
        return Some(planned.clone());
    }
    let reported = previous
        .iter()
        .find(|c| c.type_ == ct::READY && c.status == "False" && c.reason == status::APPLY_FAILED)
        .map_or(failure, |c| c.message.as_str());
    let mut conditions = status::apply_failed(reported);
    conditions.extend(
        planned
            .conditions
            .iter()
            .filter(|c| ![ct::READY, ct::RECONCILING, ct::STALLED].contains(&c.type_))
            .cloned(),
    );
    Some(PlannedStatus {
        conditions,
        publication: Publication::Unchanged,
    })
}

/// What a pass reports: its status and its Events.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The status, if every write succeeds ([`after_writes`] otherwise).
    pub status: PlannedStatus,
    /// The Events, in order.
    pub events: Vec<PlannedEvent>,
    /// The Warning reasons this pass speaks for: each is re-armed when the pass has no event
    /// of it ([`crate::events::Ledger::news`]).
    pub covers: Vec<EventReason>,
}

/// What the report of a plan reads besides the plan.
#[derive(Clone, Copy, Debug)]
pub struct PlanFacts<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// The Service it publishes.
    pub service: &'a Service,
    /// The pods it planned from (a superset of the pool will do).
    pub pods: &'a [&'a PodRecord],
    /// Whether a pod of the pool may be enrolled in Istio ambient mode: only then is the pool
    /// searched for that caveat.
    pub ambient: bool,
    /// The conditions the server holds: a caveat already reported True is not announced again.
    pub previous: &'a [Condition],
}

/// Whether a plan's report speaks for `reason`: a Warning of that reason it no longer plans is
/// re-armed ([`crate::Ledger::news`]). A match over every reason, so a new reason must be placed.
pub const fn plan_speaks_for(reason: EventReason) -> bool {
    use EventReason as R;
    match reason {
        R::OverBudget
        | R::ExternalNameUnsupported
        | R::TopologyAwareHintsDisabled
        | R::PodAddressRejected
        | R::EndpointsCollision
        | R::LegacyEndpointsTruncated
        | R::UnknownPort
        | R::EndpointSliceNameCollision
        | R::SelectorStillPresent
        | R::IstioAmbient
        | R::LocalTrafficPolicy
        | R::LegacyEndpointsNotAdopted
        | R::LegacyEndpointsAdoptionDeferred
        | R::NativeCleanupDeferred => true,
        // Each of the API server's warnings is announced once per PortMapping.
        R::ApiWarning => false,
        // Once per timed-out pod UID while the ledger lasts ([`gate_timeouts`]).
        R::PublicationGateTimedOut => false,
        // Normal Events are not ledgered.
        R::LegacyEndpointsRelinquished
        | R::LegacyEndpointsAdopted
        | R::NativeEndpointsCleanedUp => false,
    }
}

/// Every Warning reason a plan's report speaks for ([`plan_speaks_for`]).
pub fn plan_warnings() -> Vec<EventReason> {
    EventReason::ALL
        .iter()
        .copied()
        .filter(|r| plan_speaks_for(*r))
        .collect()
}

/// The Warning Event reasons of the consumer caveats, in the order they are reported.
pub const CAVEATS: [EventReason; 2] = [EventReason::IstioAmbient, EventReason::LocalTrafficPolicy];

impl Report {
    /// The report of a plan: conditions in the order [`PlannedStatus::conditions`] lists, and
    /// the Events of its migration steps, its name collisions (one per squatter, naming it as
    /// the related object), the selector still present, the consumer caveats and the planner
    /// warnings (one per reason, naming every occurrence).
    pub fn of_plan(facts: &PlanFacts<'_>) -> Self {
        let (plan, service) = (facts.plan, facts.service);
        let mut conditions = status::planned(plan);
        conditions.extend(status::port_not_found(plan));
        let mut events = migration_events(&plan.migration);
        events.extend(collision_events(plan, service));
        let selector = status::selector_migration(service);
        if let Some(selector) = &selector {
            let reason = EventReason::SelectorStillPresent;
            events.push(PlannedEvent::warning(reason, selector.message.clone()));
        }
        conditions.extend(selector);
        let caveats = consumer_caveats(facts);
        for (reason, message) in &caveats {
            let mut event = PlannedEvent::warning(*reason, message.clone());
            let reported = Desired::new(ct::CONSUMER_CAVEAT, true, reason.as_str(), message);
            event.announced = status::already_reported(facts.previous, &reported);
            events.push(event);
        }
        conditions.extend(status::consumer_caveat(&caveats));
        events.extend(warning_events(&plan.warnings));
        events.extend(gate_timeouts(
            &plan.gate_timeouts,
            service.metadata.namespace.as_deref(),
        ));
        Self {
            status: PlannedStatus {
                conditions,
                publication: Publication::Planned {
                    ports: plan.ports.clone(),
                    summary: plan.summary.clone(),
                    endpoint_slices: i32::try_from(plan.slices.len()).unwrap_or(i32::MAX),
                },
            },
            events,
            covers: plan_warnings(),
        }
    }

    /// The report of a pass that publishes nothing new: its conditions, and for a budget one
    /// Warning, announced once per budget while the PortMapping stays over it.
    pub fn of_stall(stall: &Stall) -> Self {
        let publication = match stall {
            Stall::ServiceNotFound { .. } => Publication::Withdrawn,
            _ => Publication::Unchanged,
        };
        let events = match stall {
            Stall::OverBudget(over) => vec![PlannedEvent::warning_of(
                EventReason::OverBudget,
                over.budget.flag(),
                format!("publishes nothing new: it {}", over.message()),
            )],
            _ => Vec::new(),
        };
        Self {
            status: PlannedStatus {
                conditions: stall.conditions(),
                publication,
            },
            events,
            covers: Vec::new(),
        }
    }
}

/// The Warning of a `Warning` header the API server sent on this PortMapping's writes (v1
/// Endpoints are deprecated, and every legacy Endpoints write says so): one per text.
pub fn api_warning(text: &str) -> PlannedEvent {
    PlannedEvent::warning_of(
        EventReason::ApiWarning,
        text,
        format!("the API server warns about this PortMapping's writes: {text}"),
    )
}

/// One Warning per pod whose publication gate timed out, naming it (the related object) and
/// what leaves it out; once per pod UID while the ledger lasts.
pub fn gate_timeouts(timeouts: &[GateTimeout], namespace: Option<&str>) -> Vec<PlannedEvent> {
    timeouts
        .iter()
        .map(|timeout| {
            let mut event = PlannedEvent::warning_of(
                EventReason::PublicationGateTimedOut,
                timeout.uid.clone(),
                timeout.to_string(),
            );
            event.related = Some(ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                namespace: namespace.map(str::to_owned),
                name: Some(timeout.pod.clone()),
                uid: Some(timeout.uid.clone()),
                ..ObjectReference::default()
            });
            event
        })
        .collect()
}

/// The Events of the migration steps, in step order.
fn migration_events(steps: &[Step]) -> Vec<PlannedEvent> {
    steps
        .iter()
        .filter_map(|step| match step {
            Step::Warn { reason, note } => Some(PlannedEvent::warning(*reason, note.clone())),
            Step::Normal { reason, note } => Some(PlannedEvent::normal(*reason, note.clone())),
            _ => None,
        })
        .collect()
}

/// One Warning per squatter object (name and UID: another object at the name is a new
/// occurrence), naming it as the related object: kube's Recorder folds repeats of a (reason,
/// regarding, related) into one series, so a second squatter is an Event of its own.
fn collision_events(plan: &Plan, service: &Service) -> Vec<PlannedEvent> {
    plan.collisions
        .iter()
        .map(|collision| {
            let uid = collision.held.uid.clone();
            let occurrence = format!("{}/{}", collision.name, uid.clone().unwrap_or_default());
            let mut event = PlannedEvent::warning_of(
                EventReason::EndpointSliceNameCollision,
                occurrence,
                collision.to_string(),
            );
            event.related = Some(ObjectReference {
                api_version: Some("discovery.k8s.io/v1".to_owned()),
                kind: Some("EndpointSlice".to_owned()),
                namespace: service.metadata.namespace.clone(),
                name: Some(collision.name.clone()),
                uid,
                ..ObjectReference::default()
            });
            event
        })
        .collect()
}

/// The consumers known to ignore this plan's per-port membership, each with its Warning Event
/// reason and message: published pods enrolled in Istio ambient (looked for only when
/// `ambient`), and a Service that routes external traffic to local endpoints only, with nodes
/// that lack members of some ports.
pub fn consumer_caveats(facts: &PlanFacts<'_>) -> Vec<(EventReason, String)> {
    use crate::consumers::{istio_ambient, local_traffic_policy};
    let ambient = facts
        .ambient
        .then(|| istio_ambient(facts.plan, facts.pods))
        .flatten()
        .map(|c| (EventReason::IstioAmbient, c.to_string()));
    let local = local_traffic_policy(facts.plan, facts.service)
        .map(|c| (EventReason::LocalTrafficPolicy, c.to_string()));
    ambient.into_iter().chain(local).collect()
}

/// One Warning per reason, naming every warning of it (three rejected pods are one Event that
/// names all three). Unknown ports are one occurrence per set of unmatched entries (a second
/// typo, or a Service port renamed while one is unknown, is news); the others are one
/// occurrence while they last.
fn warning_events(warnings: &[PlanWarning]) -> Vec<PlannedEvent> {
    let mut by_reason: BTreeMap<EventReason, Vec<String>> = BTreeMap::new();
    for warning in warnings {
        by_reason
            .entry(warning.event_reason())
            .or_default()
            .push(warning.to_string());
    }
    by_reason
        .into_iter()
        .map(|(reason, notes)| {
            let note = notes.join("; ");
            let occurrence = if reason == EventReason::UnknownPort {
                note.clone()
            } else {
                String::new()
            };
            PlannedEvent::warning_of(reason, occurrence, note)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HeldName;
    use crate::planner::{NameCollision, PlannedSlice};

    fn service(selector: bool) -> Service {
        let mut service = Service::default();
        service.metadata.name = Some("web".into());
        service.metadata.namespace = Some("ns".into());
        if selector {
            service.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
                selector: Some([("app".to_owned(), "web".to_owned())].into()),
                ..Default::default()
            });
        }
        service
    }

    fn facts<'a>(plan: &'a Plan, service: &'a Service) -> PlanFacts<'a> {
        PlanFacts {
            plan,
            service,
            pods: &[],
            ambient: false,
            previous: &[],
        }
    }

    fn types(status: &PlannedStatus) -> Vec<(&str, bool, &str)> {
        status
            .conditions
            .iter()
            .map(|c| (c.type_, c.status, c.reason.as_str()))
            .collect()
    }

    #[test]
    fn a_plan_reports_its_triplet_then_the_conditions_that_apply_in_a_fixed_order() {
        let plan = Plan {
            summary: "http 1/1".into(),
            slices: vec![PlannedSlice {
                slice: Default::default(),
                action: crate::WriteAction::Create,
                withdraws: false,
            }],
            warnings: vec![PlanWarning::UnknownPort {
                entries: vec!["htp".into()],
                service_ports: vec!["http".into()],
            }],
            ..Plan::default()
        };
        let svc = service(true);
        let report = Report::of_plan(&facts(&plan, &svc));
        assert_eq!(
            types(&report.status),
            [
                (ct::READY, true, "Published"),
                (ct::RECONCILING, false, "Published"),
                (ct::STALLED, false, "Published"),
                (ct::PORT_NOT_FOUND, true, "UnknownPort"),
                (ct::SELECTOR_MIGRATION, true, "SelectorStillPresent"),
            ]
        );
        let reasons: Vec<EventReason> = report.events.iter().map(|e| e.reason).collect();
        assert_eq!(
            reasons,
            [EventReason::SelectorStillPresent, EventReason::UnknownPort]
        );
        assert_eq!(report.events[1].occurrence, report.events[1].note);
        let Publication::Planned {
            endpoint_slices, ..
        } = report.status.publication
        else {
            panic!("a plan publishes")
        };
        assert_eq!(endpoint_slices, 1);
    }

    #[test]
    fn a_collision_stalls_the_plan_and_names_each_squatter_once() {
        let held = |uid: &str| HeldName {
            uid: Some(uid.into()),
            holder: "managed by someone-else".into(),
        };
        let plan = Plan {
            collisions: vec![
                NameCollision {
                    name: "web.http".into(),
                    held: held("a"),
                },
                NameCollision {
                    name: "web.https".into(),
                    held: held("b"),
                },
            ],
            ..Plan::default()
        };
        let svc = service(false);
        let report = Report::of_plan(&facts(&plan, &svc));
        assert_eq!(report.status.conditions[2].reason, "NameCollision");
        assert_eq!(
            report.status.conditions[0].message,
            "EndpointSlice web.http already exists (managed by someone-else); EndpointSlice web.https already exists (managed by someone-else)"
        );
        let related: Vec<_> = report
            .events
            .iter()
            .map(|e| {
                (
                    e.occurrence.as_str(),
                    e.related.as_ref().and_then(|r| r.uid.as_deref()),
                )
            })
            .collect();
        assert_eq!(
            related,
            [("web.http/a", Some("a")), ("web.https/b", Some("b"))]
        );
        // A failed write does not hide the collision: only its holder can end it.
        assert_eq!(
            after_writes(&report.status, "boom", &[]),
            Some(report.status)
        );
    }

    #[test]
    fn failed_writes_replace_the_triplet_of_a_plan_and_report_nothing_for_a_stall() {
        let plan = Plan::default();
        let svc = service(true);
        let report = Report::of_plan(&facts(&plan, &svc));
        let failed = after_writes(&report.status, "2 writes failed: x; y", &[]).unwrap();
        assert_eq!(
            types(&failed),
            [
                (ct::READY, false, "ApplyFailed"),
                (ct::RECONCILING, true, "ApplyFailed"),
                (ct::STALLED, false, "ApplyFailed"),
                (ct::SELECTOR_MIGRATION, true, "SelectorStillPresent"),
            ]
        );
        assert_eq!(failed.conditions[0].message, "2 writes failed: x; y");
        // The plan's counts were not published: the status keeps the last reported ones.
        assert_eq!(failed.publication, Publication::Unchanged);
        let stall = Stall::ServiceNotFound {
            namespace: "ns".into(),
            service: "web".into(),
        };
        assert_eq!(
            after_writes(&Report::of_stall(&stall).status, "x", &[]),
            None
        );
    }

    /// Under churn a failing PortMapping's plan changes every pass, and a backing-off pass names
    /// only its first failure: neither is news once the status says the writes fail.
    #[test]
    fn a_status_that_already_says_the_writes_fail_keeps_its_message() {
        let plan = Plan::default();
        let svc = service(false);
        let report = Report::of_plan(&facts(&plan, &svc));
        let now = Timestamp::UNIX_EPOCH;
        let first = after_writes(&report.status, "2 writes failed: x; y", &[]).unwrap();
        let held = first.to_status(&PortMappingStatus::default(), Some(1), now);
        let again = after_writes(&report.status, "x", &held.conditions).unwrap();
        assert_eq!(again, first);
        assert_eq!(again.to_status(&held, Some(1), now), held);
        // Once the status says something else (Ready, or another reason), the failure is news.
        let ready = report
            .status
            .to_status(&PortMappingStatus::default(), Some(1), now);
        let news = after_writes(&report.status, "x", &ready.conditions).unwrap();
        assert_eq!(news.conditions[0].message, "x");
    }

    #[test]
    fn a_stall_keeps_or_clears_the_published_ports_and_names_why_on_the_gates() {
        let previous = PortMappingStatus {
            summary: Some("http 1/1".into()),
            endpoint_slices: Some(1),
            ..PortMappingStatus::default()
        };
        let claimed = Stall::ServiceClaimed {
            winner: "old".into(),
            service: "web".into(),
        };
        let status =
            Report::of_stall(&claimed)
                .status
                .to_status(&previous, Some(2), Timestamp::UNIX_EPOCH);
        assert_eq!(status.summary.as_deref(), Some("http 1/1"));
        assert_eq!(status.conditions.len(), 4, "Conflict too");
        assert_eq!(
            claimed.gate_message("new"),
            "PortMapping new publishes nothing new: PortMapping old publishes Service web"
        );
        let gone = Stall::ServiceNotFound {
            namespace: "ns".into(),
            service: "web".into(),
        };
        let status =
            Report::of_stall(&gone)
                .status
                .to_status(&previous, Some(2), Timestamp::UNIX_EPOCH);
        assert_eq!((status.summary, status.endpoint_slices), (None, Some(0)));
        assert_eq!(status.observed_generation, Some(2));
    }
}
