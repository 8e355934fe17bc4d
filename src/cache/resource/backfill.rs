//! Backfill: a watch from a version older than the cache's history is
//! answered from history fetched for it, not refused with a 410 the API
//! server would not give.
//!
//! A watchmux that has just started (or relisted, or loaded its cache from
//! disk) holds the history only since its own list; a client resuming from
//! ten seconds ago is one the API server would resume. So such a watch
//! waits, before it takes a seat, on its resource's *backfill*: one upstream
//! watch (JSON, watchmux's identity, the cache's own selectors) from the
//! oldest version its waiters asked for. Kube semantics: a watch from `r`
//! delivers the events with versions above `r`. The round reads it until a
//! version the cache's history bridges ([`ResourceCache::bridges`]): an
//! event's, or the bookmark the API server sends two seconds before the
//! watch's deadline (`timeoutSeconds=3`: about a second in); every event
//! read is kept, in order, in the round's [`Segment`]. Each waiter is then
//! given the segment's events after its own version, as its filter sees
//! them, and registers at the segment's end (`join`): the history's events
//! after it and live ones follow, with no gap and no duplicate (the same
//! contract as any watch from `join`).
//!
//! One round per resource at a time: a watcher whose version is not older
//! than the running round's start waits for it; an older one waits for the
//! next round, which starts when the running one ends, from the oldest
//! version among its waiters. The last segment is kept for [`KEEP_FOR`]
//! while the history still bridges its end, and serves at once a watcher
//! within it (one retrying after a 429, one a little late).
//!
//! The API server's 410 (its own window passed: compacted) reaches every
//! waiter as it sent it, message and all: only then does a client get 410,
//! or when the upstream cannot be reached at all (then the cache's own
//! 410, as without a backfill: a pass-through would fail, and the list the
//! client then makes is the cache's to serve, offline mode included).
//!
//! Bounds, each with what a client gets past it (docs/cache.md, "Watches
//! older than the history"):
//! - [`MAX_EVENTS`] events a round keeps: past it the round stops and its
//!   waiters pass through to the API server (exact).
//! - [`MAX_WAIT`] for a waiter, and for a round's collection: past it the
//!   watch passes through to the API server (exact).
//! - [`MAX_WAITERS`] watchers waiting per resource: past it, 429 with
//!   `Retry-After: 1`. Not 410, which makes client-go relist (the storm this
//!   is here to prevent); not a pass-through, which would put one upstream
//!   watch per client on the API server at the worst moment. client-go's
//!   reflector retries a watch refused with 429 from the same version after
//!   its backoff, without relisting, and by then the segment is kept.
//!
//! Events whose previous state the round never saw (an object's first
//! MODIFIED in the segment) are exact for a watcher whose selectors the
//! cache's scope implies (every upstream MODIFIED matched the scope before
//! and after) or that names only a namespace or an object (never changed by
//! an update); for any other watcher such an event is a transition the cache
//! cannot tell (ADDED, MODIFIED or DELETED to it), and that watcher passes
//! through, exact.
//!
//! The backfill never writes the cache: its segment is its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{ResourceCache, Scope};
use crate::cache::delivery::filter::Filter;
use crate::cache::delivery::watcher::Delivery;
use crate::cache::state::event::CacheEvent;
use crate::cache::state::object::{CachedObject, ObjectKey};
use crate::cache::upstream_wire::{Change, LineEnd, Opened, ReflectorError, StreamEnd, open_watch, watch_params};
use crate::encode::watch::EventType;
use crate::metrics as m;
use crate::selector::FieldSelector;
use crate::upstream::Upstream;

/// The most events one round keeps (its segment). About a window of a busy
/// resource's events; a segment is one resource's events, shared by every
/// waiter. Past it the round stops and its waiters pass through.
pub(crate) const MAX_EVENTS: usize = 10_000;

/// The longest a watcher waits for a round, and a round collects: a round's
/// first watch gets the API server's bookmark about a second in, so this is
/// room for a slow API server and one more watch. Past it the watcher
/// passes through.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(5);

/// Watchers that may wait on one resource's backfill at once; past it, 429.
pub(crate) const MAX_WAITERS: usize = 10_000;

/// How long the last round's events are kept for watchers that come after
/// it: a restarted watchmux's clients come back within seconds (client-go
/// retries a refused watch within its backoff's first steps), and up to
/// [`MAX_EVENTS`] objects are not held for a quiet resource's whole life.
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(60);

