//! A check cannot be pointed at a host that is not the pool pod's IP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use portmapper_api::check::{HttpGetCheck, HttpHeader};
use portmapper_probe::{
    Cause, ExecutorConfig, NetworkCheck, NetworkExecutor, Outcome, WebhookEgress,
};

use crate::grpc::{GrpcServer, grpc};
use crate::support::*;

/// A second loopback address standing in for "some other host".
const DECOY_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

#[tokio::test]
async fn path_host_header_and_redirects_do_not_move_the_probe() {
    let decoy = HttpServer::start(DECOY_IP, Reply::status(200)).await;
    let pod = HttpServer::start(
        LOCALHOST,
        Reply::Status {
            code: 301,
            headers: vec![("Location", format!("http://{}/", decoy.addr))],
            body: vec![],
        },
    )
    .await;
    let check = NetworkCheck::HttpGet(HttpGetCheck {
        // Every way a user could try to name another host.
        path: Some(format!("//{}/", decoy.addr)),
        http_headers: Some(vec![HttpHeader {
            name: "Host".into(),
            value: decoy.addr.to_string(),
        }]),
        ..HttpGetCheck::default()
    });
    let result = probe(&target(pod.addr, check)).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    assert_eq!(pod.seen.connections(), 1);
    assert_eq!(
        decoy.seen.connections(),
        0,
        "a probe reached a host that is not the pod"
    );
}

#[tokio::test]
async fn explicit_ports_stay_on_the_pod_ip() {
    let decoy = HttpServer::start(DECOY_IP, Reply::status(200)).await;
    // The pod (127.0.0.1) has nothing on the decoy's port number.
    let pod_addr = SocketAddr::new(LOCALHOST, refused_addr(LOCALHOST).await.port());
    let check = NetworkCheck::HttpGet(HttpGetCheck {
        port: Some(IntOrString::Int(i32::from(decoy.addr.port()))),
        ..HttpGetCheck::default()
    });
    let result = probe(&target(pod_addr, check)).await;
    assert_eq!(result.outcome, Outcome::Exclude, "{result:?}");
    assert_eq!(decoy.seen.connections(), 0);
}

#[tokio::test]
async fn only_the_ip_of_the_target_family_is_used() {
    let server = HttpServer::start(LOCALHOST, Reply::status(200)).await;
    let mut t = target(server.addr, http_get("/"));
    t.family = portmapper_probe::IpFamily::V6;
    let result = probe(&t).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::InvalidCheck),
        "{result:?}"
    );
    assert!(result.reason.contains("no IPv6 address"), "{result:?}");
    assert_eq!(server.seen.connections(), 0);

    std::sync::Arc::make_mut(&mut t.pod).ips.clear();
    t.family = portmapper_probe::IpFamily::V4;
    let result = probe(&t).await;
    assert_eq!(result.cause, Cause::InvalidCheck, "{result:?}");
    assert_eq!(server.seen.connections(), 0);
}

#[tokio::test]
async fn production_executor_refuses_loopback_pod_ips() {
    let production = NetworkExecutor::new(ExecutorConfig::default()).unwrap();
    let http = HttpServer::start(LOCALHOST, Reply::status(200)).await;
    let grpc_server = GrpcServer::start(LOCALHOST).await;
    for t in [
        target(http.addr, http_get("/")),
        target(http.addr, tcp_socket(None)),
        target(grpc_server.addr, grpc(None)),
    ] {
        let result = production.run(&mapping(), &t).await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Exclude, Cause::InvalidCheck),
            "{result:?}"
        );
        assert!(result.reason.contains("loopback"), "{result:?}");
    }
    assert_eq!(http.seen.connections(), 0);
}

/// `loopback_webhooks_need_the_loopback_allowance` with loopback spelled as an IPv4-mapped
/// IPv6 address, under a policy that admits every IP literal: the address rule alone refuses it.
#[tokio::test]
async fn mapped_loopback_webhooks_are_refused() {
    let server = HttpServer::start(LOCALHOST, Reply::json(200, r#"{"decision":"Include"}"#)).await;
    let production = NetworkExecutor::new(ExecutorConfig {
        webhook_egress: WebhookEgress::allow_all(),
        ..ExecutorConfig::default()
    })
    .unwrap();
    for host in ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[64:ff9b::7f00:1]"] {
        let url = format!("http://{host}:{}/", server.addr.port());
        let t = crate::webhook::pod_target(crate::webhook::webhook(url, None));
        let result = production.run(&mapping(), &t).await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Abstain, Cause::InvalidCheck),
            "{host}: {result:?}"
        );
        assert!(result.reason.contains("no allowed address"), "{result:?}");
    }
    assert_eq!(server.seen.connections(), 0);
}
