//! TLS on the API listener: the serving certificate and key from PEM files,
//! ALPN offering HTTP/2 and HTTP/1.1.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServingTlsError {
    #[error("reading the serving certificate {path}")]
    Cert {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the serving certificate file {0} holds no certificate")]
    NoCert(String),
    #[error("reading the serving key {path}")]
    Key {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error(transparent)]
    ClientCa(#[from] crate::auth::cert::ClientCaError),
    #[error("building the TLS server configuration")]
    Build(#[source] rustls::Error),
}

/// The acceptor for the API listener. With `client_ca`, client certificates
/// are requested and verified against it (clients without one may still
/// use a bearer token).
pub(crate) fn acceptor(
    cert_file: &Path,
    key_file: &Path,
    client_ca: Option<&Path>,
) -> Result<TlsAcceptor, ServingTlsError> {
    let cert_path = cert_file.display().to_string();
    let chain = CertificateDer::pem_file_iter(cert_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| ServingTlsError::Cert { path: cert_path.clone(), source })?;
    if chain.is_empty() {
        return Err(ServingTlsError::NoCert(cert_path));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|source| ServingTlsError::Key { path: key_file.display().to_string(), source })?;
    let builder = ServerConfig::builder_with_provider(crate::upstream::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(ServingTlsError::Build)?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(crate::auth::cert::verifier(ca)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(ServingTlsError::Build)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
