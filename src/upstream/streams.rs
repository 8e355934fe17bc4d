//! Passed-through requests on a small, growing pool of HTTP/2 connections.
//!
//! hyper's pooled client keeps one HTTP/2 connection per upstream and queues
//! every request on it. That is two ways for one client to hold what others
//! need:
//!
//! - **Stream slots.** kube-apiserver allows 100 concurrent streams per
//!   connection; 100 passed-through watches used them all and every other
//!   request waited. Long-running requests went on HTTP/1.1 connections of
//!   their own instead, one TLS handshake each (3x the API server's CPU per
//!   request for 1,000 anonymous watches). Here a connection carries at most
//!   [`STREAMS_PER_CONNECTION`] streams and the pool opens another when
//!   every one is full, as Go's client does.
//! - **Flow-control window.** A client that does not read its answer stops
//!   watchmux reading the upstream stream; the stream's window fills, and
//!   with hyper's defaults (2 MiB per stream, 5 MiB per connection) three
//!   such streams took the whole connection's window, stalling every other
//!   body on it. Here the connection window is the stream window times the
//!   streams a connection may carry, so stalled streams hold only their own
//!   window, never the connection's.
//!
//! A stream's slot is held until its response body is dropped
//! ([`UpstreamBody`]). An upstream that does not speak HTTP/2 (no `h2` in
//! ALPN, plain `http://`, `--upstream-http1-only`) gets HTTP/1.1 connections
//! instead, one per request in flight and kept idle for the next.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{H2_KEEPALIVE_INTERVAL, H2_KEEPALIVE_TIMEOUT, HttpsClient, SendError, UpstreamConnector};
use crate::body::ProxyBody;

/// Streams one pooled connection carries at most: kube-apiserver's default
/// `--http2-max-streams-per-connection`. An API server set lower makes the
/// excess wait inside the connection for one of its streams, as before.
pub(crate) const STREAMS_PER_CONNECTION: usize = 100;
/// Each stream's receive window: what one stalled stream can hold (buffered
/// in watchmux until its client reads; the unit of the pass-through budget,
/// `crate::passthrough::budget`), and a stream's throughput per round trip
/// (256 MB/s at 1 ms). kube-apiserver's own per-stream receive buffer, for
/// request bodies, is the same 256 KiB.
pub(crate) const STREAM_WINDOW: u32 = 256 << 10;
/// The connection's receive window: every stream's window at once, so that
/// no set of stalled streams can close it for the others (Go's client has
/// 4 MiB and 1 GiB: 256 streams' worth).
pub(crate) const CONNECTION_WINDOW: u32 = STREAM_WINDOW * STREAMS_PER_CONNECTION as u32;

/// A copy of `req` to send again, for a request without a body (a GET, a
/// watch): one with a body cannot be replayed once sent.
fn retryable_copy(req: &Request<ProxyBody>) -> Option<Request<ProxyBody>> {
    if !http_body::Body::is_end_stream(req.body()) {
        return None;
    }
    let mut copy = Request::builder().method(req.method().clone()).uri(req.uri().clone()).version(req.version());
    *copy.headers_mut()? = req.headers().clone();
    copy.body(crate::body::empty()).ok()
}

/// True when the upstream did not process the request: its stream was
/// refused (`REFUSED_STREAM`), or came after the last stream a GOAWAY said
/// it would serve, or the connection was closed before it was sent.
fn is_unprocessed(err: &hyper::Error) -> bool {
    if err.is_canceled() {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR));
        }
        source = e.source();
    }
    false
}

/// One pooled HTTP/2 connection.
struct Conn {
    sender: http2::SendRequest<ProxyBody>,
    streams: Arc<Semaphore>,
}

impl Conn {
    fn is_idle(&self) -> bool {
        self.streams.available_permits() == STREAMS_PER_CONNECTION
    }
}

#[derive(Default)]
struct State {
    conns: Vec<Conn>,
    /// The upstream did not negotiate HTTP/2: every request uses `http1`.
    http1_only: bool,
}

/// The pool. Cheap to share behind an `Arc`; one per TLS identity.
pub(crate) struct StreamPool {
    connector: UpstreamConnector,
    http1: HttpsClient,
    state: parking_lot::Mutex<State>,
    /// Speak HTTP/2 on plain TCP without asking (tests' upstreams).
    #[cfg(test)]
    prior_knowledge: bool,
    /// Held while a connection is opened, so a burst of requests opens one
    /// connection, not one each. It keeps when the last opening failed:
    /// requests that waited for that attempt fail with it rather than
    /// trying again one after another.
    opening: tokio::sync::Mutex<Option<(Instant, Arc<str>)>>,
}

/// Where a request goes.
enum Route {
    Stream(http2::SendRequest<ProxyBody>, OwnedSemaphorePermit),
    Http1,
}

