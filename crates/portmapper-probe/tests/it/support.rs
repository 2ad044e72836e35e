//! Test servers and target builders.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use portmapper_api::ProbeSettings;
use portmapper_api::check::{HttpGetCheck, Scheme, TcpSocketCheck};
use portmapper_probe::{
    CheckPosition, ContainerPort, ExecutorConfig, IpFamily, MappingKey, Membership, NetworkCheck,
    NetworkExecutor, PodMetadata, PoolPod, ProbeResult, ServicePort, Target, WebhookEgress,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

pub fn mapping() -> MappingKey {
    MappingKey::new("shop", "kafka")
}

/// An executor that may probe loopback, since loopback stands in for pod IPs here, and call
/// webhooks anywhere (the egress policy has tests of its own).
pub fn executor() -> NetworkExecutor {
    NetworkExecutor::new(ExecutorConfig {
        allow_loopback: true,
        webhook_egress: WebhookEgress::allow_all(),
        ..ExecutorConfig::default()
    })
    .unwrap()
}

/// A target whose pod has `addr`'s IP and whose Service target port is `addr`'s port.
pub fn target(addr: SocketAddr, check: NetworkCheck) -> Target {
    Target {
        pod: PoolPod {
            name: "kafka-0".into(),
            uid: "uid-0".into(),
            metadata: PodMetadata::new(
                BTreeMap::from([("app".into(), "kafka".into())]),
                BTreeMap::from([("example.com/ports".into(), "broker".into())]),
            ),
            ips: vec![addr.ip()],
            ports: vec![ContainerPort {
                name: "broker".into(),
                port: addr.port(),
                protocol: "TCP".into(),
            }],
        }
        .into(),
        service: "kafka".into(),
        port: ServicePort {
            name: "broker".into(),
            port: 9092,
            protocol: "TCP".into(),
            target_port: addr.port(),
        },
        family: if addr.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        },
        position: CheckPosition::top(0),
        check: check.into(),
        settings: ProbeSettings::default(),
        initial_membership: Membership::Excluded,
    }
}

pub fn http_get(path: &str) -> NetworkCheck {
    NetworkCheck::HttpGet(HttpGetCheck {
        path: Some(path.into()),
        ..HttpGetCheck::default()
    })
}

pub fn https_get(path: &str) -> NetworkCheck {
    NetworkCheck::HttpGet(HttpGetCheck {
        path: Some(path.into()),
        scheme: Some(Scheme::Https),
        ..HttpGetCheck::default()
    })
}

pub fn tcp_socket(port: Option<IntOrString>) -> NetworkCheck {
    NetworkCheck::TcpSocket(TcpSocketCheck {
        port,
        timeout_seconds: None,
    })
}

/// Probes `target` once with the loopback-allowing executor.
pub async fn probe(target: &Target) -> ProbeResult {
    executor().run(&mapping(), target).await
}

/// A port on `ip` where nothing listens.
pub async fn refused_addr(ip: IpAddr) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// How a test HTTP server answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete answer.
    Status {
        code: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Reads the request and never answers.
    Hang,
    /// Accepts and never even reads.
    Silent,
    /// Status and headers at once, then one body byte per `interval` of a 1 MiB body.
    SlowBody { interval: Duration },
    /// Status 200, then body bytes until the client goes away.
    Endless,
    /// Bytes that are not HTTP, after reading the request.
    Raw(Vec<u8>),
    /// Bytes written as soon as the connection opens, without reading anything.
    Banner(Vec<u8>),
}

impl Reply {
    pub fn status(code: u16) -> Self {
        Self::Status {
            code,
            headers: vec![],
            body: format!("status {code}").into_bytes(),
        }
    }

    pub fn json(code: u16, body: &str) -> Self {
        Self::Status {
            code,
            headers: vec![("Content-Type", "application/json".into())],
            body: body.as_bytes().to_vec(),
        }
    }
}

/// What a test server saw.
#[derive(Default)]
pub struct Seen {
    pub connections: AtomicUsize,
    pub body_bytes_sent: AtomicUsize,
    pub requests: Mutex<Vec<(String, Vec<u8>)>>,
}

impl Seen {
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<(String, Vec<u8>)> {
        self.requests.lock().unwrap().clone()
    }
}

/// A plain or TLS HTTP/1.1 server with scripted answers, stopped on drop.
pub struct HttpServer {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    task: JoinHandle<()>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpServer {
    pub async fn start(ip: IpAddr, reply: Reply) -> Self {
        Self::start_with(ip, reply, None).await
    }

    pub async fn start_tls(ip: IpAddr, reply: Reply, tls: tokio_rustls::TlsAcceptor) -> Self {
        Self::start_with(ip, reply, Some(tls)).await
    }

    async fn start_with(ip: IpAddr, reply: Reply, tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let state = seen.clone();
        let task = tokio::spawn(async move {
            // Connection tasks live in a JoinSet so they die with the server.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                state.connections.fetch_add(1, Ordering::SeqCst);
                let reply = reply.clone();
                let state = state.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    match tls {
                        None => serve(stream, reply, state).await,
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, reply, state).await;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, seen, task }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, reply: Reply, seen: Arc<Seen>) {
    match &reply {
        Reply::Silent => std::future::pending::<()>().await,
        Reply::Banner(bytes) => {
            let _ = stream.write_all(bytes).await;
            let _ = stream.shutdown().await;
            return;
        }
        _ => {}
    }
    let Some((head, body)) = read_request(&mut stream).await else {
        return;
    };
    seen.requests.lock().unwrap().push((head, body));
    match reply {
        Reply::Status {
            code,
            headers,
            body,
        } => {
            let mut out = format!(
                "HTTP/1.1 {code} Whatever\r\nContent-Length: {}\r\n",
                body.len()
            );
            for (name, value) in headers {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push_str("Connection: close\r\n\r\n");
            let _ = stream.write_all(out.as_bytes()).await;
            let _ = stream.write_all(&body).await;
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
        }
        Reply::Hang | Reply::Silent | Reply::Banner(_) => std::future::pending::<()>().await,
        Reply::SlowBody { interval } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
            let _ = stream.write_all(head.as_bytes()).await;
            loop {
                if stream.write_all(b"x").await.is_err() || stream.flush().await.is_err() {
                    return;
                }
                seen.body_bytes_sent.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(interval).await;
            }
        }
        Reply::Endless => {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n";
            let _ = stream.write_all(head.as_bytes()).await;
            let chunk = vec![b'x'; 16 * 1024];
            while stream.write_all(&chunk).await.is_ok() {
                seen.body_bytes_sent
                    .fetch_add(chunk.len(), Ordering::SeqCst);
            }
        }
        Reply::Raw(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
    }
}

/// Reads one request head and its Content-Length body.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// A self-signed certificate for `names` and a TLS acceptor presenting it; also the PEM of the
/// certificate, which can serve as its own CA bundle.
pub fn self_signed(names: &[&str]) -> (tokio_rustls::TlsAcceptor, String) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let certified = rcgen::generate_simple_self_signed(names).unwrap();
    let cert_pem = certified.cert.pem();
    let cert_der = certified.cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert_der], key_der)
    .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), cert_pem)
}
