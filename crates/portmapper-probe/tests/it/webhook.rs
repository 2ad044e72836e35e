//! `webhook` against a real HTTP(S) decider.

use portmapper_api::check::WebhookCheck;
use portmapper_probe::{
    Cause, ExecutorConfig, MembershipReview, NetworkCheck, NetworkExecutor, Outcome, Target,
    WebhookEgress,
};

use crate::support::*;

pub fn webhook(url: String, ca_bundle: Option<String>) -> NetworkCheck {
    NetworkCheck::Webhook(WebhookCheck {
        url,
        timeout_seconds: None,
        ca_bundle,
    })
}

/// A target for pod 10.244.1.5 (never contacted: webhooks only receive the address).
pub fn pod_target(check: NetworkCheck) -> Target {
    target("10.244.1.5:9092".parse().unwrap(), check)
}

#[tokio::test]
async fn each_decision_is_applied_with_its_reason() {
    for (decision, outcome) in [
        ("Include", Outcome::Include),
        ("Exclude", Outcome::Exclude),
        ("Abstain", Outcome::Abstain),
    ] {
        let body = format!(r#"{{"decision":"{decision}","reason":"broker says {decision}"}}"#);
        let server = HttpServer::start(LOCALHOST, Reply::json(200, &body)).await;
        let url = format!("http://{}/decide", server.addr);
        let result = probe(&pod_target(webhook(url, None))).await;
        assert_eq!(
            (result.outcome, result.cause),
            (outcome, Cause::WebhookDecision),
            "{result:?}"
        );
        assert_eq!(result.reason, format!("webhook: broker says {decision}"));
    }
}

#[tokio::test]
async fn the_review_document_describes_pod_port_and_address() {
    let server = HttpServer::start(LOCALHOST, Reply::json(200, r#"{"decision":"Include"}"#)).await;
    let url = format!("http://{}/decide?x=1", server.addr);
    let result = probe(&pod_target(webhook(url, None))).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    let requests = server.seen.requests();
    let (head, body) = &requests[0];
    assert!(head.starts_with("POST /decide?x=1 HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let json: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "apiVersion": "portmapper.dev/v1alpha1",
            "kind": "MembershipReview",
            "namespace": "shop",
            "portMapping": "kafka",
            "service": "kafka",
            "pod": {
                "name": "kafka-0",
                "uid": "uid-0",
                "labels": {"app": "kafka"},
                "annotations": {"example.com/ports": "broker"}
            },
            "port": {"name": "broker", "number": 9092, "targetPort": 9092, "protocol": "TCP"},
            "address": "10.244.1.5",
            "family": "IPv4"
        })
    );
    // The document round-trips through the public type webhook authors can use.
    let review: MembershipReview = serde_json::from_value(json).unwrap();
    assert_eq!(review.pod.name, "kafka-0");
}

#[tokio::test]
async fn garbage_answers_abstain_as_malformed() {
    for body in [
        "not json",
        r#"{"decision":"Maybe"}"#,
        r#"{"reason":"no decision"}"#,
    ] {
        let server = HttpServer::start(LOCALHOST, Reply::json(200, body)).await;
        let result = probe(&pod_target(webhook(
            format!("http://{}/", server.addr),
            None,
        )))
        .await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Abstain, Cause::WebhookMalformed),
            "{body}: {result:?}"
        );
    }
}

#[tokio::test]
async fn non_success_status_and_redirects_abstain() {
    for code in [302, 404, 500] {
        let server =
            HttpServer::start(LOCALHOST, Reply::json(code, r#"{"decision":"Exclude"}"#)).await;
        let result = probe(&pod_target(webhook(
            format!("http://{}/", server.addr),
            None,
        )))
        .await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Abstain, Cause::WebhookUnavailable),
            "{code}: {result:?}"
        );
    }
}

