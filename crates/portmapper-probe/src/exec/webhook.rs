//! `webhook`: asks the user's decider whether a pod backs a port.
//!
//! The operator POSTs a [`MembershipReview`] as JSON and expects a [`MembershipDecision`]:
//!
//! ```json
//! {"apiVersion": "portmapper.dev/v1alpha1", "kind": "MembershipReview",
//!  "namespace": "shop", "portMapping": "kafka", "service": "kafka",
//!  "pod": {"name": "kafka-0", "uid": "…", "labels": {…}, "annotations": {…}},
//!  "port": {"name": "broker", "number": 9092, "targetPort": 9092, "protocol": "TCP"},
//!  "address": "10.244.1.5", "family": "IPv4"}
//! ```
//!
//! answered by `{"decision": "Include" | "Exclude" | "Abstain", "reason": "…"}` with a 2xx
//! status. Anything else abstains, so a broken decider freezes memberships instead of emptying
//! slices.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONNECTION, CONTENT_TYPE, HOST, HeaderValue, USER_AGENT};
use http::uri::{PathAndQuery, Scheme as UriScheme};
use http::{Method, Request, Uri};
use http_body_util::Full;
use portmapper_api::check::WebhookCheck;
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};

use super::NetworkExecutor;
use super::conn::{self, connect};
use crate::address;
use crate::classify;
use crate::error::ProbeError;
use crate::limits::MAX_WEBHOOK_BODY_BYTES;
use crate::outcome::{Cause, Outcome, ProbeResult};
use crate::target::{MappingKey, Target};
use portmapper_api::network_key::IpFamily;

/// `apiVersion` of [`MembershipReview`].
pub const REVIEW_API_VERSION: &str = "portmapper.dev/v1alpha1";
/// `kind` of [`MembershipReview`].
pub const REVIEW_KIND: &str = "MembershipReview";

/// The document a webhook receives: one pod, one Service port, one address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MembershipReview {
    /// Always [`REVIEW_API_VERSION`].
    pub api_version: String,
    /// Always [`REVIEW_KIND`].
    pub kind: String,
    /// Namespace of the PortMapping, Service and pod.
    pub namespace: String,
    /// Name of the PortMapping.
    pub port_mapping: String,
    /// Name of the Service.
    pub service: String,
    /// The pod.
    pub pod: ReviewPod,
    /// The Service port.
    pub port: ReviewPort,
    /// The pod IP that would be published.
    pub address: IpAddr,
    /// `IPv4` or `IPv6`: the EndpointSlice address type.
    #[serde(with = "family_text")]
    pub family: IpFamily,
}

/// [`IpFamily`] as the EndpointSlice `addressType` spelling (`IPv4`, `IPv6`).
mod family_text {
    use portmapper_api::network_key::IpFamily;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(family: &IpFamily, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(family.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpFamily, D::Error> {
        let text = String::deserialize(d)?;
        IpFamily::parse(&text)
            .ok_or_else(|| D::Error::custom(format!("unknown family {text:?}, want IPv4 or IPv6")))
    }
}

/// The pod in a [`MembershipReview`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewPod {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
}

/// The Service port in a [`MembershipReview`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewPort {
    /// Service port name.
    pub name: String,
    /// Service port number.
    pub number: i32,
    /// The pod port it maps to.
    pub target_port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// The webhook's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookDecision {
    /// The pod backs the port.
    Include,
    /// The pod does not back the port.
    Exclude,
    /// No opinion: the current membership holds.
    Abstain,
}

/// The document a webhook answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipDecision {
    /// The verdict.
    pub decision: WebhookDecision,
    /// Shown in PortMapping status. Optional.
    #[serde(default)]
    pub reason: String,
}

impl MembershipReview {
    /// The review of `target` of `mapping` at `address`.
    pub fn new(mapping: &MappingKey, target: &Target, address: IpAddr) -> Self {
        Self {
            api_version: REVIEW_API_VERSION.into(),
            kind: REVIEW_KIND.into(),
            namespace: mapping.namespace.clone(),
            port_mapping: mapping.name.clone(),
            service: target.service.clone(),
            pod: ReviewPod {
                name: target.pod.name.clone(),
                uid: target.pod.uid.clone(),
                labels: target.pod.metadata.labels(),
                annotations: target.pod.metadata.annotations(),
            },
            port: ReviewPort {
                name: target.port.name.clone(),
                number: target.port.port,
                target_port: target.port.target_port,
                protocol: target.port.protocol.clone(),
            },
            address,
            family: target.family,
        }
    }
}

