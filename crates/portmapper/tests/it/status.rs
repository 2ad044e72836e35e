//! `portmapper status` / `kubectl portmapper status` through the real binaries, against the
//! operator running on the real control plane, reached through a kubeconfig as a user would
//! (its context names the test's namespace; a forbidden read acts as a user without a role
//! binding).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// The status command's User-Agent (the request log tells it from the operator).
const STATUS_AGENT: &str = concat!("portmapper/", env!("CARGO_PKG_VERSION"), " (status)");

fn portmapper_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_portmapper"))
}

/// Runs a command off the runtime's threads (the operator runs on them).
pub async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("command runs"))
        .await
        .unwrap()
}

pub fn status_cmd(h: &Harness, args: &[&str]) -> Command {
    let mut cmd = Command::new(portmapper_bin());
    cmd.arg("status")
        .args(args)
        .env("KUBECONFIG", h.kubeconfig_path())
        // Nothing else on this machine may be read as a kubeconfig.
        .env("HOME", h.kubeconfig_path().parent().unwrap());
    cmd
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// web: http 8080 and https 8443; pod-a lists http, pod-b both, pod-c https, pod-d both but
/// is not ready. Returns once the operator has published and reported it.
async fn published_web() -> Harness {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        "web",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "https", "10.244.0.3"),
        ],
    )
    .await;
    h.create(pod("pod-d", "web", "http,https")).await;
    h.set_pod_status("pod-d", &["10.244.0.4"], false).await;
    h.create(portmapping("web", "web")).await;
    eventually("web reported", Duration::from_secs(20), || async {
        let pm = h.portmapping("web").await;
        let summary = pm.status.as_ref()?.summary.clone()?;
        (summary == "http 2/4, https 2/4").then_some(())
    })
    .await;
    h
}

