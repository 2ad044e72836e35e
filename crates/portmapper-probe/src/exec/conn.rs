//! Connections and bounded HTTP exchanges over sockets the executor opened itself.
//!
//! hyper's connection-level client is used on purpose: it sends a request over the stream it is
//! handed and nothing else, so no URL, header or redirect can move a probe to another host.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::error::ProbeError;

/// Largest HTTP/1 read buffer, which bounds the status line and headers of an answer.
const MAX_HTTP1_BUFFER: usize = 64 * 1024;
/// Largest HTTP/2 header list accepted from the pod.
const MAX_HTTP2_HEADER_LIST: u32 = 16 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An HTTP answer with at most a capped number of body bytes.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The body had more bytes than the cap; the rest was never read.
    pub truncated: bool,
    /// Trailers, when the whole body was read and the peer sent some (gRPC status).
    pub trailers: Option<HeaderMap>,
}

/// Opens a TCP connection to `addr`.
pub(crate) async fn connect(addr: SocketAddr) -> Result<TcpStream, ProbeError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| ProbeError::Connect { addr, source })?;
    // Probes are tiny request/response exchanges; Nagle would only add latency.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Runs a TLS handshake over `stream`.
pub(crate) async fn tls(
    stream: TcpStream,
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    addr: SocketAddr,
) -> Result<TlsStream<TcpStream>, ProbeError> {
    TlsConnector::from(config)
        .connect(server_name, stream)
        .await
        .map_err(|source| ProbeError::Tls { addr, source })
}

/// Sends one HTTP/1.1 request over `io` and reads at most `cap` body bytes of the answer.
pub(crate) async fn http1<IO, B>(
    io: IO,
    addr: SocketAddr,
    request: Request<B>,
    cap: usize,
) -> Result<Answer, ProbeError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let http = |source| ProbeError::Http { addr, source };
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HTTP1_BUFFER)
        .handshake(TokioIo::new(io))
        .await
        .map_err(http)?;
    let exchange = async move {
        let response = sender.send_request(request).await?;
        read_capped(response, cap).await
    };
    drive(connection, exchange).await.map_err(http)
}

/// Sends one HTTP/2 request (prior knowledge, no TLS) over `io` and reads at most `cap` body
/// bytes of the answer, then its trailers.
pub(crate) async fn http2<IO, B>(
    io: IO,
    addr: SocketAddr,
    request: Request<B>,
    cap: usize,
) -> Result<Answer, ProbeError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let http = |source| ProbeError::Http { addr, source };
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .max_header_list_size(MAX_HTTP2_HEADER_LIST)
        .handshake(TokioIo::new(io))
        .await
        .map_err(http)?;
    let exchange = async move {
        let response = sender.send_request(request).await?;
        read_capped(response, cap).await
    };
    drive(connection, exchange).await.map_err(http)
}

/// Polls the connection and the exchange together in this task, so that dropping the probe
/// (timeout, cancellation) closes the socket at once: no background task outlives a probe.
async fn drive<C, E>(connection: C, exchange: E) -> Result<Answer, hyper::Error>
where
    C: Future<Output = Result<(), hyper::Error>>,
    E: Future<Output = Result<Answer, hyper::Error>>,
{
    tokio::pin!(connection);
    tokio::pin!(exchange);
    tokio::select! {
        biased;
        answer = &mut exchange => answer,
        closed = &mut connection => match closed {
            Err(err) => Err(err),
            // A cleanly closed connection fails or finishes the pending exchange.
            Ok(()) => exchange.await,
        },
    }
}

/// Reads the status, headers and at most `cap` body bytes; trailers only when the body fit.
async fn read_capped(
    response: http::Response<Incoming>,
    cap: usize,
) -> Result<Answer, hyper::Error> {
    let (parts, mut body) = response.into_parts();
    let mut data = BytesMut::new();
    let mut truncated = false;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        match frame?.into_data() {
            Ok(chunk) => {
                let room = cap - data.len();
                if chunk.len() > room {
                    data.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                data.extend_from_slice(&chunk);
            }
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    trailers = Some(t);
                }
            }
        }
    }
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body: data.freeze(),
        truncated,
        trailers,
    })
}

/// A short, printable excerpt of a body for a status reason.
pub(crate) fn excerpt(body: &[u8]) -> String {
    const MAX_CHARS: usize = 80;
    let text = String::from_utf8_lossy(body);
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_CHARS)
        .collect();
    out = out.trim().to_string();
    if text.chars().count() > MAX_CHARS {
        out.push('…');
    }
    out
}
