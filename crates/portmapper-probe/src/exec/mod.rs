//! Probe executors: one probe of one target, bounded by the target's timeout.

mod conn;
mod grpc;
mod http_get;
pub mod resolve;
mod tcp;
mod tls;
pub mod webhook;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rustls::ClientConfig;

pub use tls::TlsConfigError;

use crate::classify;
use crate::egress::WebhookEgress;
use crate::error::ProbeError;
use crate::outcome::ProbeResult;
use crate::target::{CheckType, MappingKey, NetworkCheck, Target};

/// The future of one probe.
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = ProbeResult> + Send + 'a>>;

/// Runs one probe of one target. The prober calls it once per period per target, with a
/// concurrency permit held. Implementations must finish within [`Target::timeout`] (the prober
/// cancels them shortly after, as a guard) and never panic.
pub trait ProbeExecutor: Send + Sync + 'static {
    /// Probes `target` of the PortMapping `mapping`.
    fn probe<'a>(&'a self, mapping: &'a MappingKey, target: &'a Target) -> ProbeFuture<'a>;
}

/// Settings of the [`NetworkExecutor`].
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// Allow loopback pod IPs and webhook addresses. Off in production: no pod has a loopback
    /// IP, so one would only point probes at the operator's own host. Tests turn it on.
    pub allow_loopback: bool,
    /// `User-Agent` of HTTP probes and webhook calls.
    pub user_agent: String,
    /// Which hosts webhook URLs may name.
    pub webhook_egress: WebhookEgress,
    /// Webhook host name lookups in flight at most (each blocks one thread).
    pub dns_lookups: usize,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            allow_loopback: false,
            user_agent: concat!("portmapper-probe/", env!("CARGO_PKG_VERSION")).to_owned(),
            webhook_egress: WebhookEgress::default(),
            dns_lookups: resolve::DEFAULT_DNS_LOOKUPS,
        }
    }
}

/// The real executor: talks to pods (and webhooks) over the network.
pub struct NetworkExecutor {
    config: ExecutorConfig,
    unverified_tls: Arc<ClientConfig>,
    webhook_tls: tls::WebhookTls,
    resolver: resolve::Resolver,
}

impl NetworkExecutor {
    /// An executor with its TLS configurations built and the system's CA certificates read
    /// (once, here: never inside a probe).
    pub fn new(config: ExecutorConfig) -> Result<Self, TlsConfigError> {
        Ok(Self {
            unverified_tls: tls::unverified()?,
            webhook_tls: tls::WebhookTls::new()?,
            resolver: resolve::Resolver::system(config.dns_lookups),
            config,
        })
    }

    /// Probes `target` once, within its timeout, and classifies the result.
    pub async fn run(&self, mapping: &MappingKey, target: &Target) -> ProbeResult {
        let timeout = target.timeout();
        let check_type = target.check.check_type();
        let probe = async {
            let result = match target.check.as_ref() {
                NetworkCheck::HttpGet(check) => http_get::probe(self, target, check).await,
                NetworkCheck::TcpSocket(_) => tcp::probe(self, target).await,
                NetworkCheck::Grpc(check) => grpc::probe(self, target, check).await,
                NetworkCheck::Webhook(check) => {
                    return webhook::probe(self, mapping, target, check).await;
                }
            };
            result.unwrap_or_else(|err| classify::pod_failure(&err))
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(result) => result,
            Err(_) => timed_out(check_type, timeout),
        }
    }
}

impl ProbeExecutor for NetworkExecutor {
    fn probe<'a>(&'a self, mapping: &'a MappingKey, target: &'a Target) -> ProbeFuture<'a> {
        Box::pin(self.run(mapping, target))
    }
}

/// The result of a probe of `check_type` that ran out of time.
pub(crate) fn timed_out(check_type: CheckType, timeout: std::time::Duration) -> ProbeResult {
    let err = ProbeError::Timeout(timeout);
    match check_type {
        CheckType::Webhook => classify::webhook_failure(&err),
        CheckType::HttpGet | CheckType::TcpSocket | CheckType::Grpc => {
            let mut result = classify::pod_failure(&err);
            result.reason = format!("{} {}", check_type.as_str(), result.reason);
            result
        }
    }
}