impl StreamPool {
    /// A pool connecting with `connector` (offering `h2` in ALPN), or with
    /// `http1` only when `http2` is false or the upstream declines HTTP/2.
    pub(super) fn new(connector: UpstreamConnector, http1: HttpsClient, http2: bool) -> Self {
        let state = State { conns: Vec::new(), http1_only: !http2 };
        Self {
            connector,
            http1,
            state: parking_lot::Mutex::new(state),
            #[cfg(test)]
            prior_knowledge: false,
            opening: tokio::sync::Mutex::new(None),
        }
    }

    /// Sends `req` (its URI absolute) on a stream of a pooled connection.
    ///
    /// A request the upstream refused unprocessed, because the connection
    /// was closing (a GOAWAY for streams above the last one it will serve:
    /// kube-apiserver's idle and `--goaway-chance` closes), is sent once
    /// more on another connection when it has no body to replay, as Go's
    /// transport and hyper's pooled client do; without it about 1.5% of
    /// pass-through requests got a 503 under the auth fuzzer's load.
    pub(super) async fn send(&self, req: Request<ProxyBody>) -> Result<Response<UpstreamBody>, SendError> {
        let again = retryable_copy(&req);
        match self.send_once(req).await {
            Err(SendError::Stream(err)) if again.is_some() && is_unprocessed(&err) => {
                tracing::debug!(error = %err, "upstream refused a stream unprocessed; sending it again");
                self.send_once(again.expect("checked")).await
            }
            other => other,
        }
    }

    async fn send_once(&self, req: Request<ProxyBody>) -> Result<Response<UpstreamBody>, SendError> {
        match self.route(req.uri()).await? {
            Route::Http1 => {
                let resp = self.http1.request(req).await?;
                Ok(resp.map(UpstreamBody::unpooled))
            }
            Route::Stream(mut sender, permit) => {
                let resp = sender.send_request(req).await.map_err(SendError::Stream)?;
                Ok(resp.map(|body| UpstreamBody { inner: body, _stream: Some(permit) }))
            }
        }
    }

    async fn route(&self, uri: &Uri) -> Result<Route, SendError> {
        if let Some(route) = self.free_stream() {
            return Ok(route);
        }
        let asked = Instant::now();
        let mut opening = self.opening.lock().await;
        if let Some(route) = self.free_stream() {
            return Ok(route);
        }
        if let Some((failed_at, why)) = opening.as_ref()
            && *failed_at >= asked
        {
            return Err(SendError::Connect(why.clone()));
        }
        match self.open(uri).await {
            Ok(Some(conn)) => {
                *opening = None;
                let permit = conn.streams.clone().try_acquire_owned().expect("a new connection has free streams");
                let route = Route::Stream(conn.sender.clone(), permit);
                self.state.lock().conns.push(conn);
                Ok(route)
            }
            Ok(None) => {
                self.state.lock().http1_only = true;
                Ok(Route::Http1)
            }
            Err(why) => {
                *opening = Some((Instant::now(), why.clone()));
                Err(SendError::Connect(why))
            }
        }
    }

    /// A free stream on an open connection, or HTTP/1.1. Drops closed
    /// connections, and idle ones beyond the first idle one.
    fn free_stream(&self) -> Option<Route> {
        let mut state = self.state.lock();
        if state.http1_only {
            return Some(Route::Http1);
        }
        state.conns.retain(|c| !c.sender.is_closed());
        let mut idle_seen = false;
        state.conns.retain(|c| {
            let surplus = c.is_idle() && idle_seen;
            idle_seen |= c.is_idle();
            !surplus
        });
        state.conns.iter().find_map(|c| {
            let permit = c.streams.clone().try_acquire_owned().ok()?;
            Some(Route::Stream(c.sender.clone(), permit))
        })
    }

    /// Opens a connection: HTTP/2 when the upstream negotiates it, else
    /// `None` (it is closed again and HTTP/1.1 used from then on).
    async fn open(&self, uri: &Uri) -> Result<Option<Conn>, Arc<str>> {
        // The whole chain: "tcp connect error" alone hides "Connection refused".
        let why = |e: &(dyn std::error::Error + 'static)| Arc::<str>::from(crate::error::error_chain(e));
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut connector, cx))
            .await
            .map_err(|e| why(&*e))?;
        let io = tower_service::Service::call(&mut connector, uri.clone()).await.map_err(|e| why(&*e))?;
        #[cfg(test)]
        let h2 = self.prior_knowledge || io.connected().is_negotiated_h2();
        #[cfg(not(test))]
        let h2 = io.connected().is_negotiated_h2();
        if !h2 {
            return Ok(None);
        }
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .keep_alive_interval(H2_KEEPALIVE_INTERVAL)
            .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .handshake(io)
            .await
            .map_err(|e| why(&e))?;
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(error = %err, "pooled upstream connection ended");
            }
        });
        tracing::debug!("opened a pooled upstream HTTP/2 connection");
        Ok(Some(Conn { sender, streams: Arc::new(Semaphore::new(STREAMS_PER_CONNECTION)) }))
    }

    /// Open HTTP/2 connections and the streams in use on them.
    #[cfg(test)]
    pub(crate) fn usage(&self) -> (usize, usize) {
        let state = self.state.lock();
        let used = state.conns.iter().map(|c| STREAMS_PER_CONNECTION - c.streams.available_permits()).sum();
        (state.conns.len(), used)
    }
}

