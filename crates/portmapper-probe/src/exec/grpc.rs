//! `grpc`: the standard `grpc.health.v1.Health/Check` over plaintext HTTP/2, as kubelet does.
//!
//! The health request and response are one-field protobuf messages, so they are encoded by hand
//! over hyper's HTTP/2 client rather than pulling tonic and prost into the operator: the wire
//! format is fixed by the gRPC health protocol and tested against tonic-health's server.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderValue, TE, USER_AGENT};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::Full;
use portmapper_api::check::GrpcCheck;

use super::NetworkExecutor;
use super::conn::{self, connect};
use crate::error::ProbeError;
use crate::limits::MAX_GRPC_BODY_BYTES;
use crate::outcome::{Cause, ProbeResult};
use crate::target::Target;

const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// `grpc.health.v1.HealthCheckResponse.ServingStatus`.
const SERVING: u64 = 1;
/// gRPC status codes that get their own wording.
const GRPC_NOT_FOUND: u32 = 5;
const GRPC_UNIMPLEMENTED: u32 = 12;

pub(super) async fn probe(
    exec: &NetworkExecutor,
    target: &Target,
    check: &GrpcCheck,
) -> Result<ProbeResult, ProbeError> {
    let addr = target.pod_addr(exec.config.allow_loopback)?.socket_addr();
    let service = check.service.as_deref().unwrap_or("");
    // HTTP/2 needs :scheme and :authority; the authority is only a header, the socket below is
    // already connected to the pod.
    let uri = format!("http://{addr}{CHECK_PATH}");
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(CONTENT_TYPE, "application/grpc")
        .header(TE, "trailers")
        .header(
            USER_AGENT,
            HeaderValue::from_str(&exec.config.user_agent)
                .unwrap_or(HeaderValue::from_static("portmapper-probe")),
        )
        .body(Full::new(encode_request(service)))
        .map_err(|e| ProbeError::InvalidCheck(format!("grpc request: {e}")))?;
    let stream = connect(addr).await?;
    let answer = conn::http2(stream, addr, request, MAX_GRPC_BODY_BYTES).await?;
    let malformed = |detail: String| ProbeError::Malformed { addr, detail };

    if answer.status != StatusCode::OK {
        return Err(malformed(format!(
            "HTTP status {} is not a gRPC answer",
            answer.status
        )));
    }
    if answer.truncated {
        return Err(malformed(format!(
            "health answer exceeds {MAX_GRPC_BODY_BYTES} bytes"
        )));
    }
    // A trailers-only answer carries grpc-status in the headers.
    let status_headers = if answer.headers.contains_key("grpc-status") {
        &answer.headers
    } else {
        answer
            .trailers
            .as_ref()
            .ok_or_else(|| malformed("no grpc-status".into()))?
    };
    let code = grpc_status(status_headers).ok_or_else(|| malformed("bad grpc-status".into()))?;
    let shown = if service.is_empty() {
        "server".to_owned()
    } else {
        format!("service {service:?}")
    };
    if code != 0 {
        let message = status_headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let reason = match code {
            GRPC_NOT_FOUND => format!("gRPC health: {shown} unknown (NOT_FOUND)"),
            GRPC_UNIMPLEMENTED => "gRPC health service not implemented (UNIMPLEMENTED)".into(),
            _ => format!("gRPC health check failed: grpc-status {code} {message}"),
        };
        return Ok(ProbeResult::exclude(Cause::NotServing, reason));
    }
    let status = decode_response(&answer.body).map_err(malformed)?;
    Ok(if status == SERVING {
        ProbeResult::include(Cause::Healthy, format!("gRPC health: {shown} SERVING"))
    } else {
        ProbeResult::exclude(
            Cause::NotServing,
            format!("gRPC health: {shown} {}", status_name(status)),
        )
    })
}

fn status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        other => format!("status {other}"),
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A length-prefixed `HealthCheckRequest { string service = 1; }`.
fn encode_request(service: &str) -> Bytes {
    let mut message = BytesMut::new();
    if !service.is_empty() {
        message.put_u8(0x0a); // field 1, wire type 2 (length-delimited)
        put_varint(&mut message, service.len() as u64);
        message.put_slice(service.as_bytes());
    }
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0); // not compressed
    frame.put_u32(message.len() as u32);
    frame.put_slice(&message);
    frame.freeze()
}