/// The round's upstream watch ends this soon: the API server's watch cache
/// sends a bookmark two seconds before a watch's deadline, so the round
/// learns its version within about a second even on a quiet resource.
const WATCH_TIMEOUT_SECONDS: u64 = 3;

/// One event of a segment.
struct Backfilled {
    event: Arc<CacheEvent>,
    /// Whether `event.prev` is the object's real previous state; when not,
    /// it stands in with the new state (see [`prev_insensitive`]).
    prev_known: bool,
}

/// What one round read: every upstream event after `from` up to `join`,
/// oldest first, and the cache's history bridges `join`.
pub(crate) struct Segment {
    from: u64,
    join: u64,
    events: Vec<Backfilled>,
}

/// How a round ended.
#[derive(Clone)]
enum Outcome {
    Joined(Arc<Segment>),
    /// The API server's 410 ERROR event, with its message.
    Expired(Arc<str>),
    /// The upstream could not be reached: a pass-through would fail alike.
    Unreachable,
    /// No segment: the waiters pass through (the label says why).
    Failed(&'static str),
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Self::Joined(_) => "joined",
            Self::Expired(_) => "expired",
            Self::Unreachable => "unreachable",
            Self::Failed(why) => why,
        }
    }
}

type OutcomeRx = watch::Receiver<Option<Outcome>>;
type OutcomeTx = watch::Sender<Option<Outcome>>;

/// One resource's backfill: the round running, the one queued behind it,
/// the last segment, and how many watchers wait.
#[derive(Default)]
pub(crate) struct Backfills {
    inner: Mutex<Rounds>,
}

#[derive(Default)]
struct Rounds {
    kept: Option<Arc<Segment>>,
    /// The round in flight: its start and its outcome.
    running: Option<(u64, OutcomeRx)>,
    /// The round for waiters older than the running one's start, from the
    /// oldest of them; it starts when the running one ends.
    queued: Option<(u64, OutcomeTx)>,
    waiting: usize,
}

/// What a watch older than the history gets.
pub(crate) enum Answer {
    /// Served: the segment's events after its version, as its filter sees
    /// them, then the cache from `join`.
    Served(Resumed),
    /// The API server's 410 for the same watch, its message as it sent it.
    Expired(String),
    /// [`MAX_WAITERS`] already wait: 429.
    TooMany,
    /// The upstream cannot be reached: the cache answers as it would without
    /// a backfill (its own 410, which sends the client to a list the cache
    /// serves), since a pass-through would fail alike.
    Unreachable,
    /// The API server answers it (a bound, a failure, a transition the
    /// segment cannot tell for this filter).
    PassThrough,
}

/// A watcher's part of a segment.
#[derive(Debug)]
pub(crate) struct Resumed {
    /// The version the watcher asked for.
    pub from: u64,
    pub deliveries: Vec<Delivery>,
    /// Where the watcher joins the cache: `StartAt::After(join)`.
    pub join: u64,
}

/// Decrements the waiting count however the wait ends (the client may go).
struct Waiting<'a>(&'a Backfills);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.inner.lock().waiting -= 1;
    }
}

/// Serves a watch from `rv`, which the cache's history does not bridge,
/// from a backfill round; counted by result.
pub(crate) async fn resume(cache: &Arc<ResourceCache>, upstream: &Arc<Upstream>, filter: &Filter, rv: u64) -> Answer {
    let answer = wait(cache, upstream, filter, rv).await;
    let result = match &answer {
        Answer::Served(_) => "served",
        Answer::Expired(_) => "expired",
        Answer::TooMany => "refused",
        Answer::Unreachable => "unreachable",
        Answer::PassThrough => "passthrough",
    };
    metrics::counter!(m::BACKFILL_WATCHERS, "resource" => cache.label().to_owned(), "result" => result).increment(1);
    answer
}

