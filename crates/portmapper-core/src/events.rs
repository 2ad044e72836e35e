//! Events: every reason an Event of ours carries, as one enum, so the planner, the reconcile,
//! the migration steps and `render` name them from one list instead of string literals spread
//! over files; the Events a pass plans to publish ([`PlannedEvent`]); and the warn-once
//! [`Ledger`] that decides which of them are news.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::ObjectReference;

/// The reason of an Event about a PortMapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventReason {
    /// Warning: an ExternalName Service has no endpoints.
    ExternalNameUnsupported,
    /// Warning: `topology-mode: Auto` is not implemented.
    TopologyAwareHintsDisabled,
    /// Warning: a pod's address cannot be an endpoint.
    PodAddressRejected,
    /// Warning: the Service's Endpoints object belongs to another controller.
    EndpointsCollision,
    /// Warning: the legacy Endpoints object was cut at 1000 addresses.
    LegacyEndpointsTruncated,
    /// Warning: `spec.ports` names no port of the Service.
    UnknownPort,
    /// Warning: a slice name the plan wants is held by someone else.
    EndpointSliceNameCollision,
    /// Warning: the Service still has a selector (the native controllers publish too).
    SelectorStillPresent,
    /// Warning: Istio ambient consumers bypass the published slices.
    IstioAmbient,
    /// Warning: with `externalTrafficPolicy: Local`, load balancers send ports to nodes
    /// without local members of them.
    LocalTrafficPolicy,
    /// Warning: the API server sent a `Warning` header on our writes (once per text).
    ApiWarning,
    /// Normal: the Endpoints object is handed back to the native controller.
    LegacyEndpointsRelinquished,
    /// Warning: an abandoned Endpoints object is not adopted (`nativeCleanup` off).
    LegacyEndpointsNotAdopted,
    /// Warning: adopting the abandoned Endpoints object waits (it would lose ready addresses).
    LegacyEndpointsAdoptionDeferred,
    /// Normal: the native controller's abandoned Endpoints object was adopted.
    LegacyEndpointsAdopted,
    /// Warning: the native leftovers' cleanup waits until we publish.
    NativeCleanupDeferred,
    /// Normal: the native leftovers were deleted.
    NativeEndpointsCleanedUp,
    /// Warning: a gated pod was not published within `spec.readinessGate.timeoutSeconds`; its
    /// gate turned True (reason `TimedOut`).
    PublicationGateTimedOut,
    /// Warning: the PortMapping asks for more than an operator budget allows; it publishes
    /// nothing new.
    OverBudget,
}

impl EventReason {
    /// The reason as Events carry it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ExternalNameUnsupported => "ExternalNameUnsupported",
            Self::TopologyAwareHintsDisabled => "TopologyAwareHintsDisabled",
            Self::PodAddressRejected => "PodAddressRejected",
            Self::EndpointsCollision => "EndpointsCollision",
            Self::LegacyEndpointsTruncated => "LegacyEndpointsTruncated",
            Self::UnknownPort => "UnknownPort",
            Self::EndpointSliceNameCollision => "EndpointSliceNameCollision",
            Self::SelectorStillPresent => "SelectorStillPresent",
            Self::IstioAmbient => "IstioAmbient",
            Self::LocalTrafficPolicy => "LocalTrafficPolicy",
            Self::ApiWarning => "ApiWarning",
            Self::LegacyEndpointsRelinquished => "LegacyEndpointsRelinquished",
            Self::LegacyEndpointsNotAdopted => "LegacyEndpointsNotAdopted",
            Self::LegacyEndpointsAdoptionDeferred => "LegacyEndpointsAdoptionDeferred",
            Self::LegacyEndpointsAdopted => "LegacyEndpointsAdopted",
            Self::NativeCleanupDeferred => "NativeCleanupDeferred",
            Self::NativeEndpointsCleanedUp => "NativeEndpointsCleanedUp",
            Self::PublicationGateTimedOut => "PublicationGateTimedOut",
            Self::OverBudget => "OverBudget",
        }
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something the user should act on: published once per occurrence (see [`Ledger`]).
    Warning,
    /// A transition the operator made: published whenever a pass plans it.
    Normal,
}

