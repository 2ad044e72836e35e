//! `grpc` against tonic-health's standard `grpc.health.v1.Health` server.

use std::net::{IpAddr, SocketAddr};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use portmapper_api::check::GrpcCheck;
use portmapper_probe::{Cause, NetworkCheck, Outcome};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::support::*;

pub struct GrpcServer {
    pub addr: SocketAddr,
    pub reporter: HealthReporter,
    task: JoinHandle<()>,
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GrpcServer {
    pub async fn start(ip: IpAddr) -> Self {
        let (reporter, service) = tonic_health::server::health_reporter();
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let service = TowerToHyperService::new(service.clone());
                connections.spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            reporter,
            task,
        }
    }
}

pub fn grpc(service: Option<&str>) -> NetworkCheck {
    NetworkCheck::Grpc(GrpcCheck {
        service: service.map(str::to_owned),
        ..GrpcCheck::default()
    })
}

#[tokio::test]
async fn serving_server_includes() {
    let server = GrpcServer::start(LOCALHOST).await;
    let result = probe(&target(server.addr, grpc(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Include, Cause::Healthy),
        "{result:?}"
    );
    assert!(result.reason.contains("SERVING"), "{result:?}");
}

#[tokio::test]
async fn named_service_serving_and_not_serving() {
    let server = GrpcServer::start(LOCALHOST).await;
    server
        .reporter
        .set_service_status("kafka.Broker", ServingStatus::Serving)
        .await;
    let result = probe(&target(server.addr, grpc(Some("kafka.Broker")))).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");

    server
        .reporter
        .set_service_status("kafka.Broker", ServingStatus::NotServing)
        .await;
    let result = probe(&target(server.addr, grpc(Some("kafka.Broker")))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::NotServing),
        "{result:?}"
    );
    assert!(result.reason.contains("NOT_SERVING"), "{result:?}");
}

#[tokio::test]
async fn overall_not_serving_excludes() {
    let server = GrpcServer::start(LOCALHOST).await;
    server
        .reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    let result = probe(&target(server.addr, grpc(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::NotServing),
        "{result:?}"
    );
}

#[tokio::test]
async fn unknown_service_excludes() {
    let server = GrpcServer::start(LOCALHOST).await;
    let result = probe(&target(server.addr, grpc(Some("no.Such")))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::NotServing),
        "{result:?}"
    );
    assert!(result.reason.contains("NOT_FOUND"), "{result:?}");
}

#[tokio::test]
async fn refused_excludes() {
    let addr = refused_addr(LOCALHOST).await;
    let result = probe(&target(addr, grpc(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Refused),
        "{result:?}"
    );
}

#[tokio::test]
async fn hanging_server_excludes_after_the_timeout() {
    let server = HttpServer::start(LOCALHOST, Reply::Silent).await;
    let result = probe(&target(server.addr, grpc(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Timeout),
        "{result:?}"
    );
}

#[tokio::test]
async fn http1_server_excludes_as_protocol_error() {
    let server = HttpServer::start(
        LOCALHOST,
        Reply::Raw(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
    )
    .await;
    let result = probe(&target(server.addr, grpc(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Protocol),
        "{result:?}"
    );
}