/// How long an idle HTTP/1.1 pass-through connection is kept for reuse.
pub(crate) const HTTP1_IDLE: Duration = Duration::from_secs(90);

/// A passed-through response's body: holds its stream's slot until dropped.
pub struct UpstreamBody {
    inner: Incoming,
    _stream: Option<OwnedSemaphorePermit>,
}

impl UpstreamBody {
    /// A body on a connection of its own (no stream slot to give back).
    pub(super) fn unpooled(inner: Incoming) -> Self {
        Self { inner, _stream: None }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use hyper_util::client::legacy::connect::HttpConnector;

    use http_body_util::BodyExt;

    use super::*;
    use crate::body;

    const BIG: usize = 4 << 20;

    /// An HTTP/2 (prior knowledge) upstream allowing kube-apiserver's 100
    /// streams per connection, with hyper's default windows: `/big` answers
    /// 4 MiB, anything else `ok`. Counts the connections it accepted.
    async fn upstream() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let body = if req.uri().path() == "/big" { Bytes::from(vec![b'x'; BIG]) } else { "ok".into() };
                    Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(body)))
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                builder.max_concurrent_streams(STREAMS_PER_CONNECTION as u32);
                tokio::spawn(async move { builder.serve_connection(io, service).await });
            }
        });
        (addr, accepted)
    }

    #[test]
    fn only_requests_without_a_body_are_sent_again() {
        let get = Request::get("http://h/api/v1/pods?watch=1").header("x-a", "b").body(body::empty()).unwrap();
        let copy = retryable_copy(&get).expect("a GET is replayable");
        assert_eq!(
            (copy.method(), copy.uri(), &copy.headers()["x-a"]),
            (get.method(), get.uri(), &get.headers()["x-a"])
        );
        let post = Request::post("http://h/api/v1/pods").body(body::full("{}")).unwrap();
        assert!(retryable_copy(&post).is_none());
    }

    /// A pool dialing `addr`, the one endpoint.
    fn pool(addr: SocketAddr) -> StreamPool {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let tls = crate::upstream::tls::client_config(&crate::upstream::kubeconfig::UpstreamConfig::for_test(
            "http://127.0.0.1:1",
        ))
        .unwrap();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http.clone());
        let connector = crate::upstream::timeouts::TimedConnector::new(connector, Duration::from_secs(20));
        let endpoints = crate::upstream::endpoints::Endpoints::new([format!("http://{addr}/").parse().unwrap()]);
        let connector = crate::upstream::endpoints::EndpointDialer::new(
            endpoints,
            crate::upstream::endpoints::Choice::Spread,
            connector,
        );
        let http1 = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector.clone());
        StreamPool { prior_knowledge: true, ..StreamPool::new(connector, http1, true) }
    }

    fn get(addr: SocketAddr, path: &str) -> Request<ProxyBody> {
        Request::get(format!("http://{addr}{path}")).body(body::empty()).unwrap()
    }

    #[tokio::test]
    async fn bodies_nobody_reads_do_not_stall_the_other_streams_of_their_connection() {
        let (addr, accepted) = upstream().await;
        let pool = pool(addr);
        let mut unread = Vec::new();
        for _ in 0..10 {
            unread.push(pool.send(get(addr, "/big")).await.unwrap());
        }
        // Long enough for the upstream to fill every window it may.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let read = async {
            let resp = pool.send(get(addr, "/big")).await.unwrap();
            resp.into_body().collect().await.unwrap().to_bytes().len()
        };
        let len = tokio::time::timeout(Duration::from_secs(5), read).await.expect("a body behind 10 unread ones");
        assert_eq!(len, BIG);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "all on one connection");
        assert_eq!(pool.usage(), (1, 10), "the read body gave its stream back");
        drop(unread);
    }

    #[tokio::test]
    async fn a_connection_whose_streams_are_used_up_gets_a_sibling_and_idle_ones_close() {
        let (addr, accepted) = upstream().await;
        let pool = pool(addr);
        let mut held = Vec::new();
        for _ in 0..STREAMS_PER_CONNECTION + 50 {
            held.push(pool.send(get(addr, "/watch")).await.unwrap());
        }
        assert_eq!(pool.usage(), (2, STREAMS_PER_CONNECTION + 50));
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "150 streams, two connections");
        held.clear();
        let resp = pool.send(get(addr, "/")).await.unwrap();
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "ok");
        assert_eq!(pool.usage().0, 1, "one idle connection is kept, the other closed");
    }
}
