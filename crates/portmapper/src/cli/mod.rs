//! Command line: every flag can also be set from an environment variable (for Helm values).

pub mod entry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::PossibleValue;
use clap::{Args, Parser, Subcommand, ValueEnum};
use portmapper_probe::WebhookEgress;

use crate::commands::render::{Assume, Format, RenderOptions};
use crate::commands::run::RunConfig;
use crate::commands::status::{Output, StatusOptions};
use crate::reconcile::context::Settings;
use crate::runtime::leader::{LeaderConfig, default_identity};
use crate::runtime::telemetry::{LogConfig, LogFormat};
use crate::runtime::watch_health::WatchPolicy;

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
    Render(RenderArgs),
    /// Show the pods × ports membership of a live PortMapping, per IP family (also
    /// `kubectl portmapper status` when installed as the `kubectl-portmapper` plugin).
    Status(StatusArgs),
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

    /// What the demo runs with.
    #[cfg(feature = "demo")]
    pub fn config(&self) -> crate::commands::demo::DemoConfig {
        crate::commands::demo::DemoConfig {
            duration: self.duration.map(Duration::from_secs),
            manifests: self.manifests.clone(),
            kubeconfig: self.kubeconfig.clone(),
            tour: self.tour,
            log_path: self.log_path(),
        }
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

impl LogArgs {
    /// The logging settings.
    pub fn config(&self) -> LogConfig {
        LogConfig {
            filter: self.log_level.clone(),
            format: self.log_format,
        }
    }
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
    /// Read Nodes to publish zones and zone hints, and for their readiness (a gated pod on a
    /// NotReady node is not published); off drops the Node RBAC.
    #[arg(long, env = "PORTMAPPER_NODE_LOOKUPS", default_value_t = true, action = clap::ArgAction::Set)]
    pub node_lookups: bool,
    /// Network probes in flight at once, across all PortMappings.
    #[arg(long, env = "PORTMAPPER_PROBE_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub probe_concurrency: u32,
    /// Network probes in flight at once for the PortMappings of one namespace, so one tenant's
    /// hanging probes leave the rest to others (default: half of --probe-concurrency).
    #[arg(long, env = "PORTMAPPER_PROBE_CONCURRENCY_PER_NAMESPACE", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub probe_concurrency_per_namespace: Option<u32>,
    /// Network probes in flight at once for one PortMapping, so its hanging probes only ever
    /// hold its own share (default: a quarter of --probe-concurrency).
    #[arg(long, env = "PORTMAPPER_PROBE_CONCURRENCY_PER_PORTMAPPING", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub probe_concurrency_per_portmapping: Option<u32>,
    /// Probe targets one PortMapping may ask for: network check positions over the Service's
    /// ports × pool pods × IP families. Over it, the PortMapping is Stalled (reason
    /// TooManyProbeTargets) and keeps what it published.
    #[arg(long, env = "PORTMAPPER_MAX_PROBE_TARGETS_PER_PORTMAPPING", default_value_t = 4_096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_probe_targets_per_portmapping: u32,
    /// Probe targets the PortMappings of one namespace may hold together.
    #[arg(long, env = "PORTMAPPER_MAX_PROBE_TARGETS_PER_NAMESPACE", default_value_t = 16_384, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_probe_targets_per_namespace: u32,
    /// EndpointSlices one PortMapping may publish. Over it, the PortMapping is Stalled (reason
    /// TooManySlices) and keeps what it published.
    #[arg(long, env = "PORTMAPPER_MAX_SLICES_PER_PORTMAPPING", default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_slices_per_portmapping: u32,
    /// A change that follows a PortMapping's last write within a fifth of this many
    /// milliseconds (a burst: a rolling restart) waits until this long after that write, and
    /// the burst's changes share writes; a change after a quiet spell is written at once.
    /// A PortMapping's status counts (not its conditions) are written at most once per this
    /// window after a status write. 0 writes at every change.
    #[arg(long, env = "PORTMAPPER_BATCH_WINDOW_MS", default_value_t = crate::reconcile::batch_window::DEFAULT_BATCH_WINDOW_MS, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub batch_window_ms: u64,
    /// Label-selected pod watches per namespace: one per distinct `pods.key` (`from: Label`)
    /// of the namespace's PortMappings, oldest first; the PortMappings of keys over the cap
    /// are Stalled (`TooManyPodWatches`) and keep what they published.
    #[arg(long, env = "PORTMAPPER_MAX_POD_WATCHES_PER_NAMESPACE", default_value_t = crate::index::DEFAULT_MAX_POD_WATCHES as u32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_pod_watches_per_namespace: u32,
    /// `portmapper_endpoints_published` series per PortMapping: its first ports (by name),
    /// the rest summed into one series per address type with `port="_other"`; 0 sums them all.
    #[arg(long, env = "PORTMAPPER_METRICS_MAX_PORT_SERIES", default_value_t = crate::runtime::metrics::DEFAULT_MAX_PORT_SERIES as u32, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub metrics_max_port_series: u32,
    /// Restart a watch that is open but has received nothing, not even a bookmark, for this many
    /// seconds (the API server bookmarks about once a minute); `/readyz` fails meanwhile.
    #[arg(long, env = "PORTMAPPER_WATCH_STALL_SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch_stall_seconds: u64,
    /// Host names webhook URLs may name, comma-separated: exact names, `*.` and a suffix
    /// (`*.svc` matches any name ending in `.svc`), or `*` for any; the label `{namespace}`
    /// stands for the PortMapping's namespace. The default admits the Services of the
    /// PortMapping's own namespace only. Empty refuses every name.
    #[arg(long, env = "PORTMAPPER_WEBHOOK_ALLOWED_HOSTS", value_delimiter = ',', default_values_t = portmapper_probe::egress::DEFAULT_ALLOWED_HOSTS.map(String::from), value_parser = host_pattern)]
    pub webhook_allowed_hosts: Vec<String>,
    /// CIDRs of IP addresses webhook URLs may name as their host, comma-separated (default:
    /// none, so webhooks name hosts). Loopback, link-local and metadata addresses stay refused.
    #[arg(long, env = "PORTMAPPER_WEBHOOK_ALLOWED_CIDRS", value_delimiter = ',', value_parser = cidr)]
    pub webhook_allowed_cidrs: Vec<String>,
    #[command(flatten)]
    pub leader: LeaderArgs,
    /// Kubeconfig to use instead of the in-cluster config or `$KUBECONFIG`.
    #[arg(long, env = "PORTMAPPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl RunArgs {
    /// What `run` runs with (resolves the default Lease identity, so call it once per process).
    pub fn config(&self) -> RunConfig {
        let leader = self.leader.leader_elect.then(|| self.leader.config());
        // The Lease identity when electing, so Events and the User-Agent name the same replica.
        let identity = leader
            .as_ref()
            .map(|l| l.identity.clone())
            .or_else(|| self.leader.identity.clone());
        RunConfig {
            kubeconfig: self.kubeconfig.clone(),
            http_addr: self.http_addr,
            metrics_max_port_series: self.metrics_max_port_series as usize,
            leader,
            watch_policy: WatchPolicy {
                stall_after: Duration::from_secs(self.watch_stall_seconds),
                ..WatchPolicy::default()
            },
            settings: Settings {
                namespace: self.watch_namespace.clone(),
                concurrency: self.concurrency,
                resync: Duration::from_secs(self.resync_seconds),
                node_lookups: self.node_lookups,
                instance: identity,
                probe_concurrency: usize::try_from(self.probe_concurrency)
                    .unwrap_or(portmapper_probe::DEFAULT_CONCURRENCY),
                probe_concurrency_per_namespace: self
                    .probe_concurrency_per_namespace
                    .and_then(|n| usize::try_from(n).ok()),
                probe_concurrency_per_portmapping: self
                    .probe_concurrency_per_portmapping
                    .and_then(|n| usize::try_from(n).ok()),
                batch_window: Duration::from_millis(self.batch_window_ms),
                max_pod_watches_per_namespace: self.max_pod_watches_per_namespace as usize,
                budgets: self.budgets(),
                webhook_egress: self.webhook_egress(),
            },
        }
    }

    fn budgets(&self) -> portmapper_core::budget::Budgets {
        let size = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        portmapper_core::budget::Budgets {
            probe_targets_per_portmapping: size(self.max_probe_targets_per_portmapping),
            probe_targets_per_namespace: size(self.max_probe_targets_per_namespace),
            slices_per_portmapping: size(self.max_slices_per_portmapping),
        }
    }

    /// The webhook egress policy (each entry was checked when the flags were parsed).
    fn webhook_egress(&self) -> WebhookEgress {
        WebhookEgress::new(&self.webhook_allowed_hosts, &self.webhook_allowed_cidrs)
            .unwrap_or_else(|_| WebhookEgress::deny_all())
    }
}

/// One `--webhook-allowed-hosts` entry, checked.
fn host_pattern(text: &str) -> Result<String, String> {
    WebhookEgress::new([text], [""; 0])
        .map(|_| text.to_owned())
        .map_err(|e| e.to_string())
}

/// One `--webhook-allowed-cidrs` entry, checked.
fn cidr(text: &str) -> Result<String, String> {
    WebhookEgress::new([""; 0], [text])
        .map(|_| text.to_owned())
        .map_err(|e| e.to_string())
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
    pub fn config(&self) -> LeaderConfig {
        let lease_duration = Duration::from_secs(self.lease_duration_seconds);
        // The grace must leave a write window: at most half the Lease.
        let grace = Duration::from_secs(self.lease_grace_seconds).min(lease_duration / 2);
        LeaderConfig {
            lease_name: self.lease_name.clone(),
            lease_namespace: self.lease_namespace.clone(),
            identity: self
                .identity
                .clone()
                .filter(|id| !id.is_empty())
                .unwrap_or_else(default_identity),
            lease_duration,
            grace,
            retry_period: LeaderConfig::default_retry_period(lease_duration, grace),
        }
    }
}

/// `portmapper render`.
#[derive(Debug, Args, Clone)]
pub struct RenderArgs {
    /// Manifest files or directories (read recursively: *.yaml, *.yml, *.json); `-` is stdin.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub filenames: Vec<PathBuf>,
    /// The result every network check (httpGet, tcpSocket, grpc, webhook) is assumed to give:
    /// render never probes.
    #[arg(long, value_enum, default_value_t = Assume::Abstain)]
    pub assume: Assume,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
    /// Namespace of objects that name none (as kubectl's current namespace would).
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

impl RenderArgs {
    /// What render reads and prints.
    pub fn options(&self) -> RenderOptions {
        RenderOptions {
            filenames: self.filenames.clone(),
            assume: self.assume,
            output: self.output,
            namespace: self.namespace.clone(),
        }
    }
}

/// `portmapper status`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// The PortMapping.
    pub name: String,
    /// Namespace (default: the kubeconfig context's namespace, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Print again on every change of the PortMapping, its Service or its slices, until Ctrl-C.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format (`json` with `--watch`: one document per line).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`, else in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
}

impl StatusArgs {
    /// What status shows.
    pub fn options(&self) -> StatusOptions {
        StatusOptions {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            watch: self.watch,
            output: self.output,
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}

// The flag spellings of the library's enums live here, so the modules that take them stay free of
// clap. Each help text is what `--help` lists for the value.

impl ValueEnum for LogFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::Text, Self::Json]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::Text => PossibleValue::new("text").help("Human-readable lines"),
            Self::Json => PossibleValue::new("json").help("One JSON object per line"),
        })
    }
}

