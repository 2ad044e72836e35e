//! `httpGet`: GET the path on the pod IP; 200–399 includes, as kubelet does.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{ACCEPT, CONNECTION, HOST, HeaderName, HeaderValue, USER_AGENT};
use http::uri::PathAndQuery;
use http::{HeaderMap, Method, Request};
use http_body_util::Empty;
use portmapper_api::check::{HttpGetCheck, Scheme};
use rustls::pki_types::ServerName;

use super::NetworkExecutor;
use super::conn::{self, connect, excerpt};
use crate::error::ProbeError;
use crate::limits::{MAX_HEADER_BYTES, MAX_HEADERS, MAX_HTTP_BODY_BYTES};
use crate::outcome::{Cause, ProbeResult};
use crate::target::Target;

pub(super) async fn probe(
    exec: &NetworkExecutor,
    target: &Target,
    check: &HttpGetCheck,
) -> Result<ProbeResult, ProbeError> {
    let addr = target.pod_addr(exec.config.allow_loopback)?.socket_addr();
    let request = request(addr, check, &exec.config.user_agent)?;
    let stream = connect(addr).await?;
    let answer = match check.scheme.unwrap_or_default() {
        Scheme::Http => conn::http1(stream, addr, request, MAX_HTTP_BODY_BYTES).await?,
        Scheme::Https => {
            let name = ServerName::IpAddress(addr.ip().into());
            let tls = conn::tls(stream, exec.unverified_tls.clone(), name, addr).await?;
            conn::http1(tls, addr, request, MAX_HTTP_BODY_BYTES).await?
        }
    };
    let code = answer.status.as_u16();
    let path = check.path.as_deref().unwrap_or("/");
    Ok(if (200..400).contains(&code) {
        // 3xx counts as success and is not followed: following could leave the pod.
        ProbeResult::include(Cause::Healthy, format!("GET {path} answered HTTP {code}"))
    } else {
        let body = excerpt(&answer.body);
        ProbeResult::exclude(
            Cause::Status,
            if body.is_empty() {
                format!("GET {path} answered HTTP {code}")
            } else {
                format!("GET {path} answered HTTP {code}: {body}")
            },
        )
    })
}

/// Builds the GET. The request target is origin-form (a path), never a URL, and the socket is
/// already connected to the pod, so nothing in the check can change the destination.
fn request(
    addr: SocketAddr,
    check: &HttpGetCheck,
    user_agent: &str,
) -> Result<Request<Empty<Bytes>>, ProbeError> {
    let path = check.path.as_deref().unwrap_or("/");
    if !path.starts_with('/') {
        return Err(ProbeError::InvalidCheck(format!(
            "httpGet path {path:?} must start with /"
        )));
    }
    let path: PathAndQuery = path
        .parse()
        .map_err(|e| ProbeError::InvalidCheck(format!("httpGet path {path:?}: {e}")))?;

    let headers = check.http_headers.as_deref().unwrap_or_default();
    if headers.len() > MAX_HEADERS {
        return Err(ProbeError::InvalidCheck(format!(
            "httpGet has {} headers, at most {MAX_HEADERS} allowed",
            headers.len()
        )));
    }
    let total: usize = headers.iter().map(|h| h.name.len() + h.value.len()).sum();
    if total > MAX_HEADER_BYTES {
        return Err(ProbeError::InvalidCheck(format!(
            "httpGet headers total {total} bytes, at most {MAX_HEADER_BYTES} allowed"
        )));
    }
    let mut map = HeaderMap::new();
    for header in headers {
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|e| {
            ProbeError::InvalidCheck(format!("httpGet header name {:?}: {e}", header.name))
        })?;
        let value = HeaderValue::from_str(&header.value).map_err(|e| {
            ProbeError::InvalidCheck(format!("httpGet header {:?} value: {e}", header.name))
        })?;
        map.append(name, value);
    }
    // Like kubelet, user headers (including Host) replace these defaults.
    let defaults = [
        (HOST, host_value(addr)?),
        (USER_AGENT, header_value(user_agent)?),
        (ACCEPT, HeaderValue::from_static("*/*")),
    ];
    for (name, value) in defaults {
        if !map.contains_key(&name) {
            map.insert(name, value);
        }
    }
    // One request per connection: the probe closes it as soon as it has its answer.
    map.insert(CONNECTION, HeaderValue::from_static("close"));

    let mut request = Request::builder()
        .method(Method::GET)
        .uri(path)
        .body(Empty::new())
        .map_err(|e| ProbeError::InvalidCheck(format!("httpGet request: {e}")))?;
    *request.headers_mut() = map;
    Ok(request)
}

fn host_value(addr: SocketAddr) -> Result<HeaderValue, ProbeError> {
    header_value(&addr.to_string())
}

fn header_value(value: &str) -> Result<HeaderValue, ProbeError> {
    HeaderValue::from_str(value)
        .map_err(|e| ProbeError::InvalidCheck(format!("header value {value:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use portmapper_api::check::HttpHeader;

    use super::*;

    fn check(path: &str, headers: Vec<(&str, &str)>) -> HttpGetCheck {
        HttpGetCheck {
            path: Some(path.into()),
            http_headers: Some(
                headers
                    .into_iter()
                    .map(|(n, v)| HttpHeader {
                        name: n.into(),
                        value: v.into(),
                    })
                    .collect(),
            ),
            ..HttpGetCheck::default()
        }
    }

    #[test]
    fn request_target_is_a_path_and_host_defaults_to_the_pod() {
        let addr: SocketAddr = "10.244.1.5:8080".parse().unwrap();
        let req = request(addr, &check("//evil.example/x?y=1", vec![]), "ua").unwrap();
        assert_eq!(req.uri().host(), None, "origin-form only");
        assert_eq!(req.uri().path(), "//evil.example/x");
        assert_eq!(req.headers()[HOST], "10.244.1.5:8080");
        let v6: SocketAddr = "[fd00::5]:80".parse().unwrap();
        let req = request(v6, &check("/", vec![]), "ua").unwrap();
        assert_eq!(req.headers()[HOST], "[fd00::5]:80");
    }

    #[test]
    fn user_headers_override_defaults_and_are_capped() {
        let addr: SocketAddr = "10.244.1.5:8080".parse().unwrap();
        let req = request(
            addr,
            &check(
                "/",
                vec![("Host", "app.example"), ("X-A", "1"), ("X-A", "2")],
            ),
            "ua",
        )
        .unwrap();
        assert_eq!(req.headers()[HOST], "app.example");
        assert_eq!(req.headers().get_all("x-a").iter().count(), 2);

        let many: Vec<(&str, &str)> = (0..17).map(|_| ("X-B", "v")).collect();
        assert!(matches!(
            request(addr, &check("/", many), "ua"),
            Err(ProbeError::InvalidCheck(_))
        ));
        let big = "v".repeat(MAX_HEADER_BYTES);
        assert!(matches!(
            request(addr, &check("/", vec![("X-C", &big)]), "ua"),
            Err(ProbeError::InvalidCheck(_))
        ));
        assert!(matches!(
            request(addr, &check("/", vec![("X-D", "bad\nvalue")]), "ua"),
            Err(ProbeError::InvalidCheck(_))
        ));
        assert!(matches!(
            request(addr, &check("http://other/", vec![]), "ua"),
            Err(ProbeError::InvalidCheck(_))
        ));
    }
}
