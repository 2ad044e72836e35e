//! Leader election with kube-lease-manager: followers keep their caches warm and write nothing;
//! the apply layer asks [`Leadership::is_leader`] before every write, so losing the Lease stops
//! writes at once.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::cli::LeaderArgs;
use crate::error::Error;

/// Whether this replica may write.
#[derive(Clone, Debug)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
}

impl Leadership {
    /// Leadership that is always held (leader election disabled, or tests).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        // Keep the sender alive forever so `changed()` never reports a closed channel.
        std::mem::forget(tx);
        Self { rx }
    }

    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

/// The running election. The Lease manager's own channel is held only by a forwarding task, so
/// [`Election::release`] can close it (which makes the manager release the Lease) while other
/// parts of the process still hold [`Leadership`] handles.
pub struct Election {
    tx: watch::Sender<bool>,
    forwarder: JoinHandle<()>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Election {
    /// Starts competing for the Lease.
    pub async fn start(client: Client, args: &LeaderArgs) -> Result<Self, Error> {
        let identity = match &args.identity {
            Some(id) => id.clone(),
            None => hostname(),
        };
        let manager = LeaseManagerBuilder::new(client, args.lease_name.clone())
            .with_namespace(args.lease_namespace.clone())
            .with_identity(identity.clone())
            .with_duration(args.lease_duration_seconds)
            .with_grace(args.lease_grace_seconds)
            .with_field_manager(format!("{}-lease", portmapper_api::MANAGER))
            .build()
            .await
            .map_err(|e| Error::Leader(format!("creating the lease manager: {e}")))?;
        let (mut lease_rx, task) = manager.watch().await;
        info!(
            lease = %args.lease_name,
            namespace = %args.lease_namespace,
            %identity,
            "competing for leadership"
        );
        let (tx, _) = watch::channel(*lease_rx.borrow());
        let forward = tx.clone();
        let forwarder = tokio::spawn(async move {
            while lease_rx.changed().await.is_ok() {
                let leader = *lease_rx.borrow_and_update();
                info!(leader, "leadership changed");
                forward.send_replace(leader);
            }
            // The manager stopped (it only does so on errors it cannot recover from): stop writing.
            forward.send_replace(false);
        });
        Ok(Self {
            tx,
            forwarder,
            task,
        })
    }

    /// A handle for the apply layer.
    pub fn leadership(&self) -> Leadership {
        Leadership {
            rx: self.tx.subscribe(),
        }
    }

    /// Stops writing at once, then gives the Lease up so a standby takes over without waiting
    /// for it to expire.
    pub async fn release(self, timeout: Duration) {
        let Self {
            tx,
            forwarder,
            task,
        } = self;
        tx.send_replace(false);
        forwarder.abort();
        let _ = forwarder.await;
        match tokio::time::timeout(timeout, task).await {
            Ok(Ok(Ok(_))) => info!("released the leader lease"),
            Ok(Ok(Err(err))) => warn!(error = %err, "releasing the leader lease"),
            Ok(Err(err)) => warn!(error = %err, "lease task failed"),
            Err(_) => warn!("timed out releasing the leader lease; it will expire"),
        }
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| format!("portmapper-{}", std::process::id()))
}
