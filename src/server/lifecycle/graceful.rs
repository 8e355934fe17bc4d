//! Graceful shutdown of served connections: hyper-util's `GracefulShutdown`,
//! for hyper's own HTTP/1.1 (with upgrades) and HTTP/2 connections.
//!
//! The listener serves each protocol with hyper's builder for it (see
//! `listener::Conn::serve`); hyper-util's watcher takes only
//! connections of a trait it seals and does not implement for hyper's
//! HTTP/1.1 connection with upgrades, so this is the same watcher, given the
//! connection's own `graceful_shutdown`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture, WaitForCancellationFutureOwned};

/// Signals every watched connection to finish, then waits for them. Dropped
/// without [`Self::shutdown`], it signals them too, as hyper-util's does.
pub(crate) struct GracefulShutdown {
    signal: CancellationToken,
    begun: ShutdownBegun,
    /// Each watcher holds a receiver until its connection has ended.
    tx: watch::Sender<()>,
}

/// One connection's share of a [`GracefulShutdown`]: counted until the
/// connection it watches has ended.
pub(crate) struct Watcher {
    signal: CancellationToken,
    begun: ShutdownBegun,
    counted: watch::Receiver<()>,
}

impl GracefulShutdown {
    pub(crate) fn new() -> Self {
        let (tx, _) = watch::channel(());
        Self { signal: CancellationToken::new(), begun: ShutdownBegun::default(), tx }
    }

    /// A watcher for one more connection.
    pub(crate) fn watcher(&self) -> Watcher {
        Watcher { signal: self.signal.clone(), begun: self.begun.clone(), counted: self.tx.subscribe() }
    }

    /// Connections being watched.
    pub(crate) fn count(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Asks every watched connection to finish, and waits until all have.
    pub(crate) async fn shutdown(self) {
        self.begun.set();
        self.signal.cancel();
        self.tx.closed().await;
    }
}

impl Drop for GracefulShutdown {
    fn drop(&mut self) {
        self.begun.set();
        self.signal.cancel();
    }
}

impl Watcher {
    /// Serves `conn` to its end; once shutdown begins, first calls
    /// `graceful_shutdown` on it (hyper then ends the connection when the
    /// requests in progress are answered) and serves it on.
    pub(crate) fn watch<C: Future>(self, conn: C, graceful_shutdown: fn(Pin<&mut C>)) -> Watched<C> {
        let Self { signal, counted, begun: _ } = self;
        Watched { conn, graceful_shutdown, signal: signal.cancelled_owned(), signalled: false, _counted: counted }
    }

    /// True once shutdown has begun.
    pub(crate) fn shutdown_begun(&self) -> bool {
        self.begun.is_set()
    }

    /// Whether shutdown has begun, for the connection's requests: one that
    /// arrives once it is cancelled gets [`super::shutdown::refusal`].
    pub(crate) fn begun(&self) -> ShutdownBegun {
        self.begun.clone()
    }

    /// Completes when shutdown begins: for a connection served outside
    /// hyper, which ends itself (see `crate::server::connection::listener::h1_front`).
    pub(crate) fn on_shutdown(&self) -> WaitForCancellationFuture<'_> {
        self.signal.cancelled()
    }
}

/// Set once shutdown begins: one atomic load to read, where the token's
/// `is_cancelled` takes a mutex every connection's token shares (read at
/// every request).
#[derive(Debug, Clone, Default)]
pub(crate) struct ShutdownBegun(Arc<AtomicBool>);

