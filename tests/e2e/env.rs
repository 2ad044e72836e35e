//! The processes under test and a kubectl wrapper bound to their kubeconfig.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use test_support::realkube::ControlPlane;

/// Directory holding the workspace binaries: next to this test executable's `deps/` folder,
/// whatever `CARGO_TARGET_DIR` is. `make test` builds them first.
pub fn bin(name: &str) -> PathBuf {
    if let Ok(path) = std::env::var(format!("{}_BIN", name.to_uppercase().replace('-', "_"))) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace --bins` first (make test does)",
        path.display()
    );
    path
}

/// Whether kubectl is on PATH; tests that need it say loudly that they skipped.
pub fn kubectl_available() -> bool {
    let ok = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: kubectl is not on PATH; end-to-end kubectl tests did not run");
    }
    ok
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A child process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where a scenario runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The real control plane this test binary shares (`realkube up`), in a namespace of the
    /// test's own; the test plays kubelet (one shared plane, any pod state in one write; the
    /// kubelet's own behaviour is `node.rs`'s, on a real node).
    RealKube,
    /// The cluster `PORTMAPPER_E2E_KUBECONFIG` names (kind, k3d), with real kubelets.
    External,
}

/// Where the scenario runs: the real control plane, or a real cluster.
pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub backend: Backend,
    /// The namespace kubectl and the operator act in (the kubeconfig's context namespace).
    pub namespace: String,
    plane: Option<&'static ControlPlane>,
    kubectl: PathBuf,
    _dir: TempDir,
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "portmapper-e2e-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Cluster {
    /// `PORTMAPPER_E2E_KUBECONFIG` if set, else the real control plane.
    pub fn start(tag: &str) -> Self {
        if let Ok(path) = std::env::var("PORTMAPPER_E2E_KUBECONFIG") {
            return Self::external(tag, PathBuf::from(path));
        }
        Self::realkube(tag)
    }

    fn external(tag: &str, kubeconfig: PathBuf) -> Self {
        Self {
            kubeconfig,
            backend: Backend::External,
            namespace: "default".into(),
            plane: None,
            kubectl: PathBuf::from("kubectl"),
            _dir: TempDir::new(tag),
        }
    }

    /// A namespace of its own on the control plane this test binary shares, and a kubeconfig
    /// whose context defaults to it.
    pub fn realkube(tag: &str) -> Self {
        Self::on(test_support::realkube::shared(), tag)
    }

    /// A namespace of its own on `plane`, and a kubeconfig whose context defaults to it.
    pub fn on(plane: &'static ControlPlane, tag: &str) -> Self {
        let dir = TempDir::new(tag);
        let namespace = plane.namespace_name(tag);
        let kubeconfig = dir.0.join("kubeconfig");
        plane.kubeconfig_in(&namespace, &kubeconfig);
        let cluster = Self {
            kubeconfig,
            backend: Backend::RealKube,
            namespace: namespace.clone(),
            plane: Some(plane),
            kubectl: test_support::realkube::kubectl(),
            _dir: dir,
        };
        cluster.ok(&["create", "namespace", &namespace]);
        cluster
    }

    /// The real control plane the cluster runs on.
    pub fn plane(&self) -> &'static ControlPlane {
        self.plane.expect("a realkube cluster")
    }

    /// Whether the test writes pod status itself (no kubelet runs the pods).
    pub fn plays_kubelet(&self) -> bool {
        self.backend != Backend::External
    }

    /// Whether the cluster is the test's to fill (anything may be installed, for real).
    pub fn disposable(&self) -> bool {
        self.backend != Backend::External
    }

    /// Runs kubectl against this cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs")
    }

    /// Runs kubectl with `stdin` piped in.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    /// kubectl that must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `kubectl args` until stdout satisfies `pred`.
    pub fn eventually(
        &self,
        args: &[&str],
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            let out = self.kubectl(args);
            // Only stdout is judged: a real server adds warnings on stderr (v1 Endpoints is
            // deprecated), and kubectl says "No resources found" there.
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && pred(&stdout) {
                return stdout;
            }
            last = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "timed out waiting on `kubectl {}`; last output:\n{last}",
            args.join(" ")
        );
    }

    /// Starts `portmapper run` against this cluster; its log goes to a file in the temp dir.
    pub fn operator(&self) -> Proc {
        let log = std::fs::File::create(self._dir.0.join("operator.log")).unwrap();
        let mut command = Command::new(bin("portmapper"));
        command.arg("run");
        if self.backend == Backend::RealKube {
            // Other tests' operators share the control plane: each keeps to its namespace.
            command.arg(format!("--watch-namespace={}", self.namespace));
        }
        let child = command
            .args([
                "--leader-elect=false",
                "--http-addr",
                "127.0.0.1:0",
                "--resync-seconds",
                "5",
                "--kubeconfig",
            ])
            .arg(&self.kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("portmapper starts");
        Proc(child)
    }

    /// The operator log so far (for assertion messages).
    pub fn operator_log(&self) -> String {
        std::fs::read_to_string(self._dir.0.join("operator.log")).unwrap_or_default()
    }
}
