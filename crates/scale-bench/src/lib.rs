//! Scale bench of issue 10: runs the `kube-emulator` and `portmapper` binaries as separate
//! processes (as users run them), generates shape A or B from a seed, and measures start → all
//! published, memory, writes while converged, pod-flip latency from watch events, writes per
//! flip, a rolling restart, and the floors (the emulator's PATCH → watch event, a plain client
//! applying the same slices). The `bench-scale` binary prints the table; the `it` test runs the
//! same harness at small sizes as exact checks of write counts.
//!
//! Nothing here builds anything: the binaries are given as paths.

pub mod admin;
pub mod floor;
pub mod observe;
pub mod op_metrics;
pub mod procs;
pub mod real;
pub mod shape;
pub mod status_floor;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub use floor::Floor;
pub use observe::Published;
pub use procs::Binaries;
pub use shape::Shape;

use observe::{MANAGED_BY, Observer};
use procs::{Proc, TempDir};
use shape::NS;

/// What can stop a run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary under test is not where it was looked for.
    #[error("{0} does not exist: build it first (`make bench-scale` builds the release binaries)")]
    MissingBinary(PathBuf),
    /// The real control plane's binary is not where it was looked for.
    #[error("{0} does not exist: build it with `make realkube` (needs Go), or set REALKUBE_BIN")]
    MissingRealkube(PathBuf),
    /// A binary could not be started.
    #[error("cannot start {0}: {1}")]
    Spawn(PathBuf, #[source] std::io::Error),
    /// A process or task ended early.
    #[error("{0} exited early")]
    Exited(&'static str),
    /// A bounded wait ran out.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// The kubeconfig points elsewhere than loopback.
    #[error("the emulator's kubeconfig points at {0}, not 127.0.0.1")]
    NotLoopback(String),
    /// The admin API answered something unexpected.
    #[error("emulator admin API: {0}")]
    Admin(String),
    /// A Kubernetes API call failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// Reading the kubeconfig failed.
    #[error(transparent)]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// Local I/O failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// JSON (de)serialisation failed.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The CRD printed by `portmapper crd` did not parse.
    #[error("`portmapper crd`: {0}")]
    Crd(#[from] serde_yaml::Error),
}

/// How one run goes.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Shape and size.
    pub shape: Shape,
    /// Seed of the shape and of the flip sample.
    pub seed: u64,
    /// Pod flips (each sampled pod goes unready, then ready: two flips).
    pub flips: usize,
    /// The operator's `--resync-seconds`.
    pub resync_seconds: u64,
    /// Resync periods to count writes over once converged.
    pub converged_resyncs: u32,
    /// Bound on operator start → all published; past it the run reports how far it got.
    pub publish_timeout: Duration,
    /// Bound on every other wait (one flip, the rolling restart's convergence).
    pub phase_timeout: Duration,
    /// After a change is fully visible, how long to wait for stray writes before counting.
    pub settle: Duration,
    /// No slice event for this long counts as converged (rolling restart).
    pub quiet: Duration,
    /// Run the rolling restart.
    pub rolling: bool,
    /// Measure the plain-client floor.
    pub floors: bool,
    /// Requests in flight while creating the pods (setup only, not measured).
    pub setup_concurrency: usize,
    /// Keep the temp dir (kubeconfig, process logs).
    pub keep_logs: bool,
}

impl RunConfig {
    /// Defaults of the bench for `shape`.
    pub fn new(shape: Shape) -> Self {
        Self {
            shape,
            seed: 10,
            flips: 40,
            resync_seconds: 5,
            converged_resyncs: 3,
            publish_timeout: Duration::from_secs(300),
            phase_timeout: Duration::from_secs(120),
            settle: Duration::from_millis(300),
            quiet: Duration::from_secs(2),
            rolling: true,
            floors: true,
            setup_concurrency: 8,
            keep_logs: false,
        }
    }
}

/// One pod flip.
#[derive(Debug, Clone)]
pub struct Flip {
    /// Pod.
    pub pod: String,
    /// Ready after the flip.
    pub ready: bool,
    /// Service ports the pod serves (lists).
    pub ports: usize,
    /// The operator's slices that list the pod before or after the flip, whichever is more
    /// (the writes a flip needs: an unready pod is left out).
    pub slices: usize,
    /// PATCH sent → the bench's pod watch event (the emulator's floor).
    pub floor: Duration,
    /// Pod watch event → first slice watch event reflecting the flip.
    pub first: Duration,
    /// Pod watch event → every port's slice reflects it.
    pub all: Duration,
    /// EndpointSlice writes by the operator.
    pub slice_writes: usize,
    /// Every write by the operator (slices, status, events).
    pub operator_writes: usize,
    /// The operator's reconciles from the PATCH to the end of the settle time after it (our
    /// own writes' echoes included), from its `/metrics`.
    pub reconciles: op_metrics::Reconciles,
}

/// The rolling restart: every pod unready then ready, back to back.
#[derive(Debug, Clone)]
pub struct Rolling {
    /// Status patches sent.
    pub patches: usize,
    /// First patch → last patch.
    pub patch_time: Duration,
    /// First patch → the last slice event before the slices went quiet, all ready.
    pub converge: Duration,
    /// Last patch → converged.
    pub after_last_patch: Duration,
    /// Pod transitions requested: 2 per pod (unready, then ready). A port-set slice holds all
    /// of a pod's ports, so one write can carry a pod's transition on every port.
    pub transitions: usize,
    /// Per-(service, port, pod) changes the bench saw in slice events.
    pub visible_transitions: usize,
    /// EndpointSlice writes by the operator.
    pub slice_writes: usize,
    /// Every write by the operator.
    pub operator_writes: usize,
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Shape and size.
    pub shape: Shape,
    /// Pods created.
    pub pods: usize,
    /// PortMappings created.
    pub mappings: usize,
    /// Creating the objects (not part of any figure).
    pub setup: Duration,
    /// Operator process start → every port published with every pod; `None`: not within the
    /// bound.
    pub published: Option<Duration>,
    /// The operator's requests from its start until the publication was seen complete, per
    /// "verb resource[/subresource]" (every request costs the emulator, which serves one at a
    /// time).
    pub publish_requests: BTreeMap<String, usize>,
    /// When the publication's reads and writes reached the API server.
    pub publish_timeline: Option<admin::Timeline>,
    /// Ready endpoints published when it converged or the bound ran out, and the total wanted.
    pub ready_endpoints: (usize, usize),
    /// Slices the operator published.
    pub slices: usize,
    /// Operator memory after convergence.
    pub operator_mem: procs::Memory,
    /// Emulator VmRSS, VmHWM (KiB) after convergence.
    pub emulator_mem_kib: (u64, u64),
    /// Window over which converged writes were counted.
    pub converged_window: Duration,
    /// Operator CPU time (user + system) in that window: every resync pass of every
    /// PortMapping with nothing changed, plus the idle cost of its watches.
    pub converged_cpu: Duration,
    /// The same, per resync period of the window in order (the first holds the pass that
    /// confirms the publication's writes; the later ones the passes with nothing new).
    pub converged_cpu_periods: Vec<Duration>,
    /// The operator's --resync-seconds.
    pub resync_seconds: u64,
    /// Writes per client in that window.
    pub converged_writes: BTreeMap<String, usize>,
    /// Operator writes in that window.
    pub converged_operator_writes: usize,
    /// The pod flips.
    pub flips: Vec<Flip>,
    /// The rolling restart.
    pub rolling: Option<Rolling>,
    /// The plain-client floor.
    pub floor: Option<Floor>,
    /// Load average before the operator started.
    pub load_before: String,
    /// Load average at the end.
    pub load_after: String,
    /// Where the logs are, when kept.
    pub logs: Option<PathBuf>,
}

fn bench_patch() -> PatchParams {
    PatchParams {
        field_manager: Some("scale-bench".into()),
        ..PatchParams::default()
    }
}

fn bench_post() -> PostParams {
    PostParams {
        field_manager: Some("scale-bench".into()),
        ..PostParams::default()
    }
}

/// Installs the CRD the operator binary prints (`portmapper crd`), so the two always match; one
/// already installed (an earlier run on the same control plane) is kept.
async fn install_crd(operator: &std::path::Path, client: &Client) -> Result<(), Error> {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(operator)
            .arg("crd")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| Error::Timeout("`portmapper crd`".into()))?
    .map_err(|e| Error::Spawn(operator.to_path_buf(), e))?;
    let crd: CustomResourceDefinition = serde_yaml::from_slice(&out.stdout)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    match crds.create(&bench_post(), &crd).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        other => drop(other?),
    }
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .map_err(|_| Error::Timeout("the CRD to be established".into()))?
    .map_err(|e| Error::Admin(e.to_string()))?;
    Ok(())
}

