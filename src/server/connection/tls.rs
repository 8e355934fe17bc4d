//! TLS on the API listener: the serving certificate and key from PEM files,
//! ALPN offering HTTP/2 and HTTP/1.1, with `--client-ca-file` the client
//! certificate verifier, and `--tls-min-version` / `--tls-cipher-suites`
//! ([`protocol`]).
//!
//! The files are read again when they change ([`reload`]), as
//! kube-apiserver's dynamic serving certificate does: each handshake takes
//! the [`Handshake`] current when its connection is accepted, one rustls
//! configuration built whole from the serving pair and the client CA, so a
//! handshake never mixes an old file with a new one, and the CA that
//! verified a client's certificate is the one that makes its identity.
//! Connections already open keep what they were accepted with. Rebuilding
//! the configuration, rather than swapping the certificate under one, is
//! what kube-apiserver does too (a new `tls.Config` per client hello), and it
//! keeps the CA names offered to clients (rustls borrows them from the
//! verifier) in step with the CA that verifies them.
//!
//! Sessions are never resumed when client certificates are verified: a
//! resumed session carries the certificate of the handshake it resumes,
//! unverified since, so a client could keep an expired certificate's
//! identity by resuming session after session. Each connection's
//! certificate is verified at its own handshake, and its chain's validity
//! at each request (`auth::cert`). Without client certificates, one session
//! cache serves every configuration, so a rotation does not end resumption.

pub(crate) mod protocol;
pub(crate) mod reload;
pub(crate) mod stream;

use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::StoresServerSessions;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ServerConfig, SupportedProtocolVersion};

use crate::auth::cert::{ClientCa, ClientCaError};
use crate::server::TlsFiles;

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
    #[error("the serving certificate {cert} and key {key} are not a pair rustls can use")]
    Pair {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error(transparent)]
    ClientCa(#[from] ClientCaError),
    #[error("building the TLS server configuration")]
    Build(#[source] rustls::Error),
}

/// What one handshake uses: the rustls configuration, and the client CA that
/// verifies client certificates when there is one.
pub(crate) struct Handshake {
    pub config: Arc<ServerConfig>,
    pub client_ca: Option<Arc<ClientCa>>,
}

/// TLS for the API listener: the [`Handshake`] of the files as last read.
#[derive(Clone)]
pub(crate) struct ApiTls {
    shared: Arc<Shared>,
}

struct Shared {
    files: TlsFiles,
    settings: Settings,
    current: RwLock<Arc<Handshake>>,
    /// What the files held when last read with success, and what they
    /// looked like when last read at all: the reloader's alone.
    loaded: Mutex<reload::Loaded>,
}

/// What every configuration shares, whatever the files hold.
struct Settings {
    provider: Arc<CryptoProvider>,
    versions: &'static [&'static SupportedProtocolVersion],
    /// One for every configuration built, so that a rotation does not drop
    /// the sessions clients may resume (none with client certificates).
    session_storage: Arc<dyn StoresServerSessions>,
}

/// The serving certificate chain and its key, as read and as rustls holds
/// them (after checking that they belong together).
struct ServingPair {
    pem: (Vec<u8>, Vec<u8>),
    certified: Arc<CertifiedKey>,
}

/// The client CA bundle, as read and as the verifier holds it.
struct ClientCaFile {
    pem: Vec<u8>,
    ca: Arc<ClientCa>,
}

