//! `tcpSocket` against real listeners.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use portmapper_probe::{Cause, Outcome};
use tokio::net::TcpListener;

use crate::support::*;

#[tokio::test]
async fn listening_port_includes() {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let result = probe(&target(listener.local_addr().unwrap(), tcp_socket(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Include, Cause::Healthy),
        "{result:?}"
    );
}

#[tokio::test]
async fn refused_port_excludes() {
    let addr = refused_addr(LOCALHOST).await;
    let result = probe(&target(addr, tcp_socket(None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::Refused),
        "{result:?}"
    );
}

#[tokio::test]
async fn named_port_resolves_on_the_pod() {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The Service's target port is refused; the check names the pod's "broker" port.
    let mut t = target(addr, tcp_socket(Some(IntOrString::String("broker".into()))));
    t.port.target_port = refused_addr(LOCALHOST).await.port();
    let result = probe(&t).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");

    let t = target(addr, tcp_socket(Some(IntOrString::String("admin".into()))));
    let result = probe(&t).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Exclude, Cause::InvalidCheck),
        "{result:?}"
    );
}

#[tokio::test]
async fn explicit_port_number_is_used() {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let open = listener.local_addr().unwrap();
    let mut t = target(
        open,
        tcp_socket(Some(IntOrString::Int(i32::from(open.port())))),
    );
    t.port.target_port = refused_addr(LOCALHOST).await.port();
    assert_eq!(probe(&t).await.outcome, Outcome::Include);
}

#[tokio::test]
async fn listener_that_never_accepts_still_includes_tcp_socket() {
    // The kernel completes the handshake into the backlog: tcpSocket only asks "does the port
    // accept connections", as kubelet's tcpSocket probe does.
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let result = probe(&target(listener.local_addr().unwrap(), tcp_socket(None))).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
}