impl ValueEnum for Assume {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::Include, Self::Exclude, Self::Abstain]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Self::Include => "Every network check includes the pod",
            Self::Exclude => "Every network check excludes the pod",
            Self::Abstain => "Every network check abstains: on a first publish, such pods stay out",
        };
        Some(PossibleValue::new(self.as_str()).help(help))
    }
}

impl ValueEnum for Format {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::Yaml, Self::Table]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::Yaml => PossibleValue::new("yaml")
                .help("Multi-document YAML: the objects, then the PortMapping with its status"),
            Self::Table => PossibleValue::new("table").help("A summary table per PortMapping"),
        })
    }
}

impl ValueEnum for Output {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::Table, Self::Json]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::Table => {
                PossibleValue::new("table").help("One matrix per IP family, reasons below it")
            }
            Self::Json => PossibleValue::new("json")
                .help("The documented machine-readable shape (docs/status.md)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("portmapper").chain(args.iter().copied()))
            .expect("valid command line")
    }

    fn run_config(args: &[&str]) -> RunConfig {
        match parse(args).command {
            Command::Run(run) => run.config(),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn webhook_egress_flags_become_the_policy() {
        let default = run_config(&["run"]).settings.webhook_egress;
        assert_eq!(default, WebhookEgress::default());
        assert!(default.refusal("decider.shop.svc", "shop").is_none());
        assert!(default.refusal("decider.other.svc", "shop").is_some());
        let set = run_config(&[
            "run",
            "--webhook-allowed-hosts=*.svc,decider.example.com",
            "--webhook-allowed-cidrs=10.96.0.0/12",
        ])
        .settings
        .webhook_egress;
        assert_eq!(
            set,
            WebhookEgress::new(["*.svc", "decider.example.com"], ["10.96.0.0/12"])
                .expect("valid policy")
        );
        let off = run_config(&["run", "--webhook-allowed-hosts="])
            .settings
            .webhook_egress;
        assert_eq!(off, WebhookEgress::deny_all());
        for bad in [
            "--webhook-allowed-hosts=http://x/",
            "--webhook-allowed-cidrs=10.0.0.1",
        ] {
            let err = Cli::try_parse_from(["portmapper", "run", bad]).expect_err(bad);
            assert!(err.to_string().contains("want"), "{err}");
        }
    }

    #[test]
    fn run_flags_become_the_run_config() {
        let config = run_config(&[
            "run",
            "--leader-elect=false",
            "--identity=replica-a",
            "--watch-namespace=shop",
            "--concurrency=9",
            "--resync-seconds=7",
            "--node-lookups=false",
            "--probe-concurrency=3",
            "--probe-concurrency-per-namespace=2",
            "--probe-concurrency-per-portmapping=1",
            "--watch-stall-seconds=11",
            "--http-addr=127.0.0.1:9",
            "--kubeconfig=/tmp/kc",
        ]);
        assert!(config.leader.is_none());
        // Without an election the flag still names the replica (User-Agent, Events).
        assert_eq!(config.settings.instance.as_deref(), Some("replica-a"));
        assert_eq!(config.settings.namespace.as_deref(), Some("shop"));
        assert_eq!(config.settings.concurrency, 9);
        assert_eq!(config.settings.resync, Duration::from_secs(7));
        assert!(!config.settings.node_lookups);
        assert_eq!(config.settings.probe_concurrency, 3);
        assert_eq!(config.settings.probe_concurrency_per_namespace, Some(2));
        assert_eq!(config.settings.probe_concurrency_per_portmapping, Some(1));
        assert_eq!(config.watch_policy.stall_after, Duration::from_secs(11));
        assert_eq!(
            config.watch_policy.backoff_max,
            WatchPolicy::default().backoff_max
        );
        assert_eq!(config.http_addr, "127.0.0.1:9".parse().expect("address"));
        assert_eq!(config.kubeconfig, Some(PathBuf::from("/tmp/kc")));
    }

    #[test]
    fn an_elected_replica_is_named_by_its_lease_identity() {
        let config = run_config(&["run", "--identity=replica-b", "--lease-duration-seconds=20"]);
        let leader = config.leader.expect("elects by default");
        assert_eq!(leader.identity, "replica-b");
        assert_eq!(leader.lease_duration, Duration::from_secs(20));
        assert_eq!(config.settings.instance.as_deref(), Some("replica-b"));
        // No identity flag: the generated one, the same in the Lease and the settings.
        let config = run_config(&["run", "--identity="]);
        let leader = config.leader.expect("elects by default");
        assert!(!leader.identity.is_empty());
        assert_eq!(config.settings.instance, Some(leader.identity));
    }

    #[test]
    fn log_flags_become_the_log_config() {
        let cli = parse(&["--log-level=debug", "--log-format=json", "crd"]);
        assert_eq!(
            cli.log.config(),
            LogConfig {
                filter: "debug".into(),
                format: LogFormat::Json
            }
        );
    }

    #[test]
    fn every_flag_value_parses_back_to_its_variant() {
        fn round_trip<E: ValueEnum + PartialEq + std::fmt::Debug>() -> usize {
            for v in E::value_variants() {
                let name = v
                    .to_possible_value()
                    .expect("not hidden")
                    .get_name()
                    .to_string();
                assert_eq!(&E::from_str(&name, false).expect("parses"), v, "{name}");
            }
            E::value_variants().len()
        }
        assert_eq!(round_trip::<LogFormat>(), 2);
        assert_eq!(round_trip::<Assume>(), 3);
        assert_eq!(round_trip::<Format>(), 2);
        assert_eq!(round_trip::<Output>(), 2);
        let render =
            match parse(&["render", "-f", "a.yaml", "--assume=include", "-o", "table"]).command {
                Command::Render(args) => args.options(),
                other => panic!("not render: {other:?}"),
            };
        assert_eq!(render.assume, Assume::Include);
        assert_eq!(render.output, Format::Table);
        assert_eq!(render.namespace, "default");
        assert_eq!(render.filenames, [PathBuf::from("a.yaml")]);
        let status = match parse(&["status", "pm", "-n", "shop", "-w", "-o", "json"]).command {
            Command::Status(args) => args.options(),
            other => panic!("not status: {other:?}"),
        };
        assert_eq!(
            (
                status.name.as_str(),
                status.namespace.as_deref(),
                status.watch,
                status.output
            ),
            ("pm", Some("shop"), true, Output::Json)
        );
    }
}
