//! The one writer of a resource cache (kube-runtime's Writer/Store split).
//!
//! A [`Writer`] is made together with its cache and owned by the cache's
//! reflector; the cache itself only reads. Everything that changes the
//! store, the history, the lifecycle or what the upstream showed of its
//! forms is a method here, so "the reflector is the only writer" holds by
//! construction, not by convention.
//!
//! The freshness proof's short catch-up watch reads the upstream on its own
//! task, but it does not write: it decodes what it reads into [`Change`]s
//! and queues them to the writer (the queue lives here, on the writer's
//! side: see `freshness::CatchUpQueue`), which applies them between the
//! lines of its own watch. Both streams are ordered views of one upstream
//! history, so applying their union in order of arrival, skipping what is
//! not newer than the store, misses nothing and applies nothing twice.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::freshness::CatchUpQueue;
use super::lifecycle::Lifecycle;
use super::{ResourceCache, State};
use crate::cache::content::ProtobufAvailability;
use crate::cache::state::event::CacheEvent;
use crate::cache::state::history::History;
use crate::cache::state::object::CachedObject;
use crate::cache::state::store::{Objects, Store};
use crate::cache::upstream_wire::Change;
use crate::encode::watch::EventType;
use crate::upstream::Upstream;

/// The handle that writes one resource cache. Not `Clone`: there is one.
pub(crate) struct Writer {
    cache: Arc<ResourceCache>,
    /// How long events are kept for resuming watchers: a first list starts
    /// the history over with it.
    history_window: Duration,
    /// What catch-up watches read, for this writer to apply.
    catch_up: CatchUpQueue,
    /// Where what is applied is also offered for the disk
    /// (`--persist-resources`); offering never waits.
    persist: Option<Box<dyn ChangeSink>>,
    /// Test-only faults in what is applied (`cache/fault.rs`).
    #[cfg(any(test, feature = "fault-injection"))]
    faults: crate::cache::fault::Faults,
}

/// Where the writer also offers what it applies, after dispatching it: the
/// disk (`cache::persist::feed`). Offering must never wait.
pub(crate) trait ChangeSink: Send + Sync {
    /// An applied event.
    fn changed(&self, event: &CacheEvent);
    /// Nothing changed up to `rv` (a bookmark).
    fn version(&self, rv: u64);
    /// The store was replaced (a list).
    fn whole(&self);
    /// The cluster the objects come from (`sync::cluster`), once known:
    /// kept with a persisted store so that a store from another cluster is
    /// dropped at start-up.
    fn cluster_identity(&self, _identity: Option<String>) {}
    /// Waits until everything offered is handled (tests).
    #[cfg(test)]
    fn finish(self: Box<Self>);
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("cache", &self.cache).finish_non_exhaustive()
    }
}

impl Writer {
    pub(super) fn new(cache: Arc<ResourceCache>, history_window: Duration) -> Self {
        Self {
            #[cfg(any(test, feature = "fault-injection"))]
            faults: crate::cache::fault::Faults::from_env(cache.label()),
            cache,
            history_window,
            catch_up: CatchUpQueue::new(),
            persist: None,
        }
    }

    /// From now on, every change is also offered to `feed`.
    pub(crate) fn persist_to(&mut self, sink: Box<dyn ChangeSink>) {
        self.persist = Some(sink);
    }

    /// Which cluster the cache's state comes from, for a persisted store to
    /// keep (`ChangeSink::cluster_identity`).
    pub(crate) fn record_cluster(&self, identity: Option<String>) {
        if let Some(feed) = &self.persist {
            feed.cluster_identity(identity);
        }
    }

    /// Installs what a persisted store held at `rv`, before the upstream is
    /// asked: the cache is ready (reads that need no freshness are served),
    /// and unconfirmed until the upstream answers (`persist.rs`). The
    /// history starts at `rv`, so watches resume from it or later.
    pub(crate) fn restore(&self, objects: Objects, rv: u64) {
        let cache = &*self.cache;
        let mut st = cache.state.write();
        st.store = Store::new(objects, rv);
        st.history = History::new(self.history_window, rv);
        self.record_gauges(&st);
        drop(st);
        cache.trust.unconfirmed.store(true, Ordering::Release);
        cache.published.advance(rv, |_| Lifecycle::Ready);
    }

