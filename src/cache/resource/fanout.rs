//! The fan-out of one cache: the registered watchers, the dispatch of each
//! event to them, and the metrics of both, in one place.
//!
//! Lock order: the cache's state lock, then the fan-out's. The writer
//! dispatches under the state's write lock and a watcher registers under its
//! read lock, which is what makes every event reach a watcher exactly once
//! (see `resource`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::cache::delivery::dispatcher::Dispatcher;
use crate::cache::delivery::filter::Filter;
use crate::cache::delivery::watcher::WatcherHandle;
use crate::cache::state::event::CacheEvent;
use crate::metrics as m;

/// The metric handles the fan-out updates per event and per watcher, looked
/// up once: the per-call macros would build and hash the label set each time.
/// Each handle is named after its metric or `outcome` label (`caught_up`,
/// `catching_up`), not after the code path that updates it.
struct FanoutMetrics {
    events_dispatched: metrics::Counter,
    deliveries: metrics::Counter,
    terminated_watchers: metrics::Counter,
    registered_watchers: metrics::Gauge,
    moved_to_ring: metrics::Counter,
    caught_up: metrics::Counter,
    expired_behind_ring: metrics::Counter,
    catching_up: metrics::Gauge,
    queued: metrics::Histogram,
    handed: metrics::Histogram,
}

impl FanoutMetrics {
    fn new(label: &str) -> Self {
        let l = || [("resource", label.to_owned())];
        Self {
            events_dispatched: metrics::counter!(m::CACHE_EVENTS_DISPATCHED, &l()),
            deliveries: metrics::counter!(m::CACHE_DELIVERIES, &l()),
            terminated_watchers: metrics::counter!(m::TERMINATED_WATCHERS, &l()),
            registered_watchers: metrics::gauge!(m::REGISTERED_WATCHERS, &l()),
            moved_to_ring: metrics::counter!(m::SLOW_WATCHERS, "resource" => label.to_owned(), "outcome" => "moved_to_ring"),
            caught_up: metrics::counter!(m::SLOW_WATCHERS, "resource" => label.to_owned(), "outcome" => "caught_up"),
            expired_behind_ring: metrics::counter!(m::SLOW_WATCHERS, "resource" => label.to_owned(), "outcome" => "expired"),
            catching_up: metrics::gauge!(m::WATCHERS_CATCHING_UP, &l()),
            // One histogram per stage over every resource: by resource they
            // were a third of an idle node-local's series (see
            // metrics::FANOUT_DURATION).
            queued: metrics::histogram!(m::FANOUT_DURATION, "stage" => "queued"),
            handed: metrics::histogram!(m::FANOUT_DURATION, "stage" => "handed"),
        }
    }

    fn terminated(&self, count: usize) {
        if count > 0 {
            self.terminated_watchers.increment(count as u64);
            self.registered_watchers.decrement(count as f64);
        }
    }
}

pub(crate) struct Fanout {
    watchers: Mutex<Dispatcher>,
    next_watcher_id: AtomicU64,
    /// How long a watcher may stay full before it is moved to the ring.
    slow_watcher_grace: Duration,
    /// Events a watcher may lag before it counts as full.
    queue_soft_limit: usize,
    metrics: FanoutMetrics,
}

/// The fan-out locked for a run of dispatches (a relist's difference goes
/// out under one lock).
pub(crate) struct Dispatching<'a> {
    watchers: MutexGuard<'a, Dispatcher>,
    metrics: &'a FanoutMetrics,
}

