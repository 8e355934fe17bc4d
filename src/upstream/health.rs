//! What the last readiness probe of the upstream found, by cause.
//!
//! "Not ready" hides what an operator needs to know: whether the API server
//! is unreachable (network, DNS, a hung process), whether TLS fails (a CA or
//! server name that does not match), whether watchmux's own credentials are
//! refused (an expired token: 401; an identity without the right: 403), or
//! whether the API server answered and is not ready itself. Each is its own
//! state, in `/readyz/upstream`, in the log line of each change and in
//! `watchmux_upstream_health{state}`.

use std::sync::atomic::{AtomicU8, Ordering};

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
            SendError::ResponseHeaders(_) => Self::Unresponsive,
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

/// The last probe's state, shared, and a wake-up for those waiting for the
/// upstream to be found down.
#[derive(Debug, Default)]
pub(crate) struct HealthCell(AtomicU8, tokio::sync::Notify);

impl HealthCell {
    pub(crate) fn get(&self) -> UpstreamHealth {
        let v = self.0.load(Ordering::Relaxed);
        UpstreamHealth::ALL.into_iter().find(|h| *h as u8 == v).unwrap_or(UpstreamHealth::Unknown)
    }

    /// Records `now`, returning the state before.
    pub(crate) fn set(&self, now: UpstreamHealth) -> UpstreamHealth {
        let was = self.0.swap(now as u8, Ordering::Relaxed);
        if now.is_down() {
            self.1.notify_waiters();
        }
        UpstreamHealth::ALL.into_iter().find(|h| *h as u8 == was).unwrap_or(UpstreamHealth::Unknown)
    }

    /// Returns once a probe has found the upstream down (at once if the
    /// last one did).
    pub(crate) async fn down(&self) {
        loop {
            let found = self.1.notified();
            tokio::pin!(found);
            found.as_mut().enable();
            if self.get().is_down() {
                return;
            }
            found.await;
        }
    }
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
        cell.set(UpstreamHealth::Ready);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "ready is not down");
        cell.set(UpstreamHealth::Unresponsive);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.unwrap().unwrap();
        // Already down: no wait.
        tokio::time::timeout(std::time::Duration::from_secs(5), cell.down()).await.unwrap();
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
    fn the_cell_keeps_every_state() {
        let cell = HealthCell::default();
        assert_eq!(cell.get(), UpstreamHealth::Unknown);
        for h in UpstreamHealth::ALL {
            cell.set(h);
            assert_eq!(cell.get(), h);
            assert_eq!(h.failure().is_none(), h == UpstreamHealth::Ready);
        }
    }
}
