//! TLS client configurations: unverified for pod probes (as kubelet does), verified for webhooks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::ProbeError;

/// Distinct `caBundle`s kept; past this the cache starts over (bundles are few in practice).
const MAX_CACHED_BUNDLES: usize = 32;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// rustls rejected the configuration.
    #[error("building TLS client configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts any server certificate but still checks the handshake signatures, so the session is
/// encrypted to whoever holds the key the pod presented: kubelet's HTTPS probe semantics.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The configuration of `httpGet` with `scheme: HTTPS`: no certificate verification.
pub(crate) fn unverified() -> Result<Arc<ClientConfig>, TlsConfigError> {
    let provider = provider();
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Verified configurations for webhooks, one per distinct `caBundle` (`None`: system roots).
#[derive(Default)]
pub(crate) struct WebhookTls {
    cache: Mutex<HashMap<Option<String>, Arc<ClientConfig>>>,
}

impl WebhookTls {
    /// The configuration verifying against `ca_bundle`, or the system roots.
    pub(crate) fn config(&self, ca_bundle: Option<&str>) -> Result<Arc<ClientConfig>, ProbeError> {
        let key = ca_bundle.map(str::to_owned);
        if let Some(config) = self.lock().get(&key) {
            return Ok(config.clone());
        }
        // Built outside the lock: loading system roots reads files.
        let config = build_verified(ca_bundle)?;
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED_BUNDLES {
            cache.clear();
        }
        cache.insert(key, config.clone());
        Ok(config)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<String>, Arc<ClientConfig>>> {
        // The map holds only finished configs; a panic elsewhere cannot leave it half-written.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn build_verified(ca_bundle: Option<&str>) -> Result<Arc<ClientConfig>, ProbeError> {
    let mut roots = RootCertStore::empty();
    match ca_bundle {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| {
                    ProbeError::InvalidCheck(format!("caBundle is not valid PEM: {e}"))
                })?;
                roots.add(cert).map_err(|e| {
                    ProbeError::InvalidCheck(format!("caBundle certificate rejected: {e}"))
                })?;
            }
            if roots.is_empty() {
                return Err(ProbeError::InvalidCheck(
                    "caBundle holds no PEM certificate".into(),
                ));
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for error in &native.errors {
                tracing::warn!(%error, "loading system CA certificates for webhooks");
            }
            let (added, ignored) = roots.add_parsable_certificates(native.certs);
            tracing::debug!(added, ignored, "system CA certificates for webhooks");
        }
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError::InvalidCheck(format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
