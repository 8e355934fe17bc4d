//! Accept loops and per-connection serving.
//!
//! Each accepted connection runs in a task of its own: a TLS handshake when
//! the listener has TLS, then its opening bytes (see [`super::opening`]),
//! both within [`CONNECTION_SETUP_TIMEOUT`] of connecting; then hyper's
//! HTTP/2 server when the opening is the HTTP/2 preface (so h2c works by
//! prior knowledge), otherwise watchmux's HTTP/1.1 front ([`h1_front`]),
//! which answers watches itself and hands any other request, and the
//! connection, to hyper's HTTP/1.1 server (with upgrades). A
//! failing connection, bad TLS, a client too slow to start or malformed
//! HTTP, ends that connection alone. The HTTP/2
//! limits on frames a client can send without a request being served
//! (resets, CONTINUATION) are set in [`http_builder`]; a connection whose
//! requests are mostly cancelled before an answer is closed (see
//! [`super::early_resets`]). An HTTP/2 connection with no stream open for
//! the idle timeout, or whose answer said `Connection: close` or drew the
//! GOAWAY chance, is asked to finish with GOAWAY (see [`super::activity`]
//! and [`super::goaway_chance`]), as is one at its maximum age, whose watch
//! streams then end and whose other requests have the grace (see
//! [`super::max_age`]). Each accepted connection
//! is counted against the connection budget and its address's share
//! ([`ConnectionBudget`]); one past even the connections answered with a
//! 429 is closed at accept, unread.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use metrics::{counter, gauge};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

#[cfg(test)]
use super::activity::IDLE_TIMEOUT;
use super::activity::{Activity, CloseReason};
use super::early_resets::EarlyResets;
use super::goaway_chance::GoawayChance;
use super::max_age::{AgeAction, ConnectionAge, MaxConnectionAge};
use super::opening::{Opening, Rewind, read_opening};
use super::tls::ApiTls;
use super::tls::stream::TlsServerStream;
use super::write_behind::WriteBehind;
use crate::auth::Peer;
use crate::auth::cert::{ClientCa, ClientCert};
use crate::body::{ProxyBody, RequestBody};
use crate::error::error_chain;
use crate::metrics as m;
use crate::server::gates::connections::ConnectionBudget;
use crate::server::lifecycle::graceful::{GracefulShutdown, ShutdownBegun, Watched, Watcher};
use crate::server::lifecycle::shutdown;

/// How long a client has, from connecting, to finish its TLS handshake (on
/// a TLS listener) and then send the first bytes of HTTP: the whole HTTP/2
/// preface, or a first byte that shows it is not one. One deadline for both,
/// so a client cannot spend it twice. Go's HTTP/2 server gives the preface
/// 10 s too; kube-apiserver gives the TLS handshake its ReadHeaderTimeout,
/// 32 s, which a client on a working network never needs.
pub(crate) const CONNECTION_SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a complete request head on HTTP/1.1, once
/// its first byte has arrived.
pub(super) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head accepted, as Go's net/http (and so kube-apiserver)
/// does: 1 MiB plus its 4 KiB of slack. Larger heads get 431. On HTTP/2 it
/// also bounds a header block across CONTINUATION frames: h2 (since 0.4.4)
/// ends a connection with GOAWAY ENHANCE_YOUR_CALM once a block runs to more
/// CONTINUATION frames than this size needs (about 1.25 times it at the
/// 16 KiB frame size), so a CONTINUATION flood (CVE-2024-27316's kind) costs
/// about 1.3 MiB per connection, not memory without end. Go's server (since
/// the CVE-2023-45288 fix) likewise closes a connection whose header frames
/// run past its MaxHeaderBytes.
pub(crate) const MAX_HEADER_BYTES: usize = (1 << 20) + 4096;
/// Streams one HTTP/2 connection may carry at once: kube-apiserver's (its
/// `--http2-max-streams-per-connection` is 0 by default, which
/// k8s.io/apiserver's secure serving turns into 100, the limit Go's client
/// assumes before SETTINGS). client-go's clients know it: a process with
/// more watches opens another connection. Each stream a client does not read
/// can hold a pass-through answer's bytes (see `crate::passthrough::budget`),
/// so this is also what one connection can pin.
pub(crate) const H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Streams a client may open and reset before the server has taken them up,
/// before the connection ends with GOAWAY ENHANCE_YOUR_CALM: the rapid reset
/// attack (CVE-2023-44487) sends HEADERS and RST_STREAM pairs as fast as it
/// can, and each pair would otherwise cost a request's set-up for nothing.
/// h2's own default, made explicit; a well-behaved client resets streams the
/// server has already accepted (a cancelled watch), which this does not count.
/// Go's server bounds the same attack differently: at most
/// MaxConcurrentStreams handlers run, and past 4 times as many waiting it
/// closes the connection.
const H2_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server may reset, over a connection's life, because the client
/// broke the protocol on them, before the connection ends with GOAWAY
/// ENHANCE_YOUR_CALM (RUSTSEC-2024-0003: invalid frames sent to make the
/// server generate resets). hyper's default, made explicit; a client that
/// errs on a thousand streams of one connection is not one to keep serving.
const H2_MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

