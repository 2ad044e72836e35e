//! The pass of a stalled PortMapping: it publishes nothing new. Its slices stay (gated pods
//! they publish keep their condition), or, with the Service gone, everything is taken back.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::planner;
use portmapper_core::report::{Report, Stall, gate_timeouts};
use portmapper_core::writes::Phases;

use crate::reconcile::again::{at_deadline, soon};
use crate::reconcile::context::Context;
use crate::reconcile::departed::Departed;
use crate::reconcile::execute::Pass;
use crate::reconcile::gather::Gates;

/// A pass that publishes nothing new, and what it has.
pub struct Stalled<'a> {
    pub stall: &'a Stall,
    pub live: &'a [Arc<EndpointSlice>],
    pub endpoints: &'a [Arc<Endpoints>],
    pub gates: &'a Gates,
}

impl Stalled<'_> {
    /// The gates of its pods not published any more (and, with the Service gone, the teardown
    /// first), and how soon to look again.
    pub fn planned(
        &self,
        ctx: &Context,
        pm: &PortMapping,
        key: &ObjectRef<PortMapping>,
        departed: Departed,
    ) -> (Pass, Option<Duration>) {
        let (stall, live, gates) = (self.stall, self.live, self.gates);
        let pods = gates.pods();
        let (phases, changes) = if let Stall::ServiceNotFound { .. } = stall {
            // Nothing is published any more: no gated pod stays True. Everything remembered
            // goes with the slices.
            ctx.forget(key);
            let uid = pm.uid().unwrap_or_default();
            let teardown = planner::teardown(
                live.iter().map(AsRef::as_ref),
                self.endpoints.iter().map(AsRef::as_ref),
                &uid,
            );
            let changes = gates.stalled(pm, stall, &[]);
            (
                Phases::of_teardown(&teardown, &changes.gates, &pods),
                changes,
            )
        } else {
            // Its slices stay: gated pods they publish keep their condition.
            crate::reconcile::probing::forget(&ctx.prober, pm);
            let mapping = crate::reconcile::probing::mapping_key(pm);
            ctx.probe_aliases.forget(&mapping);
            ctx.demands.set(&mapping, 0);
            let changes = gates.stalled(pm, stall, live);
            (Phases::of_gates(&changes.gates, &pods), changes)
        };
        let mut report = Report::of_stall(stall);
        report
            .events
            .extend(gate_timeouts(&changes.timeouts, key.namespace.as_deref()));
        let pool = gates.pool();
        let finalizer = planner::release_finalizer(pm, pool.as_deref());
        let resync = ctx.settings.resync;
        let again = matches!(gates, Gates::Wait).then(|| soon(resync)).flatten();
        (
            departed.pass(phases, finalizer, report),
            at_deadline(resync, again, changes.deadline),
        )
    }
}