/// An Event a pass publishes about its PortMapping.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedEvent {
    /// Warning or Normal.
    pub type_: EventType,
    /// Why.
    pub reason: EventReason,
    /// What makes a Warning news: it is published once per (reason, occurrence) while its cause
    /// lasts (a second squatter is a new occurrence, the same one at every retry is not).
    pub occurrence: String,
    /// The Event's note.
    pub note: String,
    /// The Event's secondary object (the squatter of a name collision).
    pub related: Option<ObjectReference>,
    /// The status the server holds says it already (a caveat True with this reason): recorded
    /// as seen, not published again, also after a restart or a leader change.
    pub announced: bool,
}

impl PlannedEvent {
    /// A Warning with one occurrence while its cause lasts.
    pub fn warning(reason: EventReason, note: impl Into<String>) -> Self {
        Self::warning_of(reason, "", note)
    }

    /// A Warning about `occurrence`.
    pub fn warning_of(
        reason: EventReason,
        occurrence: impl Into<String>,
        note: impl Into<String>,
    ) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            occurrence: occurrence.into(),
            note: note.into(),
            related: None,
            announced: false,
        }
    }

    /// A Normal Event.
    pub fn normal(reason: EventReason, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            ..Self::warning(reason, note)
        }
    }
}

/// The Warning occurrences already published for one PortMapping, by reason: the one warn-once
/// memory of the operator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger(BTreeMap<EventReason, BTreeSet<String>>);