/// The HTTP server settings every connection shares, one builder per
/// protocol: the listener picks by the connection's opening (see
/// [`Conn::serve`]).
pub(crate) struct HttpBuilder {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// How long an HTTP/2 connection may have no stream open (see
    /// [`super::activity`]).
    pub(crate) idle_timeout: Duration,
}

/// The HTTP server settings every API connection shares, with the default
/// idle timeout.
#[cfg(test)]
pub(crate) fn http_builder() -> Arc<HttpBuilder> {
    http_builder_idle(IDLE_TIMEOUT)
}

/// The HTTP server settings, with HTTP/2 connections closed after
/// `idle_timeout` without a stream (`--idle-connection-timeout`).
pub(crate) fn http_builder_idle(idle_timeout: Duration) -> Arc<HttpBuilder> {
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(512);
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10));
    Arc::new(HttpBuilder { http1, http2, idle_timeout })
}

/// A request handler bound to one connection's peer.
pub(crate) trait Handler: Clone + Send + Sync + 'static {
    fn handle(&self, req: Request<RequestBody>, peer: Peer) -> impl Future<Output = Response<ProxyBody>> + Send;
}

/// Where an accept loop serves its connections, and what it counts them against.
pub(crate) struct Serving<'a, H> {
    pub name: &'static str,
    pub builder: &'a Arc<HttpBuilder>,
    pub graceful: &'a GracefulShutdown,
    pub handler: H,
    /// `--max-connections`; `None` for the admin listener.
    pub budget: Option<Arc<ConnectionBudget>>,
    /// Put HTTP/2 connections behind a write-behind buffer (`--h2-write-batching`).
    pub h2_write_batching: bool,
    /// Each HTTP/2 answer's chance of ending its connection
    /// (`--goaway-chance`); never for the admin listener and the unix socket.
    pub goaway_chance: GoawayChance,
    /// Each HTTP/2 connection's maximum age (`--max-connection-age`); never
    /// for the admin listener and the unix socket.
    pub max_age: Option<MaxConnectionAge>,
    /// The server's end of watch streams (its graceful shutdown): each
    /// connection with a maximum age ends its own with a child of it.
    pub streams_stop: CancellationToken,
    /// [`CONNECTION_SETUP_TIMEOUT`], shorter in tests.
    pub setup_timeout: Duration,
    /// Stops accepting, and ends connections still in their set-up.
    pub stop: CancellationToken,
}

/// Why a connection ended before HTTP was served on it.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error("TLS handshake")]
    Tls(#[source] std::io::Error),
    #[error("TLS handshake not finished within {0:?} of connecting")]
    TlsTimedOut(Duration),
    #[error("reading the first bytes")]
    Opening(#[source] std::io::Error),
    #[error("no HTTP/2 preface or other first bytes within {0:?} of connecting")]
    OpeningTimedOut(Duration),
}

impl SetupError {
    /// The `stage` label of the connection error metric.
    fn stage(&self) -> &'static str {
        match self {
            Self::Tls(_) | Self::TlsTimedOut(_) => "tls",
            Self::Opening(_) | Self::OpeningTimedOut(_) => "preface",
        }
    }
}

/// What differs between the listeners' accept loops: what a connection
/// is, and who is at the other end.
trait Listen {
    type Stream: Send + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<(Self::Stream, Option<SocketAddr>)>> + Send;
}

impl Listen for TcpListener {
    type Stream = TcpStream;
    async fn accept(&self) -> std::io::Result<(TcpStream, Option<SocketAddr>)> {
        let (stream, addr) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, Some(addr)))
    }
}

impl Listen for UnixListener {
    type Stream = UnixStream;
    async fn accept(&self) -> std::io::Result<(UnixStream, Option<SocketAddr>)> {
        let (stream, _) = UnixListener::accept(self).await?;
        Ok((stream, None))
    }
}

