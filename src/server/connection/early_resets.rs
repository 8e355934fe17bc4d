//! Rapid reset when the server keeps up: counting requests a client cancels
//! before they are answered.
//!
//! h2's limit on streams reset before they are accepted
//! (`max_pending_accept_reset_streams`) only trips when resets arrive faster
//! than the server takes streams up. A client that sends each HEADERS and
//! its RST_STREAM no faster than that (tested: one that waits for each
//! request to start) is taken up stream by stream: every request is started
//! (authentication, the upstream request of a pass-through) and cancelled,
//! ten thousand times on one connection without a GOAWAY, while the client
//! pays two frames each. Go's server bounds the same thing by running at
//! most MaxConcurrentStreams handlers and closing the connection when four
//! times as many wait.
//!
//! Here each request of a connection is counted as answered when its
//! handler produces a response head, or as reset early if the handler is
//! dropped before that, which on HTTP/2 means the client reset the stream
//! (on HTTP/1.1, the connection is ending anyway). A connection with
//! [`MIN_EARLY_RESETS`] early resets, and more of them than answers, is
//! closed. Requests still running count neither way, so a burst of streams
//! taken up at once does not dilute the resets among them. A client that
//! cancels now and then, even often in absolute terms over a long-lived
//! connection, never comes near its answers; an attacker who pads its resets
//! with as many real requests pays for every one of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Early resets a connection may have before the share of them is looked at.
pub(crate) const MIN_EARLY_RESETS: u64 = 100;

/// The answered and early-reset request counts of one connection.
#[derive(Debug, Default)]
pub(crate) struct EarlyResets {
    answered: AtomicU64,
    reset: AtomicU64,
    /// Cancelled when the connection should be closed.
    tripped: CancellationToken,
}

impl EarlyResets {
    pub(crate) fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A request whose handler is starting. Unless [`Unanswered::answered`]
    /// is called, dropping the returned guard counts the request as reset
    /// early.
    pub(crate) fn start(self: &Arc<Self>) -> Unanswered {
        Unanswered { resets: self.clone(), answered: false }
    }

    /// Resolves once the connection should be closed.
    pub(crate) fn tripped(&self) -> WaitForCancellationFutureOwned {
        self.tripped.clone().cancelled_owned()
    }

    fn count_reset(&self) {
        let reset = self.reset.fetch_add(1, Ordering::Relaxed) + 1;
        if reset >= MIN_EARLY_RESETS && reset > self.answered.load(Ordering::Relaxed) {
            self.tripped.cancel();
        }
    }
}

/// A request whose response head has not been produced yet.
#[must_use = "dropping it at once counts the request as reset early"]
pub(crate) struct Unanswered {
    resets: Arc<EarlyResets>,
    answered: bool,
}

impl Unanswered {
    pub(crate) fn answered(mut self) {
        self.answered = true;
        self.resets.answered.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.answered {
            self.resets.count_reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_tripped(resets: &EarlyResets) -> bool {
        resets.tripped.is_cancelled()
    }

    fn reset_early(resets: &Arc<EarlyResets>, n: u64) {
        for _ in 0..n {
            drop(resets.start());
        }
    }

    #[test]
    fn answered_requests_are_not_resets() {
        let resets = EarlyResets::new();
        for _ in 0..10 * MIN_EARLY_RESETS {
            resets.start().answered();
        }
        assert_eq!(resets.reset.load(Ordering::Relaxed), 0);
        assert!(!is_tripped(&resets));
    }

    #[test]
    fn a_connection_of_resets_trips_at_the_minimum() {
        let resets = EarlyResets::new();
        reset_early(&resets, MIN_EARLY_RESETS - 1);
        assert!(!is_tripped(&resets), "tripped below the minimum");
        reset_early(&resets, 1);
        assert!(is_tripped(&resets));
    }

    /// A long-lived client that cancels one request in three, far past the
    /// minimum, is kept; once its cancellations outnumber its answers it is
    /// not.
    #[test]
    fn only_more_early_resets_than_answers_trips() {
        let resets = EarlyResets::new();
        for _ in 0..10 * MIN_EARLY_RESETS {
            resets.start().answered();
            resets.start().answered();
            reset_early(&resets, 1);
        }
        assert!(!is_tripped(&resets));
        // As many resets as answers.
        reset_early(&resets, 10 * MIN_EARLY_RESETS);
        assert!(!is_tripped(&resets));
        reset_early(&resets, 1);
        assert!(is_tripped(&resets));
    }

    /// Requests still running count neither way: a burst of them is no
    /// reset, and does not hide the resets among it either.
    #[test]
    fn requests_still_running_count_neither_way() {
        let resets = EarlyResets::new();
        let _running: Vec<_> = (0..10 * MIN_EARLY_RESETS).map(|_| resets.start()).collect();
        assert!(!is_tripped(&resets));
        reset_early(&resets, MIN_EARLY_RESETS);
        assert!(is_tripped(&resets));
    }
}
