//! Sending one request as one identity, the same bytes to the API server and
//! to a watchmux: a fresh TLS connection (HTTP/1.1 by ALPN) per request, so
//! that the client certificate is the case's, and headers exactly as the
//! case lists them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::x509::Issued;

/// How long a request may take to its status line; a connection that
/// fails (a handshake refused, a reset) is an answer too, status 0.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// How long a streaming body (a watch that was allowed) is read.
const STREAM_READ: Duration = Duration::from_millis(600);
const BODY_CAP: usize = 256 * 1024;
const NO_ANSWER: &[u8] = b"no answer in time";

/// The credentials a request carries.
#[derive(Clone, Default)]
pub(crate) struct Identity {
    pub(crate) cert: Option<Issued>,
    pub(crate) token: Option<String>,
}

/// A request's bytes: method, path as sent, headers as listed, body.
pub(crate) struct Req<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) headers: &'a [(String, String)],
    pub(crate) body: &'a str,
}

/// The response headers kept besides the content type: what a shared
/// answer's caching and redirects depend on.
pub(crate) const KEPT_HEADERS: &[&str] = &["cache-control", "etag", "location", "vary"];

/// What came back: status (0 when the connection failed), content type, body.
#[derive(Clone, Debug, Default)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
    /// Those of `KEPT_HEADERS` present, in that order, each value as sent.
    pub(crate) headers: Vec<(String, String)>,
    /// The body ended before the read bound and the size cap: all of it is here.
    pub(crate) complete: bool,
}

impl Answer {
    pub(crate) fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.body);
        if s.len() <= 400 {
            return s.into_owned();
        }
        let end = (0..=400).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        format!("{}...", &s[..end])
    }

    /// No status line within the bound: says nothing of who may do what.
    pub(crate) fn timed_out(&self) -> bool {
        self.status == 0 && self.body == NO_ANSWER
    }

    pub(crate) fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

pub(crate) struct Wire {
    roots: Arc<rustls::RootCertStore>,
}

impl Wire {
    pub(crate) fn new(ca: &std::path::Path) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        Self { roots: Arc::new(roots) }
    }

    pub(crate) async fn send(&self, addr: SocketAddr, who: &Identity, req: &Req<'_>) -> Answer {
        match tokio::time::timeout(ANSWER_WITHIN, self.try_send(addr, who, req)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Answer { body: e.to_string().into_bytes(), ..Answer::default() },
            Err(_) => Answer { body: NO_ANSWER.to_vec(), ..Answer::default() },
        }
    }

    async fn try_send(
        &self,
        addr: SocketAddr,
        who: &Identity,
        Req { method, path, headers, body }: &Req<'_>,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(self.roots.clone());
        let mut config = match &who.cert {
            Some(issued) => builder.with_client_auth_cert(
                vec![CertificateDer::from(issued.cert.clone())],
                PrivateKeyDer::Pkcs8(issued.key_pkcs8.clone().into()),
            )?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let mut req = Request::builder().method(*method).uri(*path).header("host", addr.to_string());
        if let Some(t) = &who.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers.iter() {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp = sender.send_request(req.body(Full::new(Bytes::copy_from_slice(body.as_bytes())))?).await?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let kept = KEPT_HEADERS
            .iter()
            .filter_map(|name| {
                let value = resp.headers().get(*name)?;
                Some(((*name).to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            })
            .collect();
        let mut stream = resp.into_body();
        let mut bytes = Vec::new();
        let mut complete = false;
        let deadline = tokio::time::Instant::now() + STREAM_READ;
        loop {
            match tokio::time::timeout_at(deadline, stream.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
                Ok(None) => {
                    complete = true;
                    break;
                }
                Ok(Some(Err(_))) | Err(_) => break,
            }
            if bytes.len() > BODY_CAP {
                break;
            }
        }
        Ok(Answer { status, content_type, body: bytes, headers: kept, complete })
    }
}
