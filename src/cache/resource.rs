//! One resource's cache, as its readers see it: the store, the history and
//! the fan-out behind one upstream list+watch, the registration of
//! downstream watchers, and the waits for readiness and versions.
//!
//! Who writes the cache: only its [`Writer`] (`resource/writer.rs`), made
//! with it by [`ResourceCache::create`] and owned by the reflector, as
//! kube-runtime's `store()` returns a `(Store, Writer)` pair. This handle
//! only reads; the catch-up watch of the freshness proof queues what it
//! reads to the writer.
//!
//! Concurrency: the writer applies an event under the state's write lock and
//! offers it to watchers ([`fanout`]) before releasing it; a new watcher reads
//! the history (or a snapshot) and registers under the read lock. So every
//! event reaches a watcher exactly once: either in its initial batch or
//! through the fan-out, never both, never neither. The current
//! resourceVersion is published ([`lifecycle`]) after dispatch, which lets a
//! watcher that finds its queue empty know it has sent everything up to
//! that version.

pub(crate) mod backfill;
mod cbor_cell;
pub(crate) mod check_state;
pub(crate) mod fanout;
pub(crate) mod freshness;
pub(crate) mod lifecycle;
pub(crate) mod ring_read;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

pub(crate) use cbor_cell::CborCell;
pub(crate) use writer::{ChangeSink, Writer};

use self::check_state::CheckState;
use self::fanout::Fanout;
use self::freshness::Freshness;
use self::lifecycle::{Lifecycle, Published};
use super::content::{AvailabilityCell, ProtobufAvailability};
use super::delivery::filter::Filter;
use super::delivery::watcher::{Delivery, QUEUE_SOFT_LIMIT, WatcherHandle};
use super::state::event::CacheEvent;
use super::state::history::{History, TooOld};
use super::state::object::ObjectShape;
use super::state::snapshots::{KeptSnapshots, PageEnd};
use super::state::store::{Snapshot, Store};
use super::upstream_wire::collection_uri;
use super::warnings::Warnings;
use crate::metrics as m;
use crate::negotiate::UpstreamCbor;
use crate::selector::{FieldSelector, LabelSelector};

/// The metric handles of the cache itself (the fan-out has its own), looked
/// up once: the per-call macros would build and hash the label set each time.
struct CacheMetrics {
    /// `configmaps`, `deployments.apps`: the metric label of this cache.
    label: String,
    events_received: metrics::Counter,
    capacity: metrics::Gauge,
    objects: metrics::Gauge,
    read_wait: metrics::Histogram,
    staleness: metrics::Gauge,
    relisting: metrics::Gauge,
    /// When the upstream last confirmed the cache current: a list, an event
    /// or a bookmark arrived. `None` before the first list. The source of
    /// the staleness gauge, set at each scrape.
    confirmed_at: Mutex<Option<Instant>>,
}

impl CacheMetrics {
    fn new(label: String) -> Self {
        let l = || [("resource", label.clone())];
        Self {
            events_received: metrics::counter!(m::CACHE_EVENTS_RECEIVED, &l()),
            capacity: metrics::gauge!(m::CACHE_CAPACITY, &l()),
            objects: metrics::gauge!(m::CACHE_OBJECTS, &l()),
            // Not by resource: a total says whether reads wait, at a
            // histogram's cost instead of one per cached resource.
            read_wait: metrics::histogram!(m::CACHE_READ_WAIT),
            staleness: metrics::gauge!(m::CACHE_STALENESS, &l()),
            relisting: metrics::gauge!(m::CACHE_RELIST_IN_PROGRESS, &l()),
            confirmed_at: Mutex::new(None),
            label,
        }
    }
}

/// What the upstream showed about the form it serves this resource in.
struct UpstreamForm {
    /// Whether list items of this resource carry `kind`/`apiVersion`.
    list_items_typed: AtomicBool,
    /// The protobuf forms the schema check left on (see `content.rs`).
    protobuf: AvailabilityCell,
    /// Whether the upstream serves CBOR for it (`cbor_probe.rs`).
    cbor: CborCell,
    /// The API server's warnings on this resource's reads (`warnings.rs`).
    warnings: Warnings,
}