fn put_varint(buf: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

/// The `status` of a length-prefixed `HealthCheckResponse { ServingStatus status = 1; }`.
/// An absent field is the proto3 default, UNKNOWN (0).
fn decode_response(body: &[u8]) -> Result<u64, String> {
    if body.len() < 5 {
        return Err(format!("gRPC message of {} bytes has no frame", body.len()));
    }
    if body[0] != 0 {
        return Err("compressed gRPC message was not asked for".into());
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let message = body
        .get(5..5 + len)
        .ok_or_else(|| format!("gRPC frame announces {len} bytes, has {}", body.len() - 5))?;
    let mut pos = 0;
    let mut status = 0;
    while pos < message.len() {
        let key = read_varint(message, &mut pos)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = read_varint(message, &mut pos)?,
            (_, 0) => {
                read_varint(message, &mut pos)?;
            }
            (_, 1) => pos += 8,
            (_, 5) => pos += 4,
            (_, 2) => {
                let len = read_varint(message, &mut pos)?;
                pos = pos.saturating_add(usize::try_from(len).map_err(|e| e.to_string())?);
            }
            (_, wire) => return Err(format!("unsupported protobuf wire type {wire}")),
        }
    }
    if pos > message.len() {
        return Err("truncated protobuf field".into());
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_encoding_matches_protobuf() {
        assert_eq!(&encode_request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &encode_request("db")[..],
            &[0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']
        );
        let long = "s".repeat(200);
        let frame = encode_request(&long);
        assert_eq!(&frame[5..8], &[0x0a, 0xc8, 0x01]);
    }

    #[test]
    fn response_decoding() {
        assert_eq!(decode_response(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(decode_response(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        assert_eq!(decode_response(&[0, 0, 0, 0, 0]), Ok(0));
        // Unknown fields are skipped.
        assert_eq!(
            decode_response(&[0, 0, 0, 0, 6, 0x12, 2, b'h', b'i', 0x08, 1]),
            Ok(1)
        );
        assert!(decode_response(&[0, 0, 0, 0, 9, 0x08]).is_err());
        assert!(decode_response(&[1, 0, 0, 0, 0]).is_err());
        assert!(decode_response(&[0, 0, 0, 0, 2, 0x08, 0x80]).is_err());
        assert!(decode_response(&[0, 0, 0, 0, 2, 0x12, 9]).is_err());
    }
    use crate::fuzz_budget;

    /// A frame around `message`, announcing `len` bytes (the true length when `None`).
    fn frame(message: &[u8], len: Option<u32>) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&len.unwrap_or(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    proptest::proptest! {
        #![proptest_config(fuzz_budget::config())]

        /// Any bytes as a health answer: decoded or refused with a message, never a panic.
        #[test]
        fn fuzz_health_response_bytes(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            if let Err(e) = decode_response(&body) {
                proptest::prop_assert!(!e.is_empty());
            }
        }

        /// Well-framed messages of arbitrary fields, with a lying length now and then; a status
        /// field written last is the one read.
        #[test]
        fn fuzz_health_response_messages(
            message in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            lie in proptest::option::of(proptest::prelude::any::<u32>()),
            status in 0u64..300,
        ) {
            let _ = decode_response(&frame(&message, lie));
            let mut tagged = message.clone();
            tagged.push(0x08);
            let mut varint = BytesMut::new();
            put_varint(&mut varint, status);
            tagged.extend_from_slice(&varint);
            if let Ok(s) = decode_response(&frame(&tagged, None)) {
                // Only when the fuzzed prefix parsed as whole fields is our field read.
                if decode_response(&frame(&message, None)).is_ok() {
                    proptest::prop_assert_eq!(s, status);
                }
            }
        }

        /// `grpc-status` header values of any text: a number or nothing.
        #[test]
        fn fuzz_grpc_status_header(value in "\\PC{0,12}") {
            let mut headers = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert("grpc-status", v);
                let parsed = grpc_status(&headers);
                proptest::prop_assert_eq!(parsed, value.trim().parse::<u32>().ok());
            }
        }
    }
}
