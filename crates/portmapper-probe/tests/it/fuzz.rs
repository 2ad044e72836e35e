//! Fuzz targets (stable toolchain, proptest) for what pods and webhooks answer: arbitrary bytes
//! and well-formed-but-wrong HTTP answers on a real loopback socket, to `httpGet`, `grpc` and
//! `webhook` probes. Property: a probe never panics and always ends in a classified result
//! with a bounded reason; a pod's garbage never includes it, a webhook's garbage always
//! abstains, and a well-formed answer is classified exactly as documented.
//! Budget: `PORTMAPPER_FUZZ_CASES` (see `tests/support/fuzz_budget.rs`).

use portmapper_probe::limits::MAX_REASON_BYTES;
use portmapper_probe::{Cause, MembershipDecision, Outcome, ProbeResult};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::grpc::grpc;
use crate::support::*;
use crate::webhook::{pod_target, webhook};

#[path = "../../../../tests/support/fuzz_budget.rs"]
mod fuzz_budget;

/// An HTTP/1 answer: either raw bytes, or a status line, headers and body of which any part
/// may be wrong.
#[derive(Clone, Debug)]
enum Answer {
    Raw(Vec<u8>),
    Shaped {
        version: &'static str,
        code: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        /// The Content-Length header is right (else it is whatever `headers` say).
        framed: bool,
    },
}

impl Answer {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Answer::Raw(b) => b.clone(),
            Answer::Shaped {
                version,
                code,
                headers,
                body,
                framed,
            } => {
                let mut out = format!("{version} {code} Whatever\r\n");
                if *framed {
                    out.push_str(&format!("Content-Length: {}\r\n", body.len()));
                }
                for (n, v) in headers {
                    out.push_str(&format!("{n}: {v}\r\n"));
                }
                out.push_str("Connection: close\r\n\r\n");
                let mut bytes = out.into_bytes();
                bytes.extend_from_slice(body);
                bytes
            }
        }
    }

    /// The status a conforming client must see, when the answer is well formed.
    fn well_formed_status(&self) -> Option<u16> {
        match self {
            Answer::Shaped {
                version: "HTTP/1.1",
                code,
                headers,
                framed: true,
                ..
            } if headers.is_empty() && (200..600).contains(code) => Some(*code),
            _ => None,
        }
    }
}

fn header() -> impl Strategy<Value = (String, String)> {
    (
        prop_oneof![
            Just("Content-Length".to_owned()),
            Just("Transfer-Encoding".to_owned()),
            Just("Content-Type".to_owned()),
            Just("X-Junk".to_owned()),
            "[ -~]{0,12}",
        ],
        prop_oneof![
            Just("-1".to_owned()),
            Just("chunked".to_owned()),
            Just("99999999999999999999".to_owned()),
            Just("0".to_owned()),
            "[ -~]{0,24}",
            "\\PC{0,8}",
        ],
    )
}

fn answer(body: BoxedStrategy<Vec<u8>>) -> impl Strategy<Value = Answer> {
    prop_oneof![
        2 => proptest::collection::vec(any::<u8>(), 0..512).prop_map(Answer::Raw),
        1 => "[ -~\r\n]{0,200}".prop_map(|s| Answer::Raw(s.into_bytes())),
        4 => (
            prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0"), Just("HTTP/2"), Just("http/1.1"), Just("HTTP/9.9")],
            prop_oneof![200u16..400, 400u16..600, 100u16..200, any::<u16>()],
            prop_oneof![3 => Just(Vec::new()), 1 => proptest::collection::vec(header(), 0..4)],
            body,
            prop_oneof![3 => Just(true), 1 => Just(false)],
        )
            .prop_map(|(version, code, headers, body, framed)| Answer::Shaped { version, code, headers, body, framed }),
    ]
}

fn any_body() -> BoxedStrategy<Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..256).boxed()
}