#[tokio::test]
async fn timing_out_or_down_webhook_abstains() {
    let hanging = HttpServer::start(LOCALHOST, Reply::Hang).await;
    let result = probe(&pod_target(webhook(
        format!("http://{}/", hanging.addr),
        None,
    )))
    .await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::WebhookUnavailable),
        "{result:?}"
    );
    assert!(result.reason.contains("timed out"), "{result:?}");

    let down = refused_addr(LOCALHOST).await;
    let result = probe(&pod_target(webhook(format!("http://{down}/"), None))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::WebhookUnavailable),
        "{result:?}"
    );
}

#[tokio::test]
async fn https_webhook_is_verified_against_the_ca_bundle() {
    let (acceptor, cert_pem) = self_signed(&["localhost"]);
    let server = HttpServer::start_tls(
        LOCALHOST,
        Reply::json(200, r#"{"decision":"Include"}"#),
        acceptor,
    )
    .await;
    let url = format!("https://localhost:{}/decide", server.addr.port());
    let result = probe(&pod_target(webhook(url.clone(), Some(cert_pem)))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Include, Cause::WebhookDecision),
        "{result:?}"
    );

    // Another CA's bundle does not verify it: abstain, never include.
    let (_, other_pem) = self_signed(&["localhost"]);
    let result = probe(&pod_target(webhook(url.clone(), Some(other_pem)))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::WebhookUnavailable),
        "{result:?}"
    );

    // Without a bundle the system roots apply, which do not know this certificate.
    let result = probe(&pod_target(webhook(url.clone(), None))).await;
    assert_eq!(result.outcome, Outcome::Abstain, "{result:?}");

    let result = probe(&pod_target(webhook(url, Some("not pem".into())))).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::InvalidCheck),
        "{result:?}"
    );
}

#[tokio::test]
async fn oversized_answer_abstains() {
    let body = format!(
        r#"{{"decision":"Include","reason":"{}"}}"#,
        "x".repeat(64 * 1024)
    );
    let server = HttpServer::start(LOCALHOST, Reply::json(200, &body)).await;
    let result = probe(&pod_target(webhook(
        format!("http://{}/", server.addr),
        None,
    )))
    .await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::WebhookMalformed),
        "{result:?}"
    );
}

#[tokio::test]
async fn loopback_webhooks_need_the_loopback_allowance() {
    let server = HttpServer::start(LOCALHOST, Reply::json(200, r#"{"decision":"Include"}"#)).await;
    let production = portmapper_probe::NetworkExecutor::new(Default::default()).unwrap();
    let t = pod_target(webhook(format!("http://{}/", server.addr), None));
    let result = production.run(&mapping(), &t).await;
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::InvalidCheck),
        "{result:?}"
    );
    assert_eq!(server.seen.connections(), 0);
}