fn matrix_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("IPv4"))
        .take_while(|l| !l.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_the_live_matrix_with_reasons_and_conditions() {
    let h = published_web().await;
    let out = output(status_cmd(&h, &["web"])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "PortMapping {}/web  Service web  generation 1  observedGeneration 1",
            h.ns
        )
    );
    assert_eq!(
        lines[1],
        "Conditions: Ready=True (Published)  Reconciling=False (Published)  Stalled=False (Published)"
    );
    assert_eq!(lines[2], "Ready/candidates: http 2/4, https 2/4");
    assert_eq!(
        matrix_lines(&stdout),
        [
            "IPv4   http  https",
            "pod-a  ✔     ✘",
            "pod-b  ✔     ✔",
            "pod-c  ✘     ✔",
            "pod-d  ✘     ✘",
            "  ✘ pod-a https: portNames: annotation example.com/ports does not list \"https\"",
            "  ✘ pod-c http: portNames: annotation example.com/ports does not list \"http\"",
            "  ✘ pod-d http: podReady: pod is not Ready (Ready=False)",
            "  ✘ pod-d https: podReady: pod is not Ready (Ready=False)",
        ]
    );

    // The same through JSON.
    let out = output(status_cmd(&h, &["web", "-o", "json"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["schema"], "portmapper.dev/status/v1");
    let states: Vec<(String, String, String)> = view["families"][0]["pods"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row["ports"].as_array().unwrap().iter().map(move |c| {
                (
                    row["pod"].as_str().unwrap().to_owned(),
                    c["port"].as_str().unwrap().to_owned(),
                    c["state"].as_str().unwrap().to_owned(),
                )
            })
        })
        .collect();
    let s = |p: &str, port: &str, st: &str| (p.to_owned(), port.to_owned(), st.to_owned());
    assert_eq!(
        states,
        [
            s("pod-a", "http", "ready"),
            s("pod-a", "https", "excluded"),
            s("pod-b", "http", "ready"),
            s("pod-b", "https", "ready"),
            s("pod-c", "http", "excluded"),
            s("pod-c", "https", "ready"),
            s("pod-d", "http", "excluded"),
            s("pod-d", "https", "excluded"),
        ]
    );
    assert_eq!(
        view["ports"][0],
        json!({"name": "http", "port": 8080, "ready": 2, "notReady": 0, "candidates": 4,
               "excludedListed": 2, "excludedTotal": 2, "keptListed": 0, "keptTotal": 0})
    );
}

/// The test's kubeconfig (cluster `realkube`, user `admin`, as `realkube up` writes them)
/// with two contexts: `here` (the test's namespace, the current one) and `elsewhere`
/// (namespace `nowhere`).
fn two_context_kubeconfig(h: &Harness, dir: &Path) -> PathBuf {
    let path = dir.join("two-contexts.kubeconfig");
    let base = std::fs::read_to_string(h.kubeconfig_path()).unwrap();
    let (head, _) = base.split_once("contexts:").expect("a contexts section");
    std::fs::write(
        &path,
        format!(
            "{head}contexts:\n\
             - name: here\n  context: {{cluster: realkube, user: admin, namespace: {}}}\n\
             - name: elsewhere\n  context: {{cluster: realkube, user: admin, namespace: nowhere}}\n\
             current-context: here\n",
            h.ns
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_context_and_namespace_are_honoured_like_kubectl() {
    let h = published_web().await;
    let dir = tempdir();
    let kubeconfig = two_context_kubeconfig(&h, &dir);
    let kc = kubeconfig.to_str().unwrap();
    // --kubeconfig wins over $KUBECONFIG (which points nowhere here).
    let mut cmd = status_cmd(&h, &["web", "--kubeconfig", kc]);
    cmd.env("KUBECONFIG", dir.join("missing"));
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The context's namespace is the default namespace...
    let mut cmd = status_cmd(&h, &["web", "--context", "elsewhere"]);
    cmd.env("KUBECONFIG", &kubeconfig);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "portmapper: error: PortMapping nowhere/web not found (check the name and the namespace: -n)\n"
    );
    // ... and -n overrides it.
    let mut cmd = status_cmd(&h, &["web", "--context", "elsewhere", "-n", &h.ns]);
    cmd.env("KUBECONFIG", &kubeconfig);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&format!("PortMapping {}/web ", h.ns)));
    let _ = std::fs::remove_dir_all(dir);
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("portmapper-status-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_finds_the_plugin_on_path_and_prints_the_same_view() {
    let h = published_web().await;
    // The server's own kubectl (1.37).
    let kubectl_bin = test_support::realkube::kubectl();
    // Installed as a user would: the kubectl-portmapper binary linked into a directory on PATH.
    let dir = tempdir();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kubectl-portmapper"),
        dir.join("kubectl-portmapper"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |args: &[&str]| {
        let mut cmd = Command::new(&kubectl_bin);
        cmd.args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", h.kubeconfig_path());
        cmd
    };
    let list = output(kubectl(&["plugin", "list"])).await;
    assert!(
        text(&list.stdout).contains("kubectl-portmapper"),
        "kubectl plugin list: {}{}",
        text(&list.stdout),
        text(&list.stderr)
    );
    let via_kubectl = output(kubectl(&["portmapper", "status", "web"])).await;
    assert!(
        via_kubectl.status.success(),
        "{}",
        text(&via_kubectl.stderr)
    );
    let direct = output(status_cmd(&h, &["web"])).await;
    assert_eq!(text(&via_kubectl.stdout), text(&direct.stdout));
    assert!(text(&via_kubectl.stdout).contains("pod-b  ✔     ✔\n"));
    // Errors name the plugin as the user typed it, and kubectl passes the exit code on.
    let missing = output(kubectl(&["portmapper", "status", "nope"])).await;
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        text(&missing.stderr),
        format!(
            "kubectl portmapper: error: PortMapping {}/nope not found (check the name and the \
             namespace: -n)\n",
            h.ns
        )
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_service_and_forbidden_reads_fail_with_a_clear_message() {
    let h = Harness::new().await;
    h.create(portmapping("orphan", "gone")).await;
    let out = output(status_cmd(&h, &["orphan"])).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "portmapper: error: Service {}/gone not found (PortMapping orphan names it in \
             spec.serviceRef; nothing is published)\n",
            h.ns
        )
    );
    assert!(out.stdout.is_empty());

    // RBAC refuses the read: the same credentials acting as a user with no role binding.
    let dir = tempdir();
    let kubeconfig = dir.join("alice.kubeconfig");
    let admin = std::fs::read_to_string(h.kubeconfig_path()).unwrap();
    let (head, tail) = admin.split_once("    token: ").expect("a token user");
    std::fs::write(
        &kubeconfig,
        format!("{head}    as: alice\n    token: {tail}"),
    )
    .unwrap();
    let mut cmd = status_cmd(&h, &["orphan"]);
    cmd.env("KUBECONFIG", &kubeconfig);
    let out = output(cmd).await;
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(out.status.code(), Some(1));
    let ns = &h.ns;
    assert_eq!(
        text(&out.stderr),
        format!(
            "portmapper: error: not allowed to get portmappings.portmapper.dev orphan in \
             namespace {ns}: portmappings.portmapper.dev \"orphan\" is forbidden: User \"alice\" \
             cannot get resource \"portmappings\" in API group \"portmapper.dev\" in the \
             namespace \"{ns}\"\n"
        )
    );
}

/// Reads of the status client that are not watches.
async fn status_reads(h: &Harness) -> usize {
    h.requests()
        .await
        .iter()
        .filter(|r| r.user_agent == STATUS_AGENT && r.verb != "watch")
        .count()
}

async fn next(frames: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(20), frames.recv())
        .await
        .expect("a frame in time")
        .expect("the watch is still running")
}

fn state(frame: &Value, pod: &str, port: &str) -> Option<String> {
    frame["families"][0]["pods"]
        .as_array()?
        .iter()
        .find(|r| r["pod"] == pod)?["ports"]
        .as_array()?
        .iter()
        .find(|c| c["port"] == port)
        .map(|c| c["state"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_a_new_frame_when_a_pod_changes_without_polling() {
    let h = published_web().await;
    let mut child = status_cmd(&h, &["web", "--watch", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut frames) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let frame: Value = serde_json::from_str(&line).expect("one JSON document per line");
            if tx.send(frame).is_err() {
                break;
            }
        }
    });
    let first = next(&mut frames).await;
    assert_eq!(state(&first, "pod-a", "https").as_deref(), Some("excluded"));
    // Three reads to check the objects exist, one list per watch; then only watches.
    assert_eq!(status_reads(&h).await, 6);

    // pod-a starts serving https: the operator publishes it, the view follows.
    h.patch_pod(
        "pod-a",
        json!({"metadata": {"annotations": {"example.com/ports": "http,https"}}}),
    )
    .await;
    let mut seen = 1;
    loop {
        let frame = next(&mut frames).await;
        seen += 1;
        if state(&frame, "pod-a", "https").as_deref() == Some("ready")
            && frame["ports"][1]["ready"] == 3
        {
            break;
        }
    }
    assert!(seen >= 2);
    assert_eq!(
        status_reads(&h).await,
        6,
        "frames come from the watches, not from polling"
    );

    // Ctrl-C ends it cleanly.
    let pid = child.id().to_string();
    let kill = output({
        let mut c = Command::new("kill");
        c.args(["-INT", &pid]);
        c
    })
    .await;
    assert!(kill.status.success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit on Ctrl-C: {status:?}");
    reader.join().unwrap();
}

/// `portmapper status --watch | head -n 1`: once the reader has gone, the next frame ends the
/// watch quietly with exit 0 (no "Broken pipe" error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_quietly_when_the_reader_goes_away() {
    let h = published_web().await;
    let mut child = status_cmd(&h, &["web", "--watch", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // A hang here would stall the whole suite: the bounds below turn one into a failure that
    // shows the command's stderr (wide margins, not timings).
    let pid = child.id().to_string();
    let kill = move || {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    };
    let mut reading = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
        // The reader, and with it the pipe's read end, is dropped here.
    });
    let first = match tokio::time::timeout(Duration::from_secs(60), &mut reading).await {
        Ok(first) => first.unwrap(),
        Err(_) => {
            kill();
            panic!("no first frame from status --watch within 60 s");
        }
    };
    let frame: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(state(&frame, "pod-a", "https").as_deref(), Some("excluded"));
    h.patch_pod(
        "pod-a",
        json!({"metadata": {"annotations": {"example.com/ports": "http,https"}}}),
    )
    .await;
    let mut waiting = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let out = match tokio::time::timeout(Duration::from_secs(60), &mut waiting).await {
        Ok(out) => out.unwrap(),
        Err(_) => {
            kill();
            let out = waiting.await.unwrap();
            panic!(
                "status --watch still running 60 s after its reader went away; stderr: {}",
                text(&out.stderr)
            );
        }
    };
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(text(&out.stderr), "");
}
