//! The two controllers under test, each its own process with its client limits set on the
//! command line: the operator (`portmapper run`) and the native EndpointSlice controller
//! (`realkube kube-controller-manager` with only `endpointslice-controller`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::observe::NATIVE_MANAGER;
use crate::procs::Proc;
use crate::shape::{Generated, NATIVE_PORT, PodSpec};

use super::plane::Plane;

/// Which controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// portmapper, publishing the selector-less Services of the PortMappings.
    Operator,
    /// kube-controller-manager's EndpointSlice controller, publishing the Services with a
    /// selector over the same pods.
    Native,
}

impl Side {
    /// Both, in the order each phase runs them.
    pub const BOTH: [Side; 2] = [Side::Operator, Side::Native];

    /// Short name.
    pub fn label(self) -> &'static str {
        match self {
            Side::Operator => "portmapper",
            Side::Native => "native",
        }
    }

    /// The `endpointslice.kubernetes.io/managed-by` value of its slices.
    pub fn manager(self) -> &'static str {
        match self {
            Side::Operator => crate::admin::OPERATOR,
            Side::Native => NATIVE_MANAGER,
        }
    }

    /// (service, port) → ready pods once it has published everything.
    pub fn expected(self, g: &Generated) -> &BTreeMap<(String, String), usize> {
        match self {
            Side::Operator => &g.expected,
            Side::Native => &g.expected_native,
        }
    }

    /// The Service of `pod` that this controller publishes.
    pub fn service(self, pod: &PodSpec) -> String {
        match self {
            Side::Operator => pod.service.clone(),
            Side::Native => crate::shape::native_service(&pod.service),
        }
    }

    /// The ports (as the bench's view names them) that publish `pod`.
    pub fn ports(self, pod: &PodSpec) -> Vec<&'static str> {
        match self {
            Side::Operator => pod.ports.clone(),
            Side::Native => vec![NATIVE_PORT],
        }
    }
}

/// The client limits and settings of both controllers, set explicitly and printed with the
/// figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// kube-controller-manager `--kube-api-qps`.
    pub kcm_qps: u32,
    /// kube-controller-manager `--kube-api-burst`.
    pub kcm_burst: u32,
    /// kube-controller-manager `--concurrent-service-endpoint-syncs`.
    pub kcm_syncs: u32,
    /// kube-controller-manager `--max-endpoints-per-slice` (the PortMappings say the same).
    pub max_endpoints: u32,
    /// The operator's `--concurrency` (PortMappings reconciled at once).
    pub operator_concurrency: u16,
    /// The operator's `--resync-seconds`.
    pub resync_seconds: u64,
    /// More kube-controller-manager flags (e.g. to open `/debug/pprof` for a profile).
    pub kcm_extra: Vec<String>,
    /// More operator flags (e.g. `--batch-window-ms=0`).
    pub operator_extra: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            kcm_qps: 1000,
            kcm_burst: 2000,
            kcm_syncs: 5,
            max_endpoints: 100,
            // As many workers as the native controller's.
            operator_concurrency: 5,
            // The operator's own default: neither controller resyncs during the bench.
            resync_seconds: 300,
            kcm_extra: Vec::new(),
            operator_extra: Vec::new(),
        }
    }
}

impl Limits {
    /// The limits as printed with the figures.
    pub fn describe(&self) -> String {
        format!(
            "kube-controller-manager --kube-api-qps {} --kube-api-burst {} \
             --concurrent-service-endpoint-syncs={} --max-endpoints-per-slice={} \
             --endpointslice-updates-batch-period=0s; portmapper --concurrency {} \
             --resync-seconds {} (--concurrency is its only client limit: kube-rs has no \
             client-side rate limiter)",
            self.kcm_qps,
            self.kcm_burst,
            self.kcm_syncs,
            self.max_endpoints,
            self.operator_concurrency,
            self.resync_seconds
        ) + &self
            .kcm_extra
            .iter()
            .map(|a| format!("; kube-controller-manager {a}"))
            .collect::<String>()
            + &self
                .operator_extra
                .iter()
                .map(|a| format!("; portmapper {a}"))
                .collect::<String>()
    }
}

/// The binaries of a run on the real control plane.
#[derive(Debug, Clone)]
pub struct RealBinaries {
    /// `realkube` (tools/realkube): the control plane and kube-controller-manager.
    pub realkube: PathBuf,
    /// `portmapper`.
    pub operator: PathBuf,
}

impl RealBinaries {
    /// Both paths, failing early with a hint when one is missing.
    pub fn new(realkube: PathBuf, operator: PathBuf) -> Result<Self, Error> {
        if !realkube.is_file() {
            return Err(Error::MissingRealkube(realkube));
        }
        if !operator.is_file() {
            return Err(Error::MissingBinary(operator));
        }
        Ok(Self { realkube, operator })
    }
}

fn operator_args(
    plane: &Plane,
    limits: &Limits,
    namespace: &str,
    http: std::net::SocketAddr,
) -> Vec<String> {
    vec![
        "run".into(),
        "--kubeconfig".into(),
        plane.kubeconfig().to_string_lossy().into_owned(),
        format!("--watch-namespace={namespace}"),
        "--leader-elect=false".into(),
        format!("--concurrency={}", limits.operator_concurrency),
        format!("--resync-seconds={}", limits.resync_seconds),
        format!("--http-addr={http}"),
    ]
    .into_iter()
    .chain(limits.operator_extra.iter().cloned())
    .collect()
}

fn kcm_args(plane: &Plane, limits: &Limits, port: u16) -> Vec<String> {
    let mut args = vec![
        "kube-controller-manager".into(),
        format!("--kubeconfig={}", plane.kcm_kubeconfig().display()),
        "--controllers=endpointslice-controller".into(),
        "--leader-elect=false".into(),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        "--authorization-always-allow-paths=/healthz,/metrics".into(),
        format!("--kube-api-qps={}", limits.kcm_qps),
        format!("--kube-api-burst={}", limits.kcm_burst),
        format!("--concurrent-service-endpoint-syncs={}", limits.kcm_syncs),
        format!("--max-endpoints-per-slice={}", limits.max_endpoints),
        "--endpointslice-updates-batch-period=0s".into(),
    ];
    args.extend(limits.kcm_extra.iter().cloned());
    args
}

/// Starts `side`'s process; its log is `dir/<label>-<n>.log`.
pub fn spawn(
    side: Side,
    bins: &RealBinaries,
    plane: &Plane,
    limits: &Limits,
    namespace: &str,
    dir: &Path,
    n: usize,
) -> Result<Proc, Error> {
    let log = dir.join(format!("{}-{n}.log", side.label()));
    let port = crate::op_metrics::free_addr()?;
    match side {
        Side::Operator => Proc::spawn(
            &bins.operator,
            &operator_args(plane, limits, namespace, port),
            log,
        ),
        Side::Native => Proc::spawn_env(
            &bins.realkube,
            &kcm_args(plane, limits, port.port()),
            log,
            &[("REALKUBE_DIE_WITH_PARENT", "1")],
        ),
    }
}