async fn wait(cache: &Arc<ResourceCache>, upstream: &Arc<Upstream>, filter: &Filter, rv: u64) -> Answer {
    let backfills = &cache.backfills;
    let deadline = Instant::now() + MAX_WAIT;
    let mut rx = {
        let mut guard = backfills.inner.lock();
        let rounds = &mut *guard;
        if let Some(kept) = rounds.kept.clone().filter(|k| k.from <= rv && rv < k.join) {
            if cache.bridges(kept.join) {
                drop(guard);
                return answer_from(&Outcome::Joined(kept), filter, &cache.scope, rv);
            }
            rounds.kept = None;
        }
        if rounds.waiting >= MAX_WAITERS {
            return Answer::TooMany;
        }
        let rx = match (&rounds.running, &mut rounds.queued) {
            (Some((from, rx)), _) if *from <= rv => rx.clone(),
            (Some(_), Some((from, tx))) => {
                *from = (*from).min(rv);
                tx.subscribe()
            }
            (Some(_), queued @ None) => {
                let (tx, rx) = watch::channel(None);
                *queued = Some((rv, tx));
                rx
            }
            (None, _) => {
                let (tx, rx) = watch::channel(None);
                rounds.running = Some((rv, rx.clone()));
                start_round(cache.clone(), upstream.clone(), rv, tx);
                rx
            }
        };
        rounds.waiting += 1;
        rx
    };
    let _waiting = Waiting(backfills);
    match tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await {
        Ok(Ok(outcome)) => {
            let outcome = outcome.clone().expect("waited for an outcome");
            answer_from(&outcome, filter, &cache.scope, rv)
        }
        // Timed out, or the round's task is gone.
        _ => Answer::PassThrough,
    }
}

/// A waiter's answer from its round's outcome.
fn answer_from(outcome: &Outcome, filter: &Filter, scope: &Scope, rv: u64) -> Answer {
    match outcome {
        // A round that joined the history below this version (one inside a
        // relist's gap, past which the round stopped short) does not cover it.
        Outcome::Joined(segment) if segment.join <= rv => Answer::PassThrough,
        Outcome::Joined(segment) => match segment.deliveries(filter, scope, rv) {
            Some(deliveries) => Answer::Served(Resumed { from: rv, deliveries, join: segment.join }),
            None => Answer::PassThrough,
        },
        Outcome::Expired(message) => Answer::Expired(message.to_string()),
        Outcome::Unreachable => Answer::Unreachable,
        Outcome::Failed(_) => Answer::PassThrough,
    }
}

/// Runs a round from `from` on a task of its own, then the round queued
/// behind it, if any.
fn start_round(cache: Arc<ResourceCache>, upstream: Arc<Upstream>, from: u64, tx: OutcomeTx) {
    tokio::spawn(async move {
        let (mut from, mut tx) = (from, tx);
        loop {
            let outcome = collect(&cache, &upstream, from).await;
            metrics::counter!(m::BACKFILLS, "resource" => cache.label().to_owned(), "result" => outcome.label())
                .increment(1);
            let next = {
                let mut rounds = cache.backfills.inner.lock();
                if let Outcome::Joined(segment) = &outcome {
                    rounds.kept = Some(segment.clone());
                    forget_later(&cache, segment);
                }
                rounds.running = None;
                let next = rounds.queued.take();
                if let Some((next_from, next_tx)) = &next {
                    rounds.running = Some((*next_from, next_tx.subscribe()));
                }
                next
            };
            // Sent after `running` moved on: a watcher arriving now either
            // finds the outcome here or the kept segment.
            let _ = tx.send(Some(outcome));
            let Some(next) = next else { return };
            (from, tx) = next;
        }
    });
}

/// Drops `segment` from the kept one after [`KEEP_FOR`], unless a later
/// round's replaced it.
fn forget_later(cache: &Arc<ResourceCache>, segment: &Arc<Segment>) {
    let (cache, segment) = (Arc::downgrade(cache), Arc::downgrade(segment));
    tokio::spawn(async move {
        tokio::time::sleep(KEEP_FOR).await;
        let Some(cache) = cache.upgrade() else { return };
        let mut rounds = cache.backfills.inner.lock();
        if rounds.kept.as_ref().is_some_and(|kept| std::ptr::eq(Arc::as_ptr(kept), segment.as_ptr())) {
            rounds.kept = None;
        }
    });
}