/// WebhookDecision documents a decider might send: right, nearly right, or not at all.
fn decision_body() -> BoxedStrategy<Vec<u8>> {
    let decision = prop_oneof![
        Just(json!("Include")),
        Just(json!("Exclude")),
        Just(json!("Abstain")),
        Just(json!("include")),
        Just(json!("")),
        Just(json!(1)),
        Just(Value::Null),
        Just(json!(["Include"])),
        "\\PC{0,10}".prop_map(Value::from),
    ];
    let reason = prop_oneof![
        Just(None),
        "\\PC{0,40}".prop_map(|s| Some(Value::from(s))),
        (1usize..3000).prop_map(|n| Some(Value::from("é".repeat(n)))),
        Just(Some(json!(42))),
        Just(Some(Value::Null)),
    ];
    prop_oneof![
        4 => (proptest::option::of(decision), reason, proptest::option::of("\\PC{0,8}"))
            .prop_map(|(d, r, extra)| {
                let mut doc = serde_json::Map::new();
                if let Some(d) = d { doc.insert("decision".into(), d); }
                if let Some(r) = r { doc.insert("reason".into(), r); }
                if let Some(e) = extra { doc.insert(e, json!({"nested": [1, 2]})); }
                serde_json::to_vec(&Value::Object(doc)).unwrap_or_default()
            }),
        1 => any_body(),
        1 => "\\PC{0,64}".prop_map(String::into_bytes),
    ]
    .boxed()
}

fn run(
    answer: &Answer,
    check: impl FnOnce(std::net::SocketAddr) -> portmapper_probe::Target,
) -> ProbeResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = HttpServer::start(LOCALHOST, Reply::Raw(answer.bytes())).await;
        probe(&check(server.addr)).await
    })
}

fn bounded(result: &ProbeResult) -> Result<(), TestCaseError> {
    prop_assert!(!result.reason.is_empty(), "{:?}", result);
    prop_assert!(
        result.reason.len() <= MAX_REASON_BYTES,
        "{} bytes",
        result.reason.len()
    );
    Ok(())
}

proptest! {
    #![proptest_config(fuzz_budget::config())]

    /// `httpGet` against any answer: 200–399 includes, another well-formed status excludes
    /// (`status`), garbage excludes and never includes by accident.
    #[test]
    fn fuzz_http_get_answers(answer in answer(any_body())) {
        let result = run(&answer, |addr| target(addr, http_get("/")));
        bounded(&result)?;
        match answer.well_formed_status() {
            Some(code) if (200..400).contains(&code) => prop_assert_eq!(result.outcome, Outcome::Include, "{:?}", result),
            Some(_) => prop_assert_eq!((result.outcome, result.cause), (Outcome::Exclude, Cause::Status), "{:?}", result),
            None => prop_assert!(result.outcome != Outcome::Abstain, "{:?}", result),
        }
        if let Answer::Raw(_) = answer {
            prop_assert_eq!(result.outcome, Outcome::Exclude, "{:?}", result);
        }
    }

    /// `grpc` against HTTP/1 answers or bytes: never a gRPC answer, so always excluded.
    #[test]
    fn fuzz_grpc_answers(answer in answer(any_body())) {
        let result = run(&answer, |addr| target(addr, grpc(None)));
        bounded(&result)?;
        prop_assert_eq!(result.outcome, Outcome::Exclude, "{:?}", result);
    }

    /// `webhook` against any answer: only a 2xx decision document decides, as it says; every
    /// other answer abstains (a decider's failure must not move memberships).
    #[test]
    fn fuzz_webhook_answers(answer in answer(decision_body())) {
        let result = run(&answer, |addr| pod_target(webhook(format!("http://{addr}/decide"), None)));
        bounded(&result)?;
        let decided = match (&answer, answer.well_formed_status()) {
            (Answer::Shaped { body, .. }, Some(code)) if (200..300).contains(&code) => {
                serde_json::from_slice::<MembershipDecision>(body).ok()
            }
            _ => None,
        };
        match decided {
            Some(d) => {
                let want = match d.decision {
                    portmapper_probe::WebhookDecision::Include => Outcome::Include,
                    portmapper_probe::WebhookDecision::Exclude => Outcome::Exclude,
                    portmapper_probe::WebhookDecision::Abstain => Outcome::Abstain,
                };
                prop_assert_eq!((result.outcome, result.cause), (want, Cause::WebhookDecision), "{:?}", result);
            }
            None if answer.well_formed_status().is_some() || matches!(answer, Answer::Raw(_)) => {
                prop_assert_eq!(result.outcome, Outcome::Abstain, "{:?}", result);
                prop_assert!(matches!(result.cause, Cause::WebhookMalformed | Cause::WebhookUnavailable), "{:?}", result);
            }
            // A mis-framed answer may still carry a decision a lenient reader finds; it must
            // at least be classified.
            None => prop_assert!(
                result.outcome == Outcome::Abstain || result.cause == Cause::WebhookDecision,
                "{:?}", result
            ),
        }
    }
}
