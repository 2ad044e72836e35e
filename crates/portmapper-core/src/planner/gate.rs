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
//!
//! The gate never strands a pod: a PortMapping being deleted, and a pod leaving the pool, release
//! it (True, `Released`), and with `spec.readinessGate.timeoutSeconds` a pod whose containers
//! have been ready that long without publication gets True, `TimedOut` (with a Warning). Each
//! condition carries the pod's `metadata.generation` as `observedGeneration` (KEP-5067).

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use portmapper_api::PortMapping;

use super::context::{GateSettings, PlanContext};
use super::status::PodPortState;
use super::types::PodGate;
pub use super::types::{
    GateChanges, GateTimeout, REASON_NO_ADDRESS, REASON_NOT_PUBLISHED, REASON_PUBLISHED,
    REASON_RELEASED, REASON_TIMED_OUT,
};
use crate::check::has_gate;
use crate::compact_slice::CompactSlice;
use crate::pod_record::PodRecord;
use crate::target::{is_terminal, is_terminating};

/// The finalizer that holds a PortMapping whose pool has gated pods until their gates are
/// released: without it a deletion while no operator runs (or during a leader change) would
/// leave them False for good, with nothing left that names them.
pub const RELEASE_FINALIZER: &str = "portmapper.dev/release-gates";

/// What a pod's gate should say.
struct Verdict {
    status: bool,
    reason: &'static str,
    message: String,
    /// The ports (or the cause) that leave it out, when it is not published.
    missing: Option<String>,
}

impl GateChanges {
    /// Adds the change `verdict` asks of `pod`, timing out a held pod past its deadline.
    fn decide(&mut self, settings: &GateSettings<'_>, pod: &PodRecord, verdict: Verdict) {
        let verdict = self.timed(settings, pod, verdict);
        let timed_out = verdict.reason == REASON_TIMED_OUT;
        let missing = verdict.missing.clone();
        let Some(gate) = change(settings.gate_type, settings.now, pod, verdict) else {
            return;
        };
        let was = pod
            .condition(settings.gate_type)
            .and_then(|c| c.reason.as_deref());
        if timed_out
            && was != Some(REASON_TIMED_OUT)
            && let Some(timeout_seconds) = settings.timeout_seconds
        {
            self.timeouts.push(GateTimeout {
                pod: pod.name.clone(),
                uid: pod.uid.clone(),
                not_published: missing.unwrap_or_default(),
                timeout_seconds,
            });
        }
        self.gates.push(gate);
    }

    /// `verdict`, or True `TimedOut` when it holds the pod past the timeout; notes the
    /// deadline of a pod held within it.
    fn timed(&mut self, settings: &GateSettings<'_>, pod: &PodRecord, verdict: Verdict) -> Verdict {
        if verdict.status {
            return verdict;
        }
        let Some(seconds) = settings.timeout_seconds else {
            return verdict;
        };
        let Some(deadline) = deadline(pod, seconds) else {
            return verdict;
        };
        if deadline > settings.now {
            self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
            return verdict;
        }
        let missing = verdict.missing.unwrap_or_default();
        Verdict {
            status: true,
            reason: REASON_TIMED_OUT,
            message: format!(
                "not published ({missing}) {seconds}s after the containers became ready: the \
                 gate no longer waits"
            ),
            missing: Some(missing),
        }
    }
}

/// When the gate of `pod` stops holding it: `seconds` after its containers became ready (the
/// moment the gate alone keeps it from Ready). None while they are not ready: then kubelet
/// holds the pod whatever the gate says.
pub fn deadline(pod: &PodRecord, seconds: i32) -> Option<Timestamp> {
    let ready = pod
        .condition("ContainersReady")
        .filter(|c| &*c.status == "True")?;
    let since = ready
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
        .or(pod.creation_timestamp)?;
    since
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .ok()
}

/// Whether the PortMapping needs [`RELEASE_FINALIZER`]: a pod of its pool (`pods`) lists its
/// gate type. A PortMapping that gates no pod never carries it, so deleting it (or uninstalling
/// the operator) never waits for an operator.
pub fn needs_release_finalizer(pods: &[&PodRecord], gate_type: &str) -> bool {
    pods.iter().any(|p| has_gate(p, gate_type))
}

/// What a pass does with [`RELEASE_FINALIZER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Add it: the pool has a gated pod, so a deletion must wait for its release.
    Add,
    /// Remove it: the PortMapping is being deleted and this pass releases every gate of its
    /// pool (it runs only once every earlier write of the pass succeeded).
    Remove,
}

/// What the pass of `pm` does with [`RELEASE_FINALIZER`], given its pool's pods (`None`: they
/// have not listed yet, so the gates cannot be decided and the finalizer stays as it is).
pub fn release_finalizer(pm: &PortMapping, pool: Option<&[&PodRecord]>) -> Option<FinalizerChange> {
    let pool = pool?;
    let has = pm
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == RELEASE_FINALIZER);
    if pm.metadata.deletion_timestamp.is_some() {
        return has.then_some(FinalizerChange::Remove);
    }
    (!has && needs_release_finalizer(pool, pm.spec.gate_condition_type()))
        .then_some(FinalizerChange::Add)
}

/// The gate changes that release `pods`, in their order: each gated pod (not terminal, not
/// terminating, not in `kept`: another PortMapping gates it now) whose condition is not True
/// gets True with reason `Released` and `message`. A True condition is left as it is: the pod
/// may already be Ready, and rewriting it would cost a write per pod for nothing.
pub fn released_pod_gates(
    pods: &[&PodRecord],
    gate_type: &str,
    kept: &dyn Fn(&str) -> bool,
    message: &str,
    now: Timestamp,
) -> Vec<PodGate> {
    pods.iter()
        .filter(|p| has_gate(p, gate_type) && !is_terminal(p) && !is_terminating(p))
        .filter(|p| !kept(&p.name))
        .filter(|p| p.condition(gate_type).is_none_or(|c| &*c.status != "True"))
        .filter_map(|p| change(gate_type, now, p, released(message)))
        .collect()
}