    /// The upstream answered this cache's watch or list: what was loaded
    /// from disk is no longer the only word.
    pub(crate) fn upstream_answered(&self) {
        if self.cache.trust.unconfirmed.swap(false, Ordering::AcqRel) {
            tracing::info!(resource = %self.cache.label(), rv = self.cache.current_rv(), "the upstream answered; the cache loaded from disk is confirmed by its watch from now on");
        }
    }

    /// The cache, for the readers.
    pub(crate) fn cache(&self) -> &Arc<ResourceCache> {
        &self.cache
    }

    /// Installs the result of a full LIST at `rv`. The first time, the cache
    /// becomes ready. After that (a relist), the store is replaced in one step
    /// and watchers receive the difference as ordinary events.
    pub(crate) fn replace(&self, objects: Objects, rv: u64) {
        self.replace_in_memory(objects, rv);
        if let Some(feed) = &self.persist {
            feed.whole();
        }
    }

    /// Installs a full LIST at `rv` from another cluster than the one
    /// cached (`sync::cluster`): its versions say nothing about the old
    /// ones, lower or higher, so no difference is told. Every watcher gets
    /// 410 (their versions are the old cluster's), the history and the
    /// version start over at `rv`, and a persisted store is rewritten
    /// from this list.
    pub(crate) fn start_over(&self, objects: Objects, rv: u64) {
        let cache = &*self.cache;
        let mut st = cache.state.write();
        self.confirm_current(tokio::time::Instant::now());
        cache.check_state().listed();
        st.store = Store::new(objects, rv);
        cache.fanout.lock().expire_all(rv);
        st.history.reset(rv);
        self.record_gauges(&st);
        drop(st);
        cache.published.restart_at(rv);
        if let Some(feed) = &self.persist {
            feed.whole();
        }
    }

    fn replace_in_memory(&self, objects: Objects, rv: u64) {
        let cache = &*self.cache;
        let now = tokio::time::Instant::now();
        let mut st = cache.state.write();
        self.confirm_current(now);
        // A list that heals a cache the consistency check found different.
        let healing = cache.check_state().is_unproven();
        cache.check_state().listed();
        if !cache.is_ready() {
            st.store = Store::new(objects, rv);
            st.history = History::new(self.history_window, rv);
            self.record_gauges(&st);
            drop(st);
            cache.published.advance(rv, |_| Lifecycle::Ready);
            return;
        }
        let before = st.store.rv();
        let replaced = st.store.replace(objects, rv);
        if healing {
            // What watchers were sent came from a cache that was wrong: the
            // difference cannot be told as events in order (an object the
            // cache missed carries a version below what they have seen).
            // Every watcher gets 410, as from a too-old version, and the
            // history starts over, so every client lists again, from this
            // list, as the API server's clients do when its watch cache is
            // reinitialised.
            cache.fanout.lock().expire_all(rv);
            st.history.reset(rv);
            self.record_gauges(&st);
            drop(st);
            cache.published.advance(rv, |l| l);
            return;
        }
        if replaced.versions_reused {
            // Events sharing a version cannot be resumed between; start the
            // history over so nobody resumes inside the gap.
            tracing::warn!(resource = %cache.label(), "relist produced deletions without distinct versions");
        }
        let mut fanout = cache.fanout.lock();
        // A watcher that started inside the gap (from a version a client got
        // from the upstream, newer than the cache was) cannot be told which of
        // the relist's changes came after its version: 410, before it is
        // offered any of them. Watchers at or below `before` get the whole
        // difference; those at `rv` or later need none of it.
        fanout.expire_started_between(before, rv);
        for event in replaced.events {
            let event = Arc::new(event);
            // The history needs strictly increasing versions; a difference
            // event at or below its newest (which a well-behaved upstream never
            // causes) is still delivered, just not kept for resuming.
            if !replaced.versions_reused && event.rv > st.history.newest_rv() {
                st.history.push(event.rv, now, event.clone());
            }
            fanout.dispatch(&event, now);
        }
        if replaced.versions_reused {
            st.history.reset(rv);
        } else {
            st.history.mark_unobserved(before, rv);
        }
        drop(fanout);
        self.record_gauges(&st);
        drop(st);
        cache.published.advance(rv, |l| l);
    }

