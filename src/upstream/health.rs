//! What the last readiness probe of the upstream found, by cause.
//!
//! "Not ready" hides what an operator needs to know: whether the API server
//! is unreachable (network, DNS, a hung process), whether TLS fails (a CA or
//! server name that does not match), whether watchmux's own credentials are
//! refused (an expired token: 401; an identity without the right: 403), or
//! whether the API server answered and is not ready itself. Each is its own
//! state, in `/readyz/upstream`, in the log line of each change and in
//! `watchmux_upstream_health{state}`.
//!
//! A probe that gets no answer in time is the weakest evidence: an API
//! server busy with a relist storm, or a connection busy with a large LIST,
//! can hold one `/readyz` for seconds. Being "down" has consequences (a
//! request that must reach the upstream then fails after `--upstream-timeout`,
//! and offline mode serves unproven state), so an upstream that was ready
//! becomes unresponsive only after [`UNRESPONSIVE_AFTER`] silent probes in a
//! row, as a kubelet's readiness probe needs three failures. From any other
//! state (not probed yet: a node-local watchmux restarting while its link to
//! the control plane is a black hole; or already failing), a silent probe
//! counts at once, as does an answer of any kind or a refused connection.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use http::StatusCode;

use super::SendError;
use super::timeouts::DialTimeout;

/// The upstream's state, as the last probe found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum UpstreamHealth {
    /// Not probed yet.
    Unknown = 0,
    /// `/readyz` answered 200.
    Ready = 1,
    /// No connection: refused, unreachable, or no TCP and TLS within the
    /// dial timeout (a hung API server).
    Unreachable = 2,
    /// The TLS handshake failed (certificate, server name, protocol).
    Tls = 3,
    /// watchmux's own credentials could not be had (its exec plugin).
    Credentials = 4,
    /// The upstream answered 401 to watchmux's credentials.
    Unauthorized = 5,
    /// The upstream answered 403: watchmux's identity may not read `/readyz`.
    Forbidden = 6,
    /// The upstream answered, but not ready (another status).
    NotReady = 7,
    /// No answer in time: a hung API server, or a half-open path that takes
    /// requests and never answers.
    Unresponsive = 8,
}

impl UpstreamHealth {
    /// Every state, for the metric's labels.
    pub const ALL: [Self; 9] = [
        Self::Unknown,
        Self::Ready,
        Self::Unreachable,
        Self::Tls,
        Self::Credentials,
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotReady,
        Self::Unresponsive,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Ready => "ready",
            Self::Unreachable => "unreachable",
            Self::Tls => "tls",
            Self::Credentials => "credentials",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotReady => "not_ready",
            Self::Unresponsive => "unresponsive",
        }
    }

    /// What `/readyz/upstream` says when the upstream is not ready.
    pub fn failure(self) -> Option<&'static str> {
        match self {
            Self::Ready => None,
            Self::Unknown => Some("not probed yet"),
            Self::Unreachable => Some("unreachable: no connection (refused, unroutable, or no TLS handshake in time)"),
            Self::Tls => Some("the TLS handshake with the upstream failed (CA, server name or protocol)"),
            Self::Credentials => Some("watchmux's own credentials could not be had (exec plugin)"),
            Self::Unauthorized => Some("the upstream refused watchmux's own credentials (401): expired or revoked?"),
            Self::Forbidden => Some("watchmux's identity may not read the upstream's /readyz (403)"),
            Self::NotReady => Some("the upstream answered but is not ready"),
            Self::Unresponsive => Some("the upstream does not answer in time (hung, or a half-open connection)"),
        }
    }

    /// True when requests that must reach the upstream cannot be expected
    /// to: they then fail after `--upstream-timeout`.
    pub fn is_down(self) -> bool {
        matches!(self, Self::Unreachable | Self::Unresponsive)
    }

    /// The state an answer to the probe stands for.
    pub(crate) fn of_status(status: StatusCode) -> Self {
        match status {
            s if s.is_success() => Self::Ready,
            StatusCode::UNAUTHORIZED => Self::Unauthorized,
            StatusCode::FORBIDDEN => Self::Forbidden,
            _ => Self::NotReady,
        }
    }

    /// The state a failure to get any answer stands for.
    pub(crate) fn of_error(err: &SendError) -> Self {
        match err {
            SendError::Credentials(_) | SendError::ClientTls(_) => Self::Credentials,
            SendError::ResponseHeaders(_) | SendError::ProbeTimeout(_) => Self::Unresponsive,
            other => {
                let mut source: Option<&(dyn std::error::Error + 'static)> = Some(other);
                while let Some(err) = source {
                    if err.is::<rustls::Error>() {
                        return Self::Tls;
                    }
                    if err.is::<DialTimeout>() {
                        return Self::Unreachable;
                    }
                    // hyper-rustls reports a failed handshake as an
                    // io::Error wrapping the rustls error.
                    if let Some(io) = err.downcast_ref::<std::io::Error>()
                        && io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
                    {
                        return Self::Tls;
                    }
                    source = err.source();
                }
                if other.is_connect() { Self::Unreachable } else { Self::NotReady }
            }
        }
    }
}