impl ShutdownBegun {
    fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

pin_project_lite::pin_project! {
    /// A connection under a [`Watcher`]: a future of its own, not an `async`
    /// block, which would hold the connection twice (hyper's HTTP/1.1
    /// connection is about 800 bytes; its watched and served futures were
    /// 1.8 and 3.8 KiB, for every idle connection).
    pub(crate) struct Watched<C> {
        #[pin]
        conn: C,
        graceful_shutdown: fn(Pin<&mut C>),
        #[pin]
        signal: WaitForCancellationFutureOwned,
        signalled: bool,
        _counted: watch::Receiver<()>,
    }
}

impl<C> Watched<C> {
    /// True once the connection was asked to finish, by [`Self::finish`] or
    /// the shutdown.
    pub(crate) fn is_finishing(&self) -> bool {
        self.signalled
    }

    /// Asks this one connection to finish as shutdown would (GOAWAY on
    /// HTTP/2, close once idle on HTTP/1.1), at most once.
    pub(crate) fn finish(self: Pin<&mut Self>) {
        let this = self.project();
        if !*this.signalled {
            *this.signalled = true;
            (this.graceful_shutdown)(this.conn);
        }
    }
}

impl<C: Future> Future for Watched<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let mut this = self.project();
        if !*this.signalled && this.signal.poll(cx).is_ready() {
            *this.signalled = true;
            (this.graceful_shutdown)(this.conn.as_mut());
        }
        this.conn.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use http::Response;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;
    use crate::body::{self, ProxyBody};

    /// An idle keep-alive HTTP/1.1 connection is closed by the shutdown, and
    /// the shutdown waits for it, not for ever.
    #[tokio::test]
    async fn shutdown_closes_an_idle_http1_connection_and_waits_for_it() {
        let graceful = GracefulShutdown::new();
        let (mut client, server) = duplex(4096);
        let service =
            service_fn(|_req| async { Ok::<_, Infallible>(Response::new(body::full("hi")) as Response<ProxyBody>) });
        let conn = http1::Builder::new().serve_connection(TokioIo::new(server), service).with_upgrades();
        let served = tokio::spawn(graceful.watcher().watch(conn, http1::UpgradeableConnection::graceful_shutdown));
        assert_eq!(graceful.count(), 1);

        client.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
        let mut answer = vec![0u8; 1024];
        let n = client.read(&mut answer).await.unwrap();
        assert!(answer[..n].ends_with(b"hi"), "{:?}", String::from_utf8_lossy(&answer[..n]));

        tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.expect("shutdown waited for ever");
        served.await.unwrap().unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "more after the close: {rest:?}");
    }

    /// A connection that ends once asked to shut down.
    struct Asked(bool);

    impl Future for Asked {
        type Output = Result<(), Infallible>;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            if self.0 { Poll::Ready(Ok(())) } else { Poll::Pending }
        }
    }

    /// Nothing asks a watched connection to shut down until the shutdown
    /// does, or until the `GracefulShutdown` is dropped (as hyper-util's).
    #[tokio::test]
    async fn shutdown_and_drop_both_ask_the_connection_to_finish() {
        use futures_util::FutureExt;
        let ask: fn(Pin<&mut Asked>) = |mut conn| conn.0 = true;
        let graceful = GracefulShutdown::new();
        let mut watched = std::pin::pin!(graceful.watcher().watch(Asked(false), ask));
        assert!(watched.as_mut().now_or_never().is_none(), "asked to finish before any shutdown");
        drop(graceful);
        tokio::time::timeout(Duration::from_secs(10), watched).await.expect("not asked at the drop").unwrap();

        let graceful = GracefulShutdown::new();
        let watched = tokio::spawn(graceful.watcher().watch(Asked(false), ask));
        tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.expect("shutdown waited for ever");
        watched.await.unwrap().unwrap();
    }

    /// A connection that ends on its own stops being counted.
    #[tokio::test]
    async fn a_finished_connection_is_no_longer_counted() {
        let graceful = GracefulShutdown::new();
        let conn = async { Ok::<(), Infallible>(()) };
        graceful.watcher().watch(conn, |_| panic!("no shutdown was asked")).await.unwrap();
        assert_eq!(graceful.count(), 0);
        tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.unwrap();
    }
}