pub(super) async fn probe(
    exec: &NetworkExecutor,
    mapping: &MappingKey,
    target: &Target,
    check: &WebhookCheck,
) -> ProbeResult {
    // A pod without a usable IP of the family cannot be published: that is the pod's fact.
    let address = match target.pod_ip(exec.config.allow_loopback) {
        Ok(ip) => ip,
        Err(err) => return classify::pod_failure(&err.into()),
    };
    let review = MembershipReview::new(mapping, target, address);
    match call(exec, mapping, target, check, &review).await {
        Ok(decision) => {
            let outcome = match decision.decision {
                WebhookDecision::Include => Outcome::Include,
                WebhookDecision::Exclude => Outcome::Exclude,
                WebhookDecision::Abstain => Outcome::Abstain,
            };
            let reason = if decision.reason.is_empty() {
                format!("webhook decided {:?}", decision.decision)
            } else {
                format!("webhook: {}", decision.reason)
            };
            ProbeResult::new(outcome, Cause::WebhookDecision, reason)
        }
        Err(err) => {
            // Status gets a short, generic reason; the whole story is for the administrator.
            tracing::debug!(portmapping = %mapping, pod = %target.pod.name, url = %check.url, error = %err, "webhook call failed");
            classify::webhook_failure(&err)
        }
    }
}

/// Where and how to reach the webhook.
struct Endpoint {
    https: bool,
    host: String,
    port: u16,
    authority: String,
    path: PathAndQuery,
}

fn endpoint(url: &str) -> Result<Endpoint, ProbeError> {
    let invalid = |why: String| ProbeError::InvalidCheck(format!("webhook url {url:?}: {why}"));
    let uri: Uri = url.parse().map_err(|e| invalid(format!("{e}")))?;
    let https = match uri.scheme() {
        Some(s) if *s == UriScheme::HTTPS => true,
        Some(s) if *s == UriScheme::HTTP => false,
        _ => return Err(invalid("scheme must be http or https".into())),
    };
    let authority = uri
        .authority()
        .ok_or_else(|| invalid("no host".into()))?
        .clone();
    if authority.as_str().contains('@') {
        return Err(invalid("user info is not allowed".into()));
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    Ok(Endpoint {
        https,
        host,
        port,
        authority: authority.as_str().to_owned(),
        path,
    })
}

/// Checks the host against the egress policy, resolves it, and picks the first address the
/// operator may connect to. Nothing is looked up or dialled for a host the policy refuses.
async fn resolve(
    exec: &NetworkExecutor,
    namespace: &str,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<SocketAddr, ProbeError> {
    if let Some(why) = exec
        .config
        .webhook_egress
        .refusal(&endpoint.host, namespace)
    {
        return Err(ProbeError::EgressRefused(why));
    }
    let addrs: Vec<SocketAddr> = match endpoint.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, endpoint.port)],
        // Half the probe's time at most, so a slow resolver is named as such in status.
        Err(_) => {
            let budget = (timeout / 2).max(Duration::from_millis(500));
            exec.resolver
                .resolve(namespace, &endpoint.host, endpoint.port, budget)
                .await?
        }
    };
    let mut refused = Vec::new();
    for addr in &addrs {
        match address::refusal(addr.ip(), exec.config.allow_loopback) {
            // The canonical form is dialled: one spelling per address.
            None => return Ok(SocketAddr::new(addr.ip().to_canonical(), addr.port())),
            Some(why) if !refused.contains(&why) => refused.push(why),
            Some(_) => {}
        }
    }
    Err(ProbeError::InvalidCheck(format!(
        "webhook host {} resolves to no allowed address (refused: {})",
        endpoint.host,
        if refused.is_empty() {
            "no address".to_owned()
        } else {
            refused.join(", ")
        }
    )))
}

