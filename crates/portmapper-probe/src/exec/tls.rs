//! TLS client configurations: unverified for pod probes (as kubelet does), verified for webhooks.

use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::ProbeError;

/// Distinct `caBundle`s kept; past this the least recently used one goes.
const MAX_CACHED_BUNDLES: usize = 64;
/// Distinct `caBundle`s kept for one namespace, so one tenant cycling through bundles evicts
/// only its own.
const MAX_CACHED_BUNDLES_PER_NAMESPACE: usize = 8;

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

/// A `caBundle`'s SHA-256: the cache key, so a 64 KiB bundle is not kept twice.
type BundleHash = [u8; 32];

fn hash(bundle: &str) -> BundleHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, bundle.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

struct Cached {
    key: BundleHash,
    namespace: String,
    config: Arc<ClientConfig>,
    used: u64,
}

/// Verified configurations for webhooks: the system roots' one, built at start, and one per
/// distinct `caBundle` in a small LRU cache.
pub(crate) struct WebhookTls {
    system: Arc<ClientConfig>,
    cache: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    entries: Vec<Cached>,
    clock: u64,
}

impl Lru {
    fn get(&mut self, key: &BundleHash) -> Option<Arc<ClientConfig>> {
        self.clock += 1;
        let entry = self.entries.iter_mut().find(|e| &e.key == key)?;
        entry.used = self.clock;
        Some(entry.config.clone())
    }

    /// Inserts, first evicting the namespace's least recently used entry when it holds its
    /// share, else the overall least recently used one when the cache is full.
    fn insert(&mut self, key: BundleHash, namespace: &str, config: Arc<ClientConfig>) {
        self.clock += 1;
        let own = self
            .entries
            .iter()
            .filter(|e| e.namespace == namespace)
            .count();
        let victim = if own >= MAX_CACHED_BUNDLES_PER_NAMESPACE {
            self.oldest(|e| e.namespace == namespace)
        } else if self.entries.len() >= MAX_CACHED_BUNDLES {
            self.oldest(|_| true)
        } else {
            None
        };
        if let Some(i) = victim {
            self.entries.swap_remove(i);
        }
        self.entries.push(Cached {
            key,
            namespace: namespace.to_owned(),
            config,
            used: self.clock,
        });
    }

    fn oldest(&self, pick: impl Fn(&Cached) -> bool) -> Option<usize> {
        (0..self.entries.len())
            .filter(|&i| pick(&self.entries[i]))
            .min_by_key(|&i| self.entries[i].used)
    }
}

impl WebhookTls {
    /// Reads the system's CA certificates (file I/O: at start, never inside a probe).
    pub(crate) fn new() -> Result<Self, TlsConfigError> {
        Ok(Self {
            system: build_verified(None).map_err(|e| {
                TlsConfigError::Rustls(rustls::Error::General(format!("system roots: {e}")))
            })?,
            cache: Mutex::default(),
        })
    }

    /// The configuration verifying against `ca_bundle` (of a PortMapping in `namespace`), or
    /// the system roots.
    pub(crate) fn config(
        &self,
        namespace: &str,
        ca_bundle: Option<&str>,
    ) -> Result<Arc<ClientConfig>, ProbeError> {
        let Some(bundle) = ca_bundle else {
            return Ok(self.system.clone());
        };
        let key = hash(bundle);
        if let Some(config) = self.lock().get(&key) {
            return Ok(config);
        }
        // Parsed outside the lock: a large bundle takes a moment.
        let config = build_verified(Some(bundle))?;
        self.lock().insert(key, namespace, config.clone());
        Ok(config)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // The cache holds only finished configs; a panic elsewhere cannot leave it half-written.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn cached(&self) -> Vec<(BundleHash, String)> {
        let lru = self.lock();
        lru.entries
            .iter()
            .map(|e| (e.key, e.namespace.clone()))
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(i: usize) -> String {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()])
            .expect("a certificate")
            .cert
            .pem();
        format!("# bundle {i}\n{cert}")
    }

    #[test]
    fn bundles_are_cached_by_hash_least_recently_used_first_and_per_namespace() {
        let tls = WebhookTls::new().unwrap();
        let victim = bundle(0);
        let config = tls.config("victim", Some(&victim)).unwrap();
        // A tenant cycling through many bundles evicts only its own.
        for i in 1..=40 {
            tls.config("attacker", Some(&bundle(i))).unwrap();
        }
        let cached = tls.cached();
        let attacker = cached.iter().filter(|(_, ns)| ns == "attacker").count();
        assert_eq!(attacker, MAX_CACHED_BUNDLES_PER_NAMESPACE);
        assert!(cached.contains(&(hash(&victim), "victim".into())));
        assert!(Arc::ptr_eq(
            &config,
            &tls.config("victim", Some(&victim)).unwrap()
        ));
        // Full: the least recently used entry goes, not everything.
        for ns in 0..MAX_CACHED_BUNDLES {
            tls.config(&format!("ns-{ns}"), Some(&bundle(100 + ns)))
                .unwrap();
        }
        let cached = tls.cached();
        assert_eq!(cached.len(), MAX_CACHED_BUNDLES);
        assert!(cached.iter().any(|(_, ns)| ns == "ns-63"));
        // No bundle: the system roots read at start, without touching the cache.
        assert!(Arc::ptr_eq(
            &tls.config("victim", None).unwrap(),
            &tls.config("other", None).unwrap()
        ));
    }
}
