//! TLS on the API listener: the serving certificate and key from PEM files,
//! ALPN offering HTTP/2 and HTTP/1.1, and with `--client-ca-file` the client
//! certificate verifier.
//!
//! Sessions are never resumed when client certificates are verified: a
//! resumed session carries the certificate of the handshake it resumes,
//! unverified since, so a client could keep an expired certificate's
//! identity by resuming session after session. Each connection's
//! certificate is verified at its own handshake, and its chain's validity
//! at each request (`auth::cert`).

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::auth::cert::{ClientCa, ClientCaError};

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
    ClientCa(#[from] ClientCaError),
    #[error("building the TLS server configuration")]
    Build(#[source] rustls::Error),
}

/// TLS for the API listener: the acceptor, and the client CA that verifies
/// client certificates when there is one.
#[derive(Clone)]
pub(crate) struct ApiTls {
    pub acceptor: TlsAcceptor,
    pub client_ca: Option<Arc<ClientCa>>,
}

/// TLS for the API listener. With `client_ca`, client certificates are
/// requested and verified against it (clients without one may still use a
/// bearer token), and sessions are not resumed.
pub(crate) fn api_tls(cert_file: &Path, key_file: &Path, client_ca: Option<&Path>) -> Result<ApiTls, ServingTlsError> {
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
    let client_ca = client_ca.map(ClientCa::load).transpose()?;
    let builder = match &client_ca {
        Some(ca) => builder.with_client_cert_verifier(ca.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(ServingTlsError::Build)?;
    if client_ca.is_some() {
        // No stateful resumption (TLS 1.2 session IDs, TLS 1.3 tickets
        // naming a cached session); rustls's ticketer, for stateless
        // tickets, is already one that never produces any.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ApiTls { acceptor: TlsAcceptor::from(Arc::new(config)), client_ca })
}

#[cfg(test)]
mod tests {
    use rustls::HandshakeKind;
    use rustls::client::Resumption;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::auth::cert::client_ca::tests::{ca, client};

    /// A serving certificate for localhost and, with `client_ca`, a CA
    /// and a client certificate it issued; the listener's TLS and a client
    /// presenting that certificate.
    fn pair(
        client_ca: bool,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> (ApiTls, tokio_rustls::TlsConnector, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let serving = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(path("tls.crt"), serving.cert.pem()).unwrap();
        std::fs::write(path("tls.key"), serving.key_pair.serialize_pem()).unwrap();
        let root = ca("ca", (2000, 2090), None);
        std::fs::write(path("ca.crt"), root.cert.pem()).unwrap();
        let tls = api_tls(&path("tls.crt"), &path("tls.key"), client_ca.then(|| path("ca.crt")).as_deref()).unwrap();

        let mut roots = rustls::RootCertStore::empty();
        roots.add(serving.cert.der().clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(crate::upstream::tls::provider())
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots);
        let alice = client("alice".into(), (2000, 2090), &root);
        let key = rustls::pki_types::PrivateKeyDer::try_from(alice.key.serialize_der()).unwrap();
        let mut config = builder.with_client_auth_cert(vec![alice.cert.der().clone()], key).unwrap();
        // The default, said out loud: the client keeps sessions to resume.
        config.resumption = Resumption::in_memory_sessions(8);
        (tls, tokio_rustls::TlsConnector::from(Arc::new(config)), dir)
    }

    /// One connection: the handshake, one byte from the server (so a TLS
    /// 1.3 client has read the tickets sent after the handshake), and how
    /// the handshake went.
    async fn connect(tls: &ApiTls, connector: &tokio_rustls::TlsConnector) -> HandshakeKind {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let acceptor = tls.acceptor.clone();
        let server = tokio::spawn(async move {
            let mut stream = acceptor.accept(server_io).await.unwrap();
            stream.write_all(b"x").await.unwrap();
            stream.flush().await.unwrap();
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        });
        let name = ServerName::try_from("localhost").unwrap();
        let mut stream = connector.connect(name, client_io).await.unwrap();
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        let kind = stream.get_ref().1.handshake_kind().unwrap();
        stream.shutdown().await.unwrap();
        drop(stream);
        server.await.unwrap();
        kind
    }

    #[tokio::test]
    async fn sessions_are_not_resumed_when_client_certificates_are_verified() {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let (tls, connector, _dir) = pair(true, version);
            assert_eq!(connect(&tls, &connector).await, HandshakeKind::Full);
            assert_eq!(connect(&tls, &connector).await, HandshakeKind::Full, "{:?}", version.version);
        }
    }

    /// The other side of the test above: it sees resumption where there is
    /// some (a listener without client certificates keeps rustls's default).
    #[tokio::test]
    async fn sessions_are_resumed_without_client_certificates() {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let (tls, connector, _dir) = pair(false, version);
            assert_eq!(connect(&tls, &connector).await, HandshakeKind::Full);
            let kind = connect(&tls, &connector).await;
            assert_eq!(kind, HandshakeKind::Resumed, "{:?}", version.version);
        }
    }
}