async fn call(
    exec: &NetworkExecutor,
    mapping: &MappingKey,
    target: &Target,
    check: &WebhookCheck,
    review: &MembershipReview,
) -> Result<MembershipDecision, ProbeError> {
    let endpoint = endpoint(&check.url)?;
    let body = serde_json::to_vec(review)
        .map_err(|e| ProbeError::InvalidCheck(format!("encoding review: {e}")))?;
    let request = Request::builder()
        .method(Method::POST)
        .uri(endpoint.path.clone())
        .header(HOST, &endpoint.authority)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json")
        .header(CONNECTION, "close")
        .header(
            USER_AGENT,
            HeaderValue::from_str(&exec.config.user_agent)
                .unwrap_or(HeaderValue::from_static("portmapper-probe")),
        )
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ProbeError::InvalidCheck(format!("webhook request: {e}")))?;
    let addr = resolve(exec, &mapping.namespace, &endpoint, target.timeout()).await?;
    let stream = connect(addr).await?;
    let answer = if endpoint.https {
        let config = exec
            .webhook_tls
            .config(&mapping.namespace, check.ca_bundle.as_deref())?;
        let name = ServerName::try_from(endpoint.host.clone()).map_err(|e| {
            ProbeError::InvalidCheck(format!("webhook host {:?}: {e}", endpoint.host))
        })?;
        let tls = conn::tls(stream, config, name, addr).await?;
        conn::http1(tls, addr, request, MAX_WEBHOOK_BODY_BYTES).await?
    } else {
        conn::http1(stream, addr, request, MAX_WEBHOOK_BODY_BYTES).await?
    };
    if !answer.status.is_success() {
        // Redirects included: they are not followed, and a decider must answer itself.
        return Err(ProbeError::HttpStatus {
            addr,
            status: answer.status,
        });
    }
    if answer.truncated {
        return Err(ProbeError::Malformed {
            addr,
            detail: format!("answer exceeds {MAX_WEBHOOK_BODY_BYTES} bytes"),
        });
    }
    serde_json::from_slice(&answer.body).map_err(|e| {
        // The body is never echoed: a 2xx answer of any internal service would otherwise be
        // readable in the tenant's status. Only its kind is said.
        tracing::debug!(%addr, error = %e, body = %conn::excerpt(&answer.body), "webhook answer is not a decision document");
        let detail = if e.is_data() {
            r#"not a decision document (want {"decision": "Include" | "Exclude" | "Abstain"})"#
        } else {
            "not a decision document (not JSON)"
        };
        ProbeError::Malformed {
            addr,
            detail: detail.into(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_strictly() {
        let e = endpoint("https://decider.ns.svc:8443/decide?x=1").unwrap();
        assert!(e.https);
        assert_eq!((e.host.as_str(), e.port), ("decider.ns.svc", 8443));
        assert_eq!(e.path.as_str(), "/decide?x=1");
        let e = endpoint("http://[fd00::1]/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("fd00::1", 80));
        assert!(endpoint("ftp://x/").is_err());
        assert!(endpoint("http://user:pw@x/").is_err());
    }

    #[test]
    fn decisions_parse_with_optional_reason() {
        let d: MembershipDecision = serde_json::from_str(r#"{"decision":"Exclude"}"#).unwrap();
        assert_eq!(d.decision, WebhookDecision::Exclude);
        assert!(serde_json::from_str::<MembershipDecision>(r#"{"decision":"maybe"}"#).is_err());
    }
    use crate::fuzz_budget;

    fn url() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            "\\PC{0,40}",
            (
                prop_oneof![
                    Just("http"),
                    Just("https"),
                    Just("HTTP"),
                    Just("ftp"),
                    Just("")
                ],
                prop_oneof![Just("://"), Just(":/"), Just("//")],
                "[a-z0-9.:@\\[\\]%-]{0,30}",
                "[ -~]{0,20}",
            )
                .prop_map(|(s, sep, authority, rest)| format!("{s}{sep}{authority}{rest}")),
        ]
    }

    proptest::proptest! {
        #![proptest_config(fuzz_budget::config())]

        /// Webhook URLs from the spec: parsed into http(s) endpoints without user info, or
        /// refused as an invalid check naming the URL.
        #[test]
        fn fuzz_webhook_url(url in url()) {
            match endpoint(&url) {
                Ok(e) => {
                    let lower = url.to_ascii_lowercase();
                    proptest::prop_assert!(lower.starts_with("http://") || lower.starts_with("https://"), "{url}");
                    proptest::prop_assert!(!e.authority.contains('@'));
                    // `http://h?q` keeps `?q` as its path-and-query; its path is still `/`.
                    proptest::prop_assert!(e.path.path().starts_with('/') || e.path.path() == "*", "{:?}", e.path);
                }
                Err(ProbeError::InvalidCheck(m)) => proptest::prop_assert!(m.starts_with("webhook url "), "{m}"),
                Err(other) => proptest::prop_assert!(false, "{other:?}"),
            }
        }

        /// Any bytes as a decision document: a decision or a serde error, and the excerpt shown
        /// in status is short and printable.
        #[test]
        fn fuzz_decision_document(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = serde_json::from_slice::<MembershipDecision>(&body);
            let shown = conn::excerpt(&body);
            proptest::prop_assert!(shown.chars().count() <= 81);
            proptest::prop_assert!(!shown.chars().any(char::is_control));
        }
    }
}