/// A connection's set-up and serving, once accepted: `deadline` bounds its
/// set-up, `stop` ends it while in set-up.
struct Accepted<S, H> {
    stream: S,
    conn: Conn<H>,
    deadline: Instant,
    setup_timeout: Duration,
    stop: CancellationToken,
    h2_write_batching: bool,
}

/// A connection's serving once set up (see [`Conn::serve`]).
type ConnectionFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Accepts connections until `stop` is cancelled, each counted against the
/// budget and set up by `set_up` on a task of its own, which then serves it
/// (`None`: the set-up failed, or `stop` came first).
async fn accept_loop<L, H, F, Fut>(listener: L, serving: Serving<'_, H>, set_up: F)
where
    L: Listen,
    H: Handler,
    F: Fn(Accepted<L::Stream, H>) -> Fut,
    Fut: Future<Output = Option<ConnectionFuture>> + Send + 'static,
{
    let Serving {
        name,
        builder,
        graceful,
        handler,
        budget,
        h2_write_batching,
        goaway_chance,
        max_age,
        streams_stop,
        setup_timeout,
        stop,
    } = serving;
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
        let slot = match &budget {
            Some(budget) => match budget.open(addr.map(|a| a.ip())) {
                Some(slot) => Some(slot),
                // Past even the connections answered with a 429: closed at
                // once, so that descriptors never run out.
                None => continue,
            },
            None => None,
        };
        let over_connection_limit = slot.as_ref().is_some_and(|s| !s.within);
        let connection = slot.as_ref().map(|s| s.claim() as Arc<dyn crate::auth::UserShare>);
        let peer = Peer { addr, client_cert: None, over_connection_limit, connection, streams_stop: None };
        // A connection over the budget is there for its 429 only.
        let idle_timeout = if over_connection_limit { setup_timeout } else { builder.idle_timeout };
        let conn = Conn {
            name,
            peer,
            builder: builder.clone(),
            watcher: graceful.watcher(),
            handler: handler.clone(),
            idle_timeout,
            goaway_chance,
            // A connection over the budget is closed after its 429 anyway.
            max_age: max_age.filter(|_| !over_connection_limit),
            streams_stop: streams_stop.clone(),
        };
        let accepted = Accepted {
            stream,
            conn,
            deadline: Instant::now() + setup_timeout,
            setup_timeout,
            stop: stop.clone(),
            h2_write_batching,
        };
        // Boxed, and gone once the connection is set up: its state (the
        // accepted stream and connection, the handshake, the stop signal)
        // would otherwise size the task for the connection's life (about
        // 2.5 KiB of an idle watcher, by heaptrack), where serving needs
        // only the served future's pointer.
        let setup = Box::pin(set_up(accepted));
        let span = match addr {
            Some(addr) => tracing::debug_span!("conn", listener = name, peer = %addr),
            None => tracing::debug_span!("conn", listener = name),
        };
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _open = OpenConnection::new(name);
                let _slot = slot;
                let served = setup.await;
                if let Some(served) = served {
                    served.await
                }
            },
            span,
        ));
    }
}

/// A TCP connection ready for HTTP: TLS done if the listener has it, and
/// its opening read.
enum TcpReady {
    Plain(TcpStream, Opening),
    Tls(Box<TlsServerStream<TcpStream>>, Opening),
}