    /// Applies one change; returns the version it carried.
    pub(crate) fn apply(&self, change: Change) -> u64 {
        let rv = change.rv();
        match change {
            Change::Event(kind, object, arrived) => self.apply_event(kind, object, arrived),
            Change::Bookmark(rv) => self.bookmark(rv),
        }
        rv
    }

    /// Applies one upstream event, whose line had been read at `arrived`.
    fn apply_event(&self, kind: EventType, object: CachedObject, arrived: Instant) {
        let cache = &*self.cache;
        let now = tokio::time::Instant::now();
        cache.metrics.events_received.increment(1);
        self.confirm_current(now);
        let mut st = cache.state.write();
        if object.rv <= st.store.rv() {
            // Already seen (a replay after a resumed watch): applying it again
            // would break the history's order.
            return;
        }
        #[cfg(any(test, feature = "fault-injection"))]
        if self.faults.drops(&object) {
            return;
        }
        let event = Arc::new(st.store.apply(kind, Arc::new(object)).arrived_at(arrived));
        #[cfg(any(test, feature = "fault-injection"))]
        self.faults.after_apply(&mut st.store, &event);
        st.history.push(event.rv, now, event.clone());
        cache.fanout.dispatch_live(&event, now);
        self.record_gauges(&st);
        let rv = st.store.rv();
        drop(st);
        cache.published.advance(rv, |l| l);
        if let Some(feed) = &self.persist {
            feed.changed(&event);
        }
    }

    /// An upstream bookmark: nothing changed up to `rv`.
    pub(crate) fn bookmark(&self, rv: u64) {
        self.confirm_current(tokio::time::Instant::now());
        let mut st = self.cache.state.write();
        st.store.advance(rv);
        let rv = st.store.rv();
        drop(st);
        self.cache.published.advance(rv, |l| l);
        if let Some(feed) = &self.persist {
            feed.version(rv);
        }
    }

    /// The next change a catch-up watch queued, starting the catch-up watch
    /// a reader asked for in the meantime; pending forever when there is
    /// none (for `select!` beside the writer's own watch).
    pub(crate) async fn next_catch_up(&mut self, upstream: &Arc<Upstream>) -> Change {
        self.catch_up.next(&self.cache, upstream).await
    }

    /// The upstream no longer serves the resource: every watch stream ends,
    /// as the API server ends them when a CRD goes, and watchers that still
    /// arrive get 410 (and find the resource gone when they list again).
    pub(crate) fn close(&self) {
        self.cache.published.set_lifecycle(|l| Lifecycle::Closed { listed: l.is_listed() });
        self.cache.fanout.end_all();
    }

    /// The reflector lists again after having been in step (or the list
    /// ended): published as `watchmux_watch_cache_relist_in_progress`.
    pub(crate) fn set_relisting(&self, relisting: bool) {
        self.cache.metrics.relisting.set(if relisting { 1.0 } else { 0.0 });
        if relisting {
            self.cache.check_state().relist_started();
        } else {
            self.cache.check_state().relist_ended();
        }
    }

    /// Records whether the latest attempt at the initial list failed; once
    /// listed, a failing list changes nothing for the readers.
    pub(crate) fn set_initial_list_failing(&self, failing: bool) {
        self.cache.published.set_lifecycle(|l| match l {
            Lifecycle::Starting | Lifecycle::InitialListFailing if failing => Lifecycle::InitialListFailing,
            Lifecycle::Starting | Lifecycle::InitialListFailing => Lifecycle::Starting,
            listed_or_closed => listed_or_closed,
        });
    }