/// Probes in a row without an answer in time before an upstream that was
/// ready counts as unresponsive (the probe runs every 5 s and waits 3 s:
/// about 13 s of silence).
pub(crate) const UNRESPONSIVE_AFTER: u32 = 3;

/// The upstream's state, shared, the silent probes since the last answer,
/// and a wake-up for those waiting for the upstream to be found down.
#[derive(Debug, Default)]
pub(crate) struct HealthCell {
    state: AtomicU8,
    silent: AtomicU32,
    found_down: tokio::sync::Notify,
    found_ready: tokio::sync::Notify,
}

/// What recording one probe did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub was: UpstreamHealth,
    pub now: UpstreamHealth,
    /// Silent probes in a row, this one included (0 after an answer).
    pub silent: u32,
}

impl HealthCell {
    pub(crate) fn get(&self) -> UpstreamHealth {
        from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Records what one probe `observed` (only the prober calls this): an
    /// answer, or a failure to connect, is the state at once; a probe
    /// without an answer in time, after the upstream was ready, only as the
    /// [`UNRESPONSIVE_AFTER`]th in a row (before that it stays ready).
    pub(crate) fn record(&self, observed: UpstreamHealth) -> Recorded {
        let was = self.get();
        let silent = if observed == UpstreamHealth::Unresponsive {
            self.silent.fetch_add(1, Ordering::Relaxed).saturating_add(1)
        } else {
            self.silent.store(0, Ordering::Relaxed);
            0
        };
        let busy = observed == UpstreamHealth::Unresponsive && was == UpstreamHealth::Ready;
        let now = if busy && silent < UNRESPONSIVE_AFTER { was } else { observed };
        self.state.store(now as u8, Ordering::Relaxed);
        if now.is_down() {
            self.found_down.notify_waiters();
        }
        if now == UpstreamHealth::Ready && was != UpstreamHealth::Ready {
            self.found_ready.notify_waiters();
        }
        Recorded { was, now, silent }
    }

    /// Returns once a probe has found the upstream down (at once if the
    /// last one did).
    pub(crate) async fn down(&self) {
        loop {
            let found = self.found_down.notified();
            tokio::pin!(found);
            found.as_mut().enable();
            if self.get().is_down() {
                return;
            }
            found.await;
        }
    }
}

impl HealthCell {
    /// Returns when a probe finds the upstream ready after it was not (an
    /// outage's end, or the first answer); never while it stays ready.
    pub(crate) async fn back(&self) {
        self.found_ready.notified().await;
    }
}

fn from_u8(v: u8) -> UpstreamHealth {
    UpstreamHealth::ALL.into_iter().find(|h| *h as u8 == v).unwrap_or(UpstreamHealth::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_for_down_ends_when_a_probe_finds_it_down() {
        let cell = std::sync::Arc::new(HealthCell::default());
        let waiter = tokio::spawn({
            let cell = cell.clone();
            async move { cell.down().await }
        });
        tokio::task::yield_now().await;
        cell.record(UpstreamHealth::Ready);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "ready is not down");
        cell.record(UpstreamHealth::Unreachable);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.unwrap().unwrap();
        // Already down: no wait.
        tokio::time::timeout(std::time::Duration::from_secs(5), cell.down()).await.unwrap();
        // Ready again: those waiting for its return are woken, once.
        let back = tokio::spawn({
            let cell = cell.clone();
            async move { cell.back().await }
        });
        tokio::task::yield_now().await;
        cell.record(UpstreamHealth::Unreachable);
        tokio::task::yield_now().await;
        assert!(!back.is_finished(), "still down");
        cell.record(UpstreamHealth::Ready);
        tokio::time::timeout(std::time::Duration::from_secs(5), back).await.unwrap().unwrap();
        let steady = tokio::spawn({
            let cell = cell.clone();
            async move { cell.back().await }
        });
        tokio::task::yield_now().await;
        cell.record(UpstreamHealth::Ready);
        tokio::task::yield_now().await;
        assert!(!steady.is_finished(), "ready after ready is no return");
        steady.abort();
    }

    #[test]
    fn answers_map_to_their_cause() {
        assert_eq!(UpstreamHealth::of_status(StatusCode::OK), UpstreamHealth::Ready);
        assert_eq!(UpstreamHealth::of_status(StatusCode::UNAUTHORIZED), UpstreamHealth::Unauthorized);
        assert_eq!(UpstreamHealth::of_status(StatusCode::FORBIDDEN), UpstreamHealth::Forbidden);
        assert_eq!(UpstreamHealth::of_status(StatusCode::INTERNAL_SERVER_ERROR), UpstreamHealth::NotReady);
        let timeout = SendError::ResponseHeaders(super::super::timeouts::ResponseHeaderTimeout(
            std::time::Duration::from_secs(1),
        ));
        assert_eq!(UpstreamHealth::of_error(&timeout), UpstreamHealth::Unresponsive);
        assert!(UpstreamHealth::Unresponsive.is_down() && UpstreamHealth::Unreachable.is_down());
        assert!(!UpstreamHealth::NotReady.is_down() && !UpstreamHealth::Unauthorized.is_down());
        assert_eq!(UpstreamHealth::of_error(&SendError::Connect("refused".into())), UpstreamHealth::Unreachable);
    }

    #[test]
    fn the_cell_keeps_every_answered_state() {
        let cell = HealthCell::default();
        assert_eq!(cell.get(), UpstreamHealth::Unknown);
        for h in UpstreamHealth::ALL.into_iter().filter(|h| *h != UpstreamHealth::Unresponsive) {
            let recorded = cell.record(h);
            assert_eq!((recorded.now, recorded.silent), (h, 0));
            assert_eq!(cell.get(), h);
            assert_eq!(h.failure().is_none(), h == UpstreamHealth::Ready);
        }
    }

    /// A ready API server that then misses one or two probes (busy) is not
    /// "down" (which would cut pass-through requests to --upstream-timeout
    /// and turn on offline mode); the third silent probe in a row is.
    #[test]
    fn only_silent_probes_in_a_row_make_the_upstream_unresponsive() {
        let cell = HealthCell::default();
        cell.record(UpstreamHealth::Ready);
        for round in 0..2 {
            for n in 1..UNRESPONSIVE_AFTER {
                let r = cell.record(UpstreamHealth::Unresponsive);
                assert_eq!((r.now, r.silent), (UpstreamHealth::Ready, n), "round {round}");
                assert!(!cell.get().is_down());
            }
            // An answer in between starts the count again.
            assert_eq!(cell.record(UpstreamHealth::Ready).silent, 0);
        }
        for _ in 1..UNRESPONSIVE_AFTER {
            cell.record(UpstreamHealth::Unresponsive);
        }
        let r = cell.record(UpstreamHealth::Unresponsive);
        assert_eq!((r.was, r.now, r.silent), (UpstreamHealth::Ready, UpstreamHealth::Unresponsive, UNRESPONSIVE_AFTER));
        assert!(cell.get().is_down());
        // Still silent: still down.
        assert_eq!(cell.record(UpstreamHealth::Unresponsive).now, UpstreamHealth::Unresponsive);
        // Not probed yet (a restart behind a black hole), or already failing:
        // a silent probe counts at once, and so does the answer after it.
        let cell = HealthCell::default();
        assert_eq!(cell.record(UpstreamHealth::Unresponsive).now, UpstreamHealth::Unresponsive);
        let cell = HealthCell::default();
        assert_eq!(cell.record(UpstreamHealth::Unreachable).now, UpstreamHealth::Unreachable);
        assert_eq!(cell.record(UpstreamHealth::Unresponsive).now, UpstreamHealth::Unresponsive);
        assert_eq!(cell.record(UpstreamHealth::Ready).now, UpstreamHealth::Ready);
    }
}
