//! The one executor: it runs a pass as the core computed it ([`Phases`] and a [`Report`]) and
//! the backoff shaped it ([`Mode`]), and decides nothing. Phases run in order, each with a few
//! writes in flight, a phase whose guard phases failed is skipped; every error is kept (a
//! probe sends one write at a time and stops at its first failure); our slice writes are
//! recorded in the index as they are sent and answered; the Events go through the
//! PortMapping's warn-once ledger; the pods released from the pool are forgotten by the index
//! once their release succeeded; the status is written when it changed and the plan did not
//! hold it (the "after writes failed" variant when a write failed); and the API server's
//! warnings on these writes are announced once.

use std::collections::HashSet;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType as KubeEventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use portmapper_api::PortMapping;
use portmapper_core::planner::migration::Step;
use portmapper_core::report::{PlannedStatus, Report, after_writes, api_warning};
use portmapper_core::writes::{Phase, PhaseKind, Phases, Write};
use portmapper_core::{EventType, PlannedEvent};
use tracing::{debug, info, warn};

use crate::index::own_writes::Answered;
use crate::reconcile::context::Context;
use crate::reconcile::plan_metrics::PlanMetrics;
use crate::reconcile::probing::Targets;
use crate::runtime::apply::Writer;
use crate::runtime::error::Error;
use crate::runtime::metrics::ResourceLabels;

/// What a pass executes: its writes and what it reports.
pub struct Pass {
    pub phases: Phases,
    pub report: Report,
    /// The pods that left the pool, by name: the index forgets them once the release phase
    /// ([`PhaseKind::ReleasedGates`]) succeeded.
    pub released: Vec<String>,
    /// How its writes go out.
    pub mode: Mode,
    /// Its status changed only in its counts, within the window of the last status write
    /// (`plan.rs`, [`portmapper_core::report::status_due`]): not written by this pass unless a
    /// write fails (the status of a failed pass is written as always); the pass that looks
    /// again when the window ends writes it.
    pub status_held: bool,
}

/// What a pass tells the rest of the operator, applied once its writes ran ([`After::apply`],
/// by the pass): never before them, so a withdrawal whose teardown fails keeps its backoff.
#[derive(Debug)]
pub struct After {
    /// The prober's targets for the PortMapping.
    pub probes: Probes,
    /// The plan's metrics.
    pub metrics: Option<PlanMetrics>,
    /// The PortMapping withdrew (its Service is gone): once every write of the teardown went
    /// through, everything remembered about it goes ([`Context::forget`]), its backoff included.
    pub forget: bool,
}

/// What becomes of the PortMapping's prober targets.
#[derive(Debug)]
pub enum Probes {
    /// The plan's lookups.
    Set(Targets),
    /// None: a stall publishes nothing new.
    Drop,
}

impl After {
    /// Applies it for `pm`, whose pass's writes all went through or not (`succeeded`).
    pub fn apply(self, ctx: &Context, pm: &PortMapping, succeeded: bool) {
        match self.probes {
            Probes::Set(targets) => targets.set(&ctx.prober, &ctx.probe_aliases),
            Probes::Drop => {
                crate::reconcile::probing::forget(&ctx.prober, pm);
                let mapping = crate::reconcile::probing::mapping_key(pm);
                ctx.probe_aliases.forget(&mapping);
                ctx.demands.set(&mapping, 0);
            }
        }
        if let Some(metrics) = self.metrics {
            metrics.record(ctx);
        }
        if self.forget && succeeded {
            ctx.forget(&ObjectRef::from_obj(pm));
        }
    }
}

/// How a pass's writes go out (set from the PortMapping's backoff, `reconcile/mod.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every phase, a few writes in flight each; a failed write holds back only the phases it
    /// guards, and the status reports the outcome.
    #[default]
    All,
    /// The pass of a PortMapping that is backing off: one write at a time in phase order, and
    /// nothing after the first failure (the rest waits for the next window), so a window of a
    /// persistent fault costs one failed request whatever the churn changed. The status is
    /// written only when it is news: a status the server refused is not sent again while the
    /// probe's writes keep failing.
    Probe,
}

