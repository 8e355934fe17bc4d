//! TLS to the upstream API server with rustls: the cluster CA, a client
//! certificate when the kubeconfig has one, and no verification at all only
//! when the kubeconfig explicitly says `insecure-skip-tls-verify`.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::upstream::kubeconfig::UpstreamConfig;

/// Why the upstream TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The CA bundle is not PEM.
    #[error("reading the cluster CA certificates")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    /// A CA certificate is not usable as a trust anchor.
    #[error("adding a cluster CA certificate to the trust store")]
    CaCert(#[source] rustls::Error),
    /// The CA bundle is empty.
    #[error("the cluster CA bundle holds no certificate")]
    NoCaCert,
    /// The client certificate is not PEM.
    #[error("reading the client certificate")]
    ClientCert(#[source] rustls::pki_types::pem::Error),
    /// The client key is not PEM.
    #[error("reading the client key")]
    ClientKey(#[source] rustls::pki_types::pem::Error),
    /// Only one of certificate and key is given.
    #[error("the kubeconfig has a client certificate without a key, or a key without a certificate")]
    HalfClientIdentity,
    /// rustls refused the configuration.
    #[error("building the TLS client configuration")]
    Build(#[source] rustls::Error),
}

/// The crypto provider for every TLS connection watchmux makes or accepts.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the rustls client configuration for the upstream. ALPN is left to
/// the connector, which knows whether HTTP/2 is wanted.
pub fn client_config(cfg: &UpstreamConfig) -> Result<ClientConfig, TlsConfigError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Build)?;

    let builder = if cfg.insecure_skip_tls_verify {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoServerVerification {
            algorithms: provider.signature_verification_algorithms,
        }))
    } else {
        let mut roots = RootCertStore::empty();
        if let Some(pem) = &cfg.ca_pem {
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots.add(cert.map_err(TlsConfigError::CaPem)?).map_err(TlsConfigError::CaCert)?;
                added += 1;
            }
            if added == 0 {
                return Err(TlsConfigError::NoCaCert);
            }
        }
        builder.with_root_certificates(roots)
    };

    let config = match (&cfg.client_cert_pem, &cfg.client_key_pem) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(TlsConfigError::ClientCert)?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(TlsConfigError::ClientKey)?;
            builder.with_client_auth_cert(chain, key).map_err(TlsConfigError::Build)?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err(TlsConfigError::HalfClientIdentity),
    };
    Ok(config)
}

/// Accepts any server certificate. Used only when the kubeconfig sets
/// `insecure-skip-tls-verify: true`, as every Kubernetes client does; the
/// handshake signatures are still checked so the session is at least
/// consistent with the certificate presented.
#[derive(Debug)]
struct NoServerVerification {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoServerVerification {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
