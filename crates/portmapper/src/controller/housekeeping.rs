//! What runs beside the Controller: the readiness that waits for every store's first list,
//! and the 30 s clean-up of the pod watches and probes no PortMapping needs any more.

use std::sync::Arc;
use std::time::Duration;

use futures::channel::oneshot;
use tokio::task::JoinSet;
use tracing::info;

use super::pods::PodWatches;
use crate::reconcile::context::Context;
use crate::runtime::http::Readiness;

/// Starts both into `tasks`; the receiver hears when the caches have synced.
pub fn spawn(
    tasks: &mut JoinSet<()>,
    readiness: Readiness,
    pods: Arc<PodWatches>,
    ctx: Arc<Context>,
) -> oneshot::Receiver<()> {
    // Readiness = every shared watch has listed once; pod watches start lazily per pool.
    // Reconciles before that wrote nothing and wait `Wait::PENDING` (2 s); the sync wakes
    // every PortMapping at once instead (that wait was 2 s of a 3–9 s first publication).
    let (synced_tx, synced_rx) = oneshot::channel::<()>();
    let watched = ctx.clone();
    tasks.spawn(async move {
        // Polled, not awaited: a store's wait_until_ready() (kube-runtime 5.0) wakes only its
        // latest waiter, and the Controller (PortMappings) and reconciles (is_ready on slices
        // and Services) poll the same stores, so an await here was never woken.
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while !watched.synced() {
            tick.tick().await;
        }
        info!("caches synced");
        readiness.set_ready();
        // The Controller may be gone (shutdown): nobody to wake.
        let _ = synced_tx.send(());
    });
    tasks.spawn(clean_up(pods, ctx));
    synced_rx
}

/// Every 30 s: stops pod watches (and probes) that no PortMapping needs any more.
async fn clean_up(pods: Arc<PodWatches>, ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tick.tick().await;
        pods.retain_needed();
        let alive = ctx
            .index
            .lock()
            .portmapping_keys()
            .map(|pm| {
                portmapper_probe::MappingKey::new(
                    pm.namespace.clone().unwrap_or_default(),
                    pm.name.clone(),
                )
            })
            .collect();
        crate::reconcile::probing::retain(&ctx.prober, &alive);
        ctx.probe_aliases.retain(|k| alive.contains(k));
        ctx.demands.retain(|k| alive.contains(k));
    }
}
