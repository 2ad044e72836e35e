//! Faults of the real control plane's own components: kill -9 one (etcd, kube-apiserver,
//! kube-controller-manager) and start it again, with its own arguments or others, and compact
//! etcd. Everything comes from `D/state.json`, which `realkube up` writes (each component's pid,
//! arguments and log) and which a restart here keeps current.
//!
//! A restarted component is `realkube <component> <args>`, a child of the test process with
//! `REALKUBE_DIE_WITH_PARENT=1`, so it stops with the test binary as `up`'s own components do.
//! Use these on a control plane of the test's own ([`ControlPlane::start`]), never on the
//! shared one: every test using that one would see the fault.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::plane_state::{Component, State};
use crate::realkube::{ControlPlane, binary};

impl ControlPlane {
    /// What `D/state.json` says now.
    pub fn state(&self) -> State {
        let raw = std::fs::read_to_string(self.dir.join("state.json")).expect("state.json");
        serde_json::from_str(&raw).expect("state.json parses")
    }

    fn write_state(&self, state: &State) {
        let raw = serde_json::to_string_pretty(state).expect("state encodes");
        std::fs::write(self.dir.join("state.json"), raw).expect("write state.json");
    }

    fn component(&self, name: &str) -> Component {
        self.state()
            .components
            .remove(name)
            .unwrap_or_else(|| panic!("state.json names no component {name}"))
    }

    /// Sends SIGKILL to `name` and waits until it is gone.
    pub fn kill9(&self, name: &str) {
        if let Some(mut child) = self.restarted().remove(name) {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        let pid = self.component(name).pid;
        let sent = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill(1) runs");
        assert!(sent.success(), "kill -9 {pid} ({name})");
        // Gone once `up` has reaped it: a thread group leader shows as a zombie while its other
        // threads still exit, holding the component's files and listening socket.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "{name} ({pid}) survived kill -9");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether `name` runs.
    pub fn running(&self, name: &str) -> bool {
        alive(self.component(name).pid)
    }

    /// Starts `name` again with the arguments state.json records (after [`Self::kill9`]).
    pub fn start_component(&self, name: &str) {
        let args = self.component(name).args;
        self.start_component_with(name, &args);
    }

    /// Starts `name` with `args` (after [`Self::kill9`]); state.json then records its pid and
    /// these arguments, so a later restart uses them.
    pub fn start_component_with(&self, name: &str, args: &[String]) {
        let mut state = self.state();
        let entry = state
            .components
            .get_mut(name)
            .unwrap_or_else(|| panic!("state.json names no component {name}"));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&entry.log)
            .expect("the component's log");
        let child = Command::new(binary())
            .arg(name)
            .args(args)
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        entry.pid = child.id();
        entry.args = args.to_vec();
        self.write_state(&state);
        self.restarted().insert(name.to_string(), child);
    }

    /// kill -9 of `name`, then the same process again.
    pub fn restart(&self, name: &str) {
        self.kill9(name);
        self.start_component(name);
    }

    /// The arguments of `name` with `extra` flags replacing those of the same name (the part
    /// before `=`) and the others appended.
    pub fn args_with(&self, name: &str, extra: &[&str]) -> Vec<String> {
        let flag = |a: &str| a.split_once('=').map_or(a, |(f, _)| f).to_string();
        let replaced: Vec<String> = extra.iter().map(|e| flag(e)).collect();
        let mut args: Vec<String> = self
            .component(name)
            .args
            .into_iter()
            .filter(|a| !replaced.contains(&flag(a)))
            .collect();
        args.extend(extra.iter().map(|e| (*e).to_string()));
        args
    }

    /// Waits until etcd answers its health check.
    pub fn wait_etcd_healthy(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let healthy = http(&self.state().etcd, "GET", "/health", None)
                .is_some_and(|v| v["health"] == "true");
            if healthy {
                return;
            }
            assert!(Instant::now() < deadline, "etcd not healthy in {timeout:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// etcd's current revision.
    pub fn etcd_revision(&self) -> i64 {
        let status = http(
            &self.state().etcd,
            "POST",
            "/v3/maintenance/status",
            Some(json!({})),
        )
        .expect("etcd answers /v3/maintenance/status");
        revision(&status["header"]["revision"]).expect("a revision in the status header")
    }

    /// Compacts etcd's history up to its current revision (physically: the old revisions are
    /// gone when this returns), through etcd's v3 HTTP/JSON gateway. Returns the revision.
    pub fn compact_etcd(&self) -> i64 {
        let at = self.etcd_revision();
        let body = json!({"revision": at.to_string(), "physical": true});
        http(&self.state().etcd, "POST", "/v3/kv/compaction", Some(body))
            .expect("etcd answers /v3/kv/compaction");
        at
    }

    /// Whether etcd still serves reads at `at` (false once it is compacted away).
    pub fn etcd_serves_revision(&self, at: i64) -> bool {
        // Key "\0" (base64 "AA=="): any key will do, only the revision matters.
        let body = json!({"key": "AA==", "revision": at.to_string()});
        http(&self.state().etcd, "POST", "/v3/kv/range", Some(body))
            .is_some_and(|v| v.get("header").is_some())
    }

    fn restarted(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Child>> {
        self.restarted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ControlPlane {
    /// Stops `up` (and what it started) and what was restarted here, and waits until `up` is
    /// gone: for a plane a test had to make `'static` (leaked) and must still stop.
    pub fn stop(&self) {
        let pid = self.up.id();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        for (_, mut child) in std::mem::take(&mut *self.restarted()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // `up` stops what it started (SIGTERM); what was restarted here is ours to stop.
        let _ = Command::new("kill")
            .args(["-TERM", &self.up.id().to_string()])
            .status();
        for (_, mut child) in std::mem::take(&mut *self.restarted()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.up.wait();
    }
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// An int64 of etcd's JSON gateway (a string, or a number).
fn revision(v: &Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_i64())
}

/// One plain HTTP/1.0 request to `base` (`http://127.0.0.1:port`); the body of a 200, parsed.
fn http(base: &str, method: &str, path: &str, body: Option<Value>) -> Option<Value> {
    let authority = base.strip_prefix("http://")?;
    let mut stream = TcpStream::connect(authority).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    if head.split_whitespace().nth(1) != Some("200") {
        return None;
    }
    serde_json::from_str(body).ok()
}
