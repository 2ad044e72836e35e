//! Command line: every flag can also be set from an environment variable (for Helm values).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// portmapper publishes per-port EndpointSlices for selector-less Services.
#[derive(Debug, Parser)]
#[command(name = "portmapper", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: LogArgs,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller against the cluster of the in-cluster config or the current kubeconfig.
    Run(RunArgs),
    /// Print the PortMapping CRD as YAML (`portmapper crd | kubectl apply -f -`).
    Crd,
    /// Run everything on an embedded API server (no cluster) and show membership live.
    #[cfg(feature = "demo")]
    Demo(DemoArgs),
    /// Preview offline what the operator would publish for manifests (no cluster needed).
    Render(crate::render::RenderArgs),
    /// Show the pods × ports membership of a live PortMapping, per IP family (also
    /// `kubectl portmapper status` when installed as the `kubectl-portmapper` plugin).
    Status(crate::status_view::StatusArgs),
}

/// `portmapper demo`.
#[derive(Debug, Args, Clone)]
pub struct DemoArgs {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, env = "PORTMAPPER_DEMO_DURATION")]
    pub duration: Option<u64>,
    /// Directory of manifests to apply (the built-in copy of examples/demo is used when absent).
    #[arg(
        long,
        env = "PORTMAPPER_DEMO_MANIFESTS",
        default_value = "examples/demo"
    )]
    pub manifests: PathBuf,
    /// Where to write the kubeconfig of the embedded API server (default: a temporary file).
    #[arg(long, env = "PORTMAPPER_DEMO_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Act out a user's kubectl session (annotate a pod, delete a pod) and show the effect.
    #[arg(long, env = "PORTMAPPER_DEMO_TOUR", default_value_t = false)]
    pub tour: bool,
    /// Where the logs go (default: `portmapper-demo.log` in the temporary directory), so they
    /// never scroll the membership table away.
    #[arg(long, env = "PORTMAPPER_DEMO_LOG_FILE")]
    pub log_file: Option<PathBuf>,
}

impl DemoArgs {
    /// The log file: `--log-file`, else `portmapper-demo.log` in the temporary directory.
    pub fn log_path(&self) -> PathBuf {
        self.log_file
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("portmapper-demo.log"))
    }
}

/// Logging.
#[derive(Debug, Args, Clone)]
pub struct LogArgs {
    /// Log filter, in `RUST_LOG` syntax (e.g. `info,portmapper=debug`).
    #[arg(
        long,
        env = "PORTMAPPER_LOG_LEVEL",
        default_value = "info,kube=warn",
        global = true
    )]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "PORTMAPPER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `portmapper run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Watch and manage PortMappings in this namespace only (default: all namespaces).
    #[arg(long, env = "PORTMAPPER_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// PortMappings reconciled at the same time (one PortMapping is never reconciled twice at once).
    #[arg(long, env = "PORTMAPPER_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    /// Seconds between two reconciles of an unchanged PortMapping (heals drift missed by watches).
    #[arg(long, env = "PORTMAPPER_RESYNC_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub resync_seconds: u64,
    /// Address of the HTTP server for `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "PORTMAPPER_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Read Nodes to publish zones and zone hints; off drops the Node RBAC.
    #[arg(long, env = "PORTMAPPER_NODE_LOOKUPS", default_value_t = true, action = clap::ArgAction::Set)]
    pub node_lookups: bool,
    /// Network probes in flight at once, across all PortMappings.
    #[arg(long, env = "PORTMAPPER_PROBE_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub probe_concurrency: u32,
    /// Restart a watch that is open but has received nothing, not even a bookmark, for this many
    /// seconds (the API server bookmarks about once a minute); `/readyz` fails meanwhile.
    #[arg(long, env = "PORTMAPPER_WATCH_STALL_SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch_stall_seconds: u64,
    #[command(flatten)]
    pub leader: LeaderArgs,
    /// Kubeconfig to use instead of the in-cluster config or `$KUBECONFIG`.
    #[arg(long, env = "PORTMAPPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl RunArgs {
    /// The resync period as a duration.
    pub fn resync(&self) -> Duration {
        Duration::from_secs(self.resync_seconds)
    }

    /// How watches retry and when one counts as stalled.
    pub fn watch_policy(&self) -> crate::watch_health::WatchPolicy {
        crate::watch_health::WatchPolicy {
            stall_after: Duration::from_secs(self.watch_stall_seconds),
            ..crate::watch_health::WatchPolicy::default()
        }
    }
}

/// Leader election through a coordination.k8s.io Lease.
#[derive(Debug, Args, Clone)]
pub struct LeaderArgs {
    /// Elect a leader among replicas; only the leader writes. Off: this process always writes.
    #[arg(long, env = "PORTMAPPER_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, env = "PORTMAPPER_LEASE_NAME", default_value = "portmapper")]
    pub lease_name: String,
    /// Namespace of the Lease (the operator's own namespace in a cluster).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Seconds a leader holds the Lease without renewing it.
    #[arg(long, env = "PORTMAPPER_LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_duration_seconds: u64,
    /// Seconds before expiry at which the leader renews (also the tolerated clock skew).
    #[arg(long, env = "PORTMAPPER_LEASE_GRACE_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_grace_seconds: u64,
    /// Identity of this replica in the Lease; must differ between replicas (default: the host
    /// name plus a random suffix, as client-go does).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

impl LeaderArgs {
    /// The election settings (resolves the default identity, so call it once per process).
    pub fn config(&self) -> crate::leader::LeaderConfig {
        let lease_duration = Duration::from_secs(self.lease_duration_seconds);
        // The grace must leave a write window: at most half the Lease.
        let grace = Duration::from_secs(self.lease_grace_seconds).min(lease_duration / 2);
        crate::leader::LeaderConfig {
            lease_name: self.lease_name.clone(),
            lease_namespace: self.lease_namespace.clone(),
            identity: self
                .identity
                .clone()
                .filter(|id| !id.is_empty())
                .unwrap_or_else(crate::leader::default_identity),
            lease_duration,
            grace,
            retry_period: crate::leader::LeaderConfig::default_retry_period(lease_duration, grace),
        }
    }
}