/// Accepts TCP connections until `stop` is cancelled.
pub(crate) async fn accept_tcp<H: Handler>(listener: TcpListener, tls: Option<ApiTls>, serving: Serving<'_, H>) {
    accept_loop(listener, serving, |a: Accepted<TcpStream, H>| {
        // The files as last read: this connection keeps them, whatever
        // changes after.
        let handshake = tls.as_ref().map(ApiTls::current);
        let config = handshake.as_ref().map(|h| h.config.clone());
        let client_ca = handshake.and_then(|h| h.client_ca.clone());
        async move {
            let ready = tokio::select! {
                _ = a.stop.cancelled() => return None,
                // Boxed: the TLS handshake's state would otherwise size the
                // connection's task, for the connection's life.
                ready = Box::pin(set_up_tcp(a.stream, config, a.deadline, a.setup_timeout)) => ready,
            };
            let conn = a.conn;
            match ready {
                Err(err) => {
                    setup_failed(conn.name, &err);
                    None
                }
                Ok(TcpReady::Plain(stream, opening)) => Some(if a.h2_write_batching && opening.is_h2_preface() {
                    conn.serve(Rewind::new(WriteBehind::tcp(stream), opening))
                } else {
                    conn.serve(Rewind::new(stream, opening))
                }),
                Ok(TcpReady::Tls(tls_stream, opening)) => {
                    let client_cert = client_ca.and_then(|ca| client_cert(&ca, &tls_stream));
                    let conn = Conn { peer: Peer { client_cert, ..conn.peer }, ..conn };
                    // ALPN decides; a client that skipped ALPN and sent the preface anyway is served HTTP/2 too.
                    let h2 = tls_stream.session().alpn_protocol() == Some(b"h2") || opening.is_h2_preface();
                    // The stream stays in its box: moved out, it would be
                    // held inline by the connection's future (twice, as the
                    // future's layout goes), and the emptied box kept until
                    // this arm ends, with the connection (about 2.4 KiB an
                    // idle HTTP/1.1 watcher over TLS, by heaptrack).
                    Some(if a.h2_write_batching && h2 {
                        conn.serve(Rewind::new(WriteBehind::new(tls_stream), opening))
                    } else {
                        conn.serve(Rewind::new(tls_stream, opening))
                    })
                }
            }
        }
    })
    .await
}

/// Accepts unix-socket connections until `stop` is cancelled.
pub(crate) async fn accept_unix<H: Handler>(listener: UnixListener, serving: Serving<'_, H>) {
    accept_loop(listener, serving, |mut a: Accepted<UnixStream, H>| async move {
        let opening = tokio::select! {
            _ = a.stop.cancelled() => return None,
            opening = read_opening_by(a.deadline, a.setup_timeout, &mut a.stream) => opening,
        };
        match opening {
            Err(err) => {
                setup_failed(a.conn.name, &err);
                None
            }
            Ok(opening) if a.h2_write_batching && opening.is_h2_preface() => {
                Some(a.conn.serve(Rewind::new(WriteBehind::unix(a.stream), opening)))
            }
            Ok(opening) => Some(a.conn.serve(Rewind::new(a.stream, opening))),
        }
    })
    .await
}

/// The TLS handshake, when the listener has TLS, then the opening, both by
/// `deadline`.
async fn set_up_tcp(
    mut stream: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpReady, SetupError> {
    let Some(config) = tls else {
        let opening = read_opening_by(deadline, timeout, &mut stream).await?;
        return Ok(TcpReady::Plain(stream, opening));
    };
    let mut tls_stream = match tokio::time::timeout_at(deadline, TlsServerStream::accept(config, stream)).await {
        Ok(handshake) => Box::new(handshake.map_err(SetupError::Tls)?),
        Err(_) => return Err(SetupError::TlsTimedOut(timeout)),
    };
    let opening = read_opening_by(deadline, timeout, &mut tls_stream).await?;
    Ok(TcpReady::Tls(tls_stream, opening))
}

async fn read_opening_by<IO: AsyncRead + Unpin>(
    deadline: Instant,
    timeout: Duration,
    io: &mut IO,
) -> Result<Opening, SetupError> {
    match tokio::time::timeout_at(deadline, read_opening(io)).await {
        Ok(read) => read.map_err(SetupError::Opening),
        Err(_) => Err(SetupError::OpeningTimedOut(timeout)),
    }
}

/// One connection's serving, but for its IO.
pub(super) struct Conn<H> {
    pub(super) name: &'static str,
    pub(super) peer: Peer,
    builder: Arc<HttpBuilder>,
    pub(super) watcher: Watcher,
    pub(super) handler: H,
    /// How long the connection may have no stream open (HTTP/2).
    idle_timeout: Duration,
    /// Each answer's chance of ending the connection (HTTP/2).
    goaway_chance: GoawayChance,
    /// The connection's maximum age (HTTP/2).
    max_age: Option<MaxConnectionAge>,
    /// The server's end of watch streams, parent of the connection's own.
    streams_stop: CancellationToken,
}

impl<H: Handler> Conn<H> {
    /// Serves HTTP/2 on `io` when it opened with the HTTP/2 preface, else
    /// HTTP/1.1: the choice hyper-util's automatic server makes from the
    /// same 24 bytes, without its second reading of them, which split a
    /// request head over two reads and so doubled hyper's HTTP/1.1 read
    /// buffer to 16 KiB. HTTP/1.1 starts at watchmux's own front (see
    /// [`h1_front`]), which serves watch requests itself and hands
    /// the connection to hyper at the first request of another kind. The
    /// connection is boxed, sized by its own protocol and IO: not, as inside
    /// the automatic server's enum, by the larger of HTTP/1.1's and HTTP/2's
    /// state, in the connection's task.
    fn serve<I>(self, io: Rewind<I>) -> ConnectionFuture
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if io.is_h2_preface() {
            let Self { name, peer, builder, watcher, handler, idle_timeout, goaway_chance, max_age, streams_stop } =
                self;
            let resets = EarlyResets::new();
            let activity = Activity::new(goaway_chance);
            let age = max_age.map(|limit| Box::new(ConnectionAge::new(limit, streams_stop.child_token())));
            let peer = Peer { streams_stop: age.as_ref().map(|age| age.streams_stop().clone()), ..peer };
            let service = service(handler, peer, resets.clone(), Some(activity.clone()), watcher.begun());
            let conn = builder.http2.serve_connection(TokioIo::new(io), service);
            let conn = watcher.watch(conn, http2::Connection::graceful_shutdown);
            let idle = Some(Box::new(Idle::new(activity, idle_timeout)));
            Box::pin(Served { name, conn, tripped: resets.tripped(), idle, age })
        } else {
            Box::pin(h1_front::serve(self, io))
        }
    }

    /// Serves the rest of an HTTP/1.1 connection with hyper (with upgrades),
    /// from the bytes `io` hands back first.
    pub(super) fn serve_with_hyper_http1<I>(self, io: Rewind<I>) -> ConnectionFuture
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // HTTP/1.1 has no GOAWAY: a watch ends at its timeout and is made
        // again on a new connection (see `super::goaway_chance` and
        // `super::max_age`).
        let Self { name, peer, builder, watcher, handler, .. } = self;
        let resets = EarlyResets::new();
        let service = service(handler, peer, resets.clone(), None, watcher.begun());
        let conn = builder.http1.serve_connection(TokioIo::new(io), service).with_upgrades();
        let conn = watcher.watch(conn, http1::UpgradeableConnection::graceful_shutdown);
        Box::pin(Served { name, conn, tripped: resets.tripped(), idle: None, age: None })
    }
}