/// Settings every resource cache shares.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// How long events are kept for resuming watchers (`--events-history-window`).
    pub history_window: Duration,
    /// How long a watcher may stay full before it is moved off live
    /// delivery to read what it missed from the history ring.
    pub slow_watcher_grace: Duration,
    /// How often each cache is checked against the upstream
    /// (`--consistency-check-period`); zero: never.
    pub consistency_check_period: Duration,
    /// Events a watcher may lag before it counts as full: [`QUEUE_SOFT_LIMIT`]
    /// but in tests that want watchers behind after a few events.
    pub(crate) queue_soft_limit: usize,
    /// How the cache asks the upstream for its state.
    pub sync: SyncSettings,
}

/// How a cache asks the upstream for its state (`--upstream-gzip-lists`,
/// `--upstream-watch-list`). They belong to the cache, not to the upstream
/// client: they shape what its reflector, consistency check and freshness
/// probe ask for, not how a request travels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncSettings {
    /// Whether the cache's own LISTs (full lists, relists, the consistency
    /// check, the freshness probe) ask for gzip.
    pub gzip_lists: bool,
    /// Whether full lists are taken as watch-lists, until the upstream
    /// shows it serves none (`sync::watch_list`).
    pub watch_list: bool,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            history_window: super::state::history::DEFAULT_WINDOW,
            slow_watcher_grace: Duration::from_secs(5),
            consistency_check_period: check_state::DEFAULT_PERIOD,
            queue_soft_limit: QUEUE_SOFT_LIMIT,
            sync: SyncSettings::default(),
        }
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
    /// How the cache asks the upstream for its state.
    pub sync: SyncSettings,
    state: RwLock<State>,
    /// Where the cache is in its life, and the version it is current at.
    published: Published,
    fanout: Fanout,
    /// Snapshots kept for paginated lists and exact-version reads.
    snapshots: KeptSnapshots,
    form: UpstreamForm,
    trust: Trust,
    /// Watches older than the history, served from history fetched for
    /// them (`backfill.rs`).
    backfills: backfill::Backfills,
    metrics: CacheMetrics,
}

/// Whether the cache may answer a read that asks for the upstream's own
/// state: proven as new as the upstream (the freshness proof) and proven
/// the same (the consistency check).
#[derive(Default)]
struct Trust {
    /// The freshness proof's state, shared by the reads that need it.
    freshness: Freshness,
    /// What the consistency check (`consistency_check.rs`) shares with the writer.
    check_state: CheckState,
    /// Loaded from disk (`persist.rs`) and not yet answered by the upstream.
    unconfirmed: AtomicBool,
    /// Offline mode answered a consistent read from this cache while the
    /// upstream could not be reached (`stale_reads.rs`), and has not seen it
    /// back since.
    serving_stale: AtomicBool,
}

impl std::fmt::Debug for ResourceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceCache").field("resource", &self.metrics.label).finish_non_exhaustive()
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
    pub since_version: Vec<Delivery>,
    /// The version the initial state or those events bring the watcher to.
    pub start_rv: u64,
}

impl ResourceCache {
    /// A new, empty cache and its one writer; the readers' handle is
    /// [`Writer::cache`].
    pub(crate) fn create(shape: ObjectShape, scope: Scope, settings: CacheSettings) -> Writer {
        Writer::new(Arc::new(Self::new(shape, scope, &settings)), settings.history_window)
    }

    fn new(shape: ObjectShape, scope: Scope, settings: &CacheSettings) -> Self {
        let label = shape.info.qualified_resource();
        let typed = !shape.info.is_builtin_group();
        let window = settings.history_window;
        Self {
            shape,
            scope,
            sync: settings.sync,
            state: RwLock::new(State { store: Store::default(), history: History::new(window, 0) }),
            published: Published::new(),
            fanout: Fanout::new(&label, settings.slow_watcher_grace, settings.queue_soft_limit),
            snapshots: KeptSnapshots::new(window),
            form: UpstreamForm {
                list_items_typed: AtomicBool::new(typed),
                protobuf: AvailabilityCell::default(),
                cbor: CborCell::default(),
                warnings: Warnings::default(),
            },
            trust: Trust::default(),
            backfills: backfill::Backfills::default(),
            metrics: CacheMetrics::new(label),
        }
    }

    /// The protobuf forms the schema check left on for this kind; the
    /// decision that uses it is `content::answer_form`.
    pub(crate) fn protobuf_availability(&self) -> ProtobufAvailability {
        self.form.protobuf.load()
    }

    /// Whether the upstream serves CBOR for this resource, as last probed.
    pub(crate) fn upstream_cbor(&self) -> UpstreamCbor {
        self.form.cbor.load()
    }

