//! The bench on the real control plane (`realkube`: etcd and kube-apiserver 1.37), side by side
//! with the native EndpointSlice controller: the same pods behind the operator's selector-less
//! Services (PortMappings) and behind Services with a selector that kube-controller-manager
//! publishes. The bench plays kubelet (a Node, pods bound to it, their status written through
//! the status subresource). Each controller runs in its own process while the other is stopped,
//! and both are measured alike: start → everything published, flips, a rolling replacement,
//! CPU and memory of every process, writes counted by the API server.

pub mod apimetrics;
pub mod controllers;
mod phases;
pub mod plane;
mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Api;
use serde_json::json;

pub use controllers::{Limits, RealBinaries, Side};
pub use phases::{Cpu, Publication, RealFlip, Replacement, SideReport};
pub use plane::{Plane, Up};
pub use report::{RealReport, Row};

use crate::observe::{BOTH_MANAGERS, Observer};
use crate::procs::{self, TempDir};
use crate::shape::{self, Shape};
use crate::{Error, bench_post};

/// How one run on the real control plane goes.
#[derive(Debug, Clone)]
pub struct RealConfig {
    /// Shape and size.
    pub shape: Shape,
    /// Seed of the shape and of the samples.
    pub seed: u64,
    /// Namespace of every object.
    pub namespace: String,
    /// Flips per controller (each sampled pod goes unready, then ready: two flips); both
    /// controllers flip the same pods.
    pub flips: usize,
    /// Turns each controller takes, alternating, to make its flips (A/B alternation).
    pub rounds: usize,
    /// Pods each controller sees replaced in the rolling replacement (0: none).
    pub replace: usize,
    /// The window over which writes while converged are counted.
    pub converged: Duration,
    /// Both controllers' client limits and settings.
    pub limits: Limits,
    /// Bound on process start → all published.
    pub publish_timeout: Duration,
    /// Bound on every other wait.
    pub phase_timeout: Duration,
    /// After a change is visible, how long to wait for stray writes before counting.
    pub settle: Duration,
    /// No slice event for this long counts as converged (rolling replacement).
    pub quiet: Duration,
    /// Measure the plain client's server-side apply of the published slices.
    pub floors: bool,
    /// Requests in flight while creating the objects (setup only, not measured).
    pub setup_concurrency: usize,
    /// Keep the temp dir (the control plane's files, every process's log).
    pub keep_logs: bool,
}

impl RealConfig {
    /// Defaults of the bench for `shape`.
    pub fn new(shape: Shape) -> Self {
        Self {
            shape,
            seed: 10,
            namespace: shape::NS.to_owned(),
            flips: 40,
            rounds: 2,
            replace: 200,
            converged: Duration::from_secs(10),
            limits: Limits::default(),
            publish_timeout: Duration::from_secs(600),
            phase_timeout: Duration::from_secs(300),
            settle: Duration::from_millis(300),
            quiet: Duration::from_secs(2),
            floors: true,
            setup_concurrency: 16,
            keep_logs: false,
        }
    }
}

/// Runs one shape on a control plane of its own (`realkube up`), stopped when it returns.
pub async fn run(bins: &RealBinaries, cfg: &RealConfig) -> Result<RealReport, Error> {
    let mut dir = TempDir::new()?;
    dir.keep = cfg.keep_logs;
    let plane_dir = dir.path.join("plane");
    let up = Up::start(&bins.realkube, &plane_dir, false)?;
    let result = run_on(bins, cfg, &plane_dir, &dir.path).await;
    // The control plane stops before its directory goes.
    drop(up);
    match result {
        Ok(mut r) => {
            r.logs = cfg.keep_logs.then(|| dir.path.clone());
            Ok(r)
        }
        Err(e) => {
            dir.keep = true;
            eprintln!("scale-bench: logs kept in {}", dir.path.display());
            Err(e)
        }
    }
}

/// Runs one shape on the running control plane whose files are in `plane_dir`, in
/// `cfg.namespace`; the controllers' logs go to `logs`.
pub async fn run_on(
    bins: &RealBinaries,
    cfg: &RealConfig,
    plane_dir: &Path,
    logs: &Path,
) -> Result<RealReport, Error> {
    let plane = Plane::connect(plane_dir).await?;
    let g = shape::generate_in(cfg.shape, cfg.seed, &cfg.namespace);
    let setup = setup(bins, cfg, &plane, &g).await?;
    let obs = Observer::start_in(
        &plane.client,
        &cfg.namespace,
        BOTH_MANAGERS,
        cfg.phase_timeout,
    )
    .await?;
    let load_before = procs::load_average();
    let mut ctx = phases::Ctx::new(bins, cfg, plane, obs, g, logs.to_path_buf());
    ctx.calibrate().await?;
    let mut sides = [
        ctx.publication(Side::Operator).await?,
        ctx.publication(Side::Native).await?,
    ];
    let (floors, status_floor) = if cfg.floors {
        (Some(ctx.floors().await?), ctx.status_floor().await?)
    } else {
        (None, None)
    };
    ctx.flips(&mut sides).await?;
    ctx.replacements(&mut sides).await?;
    let (apiserver_mem, etcd_mem) = ctx.plane_memory()?;
    let [operator, native] = sides;
    Ok(RealReport {
        shape: cfg.shape,
        pods: ctx.g.pods.len(),
        mappings: ctx.g.mappings.len(),
        setup,
        operator,
        native,
        floors,
        status_floor,
        apiserver_mem,
        etcd_mem,
        limits: cfg.limits.clone(),
        load_before,
        load_after: procs::load_average(),
        logs: None,
    })
}

/// The CRD, the namespace, the Node and every object of the shape; returns how long it took.
async fn setup(
    bins: &RealBinaries,
    cfg: &RealConfig,
    plane: &Plane,
    g: &shape::Generated,
) -> Result<Duration, Error> {
    let client = &plane.client;
    crate::install_crd(&bins.operator, client).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cfg.namespace}});
    keep_existing(
        namespaces
            .create(&bench_post(), &serde_json::from_value(ns)?)
            .await,
    )?;
    let nodes: Api<Node> = Api::all(client.clone());
    keep_existing(
        nodes
            .create(&bench_post(), &serde_json::from_value(shape::node())?)
            .await,
    )?;
    let started = Instant::now();
    crate::create_objects(
        client,
        &cfg.namespace,
        g,
        &g.native_services,
        cfg.setup_concurrency,
    )
    .await?;
    Ok(started.elapsed())
}

/// A create's outcome, where an object that exists (`default`, or an earlier run's Node on the
/// same control plane) is kept.
fn keep_existing<T>(created: Result<T, kube::Error>) -> Result<(), Error> {
    match created {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        other => other.map(drop).map_err(Error::from),
    }
}

/// The realkube binary: `REALKUBE_BIN`, else `target/realkube/realkube` of this workspace.
pub fn default_realkube() -> PathBuf {
    std::env::var_os("REALKUBE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/realkube/realkube")
                .to_path_buf()
        })
}
