//! The publication readiness gate: for every pool pod that lists the PortMapping's gate type
//! (`spec.readinessGate.conditionType`, by default `portmapper.dev/published`) in
//! `spec.readinessGates`, the condition it should carry, so that a rollout waits until the pod
//! is in the slices of every port it is meant to serve. A pod whose condition of that type an
//! older PortMapping sets (`GatePeers::managed_by`) is left to it.
//!
//! A port counts when the pod is a candidate there and the port's *backing* checks (portNames,
//! podCondition, notTerminating: whether the pod is meant to serve the port at all) include it.
//! The evaluation walk answers that with the verdict (`PodPortState::Excluded::meant_to_serve`),
//! so nothing is evaluated twice.
//! Health checks (podReady, which reads ContainersReady for a gated pod, containerReady, probes,
//! webhooks) are what the gate waits for: a pod failing a probe keeps its gate False, which is
//! the point (a Ready pod missing from a port's slices is what made rollouts outrun publication).
//! The plan carries only the pods whose current condition differs, so a converged pool costs no
//! write.

use std::collections::HashSet;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::PlanContext;
use super::status::PodPortState;
use super::types::{GatePeers, PodGate};
use crate::check::has_gate;
use crate::pod_record::PodRecord;
use crate::target::{is_terminal, is_terminating};

/// Reason of the True condition.
pub const REASON_PUBLISHED: &str = "Published";
/// Reason of the False condition when a port the pod is meant to serve leaves it out.
pub const REASON_NOT_PUBLISHED: &str = "NotPublished";
/// Reason of the False condition while the pod has no IP address.
pub const REASON_NO_ADDRESS: &str = "NoAddress";

/// The gate changes of a PortMapping that publishes nothing new (its spec is invalid, another
/// PortMapping publishes its Service, the Service is gone, the plan failed), in pool order. Its
/// slices stay as they are (or are gone), so a gated pod that `live_slices` name ready is still
/// published and keeps its condition; every other gated pod must not be, or become, True: it is
/// set False with `reason` (the PortMapping's own Ready reason) and `message`. `pods` are the
/// pool's, `gate_type` the PortMapping's; pods an older PortMapping gates are left to it.
pub fn stalled_pod_gates(
    pods: &[&PodRecord],
    gate_type: &str,
    gate_peers: &GatePeers,
    live_slices: &[&EndpointSlice],
    (reason, message): (&'static str, &str),
    now: Timestamp,
) -> Vec<PodGate> {
    let published: HashSet<&str> = live_slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| e.target_ref.as_ref()?.uid.as_deref())
        .collect();
    let mut out = Vec::new();
    for &pod in pods {
        let (name, uid) = (pod.name.as_str(), pod.uid.as_str());
        if !has_gate(pod, gate_type)
            || is_terminal(pod)
            || is_terminating(pod)
            || gate_peers.managed_by.contains_key(name)
            || published.contains(uid)
        {
            continue;
        }
        if let Some(gate) = change(gate_type, now, pod, false, reason, message.to_owned()) {
            out.push(gate);
        }
    }
    out
}

/// The gate changes of one plan, in pool order.
pub(crate) fn pod_gates(
    ctx: &PlanContext<'_>,
    states: &[Vec<Option<PodPortState>>],
) -> Vec<PodGate> {
    let mut out = Vec::new();
    for (pod_idx, &pod) in ctx.pods.iter().enumerate() {
        // A terminating pod is on its way out: its readiness no longer gates anything, and a
        // write per terminating pod would only add load during a rollout.
        if !has_gate(pod, ctx.gate_type) || is_terminal(pod) || is_terminating(pod) {
            continue;
        }
        if ctx.gate_peers.managed_by.contains_key(&pod.name) {
            continue;
        }
        let (status, reason, message) = desired(ctx, pod_idx, states);
        if let Some(gate) = change(ctx.gate_type, ctx.now, pod, status, reason, message) {
            out.push(gate);
        }
    }
    out
}

fn desired(
    ctx: &PlanContext<'_>,
    pod_idx: usize,
    states: &[Vec<Option<PodPortState>>],
) -> (bool, &'static str, String) {
    let pod = ctx.pods[pod_idx];
    if !pod.has_ip() {
        // Not a candidate anywhere yet; True now would let Ready through the moment the pod
        // gets its address, before any slice names it.
        return (
            false,
            REASON_NO_ADDRESS,
            "the pod has no IP address yet".to_owned(),
        );
    }
    let mut published = Vec::new();
    let mut missing = Vec::new();
    for (port_idx, port) in ctx.ports.iter().enumerate() {
        let label = port.key.as_deref().unwrap_or("(portless)");
        match &states[port_idx][pod_idx] {
            Some(PodPortState::Published { .. }) => published.push(label),
            Some(PodPortState::Excluded {
                reason,
                meant_to_serve: true,
            }) => {
                missing.push(format!("port {label}: {reason}"));
            }
            Some(PodPortState::Excluded { .. }) | None => {}
        }
    }
    if missing.is_empty() {
        let message = if published.is_empty() {
            "the pod is meant to serve no port of the Service".to_owned()
        } else {
            format!(
                "published on every port it serves: {}",
                published.join(", ")
            )
        };
        (true, REASON_PUBLISHED, message)
    } else {
        (
            false,
            REASON_NOT_PUBLISHED,
            format!("not published on {}", missing.join("; ")),
        )
    }
}

/// The write to make, if the pod's condition differs from the desired one. The transition time
/// moves only when the status flips (as kubelet does for its own conditions).
fn change(
    gate_type: &str,
    now: Timestamp,
    pod: &PodRecord,
    status: bool,
    reason: &'static str,
    message: String,
) -> Option<PodGate> {
    let text = if status { "True" } else { "False" };
    let current = pod.condition(gate_type);
    if current.is_some_and(|c| {
        c.status == text
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message.as_str())
    }) {
        return None;
    }
    let last_transition_time = match current {
        Some(c) if c.status == text && c.last_transition_time.is_some() => {
            c.last_transition_time.clone()
        }
        _ => Some(Time(now)),
    };
    Some(PodGate {
        pod: pod.name.clone(),
        condition_type: gate_type.to_owned(),
        uid: pod.uid.clone(),
        status,
        reason,
        message,
        last_transition_time,
    })
}