    /// Publishes how long ago the upstream last confirmed the cache current
    /// (a list, an event or a bookmark) as
    /// `watchmux_watch_cache_staleness_seconds`; called at each scrape. A
    /// quiet resource is confirmed by the upstream's bookmarks, about once
    /// a minute.
    pub(crate) fn publish_staleness(&self, now: Instant) {
        if let Some(at) = *self.metrics.confirmed_at.lock() {
            self.metrics.staleness.set(now.saturating_duration_since(at).as_secs_f64());
        }
    }

    /// The upstream URL of this cache's collection: `params`, then the
    /// scope's selectors.
    pub(crate) fn collection_uri(&self, params: &[(&str, String)]) -> String {
        collection_uri(&self.shape.info, &self.scope.query, params)
    }

    /// `configmaps`, `deployments.apps`: the metric label of this cache.
    pub(crate) fn label(&self) -> &str {
        &self.metrics.label
    }

    /// The freshness proof's state (`freshness.rs`).
    pub(super) fn freshness(&self) -> &Freshness {
        &self.trust.freshness
    }

    /// The consistency check's state (`consistency_check.rs`).
    pub(crate) fn check_state(&self) -> &CheckState {
        &self.trust.check_state
    }

    /// Loaded from disk and not yet answered by the upstream: its state is
    /// some state the upstream had, but nothing proves it is still current.
    pub(crate) fn is_unconfirmed(&self) -> bool {
        self.trust.unconfirmed.load(Ordering::Acquire)
    }

    /// Offline mode's state for this cache (`stale_reads.rs`).
    pub(crate) fn serving_stale(&self) -> &AtomicBool {
        &self.trust.serving_stale
    }