/// What executing a pass came to.
pub struct Executed {
    /// Every failed write (the status write included), combined.
    pub failed: Option<Error>,
    /// The watch showed a change of a slice that was not ours while we wrote it: plan again
    /// (the event that would have woken the PortMapping was held as a possible echo).
    pub wake: bool,
}

/// Runs `pass` for `pm` through `writer`.
pub async fn execute(
    ctx: &Context,
    writer: &Writer<'_>,
    pm: &PortMapping,
    pass: &Pass,
) -> Executed {
    let key = ObjectRef::from_obj(pm);
    let run = Run {
        ctx,
        writer,
        pm,
        key: &key,
        owner: pm.uid().unwrap_or_default(),
    };
    let (mut errors, wake, failed) = run.phases(&pass.phases, pass.mode).await;
    if !pass.released.is_empty() && !failed.contains(&PhaseKind::ReleasedGates) {
        ctx.index.lock().released(&key, &pass.released);
    }
    let written = pass.phases.count();
    if written > 0 {
        info!(writes = written, failed = errors.len(), "published changes");
    }
    run.announce(pm, &pass.report.events, &pass.report.covers)
        .await;
    let failed = Error::combine(std::mem::take(&mut errors));
    let status = match &failed {
        None if pass.status_held => None,
        None => Some(pass.report.status.clone()),
        Some(err) => {
            let previous = ctx.states.known_status(pm).conditions;
            after_writes(&pass.report.status, &err.to_string(), &previous)
        }
    };
    // A probe whose write failed does not re-send a status the server refused (its status
    // write would fail beside it every window).
    let repeat = pass.mode == Mode::Probe && failed.is_some();
    let status_error = match status {
        Some(status) if !(repeat && ctx.states.status_refused(&key, &status)) => {
            run.status(pm, &status).await.err()
        }
        _ => None,
    };
    // The API server's warnings, once per PortMapping (not once per write).
    let warned: Vec<PlannedEvent> = writer.warnings().iter().map(|t| api_warning(t)).collect();
    run.announce(pm, &warned, &[]).await;
    Executed {
        failed: Error::combine(failed.into_iter().chain(status_error).collect()),
        wake,
    }
}

/// One execution.
struct Run<'a> {
    ctx: &'a Context,
    writer: &'a Writer<'a>,
    pm: &'a PortMapping,
    key: &'a ObjectRef<PortMapping>,
    /// The PortMapping's UID: the owner of the slice writes the index records.
    owner: String,
}

