//! The pods that left a PortMapping's pool while its gate still waited on them: their release
//! is the first phase of the pass, and the index forgets them once it succeeded.

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::PodRecord;
use portmapper_core::planner::{self, FinalizerChange};
use portmapper_core::report::Report;
use portmapper_core::writes::Phases;

use crate::reconcile::context::Context;
use crate::reconcile::execute::{After, Mode, Pass};

/// The pods that left the pool still waiting on its gate (the index notes them), and their
/// release ([`planner::released_pod_gates`]): True, `Released`, unless another PortMapping of
/// the same gate type has them in its pool now.
pub struct Departed {
    /// The release phase (first of the pass).
    phases: Phases,
    /// Every departed pod's name: the index forgets them once the release succeeded.
    names: Vec<String>,
}

impl Departed {
    /// The departed pods of `key`, whose gate condition is `gate_type`.
    pub fn of(ctx: &Context, key: &ObjectRef<PortMapping>, gate_type: &str) -> Self {
        let (departed, kept) = ctx.index.lock().departed(key);
        let pods: Vec<&PodRecord> = departed.iter().map(AsRef::as_ref).collect();
        let message = format!(
            "the pod left the pool of PortMapping {}: the gate no longer waits for its publication",
            key.name
        );
        let gates = planner::released_pod_gates(
            &pods,
            gate_type,
            &|name| kept.contains(name),
            &message,
            Timestamp::now(),
        );
        Self {
            phases: Phases::released(&gates, &pods),
            names: pods.iter().map(|p| p.name.clone()).collect(),
        }
    }

    /// The pass: the release, then `phases`, then the release finalizer's `finalizer` change;
    /// `after` once they ran.
    pub fn pass(
        self,
        phases: Phases,
        finalizer: Option<FinalizerChange>,
        report: Report,
        after: After,
    ) -> Pass {
        let mut phases = self.phases.then(phases);
        phases.finalizer(finalizer);
        Pass {
            phases,
            report,
            released: self.names,
            mode: Mode::All,
            after,
        }
    }
}