impl Dispatching<'_> {
    /// Offers `event` to its watchers; returns how many it was queued for.
    pub(crate) fn dispatch(&mut self, event: &Arc<CacheEvent>, now: Instant) -> usize {
        let out = self.watchers.dispatch(event, now);
        self.metrics.events_dispatched.increment(1);
        self.metrics.deliveries.increment(out.delivered as u64);
        self.metrics.terminated(out.terminated);
        if out.fell_behind > 0 {
            self.metrics.moved_to_ring.increment(out.fell_behind as u64);
            self.metrics.catching_up.increment(out.fell_behind as f64);
        }
        out.delivered
    }

    /// Ends the watchers that started inside a relist's gap (see the
    /// dispatcher); they get 410.
    pub(crate) fn expire_started_between(&mut self, after: u64, before: u64) {
        let expired = self.watchers.expire_started_between(after, before);
        self.metrics.terminated(expired);
    }

    /// Ends every watcher with 410 (see `Writer::replace`, a healing relist).
    pub(crate) fn expire_all(&mut self, oldest: u64) {
        let expired = self.watchers.expire_all(oldest);
        self.metrics.terminated(expired);
    }
}

impl Fanout {
    pub(super) fn new(label: &str, slow_watcher_grace: Duration, queue_soft_limit: usize) -> Self {
        Self {
            watchers: Mutex::new(Dispatcher::default()),
            next_watcher_id: AtomicU64::new(1),
            slow_watcher_grace,
            queue_soft_limit,
            metrics: FanoutMetrics::new(label),
        }
    }

    pub(crate) fn lock(&self) -> Dispatching<'_> {
        Dispatching { watchers: self.watchers.lock(), metrics: &self.metrics }
    }

    /// Dispatches one live event and records its fan-out time so far.
    pub(crate) fn dispatch_live(&self, event: &Arc<CacheEvent>, now: Instant) {
        let delivered = self.lock().dispatch(event, now);
        if let Some(fanout) = &event.fanout
            && delivered > 0
        {
            self.metrics.queued.record(fanout.arrived.elapsed());
            if fanout.queued(delivered) {
                self.metrics.handed.record(fanout.arrived.elapsed());
            }
        }
    }

    /// Registers a new watcher starting at `start_rv`; the caller holds the
    /// state's read lock, so no event slips between its start and its queue.
    pub(crate) fn add(&self, filter: Filter, start_rv: u64) -> Arc<WatcherHandle> {
        let id = self.next_watcher_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(WatcherHandle::new(id, filter, start_rv, self.slow_watcher_grace, self.queue_soft_limit));
        self.watchers.lock().add(handle.clone());
        self.metrics.registered_watchers.increment(1.0);
        handle
    }

    /// Removes a watcher whose stream ended.
    pub(crate) fn remove(&self, handle: &WatcherHandle) {
        let mut watchers = self.watchers.lock();
        let before = watchers.len();
        watchers.remove(handle);
        if watchers.len() < before {
            self.metrics.registered_watchers.decrement(1.0);
        }
        // Under the lock the writer offers under: no offer can move it to
        // the ring after this.
        if handle.leave_ring() {
            self.metrics.catching_up.decrement(1.0);
        }
    }

    /// A watcher reading the ring reached its newest event: it is back on
    /// live delivery.
    pub(crate) fn rejoined_live(&self) {
        self.metrics.caught_up.increment(1);
        self.metrics.catching_up.decrement(1.0);
    }

    /// A watcher reading the ring found its next events evicted: it leaves
    /// the ring with 410 (the caller expired it).
    pub(crate) fn expired_behind_ring(&self, handle: &WatcherHandle) {
        if handle.leave_ring() {
            self.metrics.expired_behind_ring.increment(1);
            self.metrics.catching_up.decrement(1.0);
        }
    }

    /// Ends every watch stream (the resource is gone).
    pub(crate) fn end_all(&self) {
        let ended = self.watchers.lock().end_all();
        self.metrics.terminated(ended);
    }

    /// A watcher's body handed a live event's frame to its connection: the
    /// last one to do so ends the event's fan-out time.
    pub(crate) fn handed(&self, event: &CacheEvent) {
        if let Some(fanout) = &event.fanout
            && fanout.handed_one()
        {
            self.metrics.handed.record(fanout.arrived.elapsed());
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.watchers.lock().len()
    }
}
