//! Real pods for `portmapper demo`: listeners on the demo pods' IPs, and the prober's sockets,
//! inside a private network namespace the demo creates, so network checks probe real servers
//! at addresses EndpointSlices accept without any packet reaching a real network.
//!
//! Only one thread of the demo enters the namespace: a short-lived helper process
//! (`unshare -n`) creates it, brings `lo` up and routes 10.244.0.0/16 to it; a dedicated thread
//! joins it (`setns`) and runs a single-threaded tokio runtime. Pod listeners and probes run there; the API
//! server, the controller and the user's kubectl stay on the host's loopback.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use portmapper_probe::{
    Cause, ExecutorConfig, MappingKey, NetworkExecutor, ProbeExecutor, ProbeFuture, ProbeResult,
    Target,
};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

const SETUP: &str = "ip link set lo up && ip route add local 10.244.0.0/16 dev lo && echo ready && exec sleep 86400";

/// The demo's private pod network.
pub struct PodNetwork {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    servers: Mutex<HashMap<(String, u16), AbortHandle>>,
}

impl PodNetwork {
    /// Creates the namespace; `Err` says why it cannot be (not root, no `unshare`/`ip`).
    pub fn create() -> Result<Self, String> {
        let mut holder = Command::new("unshare")
            .args(["-n", "sh", "-c", SETUP])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run unshare: {e}"))?;
        let mut line = String::new();
        if let Some(out) = holder.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim() != "ready" {
            let _ = holder.kill();
            let output = holder.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "cannot set up a network namespace (`unshare -n`, `ip`): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let ns = match File::open(format!("/proc/{}/ns/net", holder.id())) {
            Ok(ns) => ns,
            Err(e) => {
                let _ = holder.kill();
                return Err(format!("opening the namespace: {e}"));
            }
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("demo-pod-network".into())
            .spawn(move || {
                let joined =
                    move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                        .map_err(|e| format!("joining the namespace: {e}"))
                        .and_then(|()| {
                            tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build()
                                .map_err(|e| format!("pod network runtime: {e}"))
                        });
                match joined {
                    Ok(runtime) => {
                        let _ = ready_tx.send(Ok(runtime.handle().clone()));
                        // Runs the pods' listeners and the probes until the demo ends.
                        let _ = runtime.block_on(stopped);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| format!("pod network thread: {e}"))?;
        let handle = match ready_rx.recv() {
            Ok(Ok(handle)) => handle,
            Ok(Err(e)) => {
                let _ = holder.kill();
                return Err(e);
            }
            Err(e) => {
                let _ = holder.kill();
                return Err(format!("pod network thread: {e}"));
            }
        };
        // The namespace lives on while our thread is in it: the helper is no longer needed, and
        // ending it now leaves nothing behind even if the demo is killed.
        let _ = holder.kill();
        let _ = holder.wait();
        Ok(Self {
            handle,
            stop: Some(stop),
            servers: Mutex::new(HashMap::new()),
        })
    }

    /// A probe executor whose sockets live in the namespace (pod IPs only, as in production).
    pub fn executor(&self) -> Result<Arc<dyn ProbeExecutor>, String> {
        let inner = NetworkExecutor::new(ExecutorConfig::default()).map_err(|e| e.to_string())?;
        Ok(Arc::new(InNamespace {
            inner: Arc::new(inner),
            handle: self.handle.clone(),
        }))
    }

    /// Starts `pod`'s HTTP server on `ip:port` (answers 200 to every request).
    pub fn start_server(&self, pod: &str, ip: IpAddr, port: u16) {
        let addr = SocketAddr::new(ip, port);
        let task = self.handle.spawn(async move {
            let Ok(listener) = TcpListener::bind(addr).await else {
                return;
            };
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = stream.read(&mut buf).await;
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                        )
                        .await;
                });
            }
        });
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = servers.insert((pod.to_owned(), port), task.abort_handle()) {
            old.abort();
        }
    }

    /// Stops `pod`'s server on `port`: connections are refused from now on.
    pub fn stop_server(&self, pod: &str, port: u16) {
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(task) = servers.remove(&(pod.to_owned(), port)) {
            task.abort();
        }
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Runs each probe on the namespace's runtime, so its socket is created there.
struct InNamespace {
    inner: Arc<NetworkExecutor>,
    handle: Handle,
}

impl ProbeExecutor for InNamespace {
    fn probe<'a>(&'a self, mapping: &'a MappingKey, target: &'a Target) -> ProbeFuture<'a> {
        let (inner, mapping, target) = (self.inner.clone(), mapping.clone(), target.clone());
        let task = self
            .handle
            .spawn(async move { inner.run(&mapping, &target).await });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                ProbeResult::abstain(Cause::LocalResources, format!("pod network runtime: {e}"))
            })
        })
    }
}
