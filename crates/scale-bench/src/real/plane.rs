//! The real control plane (`realkube up`, built from tools/realkube): etcd and kube-apiserver
//! as separate processes, started without controllers and without the audit log, so the API
//! server serves only the bench and the one controller under test. Read back through the files
//! `up` writes: `state.json` (the pids of etcd and kube-apiserver), `kubeconfig` (admin) and
//! `kube-controller-manager.kubeconfig`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::Error;

/// A running `realkube up`; stopped (SIGTERM, then SIGKILL) when dropped. A plain
/// `std::process::Child`, so a test binary can keep one in a static across test runtimes.
#[derive(Debug)]
pub struct Up {
    child: Child,
    /// The directory it writes.
    pub dir: PathBuf,
}

impl Up {
    /// Starts `realkube up --dir dir --audit=false` and waits (blocking) for `dir/ready`.
    /// `cleanup`: `up` removes `dir` when it stops. The control plane also stops when this
    /// process dies (`REALKUBE_DIE_WITH_PARENT`).
    pub fn start(realkube: &Path, dir: &Path, cleanup: bool) -> Result<Self, Error> {
        if !realkube.is_file() {
            return Err(Error::MissingRealkube(realkube.to_path_buf()));
        }
        std::fs::create_dir_all(dir)?;
        let log = std::fs::File::create(dir.join("up.log"))?;
        let mut cmd = Command::new(realkube);
        cmd.args(["up", "--dir"])
            .arg(dir)
            .arg("--audit=false")
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if cleanup {
            cmd.arg("--cleanup");
        }
        let child = cmd
            .spawn()
            .map_err(|e| Error::Spawn(realkube.to_path_buf(), e))?;
        let mut up = Self {
            child,
            dir: dir.to_path_buf(),
        };
        up.wait_ready(Duration::from_secs(120))?;
        Ok(up)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        while !self.dir.join("ready").exists() {
            if self.child.try_wait()?.is_some() {
                return Err(Error::Exited("realkube up"));
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout("realkube up to write ready".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // SIGTERM lets `up` stop its components in order (and clean up); the `kill` command,
        // because this workspace forbids the unsafe code a signal call needs.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection to a running control plane and the pids to measure.
#[derive(Clone)]
pub struct Plane {
    /// The directory `up` wrote.
    pub dir: PathBuf,
    /// An admin client.
    pub client: Client,
    /// kube-apiserver's pid.
    pub apiserver: u32,
    /// etcd's pid.
    pub etcd: u32,
}

impl Plane {
    /// Reads `dir/state.json` and `dir/kubeconfig`.
    pub async fn connect(dir: &Path) -> Result<Self, Error> {
        let state: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("state.json"))?)?;
        let pid = |name: &str| {
            state["components"][name]["pid"]
                .as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| Error::Admin(format!("no pid of {name} in state.json")))
        };
        let kc = Kubeconfig::read_from(dir.join("kubeconfig"))?;
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(Self {
            dir: dir.to_path_buf(),
            client: Client::try_from(config)?,
            apiserver: pid("kube-apiserver")?,
            etcd: pid("etcd")?,
        })
    }

    /// The admin kubeconfig (the operator's).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// kube-controller-manager's kubeconfig.
    pub fn kcm_kubeconfig(&self) -> PathBuf {
        self.dir.join("kube-controller-manager.kubeconfig")
    }
}
