//! How long watchmux waits for the upstream, at each step where an API
//! server that hangs would otherwise hang every client behind watchmux.
//!
//! - **Connect**: the TCP handshake (`--upstream-connect-timeout`).
//! - **TLS handshake**: an upstream that accepts TCP and never answers TLS
//!   (a frozen process: the kernel still completes the TCP handshake).
//!   Bounded together with the connect, as one dial, by
//!   `--upstream-tls-handshake-timeout` on top of the connect timeout;
//!   Go's default transport gives the handshake 10 s.
//! - **Response headers**: a request sent on a connection that is up, to an
//!   API server that does not answer (`--upstream-response-header-timeout`).
//!   kube-apiserver ends a request that is not long-running itself after
//!   its own `--request-timeout` (60 s) with a 504 of its own, so the default
//!   waits a little longer than that: the API server's answer comes first
//!   whenever it can.
//! - **A silent connection**: HTTP/2 PINGs (every 30 s, 10 s to answer) and
//!   TCP keep-alive close a connection whose peer stopped answering, which
//!   ends the bodies streaming over it (the upstream module's constants).
//! - **An upstream known to be down**: once the readiness probe finds it
//!   unreachable or unresponsive (hung, or a half-open path that swallows
//!   requests: once it was ready, three probes in a row without an answer,
//!   so that an API server merely busy for a few seconds is not taken for
//!   one), a request that must reach it waits at most
//!   `--upstream-timeout` (5 s) for its dial and headers, instead of the
//!   full bounds above: clients learn of an outage in seconds, while cached
//!   answers that need no proof keep serving.
//!
//! Failing any of these is a 503 naming the cause (the pass-through's
//! Status), counted by cause in `watchmux_upstream_errors_total`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The step timeouts, from the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTimeouts {
    /// The TCP connect (`--upstream-connect-timeout`).
    pub connect: Duration,
    /// The TLS handshake after it (`--upstream-tls-handshake-timeout`).
    pub tls_handshake: Duration,
    /// A sent request's response headers (`--upstream-response-header-timeout`).
    pub response_header: Duration,
    /// Dial and headers together while the upstream is known to be down
    /// (`--upstream-timeout`).
    pub when_down: Duration,
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            tls_handshake: Duration::from_secs(10),
            response_header: Duration::from_secs(65),
            when_down: Duration::from_secs(5),
        }
    }
}

impl UpstreamTimeouts {
    /// The longest a dial (TCP connect, then the TLS handshake) may take.
    pub(crate) fn dial(&self) -> Duration {
        self.connect + self.tls_handshake
    }
}

/// A dial that took too long: TCP connected (or not) but the TLS handshake
/// never finished within the bound.
#[derive(Debug, thiserror::Error)]
#[error("no TCP connection and TLS handshake with the upstream within {0:?} (is the API server hung?)")]
pub struct DialTimeout(pub Duration);

/// A request whose response headers did not come in time.
#[derive(Debug, thiserror::Error)]
#[error("the upstream sent no response headers within {0:?}")]
pub struct ResponseHeaderTimeout(pub Duration);

/// A connector whose every dial (the inner connector's TCP connect and TLS
/// handshake) is bounded by `limit`.
#[derive(Debug, Clone)]
pub(crate) struct TimedConnector<C> {
    inner: C,
    limit: Duration,
}

impl<C> TimedConnector<C> {
    pub(crate) fn new(inner: C, limit: Duration) -> Self {
        Self { inner, limit }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<C> tower_service::Service<http::Uri> for TimedConnector<C>
where
    C: tower_service::Service<http::Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let limit = self.limit;
        let dial = self.inner.call(uri);
        Box::pin(async move {
            match tokio::time::timeout(limit, dial).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(DialTimeout(limit)) as BoxError),
            }
        })
    }
}

/// Waits for `response` (a request's response headers) at most `limit`.
pub(crate) async fn response_headers<T, E>(
    limit: Duration,
    response: impl Future<Output = Result<T, E>>,
) -> Result<T, ResponseHeaderOutcome<E>> {
    match tokio::time::timeout(limit, response).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(err)) => Err(ResponseHeaderOutcome::Failed(err)),
        Err(_) => Err(ResponseHeaderOutcome::TimedOut(ResponseHeaderTimeout(limit))),
    }
}

/// Why no response came.
#[derive(Debug)]
pub(crate) enum ResponseHeaderOutcome<E> {
    Failed(E),
    TimedOut(ResponseHeaderTimeout),
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_service::Service as _;

    /// A connector whose dials never finish (an upstream that accepts TCP
    /// and never answers TLS).
    #[derive(Clone)]
    struct Hangs;

    impl tower_service::Service<http::Uri> for Hangs {
        type Response = ();
        type Error = std::io::Error;
        type Future = std::future::Pending<Result<(), std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Uri) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_dial_that_never_finishes_fails_at_its_bound() {
        let timeouts = UpstreamTimeouts::default();
        let mut connector = TimedConnector::new(Hangs, timeouts.dial());
        let started = tokio::time::Instant::now();
        let err = connector.call("https://127.0.0.1:1".parse().unwrap()).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(20));
        assert!(err.to_string().contains("TLS handshake"), "{err}");
        assert!(err.downcast_ref::<DialTimeout>().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn response_headers_wait_their_bound_and_no_longer() {
        let started = tokio::time::Instant::now();
        let outcome =
            response_headers(Duration::from_secs(65), std::future::pending::<Result<(), ()>>()).await.unwrap_err();
        assert!(
            matches!(outcome, ResponseHeaderOutcome::TimedOut(ResponseHeaderTimeout(d)) if d == Duration::from_secs(65))
        );
        assert_eq!(started.elapsed(), Duration::from_secs(65));
        let ok = response_headers(Duration::from_secs(1), async { Ok::<_, ()>(7) }).await;
        assert!(matches!(ok, Ok(7)));
    }
}