#[cfg(test)]
impl<H: Handler> Conn<H> {
    /// A connection of the "test" listener, from an unknown peer.
    pub(super) fn for_test(handler: H, watcher: Watcher) -> Self {
        let peer = Peer::default();
        Self {
            name: "test",
            peer,
            builder: http_builder(),
            watcher,
            handler,
            idle_timeout: IDLE_TIMEOUT,
            goaway_chance: GoawayChance::NEVER,
            max_age: None,
            streams_stop: CancellationToken::new(),
        }
    }
}

/// hyper's service for one connection: the handler, with the connection's
/// peer, each request counted by `resets` until answered and, on HTTP/2, by
/// `activity` until its answer's body is dropped. A request that arrives
/// once `shutdown` has begun gets the API server's 429 for it instead.
fn service<H: Handler>(
    handler: H,
    peer: Peer,
    resets: Arc<EarlyResets>,
    activity: Option<Arc<Activity>>,
    shutdown: ShutdownBegun,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<ProxyBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send,
> + Clone {
    service_fn(move |req: Request<Incoming>| {
        let refused = shutdown.is_set().then(|| shutdown::refusal(req.version()));
        let req = req.map(RequestBody::from);
        let handler = handler.clone();
        let peer = peer.clone();
        let unanswered = resets.start();
        let activity = activity.clone();
        let stream = activity.as_ref().map(Activity::start);
        async move {
            // Boxed, so that what hyper keeps is small: its HTTP/1.1
            // dispatcher holds the allocation of the service's future for
            // the connection's life, and HTTP/2 a stream's task is sized
            // by it, while the handler's own future (about 9.5 KiB) is
            // freed once it has answered.
            let resp = match refused {
                Some(refused) => refused,
                None => Box::pin(handler.handle(req, peer)).await,
            };
            unanswered.answered();
            let resp = match (activity, stream) {
                (Some(activity), Some(stream)) => activity.answered(resp, stream),
                _ => resp,
            };
            Ok::<_, Infallible>(resp)
        }
    })
}

pin_project_lite::pin_project! {
    /// A connection served until it ends, or until most of its requests
    /// were cancelled before an answer. A future of its own for the same
    /// reason as [`Watched`]. An HTTP/2 connection is also asked to finish
    /// (GOAWAY) once idle too long or once an answer said `Connection: close`
    /// or drew the GOAWAY chance, or at its maximum age, after whose grace
    /// it is closed.
    struct Served<C> {
        name: &'static str,
        #[pin]
        conn: Watched<C>,
        #[pin]
        tripped: WaitForCancellationFutureOwned,
        idle: Option<Box<Idle>>,
        age: Option<Box<ConnectionAge>>,
    }
}

/// An HTTP/2 connection's idle timer and its request to close.
struct Idle {
    activity: Arc<Activity>,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    close: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Idle {
    fn new(activity: Arc<Activity>, timeout: Duration) -> Self {
        let sleep = Box::pin(tokio::time::sleep(timeout));
        let close = Box::pin(activity.close_requested().clone().cancelled_owned());
        Self { activity, timeout, sleep, close }
    }

    /// Why the connection should be asked to finish now, if it should. The
    /// timer wakes at the earliest the connection could be idle long
    /// enough, and checks again.
    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<&'static str> {
        if self.close.as_mut().poll(cx).is_ready() {
            let reason = self.activity.close_reason().unwrap_or(CloseReason::ConnectionClose);
            return Poll::Ready(reason.label());
        }
        while self.sleep.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            match self.activity.idle_deadline(self.timeout) {
                Some(deadline) if deadline <= now => return Poll::Ready("idle"),
                Some(deadline) => self.sleep.as_mut().reset(deadline),
                None => self.sleep.as_mut().reset(now + self.timeout),
            }
        }
        Poll::Pending
    }
}

