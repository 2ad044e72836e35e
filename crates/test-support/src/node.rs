//! A real node of a test's own control plane: `realkube node` (containerd, runc, CNI bridge and
//! a kubelet in a private mount namespace) as a child of the test, in the test's network
//! namespace. It runs the pods: the kubelet sets their IPs, runs their probes, computes Ready
//! from containers and readiness gates, and sends the final delete of a terminated pod.
//!
//! The control plane must run the Node authorizer and admission plugin (see
//! [`NODE_APISERVER_ARGS`]); a machine that cannot run a node (not root, packages missing, no
//! overlayfs) makes [`Node::start`] return [`Unsupported`] with `realkube node`'s reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::realkube::{ControlPlane, binary};

/// The kube-apiserver flags a plane with a real node needs: the Node authorizer (appended to
/// RBAC) and NodeRestriction know the kubelet by its certificate, and the API server reaches the
/// kubelet by the node's address (its name resolves nowhere: no packet may leave the namespace).
pub const NODE_APISERVER_ARGS: &[&str] = &[
    "--authorization-mode=Node",
    "--enable-admission-plugins=NodeRestriction",
    "--kubelet-preferred-address-types=InternalIP",
];

/// `realkube node`'s exit code for a machine that cannot run a node.
const EXIT_UNSUPPORTED: i32 = 3;

/// Why this machine cannot run a node (`realkube node`'s one-line reason).
#[derive(Debug)]
pub struct Unsupported(pub String);

/// A running `realkube node`; dropping it stops the node and waits for its sweep.
pub struct Node {
    child: Child,
    name: String,
    dir: PathBuf,
    /// From start to the Node's Ready condition (realkube's own measure).
    pub ready_after: Duration,
}

/// Whether this machine can run a node, without starting one: `Err` carries the reason.
pub fn check() -> Result<(), Unsupported> {
    let bin = binary();
    if !bin.exists() {
        return Err(Unsupported(format!(
            "{} is not built (make realkube)",
            bin.display()
        )));
    }
    let out = Command::new(&bin)
        .args(["node", "--check"])
        .output()
        .map_err(|e| Unsupported(format!("cannot run {}: {e}", bin.display())))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Unsupported(
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    ))
}

impl Node {
    /// Starts node `name` at `ip` (its pods in `pod_cidr`) on `plane` and waits until it is
    /// Ready. Panics when it fails for another reason than the machine.
    pub fn start(
        plane: &ControlPlane,
        name: &str,
        ip: &str,
        pod_cidr: &str,
    ) -> Result<Self, Unsupported> {
        Self::start_with_images(plane, name, ip, pod_cidr, &[])
    }

    /// [`Node::start`], importing the image archives `images` (`docker save` form) besides the
    /// busybox one.
    pub fn start_with_images(
        plane: &ControlPlane,
        name: &str,
        ip: &str,
        pod_cidr: &str,
        images: &[&Path],
    ) -> Result<Self, Unsupported> {
        let dir = plane.dir().to_path_buf();
        let log_path = dir.join(format!("node-{name}.out"));
        let log = std::fs::File::create(&log_path).expect("the node's log");
        let ready = dir.join(format!("node-{name}/ready"));
        // A node killed in this directory left its ready file.
        let _ = std::fs::remove_file(&ready);
        let began = Instant::now();
        let mut child = Command::new(binary())
            .arg("node")
            .arg("--dir")
            .arg(&dir)
            .args(["--name", name, "--ip", ip, "--pod-cidr", pod_cidr])
            .args(images.iter().flat_map(|i| [Path::new("--image"), i]))
            // A child outlives the test thread that started it: realkube watches the process.
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("realkube node starts");
        let deadline = began + Duration::from_secs(120);
        while !ready.exists() {
            if let Some(status) = child.try_wait().expect("wait on realkube node") {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                if status.code() == Some(EXIT_UNSUPPORTED) {
                    let reason = log
                        .lines()
                        .find(|l| l.contains("unsupported here"))
                        .unwrap_or("unsupported here");
                    return Err(Unsupported(reason.to_string()));
                }
                panic!("realkube node exited ({status}) before its node was Ready:\n{log}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "node {name} not Ready in 120 s:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let ready_after = std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.split_once(" Ready after ")?
                    .1
                    .strip_suffix(" s")?
                    .parse::<f64>()
                    .ok()
            })
            .map_or_else(|| began.elapsed(), Duration::from_secs_f64);
        Ok(Self {
            child,
            name: name.to_string(),
            dir,
            ready_after,
        })
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's files (`D/node-N`): configuration, logs of containerd and the kubelet.
    pub fn dir(&self) -> PathBuf {
        self.dir.join(format!("node-{}", self.name))
    }

    /// The node supervisor's output (start, stop and sweep figures).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("node-{}.out", self.name)))
            .unwrap_or_default()
    }

    /// Stops the node (SIGTERM) and waits until `realkube node` has swept up after it; returns
    /// its log.
    pub fn stop(mut self) -> String {
        self.terminate();
        self.log()
    }

    fn terminate(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// What a stopped node may leave on the machine, to assert there is none: kubepods cgroups, the
/// mountpoint directories it made, and processes of a node of the plane in `dir` (its
/// mount-namespace holder, a kubelet, containerd, shims: their command lines name `dir/node-N`).
pub fn leftovers(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|h| h.path().join("kubepods"))
        .filter(|p| p.exists())
        .map(|p| format!("cgroup {}", p.display()))
        .collect();
    // Mountpoint directories a node made on the machine (marked so), which its stop removes.
    for path in [
        "/run/containerd",
        "/var/lib/cni",
        "/var/log/containers",
        "/var/lib/kubelet",
    ] {
        if Path::new(path).join(".realkube-node-created").exists() {
            found.push(format!("directory {path}"));
        }
    }
    let needle = format!("{}/node-", dir.to_string_lossy());
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && !is_zombie(&entry.path()) {
            found.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

fn is_zombie(proc_dir: &Path) -> bool {
    std::fs::read_to_string(proc_dir.join("stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "Z"))
        })
        .unwrap_or(false)
}