/// A URL with a query but no path (`http://host?x=1`, raised by `fuzz_webhook_url`): its
/// path-and-query is `?x=1`, and the request still targets `/?x=1`.
#[tokio::test]
async fn a_url_with_a_query_and_no_path_posts_to_the_root() {
    let server = HttpServer::start(LOCALHOST, Reply::json(200, r#"{"decision":"Include"}"#)).await;
    let url = format!("http://{}?x=1", server.addr);
    let result = probe(&pod_target(webhook(url, None))).await;
    assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    let requests = server.seen.requests();
    assert!(
        requests[0].0.starts_with("POST /?x=1 HTTP/1.1\r\n"),
        "{}",
        requests[0].0
    );
}

/// An executor with production's policy (or `egress`) that still lets loopback stand in for
/// cluster addresses, so only the policy can refuse the test's servers.
fn policed(egress: WebhookEgress) -> NetworkExecutor {
    NetworkExecutor::new(ExecutorConfig {
        allow_loopback: true,
        webhook_egress: egress,
        ..ExecutorConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn webhooks_outside_the_egress_policy_are_refused_without_a_connection() {
    let server = HttpServer::start(LOCALHOST, Reply::json(200, r#"{"decision":"Include"}"#)).await;
    let port = server.addr.port();
    // Production's default: Services of the PortMapping's namespace (`shop`) only.
    let default = policed(WebhookEgress::default());
    for (url, named) in [
        (
            format!("http://localhost:{port}/"),
            "webhook host localhost",
        ),
        (
            format!("http://127.0.0.1:{port}/"),
            "webhook address 127.0.0.1",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "webhook address 127.0.0.1",
        ),
    ] {
        let result = default
            .run(&mapping(), &pod_target(webhook(url, None)))
            .await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Abstain, Cause::InvalidCheck),
            "{result:?}"
        );
        assert!(
            result.reason.starts_with(&format!("webhook: {named}"))
                && result
                    .reason
                    .contains("outside the operator's webhook egress policy"),
            "{result:?}"
        );
    }
    assert_eq!(server.seen.connections(), 0);

    // The administrator's allowlist admits exactly what it names.
    let allowed = policed(WebhookEgress::new(["localhost"], ["127.0.0.0/8"]).unwrap());
    for url in [
        format!("http://localhost:{port}/"),
        format!("http://127.0.0.1:{port}/"),
    ] {
        let result = allowed
            .run(&mapping(), &pod_target(webhook(url, None)))
            .await;
        assert_eq!(result.outcome, Outcome::Include, "{result:?}");
    }
    assert_eq!(server.seen.connections(), 2);
}

#[tokio::test]
async fn webhook_reasons_have_control_characters_escaped() {
    let body =
        r#"{"decision":"Exclude","reason":"\u001b]52;c;aGk=\u0007\u001b[2J\r\nERROR forged line"}"#;
    let server = HttpServer::start(LOCALHOST, Reply::json(200, body)).await;
    let result = probe(&pod_target(webhook(
        format!("http://{}/", server.addr),
        None,
    )))
    .await;
    assert_eq!(result.outcome, Outcome::Exclude, "{result:?}");
    assert_eq!(
        result.reason,
        r"webhook: \u{1b}]52;c;aGk=\u{7}\u{1b}[2J\u{d}\u{a}ERROR forged line"
    );
    assert!(!result.reason.chars().any(char::is_control));
}

#[tokio::test]
async fn answers_that_are_not_decisions_are_not_echoed() {
    for (body, kind) in [
        ("SECRET=hunter2", "not JSON"),
        (r#"{"token":"hunter2"}"#, "want"),
        (r#"{"decision":"hunter2"}"#, "want"),
    ] {
        let server = HttpServer::start(LOCALHOST, Reply::json(200, body)).await;
        let result = probe(&pod_target(webhook(
            format!("http://{}/internal/token", server.addr),
            None,
        )))
        .await;
        assert_eq!(
            (result.outcome, result.cause),
            (Outcome::Abstain, Cause::WebhookMalformed),
            "{result:?}"
        );
        assert!(
            result
                .reason
                .starts_with("webhook: malformed answer: not a decision document"),
            "{result:?}"
        );
        assert!(result.reason.contains(kind), "{result:?}");
        assert!(!result.reason.contains("hunter2"), "{result:?}");
    }
}

/// Status says what kind of failure, never where: no address, port or OS error text that would
/// map the operator's network for whoever reads it.
#[tokio::test]
async fn failure_reasons_name_no_address() {
    let down = refused_addr(LOCALHOST).await;
    let status = HttpServer::start(LOCALHOST, Reply::json(503, "{}")).await;
    for (addr, reason) in [
        (down, "webhook: connection failed"),
        (status.addr, "webhook: answered HTTP 503"),
    ] {
        let result = probe(&pod_target(webhook(format!("http://{addr}/"), None))).await;
        assert_eq!(
            (result.outcome, result.cause, result.reason.as_str()),
            (Outcome::Abstain, Cause::WebhookUnavailable, reason),
            "{result:?}"
        );
    }
}
