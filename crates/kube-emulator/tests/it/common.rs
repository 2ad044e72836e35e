//! Shared helpers: start an emulator, raw HTTP, kubectl runner.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::CustomResource;
use kube_emulator::Emulator;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Test CRD `widgets.example.com` with a status subresource.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd"
)]
#[kube(printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#)]
pub struct WidgetSpec {
    pub size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

/// Widget status.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}

pub async fn emu() -> Emulator {
    Emulator::builder()
        .bookmark_interval(Duration::from_millis(300))
        .start()
        .await
        .expect("emulator starts")
}

/// Install the Widget CRD and wait until it is Established.
pub async fn install_widget_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    use kube::api::{Api, Patch, PatchParams};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Widget::crd();
    crds.patch(
        "widgets.example.com",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    let est = kube::runtime::wait::await_condition(
        crds,
        "widgets.example.com",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(10), est)
        .await
        .expect("established in time")
        .expect("await ok");
}

/// Raw HTTP/1.0 request (no chunking: the body runs until close). Returns (status, body).
pub async fn raw(
    emu: &Emulator,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(emu.addr())
        .await
        .expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The kubectl binaries to test with (KUBECTL env var, else `kubectl` on PATH).
pub fn kubectl_bin() -> Option<String> {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    match Command::new(&bin).arg("version").arg("--client").output() {
        Ok(o) if o.status.success() => Some(bin),
        _ => {
            eprintln!(
                "\n==================== SKIPPED: kubectl not found on PATH ({bin}); kubectl conformance not run ====================\n"
            );
            None
        }
    }
}

/// Run kubectl against the emulator (async-friendly: runs on a blocking thread).
pub async fn kubectl(bin: &str, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let bin = bin.to_string();
    let kc = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let o = Command::new(&bin)
            .env("KUBECONFIG", &kc)
            .args(&args)
            .output()
            .expect("kubectl runs");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    })
    .await
    .expect("join")
}

/// Run kubectl with stdin.
pub async fn kubectl_stdin(
    bin: &str,
    kubeconfig: &Path,
    args: &[&str],
    stdin: &str,
) -> (bool, String, String) {
    use std::io::Write;
    let bin = bin.to_string();
    let kc = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let input = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut c = Command::new(&bin)
            .env("KUBECONFIG", &kc)
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl spawns");
        c.stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        let o = c.wait_with_output().expect("kubectl runs");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    })
    .await
    .expect("join")
}

/// `(name, data[key])` of a ConfigMap: what the history and stale-list tests compare.
pub fn name_and(key: &str, o: &k8s_openapi::api::core::v1::ConfigMap) -> (String, String) {
    (
        o.metadata.name.clone().unwrap_or_default(),
        o.data
            .as_ref()
            .and_then(|d| d.get(key).cloned())
            .unwrap_or_default(),
    )
}

/// Owned `(name, value)` pairs, for comparing with [`name_and`] results.
pub fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The versioned kubectl binaries (`kubectl.1.27` … `kubectl.1.33`) that run here, found on PATH
/// or next to the (dispatcher) `kubectl`.
pub fn versioned_kubectls() -> Vec<String> {
    let dir = Command::new("sh")
        .args(["-c", "dirname \"$(readlink -f \"$(command -v kubectl)\")\""])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    (27..=33)
        .map(|minor| {
            let beside = format!("{dir}/kubectl.1.{minor}");
            if Path::new(&beside).exists() {
                beside
            } else {
                format!("kubectl.1.{minor}")
            }
        })
        .filter(|bin| {
            Command::new(bin)
                .args(["version", "--client"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect()
}
