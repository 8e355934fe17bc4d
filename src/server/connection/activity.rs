//! What an HTTP/2 connection is doing, for the decisions that end it:
//! the idle timeout, and a GOAWAY after an answer that says so.
//!
//! - **Idle timeout.** kube-apiserver's HTTP/2 server (Go's, with
//!   `IdleTimeout: 90 * time.Second` in k8s.io/apiserver's secure serving)
//!   sends GOAWAY and closes a connection that has had no stream open for
//!   that long; PINGs do not count as activity. Without it, clients that
//!   open connections and answer PINGs held every slot of
//!   `--max-connections` for as long as they liked. A connection's streams
//!   are counted from the request's arrival until its response body is
//!   dropped (sent, or reset), so a watch that streams keeps its connection.
//! - **GOAWAY after an answer.** Go's HTTP/2 server reads a handler's
//!   `Connection: close` response header as "finish this connection": it
//!   drops the header and starts a graceful shutdown (GOAWAY, then close once
//!   the open streams are done). kube-apiserver sets it on every answer to an
//!   anonymous or unauthenticated HTTP/2 request (UnauthenticatedHTTP2DOSMitigation),
//!   and watchmux on its 429 to a connection over the connection budget;
//!   hyper would only drop the header, so the listener looks for it (see
//!   [`Activity::answered`]).
//!
//! HTTP/1.1 needs neither: hyper's and the front's header read timeout
//! already closes a keep-alive connection that sends no request, and
//! `Connection: close` is HTTP/1.1's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderValue, Response, header};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::body::{self, ProxyBody};

/// How long an HTTP/2 connection may go without an open stream before it is
/// sent GOAWAY and closed: kube-apiserver's `IdleTimeout`, for HTTP/1.1
/// keep-alive and HTTP/2 alike; `--idle-connection-timeout`'s default.
#[cfg(test)]
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// One HTTP/2 connection's streams in progress, when the last one ended, and
/// whether an answer asked for the connection to end.
#[derive(Debug)]
pub(crate) struct Activity {
    open: AtomicUsize,
    /// When the last stream ended (or the connection began).
    idle_since: parking_lot::Mutex<Instant>,
    /// Cancelled when an answer said `Connection: close`.
    close: CancellationToken,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            idle_since: parking_lot::Mutex::new(Instant::now()),
            close: CancellationToken::new(),
        })
    }

    /// Counts a stream as open until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    /// The answer `resp` to a stream counted by `guard`: a `Connection:
    /// close` in it is taken out and asks for a GOAWAY; the body keeps the
    /// stream counted until it is dropped.
    pub(crate) fn answered(&self, mut resp: Response<ProxyBody>, guard: StreamGuard) -> Response<ProxyBody> {
        if resp.headers_mut().remove(header::CONNECTION).is_some_and(|v| is_close(&v)) {
            self.close.cancel();
        }
        resp.map(|inner| body::holding(inner, guard))
    }

    /// When the connection should go, idle since `idle_since` with no
    /// stream open; `None` while a stream is open.
    pub(crate) fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        // The time first: a stream that ends between the two reads leaves a
        // later `idle_since`, which the next check sees.
        let since = *self.idle_since.lock();
        (self.open.load(Ordering::Acquire) == 0).then(|| since + timeout)
    }

    /// The token cancelled when an answer asks for the connection to end.
    pub(crate) fn close_requested(&self) -> &CancellationToken {
        &self.close
    }
}

fn is_close(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
}

/// One open stream of an [`Activity`].
#[derive(Debug)]
pub(crate) struct StreamGuard(Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        *activity.idle_since.lock() = Instant::now();
        activity.open.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_only_while_no_stream_is_open() {
        let activity = Activity::new();
        let started = Instant::now();
        assert_eq!(activity.idle_deadline(IDLE_TIMEOUT), Some(started + IDLE_TIMEOUT));
        let guard = activity.start();
        assert_eq!(activity.idle_deadline(IDLE_TIMEOUT), None);
        tokio::time::advance(Duration::from_secs(100)).await;
        let resp = activity.answered(Response::new(body::full("x")), guard);
        // The body, not the head, holds the stream.
        assert_eq!(activity.idle_deadline(IDLE_TIMEOUT), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(resp);
        assert_eq!(activity.idle_deadline(IDLE_TIMEOUT), Some(Instant::now() + IDLE_TIMEOUT));
    }

    #[test]
    fn connection_close_is_taken_out_and_asks_for_goaway() {
        let activity = Activity::new();
        let mut resp = Response::new(body::empty());
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        let resp = activity.answered(resp, activity.start());
        assert!(!resp.headers().contains_key(header::CONNECTION));
        assert!(!activity.close_requested().is_cancelled());
        let mut resp = Response::new(body::empty());
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("Close"));
        let resp = activity.answered(resp, activity.start());
        assert!(!resp.headers().contains_key(header::CONNECTION));
        assert!(activity.close_requested().is_cancelled());
    }
}
