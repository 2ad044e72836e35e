//! Two servers side by side: the shared real control plane and an in-process emulator, each with
//! the test's namespace. Every step is sent to both; the answers are normalised and compared,
//! and each difference no allowance explains is kept for the report `finish` panics with.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use http_body_util::BodyExt;
use kube_emulator::Emulator;
use serde_json::{Value, json};

use super::compare::{Allowance, diff, normalize};

/// One HTTP request. `path` and `body` may name `{ns}` and values saved by earlier steps
/// (`{rv:NAME}`, `{uid:NAME}`), substituted per server.
#[derive(Debug, Clone)]
pub struct Req {
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Option<String>,
    save: Option<String>,
    allow: Vec<Allowance>,
}

/// Patch content types.
pub const MERGE: &str = "application/merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";

impl Req {
    fn new(method: &'static str, path: &str) -> Self {
        Self {
            method,
            path: path.to_string(),
            content_type: "application/json",
            body: None,
            save: None,
            allow: vec![],
        }
    }
    pub fn get(path: &str) -> Self {
        Self::new("GET", path)
    }
    pub fn delete(path: &str) -> Self {
        Self::new("DELETE", path)
    }
    pub fn post(path: &str, body: Value) -> Self {
        Self::new("POST", path).body(body)
    }
    pub fn put(path: &str, body: Value) -> Self {
        Self::new("PUT", path).body(body)
    }
    pub fn patch(path: &str, content_type: &'static str, body: Value) -> Self {
        let mut r = Self::new("PATCH", path).body(body);
        r.content_type = content_type;
        r
    }
    /// A server-side apply by `manager` (`force` adds `force=true`).
    pub fn apply(path: &str, manager: &str, force: bool, body: Value) -> Self {
        let sep = if path.contains('?') { '&' } else { '?' };
        let force = if force { "&force=true" } else { "" };
        Self::patch(
            &format!("{path}{sep}fieldManager={manager}{force}"),
            APPLY,
            body,
        )
    }
    pub fn body(mut self, body: Value) -> Self {
        self.body = Some(body.to_string());
        self
    }
    /// Saves the answer's `metadata.resourceVersion` and `metadata.uid` as `{rv:name}`,
    /// `{uid:name}`.
    pub fn save(mut self, name: &str) -> Self {
        self.save = Some(name.to_string());
        self
    }
    /// Tolerates differences at `path` (in the compared value) for `reason`.
    pub fn allow(mut self, path: &str, reason: &str) -> Self {
        self.allow.push(Allowance {
            path: path.to_string(),
            reason: reason.to_string(),
        });
        self
    }
}

/// One kubectl run: `args` (with `{ns}` substituted), optional stdin.
#[derive(Debug, Clone)]
pub struct Kubectl {
    args: Vec<String>,
    stdin: Option<String>,
}

impl Kubectl {
    pub fn new(args: &[&str]) -> Self {
        Self {
            args: args.iter().map(|a| a.to_string()).collect(),
            stdin: None,
        }
    }
    pub fn stdin(mut self, text: &str) -> Self {
        self.stdin = Some(text.to_string());
        self
    }
}

/// One server: its client, a kubeconfig whose context is the test's namespace, saved values.
struct Side {
    label: &'static str,
    client: kube::Client,
    kubeconfig: PathBuf,
    saved: HashMap<String, String>,
}

impl Side {
    fn fill(&self, template: &str, ns: &str) -> String {
        let mut s = template.replace("{ns}", ns);
        for (k, v) in &self.saved {
            s = s.replace(&format!("{{{k}}}"), v);
        }
        s
    }

    fn remember(&mut self, name: &str, answer: &Value) {
        let meta = &answer["body"]["metadata"];
        for (key, field) in [("rv", "resourceVersion"), ("uid", "uid")] {
            if let Some(v) = meta[field].as_str() {
                self.saved.insert(format!("{key}:{name}"), v.to_string());
            }
        }
    }