impl<C: Future<Output = hyper::Result<()>>> Future for Served<C> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if let Some(age) = this.age.as_mut()
            && let Poll::Ready(action) = age.poll_action(cx)
        {
            match action {
                AgeAction::Finish => {
                    // Counted once: a connection already going (the GOAWAY
                    // chance, shutdown) only has its watches ended.
                    if !this.conn.is_finishing() {
                        counter!(m::CONNECTIONS_FINISHED, "listener" => *this.name, "reason" => "max_age").increment(1);
                    }
                    *this.idle = None;
                    this.conn.as_mut().finish();
                }
                AgeAction::Close => {
                    // As gRPC's MaxConnectionAgeGrace: what still runs is cut.
                    tracing::debug!(listener = *this.name, "maximum connection age's grace over; closing");
                    return Poll::Ready(());
                }
            }
        }
        if let Some(idle) = this.idle.as_mut()
            && let Poll::Ready(reason) = idle.poll_finish(cx)
        {
            *this.idle = None;
            counter!(m::CONNECTIONS_FINISHED, "listener" => *this.name, "reason" => reason).increment(1);
            this.conn.as_mut().finish();
        }
        if let Poll::Ready(served) = this.conn.poll(cx) {
            if let Err(err) = served {
                connection_error(this.name, "http", &err);
            }
            return Poll::Ready(());
        }
        if this.tripped.poll(cx).is_ready() {
            // Dropping the connection closes the socket without a GOAWAY:
            // the one handle that could send one (graceful shutdown) is the
            // watcher's.
            connection_error(this.name, "rapid_reset", &"most requests were cancelled before an answer");
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// The client certificate the handshake verified against `--client-ca-file`,
/// with its chain's validity window.
fn client_cert<I>(client_ca: &ClientCa, tls: &TlsServerStream<I>) -> Option<ClientCert> {
    client_ca.client_cert(tls.session().peer_certificates()?, std::time::SystemTime::now())
}

fn setup_failed(name: &'static str, err: &SetupError) {
    connection_error(name, err.stage(), &error_chain(err));
}

/// Bad input from one client is expected, not actionable: logged at debug
/// and counted.
pub(super) fn connection_error(name: &'static str, stage: &'static str, err: &dyn std::fmt::Display) {
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
pub(crate) struct AdminHandler(pub Arc<super::super::admin::AdminState>);

impl Handler for AdminHandler {
    async fn handle(&self, req: Request<RequestBody>, _peer: Peer) -> Response<ProxyBody> {
        match super::super::admin::handle(self.0.clone(), req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    }
}

mod h1_front;

#[cfg(test)]
mod tests;

/// Binds a unix socket, replacing a stale socket file left by a previous run.
pub(crate) fn bind_unix(path: &std::path::Path) -> anyhow::Result<UnixListener> {
    use anyhow::Context as _;
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        anyhow::ensure!(meta.file_type().is_socket(), "--listen-unix {} exists and is not a socket", path.display());
        std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    UnixListener::bind(path).with_context(|| format!("binding --listen-unix {}", path.display()))
}