    /// The upstream stopped serving the resource.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.published.now().lifecycle, Lifecycle::Closed { .. })
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.published.now().lifecycle.is_listed()
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.published.now().rv
    }

    /// The API server's warnings on this resource's reads.
    pub(crate) fn warnings(&self) -> &Warnings {
        &self.form.warnings
    }

    /// True when list items of this resource carry `kind` and `apiVersion`.
    pub(crate) fn list_items_typed(&self) -> bool {
        self.form.list_items_typed.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn watcher_count(&self) -> usize {
        self.fanout.len()
    }

    /// A watcher's body handed a live event's frame to its connection.
    pub(crate) fn fanout_handed(&self, event: &CacheEvent) {
        self.fanout.handed(event);
    }

    /// Waits up to `timeout` for the initial list to complete; at once false
    /// when the last attempt failed (waiting would only delay the request),
    /// or when the resource went before it was ever listed.
    pub(crate) async fn wait_ready(&self, timeout: Duration) -> bool {
        match self.published.now().lifecycle {
            Lifecycle::Ready | Lifecycle::Closed { listed: true } => true,
            Lifecycle::InitialListFailing | Lifecycle::Closed { listed: false } => false,
            Lifecycle::Starting => self.published.wait_until(timeout, |p| p.lifecycle.is_listed()).await,
        }
    }

    /// Waits up to `timeout` for the cache to be current at `rv` or later.
    pub(crate) async fn wait_for_rv(&self, rv: u64, timeout: Duration) -> bool {
        if self.current_rv() >= rv {
            return true;
        }
        let started = Instant::now();
        let reached = self.published.wait_until(timeout, |p| p.rv >= rv).await;
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

    /// How many items follow the page that ended at `end`, when an earlier
    /// page of the same list counted them.
    pub(crate) fn remaining_after(&self, end: &PageEnd) -> Option<u64> {
        self.snapshots.remaining_after(end)
    }

    /// Notes the count of what follows the page that ended at `end`, for the
    /// next page.
    pub(crate) fn note_remaining(&self, end: PageEnd, remaining: u64) {
        self.snapshots.note_remaining(end, remaining);
    }

    /// Whether a watch from `rv` can be served from the history: every
    /// event after it is there (or still to come).
    pub(crate) fn bridges(&self, rv: u64) -> bool {
        self.state.read().history.since(rv).is_ok()
    }

    /// Registers a watcher, atomically with respect to incoming events.
    pub(crate) fn register(&self, filter: Filter, start: StartAt) -> Result<Registration, TooOld> {
        let st = self.state.read();
        let current = st.store.rv();
        if matches!(self.published.now().lifecycle, Lifecycle::Closed { .. }) {
            let requested = match start {
                StartAt::After(rv) => rv,
                StartAt::CurrentState => current,
            };
            return Err(TooOld { requested, oldest: current });
        }
        let (snapshot, since_version, start_rv) = match start {
            StartAt::CurrentState => (Some(st.store.snapshot()), Vec::new(), current),
            StartAt::After(rv) => {
                let since_version = st.history.since(rv)?.filter_map(|e| Delivery::for_filter(e, &filter)).collect();
                (None, since_version, current.max(rv))
            }
        };
        let handle = self.fanout.add(filter, start_rv);
        drop(st);
        Ok(Registration { handle, snapshot, since_version, start_rv })
    }

    /// Removes a watcher whose stream ended.
    pub(crate) fn deregister(&self, handle: &WatcherHandle) {
        self.fanout.remove(handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::{cm, cm_shape};
    use crate::cache::state::store::Objects;
    use crate::encode::watch::EventType;
    use std::task::Waker;

    fn fresh() -> Writer {
        ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default())
    }

    fn cache() -> Writer {
        let w = fresh();
        w.replace(Objects::new(), 10);
        w
    }

    fn drain(h: &WatcherHandle) -> Vec<(EventType, String, u64)> {
        let waker = Waker::noop().clone();
        let mut out = Vec::new();
        while let Ok(crate::cache::delivery::watcher::Next::Event(d)) = h.take(&waker) {
            out.push((d.kind, d.object().key.name.to_string(), d.object().rv));
        }
        out
    }

    #[tokio::test]
    async fn watchers_resume_from_history_then_live_without_gaps_or_duplicates() {
        let w = cache();
        let c = w.cache();
        w.event(EventType::Added, cm("a", 11, ""));
        w.event(EventType::Modified, cm("a", 12, ""));
        let reg = c.register(Filter::default(), StartAt::After(11)).unwrap();
        assert_eq!(reg.since_version.len(), 1);
        assert_eq!(reg.since_version[0].event.rv, 12);
        w.event(EventType::Added, cm("b", 13, ""));
        assert_eq!(drain(&reg.handle), vec![(EventType::Added, "b".into(), 13)]);
        assert_eq!(c.current_rv(), 13);
    }

    #[tokio::test]
    async fn replayed_events_are_ignored() {
        let w = cache();
        let c = w.cache();
        w.event(EventType::Added, cm("a", 11, ""));
        let reg = c.register(Filter::default(), StartAt::After(11)).unwrap();
        w.event(EventType::Added, cm("a", 11, ""));
        assert!(drain(&reg.handle).is_empty());
    }

    #[tokio::test]
    async fn relist_reaches_watchers_as_ordinary_events() {
        let w = cache();
        let c = w.cache();
        w.event(EventType::Added, cm("a", 11, ""));
        w.event(EventType::Added, cm("b", 12, ""));
        let reg = c.register(Filter::default(), StartAt::After(12)).unwrap();
        let mut fresh = Objects::new();
        let b = Arc::new(cm("b", 15, ""));
        fresh.insert(b.key.clone(), b);
        w.replace(fresh, 20);
        let seen = drain(&reg.handle);
        assert_eq!(seen, vec![(EventType::Deleted, "a".into(), 13), (EventType::Modified, "b".into(), 15)]);
        assert_eq!(c.current_rv(), 20);
        // From the version before the relist, a new watcher gets the whole
        // difference; from the relist's version, none of it.
        assert_eq!(c.register(Filter::default(), StartAt::After(12)).unwrap().since_version.len(), 2);
        assert!(c.register(Filter::default(), StartAt::After(20)).unwrap().since_version.is_empty());
        // Inside the gap the cache never saw, a version (made up for a
        // deletion, or held by a client from the upstream) says nothing about
        // which changes came after it: 410, so the client lists again.
        for inside in [13, 15, 19] {
            let err = c.register(Filter::default(), StartAt::After(inside)).err().expect("410");
            assert_eq!(err.to_string(), format!("too old resource version: {inside} (20)"));
        }
    }

    /// Lost deletions: a client lists straight from the upstream
    /// at 16 while the cache is behind at 12, then watches from 16 through
    /// the cache. When the relist lands, the deletion of `a` (really after
    /// 16) can only be given a version from the gap, below 16: the watcher
    /// would skip it and keep `a` forever. It gets 410 instead, and nothing
    /// of the relist before it.
    #[tokio::test]
    async fn a_watcher_from_inside_a_relist_gap_gets_410_not_a_partial_difference() {
        let w = cache();
        let c = w.cache();
        w.event(EventType::Added, cm("a", 11, ""));
        w.event(EventType::Added, cm("b", 12, ""));
        let from_upstream = c.register(Filter::default(), StartAt::After(16)).unwrap();
        let before_gap = c.register(Filter::default(), StartAt::After(12)).unwrap();
        let after_gap = c.register(Filter::default(), StartAt::After(20)).unwrap();
        let mut fresh = Objects::new();
        let b = Arc::new(cm("b", 18, ""));
        fresh.insert(b.key.clone(), b);
        w.replace(fresh, 20);
        let waker = Waker::noop().clone();
        match from_upstream.handle.take(&waker) {
            Err(crate::cache::delivery::watcher::Terminated::Expired(too_old)) => {
                assert_eq!(too_old.to_string(), "too old resource version: 16 (20)");
            }
            other => panic!("expected 410, got {other:?}"),
        }
        assert_eq!(
            drain(&before_gap.handle),
            vec![(EventType::Deleted, "a".into(), 13), (EventType::Modified, "b".into(), 18)]
        );
        assert!(drain(&after_gap.handle).is_empty());
        w.event(EventType::Added, cm("c", 21, ""));
        assert_eq!(drain(&after_gap.handle), vec![(EventType::Added, "c".into(), 21)]);
    }

    /// A relist that heals a cache the consistency check found different:
    /// what its watchers were sent came from a wrong cache, and the object
    /// it missed carries a version below what they saw, so no difference in
    /// order exists. Every watcher gets 410, and nobody resumes from before.
    #[tokio::test]
    async fn a_healing_relist_ends_every_watcher_with_410_and_forgets_the_history() {
        let w = cache();
        let c = w.cache();
        w.event(EventType::Added, cm("a", 11, ""));
        // The upstream also had `b` at 12, which the cache missed.
        w.event(EventType::Modified, cm("a", 13, ""));
        let watching = c.register(Filter::default(), StartAt::After(13)).unwrap();
        c.check_state().ask_for_relist();
        let mut fresh = Objects::new();
        for obj in [cm("a", 13, ""), cm("b", 12, "")] {
            let obj = Arc::new(obj);
            fresh.insert(obj.key.clone(), obj);
        }
        w.replace(fresh, 14);
        let waker = Waker::noop().clone();
        match watching.handle.take(&waker) {
            Err(crate::cache::delivery::watcher::Terminated::Expired(too_old)) => {
                assert_eq!(too_old.to_string(), "too old resource version: 13 (14)");
            }
            other => panic!("expected 410, got {other:?}"),
        }
        assert!(c.register(Filter::default(), StartAt::After(13)).is_err(), "resumed from before the heal");
        assert!(!c.check_state().is_unproven());
        // From the healed list on, events flow as usual.
        let after = c.register(Filter::default(), StartAt::After(14)).unwrap();
        w.event(EventType::Added, cm("c", 15, ""));
        assert_eq!(drain(&after.handle), vec![(EventType::Added, "c".into(), 15)]);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_version_ends_when_it_arrives_or_times_out() {
        let w = cache();
        let c = w.cache().clone();
        assert!(c.wait_for_rv(10, Duration::ZERO).await);
        assert!(!c.wait_for_rv(11, Duration::from_secs(3)).await);
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { c2.wait_for_rv(30, Duration::from_secs(3)).await });
        tokio::task::yield_now().await;
        w.bookmark(30);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_initial_list_does_not_make_requests_wait() {
        let w = fresh();
        let c = w.cache();
        let before = Instant::now();
        w.set_initial_list_failing(true);
        assert!(!c.wait_ready(Duration::from_secs(3)).await);
        assert_eq!(Instant::now(), before, "waited although the list is failing");
        w.set_initial_list_failing(false);
        assert!(!c.wait_ready(Duration::from_secs(3)).await);
        assert_eq!(Instant::now() - before, Duration::from_secs(3), "a starting cache is waited for");
        w.replace(Objects::new(), 5);
        assert!(c.wait_ready(Duration::from_secs(3)).await);
    }

    #[tokio::test]
    async fn too_old_versions_are_refused() {
        let w = fresh();
        let c = w.cache();
        w.replace(Objects::new(), 100);
        let err = c.register(Filter::default(), StartAt::After(5)).err().unwrap();
        assert_eq!(err.to_string(), "too old resource version: 5 (100)");
    }
}
