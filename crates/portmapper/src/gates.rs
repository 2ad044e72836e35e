//! Writing a plan's publication gates (pod conditions of each PortMapping's gate type, by default
//! `portmapper.dev/published`), after its slice writes: a pod is marked published only once the
//! slices naming it are stored.
//!
//! Like `status_written` for PortMapping status: until our patch reaches the pod cache, the
//! cached pod still carries the old condition and the next plan (woken by the watch events of
//! our own slice writes) asks for the same write again. Each written gate is remembered with
//! the resourceVersion of the pod it was planned from; while the cache still shows that version
//! the same gate is not sent again. Once the cache moves on, the plan sees the truth.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::StreamExt;
use portmapper_core::PodGate;
use tracing::debug;

use crate::apply::Writer;
use crate::error::Error;

/// Gate writes in flight at once.
const IN_FLIGHT: usize = 4;

/// Bound on remembered writes (entries of deleted pods are never met again): past it the memory
/// is dropped, which costs at most one repeated write per pod.
const MAX_REMEMBERED: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    /// resourceVersion of the cached pod the gate was planned from.
    pod_version: String,
    status: bool,
    reason: &'static str,
    message: String,
}

impl Sent {
    fn of(gate: &PodGate, pod_version: &str) -> Self {
        Self {
            pod_version: pod_version.to_owned(),
            status: gate.status,
            reason: gate.reason,
            message: gate.message.clone(),
        }
    }
}

/// Gates this operator wrote that the pod cache may not show yet, by pod UID and condition type
/// (two PortMappings may set different gates of one pod).
#[derive(Debug, Default)]
pub struct GatesWritten(Mutex<HashMap<(String, String), Sent>>);

impl GatesWritten {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Sent>> {
        // A panic while holding it leaves a map of hints only: keep using it.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes the plan's gates. With `slices_written` false (a slice write failed or a name is
/// taken) a gate that says Published waits for the slices; the others (False, Released,
/// TimedOut) are written. Returns the failures.
pub async fn write_gates(
    writer: &Writer<'_>,
    remembered: &GatesWritten,
    gates: &[PodGate],
    pods: &[&portmapper_core::PodRecord],
    slices_written: bool,
) -> Vec<Error> {
    let version_of = |uid: &str| {
        pods.iter()
            .find(|p| p.uid == uid)
            .map(|p| p.resource_version.clone())
            .unwrap_or_default()
    };
    let mut due = Vec::new();
    {
        let mut sent = remembered.lock();
        if sent.len() > MAX_REMEMBERED {
            sent.clear();
        }
        for gate in gates {
            if gate.waits_for_slices() && !slices_written {
                debug!(pod = %gate.pod, "publication gate waits for the slice writes");
                continue;
            }
            let version = version_of(&gate.uid);
            match sent.get(&key(gate)) {
                Some(s) if *s == Sent::of(gate, &version) => {
                    debug!(pod = %gate.pod, "publication gate already written; the cache lags");
                }
                _ => due.push((gate, version)),
            }
        }
    }
    let writes: Vec<_> = due
        .into_iter()
        .map(|(gate, version)| write_one(writer, gate, version))
        .collect();
    let results: Vec<_> = futures::stream::iter(writes)
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    let mut errors = Vec::new();
    let mut sent = remembered.lock();
    for (gate, version, result) in results {
        match result {
            Ok(true) => {
                sent.insert(key(gate), Sent::of(gate, &version));
            }
            Ok(false) => {
                sent.remove(&key(gate));
            }
            Err(err) => {
                sent.remove(&key(gate));
                errors.push(err);
            }
        }
    }
    errors
}

fn key(gate: &PodGate) -> (String, String) {
    (gate.uid.clone(), gate.condition_type.clone())
}

async fn write_one<'g>(
    writer: &Writer<'_>,
    gate: &'g PodGate,
    version: String,
) -> (&'g PodGate, String, Result<bool, Error>) {
    let result = writer.patch_pod_gate(gate).await;
    (gate, version, result)
}
