//! Probe-round benchmark on loopback (run with `cargo bench -p portmapper-probe`).
//!
//! 1. A round of 1,000 pods × 2 ports (2,000 `httpGet` targets, 1 s timeout) where 10 % of the
//!    targets accept and never answer: the round should take about
//!    ⌈hanging ÷ concurrency⌉ × timeout, because healthy probes finish in milliseconds and
//!    only hanging ones hold permits.
//! 2. Healthy-probe throughput: 1,800 healthy targets probed once each, for `tcpSocket`,
//!    `httpGet` and `httpGet` over HTTPS.
//!
//! Every pod has its own loopback IP (127.1.x.y) and one listener per port. A round is one
//! `set_targets` of fresh targets (starting `Excluded`, so probed at once with no jitter) until
//! every target has one result.

// A bench binary: a failed setup step should stop it with its message.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use portmapper_api::ProbeSettings;
use portmapper_api::check::{HttpGetCheck, Scheme, TcpSocketCheck};
use portmapper_probe::{
    CheckPosition, CheckType, ExecutorConfig, IpFamily, MappingKey, Membership, NetworkCheck,
    PoolPod, ProbeMetrics, ProbeResult, Prober, ProberConfig, ServicePort, Target,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;

const PODS: usize = 1000;
const PORTS: usize = 2;
/// Every tenth target hangs.
const HANG_EVERY: usize = 10;

/// Counts finished probes and wakes the bench when a round is complete.
#[derive(Default)]
struct RoundCounter {
    done: AtomicUsize,
    want: AtomicUsize,
    complete: Notify,
}

impl ProbeMetrics for RoundCounter {
    fn observe(&self, _check: CheckType, _result: &ProbeResult, _duration: Duration) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if done == self.want.load(Ordering::SeqCst) {
            self.complete.notify_one();
        }
    }
}

fn pod_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8))
}

async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, hang: bool) {
    if !read_head(&mut stream).await {
        return;
    }
    if hang {
        // Hold the connection until the prober gives up and closes it.
        let mut sink = [0u8; 64];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        return;
    }
    let _ = stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        .await;
    let _ = stream.shutdown().await;
}

/// One listener per (pod, port); returns their addresses.
async fn start_servers(tls: Option<tokio_rustls::TlsAcceptor>) -> Vec<SocketAddr> {
    let mut addrs = Vec::with_capacity(PODS * PORTS);
    for pod in 0..PODS {
        for port in 0..PORTS {
            let index = pod * PORTS + port;
            let hang = index.is_multiple_of(HANG_EVERY);
            let listener = TcpListener::bind((pod_ip(pod), 0))
                .await
                .unwrap_or_else(|e| panic!("bind {}: {e} (raise `ulimit -n`?)", pod_ip(pod)));
            addrs.push(listener.local_addr().unwrap());
            let tls = tls.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        match tls {
                            None => answer(stream, hang).await,
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    answer(stream, hang).await;
                                }
                            }
                        }
                    });
                }
            });
        }
    }
    addrs
}

fn target(round: usize, index: usize, addr: SocketAddr, check: NetworkCheck) -> Target {
    Target {
        pod: PoolPod {
            name: format!("pod-{}", index / PORTS),
            uid: format!("uid-{round}-{}", index / PORTS),
            ips: vec![addr.ip()],
            ..PoolPod::default()
        }
        .into(),
        service: "bench".into(),
        port: ServicePort {
            name: format!("port-{}", index % PORTS),
            port: 80,
            protocol: "TCP".into(),
            target_port: addr.port(),
        },
        family: IpFamily::V4,
        position: CheckPosition::top(0),
        check: check.into(),
        settings: ProbeSettings {
            period_seconds: 3600,
            timeout_seconds: 1,
            success_threshold: 1,
            failure_threshold: 3,
        },
        initial_membership: Membership::Excluded,
    }
}

/// Runs one round of `targets` and returns its duration.
async fn round(concurrency: usize, targets: Vec<Target>) -> Duration {
    let counter = Arc::new(RoundCounter::default());
    counter.want.store(targets.len(), Ordering::SeqCst);
    let (prober, _events) = Prober::network(
        // One PortMapping: its share is the whole bound, so a round measures the global bound.
        ProberConfig {
            concurrency,
            concurrency_per_namespace: Some(concurrency),
            concurrency_per_mapping: Some(concurrency),
            start_jitter: false,
        },
        ExecutorConfig {
            allow_loopback: true,
            ..ExecutorConfig::default()
        },
        counter.clone(),
    )
    .unwrap();
    let mapping = MappingKey::new("bench", "round");
    let complete = counter.complete.notified();
    tokio::pin!(complete);
    complete.as_mut().enable();
    let started = Instant::now();
    prober.set_targets(&mapping, targets);
    complete.await;
    let elapsed = started.elapsed();
    prober.remove_mapping(&mapping);
    elapsed
}

fn http_get(scheme: Scheme) -> NetworkCheck {
    NetworkCheck::HttpGet(HttpGetCheck {
        path: Some("/healthz".into()),
        scheme: Some(scheme),
        ..HttpGetCheck::default()
    })
}

fn self_signed() -> tokio_rustls::TlsAcceptor {
    let certified = rcgen::generate_simple_self_signed(vec!["pod".to_string()]).unwrap();
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run only for bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let plain = start_servers(None).await;
        let tls = start_servers(Some(self_signed())).await;
        let hanging = plain.len() / HANG_EVERY;

        println!("## Hanging round: {PODS} pods × {PORTS} ports, {hanging} hanging, timeout 1 s");
        println!();
        println!(
            "| concurrency | expected ⌈hanging ÷ concurrency⌉ × timeout | measured (median of 3) |"
        );
        println!("|---:|---:|---:|");
        for concurrency in [64, 128, 256] {
            let mut times = Vec::new();
            for r in 0..3 {
                let targets = plain
                    .iter()
                    .enumerate()
                    .map(|(i, a)| target(r, i, *a, http_get(Scheme::Http)))
                    .collect();
                times.push(round(concurrency, targets).await);
            }
            let expected = hanging.div_ceil(concurrency);
            println!(
                "| {concurrency} | {expected} s | {:.2} s |",
                median(times).as_secs_f64()
            );
        }

        println!();
        println!(
            "## Healthy-probe throughput: {} healthy targets, concurrency 128",
            plain.len() - hanging
        );
        println!();
        println!("| check | round (median of 3) | probes/s |");
        println!("|---|---:|---:|");
        // (name, listeners, None for tcpSocket or the httpGet scheme)
        let cases = [
            ("tcpSocket", &plain, None),
            ("httpGet (HTTP)", &plain, Some(Scheme::Http)),
            ("httpGet (HTTPS)", &tls, Some(Scheme::Https)),
        ];
        for (name, addrs, scheme) in cases {
            let mut times = Vec::new();
            let mut n = 0;
            for r in 0..3 {
                let targets: Vec<Target> = addrs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !i.is_multiple_of(HANG_EVERY))
                    .map(|(i, a)| {
                        let check = match scheme {
                            None => NetworkCheck::TcpSocket(TcpSocketCheck::default()),
                            Some(scheme) => http_get(scheme),
                        };
                        target(r, i, *a, check)
                    })
                    .collect();
                n = targets.len();
                times.push(round(128, targets).await);
            }
            let t = median(times);
            println!(
                "| {name} | {:.3} s | {:.0} |",
                t.as_secs_f64(),
                n as f64 / t.as_secs_f64()
            );
        }
    });
}