impl Run<'_> {
    /// Runs every phase in order; a phase whose guard phases failed is skipped (in a probe,
    /// every phase after a failure). Returns every failure, in order, whether a write asked
    /// for another pass, and the phases that failed or did not run.
    async fn phases(&self, phases: &Phases, mode: Mode) -> (Vec<Error>, bool, HashSet<PhaseKind>) {
        let mut failed: HashSet<PhaseKind> = HashSet::new();
        let (mut errors, mut wake) = (Vec::new(), false);
        for phase in &phases.0 {
            if mode == Mode::Probe && !errors.is_empty() {
                failed.insert(phase.kind);
                continue;
            }
            if let Some(guard) = phase.only_if.iter().find(|k| failed.contains(k)) {
                info!(portmapping = %self.key, phase = ?phase.kind, after = ?guard, "an earlier phase failed; this one waits for the next pass");
                continue;
            }
            let (phase_errors, phase_wake) = match mode {
                Mode::All => self.phase(phase).await,
                Mode::Probe => self.probe(phase).await,
            };
            if !phase_errors.is_empty() {
                failed.insert(phase.kind);
            }
            errors.extend(phase_errors);
            wake |= phase_wake;
        }
        if mode == Mode::Probe && !errors.is_empty() {
            debug!(portmapping = %self.key, "probe failed; the other writes wait for the next window");
        }
        (errors, wake, failed)
    }

    /// One phase's writes, up to its in-flight bound at once; results in write order
    /// (`buffered`), so conditions and logs are deterministic.
    async fn phase(&self, phase: &Phase) -> (Vec<Error>, bool) {
        // Collected first: a lazily mapped stream of borrowing futures is not `Send`.
        let writes: Vec<_> = phase.writes.iter().map(|w| self.write(w)).collect();
        let results: Vec<(Result<(), Error>, bool)> = futures::stream::iter(writes)
            .buffered(phase.kind.in_flight())
            .collect()
            .await;
        let wake = results.iter().any(|(_, wake)| *wake);
        let errors = results.into_iter().filter_map(|(r, _)| r.err()).collect();
        (errors, wake)
    }

    /// One phase's writes one at a time, up to the first failure.
    async fn probe(&self, phase: &Phase) -> (Vec<Error>, bool) {
        let mut wake = false;
        for write in &phase.writes {
            let (result, woke) = self.write(write).await;
            wake |= woke;
            if let Err(err) = result {
                return (vec![err], wake);
            }
        }
        (Vec::new(), wake)
    }

    /// One write; true when its answer asks for another pass.
    async fn write(&self, write: &Write) -> (Result<(), Error>, bool) {
        match write {
            Write::CreateSlice(slice) => self.write_slice(&slice.to_endpoint_slice(), false).await,
            Write::UpdateSlice(slice) => self.write_slice(&slice.to_endpoint_slice(), true).await,
            Write::DeleteSlice { name, uid } => (self.delete_slice(name, uid).await, false),
            Write::SetGate { gate, pod_version } => {
                if self.ctx.states.gate_sent(self.key, gate, pod_version) {
                    debug!(pod = %gate.pod, "publication gate already written; the cache lags");
                    return (Ok(()), false);
                }
                let result = self.writer.patch_pod_gate(gate).await;
                let written = matches!(result, Ok(true));
                let states = &self.ctx.states;
                states.gate_answered(self.key, gate, pod_version, written);
                (result.map(drop), false)
            }
            Write::Migration(step) => (self.migrate(step).await, false),
            Write::AddFinalizer(finalizer) => {
                (self.writer.add_finalizer(self.pm, finalizer).await, false)
            }
            Write::RemoveFinalizer(finalizer) => (
                self.writer.remove_finalizer(self.pm, finalizer).await,
                false,
            ),
        }
    }

    /// One write of the migration steps.
    async fn migrate(&self, step: &Step) -> Result<(), Error> {
        match step {
            Step::ApplyEndpoints(endpoints) => self.writer.apply_endpoints(endpoints).await,
            Step::AdoptEndpoints {
                endpoints,
                strip_annotations,
                resource_version,
            } => {
                let name = endpoints.name_any();
                let version = resource_version.as_deref();
                self.writer
                    .strip_endpoints_annotations(&name, strip_annotations, version)
                    .await?;
                self.writer.apply_endpoints(endpoints).await
            }
            Step::DeleteEndpoints { name, uid, native } => {
                let deleted = self.writer.delete_endpoints(name, uid).await;
                if *native {
                    self.native_cleaned("endpoints", &deleted);
                }
                deleted.map(drop)
            }
            Step::DeleteNativeSlice { name, uid } => {
                let deleted = self.writer.delete_slice(name, uid).await;
                self.native_cleaned("endpointslice", &deleted);
                deleted.map(drop)
            }
            // The report's Events, never a write.
            Step::Warn { .. } | Step::Normal { .. } => Ok(()),
        }
    }

    /// Creates or updates (`update`) one of our slices. It is announced to the index as it is
    /// sent and its answer recorded as it arrives: its watch event, often handled before the
    /// answer, is then known as ours instead of waking the PortMapping for a pass that finds
    /// nothing to do.
    async fn write_slice(&self, slice: &EndpointSlice, update: bool) -> (Result<(), Error>, bool) {
        let slice_ref = self.slice_ref(&slice.name_any());
        let index = &self.ctx.index;
        index
            .lock()
            .applying_slice(&self.owner, slice_ref.clone(), Instant::now());
        let result = if update {
            self.writer.update_slice(slice).await
        } else {
            self.writer.create_slice(slice).await
        };
        let answered = match &result {
            Ok(Some(version)) => {
                index
                    .lock()
                    .wrote_slice(&self.owner, slice_ref, version.clone(), Instant::now())
            }
            Ok(None) | Err(_) => index.lock().apply_failed(&self.owner, &slice_ref),
        };
        (result.map(drop), answered == Answered::Wake)
    }

    /// Deletes one of our slices, recording the deletion in the index.
    async fn delete_slice(&self, name: &str, uid: &str) -> Result<(), Error> {
        let slice_ref = self.slice_ref(name);
        let result = self.writer.delete_slice(name, uid).await;
        let mut index = self.ctx.index.lock();
        match &result {
            Ok(true) => index.deleted_slice(&self.owner, slice_ref, Instant::now()),
            // Already gone: nothing to wait for.
            Ok(false) => {}
            Err(_) => {
                index.apply_failed(&self.owner, &slice_ref);
            }
        }
        result.map(drop)
    }

    fn slice_ref(&self, name: &str) -> ObjectRef<EndpointSlice> {
        ObjectRef::new(name).within(self.writer.namespace)
    }

    fn native_cleaned(&self, resource: &'static str, deleted: &Result<bool, Error>) {
        if matches!(deleted, Ok(true)) {
            self.ctx
                .metrics
                .native_cleanup_deletions
                .get_or_create(&ResourceLabels { resource })
                .inc();
        }
    }

    /// Publishes the events that are news for the PortMapping's ledger ([`Ledger::news`]).
    ///
    /// [`Ledger::news`]: portmapper_core::Ledger::news
    async fn announce(
        &self,
        pm: &PortMapping,
        events: &[PlannedEvent],
        covers: &[portmapper_core::EventReason],
    ) {
        for event in self.ctx.states.news(self.key, events, covers) {
            self.publish(pm, event).await;
        }
    }

    async fn publish(&self, pm: &PortMapping, planned: &PlannedEvent) {
        let (type_, note) = match planned.type_ {
            EventType::Warning => (KubeEventType::Warning, truncate_note(&planned.note)),
            EventType::Normal => {
                info!(portmapping = %self.key, reason = planned.reason.as_str(), "{}", planned.note);
                (KubeEventType::Normal, planned.note.clone())
            }
        };
        if planned.reason == portmapper_core::EventReason::ApiWarning {
            info!(portmapping = %self.key, warning = %planned.occurrence, "the API server warns about our writes");
        }
        let event = Event {
            type_,
            reason: planned.reason.to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: planned.related.clone(),
        };
        if !self.ctx.leadership.is_leader() {
            return;
        }
        match self.ctx.recorder.publish(&event, &pm.object_ref(&())).await {
            Ok(()) => self.ctx.metrics.write("create", "events"),
            Err(err) => {
                warn!(portmapping = %self.key, reason = planned.reason.as_str(), error = %err, "publishing an Event failed");
            }
        }
    }

    /// Writes `planned` when it differs from what the server holds, as far as this operator
    /// knows (including a write of ours the cache has not delivered yet: a pass in that window
    /// would otherwise re-send the status it just wrote).
    async fn status(&self, pm: &PortMapping, planned: &PlannedStatus) -> Result<(), Error> {
        let previous = self.ctx.states.known_status(pm);
        let status = planned.to_status(&previous, pm.metadata.generation, Timestamp::now());
        if status == previous {
            return Ok(());
        }
        debug!(portmapping = %self.key, "status changed; applying");
        let written = self.writer.apply_status(pm, &status).await;
        self.ctx
            .states
            .status_answered(self.key, planned, written.is_ok());
        if written? {
            self.ctx.states.status_written(pm, &status);
        } else {
            debug!(portmapping = %self.key, "PortMapping gone; status not written");
        }
        Ok(())
    }
}

/// Event notes are capped (1 KiB); cut at a character boundary.
fn truncate_note(note: &str) -> String {
    if note.len() <= 1000 {
        return note.to_string();
    }
    let mut end = 997;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}
