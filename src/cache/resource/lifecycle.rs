//! Where a cache is in its life, and the version it is current at, published
//! together through one `tokio::sync::watch`.
//!
//! A request asks two things of a cache before it is served: may it be served
//! at all (has the first list landed, is the initial list failing, has the
//! resource gone), and is the cache current at a given version. Both facts
//! change only at the writer, and both are waited for; one channel carries
//! them, so a waiter can never see one updated without the other, and a
//! wake-up can never be lost between looking and waiting (`wait_for` looks
//! at the value it subscribed to, then waits for the next).

use std::time::Duration;

use tokio::sync::watch;

/// The states of a cache, in the order they can come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// No complete list yet: requests wait for one.
    Starting,
    /// No complete list yet, and the latest attempt failed (403, upstream
    /// down...): requests pass through at once instead of waiting.
    InitialListFailing,
    /// Listed: the cache answers reads.
    Ready,
    /// The upstream stopped serving the resource: no new watcher.
    /// `listed` says whether it had been ready.
    Closed { listed: bool },
}

impl Lifecycle {
    /// Whether the first list landed (a closed cache keeps what it had).
    pub(crate) fn is_listed(self) -> bool {
        matches!(self, Self::Ready | Self::Closed { listed: true })
    }
}

/// What the writer publishes: the state, and the version the cache is
/// current at (every event up to it has been dispatched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub lifecycle: Lifecycle,
    pub rv: u64,
}

/// The publishing end, owned by the cache; only the writer's methods call
/// the `pub(super)` ones.
#[derive(Debug)]
pub(crate) struct Published {
    tx: watch::Sender<Progress>,
}

impl Published {
    pub(super) fn new() -> Self {
        Self { tx: watch::Sender::new(Progress { lifecycle: Lifecycle::Starting, rv: 0 }) }
    }

    pub(crate) fn now(&self) -> Progress {
        *self.tx.borrow()
    }

    /// The version moves to `rv` unless it is already past it (never back),
    /// and the state becomes what `next` makes of it.
    pub(super) fn advance(&self, rv: u64, next: impl FnOnce(Lifecycle) -> Lifecycle) {
        self.tx.send_modify(|p| {
            p.rv = p.rv.max(rv);
            p.lifecycle = next(p.lifecycle);
        });
    }

    /// The version moves to `rv` even below where it was: a new cluster's
    /// list (`Writer::start_over`), whose versions start again.
    pub(super) fn restart_at(&self, rv: u64) {
        self.tx.send_modify(|p| p.rv = rv);
    }

    /// Changes the state alone; wakes nobody when it stays the same.
    pub(super) fn set_lifecycle(&self, next: impl FnOnce(Lifecycle) -> Lifecycle) {
        self.tx.send_if_modified(|p| {
            let before = p.lifecycle;
            p.lifecycle = next(before);
            p.lifecycle != before
        });
    }

    /// Waits up to `timeout` for `done` to hold of what is published.
    pub(crate) async fn wait_until(&self, timeout: Duration, done: impl FnMut(&Progress) -> bool) -> bool {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as the cache the caller holds: `wait_for`
        // can only end in an error if it were dropped.
        matches!(tokio::time::timeout(timeout, rx.wait_for(done)).await, Ok(Ok(_)))
    }
}
