//! An ExternalName Service: nothing is published, so every slice and our Endpoints object
//! go, and no gated pod stays published.

use k8s_openapi::api::core::v1::Service;
use kube_validation::IpFamily;

use super::live::Live;
use super::ports::service_families;
use super::types::{Plan, PlanInput, PlanWarning};
use super::{gate, legacy, migration, teardown};
use crate::pod_record::PodRecord;
use crate::pool::pod_in_pool;

/// Whether `service` is of type ExternalName.
pub(crate) fn applies(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName")
}

/// The plan: delete what `live` holds of ours, release the pool's gated pods.
pub(crate) fn plan_external_name(input: &PlanInput<'_>, namespace: &str, live: &Live<'_>) -> Plan {
    let spec = &input.port_mapping.spec;
    let mut out = Plan::default();
    out.warnings.push(PlanWarning::ExternalName);
    out.deletions = teardown::every(live.ours.iter().map(|s| s.as_ref()));
    out.endpoints_deletion = legacy::owned_endpoints_deletion(live.endpoints);
    let pool: Vec<&PodRecord> = input
        .pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| pod_in_pool(spec, namespace, p).unwrap_or(false))
        .collect();
    // Its slices go: no gated pod stays published.
    let gates = gate::stalled_pod_gates(
        &pool,
        &super::context::GateSettings::of(input.port_mapping, input.gate_peers, input.now),
        &[],
        (
            "ExternalName",
            "the Service is of type ExternalName: nothing is published",
        ),
    );
    out.set_gates(gates);
    let primary = service_families(input.service)
        .first()
        .copied()
        .unwrap_or(IpFamily::V4);
    out.migration = migration::plan_steps(input, live, primary, &out);
    out
}
