//! One resource's cache: the store, the history and the dispatcher behind
//! one upstream list+watch, and the registration of downstream watchers.
//!
//! Concurrency: the reflector is the only writer: it owns the cache's
//! [`Writer`], the one handle whose methods change it. It applies an event under
//! the state's write lock and offers it to watchers before releasing it; a
//! new watcher reads the history (or a snapshot) and registers under the read
//! lock. So every event reaches a watcher exactly once: either in its initial
//! batch or through the dispatcher, never both, never neither. The current
//! resourceVersion is published after dispatch, which lets a watcher that
//! finds its queue empty know it has sent everything up to that version.

mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

pub(crate) use writer::{Change, Writer};

use super::dispatcher::Dispatcher;
use super::event::CacheEvent;
use super::filter::Filter;
use super::history::{History, TooOld};
use super::object::{CachedObject, ObjectShape};
use super::snapshots::KeptSnapshots;
use super::store::{Objects, Snapshot, Store};
use super::watcher::{Delivery, WatcherHandle};
use crate::encode::variant::ContentVariant;
use crate::encode::watch::EventType;
use crate::metrics as m;
use crate::selector::{FieldSelector, LabelSelector};

/// The metric handles a cache updates per event and per watcher, looked up
/// once: the per-call macros would build and hash the label set each time.
struct CacheMetrics {
    events_received: metrics::Counter,
    events_dispatched: metrics::Counter,
    deliveries: metrics::Counter,
    terminated_watchers: metrics::Counter,
    registered_watchers: metrics::Gauge,
    capacity: metrics::Gauge,
    objects: metrics::Gauge,
    read_wait: metrics::Histogram,
    staleness: metrics::Gauge,
    relisting: metrics::Gauge,
    fanout_queued: metrics::Histogram,
    fanout_handed: metrics::Histogram,
}

impl CacheMetrics {
    fn new(label: &str) -> Self {
        let l = || [("resource", label.to_owned())];
        Self {
            events_received: metrics::counter!(m::CACHE_EVENTS_RECEIVED, &l()),
            events_dispatched: metrics::counter!(m::CACHE_EVENTS_DISPATCHED, &l()),
            deliveries: metrics::counter!(m::CACHE_DELIVERIES, &l()),
            terminated_watchers: metrics::counter!(m::TERMINATED_WATCHERS, &l()),
            registered_watchers: metrics::gauge!(m::REGISTERED_WATCHERS, &l()),
            capacity: metrics::gauge!(m::CACHE_CAPACITY, &l()),
            objects: metrics::gauge!(m::CACHE_OBJECTS, &l()),
            read_wait: metrics::histogram!(m::CACHE_READ_WAIT, &l()),
            staleness: metrics::gauge!(m::CACHE_STALENESS, &l()),
            relisting: metrics::gauge!(m::CACHE_RELIST_IN_PROGRESS, &l()),
            fanout_queued: metrics::histogram!(m::FANOUT_DURATION, "resource" => label.to_owned(), "stage" => "queued"),
            fanout_handed: metrics::histogram!(m::FANOUT_DURATION, "resource" => label.to_owned(), "stage" => "handed"),
        }
    }
}

/// The state of the freshness proof (`freshness.rs` holds its logic): the
/// probe of the upstream's current version that requests share, whether a
/// catch-up watch is running, and where it queues what it reads for the
/// writer.
pub(crate) struct Freshness {
    pub(super) probe: Mutex<Option<Probe>>,
    pub(super) catching_up: AtomicBool,
    pub(super) catch_up: mpsc::Sender<Change>,
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freshness").field("catching_up", &self.catching_up.load(Ordering::Relaxed)).finish()
    }
}

pub(super) struct Probe {
    pub(super) started: Instant,
    pub(super) result: tokio::sync::watch::Receiver<Option<Option<u64>>>,
}

/// Settings every resource cache shares.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// How long events are kept for resuming watchers (`--events-history-window`).
    pub history_window: Duration,
    /// How long a watcher may stay full before it is closed.
    pub slow_watcher_grace: Duration,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { history_window: super::history::DEFAULT_WINDOW, slow_watcher_grace: Duration::from_secs(5) }
    }
}

/// The selectors that narrow a cache's upstream watch (`--cache-scope`).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// The selectors as query parameters, as given, for the upstream requests.
    pub query: Vec<(String, String)>,
}

