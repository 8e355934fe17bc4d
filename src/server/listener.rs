//! Accept loops and per-connection serving.
//!
//! Each accepted connection runs in a task of its own: a TLS handshake when
//! the listener has TLS, then hyper's automatic HTTP/1.1-or-HTTP/2 server
//! (ALPN on TLS, the HTTP/2 preface on plain text, so h2c works by prior
//! knowledge). A failing connection, bad TLS or malformed HTTP, ends that
//! connection alone.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use metrics::{counter, gauge};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::limits::ConnectionBudget;
use super::write_behind::WriteBehind;
use crate::auth::cert::CertIdentity;
use crate::body::ProxyBody;
use crate::metrics as m;
use crate::passthrough::Peer;

/// How long a client has to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a complete request head on HTTP/1.1.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a partly sent HTTP/2 preface is looked at again.
const PREFACE_RETRY: Duration = Duration::from_millis(5);
/// The largest request head accepted, as Go's net/http (and so kube-apiserver)
/// does: 1 MiB plus its 4 KiB of slack. Larger heads get 431.
pub const MAX_HEADER_BYTES: usize = (1 << 20) + 4096;
/// Streams one HTTP/2 connection may carry at once. client-go multiplexes
/// every watch of a process over one connection, so this is high.
const H2_MAX_CONCURRENT_STREAMS: u32 = 1000;

/// The HTTP server settings every API connection shares.
pub fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(512);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10));
    builder
}

/// A request handler bound to one connection's peer.
pub trait Handler: Clone + Send + Sync + 'static {
    fn handle(&self, req: Request<Incoming>, peer: Peer) -> impl Future<Output = Response<ProxyBody>> + Send;
}

/// Where an accept loop serves its connections, and what it counts them against.
pub struct Serving<'a, H> {
    pub name: &'static str,
    pub builder: &'a auto::Builder<TokioExecutor>,
    pub graceful: &'a GracefulShutdown,
    pub handler: H,
    /// `--max-connections`; `None` for the admin listener.
    pub budget: Option<Arc<ConnectionBudget>>,
    /// Put HTTP/2 connections behind a write-behind buffer (`--h2-write-batching`).
    pub h2_write_batching: bool,
    pub stop: CancellationToken,
}

/// Accepts TCP connections until `stop` is cancelled.
pub async fn accept_tcp<H: Handler>(listener: TcpListener, tls: Option<TlsAcceptor>, serving: Serving<'_, H>) {
    let Serving { name, builder, graceful, handler, budget, h2_write_batching, stop } = serving;
    loop {
        let (stream, addr) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %err, listener = name, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let slot = budget.as_ref().map(ConnectionBudget::open);
        let peer = Peer {
            addr: Some(addr),
            client_cert: None,
            over_connection_limit: slot.as_ref().is_some_and(|s| !s.within),
        };
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let handler = handler.clone();
        let tls = tls.clone();
        let span = tracing::debug_span!("conn", listener = name, peer = %addr);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _open = OpenConnection::new(name);
                let _slot = slot;
                match tls {
                    Some(acceptor) => {
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls_stream)) => {
                                let peer = Peer { client_cert: client_identity(&tls_stream), ..peer };
                                let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2");
                                if h2 && h2_write_batching {
                                    let io = WriteBehind::new(tls_stream);
                                    serve(io, peer, name, &builder, watcher, handler).await
                                } else {
                                    serve(tls_stream, peer, name, &builder, watcher, handler).await
                                }
                            }
                            Ok(Err(err)) => connection_error(name, "tls", &err),
                            Err(_) => connection_error(name, "tls", &"handshake timed out"),
                        }
                    }
                    None if h2_write_batching && starts_with_h2_preface(&stream).await => {
                        serve(WriteBehind::tcp(stream), peer, name, &builder, watcher, handler).await
                    }
                    None => serve(stream, peer, name, &builder, watcher, handler).await,
                }
            },
            span,
        ));
    }
}

/// Accepts unix-socket connections until `stop` is cancelled.
pub async fn accept_unix<H: Handler>(listener: UnixListener, serving: Serving<'_, H>) {
    let Serving { name: _, builder, graceful, handler, budget, h2_write_batching: _, stop } = serving;
    const NAME: &str = "unix";
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(error = %err, listener = NAME, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let handler = handler.clone();
        let slot = budget.as_ref().map(ConnectionBudget::open);
        let peer = Peer { over_connection_limit: slot.as_ref().is_some_and(|s| !s.within), ..Peer::default() };
        tokio::spawn(async move {
            let _open = OpenConnection::new(NAME);
            let _slot = slot;
            serve(stream, peer, NAME, &builder, watcher, handler).await;
        });
    }
}

async fn serve<I, H>(
    io: I,
    peer: Peer,
    name: &'static str,
    builder: &auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    handler: H,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let service = service_fn(move |req| {
        let handler = handler.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(handler.handle(req, peer).await) }
    });
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(err) = watcher.watch(conn.into_owned()).await {
        connection_error(name, "http", &*err);
    }
}

/// True when a plain-text client opens with the HTTP/2 preface (h2c by
/// prior knowledge). Peeking leaves the bytes for hyper; a client that sends
/// nothing within the header timeout is left to hyper's own timeout.
async fn starts_with_h2_preface(stream: &tokio::net::TcpStream) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";
    let mut buf = [0u8; 16];
    let peek = async {
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 || n >= PREFACE.len() || !PREFACE.starts_with(&buf[..n]) {
                return Some(n >= PREFACE.len() && buf[..PREFACE.len()] == *PREFACE);
            }
            // A partial match: wait for more bytes. The socket stays readable
            // while those bytes sit unread, so waiting for readiness would
            // spin; a client that sends its preface in pieces waits a little.
            tokio::time::sleep(PREFACE_RETRY).await;
        }
    };
    tokio::time::timeout(HEADER_READ_TIMEOUT, peek).await.ok().flatten().unwrap_or(false)
}

/// The identity of a verified client certificate. rustls has verified the
/// chain against `--client-ca-file` by the time the handshake completes, so
/// any certificate present here is trusted.
fn client_identity<I>(tls: &tokio_rustls::server::TlsStream<I>) -> Option<CertIdentity> {
    let leaf = tls.get_ref().1.peer_certificates()?.first()?;
    crate::auth::cert::identity(leaf)
}

/// Bad input from one client is expected, not actionable: logged at debug
/// and counted.
fn connection_error(name: &'static str, stage: &'static str, err: &dyn std::fmt::Display) {
    tracing::debug!(error = %err, stage, "connection ended with an error");
    counter!(m::CONNECTION_ERRORS, "listener" => name, "stage" => stage).increment(1);
}

/// Counts a connection as open until dropped.
struct OpenConnection(&'static str);

impl OpenConnection {
    fn new(name: &'static str) -> Self {
        counter!(m::CONNECTIONS_ACCEPTED, "listener" => name).increment(1);
        gauge!(m::CONNECTIONS_OPEN, "listener" => name).increment(1.0);
        Self(name)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        gauge!(m::CONNECTIONS_OPEN, "listener" => self.0).decrement(1.0);
    }
}

/// The admin handler shares the accept loop; it has no graceful phase.
#[derive(Clone)]
pub struct AdminHandler(pub Arc<super::admin::AdminState>);

impl Handler for AdminHandler {
    async fn handle(&self, req: Request<Incoming>, _peer: Peer) -> Response<ProxyBody> {
        match super::admin::handle(self.0.clone(), req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    }
}
