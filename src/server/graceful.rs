//! Graceful shutdown of served connections: hyper-util's `GracefulShutdown`,
//! for hyper's own HTTP/1.1 (with upgrades) and HTTP/2 connections.
//!
//! The listener serves each protocol with hyper's builder for it (see
//! [`super::listener::Conn::serve`]); hyper-util's watcher takes only
//! connections of a trait it seals and does not implement for hyper's
//! HTTP/1.1 connection with upgrades, so this is the same watcher, given the
//! connection's own `graceful_shutdown`.

use std::future::Future;
use std::pin::{Pin, pin};

use tokio::sync::watch;

/// Signals every watched connection to finish, then waits for them.
pub(crate) struct GracefulShutdown {
    tx: watch::Sender<()>,
}

/// One connection's share of a [`GracefulShutdown`]: counted until the
/// connection it watches has ended.
pub(crate) struct Watcher {
    rx: watch::Receiver<()>,
}

impl GracefulShutdown {
    pub(crate) fn new() -> Self {
        let (tx, _) = watch::channel(());
        Self { tx }
    }

    /// A watcher for one more connection.
    pub(crate) fn watcher(&self) -> Watcher {
        Watcher { rx: self.tx.subscribe() }
    }

    /// Connections being watched.
    pub(crate) fn count(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Asks every watched connection to finish, and waits until all have.
    pub(crate) async fn shutdown(self) {
        let _ = self.tx.send(());
        self.tx.closed().await;
    }
}

impl Watcher {
    /// Serves `conn` to its end; once shutdown begins, first calls
    /// `graceful_shutdown` on it (hyper then ends the connection when the
    /// requests in progress are answered) and serves it on.
    pub(crate) async fn watch<C, E>(self, conn: C, graceful_shutdown: fn(Pin<&mut C>)) -> Result<(), E>
    where
        C: Future<Output = Result<(), E>>,
    {
        let Self { mut rx } = self;
        let mut conn = pin!(conn);
        tokio::select! {
            served = conn.as_mut() => return served,
            // A dropped sender counts as a signal too, as in hyper-util.
            _ = rx.changed() => {}
        }
        graceful_shutdown(conn.as_mut());
        let served = conn.await;
        drop(rx);
        served
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