    /// Whether list items of this resource carry `kind` and `apiVersion`.
    pub(crate) fn set_list_items_typed(&self, typed: bool) {
        self.cache.form.list_items_typed.store(typed, Ordering::Relaxed);
    }

    /// The resource's `Warning` headers, from a list response; whether
    /// they changed.
    pub(crate) fn set_warnings(&self, headers: &http::HeaderMap) -> bool {
        self.cache.form.warnings.record(headers)
    }

    /// The protobuf forms the schema check leaves on; returns the previous
    /// setting.
    pub(crate) fn set_protobuf_availability(&self, to: ProtobufAvailability) -> ProtobufAvailability {
        self.cache.form.protobuf.swap(to)
    }

    /// What the CBOR probe found; returns the previous setting.
    pub(crate) fn set_upstream_cbor(&self, to: crate::negotiate::UpstreamCbor) -> crate::negotiate::UpstreamCbor {
        self.cache.form.cbor.swap(to)
    }

    fn confirm_current(&self, now: tokio::time::Instant) {
        if self.cache.is_unconfirmed() {
            self.upstream_answered();
        }
        *self.cache.metrics.confirmed_at.lock() = Some(now);
    }

    fn record_gauges(&self, st: &State) {
        self.cache.metrics.capacity.set(st.history.capacity() as f64);
        self.cache.metrics.objects.set(st.store.len() as f64);
    }
}

#[cfg(test)]
impl Writer {
    /// Applies one event (tests).
    pub(crate) fn event(&self, kind: EventType, object: CachedObject) {
        self.apply(Change::Event(kind, object, Instant::now()));
    }

    /// The persist feed, taken back to wait for its commits (tests).
    pub(crate) fn take_feed(&mut self) -> Option<Box<dyn ChangeSink>> {
        self.persist.take()
    }

    /// The sending end of the catch-up queue, as a catch-up watch holds it (tests).
    pub(crate) fn catch_up_sender(&self) -> tokio::sync::mpsc::Sender<Change> {
        self.catch_up.sender()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::{cm, cm_shape};
    use std::time::Duration;

    use crate::cache::resource::{CacheSettings, Scope};

    /// An upstream nobody listens at: no catch-up is asked for in these tests.
    fn nowhere() -> Arc<Upstream> {
        let cfg = crate::upstream::kubeconfig::UpstreamConfig::for_test("http://127.0.0.1:9");
        Arc::new(Upstream::new(&cfg, crate::upstream::UpstreamOptions::default()).unwrap())
    }

    #[tokio::test]
    async fn what_a_catch_up_queues_reaches_the_cache_only_through_its_writer() {
        let mut writer = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
        let upstream = nowhere();
        writer.replace(Objects::new(), 10);
        let queue = writer.catch_up_sender();
        queue.send(Change::Event(EventType::Added, cm("a", 11, ""), Instant::now())).await.unwrap();
        queue.send(Change::Bookmark(15)).await.unwrap();
        assert_eq!(writer.cache().current_rv(), 10, "queued, not applied");
        let first = writer.next_catch_up(&upstream).await;
        assert_eq!(writer.apply(first), 11);
        let second = writer.next_catch_up(&upstream).await;
        assert_eq!(writer.apply(second), 15);
        assert_eq!(writer.cache().current_rv(), 15);
        assert_eq!(writer.cache().snapshot().objects.len(), 1);
        // A replayed change older than the store is skipped, not applied twice.
        writer.event(EventType::Deleted, cm("a", 11, ""));
        assert_eq!(writer.cache().snapshot().objects.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_wake_when_the_writer_publishes_and_time_out_otherwise() {
        let writer = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
        let cache = writer.cache().clone();
        assert!(!cache.wait_ready(Duration::from_secs(1)).await, "never listed: times out");
        let waiter = tokio::spawn(async move { cache.wait_for_rv(12, Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        // Waiting before anything is published, so only a wake-up (not a
        // first look) can end the wait in time.
        assert!(!waiter.is_finished());
        writer.replace(Objects::new(), 10);
        writer.bookmark(12);
        assert!(waiter.await.unwrap());
    }
}
