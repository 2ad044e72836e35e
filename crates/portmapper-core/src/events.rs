//! Event reasons: every reason an Event of ours carries, as one enum, so the planner, the
//! reconcile, the migration steps and `render` name them from one list instead of string
//! literals spread over files.

use std::fmt;

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
        }
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::PlanWarning;

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