impl Scope {
    pub fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

struct State {
    store: Store,
    history: History<Arc<CacheEvent>>,
}

pub(crate) struct ResourceCache {
    pub shape: ObjectShape,
    pub scope: Scope,
    settings: CacheSettings,
    state: RwLock<State>,
    dispatcher: Mutex<Dispatcher>,
    /// The resourceVersion the cache is current at, published after dispatch.
    current_rv: AtomicU64,
    /// Set by the first complete list.
    ready: AtomicBool,
    /// Wakes those waiting for `current_rv` or `ready` to change; they
    /// look at the atomics again (the one source of each fact).
    changed: Notify,
    /// Set while the initial list keeps failing (403, upstream down...):
    /// requests then pass through at once instead of waiting for readiness.
    initial_list_failing: AtomicBool,
    next_watcher_id: AtomicU64,
    /// Whether list items of this resource carry `kind`/`apiVersion`.
    list_items_typed: AtomicBool,
    label: String,
    metrics: CacheMetrics,
    freshness: Freshness,
    /// Snapshots kept for paginated lists and exact-version reads.
    snapshots: KeptSnapshots,
    /// When the upstream last confirmed the cache current: a list, an
    /// event or a bookmark arrived. `None` before the first list.
    confirmed_at: Mutex<Option<Instant>>,
    /// Set once the upstream stopped serving the resource: no new watcher.
    closed: AtomicBool,
    /// Protobuf variants turned off because the served schema drifted from
    /// the table ([`PROTOBUF_OFF_KIND`], [`PROTOBUF_OFF_METADATA`]), set by
    /// the reflector's schema check.
    protobuf_off: AtomicU8,
}

/// The kind's own protobuf ([`ContentVariant::Protobuf`]) is off.
pub(crate) const PROTOBUF_OFF_KIND: u8 = 1;
/// PartialObjectMetadata in protobuf is off (ObjectMeta drifted).
pub(crate) const PROTOBUF_OFF_METADATA: u8 = 2;

impl std::fmt::Debug for ResourceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceCache").field("resource", &self.label).finish_non_exhaustive()
    }
}

/// Where a new watcher starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartAt {
    /// Synthetic ADDED events for every matching object in the current state,
    /// then changes.
    CurrentState,
    /// Changes after this resourceVersion, from the history.
    After(u64),
}

/// A registered watcher and what it must be sent before live events.
pub(crate) struct Registration {
    pub handle: Arc<WatcherHandle>,
    /// For [`StartAt::CurrentState`]: the snapshot whose objects are sent as ADDED.
    pub snapshot: Option<Snapshot>,
    /// For [`StartAt::After`]: the history events the watcher missed.
    pub backlog: Vec<Delivery>,
    /// The version the initial state or backlog brings the watcher to.
    pub start_rv: u64,
}

impl ResourceCache {
    /// A new, empty cache and its one writer.
    pub(crate) fn create(shape: ObjectShape, scope: Scope, settings: CacheSettings) -> Writer {
        let (tx, rx) = mpsc::channel(writer::CATCH_UP_QUEUE);
        Writer::new(Arc::new(Self::new(shape, scope, settings, tx)), rx)
    }

    fn new(shape: ObjectShape, scope: Scope, settings: CacheSettings, catch_up: mpsc::Sender<Change>) -> Self {
        let label = shape.info.qualified_resource();
        let typed = !shape.info.is_builtin_group();
        let window = settings.history_window;
        Self {
            shape,
            scope,
            settings,
            state: RwLock::new(State { store: Store::default(), history: History::new(window, 0) }),
            dispatcher: Mutex::new(Dispatcher::default()),
            current_rv: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            changed: Notify::new(),
            initial_list_failing: AtomicBool::new(false),
            next_watcher_id: AtomicU64::new(1),
            list_items_typed: AtomicBool::new(typed),
            metrics: CacheMetrics::new(&label),
            label,
            freshness: Freshness { probe: Mutex::new(None), catching_up: AtomicBool::new(false), catch_up },
            snapshots: KeptSnapshots::new(window),
            confirmed_at: Mutex::new(None),
            closed: AtomicBool::new(false),
            protobuf_off: AtomicU8::new(0),
        }
    }