/// TLS for the API listener. With `files.client_ca`, client certificates
/// are requested and verified against it (clients without one may still use
/// a bearer token), and sessions are not resumed.
pub(crate) fn api_tls(files: &TlsFiles) -> Result<ApiTls, ServingTlsError> {
    // Before reading: a file replaced while it is read is read again.
    let stamps = reload::Stamps::of(files);
    let provider = files.protocol.provider();
    let serving = ServingPair::read(&files.cert, &files.key, &provider)?;
    let client_ca = files.client_ca.as_deref().map(ClientCaFile::read).transpose()?;
    let session_storage: Arc<dyn StoresServerSessions> = match client_ca {
        // No stateful resumption (TLS 1.2 session IDs, TLS 1.3 tickets
        // naming a cached session); rustls's ticketer, for stateless
        // tickets, is already one that never produces any.
        Some(_) => Arc::new(rustls::server::NoServerSessionStorage {}),
        None => rustls::server::ServerSessionMemoryCache::new(256),
    };
    let settings = Settings { provider, versions: files.protocol.versions(), session_storage };
    let handshake = settings.handshake(&serving, client_ca.as_ref()).map_err(ServingTlsError::Build)?;
    Ok(ApiTls {
        shared: Arc::new(Shared {
            files: files.clone(),
            settings,
            current: RwLock::new(Arc::new(handshake)),
            loaded: Mutex::new(reload::Loaded { serving, client_ca, stamps }),
        }),
    })
}

impl ApiTls {
    /// What a handshake starting now uses.
    pub(crate) fn current(&self) -> Arc<Handshake> {
        self.shared.current.read().clone()
    }
}

impl Settings {
    /// One configuration of the serving pair and the client CA.
    fn handshake(&self, serving: &ServingPair, client_ca: Option<&ClientCaFile>) -> Result<Handshake, rustls::Error> {
        let builder =
            ServerConfig::builder_with_provider(self.provider.clone()).with_protocol_versions(self.versions)?;
        let client_ca = client_ca.map(|file| file.ca.clone());
        let builder = match &client_ca {
            Some(ca) => builder.with_client_cert_verifier(ca.clone()),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(serving.certified.clone())));
        config.session_storage = self.session_storage.clone();
        if client_ca.is_some() {
            config.send_tls13_tickets = 0;
        }
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Handshake { config: Arc::new(config), client_ca })
    }
}

impl ServingPair {
    /// Reads the pair; rustls checks that the key is the certificate's.
    fn read(cert_file: &Path, key_file: &Path, provider: &CryptoProvider) -> Result<Self, ServingTlsError> {
        let (cert, key) = (cert_file.display().to_string(), key_file.display().to_string());
        let cert_pem = std::fs::read(cert_file)
            .map_err(|err| ServingTlsError::Cert { path: cert.clone(), source: pem::Error::Io(err) })?;
        let key_pem = std::fs::read(key_file)
            .map_err(|err| ServingTlsError::Key { path: key.clone(), source: pem::Error::Io(err) })?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| ServingTlsError::Cert { path: cert.clone(), source })?;
        if chain.is_empty() {
            return Err(ServingTlsError::NoCert(cert));
        }
        let private_key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|source| ServingTlsError::Key { path: key.clone(), source })?;
        let certified = CertifiedKey::from_der(chain, private_key, provider)
            .map_err(|source| ServingTlsError::Pair { cert, key, source })?;
        Ok(Self { pem: (cert_pem, key_pem), certified: Arc::new(certified) })
    }
}

impl ClientCaFile {
    fn read(ca_file: &Path) -> Result<Self, ClientCaError> {
        let path = ca_file.display().to_string();
        let pem = std::fs::read(ca_file)
            .map_err(|err| ClientCaError::Read { path: path.clone(), source: pem::Error::Io(err) })?;
        let ca = ClientCa::from_pem(&path, &pem)?;
        Ok(Self { pem, ca })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::SystemTime;

    use rustls::client::Resumption;
    use rustls::pki_types::ServerName;
    use rustls::{CipherSuite, HandshakeKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;

    use super::protocol::{TlsMinVersion, TlsProtocol, parse_cipher_suite};
    use super::*;
    use crate::auth::cert::client_ca::tests::{Issued, ca, client};

    /// A self-signed serving certificate for localhost.
    pub(crate) fn serving_cert() -> rcgen::CertifiedKey {
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap()
    }

    /// Writes `serving` as `tls.crt` and `tls.key` in `dir`, the certificate first.
    pub(crate) fn write_pair(dir: &Path, serving: &rcgen::CertifiedKey) {
        std::fs::write(dir.join("tls.crt"), serving.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), serving.key_pair.serialize_pem()).unwrap();
    }

    /// The files of `dir`: `tls.crt`, `tls.key` and, if asked, `ca.crt`.
    pub(crate) fn files_in(dir: &Path, client_ca: bool, protocol: TlsProtocol) -> TlsFiles {
        TlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: client_ca.then(|| dir.join("ca.crt")),
            protocol,
        }
    }