impl Ledger {
    /// The events of one pass to publish, in order: every Normal one, and each Warning whose
    /// (reason, occurrence) is not in the ledger (unless `announced`). The reasons in `covers`
    /// are the ones the pass speaks for: each now holds exactly the occurrences of this pass,
    /// so a cause that cleared is re-armed and its next occurrence is news again. Occurrences
    /// of other reasons are added and kept until the ledger is dropped (API warnings: once per
    /// PortMapping).
    pub fn news<'e>(
        &mut self,
        events: &'e [PlannedEvent],
        covers: &[EventReason],
    ) -> Vec<&'e PlannedEvent> {
        let mut seen: BTreeMap<EventReason, BTreeSet<String>> = BTreeMap::new();
        let mut news = Vec::new();
        for event in events {
            if event.type_ == EventType::Normal {
                news.push(event);
                continue;
            }
            let known = self
                .0
                .get(&event.reason)
                .is_some_and(|o| o.contains(&event.occurrence));
            let first = seen
                .entry(event.reason)
                .or_default()
                .insert(event.occurrence.clone());
            if first && !known && !event.announced {
                news.push(event);
            }
        }
        for reason in covers {
            let now = seen.remove(reason).unwrap_or_default();
            if now.is_empty() {
                self.0.remove(reason);
            } else {
                self.0.insert(*reason, now);
            }
        }
        for (reason, occurrences) in seen {
            self.0.entry(reason).or_default().extend(occurrences);
        }
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::PlanWarning;

    fn reasons(news: &[&PlannedEvent]) -> Vec<(EventReason, String)> {
        news.iter()
            .map(|e| (e.reason, e.occurrence.clone()))
            .collect()
    }

    #[test]
    fn a_warning_is_news_once_per_occurrence_and_again_after_its_cause_cleared() {
        use EventReason as R;
        let mut ledger = Ledger::default();
        let covers = [R::EndpointSliceNameCollision, R::SelectorStillPresent];
        let a = PlannedEvent::warning_of(R::EndpointSliceNameCollision, "a", "held");
        let b = PlannedEvent::warning_of(R::EndpointSliceNameCollision, "b", "held");
        let selector = PlannedEvent::warning(R::SelectorStillPresent, "selector");
        let pass = [a.clone(), selector.clone()];
        assert_eq!(
            reasons(&ledger.news(&pass, &covers)),
            [
                (R::EndpointSliceNameCollision, "a".into()),
                (R::SelectorStillPresent, String::new())
            ]
        );
        assert!(
            ledger.news(&pass, &covers).is_empty(),
            "the same causes are not news"
        );
        // A second squatter is news; the first is not.
        let pass = [a.clone(), b.clone(), selector.clone()];
        assert_eq!(
            reasons(&ledger.news(&pass, &covers)),
            [(R::EndpointSliceNameCollision, "b".into())]
        );
        // Both causes clear, then come back: news again.
        assert!(ledger.news(&[], &covers).is_empty());
        assert_eq!(ledger.news(&[a, selector], &covers).len(), 2);
    }

    #[test]
    fn normal_events_always_go_and_uncovered_warnings_are_remembered_for_good() {
        use EventReason as R;
        let mut ledger = Ledger::default();
        let normal = PlannedEvent::normal(R::LegacyEndpointsAdopted, "adopted");
        let api = PlannedEvent::warning_of(R::ApiWarning, "deprecated", "deprecated");
        assert_eq!(ledger.news(&[normal.clone(), api.clone()], &[]).len(), 2);
        assert_eq!(
            reasons(&ledger.news(std::slice::from_ref(&normal), &[])),
            [(R::LegacyEndpointsAdopted, String::new())]
        );
        assert!(ledger.news(&[api], &[R::SelectorStillPresent]).is_empty());
    }

    #[test]
    fn an_announced_warning_is_recorded_but_not_published_and_a_repeat_in_one_pass_is_one_event() {
        use EventReason as R;
        let mut ledger = Ledger::default();
        let mut caveat = PlannedEvent::warning(R::IstioAmbient, "ambient");
        caveat.announced = true;
        assert!(
            ledger
                .news(&[caveat.clone()], &[R::IstioAmbient])
                .is_empty()
        );
        caveat.announced = false;
        assert!(ledger.news(&[caveat], &[R::IstioAmbient]).is_empty());
        let first = PlannedEvent::warning(R::EndpointsCollision, "from the migration");
        let second = PlannedEvent::warning(R::EndpointsCollision, "from the planner");
        let pass = [first, second];
        let news = ledger.news(&pass, &[R::EndpointsCollision]);
        assert_eq!(news.len(), 1);
        assert_eq!(news[0].note, "from the migration");
    }

    #[test]
    fn each_reason_is_its_name_and_each_warning_has_its_reason() {
        use EventReason as R;
        let all = [
            R::ExternalNameUnsupported,
            R::TopologyAwareHintsDisabled,
            R::PodAddressRejected,
            R::EndpointsCollision,
            R::LegacyEndpointsTruncated,
            R::UnknownPort,
            R::EndpointSliceNameCollision,
            R::SelectorStillPresent,
            R::IstioAmbient,
            R::LocalTrafficPolicy,
            R::ApiWarning,
            R::LegacyEndpointsRelinquished,
            R::LegacyEndpointsNotAdopted,
            R::LegacyEndpointsAdoptionDeferred,
            R::LegacyEndpointsAdopted,
            R::NativeCleanupDeferred,
            R::NativeEndpointsCleanedUp,
            R::PublicationGateTimedOut,
            R::OverBudget,
        ];
        for r in all {
            // The wire string is the variant's name: no typo can split one reason in two.
            assert_eq!(r.as_str(), format!("{r:?}"));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(
            PlanWarning::ForeignEndpoints.event_reason(),
            R::EndpointsCollision
        );
        assert_eq!(
            PlanWarning::ExternalName.event_reason().as_str(),
            "ExternalNameUnsupported"
        );
    }
}
