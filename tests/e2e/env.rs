//! The processes under test and a kubectl wrapper bound to their kubeconfig.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// Where the scenario runs: the emulator binary, or a real cluster.
pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub real: bool,
    _emulator: Option<Proc>,
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
    /// `PORTMAPPER_E2E_KUBECONFIG` if set, else a fresh `kube-emulator serve`.
    pub fn start(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        if let Ok(path) = std::env::var("PORTMAPPER_E2E_KUBECONFIG") {
            return Self {
                kubeconfig: PathBuf::from(path),
                real: true,
                _emulator: None,
                _dir: dir,
            };
        }
        let kubeconfig = dir.0.join("kubeconfig");
        let mut child = Command::new(bin("kube-emulator"))
            .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kube-emulator starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !kubeconfig.exists() {
            assert!(
                Instant::now() < deadline,
                "kube-emulator wrote no kubeconfig"
            );
            if let Ok(Some(status)) = child.try_wait() {
                panic!("kube-emulator exited early: {status}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            kubeconfig,
            real: false,
            _emulator: Some(Proc(child)),
            _dir: dir,
        }
    }

    /// Runs kubectl against this cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs")
    }

    /// Runs kubectl with `stdin` piped in.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new("kubectl")
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
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.success() && pred(&last) {
                return last;
            }
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
        let child = Command::new(bin("portmapper"))
            .args([
                "run",
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