    /// A client that trusts `servers` (self-signed), speaks `versions`
    /// with `suites` (all of rustls's if empty) and presents `cert`.
    pub(crate) fn connector(
        servers: &[&rcgen::CertifiedKey],
        versions: &[&'static rustls::SupportedProtocolVersion],
        suites: &[CipherSuite],
        cert: Option<&Issued>,
    ) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for server in servers {
            roots.add(server.cert.der().clone()).unwrap();
        }
        let mut provider = Arc::unwrap_or_clone(crate::upstream::tls::provider());
        if !suites.is_empty() {
            provider.cipher_suites.retain(|s| suites.contains(&s.suite()));
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match cert {
            Some(issued) => {
                let key = PrivateKeyDer::try_from(issued.key.serialize_der()).unwrap();
                builder.with_client_auth_cert(vec![issued.cert.der().clone()], key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        // The default, said out loud: the client keeps sessions to resume.
        config.resumption = Resumption::in_memory_sessions(8);
        TlsConnector::from(Arc::new(config))
    }

    /// What a client saw of one connection, and who the listener found it
    /// to be.
    #[derive(Debug)]
    pub(crate) struct Seen {
        pub kind: HandshakeKind,
        pub server_cert: CertificateDer<'static>,
        pub suite: CipherSuite,
        /// The user of the client certificate, as the listener reads it.
        pub user: Option<String>,
    }

    /// One connection: the handshake with the listener's TLS as it is now,
    /// one byte from the server (so a TLS 1.3 client has read the tickets
    /// sent after the handshake, or the alert refusing its certificate),
    /// and what the client saw; or why either side failed.
    pub(crate) async fn connect(tls: &ApiTls, connector: &TlsConnector) -> Result<Seen, String> {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let handshake = tls.current();
        let server = tokio::spawn(async move {
            let mut stream = super::stream::TlsServerStream::accept(handshake.config.clone(), server_io)
                .await
                .map_err(|e| format!("server: {e}"))?;
            let chain = stream.session().peer_certificates().map(<[_]>::to_vec);
            let cert =
                handshake.client_ca.as_ref().zip(chain).and_then(|(ca, c)| ca.client_cert(&c, SystemTime::now()));
            let user = cert.and_then(|c| c.identity_at(SystemTime::now())).and_then(Result::ok).map(|u| u.name.clone());
            stream.write_all(b"x").await.map_err(|e| format!("server: {e}"))?;
            stream.flush().await.map_err(|e| format!("server: {e}"))?;
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
            Ok::<_, String>(user)
        });
        let client = async {
            let name = ServerName::try_from("localhost").unwrap();
            let mut stream = connector.connect(name, client_io).await.map_err(|e| format!("client: {e}"))?;
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.map_err(|e| format!("client: {e}"))?;
            let conn = stream.get_ref().1;
            let seen = (
                conn.handshake_kind().unwrap(),
                conn.peer_certificates().unwrap()[0].clone().into_owned(),
                conn.negotiated_cipher_suite().unwrap().suite(),
            );
            stream.shutdown().await.unwrap();
            Ok::<_, String>(seen)
        }
        .await;
        let server = server.await.unwrap();
        let (kind, server_cert, suite) = client?;
        Ok(Seen { kind, server_cert, suite, user: server? })
    }

    /// A serving certificate for localhost and, with `client_ca`, a CA
    /// and a client certificate it issued; the listener's TLS and a client
    /// presenting that certificate.
    fn pair(
        client_ca: bool,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> (ApiTls, TlsConnector, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let serving = serving_cert();
        write_pair(dir.path(), &serving);
        let root = ca("ca", (2000, 2090), None);
        std::fs::write(dir.path().join("ca.crt"), root.cert.pem()).unwrap();
        let tls = api_tls(&files_in(dir.path(), client_ca, TlsProtocol::default())).unwrap();
        let alice = client("alice".into(), (2000, 2090), &root);
        (tls, connector(&[&serving], &[version], &[], Some(&alice)), dir)
    }

    #[tokio::test]
    async fn sessions_are_not_resumed_when_client_certificates_are_verified() {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let (tls, connector, _dir) = pair(true, version);
            let first = connect(&tls, &connector).await.unwrap();
            assert_eq!((first.kind, first.user.as_deref()), (HandshakeKind::Full, Some("alice")));
            assert_eq!(connect(&tls, &connector).await.unwrap().kind, HandshakeKind::Full, "{:?}", version.version);
        }
    }

    /// The other side of the test above: it sees resumption where there is
    /// some (a listener without client certificates keeps rustls's default).
    #[tokio::test]
    async fn sessions_are_resumed_without_client_certificates() {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let (tls, connector, _dir) = pair(false, version);
            assert_eq!(connect(&tls, &connector).await.unwrap().kind, HandshakeKind::Full);
            let kind = connect(&tls, &connector).await.unwrap().kind;
            assert_eq!(kind, HandshakeKind::Resumed, "{:?}", version.version);
        }
    }

    /// A listener of a fresh serving certificate with `protocol`, and the
    /// certificate.
    fn listener(protocol: TlsProtocol) -> (ApiTls, rcgen::CertifiedKey, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let serving = serving_cert();
        write_pair(dir.path(), &serving);
        (api_tls(&files_in(dir.path(), false, protocol)).unwrap(), serving, dir)
    }

    #[tokio::test]
    async fn a_tls12_only_client_is_refused_when_the_minimum_is_tls13() {
        let tls13 = TlsProtocol { min_version: TlsMinVersion::Tls13, ..TlsProtocol::default() };
        let (tls, serving, _dir) = listener(tls13);
        let tls12_only = connector(&[&serving], &[&rustls::version::TLS12], &[], None);
        let refused = connect(&tls, &tls12_only).await.unwrap_err();
        assert!(refused.contains("ProtocolVersion"), "{refused}");
        let both = connector(&[&serving], rustls::DEFAULT_VERSIONS, &[], None);
        connect(&tls, &both).await.unwrap();
        // The default minimum, TLS 1.2, takes the same client.
        let (tls, serving, _dir) = listener(TlsProtocol::default());
        let tls12_only = connector(&[&serving], &[&rustls::version::TLS12], &[], None);
        connect(&tls, &tls12_only).await.unwrap();
    }

    #[tokio::test]
    async fn only_the_listed_tls12_suites_are_negotiated() {
        // rcgen's keys are ECDSA P-256, so the ECDSA suites apply.
        let listed = TlsProtocol {
            cipher_suites: vec![parse_cipher_suite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305").unwrap()],
            ..TlsProtocol::default()
        };
        let (tls, serving, _dir) = listener(listed);
        let tls12 = &[&rustls::version::TLS12];
        let any = connector(&[&serving], tls12, &[], None);
        let seen = connect(&tls, &any).await.unwrap();
        assert_eq!(seen.suite, CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256);
        let unlisted = connector(&[&serving], tls12, &[CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256], None);
        let refused = connect(&tls, &unlisted).await.unwrap_err();
        assert!(refused.contains("HandshakeFailure") || refused.contains("handshake"), "{refused}");
        // TLS 1.3 is not narrowed: its suites are not configurable.
        let tls13 = connector(&[&serving], &[&rustls::version::TLS13], &[CipherSuite::TLS13_AES_128_GCM_SHA256], None);
        assert_eq!(connect(&tls, &tls13).await.unwrap().suite, CipherSuite::TLS13_AES_128_GCM_SHA256);
    }
}
