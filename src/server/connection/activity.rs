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
//! - **GOAWAY by chance.** With `--goaway-chance`, any answer may end its
//!   connection the same way, as kube-apiserver's `Connection: close` from
//!   `WithProbabilisticGoaway` does (see [`super::goaway_chance`]); the
//!   reason is kept apart, for the metric.
//!
//! HTTP/1.1 needs none of these: hyper's and the front's header read
//! timeout already closes a keep-alive connection that sends no request,
//! `Connection: close` is HTTP/1.1's own, and its watches end at their
//! timeouts, to be made again on new connections.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderValue, Response, header};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::goaway_chance::GoawayChance;
use crate::body::{self, ProxyBody};

/// How long an HTTP/2 connection may go without an open stream before it is
/// sent GOAWAY and closed: kube-apiserver's `IdleTimeout`, for HTTP/1.1
/// keep-alive and HTTP/2 alike; `--idle-connection-timeout`'s default.
#[cfg(test)]
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an answer ended its connection: the `reason` label of
/// `watchmux_connections_finished_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// The answer said `Connection: close`.
    ConnectionClose,
    /// `--goaway-chance` drew it.
    GoawayChance,
}

impl CloseReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::ConnectionClose => "connection_close",
            Self::GoawayChance => "goaway_chance",
        }
    }
}

/// One HTTP/2 connection's streams in progress, when the last one ended, and
/// whether an answer asked for the connection to end.
#[derive(Debug)]
pub(crate) struct Activity {
    open: AtomicUsize,
    /// When the last stream ended (or the connection began).
    idle_since: parking_lot::Mutex<Instant>,
    /// Each answer's chance of ending the connection (`--goaway-chance`).
    goaway_chance: GoawayChance,
    /// Cancelled when an answer said `Connection: close`, or the chance
    /// drew it.
    close: CancellationToken,
    /// The first reason the connection was asked to end; set before `close`
    /// is cancelled.
    close_reason: OnceLock<CloseReason>,
}

impl Activity {
    pub(crate) fn new(goaway_chance: GoawayChance) -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            idle_since: parking_lot::Mutex::new(Instant::now()),
            goaway_chance,
            close: CancellationToken::new(),
            close_reason: OnceLock::new(),
        })
    }

    /// Counts a stream as open until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    /// The answer `resp` to a stream counted by `guard`: a `Connection:
    /// close` in it is taken out and asks for a GOAWAY, as does, without
    /// one, the GOAWAY chance; the body keeps the stream counted until it
    /// is dropped, so a watch answered here still runs to its end.
    pub(crate) fn answered(&self, mut resp: Response<ProxyBody>, guard: StreamGuard) -> Response<ProxyBody> {
        if resp.headers_mut().remove(header::CONNECTION).is_some_and(|v| is_close(&v)) {
            self.ask_to_close(CloseReason::ConnectionClose);
        } else if !self.close.is_cancelled() && self.goaway_chance.roll() {
            self.ask_to_close(CloseReason::GoawayChance);
        }
        resp.map(|inner| body::holding(inner, guard))
    }

    fn ask_to_close(&self, reason: CloseReason) {
        // The first reason stays: the connection is finished once.
        let _ = self.close_reason.set(reason);
        self.close.cancel();
    }

    /// Why the connection was asked to end, once [`Self::close_requested`]
    /// is cancelled.
    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        self.close_reason.get().copied()
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
        let activity = Activity::new(GoawayChance::NEVER);
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
        let activity = Activity::new(GoawayChance::NEVER);
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
        assert_eq!(activity.close_reason(), Some(CloseReason::ConnectionClose));
    }

    #[test]
    fn the_goaway_chance_asks_for_goaway_and_is_told_apart() {
        let never = Activity::new(GoawayChance::NEVER);
        drop(never.answered(Response::new(body::empty()), never.start()));
        assert!(!never.close_requested().is_cancelled());
        assert_eq!(never.close_reason(), None);
        let always = Activity::new(GoawayChance::ALWAYS);
        let resp = always.answered(Response::new(body::full("x")), always.start());
        assert!(always.close_requested().is_cancelled());
        assert_eq!(always.close_reason(), Some(CloseReason::GoawayChance));
        // GOAWAY is graceful: the answer is not touched, and its body keeps
        // the stream open until it is sent.
        assert!(!resp.headers().contains_key(header::CONNECTION));
        assert_eq!(always.idle_deadline(IDLE_TIMEOUT), None);
        drop(resp);
        assert!(always.idle_deadline(IDLE_TIMEOUT).is_some());
    }

    /// An answer that ends its connection anyway is counted as that, not as
    /// the chance's.
    #[test]
    fn connection_close_wins_over_the_chance() {
        let activity = Activity::new(GoawayChance::ALWAYS);
        let mut resp = Response::new(body::empty());
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        drop(activity.answered(resp, activity.start()));
        drop(activity.answered(Response::new(body::empty()), activity.start()));
        assert_eq!(activity.close_reason(), Some(CloseReason::ConnectionClose));
    }
}
