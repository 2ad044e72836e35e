//! `httpGet` against real HTTP and HTTPS servers.

use std::time::Duration;

use portmapper_api::check::{HttpGetCheck, HttpHeader};
use portmapper_probe::{Cause, NetworkCheck, Outcome};

use crate::support::*;

#[tokio::test]
async fn healthy_200_includes_and_sends_headers() {
    let server = HttpServer::start(LOCALHOST, Reply::status(200)).await;
    let check = NetworkCheck::HttpGet(HttpGetCheck {
        path: Some("/healthz?deep=1".into()),
        http_headers: Some(vec![HttpHeader {
            name: "X-Probe".into(),
            value: "yes".into(),
        }]),
        ..HttpGetCheck::default()
    });
    let result = probe(&target(server.addr, check)).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Include, Cause::Healthy),
        "{result:?}"
    );
    let requests = server.seen.requests();
    assert_eq!(requests.len(), 1);
    let head = requests[0].0.to_ascii_lowercase();
    assert!(
        head.starts_with("get /healthz?deep=1 http/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("x-probe: yes"), "{head}");
    assert!(head.contains(&format!("host: {}", server.addr)), "{head}");
}

#[tokio::test]
async fn refused_excludes() {
    let addr = refused_addr(LOCALHOST).await;
    let result = probe(&target(addr, http_get("/"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Refused),
        "{result:?}"
    );
}

#[tokio::test]
async fn hanging_server_excludes_after_the_timeout() {
    let server = HttpServer::start(LOCALHOST, Reply::Hang).await;
    let started = std::time::Instant::now();
    let result = probe(&target(server.addr, http_get("/"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Timeout),
        "{result:?}"
    );
    // Correctness bound: the default timeout is 1 s; the probe gives up then, not at some later
    // guard (the 10 s period); 4 s of margin for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn redirect_includes_and_is_not_followed() {
    let elsewhere = HttpServer::start(LOCALHOST, Reply::status(200)).await;
    let server = HttpServer::start(
        LOCALHOST,
        Reply::Status {
            code: 302,
            headers: vec![("Location", format!("http://{}/", elsewhere.addr))],
            body: vec![],
        },
    )
    .await;
    let result = probe(&target(server.addr, http_get("/"))).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    assert!(result.reason.contains("302"), "{result:?}");
    assert_eq!(elsewhere.seen.connections(), 0, "redirect was followed");
}

#[tokio::test]
async fn not_found_and_server_error_exclude_with_the_status() {
    for code in [404, 500] {
        let server = HttpServer::start(LOCALHOST, Reply::status(code)).await;
        let result = probe(&target(server.addr, http_get("/ready"))).await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Exclude, Cause::Status),
            "{result:?}"
        );
        assert!(result.reason.contains(&code.to_string()), "{result:?}");
        assert!(
            result.reason.contains(&format!("status {code}")),
            "body excerpt: {result:?}"
        );
    }
}

#[tokio::test]
async fn slow_body_excludes_after_the_timeout() {
    let server = HttpServer::start(
        LOCALHOST,
        Reply::SlowBody {
            interval: Duration::from_millis(200),
        },
    )
    .await;
    let result = probe(&target(server.addr, http_get("/"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Timeout),
        "{result:?}"
    );
}

#[tokio::test]
async fn huge_body_is_cut_short_and_includes() {
    let server = HttpServer::start(LOCALHOST, Reply::Endless).await;
    let result = probe(&target(server.addr, http_get("/"))).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    // The probe closed the connection after a few KiB: the server's writes fail soon after
    // (socket buffers hold a few MiB at most), far below the 1 GiB it announced.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = server
        .seen
        .body_bytes_sent
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(sent < 64 * 1024 * 1024, "server kept sending: {sent} bytes");
}

#[tokio::test]
async fn garbage_answer_excludes_as_protocol_error() {
    let server =
        HttpServer::start(LOCALHOST, Reply::Raw(b"SSH-2.0-OpenSSH\r\n\r\n".to_vec())).await;
    let result = probe(&target(server.addr, http_get("/"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Protocol),
        "{result:?}"
    );
}

#[tokio::test]
async fn https_with_self_signed_certificate_includes() {
    let (acceptor, _) = self_signed(&["pod.invalid"]);
    let server = HttpServer::start_tls(LOCALHOST, Reply::status(200), acceptor).await;
    let result = probe(&target(server.addr, https_get("/healthz"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Include, Cause::Healthy),
        "{result:?}"
    );
    assert_eq!(server.seen.requests().len(), 1);
}

#[tokio::test]
async fn https_to_a_plain_http_server_excludes_as_tls_failure() {
    let server = HttpServer::start(
        LOCALHOST,
        Reply::Banner(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec()),
    )
    .await;
    let result = probe(&target(server.addr, https_get("/"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Tls),
        "{result:?}"
    );
}

#[tokio::test]
async fn https_server_error_excludes() {
    let (acceptor, _) = self_signed(&["127.0.0.1"]);
    let server = HttpServer::start_tls(LOCALHOST, Reply::status(503), acceptor).await;
    let result = probe(&target(server.addr, https_get("/"))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Status),
        "{result:?}"
    );
}

#[tokio::test]
async fn ipv6_target_uses_the_pods_ipv6_address() {
    let v6: std::net::IpAddr = "::1".parse().unwrap();
    if tokio::net::TcpListener::bind((v6, 0)).await.is_err() {
        eprintln!("SKIPPED: no IPv6 loopback here");
        return;
    }
    let v4_server = HttpServer::start(LOCALHOST, Reply::status(500)).await;
    let v6_server = HttpServer::start(v6, Reply::status(200)).await;
    // A dual-stack pod: the IPv4 address answers 500 on another port; the IPv6 slice's probe
    // must use the IPv6 address.
    let mut t = target(v6_server.addr, http_get("/"));
    std::sync::Arc::make_mut(&mut t.pod).ips = vec![v4_server.addr.ip(), v6];
    t.family = portmapper_probe::IpFamily::V6;
    let result = probe(&t).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    assert_eq!(v6_server.seen.connections(), 1);
    assert_eq!(v4_server.seen.connections(), 0);
    let head = &v6_server.seen.requests()[0].0;
    assert!(
        head.contains(&format!("host: [::1]:{}", v6_server.addr.port())),
        "{head}"
    );
}