    async fn send(&self, req: &Req, ns: &str) -> Value {
        let mut builder = hyper::Request::builder()
            .method(req.method)
            .uri(self.fill(&req.path, ns))
            .header("Accept", "application/json");
        if req.body.is_some() {
            builder = builder.header("Content-Type", req.content_type);
        }
        let body = req
            .body
            .as_ref()
            .map(|b| self.fill(b, ns).into_bytes())
            .unwrap_or_default();
        let request = builder
            .body(kube::client::Body::from(body))
            .expect("request");
        let response = self.client.send(request).await.expect("the server answers");
        let code = response.status().as_u16();
        let warnings = warnings(response.headers());
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("response body")
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).to_string();
        let body = parse_body(&text);
        json!({"code": code, "warnings": warnings, "body": body})
    }

    /// Runs kubectl on a blocking thread: the emulator serves from this test's runtime.
    async fn kubectl(&self, run: &Kubectl, ns: &str) -> Value {
        let args: Vec<String> = run.args.iter().map(|a| self.fill(a, ns)).collect();
        let stdin = run.stdin.as_ref().map(|t| self.fill(t, ns));
        let kubeconfig = self.kubeconfig.clone();
        tokio::task::spawn_blocking(move || run_kubectl(&kubeconfig, &args, stdin.as_deref()))
            .await
            .expect("kubectl thread")
    }
}

fn run_kubectl(kubeconfig: &std::path::Path, args: &[String], stdin: Option<&str>) -> Value {
    use std::io::Write;
    let mut child = Command::new(test_support::realkube::kubectl())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        pipe.write_all(text.as_bytes())
            .expect("kubectl reads stdin");
    }
    drop(pipe);
    let out = child.wait_with_output().expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    json!({"ok": out.status.success(), "stdout": parse_body(&stdout),
        "stderr": stderr.lines().collect::<Vec<_>>()})
}

/// The `Warning` headers, without their `299 - "…"` wrapping.
fn warnings(headers: &hyper::HeaderMap) -> Vec<String> {
    headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| {
            v.strip_prefix("299 - ")
                .map(|t| t.trim_matches('"'))
                .unwrap_or(v)
                .to_string()
        })
        .collect()
}

/// JSON when it parses; a watch stream (one JSON event a line) as the list of its events, less
/// bookmarks; else the text's lines.
fn parse_body(text: &str) -> Value {
    if let Ok(v) = serde_json::from_str(text) {
        return v;
    }
    let events: Result<Vec<Value>, _> = text.lines().map(serde_json::from_str).collect();
    match events {
        Ok(events) if !events.is_empty() => Value::Array(
            events
                .into_iter()
                .filter(|e| e["type"] != "BOOKMARK")
                .collect(),
        ),
        _ => Value::Array(text.lines().map(|l| json!(l)).collect()),
    }
}

/// The two servers of one test, in a namespace of the test's own on each.
pub struct Pair {
    pub ns: String,
    real: Side,
    emu: Side,
    _emulator: Emulator,
    failures: Vec<String>,
    allowed: Vec<String>,
}

impl Pair {
    /// Starts (or joins) the real control plane, starts an emulator with our CRD, and creates
    /// the namespace `tag-N` on both.
    pub async fn new(tag: &str) -> Self {
        Self::with(tag, |b| b).await
    }