/// Creates the Services (the shape's, then `extra_services`), the pods with their status and
/// the PortMappings in namespace `ns`.
async fn create_objects(
    client: &Client,
    ns: &str,
    g: &shape::Generated,
    extra_services: &[Value],
    concurrency: usize,
) -> Result<(), Error> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(g.services.iter().chain(extra_services).map(|s| {
        let services = services.clone();
        async move {
            services
                .create(&bench_post(), &serde_json::from_value(s.clone())?)
                .await?;
            Ok::<(), Error>(())
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<()>()
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(g.pods.iter().map(|p| {
        let pods = pods.clone();
        async move {
            pods.create(&bench_post(), &serde_json::from_value(p.object())?)
                .await?;
            pods.patch_status(&p.name, &bench_patch(), &Patch::Merge(&p.status(true)))
                .await?;
            Ok::<(), Error>(())
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<()>()
    .await?;
    let gvk = GroupVersionKind::gvk("portmapper.dev", "v1alpha1", "PortMapping");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "portmappings");
    let pms: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    futures::stream::iter(g.mappings.iter().map(|m| {
        let pms = pms.clone();
        async move {
            pms.create(&bench_post(), &serde_json::from_value(m.clone())?)
                .await?;
            Ok::<(), Error>(())
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<()>()
    .await
}

fn operator_args(
    kubeconfig: &std::path::Path,
    resync: u64,
    http: std::net::SocketAddr,
) -> Vec<String> {
    [
        "run",
        "--kubeconfig",
        &kubeconfig.to_string_lossy(),
        "--node-lookups=false",
        "--leader-elect=false",
        "--resync-seconds",
        &resync.to_string(),
        "--http-addr",
        &http.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// Runs one shape end to end; the processes are killed when it returns (or panics).
pub async fn run(bins: &Binaries, cfg: &RunConfig) -> Result<Report, Error> {
    let mut dir = TempDir::new()?;
    dir.keep = cfg.keep_logs;
    let result = run_in(bins, cfg, &dir).await;
    if result.is_err() {
        // A failed run keeps its logs for a look.
        dir.keep = true;
        eprintln!("scale-bench: logs kept in {}", dir.path.display());
    }
    result
}

async fn run_in(bins: &Binaries, cfg: &RunConfig, dir: &TempDir) -> Result<Report, Error> {
    let (mut emu, kubeconfig, client) = procs::start_emulator(bins, &dir.path).await?;
    install_crd(&bins.operator, &client).await?;
    let g = shape::generate(cfg.shape, cfg.seed);
    let setup_start = Instant::now();
    create_objects(&client, NS, &g, &[], cfg.setup_concurrency).await?;
    let setup = setup_start.elapsed();
    let obs = Observer::start(&client, cfg.phase_timeout).await?;
    let want_total: usize = g.expected.values().sum();

    let load_before = procs::load_average();
    let op_http = op_metrics::free_addr()?;
    // The log then holds the operator's requests of the publication (and the observer's).
    admin::clear(&client).await?;
    let mut op = Proc::spawn(
        &bins.operator,
        &operator_args(&kubeconfig, cfg.resync_seconds, op_http),
        dir.path.join("operator.log"),
    )?;
    let started = Instant::now();
    let published = obs
        .wait("every port published", cfg.publish_timeout, |v| {
            v.all_published(&g.expected)
                .then(|| v.last_slice_event.unwrap_or_else(Instant::now))
        })
        .await;
    op.check_alive("portmapper")?;
    emu.check_alive("kube-emulator")?;
    let logged = admin::requests(&client).await?;
    let publish_requests = admin::by_request(&logged, admin::OPERATOR_AGENT);
    let publish_timeline = admin::timeline(&logged, admin::OPERATOR_AGENT);
    // One guard: two `obs.view()` temporaries in one statement would deadlock.
    let (ready_now, slices_now) = {
        let v = obs.view();
        (v.ready_total(), v.slice_count())
    };
    let mut report = Report {
        shape: cfg.shape,
        pods: g.pods.len(),
        mappings: g.mappings.len(),
        setup,
        published: None,
        publish_requests,
        publish_timeline,
        ready_endpoints: (ready_now, want_total),
        slices: slices_now,
        operator_mem: procs::memory(op.pid)?,
        emulator_mem_kib: procs::memory_kib(emu.pid)?,
        converged_window: Duration::ZERO,
        converged_cpu: Duration::ZERO,
        converged_cpu_periods: Vec::new(),
        resync_seconds: cfg.resync_seconds,
        converged_writes: BTreeMap::new(),
        converged_operator_writes: 0,
        flips: Vec::new(),
        rolling: None,
        floor: None,
        load_before,
        load_after: String::new(),
        logs: cfg.keep_logs.then(|| dir.path.clone()),
    };
    match published {
        Ok(at) => report.published = Some(at.saturating_duration_since(started)),
        Err(Error::Timeout(_)) => {
            // Not converged within the bound: report how far it got, measure nothing else.
            report.load_after = procs::load_average();
            obs.stop().await;
            op.stop().await;
            emu.stop().await;
            return Ok(report);
        }
        Err(e) => return Err(e),
    }

    // Writes while converged: several resync periods with nothing changing.
    tokio::time::sleep(cfg.settle).await;
    admin::clear(&client).await?;
    let window = Duration::from_secs(cfg.resync_seconds * u64::from(cfg.converged_resyncs))
        + Duration::from_millis(500);
    let cpu_before = procs::cpu_time(op.pid)?;
    let period = Duration::from_secs(cfg.resync_seconds);
    let mut last = cpu_before;
    for _ in 0..cfg.converged_resyncs {
        tokio::time::sleep(period).await;
        let now = procs::cpu_time(op.pid)?;
        report.converged_cpu_periods.push(now.saturating_sub(last));
        last = now;
    }
    tokio::time::sleep(window.saturating_sub(period * cfg.converged_resyncs)).await;
    report.converged_cpu = procs::cpu_time(op.pid)?.saturating_sub(cpu_before);
    let w = admin::writes(&client).await?;
    report.converged_window = window;
    report.converged_writes = w.by_client();
    report.converged_operator_writes = w.count(admin::OPERATOR, None);
    report.operator_mem = procs::memory(op.pid)?;
    report.emulator_mem_kib = procs::memory_kib(emu.pid)?;

    if cfg.floors {
        report.floor = Some(floor::measure(&client, NS, MANAGED_BY, None).await?);
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let sample = shape::sample(g.pods.len(), cfg.flips.div_ceil(2), cfg.seed);
    'flips: for i in sample {
        for ready in [false, true] {
            if report.flips.len() >= cfg.flips {
                break 'flips;
            }
            let p = &g.pods[i];
            report
                .flips
                .push(flip(&client, &pods, &obs, cfg, p, ready, op_http).await?);
        }
    }

    if cfg.rolling {
        report.rolling = Some(rolling_restart(&client, &pods, &obs, cfg, &g).await?);
    }
    op.check_alive("portmapper")?;
    report.load_after = procs::load_average();
    // The watches end before their server does.
    obs.stop().await;
    op.stop().await;
    emu.stop().await;
    Ok(report)
}

fn ready_patch(ready: bool) -> Value {
    json!({"status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

fn reflects(state: Published, ready: bool) -> bool {
    (state == Published::Ready) == ready
}

/// When the bench saw one flip: its PATCH sent, the pod's watch event, the first and the last
/// of the ports' slice events that show it.
#[derive(Debug, Clone, Copy)]
pub struct FlipSeen {
    sent: Instant,
    pod_event: Instant,
    first: Instant,
    all: Instant,
}

impl FlipSeen {
    /// PATCH sent → the pod's watch event (the API's floor).
    pub fn floor(&self) -> Duration {
        self.pod_event.saturating_duration_since(self.sent)
    }

    /// The pod's watch event → the first slice event that shows the flip.
    pub fn first(&self) -> Duration {
        self.first.saturating_duration_since(self.pod_event)
    }

    /// The pod's watch event → every port's slice shows it.
    pub fn all(&self) -> Duration {
        self.all.saturating_duration_since(self.pod_event)
    }
}

/// Patches pod `p` to `ready` and waits until the slices of every one of `ports` show it.
pub async fn flip_seen(
    pods: &Api<Pod>,
    obs: &Observer,
    p: &shape::PodSpec,
    ready: bool,
    ports: &[&str],
    timeout: Duration,
) -> Result<FlipSeen, Error> {
    let (pe0, tr0) = {
        let v = obs.view();
        (v.pod_events.len(), v.transitions.len())
    };
    let sent = Instant::now();
    pods.patch_status(&p.name, &bench_patch(), &Patch::Merge(&ready_patch(ready)))
        .await?;
    let pod_event = obs
        .wait("the flipped pod's watch event", timeout, |v| {
            v.pod_events[pe0..]
                .iter()
                .find(|e| e.pod == p.name && e.ready == ready)
                .map(|e| e.at)
        })
        .await?;
    let (first, all) = obs
        .wait("the slices to reflect a flip", timeout, |v| {
            let mut seen: HashMap<&str, Instant> = HashMap::new();
            for t in &v.transitions[tr0..] {
                if t.pod == p.name && reflects(t.state, ready) {
                    seen.entry(t.port.as_str()).or_insert(t.at);
                }
            }
            ports.iter().all(|port| seen.contains_key(port)).then(|| {
                let times = ports.iter().filter_map(|port| seen.get(port).copied());
                let first = times.clone().min().unwrap_or(pod_event);
                let all = times.max().unwrap_or(pod_event);
                (first, all)
            })
        })
        .await?;
    Ok(FlipSeen {
        sent,
        pod_event,
        first,
        all,
    })
}

async fn flip(
    client: &Client,
    pods: &Api<Pod>,
    obs: &Observer,
    cfg: &RunConfig,
    p: &shape::PodSpec,
    ready: bool,
    op_http: std::net::SocketAddr,
) -> Result<Flip, Error> {
    admin::clear(client).await?;
    let reconciles_before = op_metrics::reconciles(op_http).await?;
    let slices = obs.view().slices_holding(None, &p.name);
    let seen = flip_seen(pods, obs, p, ready, &p.ports, cfg.phase_timeout).await?;
    tokio::time::sleep(cfg.settle).await;
    let slices = slices.max(obs.view().slices_holding(None, &p.name));
    let w = admin::writes(client).await?;
    let reconciles = op_metrics::reconciles(op_http)
        .await?
        .since(reconciles_before);
    Ok(Flip {
        pod: p.name.clone(),
        ready,
        ports: p.ports.len(),
        slices,
        floor: seen.floor(),
        first: seen.first(),
        all: seen.all(),
        slice_writes: w.count(admin::OPERATOR, Some("endpointslices")),
        operator_writes: w.count(admin::OPERATOR, None),
        reconciles,
    })
}

async fn rolling_restart(
    client: &Client,
    pods: &Api<Pod>,
    obs: &Observer,
    cfg: &RunConfig,
    g: &shape::Generated,
) -> Result<Rolling, Error> {
    admin::clear(client).await?;
    let tr0 = obs.view().transitions.len();
    let first = Instant::now();
    let deadline = first + cfg.phase_timeout.max(Duration::from_secs(600));
    let mut patches = 0;
    for p in &g.pods {
        if Instant::now() > deadline {
            return Err(Error::Timeout("the rolling restart's patches".into()));
        }
        for ready in [false, true] {
            pods.patch_status(&p.name, &bench_patch(), &Patch::Merge(&ready_patch(ready)))
                .await?;
            patches += 1;
        }
    }
    let last = Instant::now();
    let quiet = cfg.quiet;
    let converged = obs
        .wait(
            "the rolling restart to converge",
            cfg.phase_timeout + quiet,
            |v| {
                let last_event = v.last_slice_event.unwrap_or(first).max(last);
                (v.all_published(&g.expected) && last_event.elapsed() >= quiet)
                    .then_some(last_event)
            },
        )
        .await?;
    tokio::time::sleep(cfg.settle).await;
    let w = admin::writes(client).await?;
    Ok(Rolling {
        patches,
        patch_time: last - first,
        converge: converged - first,
        after_last_patch: converged - last,
        transitions: 2 * g.pods.len(),
        visible_transitions: obs.view().transitions.len() - tr0,
        slice_writes: w.count(admin::OPERATOR, Some("endpointslices")),
        operator_writes: w.count(admin::OPERATOR, None),
    })
}

/// The `p`-th percentile (0..=1) of `values`, nearest rank.
pub fn percentile(values: &[Duration], p: f64) -> Duration {
    let mut v = values.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx.min(v.len() - 1)]
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn mib(kib: u64) -> String {
    format!("{:.0}", kib as f64 / 1024.0)
}

fn dist(values: &[Duration]) -> String {
    if values.is_empty() {
        return "–".into();
    }
    format!(
        "{} / {} / {} ms",
        ms(percentile(values, 0.5)),
        ms(percentile(values, 0.99)),
        ms(percentile(values, 1.0))
    )
}

impl Report {
    /// The table's rows for this run: (figure, value).
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mut r = Vec::new();
        r.push((
            "objects",
            format!(
                "{} PortMapping(s), {} pods, {} slices",
                self.mappings, self.pods, self.slices
            ),
        ));
        r.push(("setup (create pods; not a figure)", secs(self.setup)));
        r.push((
            "operator start → all published",
            match self.published {
                Some(d) => secs(d),
                None => format!(
                    "**not converged**: {} of {} ready endpoints",
                    self.ready_endpoints.0, self.ready_endpoints.1
                ),
            },
        ));
        if !self.publish_requests.is_empty() {
            let total: usize = self.publish_requests.values().sum();
            let each: Vec<String> = self
                .publish_requests
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            r.push((
                "operator requests during publication",
                format!("{total}: {}", each.join(", ")),
            ));
        }
        if let Some(t) = &self.publish_timeline {
            let writes = t.slice_writes.map_or("none".to_owned(), |(a, b)| {
                format!("{:.0} → {:.0} ms", a * 1e3, b * 1e3)
            });
            r.push((
                "publication timeline from the operator's first request: last pod list; slice writes",
                format!("{:.0} ms; {writes}", t.last_pod_list * 1e3),
            ));
        }
        if let Some(f) = &self.floor {
            r.push((
                "floor: plain client applies the same slices (1 / 4 in flight)",
                format!(
                    "{} / {} ({} slices, p50 {} ms per apply)",
                    secs(f.sequential),
                    secs(f.parallel4),
                    f.slices,
                    ms(f.p50)
                ),
            ));
            if let Some(p) = self.published {
                r.push((
                    "start → published ÷ floor (1 in flight)",
                    format!(
                        "{:.1}×",
                        p.as_secs_f64() / f.sequential.as_secs_f64().max(1e-9)
                    ),
                ));
            }
        }
        r.push((
            "operator VmRSS / VmHWM (MiB)",
            format!(
                "{} / {}",
                mib(self.operator_mem.rss),
                mib(self.operator_mem.hwm)
            ),
        ));
        r.push((
            "operator resident: anonymous (heap) / file (binary) (MiB)",
            format!(
                "{} / {}",
                mib(self.operator_mem.anon),
                mib(self.operator_mem.file)
            ),
        ));
        r.push((
            "emulator VmRSS / VmHWM (MiB)",
            format!(
                "{} / {}",
                mib(self.emulator_mem_kib.0),
                mib(self.emulator_mem_kib.1)
            ),
        ));
        if self.published.is_none() {
            r.push(("load average before → after", self.load_summary()));
            return r;
        }
        r.push((
            "writes while converged",
            format!(
                "{} by {} in {:.1} s{}",
                self.converged_operator_writes,
                admin::OPERATOR,
                self.converged_window.as_secs_f64(),
                if self.converged_writes.is_empty() {
                    String::new()
                } else {
                    format!(" (all: {:?})", self.converged_writes)
                }
            ),
        ));
        if !self.converged_window.is_zero() {
            let passes = (self.converged_window.as_secs_f64() / self.resync_seconds.max(1) as f64)
                .floor()
                .max(1.0);
            r.push((
                "operator CPU while converged: per resync pass of every PortMapping",
                format!(
                    "{:.0} ms ({:.2} s in {:.1} s, {passes:.0} passes)",
                    self.converged_cpu.as_secs_f64() * 1000.0 / passes,
                    self.converged_cpu.as_secs_f64(),
                    self.converged_window.as_secs_f64()
                ),
            ));
            r.push((
                "operator CPU per resync period, in order (the first confirms the publication's writes)",
                self.converged_cpu_periods
                    .iter()
                    .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
                    .collect::<Vec<_>>()
                    .join(" / ")
                    + " ms",
            ));
        }
        if !self.flips.is_empty() {
            let first: Vec<_> = self.flips.iter().map(|f| f.first).collect();
            let all: Vec<_> = self.flips.iter().map(|f| f.all).collect();
            let floor: Vec<_> = self.flips.iter().map(|f| f.floor).collect();
            let n = self.flips.len();
            r.push((
                "flip: pod event → first slice event p50 / p99 / max",
                format!("{} ({n} flips)", dist(&first)),
            ));
            r.push(("flip: pod event → every port's slice", dist(&all)));
            r.push(("floor: PATCH → pod watch event", dist(&floor)));
            r.push((
                "flip p50 ÷ floor p50",
                format!(
                    "{:.0}×",
                    percentile(&first, 0.5).as_secs_f64()
                        / percentile(&floor, 0.5).as_secs_f64().max(1e-9)
                ),
            ));
            let sw: usize = self.flips.iter().map(|f| f.slice_writes).sum();
            let held: usize = self.flips.iter().map(|f| f.slices).sum();
            let ow: usize = self.flips.iter().map(|f| f.operator_writes).sum();
            r.push((
                "slice writes per flip (slices that list the pod)",
                format!(
                    "{:.2} ({:.2}); all operator writes {:.2}",
                    sw as f64 / n as f64,
                    held as f64 / n as f64,
                    ow as f64 / n as f64
                ),
            ));
            let rc: u64 = self.flips.iter().map(|f| f.reconciles.count).sum();
            let rs: f64 = self.flips.iter().map(|f| f.reconciles.seconds).sum();
            r.push((
                "operator reconciles per flip (echoes included); time in them",
                format!(
                    "{:.2}; {:.1} ms per flip, {:.1} ms per reconcile",
                    rc as f64 / n as f64,
                    rs * 1e3 / n as f64,
                    rs * 1e3 / (rc.max(1)) as f64
                ),
            ));
            let pc: u64 = self.flips.iter().map(|f| f.reconciles.plans).sum();
            let ps: f64 = self.flips.iter().map(|f| f.reconciles.plan_seconds).sum();
            if pc > 0 {
                r.push((
                    "operator: planning per flip; per plan (the rest of a reconcile waits on the API)",
                    format!(
                        "{:.1} ms; {:.1} ms ({pc} plans)",
                        ps * 1e3 / n as f64,
                        ps * 1e3 / pc as f64
                    ),
                ));
            }
        }
        if let Some(rr) = &self.rolling {
            r.push((
                "rolling restart: slice writes per pod transition",
                format!(
                    "{:.3} ({} writes / {} transitions; {} visible; all operator writes {})",
                    rr.slice_writes as f64 / rr.transitions.max(1) as f64,
                    rr.slice_writes,
                    rr.transitions,
                    rr.visible_transitions,
                    rr.operator_writes
                ),
            ));
            r.push((
                "rolling restart: converged after first patch (after last)",
                format!(
                    "{} ({}); {} patches took {}",
                    secs(rr.converge),
                    secs(rr.after_last_patch),
                    rr.patches,
                    secs(rr.patch_time)
                ),
            ));
        }
        r.push(("load average before → after", self.load_summary()));
        r
    }

    fn load_summary(&self) -> String {
        format!("{} → {}", self.load_before, self.load_after)
    }
}

/// One markdown table: a row per figure, a column per run.
pub fn table(reports: &[Report]) -> String {
    let mut rows: Vec<(&'static str, Vec<String>)> = Vec::new();
    for (i, rep) in reports.iter().enumerate() {
        for (name, value) in rep.rows() {
            let idx = match rows.iter().position(|(n, _)| *n == name) {
                Some(idx) => idx,
                None => {
                    rows.push((name, vec!["–".into(); reports.len()]));
                    rows.len() - 1
                }
            };
            rows[idx].1[i] = value;
        }
    }
    let mut out = String::new();
    let _ = write!(out, "| Figure |");
    for rep in reports {
        let _ = write!(out, " {} |", rep.shape.label());
    }
    let _ = write!(out, "\n| --- |");
    for _ in reports {
        let _ = write!(out, " --- |");
    }
    out.push('\n');
    for (name, values) in rows {
        let _ = writeln!(out, "| {name} | {} |", values.join(" | "));
    }
    out
}
