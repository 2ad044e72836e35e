//! `portmapper run`: connect, elect, serve health and metrics, reconcile until SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::controller;
use crate::reconcile::context::Settings;
use crate::runtime::error::Error;
use crate::runtime::http::{self, Readiness};
use crate::runtime::leader::{Election, LeaderConfig, Leadership};
use crate::runtime::metrics::Metrics;
use crate::runtime::watch_health::WatchPolicy;

/// What `portmapper run` needs (built from its flags by the command line, `cli.rs`).
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Kubeconfig to use instead of the in-cluster config or `$KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// Address of the HTTP server for `/metrics`, `/healthz` and `/readyz`.
    pub http_addr: SocketAddr,
    /// Per-port series of `portmapper_endpoints_published` per PortMapping.
    pub metrics_max_port_series: usize,
    /// The election; None: this process always writes.
    pub leader: Option<LeaderConfig>,
    /// How watches retry and when one counts as stalled.
    pub watch_policy: WatchPolicy,
    /// The controller's settings; `instance` is also the User-Agent's identity.
    pub settings: Settings,
}

/// Runs the operator until SIGINT/SIGTERM.
pub async fn run(run: RunConfig) -> Result<(), Error> {
    let config = kube_config(run.kubeconfig.as_deref()).await?;
    let user_agent = crate::runtime::client::user_agent(run.settings.instance.as_deref());
    let metrics = Metrics::with_max_port_series(run.metrics_max_port_series);
    let readiness = Readiness::new(run.watch_policy);
    let shutdown = CancellationToken::new();

    let listener = http::bind(run.http_addr).await?;
    let server = tokio::spawn(http::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    ));

    // The Lease is renewed through a client without the write gate (the renewal is what moves
    // the gate's deadline); everything else goes through the gated one.
    let election = match run.leader {
        Some(leader) => Some(
            Election::start(
                crate::runtime::client::plain(config.clone(), &user_agent)?,
                leader,
            )
            .await?,
        ),
        None => None,
    };
    let leadership = election
        .as_ref()
        .map_or_else(Leadership::always, Election::leadership);
    let client = crate::runtime::client::gated(config, &user_agent, leadership.clone())?;
    {
        let (metrics, mut rx) = (metrics.clone(), leadership.subscribe());
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                metrics.leader.set(i64::from(*rx.borrow_and_update()));
            }
        });
    }

    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down: finishing in-flight reconciles");
        signals.cancel();
    });

    let result = controller::run(
        client,
        run.settings,
        leadership,
        metrics,
        readiness,
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    if let Some(election) = election {
        election.release(Duration::from_secs(5)).await;
    }
    let _ = server.await;
    result
}

async fn kube_config(kubeconfig: Option<&std::path::Path>) -> Result<Config, Error> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                Error::Config(format!("reading kubeconfig {}: {e}", path.display()))
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Config(format!("loading kubeconfig {}: {e}", path.display())))
        }
        None => Config::infer()
            .await
            .map_err(|e| Error::Config(format!("no in-cluster config or kubeconfig: {e}"))),
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