fn released(message: &str) -> Verdict {
    Verdict {
        status: true,
        reason: REASON_RELEASED,
        message: message.to_owned(),
        missing: None,
    }
}

/// The message of a release by a PortMapping being deleted.
fn deleted_message(settings: &GateSettings<'_>) -> String {
    format!(
        "PortMapping {} is being deleted: the gate no longer waits for its publication",
        settings.portmapping
    )
}

/// The gate changes of a PortMapping that publishes nothing new (its spec is invalid, another
/// PortMapping publishes its Service, the Service is gone, the plan failed), in pool order. Its
/// slices stay as they are (or are gone), so a gated pod that `live_slices` name ready is still
/// published and keeps its condition; every other gated pod must not be, or become, True: it is
/// set False with `reason` (the PortMapping's own Ready reason) and `message` (until the
/// timeout). `pods` are the pool's; pods an older PortMapping gates are left to it. A
/// PortMapping being deleted releases its gates instead.
pub fn stalled_pod_gates(
    pods: &[&PodRecord],
    settings: &GateSettings<'_>,
    live_slices: &[&CompactSlice],
    (reason, message): (&'static str, &str),
) -> GateChanges {
    let managed = |name: &str| settings.peers.managed_by.contains_key(name);
    if settings.deleting {
        return GateChanges {
            gates: released_pod_gates(
                pods,
                settings.gate_type,
                &managed,
                &deleted_message(settings),
                settings.now,
            ),
            ..GateChanges::default()
        };
    }
    let published: HashSet<&str> = live_slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.conditions().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| e.target_uid())
        .collect();
    let mut out = GateChanges::default();
    for &pod in pods {
        let (name, uid) = (pod.name.as_str(), pod.uid.as_str());
        if !has_gate(pod, settings.gate_type)
            || is_terminal(pod)
            || is_terminating(pod)
            || managed(name)
            || published.contains(uid)
        {
            continue;
        }
        let verdict = Verdict {
            status: false,
            reason,
            message: message.to_owned(),
            missing: Some(message.to_owned()),
        };
        out.decide(settings, pod, verdict);
    }
    out
}

/// The gate changes of one plan, in pool order.
pub(crate) fn pod_gates(
    ctx: &PlanContext<'_>,
    states: &[Vec<Option<PodPortState>>],
) -> GateChanges {
    let settings = &ctx.gate;
    if settings.deleting {
        let managed = |name: &str| settings.peers.managed_by.contains_key(name);
        return GateChanges {
            gates: released_pod_gates(
                ctx.pods,
                settings.gate_type,
                &managed,
                &deleted_message(settings),
                settings.now,
            ),
            ..GateChanges::default()
        };
    }
    let mut out = GateChanges::default();
    for (pod_idx, &pod) in ctx.pods.iter().enumerate() {
        // A terminating pod is on its way out: its readiness no longer gates anything, and a
        // write per terminating pod would only add load during a rollout.
        if !has_gate(pod, settings.gate_type) || is_terminal(pod) || is_terminating(pod) {
            continue;
        }
        if settings.peers.managed_by.contains_key(&pod.name) {
            continue;
        }
        out.decide(settings, pod, desired(ctx, pod_idx, states));
    }
    out
}

fn desired(ctx: &PlanContext<'_>, pod_idx: usize, states: &[Vec<Option<PodPortState>>]) -> Verdict {
    let pod = ctx.pods[pod_idx];
    if !pod.has_ip() {
        // Not a candidate anywhere yet; True now would let Ready through the moment the pod
        // gets its address, before any slice names it.
        return Verdict {
            status: false,
            reason: REASON_NO_ADDRESS,
            message: "the pod has no IP address yet".to_owned(),
            missing: Some("it has no IP address".to_owned()),
        };
    }
    let mut published = Vec::new();
    let mut missing = Vec::new();
    let mut missing_ports = Vec::new();
    for (port_idx, port) in ctx.ports.iter().enumerate() {
        let label = port.key.as_deref().unwrap_or("(portless)");
        match &states[port_idx][pod_idx] {
            Some(PodPortState::Published { .. }) => published.push(label),
            Some(PodPortState::Excluded {
                reason,
                meant_to_serve: true,
            }) => {
                missing.push(format!("port {label}: {reason}"));
                missing_ports.push(format!("port {label}"));
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
        Verdict {
            status: true,
            reason: REASON_PUBLISHED,
            message,
            missing: None,
        }
    } else {
        Verdict {
            status: false,
            reason: REASON_NOT_PUBLISHED,
            message: format!("not published on {}", missing.join("; ")),
            missing: Some(missing_ports.join(", ")),
        }
    }
}

/// The write to make, if the pod's condition differs from the desired one (status, reason,
/// message or the generation it was set for). The transition time moves only when the status
/// flips (as kubelet does for its own conditions).
fn change(gate_type: &str, now: Timestamp, pod: &PodRecord, verdict: Verdict) -> Option<PodGate> {
    let Verdict {
        status,
        reason,
        message,
        ..
    } = verdict;
    let text = if status { "True" } else { "False" };
    let current = pod.condition(gate_type);
    if current.is_some_and(|c| {
        *c.status == *text
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message.as_str())
            && c.observed_generation == pod.generation
    }) {
        return None;
    }
    let last_transition_time = match current {
        Some(c) if *c.status == *text && c.last_transition_time.is_some() => {
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
        observed_generation: pod.generation,
    })
}