    /// [`Pair::new`] with an emulator configured by `configure`.
    pub async fn with(
        tag: &str,
        configure: impl FnOnce(kube_emulator::EmulatorBuilder) -> kube_emulator::EmulatorBuilder,
    ) -> Self {
        let plane = tokio::task::spawn_blocking(test_support::realkube::shared)
            .await
            .expect("realkube starts");
        let ns = plane.namespace_name(&format!("diff-{tag}"));
        let dir = std::env::temp_dir().join(format!("kube-emulator-diff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("kubeconfig dir");
        let real_config = dir.join(format!("{ns}-real.kubeconfig"));
        plane.kubeconfig_in(&ns, &real_config);
        let builder = Emulator::builder()
            .load(test_support::realkube::repo().join("crds/portmapper.dev_portmappings.yaml"));
        let emulator = configure(builder).start().await.expect("emulator starts");
        let emu_config = dir.join(format!("{ns}-emu.kubeconfig"));
        let text = std::fs::read_to_string(emulator.kubeconfig_path()).expect("kubeconfig");
        std::fs::write(
            &emu_config,
            text.replace("namespace: default", &format!("namespace: {ns}")),
        )
        .expect("write kubeconfig");
        let real = Side {
            label: "real",
            client: client_for(&real_config).await,
            kubeconfig: real_config,
            saved: HashMap::new(),
        };
        let emu = Side {
            label: "emu",
            client: emulator.client().expect("emulator client"),
            kubeconfig: emu_config,
            saved: HashMap::new(),
        };
        let mut pair = Self {
            ns,
            real,
            emu,
            _emulator: emulator,
            failures: vec![],
            allowed: vec![],
        };
        let ns_body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}"}});
        pair.send(
            "create the namespace",
            Req::post("/api/v1/namespaces", ns_body),
        )
        .await;
        pair
    }

    /// Sends `req` to both servers and compares the answers; returns `[real, emu]`.
    pub async fn send(&mut self, step: &str, req: Req) -> [Value; 2] {
        let (real, emu) = tokio::join!(self.real.send(&req, &self.ns), async {
            self.emu.send(&req, &self.ns).await
        });
        if let Some(name) = &req.save {
            self.real.remember(name, &real);
            self.emu.remember(name, &emu);
        }
        let title = format!("{step}: {} {}", req.method, req.path);
        self.compare(&title, real, emu, &req.allow)
    }

    /// Runs kubectl against both servers and compares exit status, stdout and stderr.
    pub async fn kubectl(&mut self, step: &str, run: Kubectl) -> [Value; 2] {
        let title = format!("{step}: kubectl {}", run.args.join(" "));
        let ns = self.ns.clone();
        let real = self.real.kubectl(&run, &ns).await;
        let emu = self.emu.kubectl(&run, &ns).await;
        self.compare(&title, real, emu, &[])
    }

    /// Runs a kube-rs sequence against both servers: `Ok` values and API errors (`Status`) are
    /// compared.
    pub async fn kube<F, Fut>(&mut self, step: &str, allow: &[(&str, &str)], f: F) -> [Value; 2]
    where
        F: Fn(kube::Client, String) -> Fut,
        Fut: Future<Output = kube::Result<Value>>,
    {
        let outcome = |r: kube::Result<Value>| match r {
            Ok(v) => json!({"ok": v}),
            Err(kube::Error::Api(status)) => json!({"status": *status}),
            Err(e) => json!({"error": e.to_string()}),
        };
        let real = outcome(f(self.real.client.clone(), self.ns.clone()).await);
        let emu = outcome(f(self.emu.client.clone(), self.ns.clone()).await);
        let allow: Vec<Allowance> = allow
            .iter()
            .map(|(p, r)| Allowance {
                path: p.to_string(),
                reason: r.to_string(),
            })
            .collect();
        self.compare(&format!("{step} (kube-rs)"), real, emu, &allow)
    }

    fn compare(&mut self, title: &str, real: Value, emu: Value, allow: &[Allowance]) -> [Value; 2] {
        let (mut a, mut b) = (real.clone(), emu.clone());
        normalize(&mut a);
        normalize(&mut b);
        let mut unexplained = vec![];
        let mut differences = diff(&a, &b);
        // Answers of different kinds differ everywhere: their codes and messages say why.
        if a["code"] != b["code"] || a["ok"] != b["ok"] {
            differences.retain(|d| {
                ["code", "ok", "body.reason", "body.message", "stderr"]
                    .iter()
                    .any(|p| d.path.starts_with(p))
            });
        }
        for d in differences {
            match allow.iter().find(|al| al.covers(&d.path)) {
                Some(al) => self
                    .allowed
                    .push(format!("{title}: {} ({})", d.path, al.reason)),
                None => unexplained.push(format!("    {d}")),
            }
        }
        if !unexplained.is_empty() {
            self.failures.push(format!(
                "  step {title}\n{}\n    real answer: {}\n    emu answer:  {}",
                unexplained.join("\n"),
                clip(&a),
                clip(&b)
            ));
        }
        [real, emu]
    }

    /// Panics with every unexplained difference; prints the allowed ones.
    pub fn finish(self) {
        for a in &self.allowed {
            eprintln!("allowed difference: {a}");
        }
        assert!(
            self.failures.is_empty(),
            "{} step(s) differ between kube-apiserver 1.37 ({}) and kube-emulator ({}) in \
             namespace {}:\n{}",
            self.failures.len(),
            self.real.label,
            self.emu.label,
            self.ns,
            self.failures.join("\n")
        );
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.real.kubeconfig);
        let _ = std::fs::remove_file(&self.emu.kubeconfig);
    }
}

/// A kube client for a kubeconfig file.
async fn client_for(path: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// An answer for the report, cut to a readable length.
fn clip(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(1500) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