    /// Whether `variant` is turned off for this kind (schema drift): the
    /// cache then answers as for an object with no protobuf form.
    pub(crate) fn protobuf_disabled(&self, variant: ContentVariant) -> bool {
        let bit = match variant {
            ContentVariant::Protobuf => PROTOBUF_OFF_KIND,
            ContentVariant::PartialObjectMetadataProtobuf => PROTOBUF_OFF_METADATA,
            _ => return false,
        };
        self.protobuf_off.load(Ordering::Acquire) & bit != 0
    }

    /// Sets which protobuf variants are off ([`PROTOBUF_OFF_KIND`] |
    /// [`PROTOBUF_OFF_METADATA`]); returns what they were before.
    fn set_protobuf_off(&self, off: u8) -> u8 {
        self.protobuf_off.swap(off, Ordering::AcqRel)
    }

    /// The upstream no longer serves the resource: every watch stream ends,
    /// as the API server ends them when a CRD goes, and watchers that still
    /// arrive get 410 (and find the resource gone when they list again).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let ended = self.dispatcher.lock().end_all();
        if ended > 0 {
            self.metrics.terminated_watchers.increment(ended as u64);
            self.metrics.registered_watchers.decrement(ended as f64);
        }
    }

    /// Publishes how long ago the upstream last confirmed the cache current
    /// (a list, an event or a bookmark) as
    /// `watchmux_watch_cache_staleness_seconds`; called at each scrape. A
    /// quiet resource is confirmed by the upstream's bookmarks, about once
    /// a minute.
    pub(crate) fn publish_staleness(&self, now: Instant) {
        if let Some(at) = *self.confirmed_at.lock() {
            self.metrics.staleness.set(now.saturating_duration_since(at).as_secs_f64());
        }
    }

    fn confirm_current(&self, now: Instant) {
        *self.confirmed_at.lock() = Some(now);
    }

    /// The reflector lists again after having been in step (or the list
    /// ended): published as `watchmux_watch_cache_relist_in_progress`.
    fn set_relisting(&self, relisting: bool) {
        self.metrics.relisting.set(if relisting { 1.0 } else { 0.0 });
    }

    /// `configmaps`, `deployments.apps`: the metric label of this cache.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    pub(super) fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.current_rv.load(Ordering::Acquire)
    }

    /// True when list items of this resource carry `kind` and `apiVersion`.
    pub(crate) fn list_items_typed(&self) -> bool {
        self.list_items_typed.load(Ordering::Relaxed)
    }

    fn set_list_items_typed(&self, typed: bool) {
        self.list_items_typed.store(typed, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn watcher_count(&self) -> usize {
        self.dispatcher.lock().len()
    }

    /// Installs the result of a full LIST at `rv`. The first time, the cache
    /// becomes ready. After that (a relist), the store is replaced in one step
    /// and watchers receive the difference as ordinary events.
    fn replace(&self, objects: Objects, rv: u64) {
        let now = Instant::now();
        let mut st = self.state.write();
        self.confirm_current(now);
        if !self.is_ready() {
            st.store = Store::new(objects, rv);
            st.history = History::new(self.settings.history_window, rv);
            self.record_gauges(&st);
            drop(st);
            self.ready.store(true, Ordering::Release);
            self.publish(rv);
            return;
        }
        let before = st.store.rv();
        let replaced = st.store.replace(objects, rv);
        if replaced.versions_reused {
            // Events sharing a version cannot be resumed between; start the
            // history over so nobody resumes inside the gap.
            tracing::warn!(resource = %self.label, "relist produced deletions without distinct versions");
        }
        let mut dispatcher = self.dispatcher.lock();
        // A watcher that started inside the gap (from a version a client got
        // from the upstream, newer than the cache was) cannot be told which of
        // the relist's changes came after its version: 410, before it is
        // offered any of them. Watchers at or below `before` get the whole
        // difference; those at `rv` or later need none of it.
        let expired = dispatcher.expire_started_between(before, rv);
        if expired > 0 {
            self.metrics.terminated_watchers.increment(expired as u64);
            self.metrics.registered_watchers.decrement(expired as f64);
        }
        for event in replaced.events {
            let event = Arc::new(event);
            // The history needs strictly increasing versions; a difference
            // event at or below its newest (which a well-behaved upstream never
            // causes) is still delivered, just not kept for resuming.
            if !replaced.versions_reused && event.rv > st.history.newest_rv() {
                st.history.push(event.rv, now, event.clone());
            }
            self.dispatch(&mut dispatcher, &event, now);
        }
        if replaced.versions_reused {
            st.history.reset(rv);
        } else {
            st.history.mark_unobserved(before, rv);
        }
        drop(dispatcher);
        self.record_gauges(&st);
        drop(st);
        self.publish(rv);
    }

    /// Applies one upstream event, whose line had been read at `arrived`.
    fn apply_at(&self, kind: EventType, object: CachedObject, arrived: std::time::Instant) {
        let now = Instant::now();
        self.metrics.events_received.increment(1);
        self.confirm_current(now);
        let mut st = self.state.write();
        if object.rv <= st.store.rv() {
            // Already seen (a replay after a resumed watch): applying it again
            // would break the history's order.
            return;
        }
        let event = Arc::new(st.store.apply(kind, Arc::new(object)).arrived_at(arrived));
        st.history.push(event.rv, now, event.clone());
        let mut dispatcher = self.dispatcher.lock();
        let delivered = self.dispatch(&mut dispatcher, &event, now);
        drop(dispatcher);
        if let Some(fanout) = &event.fanout
            && delivered > 0
        {
            self.metrics.fanout_queued.record(fanout.arrived.elapsed());
            if fanout.queued(delivered) {
                self.metrics.fanout_handed.record(fanout.arrived.elapsed());
            }
        }
        self.record_gauges(&st);
        let rv = st.store.rv();
        drop(st);
        self.publish(rv);
    }

    /// Applies one upstream event that arrived now (tests).
    #[cfg(test)]
    fn apply(&self, kind: EventType, object: CachedObject) {
        self.apply_at(kind, object, std::time::Instant::now());
    }

    /// An upstream bookmark: nothing changed up to `rv`.
    fn bookmark(&self, rv: u64) {
        self.confirm_current(Instant::now());
        let mut st = self.state.write();
        st.store.advance(rv);
        let rv = st.store.rv();
        drop(st);
        self.publish(rv);
    }

    /// Offers `event` to its watchers; returns how many it was queued for.
    fn dispatch(&self, dispatcher: &mut Dispatcher, event: &Arc<CacheEvent>, now: Instant) -> usize {
        let out = dispatcher.dispatch(event, now);
        self.metrics.events_dispatched.increment(1);
        self.metrics.deliveries.increment(out.delivered as u64);
        if out.terminated > 0 {
            self.metrics.terminated_watchers.increment(out.terminated as u64);
            self.metrics.registered_watchers.decrement(out.terminated as f64);
        }
        out.delivered
    }

    /// A watcher's body handed a live event's frame to its connection: the
    /// last one to do so ends the event's fan-out time.
    pub(crate) fn fanout_handed(&self, event: &CacheEvent) {
        if let Some(fanout) = &event.fanout
            && fanout.handed_one()
        {
            self.metrics.fanout_handed.record(fanout.arrived.elapsed());
        }
    }

    /// Publishes the version the cache is now current at (and readiness,
    /// stored just before) to those waiting.
    fn publish(&self, rv: u64) {
        self.current_rv.fetch_max(rv, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Waits up to `timeout` for `done` to hold, looking again each time
    /// the cache publishes.
    async fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let until = async {
            loop {
                let changed = self.changed.notified();
                let mut changed = std::pin::pin!(changed);
                // Registered before looking, so a publish in between wakes us.
                changed.as_mut().enable();
                if done() {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, until).await.is_ok()
    }

    fn record_gauges(&self, st: &State) {
        self.metrics.capacity.set(st.history.capacity() as f64);
        self.metrics.objects.set(st.store.len() as f64);
    }

    /// Records whether the latest attempt at the initial list failed.
    fn set_initial_list_failing(&self, failing: bool) {
        self.initial_list_failing.store(failing, Ordering::Release);
    }

    /// Waits up to `timeout` for the initial list to complete; at once false
    /// when the last attempt failed (waiting would only delay the request).
    pub(crate) async fn wait_ready(&self, timeout: Duration) -> bool {
        if self.is_ready() {
            return true;
        }
        if self.initial_list_failing.load(Ordering::Acquire) {
            return false;
        }
        self.wait_until(timeout, || self.is_ready()).await
    }

    /// Waits up to `timeout` for the cache to be current at `rv` or later.
    pub(crate) async fn wait_for_rv(&self, rv: u64, timeout: Duration) -> bool {
        if self.current_rv() >= rv {
            return true;
        }
        let started = Instant::now();
        let reached = self.wait_until(timeout, || self.current_rv() >= rv).await;
        self.metrics.read_wait.record(started.elapsed().as_secs_f64());
        reached
    }

    /// A consistent view of the whole store.
    pub(crate) fn snapshot(&self) -> Snapshot {
        self.state.read().store.snapshot()
    }

    /// The current state, kept so that later pages of a paginated list (and
    /// exact-version reads of this version) are served from the same state.
    pub(crate) fn snapshot_for_pages(&self) -> Snapshot {
        let snap = self.snapshot();
        self.keep_snapshot(&snap);
        snap
    }

    /// Keeps `snap` for later pages that name its version.
    pub(crate) fn keep_snapshot(&self, snap: &Snapshot) {
        self.snapshots.keep(snap);
    }

    /// The state at exactly `rv`, if the cache holds it: the current state
    /// when it is at `rv`, or a snapshot kept for pagination.
    pub(crate) fn snapshot_at(&self, rv: u64) -> Option<Snapshot> {
        let current = self.snapshot();
        if current.rv == rv {
            return Some(current);
        }
        self.snapshots.get(rv)
    }

    /// Registers a watcher, atomically with respect to incoming events.
    pub(crate) fn register(&self, filter: Filter, start: StartAt) -> Result<Registration, TooOld> {
        let st = self.state.read();
        let current = st.store.rv();
        if self.closed.load(Ordering::Acquire) {
            let requested = match start {
                StartAt::After(rv) => rv,
                StartAt::CurrentState => current,
            };
            return Err(TooOld { requested, oldest: current });
        }
        let (snapshot, backlog, start_rv) = match start {
            StartAt::CurrentState => (Some(st.store.snapshot()), Vec::new(), current),
            StartAt::After(rv) => {
                let backlog = st.history.since(rv)?.filter_map(|e| Delivery::for_filter(e, &filter)).collect();
                (None, backlog, current.max(rv))
            }
        };
        let id = self.next_watcher_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(WatcherHandle::new(id, filter, start_rv, self.settings.slow_watcher_grace));
        self.dispatcher.lock().add(handle.clone());
        drop(st);
        self.metrics.registered_watchers.increment(1.0);
        Ok(Registration { handle, snapshot, backlog, start_rv })
    }

    /// Removes a watcher whose stream ended.
    pub(crate) fn deregister(&self, handle: &WatcherHandle) {
        let mut d = self.dispatcher.lock();
        let before = d.len();
        d.remove(handle);
        if d.len() < before {
            self.metrics.registered_watchers.decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::object::tests::{cm, cm_shape};
    use std::task::Waker;

    fn cache() -> ResourceCache {
        let c = ResourceCache::new(cm_shape(), Scope::default(), CacheSettings::default(), mpsc::channel(1).0);
        c.replace(Objects::new(), 10);
        c
    }

    fn drain(h: &WatcherHandle) -> Vec<(EventType, String, u64)> {
        let waker = Waker::noop().clone();
        let mut out = Vec::new();
        while let Ok(Some(d)) = h.take(&waker) {
            out.push((d.kind, d.object().key.name.clone(), d.object().rv));
        }
        out
    }

    #[tokio::test]
    async fn watchers_resume_from_history_then_live_without_gaps_or_duplicates() {
        let c = cache();
        c.apply(EventType::Added, cm("a", 11, ""));
        c.apply(EventType::Modified, cm("a", 12, ""));
        let reg = c.register(Filter::default(), StartAt::After(11)).unwrap();
        assert_eq!(reg.backlog.len(), 1);
        assert_eq!(reg.backlog[0].event.rv, 12);
        c.apply(EventType::Added, cm("b", 13, ""));
        assert_eq!(drain(&reg.handle), vec![(EventType::Added, "b".into(), 13)]);
        assert_eq!(c.current_rv(), 13);
    }

    #[tokio::test]
    async fn replayed_events_are_ignored() {
        let c = cache();
        c.apply(EventType::Added, cm("a", 11, ""));
        let reg = c.register(Filter::default(), StartAt::After(11)).unwrap();
        c.apply(EventType::Added, cm("a", 11, ""));
        assert!(drain(&reg.handle).is_empty());
    }

    #[tokio::test]
    async fn relist_reaches_watchers_as_ordinary_events() {
        let c = cache();
        c.apply(EventType::Added, cm("a", 11, ""));
        c.apply(EventType::Added, cm("b", 12, ""));
        let reg = c.register(Filter::default(), StartAt::After(12)).unwrap();
        let mut fresh = Objects::new();
        let b = Arc::new(cm("b", 15, ""));
        fresh.insert(b.key.clone(), b);
        c.replace(fresh, 20);
        let seen = drain(&reg.handle);
        assert_eq!(seen, vec![(EventType::Deleted, "a".into(), 13), (EventType::Modified, "b".into(), 15)]);
        assert_eq!(c.current_rv(), 20);
        // From the version before the relist, a new watcher gets the whole
        // difference; from the relist's version, none of it.
        assert_eq!(c.register(Filter::default(), StartAt::After(12)).unwrap().backlog.len(), 2);
        assert!(c.register(Filter::default(), StartAt::After(20)).unwrap().backlog.is_empty());
        // Inside the gap the cache never saw, a version (made up for a
        // deletion, or held by a client from the upstream) says nothing about
        // which changes came after it: 410, so the client lists again.
        for inside in [13, 15, 19] {
            let err = c.register(Filter::default(), StartAt::After(inside)).err().expect("410");
            assert_eq!(err.to_string(), format!("too old resource version: {inside} (20)"));
        }
    }

    /// Issue 16's lost deletions: a client lists straight from the upstream
    /// at 16 while the cache is behind at 12, then watches from 16 through
    /// the cache. When the relist lands, the deletion of `a` (really after
    /// 16) can only be given a version from the gap, below 16: the watcher
    /// would skip it and keep `a` forever. It gets 410 instead, and nothing
    /// of the relist before it.
    #[tokio::test]
    async fn a_watcher_from_inside_a_relist_gap_gets_410_not_a_partial_difference() {
        let c = cache();
        c.apply(EventType::Added, cm("a", 11, ""));
        c.apply(EventType::Added, cm("b", 12, ""));
        let from_upstream = c.register(Filter::default(), StartAt::After(16)).unwrap();
        let before_gap = c.register(Filter::default(), StartAt::After(12)).unwrap();
        let after_gap = c.register(Filter::default(), StartAt::After(20)).unwrap();
        let mut fresh = Objects::new();
        let b = Arc::new(cm("b", 18, ""));
        fresh.insert(b.key.clone(), b);
        c.replace(fresh, 20);
        let waker = Waker::noop().clone();
        match from_upstream.handle.take(&waker) {
            Err(crate::cache::watcher::Terminated::Expired(too_old)) => {
                assert_eq!(too_old.to_string(), "too old resource version: 16 (20)");
            }
            other => panic!("expected 410, got {other:?}"),
        }
        assert_eq!(
            drain(&before_gap.handle),
            vec![(EventType::Deleted, "a".into(), 13), (EventType::Modified, "b".into(), 18)]
        );
        assert!(drain(&after_gap.handle).is_empty());
        c.apply(EventType::Added, cm("c", 21, ""));
        assert_eq!(drain(&after_gap.handle), vec![(EventType::Added, "c".into(), 21)]);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_version_ends_when_it_arrives_or_times_out() {
        let c = Arc::new(cache());
        assert!(c.wait_for_rv(10, Duration::ZERO).await);
        assert!(!c.wait_for_rv(11, Duration::from_secs(3)).await);
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { c2.wait_for_rv(30, Duration::from_secs(3)).await });
        tokio::task::yield_now().await;
        c.bookmark(30);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_initial_list_does_not_make_requests_wait() {
        let c = ResourceCache::new(cm_shape(), Scope::default(), CacheSettings::default(), mpsc::channel(1).0);
        let before = Instant::now();
        c.set_initial_list_failing(true);
        assert!(!c.wait_ready(Duration::from_secs(3)).await);
        assert_eq!(Instant::now(), before, "waited although the list is failing");
        c.set_initial_list_failing(false);
        assert!(!c.wait_ready(Duration::from_secs(3)).await);
        assert_eq!(Instant::now() - before, Duration::from_secs(3), "a starting cache is waited for");
        c.replace(Objects::new(), 5);
        assert!(c.wait_ready(Duration::from_secs(3)).await);
    }

    #[tokio::test]
    async fn too_old_versions_are_refused() {
        let c = ResourceCache::new(cm_shape(), Scope::default(), CacheSettings::default(), mpsc::channel(1).0);
        c.replace(Objects::new(), 100);
        let err = c.register(Filter::default(), StartAt::After(5)).err().unwrap();
        assert_eq!(err.to_string(), "too old resource version: 5 (100)");
    }
}