/// One round: upstream watches from `from` (each continuing from the last
/// version the one before got to, should the API server end one first)
/// until a version the history bridges, within [`MAX_WAIT`] and
/// [`MAX_EVENTS`].
async fn collect(cache: &ResourceCache, upstream: &Upstream, from: u64) -> Outcome {
    let deadline = Instant::now() + MAX_WAIT;
    let mut segment = SegmentBuilder::new(from);
    loop {
        let uri = cache.collection_uri(&watch_params(segment.reached, WATCH_TIMEOUT_SECONDS));
        let mut stream = match tokio::time::timeout_at(deadline, open_watch(upstream, uri)).await {
            Err(_) => return Outcome::Failed("timeout"),
            Ok(Opened::Streaming(stream)) => stream,
            Ok(Opened::Failed(ReflectorError::Request(_))) => return Outcome::Unreachable,
            // An HTTP 410 (not the watch cache's ERROR event): the API
            // server answers the waiters itself, exactly.
            Ok(_) => return Outcome::Failed("failed"),
        };
        loop {
            let change = match tokio::time::timeout_at(deadline, stream.next(&cache.shape, None)).await {
                Err(_) => return Outcome::Failed("timeout"),
                Ok(Ok(change)) => change,
                Ok(Err(StreamEnd::Closed)) => break,
                Ok(Err(StreamEnd::Line(LineEnd::Expired(message)))) => return Outcome::Expired(message.into()),
                Ok(Err(_)) => return Outcome::Failed("failed"),
            };
            segment.apply(change);
            if segment.events.len() > MAX_EVENTS {
                return Outcome::Failed("too_far");
            }
            if segment.reached > from && cache.bridges(segment.reached) {
                return Outcome::Joined(Arc::new(segment.finish()));
            }
        }
    }
}

/// A segment being read.
struct SegmentBuilder {
    from: u64,
    /// The version the events read so far cover (events and bookmarks).
    reached: u64,
    events: Vec<Backfilled>,
    /// Each object's latest state in the segment: the next event's `prev`.
    latest: HashMap<ObjectKey, Arc<CachedObject>>,
}

impl SegmentBuilder {
    fn new(from: u64) -> Self {
        Self { from, reached: from, events: Vec::new(), latest: HashMap::new() }
    }

    fn apply(&mut self, change: Change) {
        let (kind, object) = match change {
            Change::Bookmark(rv) => {
                self.reached = self.reached.max(rv);
                return;
            }
            // A replay of what the segment has (a continuing watch): as the
            // cache's writer, ignored.
            Change::Event(_, object, _) if object.rv <= self.reached => return,
            Change::Event(kind, object, _) => (kind, Arc::new(object)),
        };
        self.reached = object.rv;
        let (prev, prev_known) = match kind {
            EventType::Added => (None, true),
            EventType::Deleted => (self.latest.remove(&object.key), true),
            EventType::Modified => match self.latest.get(&object.key) {
                Some(prev) => (Some(prev.clone()), true),
                None => (Some(object.clone()), false),
            },
        };
        if kind != EventType::Deleted {
            self.latest.insert(object.key.clone(), object.clone());
        }
        self.events.push(Backfilled { event: Arc::new(CacheEvent::new(kind, object, prev)), prev_known });
    }

    fn finish(self) -> Segment {
        Segment { from: self.from, join: self.reached, events: self.events }
    }
}

impl Segment {
    /// The events after `rv` as a watcher with `filter` sees them; `None`
    /// when one of them is a transition the segment cannot tell for it.
    fn deliveries(&self, filter: &Filter, scope: &Scope, rv: u64) -> Option<Vec<Delivery>> {
        let insensitive = prev_insensitive(filter, scope);
        let first = self.events.partition_point(|e| e.event.rv <= rv);
        let mut deliveries = Vec::new();
        for backfilled in &self.events[first..] {
            let event = &backfilled.event;
            if !backfilled.prev_known && !insensitive && names_match(filter, &event.object) {
                return None;
            }
            deliveries.extend(Delivery::for_filter(event, filter));
        }
        Some(deliveries)
    }
}

/// Whether an update changes nothing `filter` looks at, given that the
/// upstream's MODIFIED events match the cache's scope before and after: its
/// label and field selectors (beyond the object's name and namespace, which
/// no update changes) follow from the scope.
fn prev_insensitive(filter: &Filter, scope: &Scope) -> bool {
    let mutable: FieldSelector = filter
        .fields
        .requirements()
        .iter()
        .filter(|r| r.field != "metadata.name" && r.field != "metadata.namespace")
        .cloned()
        .collect();
    scope.labels.implies(&filter.labels) && scope.fields.implies(&mutable)
}

/// Whether the object is in the watcher's namespace and has its name, if it
/// names them: an object outside them never was inside, whatever it was.
fn names_match(filter: &Filter, object: &CachedObject) -> bool {
    filter.namespace.as_ref().is_none_or(|ns| *ns == object.key.namespace)
        && filter.name.as_ref().is_none_or(|n| *n == object.key.name)
}

#[cfg(test)]
mod tests;
