//! The emulator and the operator as child processes: spawned from given paths (never built
//! here), logs in a temp dir, killed on drop so a panicking bench leaves nothing behind.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::process::{Child, Command};

use crate::Error;

/// The two binaries under test.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `kube-emulator`.
    pub emulator: PathBuf,
    /// `portmapper`.
    pub operator: PathBuf,
}

impl Binaries {
    /// Both paths, failing early with a hint when one is missing.
    pub fn new(emulator: PathBuf, operator: PathBuf) -> Result<Self, Error> {
        for p in [&emulator, &operator] {
            if !p.is_file() {
                return Err(Error::MissingBinary(p.clone()));
            }
        }
        Ok(Self { emulator, operator })
    }
}

/// A child process, SIGKILLed when dropped.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    /// Its pid (for `/proc/<pid>/status`).
    pub pid: u32,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `bin args…` with output to `log`.
    pub fn spawn(bin: &Path, args: &[String], log: PathBuf) -> Result<Self, Error> {
        Self::spawn_env(bin, args, log, &[])
    }

    /// Spawns `bin args…` with `env` added and output to `log`.
    pub fn spawn_env(
        bin: &Path,
        args: &[String],
        log: PathBuf,
        env: &[(&str, &str)],
    ) -> Result<Self, Error> {
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Spawn(bin.to_path_buf(), e))?;
        let pid = child.id().ok_or(Error::Exited("just spawned process"))?;
        Ok(Self { child, pid, log })
    }

    /// Fails when the process has already exited.
    pub fn check_alive(&mut self, what: &'static str) -> Result<(), Error> {
        match self.child.try_wait()? {
            Some(_) => Err(Error::Exited(what)),
            None => Ok(()),
        }
    }

    /// Kills and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// VmRSS and VmHWM of a process, in KiB, from `/proc/<pid>/status`.
pub fn memory_kib(pid: u32) -> Result<(u64, u64), Error> {
    let m = memory(pid)?;
    Ok((m.rss, m.hwm))
}

/// What `/proc/<pid>/status` says of a process's memory, in KiB: resident (VmRSS), its peak
/// (VmHWM), and the resident split into anonymous memory (the heap, stacks) and file pages (the
/// mapped binary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// VmRSS.
    pub rss: u64,
    /// VmHWM.
    pub hwm: u64,
    /// RssAnon.
    pub anon: u64,
    /// RssFile.
    pub file: u64,
}

/// [`Memory`] of a process.
pub fn memory(pid: u32) -> Result<Memory, Error> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    })
}

/// CPU time a process has used so far (user + system), from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Result<Duration, Error> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces; the fields after it are plain numbers.
    let after = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Linux reports them in USER_HZ, 100 on every architecture it supports.
    Ok(Duration::from_millis((ticks(11) + ticks(12)) * 10))
}

/// The 1, 5 and 15 minute load averages (what `uptime` prints).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// A temporary directory, removed on drop unless kept.
#[derive(Debug)]
pub struct TempDir {
    /// Its path.
    pub path: PathBuf,
    /// Keep it (logs of a failed run).
    pub keep: bool,
}

impl TempDir {
    /// A fresh directory under the system temp dir.
    pub fn new() -> Result<Self, Error> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let path = std::env::temp_dir().join(format!("scale-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(Self { path, keep: false })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Starts `kube-emulator serve` on an ephemeral loopback port; returns it, its kubeconfig and a
/// client.
pub async fn start_emulator(bins: &Binaries, dir: &Path) -> Result<(Proc, PathBuf, Client), Error> {
    let kubeconfig = dir.join("kubeconfig");
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig",
        &kubeconfig.to_string_lossy(),
    ]
    .map(String::from);
    let mut emu = Proc::spawn(&bins.emulator, &args, dir.join("emulator.log"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    // The kubeconfig is written once the port is bound; a half-written file fails to parse.
    let kc = loop {
        emu.check_alive("kube-emulator")?;
        if let Ok(kc) = Kubeconfig::read_from(&kubeconfig) {
            break kc;
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout(
                "kube-emulator to write its kubeconfig".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    if config.cluster_url.host().is_none_or(|h| h != "127.0.0.1") {
        return Err(Error::NotLoopback(config.cluster_url.to_string()));
    }
    let client = Client::try_from(config)?;
    Ok((emu, kubeconfig, client))
}
